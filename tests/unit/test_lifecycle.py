"""NodeClaim lifecycle against recording fakes: launch → register (nominate first, then untaint) → initialize."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client

from controller.cache import ClusterCache, Resource
from controller.conditions import conditions_of
from controller.lifecycle import Lifecycle
from controller.provisioner import PODS_ANNOTATION
from model.nodepool import NodeClaim, NodeClaimStatus
from providers.protocol import Launched

READY = {"conditions": [{"type": "Ready", "status": "True"}]}


class Recorder:
    """The API server as the lifecycle writes to it. A nomination is seen in ``cache`` as the watch would show it;
    ``clears``: pods whose next nominations the kube-scheduler clears again at once (a failed scheduling cycle),
    each as many times as listed."""

    def __init__(self, cache: ClusterCache | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.cache = cache
        self.clears: dict[str, int] = {}

    def patch_node(self, name: str, body: Any, **kwargs: Any) -> None:
        self.calls.append(("patch_node", (name, body)))

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any, **apply: Any) -> None:
        self.calls.append(("nominate", (namespace, name, body["status"]["nominatedNodeName"])))
        if self.cache is None:
            return
        pod = next(p for p in self.cache.items("Pod") if p["metadata"]["name"] == name)
        nominated = body["status"]["nominatedNodeName"]
        if self.clears.get(name):
            self.clears[name] -= 1
            nominated = ""
        rv = str(int(pod["metadata"]["resourceVersion"]) + 1)
        self.cache.upsert("Pod", {**pod, "metadata": {**pod["metadata"], "resourceVersion": rv},
                                  "status": {**pod["status"], "nominatedNodeName": nominated}})

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
    recorder = Recorder(cache)
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


def test_joining_nodes_are_all_untainted_before_any_claim_is_recorded_registered() -> None:
    """A pod whose nominated node is still tainted while another node is already schedulable is bound into that
    node's spare room, or fails and loses its nomination: the untaints go out together, the claims' status writes
    after them."""
    lifecycle, cache, recorder = setup()
    lifecycle.reconcile_all()
    for name in ("c2", "c3"):
        cache.upsert("NodeClaim", {"metadata": {"name": name, "uid": f"{name}-uid", "resourceVersion": "5",
                                                "annotations": {PODS_ANNOTATION: "[]"}}})
    lifecycle.reconcile_all()  # launches c2 and c3
    tainted = {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]}
    for name in ("c1", "c2", "c3"):
        cache.upsert("Node", {"metadata": {"name": name, "resourceVersion": "2", "labels": {}}, "spec": tainted,
                              "status": READY})
    recorder.calls.clear()
    assert lifecycle.reconcile_all() == 3
    steps = [(kind, args[0]) for kind, args in recorder.calls if kind in ("patch_node", "status")]
    assert len(steps) == 6
    assert sorted(name for kind, name in steps[:3] if kind == "patch_node") == ["c1", "c2", "c3"]
    assert sorted(name for kind, name in steps[3:] if kind == "status") == ["c1", "c2", "c3"]
    for kind, args in recorder.calls:
        if kind == "patch_node":
            assert {"op": "replace", "path": "/spec/taints", "value": []} in args[1]
    registered = {c["metadata"]["name"]: conditions_of(c).get("Registered", {}).get("status")
                  for c in cache.items("NodeClaim")}
    assert registered == {"c1": "True", "c2": "True", "c3": "True"}


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


def _new_claim(cache: ClusterCache) -> None:
    """A new batch's claim, just created by the provisioner (not launched yet)."""
    from datetime import UTC, datetime

    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cache.upsert("NodeClaim", {"metadata": {"name": "c2", "uid": "c2-uid", "resourceVersion": "5",
                                            "creationTimestamp": created, "annotations": {PODS_ANNOTATION: "[]"}}})


def _registers_with_c2(lifecycle: Lifecycle, cache: ClusterCache, recorder: Recorder) -> None:
    """c2 launches, its Node turns Ready, and c1 and c2 register together, c1's pods nominated first."""
    lifecycle.reconcile_all()  # c2 launched
    cache.upsert("Node", {"metadata": {"name": "c2", "resourceVersion": "3", "labels": {}}, "spec": {},
                          "status": READY})
    recorder.calls.clear()
    assert lifecycle.reconcile_all() == 2  # both registered, together
    kinds = [(kind, args[1] if kind == "nominate" else args[0]) for kind, args in recorder.calls]
    assert sorted(name for kind, name in kinds if kind == "patch_node") == ["c1", "c2"]
    assert all(kinds.index(("nominate", uid)) < kinds.index(("patch_node", "c1")) for uid in ("u1", "u2")
               if ("nominate", uid) in kinds)
    pods = {p["metadata"]["name"]: p for p in cache.items("Pod")}
    assert {name: p["status"].get("nominatedNodeName") for name, p in pods.items()} == {"u1": "c1", "u2": "c1"}


def test_a_claim_created_while_the_pods_are_quiet_holds_the_nominations_back() -> None:
    """A claim the provisioner creates while the joining claims' pods are waiting to be quiet defers the
    registration to its launch: the nominations are not written now, since every cycle its joining node starts
    would clear them while they wait. All register together later, nominated first."""
    import threading

    lifecycle, cache, recorder = launched_and_ready()

    def provisioner() -> None:  # created 0.1 s into the quiet wait (NOMINATION_QUIET_SECONDS: 0.5 s)
        time.sleep(0.1)
        _new_claim(cache)

    thread = threading.Thread(target=provisioner)
    thread.start()
    lifecycle.reconcile_all()
    thread.join()
    assert not any(kind in ("nominate", "patch_node") for kind, _ in recorder.calls)  # nothing exposed, c1 waits
    _registers_with_c2(lifecycle, cache, recorder)


def test_registration_waits_while_the_provisioner_decides_a_batch() -> None:
    """A batch being decided may create NodeClaims (their nodes join these) or join pods to these claims (they
    need nominations first): the registration, nominations included, waits for the decision to end."""
    lifecycle, _, recorder = launched_and_ready()
    deciding = [True]
    lifecycle._deciding = lambda: deciding[0]
    lifecycle.reconcile_all()
    assert not any(kind in ("nominate", "patch_node") for kind, _ in recorder.calls)
    deciding[0] = False
    lifecycle.reconcile_all()
    kinds = [(kind, args[1] if kind == "nominate" else args[0]) for kind, args in recorder.calls]
    assert ("patch_node", "c1") in kinds
    assert kinds.index(("nominate", "u1")) < kinds.index(("patch_node", "c1"))


def test_registration_waits_for_the_batch_gathering_as_the_claims_launched_and_has_it_decided_now() -> None:
    """Pods gathering in the window open as the joining claims launched are decided before the nodes are
    untainted (they join the in-flight claims and are nominated with the rest), and at once rather than when the
    window would close. A window opened later is a stream of new pods: the nodes do not wait for it."""
    from controller.lifecycle import GATHERED_AT_LAUNCH

    lifecycle, _, recorder = launched_and_ready()
    window = {"age": 5.0}  # opened before c1 launched
    asked: list[bool] = []
    lifecycle._gathering = lambda: window["age"]
    lifecycle._decide_now = lambda: asked.append(True)
    lifecycle.reconcile_all()
    assert not any(kind in ("nominate", "patch_node") for kind, _ in recorder.calls)
    assert asked  # the batch is decided now, not at its idle or maximum
    time.sleep(GATHERED_AT_LAUNCH + 0.2)
    window["age"] = 0.1  # that batch was decided; the one open now opened more than a second after the launch
    asked.clear()
    lifecycle.reconcile_all()
    kinds = [(kind, args[1] if kind == "nominate" else args[0]) for kind, args in recorder.calls]
    assert ("patch_node", "c1") in kinds and not asked
    assert kinds.index(("nominate", "u1")) < kinds.index(("patch_node", "c1"))


def test_a_claim_created_while_the_pods_are_nominated_registers_with_the_others() -> None:
    """The provisioner may create a claim while the joining claims' pods are being nominated: untainting then
    would hand its pods, not yet nominated, the room left on the joining nodes. Those nodes wait for it, and
    register with it once its node is Ready."""
    lifecycle, cache, recorder = launched_and_ready()
    nominate = recorder.patch_namespaced_pod_status

    def nominate_then_provision(name: str, namespace: str, body: Any, **apply: Any) -> None:
        nominate(name, namespace, body, **apply)
        if not any(c["metadata"]["name"] == "c2" for c in cache.items("NodeClaim")):
            _new_claim(cache)  # created while the first nomination is written

    recorder.patch_namespaced_pod_status = nominate_then_provision  # type: ignore[method-assign]
    lifecycle.reconcile_all()
    assert ("nominate", "u1") in [(kind, args[1]) for kind, args in recorder.calls if kind == "nominate"]
    assert not any(kind == "patch_node" for kind, _ in recorder.calls)  # c1 waits for c2
    _registers_with_c2(lifecycle, cache, recorder)


def launched_and_ready(allocatable: str = "3900m") -> tuple[Lifecycle, ClusterCache, Recorder]:
    """c1 launched, its Node joined (tainted) and Ready; its pods u1, u2 (1 CPU each) pending and not nominated."""
    lifecycle, cache, recorder = setup()
    for uid in ("u1", "u2"):
        cache.upsert("Pod", {"metadata": {"name": uid, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
                             "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                             "status": {"phase": "Pending"}})
    lifecycle.reconcile_all()
    cache.upsert("Node", {"metadata": {"name": "c1", "resourceVersion": "3", "labels": {}},
                          "spec": {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
                          "status": {**READY, "allocatable": {"cpu": allocatable, "memory": "8Gi", "pods": "110"}}})
    recorder.calls.clear()
    return lifecycle, cache, recorder


def test_nominations_wait_for_quiet_pods_and_are_seen_before_the_node_is_untainted() -> None:
    """kube-scheduler 1.36.3 clears a pod's nomination in a failed scheduling cycle (preemption finds no
    candidate: pkg/scheduler/framework/preemption/preemption.go) and each clear requeues every pending pod. So the
    pods are nominated only once they have been quiet (the scheduler is not retrying them), the untaint waits
    until the watch shows the nominations, and one the scheduler cleared meanwhile is written once more."""
    from controller.lifecycle import NOMINATION_QUIET_SECONDS

    lifecycle, cache, recorder = launched_and_ready()
    recorder.clears["u1"] = 1
    started = time.monotonic()
    assert lifecycle.reconcile_all() == 1
    kinds = [(kind, args[1] if kind == "nominate" else args[0]) for kind, args in recorder.calls]
    assert kinds.count(("nominate", "u1")) == 2 and kinds.count(("nominate", "u2")) == 1
    assert kinds.index(("patch_node", "c1")) > max(i for i, k in enumerate(kinds) if k[0] == "nominate")
    assert time.monotonic() - started >= NOMINATION_QUIET_SECONDS
    pods = {p["metadata"]["name"]: p for p in cache.items("Pod")}
    assert {name: p["status"]["nominatedNodeName"] for name, p in pods.items()} == {"u1": "c1", "u2": "c1"}


def test_registration_waits_a_bounded_time_for_nominations() -> None:
    """Pods that keep changing and a scheduler that clears every nomination hold the registration back for a
    bounded time only: the node is untainted (nothing livelocks on the scheduler's behaviour)."""
    import threading

    from controller.lifecycle import NOMINATION_QUIET_WAIT, NOMINATION_SEEN_WAIT

    lifecycle, cache, recorder = launched_and_ready()
    recorder.clears["u1"] = 10_000
    stop = threading.Event()

    def churn() -> None:  # the scheduler updating u2's status over and over
        while not stop.wait(0.1):
            u2 = next(p for p in cache.items("Pod") if p["metadata"]["name"] == "u2")
            version = str(int(u2["metadata"]["resourceVersion"]) + 1)
            cache.upsert("Pod", {**u2, "metadata": {**u2["metadata"], "resourceVersion": version}})

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        assert lifecycle.reconcile_all() == 1
    finally:
        stop.set()
        thread.join()
    assert time.monotonic() - started < NOMINATION_QUIET_WAIT + NOMINATION_SEEN_WAIT + 1.0
    assert ("patch_node", "c1") in [(kind, args[0]) for kind, args in recorder.calls]


def test_a_cleared_nomination_is_put_back_only_where_the_pod_still_fits() -> None:
    """After registration the scheduler may clear a nomination (it tried the pod while another node was still
    tainted); nodeplan puts it back while the node has room for the pod. Where another pod took that room,
    the nomination would only be tried and cleared again, so it is not written."""
    for allocatable, expected in (("3900m", ["u1"]), ("2500m", [])):
        lifecycle, cache, recorder = launched_and_ready(allocatable)
        assert lifecycle.reconcile_all() == 1  # nominated and registered
        cache.upsert("Node", {**cache.items("Node")[0], "spec": {"taints": []}})
        cache.upsert("Pod", {"metadata": {"name": "other", "namespace": "ns", "uid": "other", "resourceVersion": "1"},
                             "spec": {"nodeName": "c1", "containers": [
                                 {"name": "c", "resources": {"requests": {"cpu": "1500m"}}}]},
                             "status": {"phase": "Running"}})
        u1 = next(p for p in cache.items("Pod") if p["metadata"]["name"] == "u1")
        cache.upsert("Pod", {**u1, "metadata": {**u1["metadata"], "resourceVersion": "10"},
                             "status": {"phase": "Pending"}})  # cleared by the scheduler
        recorder.calls.clear()
        lifecycle.reconcile_all()
        assert [args[1] for kind, args in recorder.calls if kind == "nominate"] == expected, allocatable


def test_the_pods_the_scheduler_retries_first_are_nominated_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler's queue orders pods of equal priority by the time of their last failed attempt
    (pkg/scheduler/framework/plugins/queuesort: PrioritySort.Less), which is the pod's last update: the pod
    updated longest ago is retried first after a requeue, so it is nominated last and is exposed the least."""
    import controller.lifecycle as lifecycle_module

    monkeypatch.setattr(lifecycle_module, "NOMINATION_WRITERS", 1)  # one writer: the calls come in their order
    lifecycle, cache, recorder = launched_and_ready()
    u1 = next(p for p in cache.items("Pod") if p["metadata"]["name"] == "u1")
    cache.upsert("Pod", {**u1, "metadata": {**u1["metadata"], "resourceVersion": "9"}})  # failed more recently
    lifecycle.reconcile_all()
    assert [args[1] for kind, args in recorder.calls if kind == "nominate"] == ["u1", "u2"]


def test_new_claims_are_launched_concurrently() -> None:
    """A batch's claims launch at once, as Karpenter's lifecycle reconciles NodeClaims concurrently: a launcher
    whose calls each wait for all three to be in flight would time out if they were made one after another."""
    arrived = threading.Barrier(3, timeout=5.0)

    class WaitingLauncher(FakeLauncher):
        def create(self, claim: NodeClaim) -> Launched:
            arrived.wait()  # BrokenBarrierError after 5 s unless the three launches overlap
            return super().create(claim)

    lifecycle, cache, _ = setup()
    lifecycle._launcher = WaitingLauncher()
    for name in ("c2", "c3"):
        cache.upsert("NodeClaim", {"metadata": {"name": name, "uid": f"{name}-uid", "resourceVersion": "5",
                                                "annotations": {PODS_ANNOTATION: "[]"}}})
    assert lifecycle.reconcile_all() == 3
    assert sorted(c["metadata"]["name"] for c in cache.items("NodeClaim")
                  if conditions_of(c).get("Launched", {}).get("status") == "True") == ["c1", "c2", "c3"]
