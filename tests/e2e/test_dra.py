"""DRA on the real control plane: pods with ResourceClaims → the controller plans GPU nodes → the KWOK provider
creates them and publishes their ResourceSlices (it plays the DRA driver) → the real kube-controller-manager
stamps claims from templates and the real kube-scheduler allocates devices and binds every pod.

Expected, from the Kubernetes DRA documentation: every pod with a claim runs with its claim allocated on the
node it runs on; a claim shared by two pods is one allocation, both pods on the node its devices are on; a pod
whose claim no device anywhere satisfies stays Pending, and nothing is launched for it: the kube-scheduler's
DynamicResources filter reports "cannot allocate all claims" for every node (``dynamicresources.go`` in
k8s.io/kubernetes v1.36.3), and nodeplan's own FailedScheduling Event names the request no instance type can
satisfy. A claim generated from a template belongs to its pod: when consolidation drains a half-empty GPU node,
the pod's replacement gets a new claim, allocated on a free device of the node it lands on.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from bench.workloads import KWOK_NODECLASS, deployment
from controller.disruption import DisruptionOptions
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions
from providers.catalog_file import load_catalog
from tests.e2e.conftest import Cluster, apply, open_workspace, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CATALOG = load_catalog(ROOT / "fixtures/catalogs/kwok-dra.yaml")
NAMESPACE = "dra"
DRIVER = "gpu.kwok.nodeplan.io"
GROUP, VERSION = "karpenter.sh", "v1"
NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["g"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}
DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def _request(model: str, count: int = 1) -> dict[str, Any]:
    return {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": count, "selectors": [
        {"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{model}"'}}]}}


def _template(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"spec": {"devices": {"requests": [request]}}}}


def _with_claim(name: str, replicas: int, ref: dict[str, str]) -> dict[str, Any]:
    return deployment(name, NAMESPACE, replicas, cpu="1", memory="1Gi",
                      resourceClaims=[{"name": "gpu", **ref}])


@pytest.fixture
def workspace(cluster: Cluster, crds: list[str]) -> Iterator[client.ApiClient]:
    api = yield from open_workspace(cluster, NAMESPACE, NODEPOOL, KWOK_NODECLASS, DEVICE_CLASS)
    client.ResourceV1Api(api).delete_device_class("gpu")


def test_gpu_pods_get_nodes_with_their_devices_and_run(cluster: Cluster, workspace: client.ApiClient) -> None:
    api = workspace
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    objects = [
        _template("one-a100", _request("a100")),
        _template("two-t4", _request("t4", 2)),
        _template("nine-h100", _request("h100", 9)),  # no instance type has 9
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "shared-t4", "namespace": NAMESPACE},
         "spec": {"devices": {"requests": [_request("t4")]}}},
        _with_claim("train", 3, {"resourceClaimTemplateName": "one-a100"}),
        _with_claim("pair", 2, {"resourceClaimTemplateName": "two-t4"}),
        _with_claim("serve", 2, {"resourceClaimName": "shared-t4"}),
        _template("h100-or-t4", {"name": "gpu", "firstAvailable": [
            {"name": "first", **_request("h100", 8)["exactly"]},
            {"name": "second", **_request("t4")["exactly"]}]}),
        _with_claim("fallback", 1, {"resourceClaimTemplateName": "h100-or-t4"}),
    ]
    controller = Controller(api, ControllerOptions(batch_idle=2.0, batch_max=10.0,
                                                   provisioner=ProvisionerOptions(solve_time_limit=5.0)),
                            catalog=CATALOG)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
    thread.start()
    try:
        for obj in objects:
            apply(api, obj)
        wanted = 3 + 2 + 2 + 1

        def runnable() -> list[Any]:
            pods = [p for p in core.list_namespaced_pod(NAMESPACE).items if not p.metadata.name.startswith("huge-")]
            return pods if len(pods) == wanted and all(p.status.phase == "Running" for p in pods) else []

        pods = wait_for(runnable, 240, interval=1.0, what="every satisfiable GPU pod Running")
        # an impossible claim in a cluster that has GPU nodes: the kube-scheduler tries it on each of them
        nodes_before = {n.metadata.name for n in core.list_node().items}
        apply(api, _with_claim("huge", 1, {"resourceClaimTemplateName": "nine-h100"}))
        huge_name = wait_for(lambda: [p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items
                                      if p.metadata.name.startswith("huge-")], 30, what="the huge pod")[0]
        scheduler_events, our_events = _failed_scheduling(core, huge_name)
        time.sleep(3.0)  # its batch created any NodeClaim before its Event; let a Node appear if one was launched
        huge = [p for p in core.list_namespaced_pod(NAMESPACE).items if p.metadata.name.startswith("huge-")]
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert controller.errors == [], controller.errors

    nodes = {n.metadata.name: n.metadata.labels["node.kubernetes.io/instance-type"] for n in core.list_node().items}
    claims = {c.metadata.name: c for c in resource.list_namespaced_resource_claim(NAMESPACE).items}
    slices = resource.list_resource_slice().items
    models = {(s.spec.pool.name, d.name): d.attributes["model"].string for s in slices for d in s.spec.devices or []}
    for pod in pods:
        for status in pod.status.resource_claim_statuses or []:
            claim = claims[status.resource_claim_name]
            allocation = claim.status.allocation
            assert allocation is not None, f"{pod.metadata.name}: claim {claim.metadata.name} not allocated"
            terms = allocation.node_selector.node_selector_terms
            assert terms[0].match_fields[0].values == [pod.spec.node_name]  # devices on the pod's own node
            expected = "a100" if pod.metadata.name.startswith("train-") else "t4"
            assert {models[(r.pool, r.device)] for r in allocation.devices.results} == {expected}
            if pod.metadata.name.startswith("fallback-"):  # 8 h100 cost more than one t4 node: the second choice
                assert [r.request for r in allocation.devices.results] == ["gpu/second"]
            if pod.metadata.name.startswith("pair-"):
                assert len(allocation.devices.results) == 2
    # the shared claim: one allocation, both consumers on its node
    shared = claims["shared-t4"]
    serve_nodes = {p.spec.node_name for p in pods if p.metadata.name.startswith("serve-")}
    assert len(serve_nodes) == 1 and len(shared.status.allocation.devices.results) == 1
    assert {ref.name for ref in shared.status.reserved_for} == {p.metadata.name for p in pods
                                                                if p.metadata.name.startswith("serve-")}
    # every node is a GPU type; none was launched for the impossible pod
    assert all(t.startswith("g-") for t in nodes.values()), nodes
    assert all("h100" not in t for t in nodes.values()), nodes
    # the impossible claim, asked for once the cluster has GPU nodes: Pending, why said twice, nothing launched
    assert len(huge) == 1 and huge[0].status.phase == "Pending" and not huge[0].spec.node_name, huge
    assert all(e.type == "Warning" for e in scheduler_events + our_events)
    assert any("request gpu" in e.message and "9 free device(s)" in e.message and "h100" in e.message
               for e in our_events), [e.message for e in our_events]
    assert set(nodes) == nodes_before, (nodes, nodes_before)


def _failed_scheduling(core: client.CoreV1Api, name: str) -> tuple[list[Any], list[Any]]:
    """The FailedScheduling Events of pod ``name`` once both are there: the kube-scheduler's, from its
    DynamicResources filter ("cannot allocate all claims" on every node, ``dynamicresources.go``), and
    nodeplan's."""
    def events() -> list[Any]:
        return [e for e in core.list_namespaced_event(NAMESPACE, field_selector=f"involvedObject.name={name}").items
                if e.reason == "FailedScheduling"]

    def both() -> tuple[list[Any], list[Any]] | None:
        found = events()
        scheduler = [e for e in found if _component(e) == "default-scheduler"
                     and re.match(r"0/[1-9][0-9]* nodes are available: .*cannot allocate all claims", e.message)]
        ours = [e for e in found if _component(e) == "nodeplan"]
        return (scheduler, ours) if scheduler and ours else None

    try:
        return wait_for(both, 120, interval=2.0, what="the scheduler's and nodeplan's FailedScheduling Events")  # type: ignore[no-any-return]
    except AssertionError as err:
        seen = [(_component(e), e.message) for e in events()]
        raise AssertionError(f"{err}; FailedScheduling Events of {name}: {seen}") from None


def _component(event: Any) -> str:
    """Who reported a core/v1 Event: ``reportingComponent`` (events.k8s.io, the scheduler's), else ``source``."""
    return str(event.reporting_component or (event.source.component if event.source else "") or "")


def _nodes_with_pods(core: client.CoreV1Api, prefix: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for pod in core.list_namespaced_pod(NAMESPACE).items:
        if pod.metadata.name.startswith(prefix) and pod.spec.node_name and pod.status.phase == "Running" \
                and not pod.metadata.deletion_timestamp:
            out.setdefault(pod.spec.node_name, []).append(pod)
    return out


def test_consolidating_half_empty_gpu_nodes_keeps_every_claim_allocated(cluster: Cluster,
                                                                         workspace: client.ApiClient) -> None:
    """Six 1-GPU pods fill three two-GPU nodes; the Deployment is scaled to three, one pod off each node (the
    pods' ``controller.kubernetes.io/pod-deletion-cost``), leaving three half-empty nodes; consolidation (its
    budget opened only then) removes one: its pod's replacement gets a new claim allocated on the free GPU of a
    node that stays. Two nodes are what three GPUs on two-GPU nodes need."""
    api = workspace
    core, resource, apps = client.CoreV1Api(api), client.ResourceV1Api(api), client.AppsV1Api(api)
    custom = client.CustomObjectsApi(api)
    pool = {**NODEPOOL, "spec": {
        "template": {"spec": {**NODEPOOL["spec"]["template"]["spec"], "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g-16x-a100x2"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                       "budgets": [{"nodes": "0"}]}}}
    apply(api, pool)
    options = ControllerOptions(batch_idle=2.0, batch_max=10.0, provisioner=ProvisionerOptions(solve_time_limit=5.0),
                                disruption=DisruptionOptions(interval=1.0, time_limit=5.0, validation_wait=2.0,
                                                             replacement_timeout=60.0))
    controller = Controller(api, options, catalog=CATALOG)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
    thread.start()
    try:
        apply(api, _template("one-a100", _request("a100")))
        apply(api, _with_claim("train", 6, {"resourceClaimTemplateName": "one-a100"}))
        full = wait_for(lambda: (n := _nodes_with_pods(core, "train-")) and sum(map(len, n.values())) == 6 and n,
                        240, interval=1.0, what="six GPU pods Running")
        assert sorted(len(p) for p in full.values()) == [2, 2, 2], {k: len(v) for k, v in full.items()}
        leaving = {pods[0].metadata.name for pods in full.values()}
        for name in leaving:
            core.patch_namespaced_pod(name, NAMESPACE, {"metadata": {"annotations": {
                "controller.kubernetes.io/pod-deletion-cost": "-100"}}})
        apps.patch_namespaced_deployment_scale("train", NAMESPACE, {"spec": {"replicas": 3}})
        half = wait_for(lambda: (n := _nodes_with_pods(core, "train-")) and sum(map(len, n.values())) == 3
                        and not leaving & {p.metadata.name for v in n.values() for p in v} and n,
                        60, interval=1.0, what="the scale-down to one pod per node")
        assert sorted(half) == sorted(full) and all(len(p) == 1 for p in half.values())
        stayed = {p.metadata.name for pods in half.values() for p in pods}
        custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", "gpu",
                                           {"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}})

        def consolidated() -> dict[str, list[Any]] | None:
            nodes = {n.metadata.name for n in core.list_node().items}
            placed = _nodes_with_pods(core, "train-")
            if len(nodes) == 2 and sum(map(len, placed.values())) == 3 and set(placed) == nodes:
                return placed
            return None

        after = wait_for(consolidated, 240, interval=1.0, what="two GPU nodes running the three pods")
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert controller.errors == [], controller.errors
    assert set(after) < set(full)  # a node was removed, none launched
    assert sorted(len(p) for p in after.values()) == [1, 2]
    moved = [p for pods in after.values() for p in pods if p.metadata.name not in stayed]
    assert len(moved) == 1, [p.metadata.name for pods in after.values() for p in pods]
    claims = {c.metadata.name: c for c in resource.list_namespaced_resource_claim(NAMESPACE).items}
    slices = resource.list_resource_slice().items
    devices = {(s.spec.pool.name, d.name): d.attributes["model"].string for s in slices for d in s.spec.devices or []}
    assert {s.spec.node_name for s in slices} == set(after)  # the removed node's slices went with it
    used: list[tuple[str, str]] = []
    for node, pods in after.items():
        for pod in pods:
            [status] = pod.status.resource_claim_statuses
            allocation = claims[status.resource_claim_name].status.allocation
            assert allocation is not None, f"{pod.metadata.name}: its claim is not allocated"
            assert allocation.node_selector.node_selector_terms[0].match_fields[0].values == [node]
            [result] = allocation.devices.results
            assert result.pool == node and devices[(result.pool, result.device)] == "a100"
            used.append((result.pool, result.device))
    assert len(set(used)) == 3  # three devices, one per claim
