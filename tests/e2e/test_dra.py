"""DRA on the real control plane: pods with ResourceClaims → the controller plans GPU nodes → the KWOK provider
creates them and publishes their ResourceSlices (it plays the DRA driver) → the real kube-controller-manager
stamps claims from templates and the real kube-scheduler allocates devices and binds every pod.

Expected, from the Kubernetes DRA documentation: every pod with a claim runs with its claim allocated on the
node it runs on; a claim shared by two pods is one allocation, both pods on the node its devices are on; a pod
whose claim no device anywhere satisfies stays Pending, and nothing is launched for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from bench.workloads import KWOK_NODECLASS, deployment
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions
from providers.catalog_file import load_catalog
from tests.e2e.conftest import Cluster, apply, release_finalizers, wait_for

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
    api = cluster.api()
    core = client.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for obj in (KWOK_NODECLASS, NODEPOOL, DEVICE_CLASS):
        apply(api, obj)
    yield api
    client.AppsV1Api(api).delete_collection_namespaced_deployment(NAMESPACE)
    core.delete_namespace(NAMESPACE, grace_period_seconds=0)
    custom = client.CustomObjectsApi(api)
    custom.delete_collection_cluster_custom_object(GROUP, VERSION, "nodeclaims")
    release_finalizers(api)
    custom.delete_cluster_custom_object(GROUP, VERSION, "nodepools", "gpu")
    client.ResourceV1Api(api).delete_device_class("gpu")

    def clean() -> bool:
        return NAMESPACE not in [n.metadata.name for n in core.list_namespace().items] and not core.list_node().items

    wait_for(clean, 120, interval=1.0, what="namespace and nodes deleted")


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
        _with_claim("huge", 1, {"resourceClaimTemplateName": "nine-h100"}),
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
    huge = [p for p in core.list_namespaced_pod(NAMESPACE).items if p.metadata.name.startswith("huge-")]
    assert len(huge) == 1 and huge[0].status.phase == "Pending" and not huge[0].spec.node_name
