"""Pods land where the plan put them, and a pod the kube-scheduler put elsewhere always gets capacity again.

The livelock of issue #16: NodeClaim names hash the decision (pool, offering, pod UIDs), and a create answered
409 was taken as success. A pod planned onto a claim that exists but no longer holds room for it (initialized
past the bind grace with its room taken by another pod, its launch failed, or it is being deleted) was planned
again onto the same offering, got the same name, "succeeded" without a new node, and was re-solved every batch.

Nominations follow KEP-5278 (``status.nominatedNodeName`` as an expected placement): any component may set it
while it is unset; a component overwrites only a nomination it set itself; writes carry the pod's
server-side apply of that one field, so a nomination the scheduler wrote meanwhile wins.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from controller.cache import ClusterCache, Resource
from controller.lifecycle import Lifecycle
from controller.provisioner import PODS_ANNOTATION, Provisioner, ProvisionerOptions, claim_name, covered_pods
from model.plan import PlannedNodeClaim
from providers.kwok import kwok_catalog

NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general", "uid": "np",
                                                                             "resourceVersion": "1"},
            "spec": {"template": {"spec": {"requirements": [
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}
LONG_AGO = "2026-01-01T00:00:00Z"  # far past any bind grace


def pod(name: str, cpu: str, node: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1",
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                       "reason": "Unschedulable"}]}}
    if node:
        out["spec"]["nodeName"] = node
        out["status"] = {"phase": "Running"}
    return out


def node(name: str, cpu: str) -> dict[str, Any]:
    labels = {"karpenter.sh/nodepool": "general", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "node.kubernetes.io/instance-type": "c-2x-amd64-linux", "topology.kubernetes.io/zone": "test-zone-a",
              "karpenter.sh/capacity-type": "spot", "karpenter.sh/registered": "true",
              "karpenter.sh/initialized": "true"}
    return {"metadata": {"name": name, "resourceVersion": "1", "labels": labels}, "spec": {},
            "status": {"allocatable": {"cpu": cpu, "memory": "4086Mi", "pods": "32"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def existing_claim(name: str, uids: list[str], node_name: str, *, state: str = "initialized") -> dict[str, Any]:
    """A NodeClaim as the API server holds it: ``initialized`` long ago, ``failed`` (Launched=False) or
    ``deleting``; ``fresh``: created, not launched yet (it still holds room for its pods)."""
    conditions = {
        "initialized": [{"type": t, "status": "True", "lastTransitionTime": LONG_AGO}
                        for t in ("Launched", "Registered", "Initialized")],
        "failed": [{"type": "Launched", "status": "False", "reason": "InsufficientCapacity",
                    "lastTransitionTime": LONG_AGO}],
        "deleting": [{"type": "Launched", "status": "True", "lastTransitionTime": LONG_AGO}],
        "fresh": [],
    }[state]
    meta: dict[str, Any] = {"name": name, "uid": f"{name}-uid", "resourceVersion": "5",
                            "labels": {"karpenter.sh/nodepool": "general"},
                            "annotations": {PODS_ANNOTATION: json.dumps(uids)}}
    if state == "deleting":
        meta["deletionTimestamp"] = LONG_AGO
    status: dict[str, Any] = {"conditions": conditions}
    if state != "fresh":
        status["nodeName"] = node_name
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta, "spec": {}, "status": status}


class ApiServer:
    """NodeClaims as the API server answers for them: a create of an existing name is 409 AlreadyExists."""

    def __init__(self) -> None:
        self.claims: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: Any) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if name in self.claims:
            raise client.ApiException(status=409, reason="AlreadyExists")
        self.claims[name] = json.loads(json.dumps(body))
        self.created.append(name)
        return self.claims[name]

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any]:
        if name not in self.claims:
            raise client.ApiException(status=404, reason="NotFound")
        return self.claims[name]

    def patch_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any
                                    ) -> dict[str, Any]:
        claim = self.claims[name]
        claim["metadata"]["annotations"].update(body["metadata"]["annotations"])
        return claim


class Pods:
    """``patch pods`` / ``patch pods/status`` as the API server answers them; ``scheduler_nominated``: a
    nomination the kube-scheduler wrote on the server (its field manager owns the field), which a server-side
    apply of another value by another manager is refused (409 Conflict)."""

    def __init__(self, scheduler_nominated: str = "") -> None:
        self.status: list[tuple[str, dict[str, Any]]] = []
        self.scheduler_nominated = scheduler_nominated

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any) -> None:
        pass

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any, field_manager: str = "",
                                    _content_type: str = "", _preload_content: bool = True) -> None:
        assert _content_type == "application/apply-patch+yaml" and field_manager  # server-side apply
        value = body["status"]["nominatedNodeName"]
        if self.scheduler_nominated and self.scheduler_nominated != value:
            raise client.ApiException(status=409, reason="Conflict")
        self.status.append((name, body))


def cluster() -> tuple[Provisioner, ClusterCache, ApiServer]:
    kinds = ("Pod", "Node", "NodeClaim", "NodePool", "DaemonSet")
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in kinds})
    cache.upsert("NodePool", NODEPOOL)
    provisioner = Provisioner(client.ApiClient(), cache, kwok_catalog(),
                              ProvisionerOptions(solve_time_limit=2.0, workers=1))
    server = ApiServer()
    provisioner._custom = server  # type: ignore[assignment]
    provisioner._core = Pods()  # type: ignore[assignment]
    return provisioner, cache, server


def stranded(state: str, *, in_cache: bool = True) -> tuple[Provisioner, ClusterCache, ApiServer, str]:
    """Pod ``p`` (1 CPU) was planned onto a claim that exists under the very name a new plan for it gets; its
    node (1900m allocatable) holds another pod of 1500m, so ``p`` does not fit there any more."""
    provisioner, cache, server = cluster()
    cache.upsert("Node", node("general-old", "1900m"))
    cache.upsert("Pod", pod("q", "1500m", node="general-old"))
    cache.upsert("Pod", pod("p", "1"))
    _, bodies = provisioner.plan(provisioner.pending())
    assert len(bodies) == 1
    name = bodies[0]["metadata"]["name"]
    claim = existing_claim(name, ["uid-p"], "general-old", state=state)
    server.claims[name] = claim
    if in_cache:
        cache.upsert("NodeClaim", claim)
    return provisioner, cache, server, name


def test_a_pod_whose_planned_claim_no_longer_holds_it_gets_a_new_claim() -> None:
    """The reproduction: before the fix no claim was created and ``p`` stayed pending batch after batch."""
    for state in ("initialized", "failed", "deleting"):
        provisioner, cache, server, taken = stranded(state)
        assert set(provisioner.pending()) == {"ns/p"}  # the claim no longer covers it
        record = provisioner.provision(provisioner.pending())
        assert len(server.created) == 1 and server.created[0] != taken, state
        assert record.created == server.created and set(record.claims) == set(server.created)
        assert json.loads(server.claims[server.created[0]]["metadata"]["annotations"][PODS_ANNOTATION]) == ["uid-p"]
        assert provisioner.pending() == {}, state  # covered by the new claim: no second solve
        assert covered_pods(cache.items("NodeClaim"), 0.0, 15.0)["uid-p"] == server.created[0]


def test_a_claim_the_cache_has_not_seen_yet_is_read_back_on_409() -> None:
    """The name is taken on the API server only (the watch has not delivered it): the 409 is read back, and a
    claim that does not hold the pod is no success."""
    provisioner, _, server, taken = stranded("initialized", in_cache=False)
    record = provisioner.provision(provisioner.pending())
    assert len(server.created) == 1 and server.created[0] != taken
    assert record.created == server.created
    assert provisioner.pending() == {}


def test_a_retried_create_of_a_claim_that_holds_its_pods_is_a_no_op() -> None:
    """What deterministic names are for: the claim was created (by this controller before a restart) and still
    holds room for exactly these pods, so the 409 is success and nothing is launched twice."""
    provisioner, _, server, taken = stranded("fresh", in_cache=False)
    record = provisioner.provision(provisioner.pending())
    assert server.created == [] and record.created == [] and list(record.claims) == [taken]
    assert provisioner.pending() == {}  # the claim read back covers the pod


def test_generation_zero_names_are_unchanged() -> None:
    """Names of claims already in clusters stay valid: generation 0 is the name the decision always had."""
    claim = PlannedNodeClaim(name="x", node_pool="general", instance_type="c-2x-amd64-linux", zone="test-zone-a",
                             capacity_type="spot", price=0.04, pods=["ns/p"], labels={}, requests={},
                             allocatable={})
    assert claim_name("general", claim, ["b", "a"]) == claim_name("general", claim, ["a", "b"], generation=0)
    assert claim_name("general", claim, ["a"], generation=1) != claim_name("general", claim, ["a"])


# -- nominations (KEP-5278) ---------------------------------------------------------------------------------

def lifecycle_with(pods: list[dict[str, Any]], claims: list[dict[str, Any]], *,
                   scheduler_nominated: str = "") -> tuple[Lifecycle, Pods]:
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in ("Pod", "Node", "NodeClaim")})
    for p in pods:
        cache.upsert("Pod", p)
    for c in claims:
        cache.upsert("NodeClaim", c)
    lifecycle = Lifecycle(client.ApiClient(), cache, launcher=None, bind_grace=15)  # type: ignore[arg-type]
    recorder = Pods(scheduler_nominated)
    lifecycle._core = recorder  # type: ignore[assignment]
    lifecycle._refresh()
    return lifecycle, recorder


def nominated(p: dict[str, Any], node_name: str) -> dict[str, Any]:
    p["status"]["nominatedNodeName"] = node_name
    return p


def applied(name: str, node: str) -> tuple[str, dict[str, Any]]:
    """The server-side apply of one pod's nomination."""
    return name, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"},
                  "status": {"nominatedNodeName": node}}


def test_an_unset_nomination_is_set_by_server_side_apply() -> None:
    claim = existing_claim("c-new", ["uid-a"], "c-new", state="fresh")
    lifecycle, recorder = lifecycle_with([pod("a", "1")], [claim])
    lifecycle._nominate(claim, "c-new")
    assert recorder.status == [applied("a", "c-new")]


def test_a_nomination_another_component_set_is_left_alone() -> None:
    """The scheduler nominated the pod (preemption, or a binding cycle with PreBind work) to a node no claim of
    nodeplan planned it for: KEP-5278 says no external component overwrites it."""
    claim = existing_claim("c-new", ["uid-a"], "c-new", state="fresh")
    lifecycle, recorder = lifecycle_with([nominated(pod("a", "1"), "somewhere-else")], [claim])
    lifecycle._nominate(claim, "c-new")
    assert recorder.status == []


def test_nodeplans_own_earlier_nomination_is_updated() -> None:
    """The pod was re-planned: the old claim (still listing it) was nodeplan's nomination, so nodeplan moves it."""
    old = existing_claim("c-old", ["uid-a"], "c-old", state="failed")
    new = existing_claim("c-new", ["uid-a"], "c-new", state="fresh")
    lifecycle, recorder = lifecycle_with([nominated(pod("a", "1"), "c-old")], [old, new])
    lifecycle._nominate(new, "c-new")
    assert [name for name, _ in recorder.status] == ["a"]


def test_a_nomination_the_scheduler_wrote_since_the_cache_saw_the_pod_wins() -> None:
    """The cache still shows no nomination, but the kube-scheduler has nominated the pod for preemption on the
    server: the apply conflicts with the field it owns and is dropped (no exception, nothing written)."""
    claim = existing_claim("c-new", ["uid-a"], "c-new", state="fresh")
    lifecycle, recorder = lifecycle_with([pod("a", "1")], [claim], scheduler_nominated="victim-node")
    lifecycle._nominate(claim, "c-new")
    assert recorder.status == []


# -- measuring adherence and decisions (make bench-controller, tests/e2e/test_plan_adherence.py) ------------

def test_adherence_from_nodeplans_claims_counts_the_first_plan_and_re_plans() -> None:
    from bench.controller_perf import nodeplan_adherence

    first = existing_claim("c1", ["uid-a", "uid-b", "uid-c"], "n1")
    first["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"
    second = existing_claim("c2", ["uid-c"], "n2")  # c was still pending past c1's bind grace: planned again
    second["metadata"]["creationTimestamp"] = "2026-12-01T10:01:00Z"
    pods = [pod("a", "1", node="n1"), pod("b", "1", node="n2"), pod("c", "1", node="n2"), pod("d", "1", node="x")]
    result = nodeplan_adherence([second, first], pods)
    # d was never planned; a is where planned; b was bound elsewhere; c bound to its second plan's node
    assert (result.planned, result.as_planned, result.replanned, result.replanned_pods) == (3, 1, 1, {"c"})


def test_adherence_from_nominated_events_uses_each_pods_first_nomination() -> None:
    from bench.controller_perf import nomination_adherence

    claims = [existing_claim("k1", [], "kwok-1"), existing_claim("k2", [], "kwok-2")]

    def event(uid: str, message: str, stamp: str) -> dict[str, Any]:
        return {"reason": "Nominated", "involvedObject": {"kind": "Pod", "uid": uid}, "message": message,
                "firstTimestamp": stamp}

    events = [event("uid-a", "Pod should schedule on: nodeclaim/k1", "2026-12-01T10:00:00Z"),
              event("uid-a", "Pod should schedule on: nodeclaim/k2", "2026-12-01T10:05:00Z"),
              event("uid-b", "Pod should schedule on: nodeclaim/k2, node/kwok-2", "2026-12-01T10:00:00Z")]
    result = nomination_adherence(events, claims, [pod("a", "1", node="kwok-1"), pod("b", "1", node="kwok-1")])
    assert (result.planned, result.as_planned, result.replanned) == (2, 1, None)


def test_decisions_are_read_from_both_controllers_logs() -> None:
    from bench.controller_perf import Decision, decisions, percentile

    nodeplan = "\n".join([
        json.dumps({"message": "solved batch", "pods": 12, "seconds": 0.084, "cpu_seconds": 0.07}),
        json.dumps({"message": "solved batch", "pods": 0, "seconds": 0.01}),  # nothing pending: no decision
        "not json", json.dumps({"message": "created nodeclaim"})])
    assert decisions("nodeplan", nodeplan) == [Decision(0.084, 0.07)]
    karpenter = json.dumps({"level": "INFO", "logger": "controller", "message": "found provisionable pod(s)",
                            "controller": "provisioner", "duration": "154.780853ms"})
    assert [round(d.seconds, 6) for d in decisions("karpenter", karpenter)] == [0.154781]
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and percentile([1.0, 2.0, 3.0, 4.0], 0.95) == 4.0


def recent_claim(name: str, uids: list[str], node_name: str) -> dict[str, Any]:
    """A claim initialized a moment ago: well inside the bind grace, its pods still reserved for it."""
    claim = existing_claim(name, uids, node_name)
    just_now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    for condition in claim["status"]["conditions"]:
        condition["lastTransitionTime"] = just_now
    return claim


def test_a_planned_pod_whose_node_filled_up_is_planned_again_without_waiting_out_the_grace() -> None:
    """The kube-scheduler gave the room on ``p``'s planned node to another pod (``q``): ``p`` cannot go there,
    so the next batch plans it at once — and under a new name, not the claim that cannot take it."""
    provisioner, cache, server, taken = stranded("initialized")
    cache.upsert("NodeClaim", recent_claim(taken, ["uid-p"], "general-old"))
    assert provisioner.displaced() == {(taken, "uid-p")}
    assert set(provisioner.pending()) == {"ns/p"}
    provisioner.provision(provisioner.pending())
    assert len(server.created) == 1 and server.created[0] != taken


def test_a_displaced_pod_is_covered_by_the_claim_it_was_planned_onto_next() -> None:
    """``p`` is displaced from the claim whose Node filled up, not from every claim: while that claim is still
    within its bind grace (it still lists ``p``), the claim the next batch planned ``p`` onto covers it, and the
    batch after plans nothing for it. Before, ``p`` was planned again by every batch until the first claim's grace
    ran out (the restart e2e test saw a pod on three claims within 8 s)."""
    provisioner, cache, server, taken = stranded("initialized")
    cache.upsert("NodeClaim", recent_claim(taken, ["uid-p"], "general-old"))
    provisioner.provision(provisioner.pending())
    assert len(server.created) == 1
    assert provisioner.displaced() == {(taken, "uid-p")}  # the first claim still lists it, without room
    assert provisioner.pending() == {}
    assert provisioner.covered()["uid-p"] == server.created[0]


def test_a_planned_pod_keeps_its_claim_while_its_node_has_room() -> None:
    """Another pod bound beside it, but room is left for ``p``: it stays covered until the scheduler binds it."""
    provisioner, cache, _ = cluster()
    cache.upsert("Node", node("general-new", "1900m"))
    cache.upsert("Pod", pod("q", "500m", node="general-new"))
    cache.upsert("Pod", pod("p", "1"))
    cache.upsert("NodeClaim", recent_claim("general-new", ["uid-p"], "general-new"))
    assert provisioner.displaced() == set() and provisioner.pending() == {}


def test_the_room_left_goes_to_the_claims_pods_in_planned_order() -> None:
    """Room for one of the two planned pods is left: the first keeps it, the second is planned again."""
    provisioner, cache, _ = cluster()
    cache.upsert("Node", node("general-new", "1900m"))
    cache.upsert("Pod", pod("q", "800m", node="general-new"))
    for name in ("a", "b"):
        cache.upsert("Pod", pod(name, "1"))
    cache.upsert("NodeClaim", recent_claim("general-new", ["uid-a", "uid-b"], "general-new"))
    assert provisioner.displaced() == {("general-new", "uid-b")}
    assert set(provisioner.pending()) == {"ns/b"}


def test_pods_of_a_claim_whose_node_has_not_joined_stay_covered() -> None:
    provisioner, cache, _ = cluster()
    cache.upsert("Pod", pod("p", "1"))
    cache.upsert("NodeClaim", existing_claim("general-new", ["uid-p"], "general-new", state="fresh"))
    assert provisioner.displaced() == set() and provisioner.pending() == {}
