"""Controller pieces that need no cluster: provisionable pods, the batch window, coverage of pods by
in-flight NodeClaims, deterministic NodeClaim names and bodies, the KWOK Node a launch creates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.batch import BatchWindow, is_provisionable
from controller.provisioner import PODS_ANNOTATION, claim_name, covered_pods, nodeclaim_body
from model.nodepool import NodeClaim, NodePool
from model.plan import PlannedNodeClaim
from providers.kwok import kwok_catalog
from providers.kwok_nodes import KwokProvider


def pod(name: str = "p", *, node: str = "", reason: str = "Unschedulable", owner: str = "ReplicaSet",
        phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "ownerReferences": [{"kind": owner, "name": "x"}]},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason}]}}


def test_provisionable_pods() -> None:
    assert is_provisionable(pod())
    assert not is_provisionable(pod(node="n1"))
    assert not is_provisionable(pod(reason="SchedulerError"))
    assert not is_provisionable(pod(owner="DaemonSet"))
    assert not is_provisionable(pod(owner="Node"))
    assert not is_provisionable(pod(phase="Failed"))
    fresh = pod()
    fresh["status"] = {"phase": "Pending"}
    assert not is_provisionable(fresh)  # the scheduler has not tried it yet


def test_batch_window_idle_and_max() -> None:
    window = BatchWindow(idle=1.0, maximum=10.0)
    assert not window.ready(0.0)
    assert window.observe({"a": "1"}, 0.0)
    assert not window.ready(0.5)
    assert window.observe({"a": "1", "b": "1"}, 0.9)
    assert not window.observe({"a": "1", "b": "1"}, 1.5)  # nothing new
    assert not window.ready(1.8)
    assert window.ready(2.0)
    # a steady trickle of new pods is cut off at the maximum
    window = BatchWindow(idle=1.0, maximum=3.0)
    for i in range(7):
        window.observe({str(j): "1" for j in range(i + 1)}, i * 0.5)
    assert window.ready(3.0)


def test_batch_window_is_extended_once_per_pod() -> None:
    """Karpenter's Batcher triggers once per pod UID a window: a pending pod the kube-scheduler keeps
    re-reporting (a new resourceVersion each time) must not hold the window open to its maximum."""
    window = BatchWindow(idle=1.0, maximum=10.0)
    assert window.observe({"a": "1"}, 0.0)
    assert not window.observe({"a": "2"}, 0.8)  # the same pod, updated: not new to this window
    assert not window.observe({"a": "3"}, 1.6)
    assert window.ready(1.6)
    assert window.deadline() == 1.0
    window.close({"a": "3"})
    assert window.observe({"a": "4"}, 2.0)  # a later window counts it again once it changed
    assert window.deadline() == 3.0


def test_batch_window_does_not_reopen_for_unplaceable_pods() -> None:
    window = BatchWindow(idle=1.0, maximum=10.0)
    window.observe({"a": "1", "b": "1"}, 0.0)
    window.close({"b": "1"})
    assert not window.observe({"b": "1"}, 5.0)
    assert not window.open
    assert window.observe({"b": "2"}, 6.0)  # it changed
    window.close({})
    window.forget()
    assert window.observe({"b": "2"}, 7.0)


def claim(name: str, uids: list[str], *, initialized_at: str | None = None, deleting: bool = False
          ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {PODS_ANNOTATION: json.dumps(uids)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conditions = [{"type": "Initialized", "status": "True", "lastTransitionTime": initialized_at}] if initialized_at \
        else []
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_covered_pods() -> None:
    now = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    claims = [claim("a", ["u1", "u2"]), claim("b", ["u3"], initialized_at="2026-01-01T00:00:00Z"),
              claim("c", ["u4"], initialized_at="2025-12-31T23:00:00Z"), claim("d", ["u5"], deleting=True)]
    assert covered_pods(claims, now + 5, bind_grace=15) == {"u1": "a", "u2": "a", "u3": "b"}


def nodepool() -> NodePool:
    return NodePool.model_validate({"metadata": {"name": "default", "uid": "np-uid"}, "spec": {"template": {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                                  {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Gte", "values": ["2"],
                                   "minValues": 1}],
                 "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                 "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}})


def planned() -> PlannedNodeClaim:
    return PlannedNodeClaim(
        name="default-00000", node_pool="default", instance_type="c-4x-amd64-linux", zone="test-zone-b",
        capacity_type="spot", price=0.1, pods=["default/a", "default/b"],
        labels={"node.kubernetes.io/instance-type": "c-4x-amd64-linux", "topology.kubernetes.io/zone": "test-zone-b",
                "karpenter.sh/capacity-type": "spot", "karpenter.sh/nodepool": "default",
                "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"},
        requests={"cpu": "1500m", "memory": "1Gi", "pods": "2"})


def test_claim_names_are_a_function_of_the_decision() -> None:
    plan = planned()
    assert claim_name("default", plan, ["u2", "u1"]) == claim_name("default", plan, ["u1", "u2"])
    assert claim_name("default", plan, ["u1"]) != claim_name("default", plan, ["u1", "u2"])
    other = plan.model_copy(update={"zone": "test-zone-a"})
    assert claim_name("default", other, ["u1", "u2"]) != claim_name("default", plan, ["u1", "u2"])


def test_nodeclaim_body_pins_the_planned_offering() -> None:
    body = nodeclaim_body(planned(), nodepool(), "default-abc", ["u1", "u2"])
    parsed = NodeClaim.model_validate(body)
    reqs = {r.key: r for r in parsed.spec.requirements}
    assert reqs["node.kubernetes.io/instance-type"].values == ("c-4x-amd64-linux",)
    assert reqs["topology.kubernetes.io/zone"].values == ("test-zone-b",)
    assert reqs["karpenter.sh/capacity-type"].values == ("spot",)
    assert reqs["karpenter.kwok.sh/instance-cpu"].min_values == 1
    assert parsed.metadata.labels["team"] == "a"
    assert parsed.nodepool == "default"
    assert json.loads(parsed.metadata.annotations[PODS_ANNOTATION]) == ["u1", "u2"]
    assert [t.key for t in parsed.spec.taints] == ["dedicated"]
    assert parsed.spec.resources.requests["cpu"] == 1500
    assert body["metadata"]["ownerReferences"][0]["uid"] == "np-uid"


def test_kwok_node_for_a_claim() -> None:
    body = nodeclaim_body(planned(), nodepool(), "default-abc", ["u1"])
    body["metadata"]["uid"] = "claim-uid"
    provider = KwokProvider.__new__(KwokProvider)
    provider._types = {it.name: it for it in kwok_catalog()}
    node = provider.node_for(NodeClaim.model_validate(body))
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "default-abc"
    assert labels["node.kubernetes.io/instance-type"] == "c-4x-amd64-linux"
    assert labels["topology.kubernetes.io/zone"] == "test-zone-b"
    assert labels["karpenter.sh/capacity-type"] == "spot"
    assert labels["karpenter.sh/nodepool"] == "default"
    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert node["spec"]["providerID"] == "kwok://default-abc"
    assert {"key": "karpenter.sh/unregistered", "effect": "NoExecute"} in node["spec"]["taints"]
    assert node["status"]["capacity"] == {"cpu": "4", "ephemeral-storage": "20Gi", "memory": "8Gi", "pods": "64"}
    assert node["status"]["allocatable"]["cpu"] == "3900m"
    assert node["metadata"]["ownerReferences"][0]["uid"] == "claim-uid"


def test_kwok_rejects_unknown_offering() -> None:
    from providers.protocol import InsufficientCapacityError

    plan = planned()
    labels = {**plan.labels, "topology.kubernetes.io/zone": "nowhere"}
    plan = plan.model_copy(update={"zone": "nowhere", "labels": labels})
    body = nodeclaim_body(plan, nodepool(), "x", ["u1"])
    provider = KwokProvider.__new__(KwokProvider)
    provider._types = {it.name: it for it in kwok_catalog()}
    with pytest.raises(InsufficientCapacityError):
        provider.node_for(NodeClaim.model_validate(body))


def test_failed_launch_uncovers_its_pods() -> None:
    failed = claim("f", ["u9"])
    failed["status"]["conditions"] = [{"type": "Launched", "status": "False", "reason": "InsufficientCapacity"}]
    assert covered_pods([failed, claim("a", ["u1"])], 0.0, bind_grace=15) == {"u1": "a"}


def test_unavailable_offerings_expire() -> None:
    from controller.offerings import UnavailableOfferings

    now = [0.0]
    cache = UnavailableOfferings(ttl=60, clock=lambda: now[0])
    catalog = kwok_catalog()
    assert cache.apply(catalog) == catalog
    cache.mark("c-4x-amd64-linux", "test-zone-b", "spot")
    marked = {it.name: it for it in cache.apply(catalog)}["c-4x-amd64-linux"]
    down = [(o.zone, o.capacity_type) for o in marked.offerings if not o.available]
    assert down == [("test-zone-b", "spot")]
    now[0] = 61.0
    assert cache.apply(catalog) == catalog
