"""NodeClaim lifecycle against recording fakes: launch → register (nominate first, then untaint) → initialize."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from controller.cache import ClusterCache, Resource
from controller.lifecycle import Lifecycle
from controller.provisioner import PODS_ANNOTATION
from model.nodepool import NodeClaim, NodeClaimStatus
from providers.protocol import Launched

READY = {"conditions": [{"type": "Ready", "status": "True"}]}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def patch_node(self, name: str, body: Any) -> None:
        self.calls.append(("patch_node", (name, body)))

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any, **apply: Any) -> None:
        self.calls.append(("nominate", (namespace, name, body["status"]["nominatedNodeName"])))

    def patch_cluster_custom_object_status(self, group: str, version: str, plural: str, name: str, body: Any
                                           ) -> dict[str, Any]:
        self.calls.append(("status", (name, body)))
        return {"metadata": {"name": name, "resourceVersion": "0"}, **body}


class FakeLauncher:
    def create(self, claim: NodeClaim) -> Launched:
        status = NodeClaimStatus.model_validate({"nodeName": claim.name, "providerID": f"kwok://{claim.name}",
                                                 "capacity": {"cpu": "4"}, "allocatable": {"cpu": "3900m"}})
        return Launched(claim.model_copy(update={"status": status}))


def setup() -> tuple[Lifecycle, ClusterCache, Recorder]:
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in ("Pod", "Node", "NodeClaim")})
    lifecycle = Lifecycle(client.ApiClient(), cache, FakeLauncher(), bind_grace=15)
    recorder = Recorder()
    lifecycle._core = recorder  # type: ignore[assignment]
    lifecycle._custom = recorder  # type: ignore[assignment]
    cache.upsert("NodeClaim", {"metadata": {"name": "c1", "uid": "c1-uid", "resourceVersion": "1",
                                            "labels": {"karpenter.sh/nodepool": "p"},
                                            "annotations": {PODS_ANNOTATION: json.dumps(["u1", "u2"])}}})
    for uid in ("u1", "u2"):
        cache.upsert("Pod", {"metadata": {"name": uid, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
                             "spec": {}, "status": {}})
    return lifecycle, cache, recorder


def conditions(cache: ClusterCache) -> dict[str, str]:
    claim = cache.items("NodeClaim")[0]
    return {c["type"]: c["status"] for c in claim["status"]["conditions"]}


def test_launch_register_initialize() -> None:
    lifecycle, cache, recorder = setup()
    assert lifecycle.reconcile_all() == 1
    assert conditions(cache) == {"Launched": "True"}
    assert cache.items("NodeClaim")[0]["status"]["providerID"] == "kwok://c1"
    # node not in the cache yet: nothing to do
    assert lifecycle.reconcile_all() == 0
    tainted = {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]}
    cache.upsert("Node", {"metadata": {"name": "c1", "resourceVersion": "2", "labels": {}}, "spec": tainted,
                          "status": {}})
    # registration waits until the node is Ready
    assert lifecycle.reconcile_all() == 0
    cache.upsert("Node", {"metadata": {"name": "c1", "resourceVersion": "3", "labels": {}}, "spec": tainted,
                          "status": READY})
    recorder.calls.clear()
    assert lifecycle.reconcile_all() == 1
    kinds = [kind for kind, _ in recorder.calls]
    # pods are nominated before the node is untainted
    assert kinds[:2] == ["nominate", "nominate"] and kinds[2] == "patch_node"
    assert sorted(args[1] for kind, args in recorder.calls if kind == "nominate") == ["u1", "u2"]
    patch = next(args[1] for kind, args in recorder.calls if kind == "patch_node")
    assert {"op": "replace", "path": "/spec/taints", "value": []} in patch
    assert {"op": "add", "path": "/metadata/labels/karpenter.sh~1registered", "value": "true"} in patch
    assert conditions(cache) == {"Launched": "True", "Registered": "True"}
    # Ready node without the taint: initialized
    cache.upsert("Node", {"metadata": {"name": "c1", "resourceVersion": "4", "labels": {}}, "spec": {"taints": []},
                          "status": READY})
    assert lifecycle.reconcile_all() == 1
    assert conditions(cache) == {"Launched": "True", "Registered": "True", "Initialized": "True", "Ready": "True"}


def test_registration_waits_for_every_launched_node() -> None:
    lifecycle, cache, recorder = setup()
    lifecycle.reconcile_all()
    cache.upsert("NodeClaim", {"metadata": {"name": "c2", "uid": "c2-uid", "resourceVersion": "5",
                                            "annotations": {PODS_ANNOTATION: "[]"}}})
    lifecycle.reconcile_all()  # launches c2
    cache.upsert("Node", {"metadata": {"name": "c1", "resourceVersion": "2", "labels": {}}, "spec": {},
                          "status": READY})
    recorder.calls.clear()
    assert lifecycle.reconcile_all() == 0  # c2's node is missing: nobody registers yet
    assert recorder.calls == []
    cache.upsert("Node", {"metadata": {"name": "c2", "resourceVersion": "3", "labels": {}}, "spec": {},
                          "status": READY})
    assert lifecycle.reconcile_all() == 2


def test_insufficient_capacity_marks_the_offering_and_stops() -> None:
    from providers.protocol import InsufficientCapacityError

    class Failing:
        def create(self, claim: NodeClaim) -> Launched:
            raise InsufficientCapacityError("no capacity")

    lifecycle, cache, _ = setup()
    lifecycle._launcher = Failing()
    cache.upsert("NodeClaim", {**cache.items("NodeClaim")[0], "metadata": {
        **cache.items("NodeClaim")[0]["metadata"], "resourceVersion": "2",
        "labels": {"node.kubernetes.io/instance-type": "c-4x-amd64-linux", "topology.kubernetes.io/zone": "z",
                   "karpenter.sh/capacity-type": "spot"}}})
    assert lifecycle.reconcile_all() == 1
    assert conditions(cache) == {"Launched": "False"}
    assert lifecycle.unavailable.active() == {("c-4x-amd64-linux", "z", "spot")}
    assert lifecycle.reconcile_all() == 0  # not retried


def test_registration_waits_for_a_claim_about_to_launch() -> None:
    from datetime import UTC, datetime

    lifecycle, cache, recorder = setup()
    lifecycle.reconcile_all()  # launch c1
    cache.upsert("Node", {"metadata": {"name": "c1", "resourceVersion": "2", "labels": {}}, "spec": {},
                          "status": READY})
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cache.upsert("NodeClaim", {"metadata": {"name": "c2", "uid": "c2-uid", "resourceVersion": "5",
                                            "creationTimestamp": created, "annotations": {PODS_ANNOTATION: "[]"}}})
    recorder.calls.clear()
    assert lifecycle.reconcile_all() == 1  # c2 launched; c1 waits for it
    assert not any(kind == "patch_node" for kind, _ in recorder.calls)
    cache.upsert("Node", {"metadata": {"name": "c2", "resourceVersion": "3", "labels": {}}, "spec": {},
                          "status": READY})
    assert lifecycle.reconcile_all() == 2  # both registered, together
    assert sorted(args[0] for kind, args in recorder.calls if kind == "patch_node") == ["c1", "c2"]
