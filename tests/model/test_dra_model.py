"""The DRA object model (``resource.k8s.io/v1``, issue 11): every field the placement reads, the v1 defaults,
the API server's limits as one InputError naming file, object and field (exit 2 in the CLI), pool gathering
as the structured allocator does it, the allocated-device state, a pod's claims resolved as the scheduler's
PreEnqueue/PreFilter read them, and the device inventory of instance types.

Expected values come from ``k8s.io/api/resource/v1/types.go`` (limits, field names), the v1 defaulting
(``pkg/apis/resource/v1/defaults.go``), ``pkg/apis/resource/validation`` and the allocator's
``GatherPools`` (``k8s.io/dynamic-resource-allocation/structured``), all at v1.36.3.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli.app import app
from model.dra import (
    DeviceID,
    ResourceSlice,
    allocated_state,
    gather_pools,
)
from model.errors import InputError
from model.manifests import load_manifests
from model.snapshot import load_snapshot, parse_objects
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog

ROOT = Path(__file__).resolve().parents[2]
KWOK_DRA = ROOT / "fixtures" / "catalogs" / "kwok-dra.yaml"
AWS_LIKE = ROOT / "fixtures" / "catalogs" / "aws-like.yaml"
DRIVER = "gpu.kwok.nodeplan.io"
UID_A = "0b7e8f4a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
UID_B = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"


# --- builders ------------------------------------------------------------------------------------------------

def device_class(name: str = DRIVER, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}], **spec}}


def claim(name: str, requests: list[dict[str, Any]], *, namespace: str = "ml", status: dict[str, Any] | None = None,
          owner: dict[str, Any] | None = None, **devices: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [owner]
    obj: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
                           "spec": {"devices": {"requests": requests, **devices}}}
    if status:
        obj["status"] = status
    return obj


def template(name: str, requests: list[dict[str, Any]], namespace: str = "ml") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"metadata": {"labels": {"a": "b"}}, "spec": {"devices": {"requests": requests}}}}


def gpu_request(name: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": DRIVER, **exactly}}


def gpu(name: str, model: str = "a100", **extra: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"model": {"string": model}, "numa": {"int": 0},
                                         "driverVersion": {"version": "1.4.2"}},
            "capacity": {"memory": {"value": "80Gi"}}, **extra}


def slice_(name: str, devices: list[dict[str, Any]] | None = None, *, pool: str = "node-1", generation: int = 1,
           count: int = 1, driver: str = DRIVER, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"driver": driver, "pool": {"name": pool, "generation": generation,
                                                       "resourceSliceCount": count}}
    if not {"allNodes", "nodeSelector", "perDeviceNodeSelection"} & spec.keys():
        body["nodeName"] = pool
    if devices is not None:
        body["devices"] = devices
    body.update(spec)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": body}


def pod(name: str, claims: list[dict[str, Any]], *, namespace: str = "ml", uid: str = "", node: str = "",
        statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
        "spec": {"resourceClaims": claims, "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10",
             "resources": {"requests": {"cpu": "1"}, "claims": [{"name": c["name"]} for c in claims]}}]},
        "status": {"phase": "Running" if node else "Pending"}}
    if node:
        obj["spec"]["nodeName"] = node
    if statuses is not None:
        obj["status"]["resourceClaimStatuses"] = statuses
    return obj


def write(tmp_path: Path, *objects: dict[str, Any]) -> Path:
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


# --- parsing -------------------------------------------------------------------------------------------------

def test_device_class_keeps_selectors_config_and_extended_resource_name() -> None:
    config = [{"opaque": {"driver": DRIVER, "parameters": {"sharing": "timeSlicing"}}}]
    snap = parse_objects([device_class(config=config, extendedResourceName="example.com/gpu")], source="t")
    (cls,) = snap.device_classes
    assert cls.name == DRIVER
    assert cls.selectors == (f'device.driver == "{DRIVER}"',)
    assert cls.config == ({"driver": DRIVER, "parameters": {"sharing": "timeSlicing"}},)
    assert cls.extended_resource_name == "example.com/gpu"


def test_exact_request_every_field_and_the_v1_defaults() -> None:
    requests = [
        gpu_request("plain"),  # defaults: ExactCount, count 1
        gpu_request("zero", count=0),  # count 0 is unset: defaulted to 1
        gpu_request("all", allocationMode="All"),
        gpu_request("full", allocationMode="ExactCount", count=3, adminAccess=True,
                    selectors=[{"cel": {"expression": 'device.attributes["gpu.kwok.nodeplan.io"].model == "a100"'}}],
                    tolerations=[{"key": "example.com/unhealthy", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 30}, {"key": "k", "value": "v"}],
                    capacity={"requests": {"memory": "12Gi", "example.com/slots": 2}}),
    ]
    snap = parse_objects([claim("c", requests)], source="t")
    spec = snap.resource_claims[0].spec
    plain, zero, every, full = (r.exactly for r in spec.requests)
    assert plain is not None and zero is not None and every is not None and full is not None
    assert (plain.allocation_mode, plain.count, plain.admin_access, plain.selectors) == ("ExactCount", 1, False, ())
    assert zero.count == 1
    assert (every.allocation_mode, every.count) == ("All", 0)
    assert full.count == 3 and full.admin_access
    assert full.selectors == ('device.attributes["gpu.kwok.nodeplan.io"].model == "a100"',)
    exists, equal = full.tolerations
    assert (exists.key, exists.operator, exists.effect, exists.toleration_seconds) == (
        "example.com/unhealthy", "Exists", "NoExecute", 30)
    assert (equal.operator, equal.value, equal.effect) == ("Equal", "v", "")  # operator defaults to Equal
    assert full.capacity_requests == (("example.com/slots", Fraction(2)), ("memory", Fraction(12 * 2**30)))
    assert full.capacity_request("memory") == 12 * 2**30
    assert [ref for req in spec.requests for ref, _ in req.alternatives()] == ["plain", "zero", "all", "full"]


def test_first_available_constraints_and_config_are_read() -> None:
    first = {"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": DRIVER, "selectors": [{"cel": {"expression": "true"}}]},
        {"name": "small", "deviceClassName": DRIVER, "count": 2}]}
    constraints = [{"requests": ["gpu", "nic"], "matchAttribute": "gpu.kwok.nodeplan.io/numa"},
                   {"distinctAttribute": "gpu.kwok.nodeplan.io/index"},
                   {"requests": ["gpu/small"], "matchAttribute": "gpu.kwok.nodeplan.io/numa"},
                   {"matchAttribute": "gpu.kwok.nodeplan.io/numa", "distinctAttribute": "gpu.kwok.nodeplan.io/index"}]
    config = [{"requests": ["gpu/big"], "opaque": {"driver": DRIVER, "parameters": {}}}]
    snap = parse_objects([claim("c", [first, gpu_request("nic")], constraints=constraints, config=config)],
                         source="t")
    spec = snap.resource_claims[0].spec
    request = spec.request("gpu")
    assert request is not None and request.exactly is None
    assert [(ref, r.count) for ref, r in request.alternatives()] == [("gpu/big", 1), ("gpu/small", 2)]
    assert request.first_available[0].selectors == ("true",)
    match, distinct, sub, both = spec.constraints
    assert (match.requests, match.match_attribute, match.distinct_attribute) == (
        ("gpu", "nic"), "gpu.kwok.nodeplan.io/numa", "")
    assert (distinct.requests, distinct.distinct_attribute) == ((), "gpu.kwok.nodeplan.io/index")
    assert sub.requests == ("gpu/small",)
    # the API server accepts both attributes on one constraint; the allocator then applies matchAttribute only
    assert (both.match_attribute, both.distinct_attribute) == ("gpu.kwok.nodeplan.io/numa", "")


def test_claim_status_allocation_and_reserved_for() -> None:
    status = {
        "allocation": {
            "devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": "node-7", "device": "gpu-0"},
                {"request": "gpu", "driver": DRIVER, "pool": "node-7", "device": "gpu-1", "adminAccess": True},
                {"request": "gpu", "driver": DRIVER, "pool": "node-7", "device": "gpu-2", "shareID": UID_A,
                 "consumedCapacity": {"memory": "15Gi"}}],
                "config": [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {}}}]},
            "nodeSelector": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-7"]}]}]},
            "allocationTimestamp": "2026-12-01T10:00:00Z"},
        "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": UID_B}],
    }
    snap = parse_objects([claim("c", [gpu_request(count=3)], status=status)], source="t")
    rc = snap.resource_claims[0]
    assert rc.key == "ml/c" and rc.allocated
    assert rc.allocation is not None and rc.allocation.node_name == "node-7"
    assert [r.device_id for r in rc.allocation.results] == [DeviceID(DRIVER, "node-7", f"gpu-{i}") for i in range(3)]
    exclusive, admin, share = rc.allocation.results
    assert not exclusive.admin_access and admin.admin_access
    assert share.share_id == UID_A and share.consumed_capacity == (("memory", Fraction(15 * 2**30)),)
    assert rc.allocation.node_terms()[0].matches({"kubernetes.io/hostname": "node-7"})
    assert [(r.resource, r.name, r.uid) for r in rc.reserved_for] == [("pods", "trainer-0", UID_B)]


def test_a_network_allocation_has_no_node_name() -> None:
    status = {"allocation": {"devices": {"results": []}, "nodeSelector": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]}}}
    rc = parse_objects([claim("c", [gpu_request()], status=status)], source="t").resource_claims[0]
    assert rc.allocation is not None and rc.allocation.node_name == ""
    assert rc.allocation.node_terms()[0].matches({"topology.kubernetes.io/zone": "a"})


def test_template_reads_spec_spec() -> None:
    snap = parse_objects([template("one-gpu", [gpu_request(count=2)])], source="t")
    (tpl,) = snap.resource_claim_templates
    assert tpl.key == "ml/one-gpu"
    assert tpl.spec.requests[0].exactly is not None and tpl.spec.requests[0].exactly.count == 2


def test_slice_devices_keep_the_api_shapes_for_cel() -> None:
    multi = {"name": "gpu-1", "allowMultipleAllocations": True,
             "attributes": {"model": {"string": "a100"}, "gpu.kwok.nodeplan.io/numa": {"int": 1},
                            "healthy": {"bool": True}, "driverVersion": {"version": "1.4.2-rc.1+build.7"}},
             "capacity": {"memory": {"value": "80Gi", "requestPolicy": {
                 "default": "10Gi", "validRange": {"min": "5Gi", "max": "80Gi", "step": "5Gi"}}}},
             "taints": [{"key": "example.com/unhealthy", "effect": "NoSchedule"}],
             "bindsToNode": True, "bindingConditions": ["Attached"], "bindingFailureConditions": ["Failed"]}
    raw = slice_("node-1-gpu", [gpu("gpu-0"), multi], ownerReferences=None)
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": UID_A}]
    (s,) = parse_objects([raw], source="t").resource_slices
    assert (s.name, s.driver, s.node_name, s.owner_node) == ("node-1-gpu", DRIVER, "node-1", "node-1")
    assert (s.pool.name, s.pool.generation, s.pool.resource_slice_count) == ("node-1", 1, 1)
    first, second = s.devices
    assert first.cel_input() == (DRIVER, {"model": {"string": "a100"}, "numa": {"int": 0},
                                          "driverVersion": {"version": "1.4.2"}},
                                 {"memory": {"value": "80Gi"}}, False)
    _, attributes, capacity, multi_alloc = second.cel_input()
    assert attributes["healthy"] == {"bool": True} and attributes["gpu.kwok.nodeplan.io/numa"] == {"int": 1}
    assert capacity == {"memory": {"value": "80Gi", "requestPolicy": {
        "default": "10Gi", "validRange": {"min": "5Gi", "max": "80Gi", "step": "5Gi"}}}}
    assert multi_alloc and second.capacity["memory"].amount == 80 * 2**30
    assert [(t.key, t.effect) for t in second.taints] == [("example.com/unhealthy", "NoSchedule")]
    assert second.binds_to_node and second.binding_conditions == ("Attached",)
    # constraint lookups: the full name, or the bare name when the domain is the device's driver
    assert second.attribute("gpu.kwok.nodeplan.io/numa") == 1 and first.attribute("gpu.kwok.nodeplan.io/numa") == 0
    assert first.attribute("gpu.kwok.nodeplan.io/model") == "a100" and first.attribute("other.io/model") is None


def test_valid_values_policy_and_counters() -> None:
    device = gpu("gpu-0", allowMultipleAllocations=True)
    device["capacity"] = {"memory": {"value": "80Gi", "requestPolicy": {"default": "20Gi",
                                                                        "validValues": ["10Gi", "20Gi", "80Gi"]}}}
    partition = gpu("gpu-0-1g", consumesCounters=[{"counterSet": "gpu-0-cs",
                                                  "counters": {"memory": {"value": "10Gi"}}}])
    snap = parse_objects([
        slice_("a", sharedCounters=[{"name": "gpu-0-cs", "counters": {"memory": {"value": "80Gi"},
                                                                      "slices": {"value": "7"}}}], count=3),
        slice_("b", [device], count=3), slice_("c", [partition], count=3)], source="t")
    counters, multi, part = snap.resource_slices
    assert counters.shared_counters[0].amounts() == {"memory": 80 * 2**30, "slices": 7}
    policy = multi.devices[0].capacity["memory"].request_policy
    assert policy is not None and policy.valid_values == ("10Gi", "20Gi", "80Gi") and policy.default == "20Gi"
    use = part.devices[0].consumes_counters[0]
    assert use.counter_set == "gpu-0-cs" and use.amounts() == {"memory": 10 * 2**30}


def test_slice_node_selection_modes() -> None:
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}
    per_device = slice_("nics", [{"name": "vf-0", "nodeName": "node-1"}, {"name": "vf-1", "allNodes": True},
                                 {"name": "vf-2", "nodeSelector": selector}],
                        pool="rack-1", perDeviceNodeSelection=True)
    snap = parse_objects([slice_("net", [{"name": "vf-9"}], pool="rack-2", nodeSelector=selector),
                          slice_("all", [{"name": "x"}], pool="everywhere", allNodes=True), per_device], source="t")
    net, everywhere, nics = snap.resource_slices
    zone_a, zone_b = {"topology.kubernetes.io/zone": "zone-a"}, {"topology.kubernetes.io/zone": "zone-b"}
    assert net.node_selector == selector and net.reachable_from("n", zone_a) and not net.reachable_from("n", zone_b)
    assert everywhere.all_nodes and everywhere.reachable_from("any", {})
    assert nics.per_device_node_selection
    assert [d.name for d in nics.devices_for("node-1", zone_b)] == ["vf-0", "vf-1"]
    assert [d.name for d in nics.devices_for("node-2", zone_a)] == ["vf-1", "vf-2"]


def test_pod_claim_refs_statuses_and_container_claims() -> None:
    raw = pod("p", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                    {"name": "shared", "resourceClaimName": "shared-gpu"}],
              statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-x7k2q"}])
    raw["spec"]["initContainers"] = [{"name": "init", "resources": {"claims": [{"name": "gpu", "request": "a"},
                                                                               {"name": "gpu", "request": "b"}]}}]
    p = parse_objects([raw], source="t").pods[0]
    assert [(r.name, r.claim_name, r.template_name) for r in p.resource_claims] == [
        ("gpu", "", "one-gpu"), ("shared", "shared-gpu", "")]
    assert p.claim_statuses == (("gpu", "p-gpu-x7k2q"),)
    assert [(c.container, c.name, c.request) for c in p.container_claims] == [
        ("init", "gpu", "a"), ("init", "gpu", "b"), ("main", "gpu", ""), ("main", "shared", "")]
    # the claim references are part of hashable class keys (solver/classes.py)
    twin = parse_objects([pod("q", raw["spec"]["resourceClaims"])], source="t").pods[0]
    assert hash(p.resource_claims) == hash(twin.resource_claims) and p.resource_claims == twin.resource_claims


def rich_objects() -> list[dict[str, Any]]:
    """Valid objects using every field the model reads (no adminAccess: that needs a labelled namespace), for
    the e2e check that the API server accepts what the model accepts."""
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}
    multi = {"name": "gpu-1", "allowMultipleAllocations": True,
             "attributes": {"model": {"string": "a100"}, "healthy": {"bool": True},
                            "driverVersion": {"version": "1.4.2-rc.1+build.7"}},
             "capacity": {"memory": {"value": "80Gi", "requestPolicy": {
                 "default": "10Gi", "validRange": {"min": "5Gi", "max": "80Gi", "step": "5Gi"}}},
                 "bandwidth": {"value": "100", "requestPolicy": {"default": "10", "validValues": ["10", "50", "100"]}}},
             "taints": [{"key": "example.com/unhealthy", "value": "yes", "effect": "NoSchedule"}],
             "bindsToNode": True, "bindingConditions": ["Attached"], "bindingFailureConditions": ["Failed"]}
    partition = gpu("gpu-0-1g", consumesCounters=[{"counterSet": "gpu-0-cs",
                                                  "counters": {"memory": {"value": "10Gi"}}}])
    return [
        device_class("rich.example.com", config=[{"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}],
                     extendedResourceName="example.com/gpu"),
        claim("rich", [
            gpu_request("plain"), gpu_request("all", allocationMode="All"),
            gpu_request("full", count=3, selectors=[{"cel": {"expression": "device.driver != \"x\""}}],
                        tolerations=[{"key": "example.com/unhealthy", "operator": "Exists", "effect": "NoExecute",
                                      "tolerationSeconds": 30}, {"key": "k", "value": "v", "effect": "None"}],
                        capacity={"requests": {"memory": "12Gi"}}),
            {"name": "alt", "firstAvailable": [
                {"name": "big", "deviceClassName": DRIVER, "selectors": [{"cel": {"expression": "true"}}]},
                {"name": "small", "deviceClassName": DRIVER, "count": 2, "capacity": {"requests": {"memory": "1Gi"}}},
                {"name": "every", "deviceClassName": DRIVER, "allocationMode": "All"}]}],
            constraints=[{"requests": ["plain", "alt/big"], "matchAttribute": "gpu.kwok.nodeplan.io/numa"},
                         {"distinctAttribute": "gpu.kwok.nodeplan.io/index"},
                         {"requests": ["full"], "matchAttribute": "gpu.kwok.nodeplan.io/numa",
                          "distinctAttribute": "gpu.kwok.nodeplan.io/index"}],
            config=[{"requests": ["alt/small"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}}]),
        template("rich", [gpu_request(count=2)]),
        slice_("rich-node-1", [gpu("gpu-0"), multi]),
        slice_("rich-counters", pool="rich-node-2", count=2,
               sharedCounters=[{"name": "gpu-0-cs",
                                "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}}]),
        slice_("rich-partitions", [partition], pool="rich-node-2", count=2),
        slice_("rich-net", [{"name": "vf-9"}], pool="rack-2", nodeSelector=selector),
        slice_("rich-all", [{"name": "x"}], pool="everywhere", allNodes=True),
        slice_("rich-per-device", [{"name": "vf-0", "nodeName": "node-1"}, {"name": "vf-1", "allNodes": True},
                                   {"name": "vf-2", "nodeSelector": selector}],
               pool="rack-1", perDeviceNodeSelection=True),
        pod("rich", [{"name": "gpu", "resourceClaimTemplateName": "rich"}, {"name": "s", "resourceClaimName": "rich"}]),
    ]


def test_rich_objects_parse() -> None:
    snap = parse_objects(rich_objects(), source="t")
    assert (len(snap.device_classes), len(snap.resource_claims), len(snap.resource_claim_templates),
            len(snap.resource_slices), len(snap.pods)) == (1, 1, 1, 6, 1)
    alt = snap.resource_claims[0].spec.request("alt")
    assert alt is not None and [r.allocation_mode for _, r in alt.alternatives()] == ["ExactCount", "ExactCount", "All"]


# --- bad input -------------------------------------------------------------------------------------------------

REQS = "spec.devices.requests"
DEV = "spec.devices[0]"
BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "33 requests": (claim("c", [gpu_request(f"r{i}") for i in range(33)]), "ResourceClaim ml/c",
                    "field spec.devices.requests: at most 32 requests are allowed, got 33"),
    "exactly and firstAvailable": (
        claim("c", [{**gpu_request(), "firstAvailable": [{"name": "a", "deviceClassName": DRIVER}]}]),
        "ResourceClaim ml/c", f"field {REQS}[0]: exactly one of `exactly` or `firstAvailable` is required, but both"),
    "neither exactly nor firstAvailable": (claim("c", [{"name": "gpu"}]), "ResourceClaim ml/c",
                                           f"field {REQS}[0]: exactly one of `exactly` or `firstAvailable`"),
    "negative count": (claim("c", [gpu_request(count=-1)]), "ResourceClaim ml/c",
                       f"field {REQS}[0].exactly.count: must be greater than zero"),
    "count with All": (claim("c", [gpu_request(allocationMode="All", count=2)]), "ResourceClaim ml/c",
                       f"field {REQS}[0].exactly.count: must not be specified when allocationMode is 'All'"),
    "unknown allocationMode": (claim("c", [gpu_request(allocationMode="Some")]), "ResourceClaim ml/c",
                               f"field {REQS}[0].exactly.allocationMode: unknown allocationMode 'Some'"),
    "request name not a DNS label": (claim("c", [gpu_request("GPU")]), "ResourceClaim ml/c",
                                     f"field {REQS}[0].name: request name 'GPU' must be a DNS label"),
    "duplicate request": (claim("c", [gpu_request(), gpu_request()]), "ResourceClaim ml/c",
                          f"field {REQS}[1].name: duplicate request name 'gpu'"),
    "missing class": (claim("c", [{"name": "gpu", "exactly": {}}]), "ResourceClaim ml/c",
                      f"field {REQS}[0].exactly.deviceClassName: deviceClassName is required"),
    "selector without cel": (claim("c", [gpu_request(selectors=[{}])]), "ResourceClaim ml/c",
                             f"field {REQS}[0].exactly.selectors[0].cel: a selector needs cel.expression"),
    "9 firstAvailable": (claim("c", [{"name": "g", "firstAvailable": [
        {"name": f"s{i}", "deviceClassName": DRIVER} for i in range(9)]}]), "ResourceClaim ml/c",
        f"field {REQS}[0].firstAvailable: at most 8 firstAvailable entries are allowed, got 9"),
    "constraint on unknown request": (
        claim("c", [gpu_request()], constraints=[{"requests": ["nic"], "matchAttribute": "a.io/numa"}]),
        "ResourceClaim ml/c", "field spec.devices.constraints[0].requests[0]: 'nic' must be the name of a request"),
    "constraint without attribute": (
        claim("c", [gpu_request()], constraints=[{"requests": ["gpu"]}]),
        "ResourceClaim ml/c", "field spec.devices.constraints[0]: one of matchAttribute or distinctAttribute"),
    "constraint attribute without domain": (
        claim("c", [gpu_request()], constraints=[{"matchAttribute": "numa"}]), "ResourceClaim ml/c",
        "field spec.devices.constraints[0].matchAttribute: 'numa' must be a domain and a name separated by '/'"),
    "result for unknown request": (
        claim("c", [gpu_request()], status={"allocation": {"devices": {"results": [
            {"request": "nic", "driver": DRIVER, "pool": "p", "device": "d"}]}}}), "ResourceClaim ml/c",
        "field status.allocation.devices.results[0].request: 'nic' must be the name of a request"),
    "template request": (template("t", [gpu_request(count="two")]), "ResourceClaimTemplate ml/t",
                         "field spec.spec.devices.requests[0].exactly.count: expected an integer, got 'two'"),
    "bad extendedResourceName": (device_class(extendedResourceName="kubernetes.io/gpu"), f"DeviceClass {DRIVER}",
                                 "field spec.extendedResourceName: extendedResourceName 'kubernetes.io/gpu' must be"),
    "129 devices": (slice_("s", [{"name": f"d{i}"} for i in range(129)]), "ResourceSlice s",
                    "field spec.devices: at most 128 devices are allowed, got 129"),
    "65 devices with taints": (
        slice_("s", [{"name": f"d{i}", "taints": [{"key": "k", "effect": "NoSchedule"}]} for i in range(65)]),
        "ResourceSlice s", "field spec.devices: at most 64 devices (with taints or consumed counters) are allowed"),
    "33 attributes and capacities": (
        slice_("s", [{"name": "d", "attributes": {f"a{i}": {"int": i} for i in range(20)},
                      "capacity": {f"c{i}": {"value": "1"} for i in range(13)}}]), "ResourceSlice s",
        f"field {DEV}: the total number of attributes and capacities must not exceed 32"),
    "duplicate device": (slice_("s", [gpu("gpu-0"), gpu("gpu-0")]), "ResourceSlice s",
                         "field spec.devices[1].name: duplicate device name 'gpu-0'"),
    "device name not a DNS label": (slice_("s", [{"name": "GPU_0"}]), "ResourceSlice s",
                                    f"field {DEV}.name: device name 'GPU_0' must be a DNS label"),
    "attribute with two values": (slice_("s", [{"name": "d", "attributes": {"m": {"string": "a", "int": 1}}}]),
                                  "ResourceSlice s", f"field {DEV}.attributes.m: exactly one of int, bool, string"),
    "attribute not semver": (slice_("s", [{"name": "d", "attributes": {"v": {"version": "1.2"}}}]),
                             "ResourceSlice s", f"field {DEV}.attributes.v.version: '1.2' must be a semantic version"),
    "list attribute": (slice_("s", [{"name": "d", "attributes": {"v": {"ints": [1]}}}]), "ResourceSlice s",
                       f"field {DEV}.attributes.v: list-typed attribute 'ints' needs the alpha"),
    "bad attribute name": (slice_("s", [{"name": "d", "attributes": {"gpu-model": {"string": "a"}}}]),
                           "ResourceSlice s", f"field {DEV}.attributes.gpu-model: name 'gpu-model' must be a C ident"),
    "policy without multiple allocations": (
        slice_("s", [{"name": "d", "capacity": {"memory": {"value": "8Gi", "requestPolicy": {"default": "1Gi"}}}}]),
        "ResourceSlice s",
        f"field {DEV}.capacity.memory.requestPolicy: a requestPolicy needs allowMultipleAllocations"),
    "default off the step grid": (
        slice_("s", [{"name": "d", "allowMultipleAllocations": True, "capacity": {"memory": {
            "value": "80Gi", "requestPolicy": {"default": "7Gi", "validRange": {"min": "5Gi", "step": "5Gi"}}}}}]),
        "ResourceSlice s", f"field {DEV}.capacity.memory.requestPolicy.validRange.step: default and max must be"),
    "bad quantity": (slice_("s", [{"name": "d", "capacity": {"memory": {"value": "lots"}}}]), "ResourceSlice s",
                     f"field {DEV}.capacity.memory.value: invalid quantity 'lots'"),
    "no node selection": (
        {**slice_("s", []), "spec": {"driver": DRIVER, "pool": {"name": "p", "resourceSliceCount": 1}}},
        "ResourceSlice s", "field spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection"),
    "two node selections": (slice_("s", [], allNodes=True, nodeName="n"), "ResourceSlice s",
                            "field spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is "
                            "required, but nodeName, allNodes are set"),
    "allNodes false": (slice_("s", [], allNodes=False, nodeName="n"), "ResourceSlice s",
                       "field spec.allNodes: must be either unset or set to true"),
    "devices and counters": (slice_("s", [gpu("g")], sharedCounters=[{"name": "c", "counters": {"x": {"value": 1}}}]),
                             "ResourceSlice s", "field spec: only one of sharedCounters or devices is allowed"),
    "zero slice count": (slice_("s", [], count=0), "ResourceSlice s",
                         "field spec.pool.resourceSliceCount: must be greater than zero"),
    "driver not a DNS subdomain": (slice_("s", [], driver="GPU_driver"), "ResourceSlice s",
                                   "field spec.driver: driver 'GPU_driver' must be a DNS subdomain"),
    "device node field without per-device selection": (slice_("s", [{"name": "d", "nodeName": "n"}]),
                                                      "ResourceSlice s", f"field {DEV}: nodeName, nodeSelector and "
                                                      "allNodes can only be set on a device"),
    "pod claim with two sources": (
        pod("p", [{"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]), "Pod ml/p",
        "field spec.resourceClaims[0]: exactly one of resourceClaimName or resourceClaimTemplateName is required"),
    "pod claim without source": (pod("p", [{"name": "gpu"}]), "Pod ml/p",
                                 "field spec.resourceClaims[0]: exactly one of resourceClaimName or"),
    "duplicate pod claim": (pod("p", [{"name": "gpu", "resourceClaimName": "a"},
                                      {"name": "gpu", "resourceClaimName": "b"}]),
                            "Pod ml/p", "field spec.resourceClaims[1].name: duplicate claim name 'gpu'"),
}


def _container_claim_unknown() -> dict[str, Any]:
    raw = pod("p", [{"name": "gpu", "resourceClaimName": "a"}])
    raw["spec"]["containers"][0]["resources"]["claims"] = [{"name": "nic"}]
    return raw


BAD["container claim not in the pod"] = (_container_claim_unknown(), "Pod ml/p",
                                         "field spec.containers[0].resources.claims[0].name: claim 'nic' must be one "
                                         "of the pod's spec.resourceClaims")


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_dra_object_names_file_object_and_field(case: str, tmp_path: Path) -> None:
    raw, obj, expected = BAD[case]
    path = write(tmp_path, raw)
    with pytest.raises(InputError) as err:
        load_snapshot(path)
    text = str(err.value)
    assert text.startswith(f"{path}: {obj}: {expected}"), text
    assert "\n" not in text


@pytest.mark.parametrize("case", ["negative count", "duplicate device", "attribute not semver",
                                  "pod claim with two sources", "33 requests"])
def test_solve_exits_2_with_one_line(case: str, tmp_path: Path) -> None:
    raw, obj, expected = BAD[case]
    path = write(tmp_path, raw)
    result = CliRunner().invoke(app, ["solve", str(path)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{path}: {obj}: {expected}" in lines[0], lines[0]


def test_two_dra_objects_with_one_name_are_bad_input(tmp_path: Path) -> None:
    path = write(tmp_path, device_class(), slice_("s", [gpu("g")]), device_class())
    with pytest.raises(InputError) as err:
        load_snapshot(path)
    assert str(err.value).startswith(f"{path}: DeviceClass {DRIVER}: defined twice, in document 1 and document 3")
    # the same name in two namespaces is two claims
    snap = parse_objects([claim("c", [gpu_request()]), claim("c", [gpu_request()], namespace="other")], source="t")
    assert [c.key for c in snap.resource_claims] == ["ml/c", "other/c"]


def test_dra_kinds_are_typed_not_raw() -> None:
    snap = parse_objects([device_class(), claim("c", [gpu_request()]), template("t", [gpu_request()]),
                          slice_("s", [gpu("g")])], source="t")
    assert snap.raw_objects == () and snap.warnings == ()
    assert (len(snap.device_classes), len(snap.resource_claims), len(snap.resource_claim_templates),
            len(snap.resource_slices)) == (1, 1, 1, 1)


# --- pools and allocated state -----------------------------------------------------------------------------

def _slices(*raw: dict[str, Any]) -> list[ResourceSlice]:
    return list(parse_objects(list(raw), source="t").resource_slices)


def test_highest_generation_wins_and_completeness_counts_its_slices() -> None:
    pools = gather_pools(_slices(
        slice_("old", [gpu("gpu-9")], pool="node-1", generation=1),
        slice_("new-b", [gpu("gpu-1")], pool="node-1", generation=2, count=3),
        slice_("new-a", [gpu("gpu-0")], pool="node-1", generation=2, count=3)))
    (pool,) = pools
    assert pool.generation == 2 and [s.name for s in pool.slices] == ["new-a", "new-b"]
    assert not pool.complete and not pool.usable  # 2 of 3 slices of generation 2
    assert [d.name for d in pool.devices] == ["gpu-0", "gpu-1"]  # slices by name, devices as listed
    complete = gather_pools(_slices(slice_("a", [gpu("gpu-0")], count=2), slice_("b", [gpu("gpu-1")], count=2)))
    assert complete[0].complete and complete[0].usable


def test_duplicate_names_and_missing_counters_make_a_pool_invalid() -> None:
    dup = gather_pools(_slices(slice_("a", [gpu("gpu-0")], count=2), slice_("b", [gpu("gpu-0")], count=2)))
    assert dup[0].complete and dup[0].invalid == "duplicate device name gpu-0" and not dup[0].usable
    part = gpu("p", consumesCounters=[{"counterSet": "cs", "counters": {"memory": {"value": "1Gi"}}}])
    missing = gather_pools(_slices(slice_("a", [part])))
    assert missing[0].invalid == "counter set cs not found"
    sets = [{"name": "cs", "counters": {"slices": {"value": "7"}}}]
    wrong = gather_pools(_slices(slice_("a", [part], count=2), slice_("b", sharedCounters=sets, count=2)))
    assert wrong[0].invalid == "counter memory not found in counter set cs"
    twice = gather_pools(_slices(slice_("a", sharedCounters=sets, count=2), slice_("b", sharedCounters=sets, count=2)))
    assert twice[0].invalid == "duplicate counter set name cs"


def test_pools_sorted_by_driver_then_name_and_filtered_by_node() -> None:
    pools = gather_pools(_slices(slice_("z", [gpu("g")], pool="node-2"), slice_("y", [gpu("g")], pool="node-1"),
                                 slice_("x", [{"name": "n"}], pool="node-1", driver="a.example.com"),
                                 slice_("w", [{"name": "v"}], pool="fabric", allNodes=True)))
    assert [(p.driver, p.name) for p in pools] == [("a.example.com", "node-1"), (DRIVER, "fabric"),
                                                   (DRIVER, "node-1"), (DRIVER, "node-2")]
    assert [[d.name for d in p.devices_for("node-1", {})] for p in pools] == [["n"], ["v"], ["g"], []]


def test_allocated_state_skips_admin_access_and_sums_shares() -> None:
    def allocated(name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
        return claim(name, [gpu_request(count=3)], status={"allocation": {"devices": {"results": results}}})

    r = {"request": "gpu", "driver": DRIVER, "pool": "node-1"}
    claims = parse_objects([
        allocated("a", [{**r, "device": "gpu-0"}, {**r, "device": "gpu-1", "adminAccess": True}]),
        allocated("b", [{**r, "device": "gpu-2", "shareID": UID_A, "consumedCapacity": {"memory": "10Gi"}}]),
        allocated("c", [{**r, "device": "gpu-2", "shareID": UID_B, "consumedCapacity": {"memory": "15Gi"}}]),
        claim("d", [gpu_request()])], source="t").resource_claims
    state = allocated_state(claims)
    assert state.devices == {DeviceID(DRIVER, "node-1", "gpu-0")}
    assert state.in_use(DeviceID(DRIVER, "node-1", "gpu-0")) and not state.in_use(DeviceID(DRIVER, "node-1", "gpu-1"))
    shared = DeviceID(DRIVER, "node-1", "gpu-2")
    assert state.shares == {(shared, UID_A), (shared, UID_B)}
    assert state.consumed == {shared: {"memory": 25 * 2**30}}
    assert state.allocated(shared) and not state.in_use(shared)


def test_allocated_partitions_consume_their_counters_once() -> None:
    mig = next(it for it in load_catalog(KWOK_DRA) if it.name == "g-16x-a100x1-mig")
    (pool,) = gather_pools(mig.node_resource_slices("node-1"))
    r = {"request": "gpu", "driver": DRIVER, "pool": "node-1"}
    claims = parse_objects([
        claim("a", [gpu_request()], status={"allocation": {"devices": {"results": [
            {**r, "device": "gpu-0-3g-40gb-0"}, {**r, "device": "gpu-0-1g-10gb-0"}]}}}),
        claim("b", [gpu_request()], status={"allocation": {"devices": {"results": [
            {**r, "device": "gpu-0-1g-10gb-1", "adminAccess": True}]}}})], source="t").resource_claims
    used = allocated_state(claims).counters_used(pool)
    assert used == {"gpu-0-counters": {"memory": 50 * 2**30, "compute": 4}}


# --- claim resolution --------------------------------------------------------------------------------------

def _owner(pod_name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid, "controller": True}


SHARED = {"name": "s", "resourceClaimName": "shared"}


def test_claims_resolve_as_the_scheduler_reads_them() -> None:
    alloc = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}]}, "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "a", "uid": UID_A}]}
    objects = [
        device_class(), template("one-gpu", [gpu_request()]),
        claim("shared", [gpu_request()]),
        claim("a-gpu-1", [gpu_request()], owner=_owner("a", UID_A), status=alloc),
        claim("b-gpu-1", [gpu_request()], owner=_owner("someone-else", "5f4e3d2c-1b0a-4f9e-8d7c-6b5a4f3e2d1c")),
        pod("a", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}, SHARED],
            uid=UID_A, statuses=[{"name": "gpu", "resourceClaimName": "a-gpu-1"}]),
        pod("b", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}, SHARED],
            uid=UID_B, statuses=[{"name": "gpu", "resourceClaimName": "b-gpu-1"}]),
        pod("c", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            statuses=[{"name": "gpu", "resourceClaimName": "c-gpu-gone"}]),
        pod("d", [{"name": "gpu", "resourceClaimTemplateName": "missing"}, {"name": "x", "resourceClaimName": "nope"}]),
        pod("running", [{"name": "s", "resourceClaimName": "shared"}], node="node-9"),
    ]
    snap = parse_objects(objects, source="t")
    index = snap.claim_index()
    by_name = {p.name: index.resolve(p) for p in snap.pods}
    generated, shared = by_name["a"]
    assert (generated.source, generated.claim_key, generated.allocated, generated.problem) == (
        "generated", "ml/a-gpu-1", True, "")
    assert generated.claim is not None and generated.claim.allocation is not None
    assert generated.claim.allocation.node_name == "node-1" and generated.consumers == ("ml/a",)
    # a named claim: the same ResourceClaim for every pod naming it; running pods are not pending consumers
    assert (shared.source, shared.claim_key, shared.allocated) == ("named", "ml/shared", False)
    assert shared.consumers == ("ml/a", "ml/b") and shared.shared
    assert shared.spec is not None and shared.spec.requests[0].name == "gpu"
    assert by_name["b"][0].problem == "resourceclaim ml/b-gpu-1 was not created for pod ml/b"
    # the generated claim named in the status is gone: the template's spec stands in for it
    (fallback,) = by_name["c"]
    assert (fallback.source, fallback.claim_key, fallback.problem, fallback.consumers) == (
        "template", "", "", ("ml/c",))
    assert fallback.spec == snap.resource_claim_templates[0].spec and not fallback.allocated
    missing_template, missing_claim = by_name["d"]
    assert missing_template.problem == "resourceclaimtemplate ml/missing not found" and missing_template.spec is None
    assert missing_claim.problem == "resourceclaim ml/nope not found"
    assert index.missing_classes(snap.resource_claim_templates[0].spec) == ()


def test_a_full_reserved_for_is_in_use_for_other_pods() -> None:
    reserved = [{"resource": "pods", "name": f"p{i}", "uid": f"00000000-0000-4000-8000-{i:012d}"} for i in range(256)]
    status = {"allocation": {"devices": {"results": []}}, "reservedFor": reserved}
    snap = parse_objects([claim("busy", [gpu_request()], status=status),
                          pod("p7", [{"name": "g", "resourceClaimName": "busy"}],
                              uid="00000000-0000-4000-8000-000000000007"),
                          pod("new", [{"name": "g", "resourceClaimName": "busy"}])], source="t")
    index = snap.claim_index()
    already, newcomer = (index.resolve(p)[0] for p in snap.pods)
    assert already.problem == ""
    assert newcomer.problem == "resourceclaim ml/busy in use (reservedFor has 256 consumers)"


def test_missing_device_classes_are_named() -> None:
    snap = parse_objects([claim("c", [gpu_request(), {"name": "x", "firstAvailable": [
        {"name": "a", "deviceClassName": "nic.example.com"}, {"name": "b", "deviceClassName": DRIVER}]}])],
        source="t")
    assert snap.claim_index().missing_classes(snap.resource_claims[0].spec) == (DRIVER, "nic.example.com")


def test_manifest_fixtures_resolve() -> None:
    snap = load_manifests(ROOT / "fixtures" / "manifests" / "dra")
    assert snap.warnings == ()
    assert [c.name for c in snap.device_classes] == [DRIVER] and [n.name for n in snap.nodepools] == ["gpu"]
    assert sorted(t.key for t in snap.resource_claim_templates) == ["ml/one-gpu", "ml/one-h100"]
    index = snap.claim_index()
    resolved = {p.name: index.resolve(p)[0] for p in snap.pods}
    assert set(resolved) == {"trainer-0", "trainer-1", "inference-0", "inference-1"}
    assert all(r.problem == "" and r.spec is not None and not index.missing_classes(r.spec) for r in resolved.values())
    assert resolved["trainer-0"].source == "template" and resolved["inference-0"].claim_key == "ml/shared-gpu"
    assert resolved["inference-0"].consumers == ("ml/inference-0", "ml/inference-1")


# --- device inventories ------------------------------------------------------------------------------------

def test_kwok_dra_catalog_covers_the_issue() -> None:
    catalog = load_catalog(KWOK_DRA)
    counts, models, zones, capacity_types = set(), set(), set(), set()
    partitionable = consumable = False
    for it in catalog:
        assert it.resource_slices, it.name
        devices = [d for t in it.resource_slices for d in t.devices]
        for d in devices:
            assert d.driver == DRIVER
            kinds = {k: next(iter(v)) for k, v in d.attributes.items()}
            assert (kinds["model"], kinds["driverVersion"], kinds["numa"]) == ("string", "version", "int"), it.name
            assert d.capacity["memory"].amount > 0
            models.add(d.attribute("model"))
        whole = [d for d in devices if d.attribute("type") == "gpu"]
        counts.add(len(whole))
        partitionable |= (any(t.shared_counters for t in it.resource_slices)
                          and any(d.consumes_counters for d in devices))
        consumable |= any(d.allow_multiple_allocations and d.capacity["memory"].request_policy for d in devices)
        zones |= {o.zone for o in it.offerings}
        capacity_types |= {o.capacity_type for o in it.offerings}
        # priced like the KWOK catalog: spot is 0.7 x on-demand in every zone
        for o in it.offerings:
            if o.capacity_type == "spot":
                od = next(x for x in it.offerings if x.zone == o.zone and x.capacity_type == "on-demand")
                assert o.price == pytest.approx(0.7 * od.price, abs=1e-6)
    assert {1, 2, 4, 8} <= counts and len(models) >= 2 and partitionable and consumable
    assert len(zones) >= 2 and capacity_types == {"spot", "on-demand"}


def test_inventory_becomes_the_slices_a_node_publishes() -> None:
    mig = next(it for it in load_catalog(KWOK_DRA) if it.name == "g-16x-a100x1-mig")
    slices = mig.node_resource_slices("node-7")
    assert [s.name for s in slices] == [f"node-7-{DRIVER}-0", f"node-7-{DRIVER}-1"]
    assert {(s.node_name, s.pool.name, s.pool.generation, s.pool.resource_slice_count) for s in slices} == {
        ("node-7", "node-7", 1, 2)}
    (pool,) = gather_pools(slices)
    assert pool.usable and pool.counter_sets()["gpu-0-counters"].amounts()["compute"] == 7
    # the API object round-trips through the parser
    owner = {"apiVersion": "v1", "kind": "Node", "name": "node-7", "uid": UID_A}
    objects = [s.api(owner=owner) for s in slices]
    assert all(o["spec"]["nodeName"] == "node-7" and o["metadata"]["ownerReferences"] == [owner] for o in objects)
    assert tuple(parse_objects(objects, source="t").resource_slices) == slices
    one = next(it for it in load_catalog(KWOK_DRA) if it.name == "g-8x-a100x1")
    (single,) = one.node_resource_slices("n")
    assert single.name == f"n-{DRIVER}" and single.pool.resource_slice_count == 1


def test_pool_suffix_makes_a_separate_pool(tmp_path: Path) -> None:
    path = _catalog(tmp_path, [{"driver": DRIVER, "devices": [gpu("gpu-0")]},
                               {"driver": DRIVER, "pool": {"name": "nics"}, "devices": [gpu("gpu-0")]}])
    (it,) = load_catalog(path)
    slices = it.node_resource_slices("n")
    assert [(s.pool.name, s.pool.resource_slice_count) for s in slices] == [("n", 1), ("n/nics", 1)]
    assert all(p.usable for p in gather_pools(slices))


def _catalog(tmp_path: Path, resource_slices: list[dict[str, Any]]) -> Path:
    doc = {"apiVersion": "nodeplan.io/v1alpha1", "kind": "InstanceCatalog", "metadata": {"name": "t"},
           "instanceTypes": [{"name": "g1", "capacity": {"cpu": "4", "memory": "16Gi"},
                              "offerings": [{"zone": "a", "capacityType": "on-demand", "price": 1.0}],
                              "resourceSlices": resource_slices}]}
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(("slices", "expected"), [
    ([{"driver": DRIVER, "nodeName": "n", "devices": [gpu("g")]}],
     "field resourceSlices[0].nodeName: set by the node that publishes the slice"),
    ([{"driver": DRIVER}], "field resourceSlices[0]: exactly one of devices or sharedCounters is required"),
    ([{"driver": DRIVER, "devices": [gpu("g")]}, {"driver": DRIVER, "devices": [gpu("g")]}],
     "field resourceSlices[1].devices[0].name: duplicate device name in the pool 'g'"),
    ([{"driver": DRIVER, "devices": [gpu("p", consumesCounters=[{"counterSet": "cs", "counters": {
        "memory": {"value": "1Gi"}}}])]}],
     "field resourceSlices[0].devices[0].consumesCounters[0].counterSet: counter set 'cs' is not in the pool's"),
    ([{"driver": DRIVER, "sharedCounters": [{"name": "cs", "counters": {"memory": {"value": "8Gi"}}}]},
      {"driver": DRIVER, "devices": [gpu("p", consumesCounters=[{"counterSet": "cs", "counters": {
          "slices": {"value": "1"}}}])]}],
     "field resourceSlices[1].devices[0].consumesCounters[0].counters.slices: counter 'slices' is not in"),
    ([{"driver": DRIVER, "devices": [{"name": "g", "attributes": {"model": {"string": "x" * 65}}}]}],
     "field resourceSlices[0].devices[0].attributes.model.string: must be at most 64 characters"),
])
def test_bad_inventory_names_file_type_and_field(tmp_path: Path, slices: list[dict[str, Any]], expected: str) -> None:
    path = _catalog(tmp_path, slices)
    with pytest.raises(InputError) as err:
        load_catalog(path)
    assert str(err.value).startswith(f"{path}: instance type g1: {expected}"), str(err.value)


def test_default_kwok_catalog_has_no_devices_and_aws_gpus_match_their_labels() -> None:
    kwok = kwok_catalog()
    assert len(kwok) == 144 and all(it.resource_slices == () for it in kwok)
    gpus = {it.name: it for it in load_catalog(AWS_LIKE) if it.resource_slices}
    assert sorted(gpus) == sorted(f"g5.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge",
                                                     "16xlarge", "24xlarge", "48xlarge"))
    for it in gpus.values():
        devices = [d for t in it.resource_slices for d in t.devices]
        assert len(devices) == int(it.labels["karpenter.k8s.aws/instance-gpu-count"]) == it.capacity["nvidia.com/gpu"]
        assert {(d.driver, d.attribute("productName"), d.attribute("architecture")) for d in devices} == {
            ("gpu.nvidia.com", "NVIDIA A10G", "Ampere")}
        assert {d.capacity["memory"].value for d in devices} == {"23028Mi"}
        assert all(p.usable for p in gather_pools(it.node_resource_slices("ip-10-0-0-1.ec2.internal")))


def test_inventory_templates_are_independent_of_node_names() -> None:
    it = next(it for it in load_catalog(KWOK_DRA) if it.name == "g-8x-a100x1-shared")
    a, b = it.node_resource_slices("a")[0], it.node_resource_slices("b")[0]
    assert a.devices == b.devices and (a.pool.name, b.pool.name) == ("a", "b")
    policy = a.devices[0].capacity["memory"].request_policy
    assert policy is not None and policy.valid_range == ("5Gi", None, "5Gi") and policy.default == "10Gi"
    assert copy.deepcopy(a.api())["spec"]["devices"][0]["allowMultipleAllocations"] is True
