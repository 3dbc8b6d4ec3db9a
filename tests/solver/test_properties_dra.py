"""Property test for DRA claims on random clusters: whatever mix of claims pods carry, the plan passes the
independent verifier (which allocates every claim with the scheduler's allocator) and accounts for every
pending pod exactly once.

Drawn: per-pod claims from templates (ExactCount 1–4, All, adminAccess, firstAvailable with two
alternatives, capacity requests), named claims shared by 1–3 pods, device classes with and without model
selectors, a missing template now and then; existing GPU nodes that published their slices, some of whose
devices are held by allocated claims; the kwok-dra catalog (dedicated, partitionable and shared devices).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bench.fragmented import CREATED, node_object
from bench.workloads import nodepool, pod
from providers.catalog_file import load_catalog
from solver.provision import SolveOptions, solve
from solver.verify import violations
from tests.conftest import snapshot_of

ROOT = Path(__file__).resolve().parents[2]
CATALOG = load_catalog(ROOT / "fixtures/catalogs/kwok-dra.yaml")
TYPES = {it.name: it for it in CATALOG}
DRIVER = "gpu.kwok.nodeplan.io"
MODELS = ("t4", "a100", "h100", None)


def _selectors(model: str | None) -> list[dict[str, Any]]:
    if model is None:
        return []
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{model}"'}}]


@st.composite
def exact_request(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": "gpu", "selectors": _selectors(draw(st.sampled_from(MODELS)))}
    mode = draw(st.sampled_from(["ExactCount", "All", "ExactCount", "admin", "capacity", "ExactCount"]))
    event(f"request {mode}")
    if mode == "All":
        body["allocationMode"] = "All"
    else:
        body["count"] = draw(st.integers(1, 4)) if mode == "ExactCount" else 1
        if mode == "admin":
            body["adminAccess"] = True
        if mode == "capacity":
            body["capacity"] = {"requests": {"memory": draw(st.sampled_from(["5Gi", "18Gi", "40Gi"]))}}
    return body


@st.composite
def claim_spec(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.integers(0, 4)) == 4:
        event("request firstAvailable")
        alternatives = [{"name": f"alt{i}", "deviceClassName": "gpu", "count": draw(st.integers(1, 2)),
                         "selectors": _selectors(draw(st.sampled_from(MODELS)))} for i in range(2)]
        return {"devices": {"requests": [{"name": "gpu", "firstAvailable": alternatives}]}}
    return {"devices": {"requests": [{"name": "gpu", "exactly": draw(exact_request())}]}}


def _gpu_node(name: str, instance_type: str) -> list[dict[str, Any]]:
    node = node_object(name, TYPES[instance_type], "test-zone-a", "on-demand", "gpu")
    node["metadata"]["creationTimestamp"] = CREATED
    slices = [s.api(owner={"apiVersion": "v1", "kind": "Node", "name": name, "uid": f"uid-{name}"})
              for s in TYPES[instance_type].node_resource_slices(name)]
    return [node, *slices]


@st.composite
def clusters(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        nodepool("gpu", requirements=[{"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["g"]}]),
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}]
    for n in range(draw(st.integers(0, 2))):
        name = f"gpu-{n}"
        instance_type = draw(st.sampled_from(["g-8x-t4x2", "g-16x-a100x2", "g-8x-a100x1-shared"]))
        objects += _gpu_node(name, instance_type)
        if draw(st.booleans()) and instance_type != "g-8x-a100x1-shared":
            holder = pod(f"holder-{n}", cpu="1", memory="1Gi", node_name=name, owner=f"holder-{n}",
                         spec_extra={"resourceClaims": [{"name": "gpu", "resourceClaimName": f"held-{n}"}]})
            objects += [holder, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": f"held-{n}", "namespace": "default", "uid": f"uid-held-{n}"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
                "status": {"allocation": {
                    "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": name, "device": "gpu-0"}]},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [name]}]}]}},
                    "reservedFor": [{"resource": "pods", "name": f"holder-{n}", "uid": f"uid-default-holder-{n}"}]}}]
    for w in range(draw(st.integers(1, 4))):
        spec = draw(claim_spec())
        cpu = draw(st.sampled_from(["250m", "1", "3"]))
        if draw(st.booleans()):  # per-pod claims from a template (sometimes missing)
            template = f"t{w}"
            if draw(st.sampled_from([True, True, True, True, True, False])):
                objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                "metadata": {"name": template, "namespace": "default"}, "spec": {"spec": spec}})
            ref = {"name": "gpu", "resourceClaimTemplateName": template}
        else:  # one named claim shared by the workload's pods
            claim = f"c{w}"
            objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                            "metadata": {"name": claim, "namespace": "default", "uid": f"uid-{claim}"}, "spec": spec})
            ref = {"name": "gpu", "resourceClaimName": claim}
        for r in range(draw(st.integers(1, 3))):
            objects.append(pod(f"w{w}-{r}", cpu=cpu, memory="2Gi", owner=f"w{w}", labels={"app": f"w{w}"},
                               spec_extra={"resourceClaims": [ref]}))
    return objects


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(clusters())
def test_every_dra_plan_verifies_and_accounts_for_every_pending_pod(objects: list[dict[str, Any]]) -> None:
    snapshot = snapshot_of(objects, catalog=CATALOG)
    plan = solve(snapshot, SolveOptions(time_limit=2.0)).plan
    assert violations(snapshot, plan) == []
    seen = Counter([k for c in plan.node_claims for k in c.pods] + [k for e in plan.existing_nodes for k in e.pods]
                   + [u.pod for u in plan.unschedulable])
    assert seen == Counter(p.key for p in snapshot.pending_pods())
    for u in plan.unschedulable:
        assert u.reason
        event(u.reason.split(":")[1].strip()[:40] if ":" in u.reason else u.reason[:40])
    event(f"placed {'some' if plan.node_claims or plan.existing_nodes else 'none'}")
    # every placed pod with a claim to allocate has its devices listed (allocated claims and adminAccess aside)
    placed = {k for c in plan.node_claims for k in c.pods} | {k for e in plan.existing_nodes for k in e.pods}
    listed = {d.pod for c in plan.node_claims for d in c.devices or []} | {
        d.pod for e in plan.existing_nodes for d in e.devices or []}
    assert listed <= placed
