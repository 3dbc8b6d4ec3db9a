"""The controller's consolidation passes (``controller.disruption``) against a fake writer and a hand-filled cache:
validation abandons a decision the cluster no longer supports, a failed replacement untaints the candidates and
deletes nothing, a decision that holds taints, launches, waits for Initialized, then deletes the candidates."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bench.fragmented import split_cluster
from controller.cache import ClusterCache, Resource
from controller.disruption import (
    Disruption,
    DisruptionMetrics,
    DisruptionOptions,
    Writer,
    snapshot_source,
)
from controller.events import EventRecorder
from model import labels as wk
from providers.kwok import kwok_catalog
from tests.disruption.helpers import NOW, half_empty, keeper_and_target, on_demand_pool, pdb, running

KINDS = ("Pod", "Node", "NodeClaim", "NodePool", "DaemonSet", "PodDisruptionBudget")


class FakeWriter:
    """Records every write; ``on_create`` decides what a created replacement looks like in the cache."""

    def __init__(self, cache: ClusterCache, on_create: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
        self.cache = cache
        self.on_create = on_create
        self.calls: list[tuple[str, str]] = []

    def taint(self, node: str) -> None:
        self.calls.append(("taint", node))
        raw = copy.deepcopy(self.cache.informers["Node"].get(node))
        assert raw is not None
        raw.setdefault("spec", {}).setdefault("taints", []).append({"key": wk.DISRUPTED_TAINT, "effect": "NoSchedule"})
        self.cache.upsert("Node", raw)

    def untaint(self, node: str) -> None:
        self.calls.append(("untaint", node))
        raw = copy.deepcopy(self.cache.informers["Node"].get(node))
        if raw is not None:
            raw["spec"]["taints"] = [t for t in raw["spec"].get("taints") or [] if t["key"] != wk.DISRUPTED_TAINT]
            self.cache.upsert("Node", raw)

    def create_claim(self, body: dict[str, Any]) -> None:
        self.calls.append(("create", body["metadata"]["name"]))
        stored = self.on_create(copy.deepcopy(body))
        if stored is not None:
            self.cache.upsert("NodeClaim", stored)

    def delete_claim(self, name: str) -> None:
        self.calls.append(("delete", name))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


def _initialized(body: dict[str, Any]) -> dict[str, Any]:
    body["status"] = {"conditions": [{"type": "Launched", "status": "True"},
                                     {"type": "Initialized", "status": "True"}]}
    return body


def _launch_failed(body: dict[str, Any]) -> dict[str, Any]:
    body["status"] = {"conditions": [{"type": "Launched", "status": "False", "reason": "InsufficientCapacity"}]}
    return body


def _never_initialized(body: dict[str, Any]) -> dict[str, Any]:
    body["status"] = {"conditions": [{"type": "Launched", "status": "True"}]}
    return body


def _claim_for(node: dict[str, Any]) -> dict[str, Any]:
    name = node["metadata"]["name"]
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": f"claim-{name}", "uid": f"uid-{name}", "labels": dict(node["metadata"]["labels"])},
            "spec": {"requirements": []},
            "status": {"nodeName": name, "conditions": [{"type": "Launched", "status": "True"},
                                                        {"type": "Registered", "status": "True"},
                                                        {"type": "Initialized", "status": "True"}]}}


def cluster(objects: list[dict[str, Any]]) -> ClusterCache:
    """A cache holding ``objects`` and, for every Node, the NodeClaim that launched it."""
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in KINDS})
    for obj in objects:
        obj = copy.deepcopy(obj)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        cache.upsert(obj["kind"], obj)
        if obj["kind"] == "Node":
            cache.upsert("NodeClaim", _claim_for(obj))
    return cache


def disruption(cache: ClusterCache, writer: Writer, *, before_revalidation: Callable[[], None] | None = None,
               steerer: Any = None, **options: Any) -> tuple[Disruption, CollectorRegistry]:
    """A ``Disruption`` over ``cache``; ``before_revalidation`` runs once, between the decision and its re-check."""

    def objects() -> list[dict[str, Any]]:
        return [o for kind in ("NodePool", "Node", "NodeClaim", "DaemonSet", "Pod") for o in cache.items(kind)]

    build = snapshot_source(objects, cache, kwok_catalog)
    calls = {"n": 0}

    def snapshot() -> Any:
        calls["n"] += 1
        if calls["n"] == 2 and before_revalidation is not None:
            before_revalidation()
        return build()

    registry = CollectorRegistry()
    opts = DisruptionOptions(**{"time_limit": 3.0, "validation_wait": 0.0, "replacement_timeout": 5.0, **options})
    d = Disruption(cache, writer, snapshot, options=opts, events=EventRecorder(None),
                   metrics=DisruptionMetrics(registry), now=lambda: NOW, steerer=steerer)
    return d, registry


def test_a_decision_that_holds_taints_then_deletes_the_candidate() -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    writer = FakeWriter(cache, _initialized)
    d, registry = disruption(cache, writer)
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert record.removed == ["target"]
    assert writer.calls == [("taint", "target"), ("delete", "claim-target")]
    assert registry.get_sample_value("karpenter_voluntary_disruption_decisions_total",
                                     {"decision": "delete", "reason": "Underutilized",
                                      "consolidation_type": "single"}) == 1
    assert registry.get_sample_value("karpenter_nodeclaims_disrupted_total",
                                     {"reason": "Underutilized", "nodepool": "default",
                                      "capacity_type": "on-demand", "consolidation_policy": "WhenEmptyOrUnderutilized",
                                      "termination_mode": "graceful"}) == 1


def test_replacements_are_awaited_before_anything_is_deleted() -> None:
    cache = cluster(split_cluster())
    order: list[str] = []

    def create(body: dict[str, Any]) -> dict[str, Any]:
        order.append("create")
        return _initialized(body)

    writer = FakeWriter(cache, create)
    d, registry = disruption(cache, writer)
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert len(record.replacements) == 2
    kinds = writer.kinds()
    assert kinds == ["taint", "create", "create", "delete"]
    assert writer.calls[-1] == ("delete", "claim-big-0")
    # replacement names are a function of the decision: the same decision again names the same claims
    created = [name for kind, name in writer.calls if kind == "create"]
    again = cluster(split_cluster())
    writer2 = FakeWriter(again, _initialized)
    disruption(again, writer2)[0].step()
    assert [name for kind, name in writer2.calls if kind == "create"] == created
    body_pool = {c["metadata"]["name"]: c for c in cache.items("NodeClaim")}[created[0]]
    assert body_pool["metadata"]["annotations"]["nodeplan.io/replaces"] == "big-0"
    assert body_pool["metadata"]["finalizers"] == ["karpenter.sh/termination"]
    assert registry.get_sample_value("karpenter_voluntary_disruption_decisions_total",
                                     {"decision": "replace", "reason": "Underutilized",
                                      "consolidation_type": "single"}) == 1


@pytest.mark.parametrize("created", [_launch_failed, _never_initialized, lambda body: None],
                         ids=["launch-failed", "timeout", "gone"])
def test_a_failed_replacement_untaints_and_deletes_only_the_replacements(
        created: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
    cache = cluster(split_cluster())
    writer = FakeWriter(cache, created)
    d, registry = disruption(cache, writer, replacement_timeout=0.5)
    record = d.step()
    assert record.outcome == "failed", record.detail
    replacements = set(record.replacements)
    assert len(replacements) == 2
    deleted = {name for kind, name in writer.calls if kind == "delete"}
    assert deleted == replacements  # the candidate's claim is untouched: nothing was evicted
    assert ("untaint", "big-0") in writer.calls
    assert writer.kinds().index("untaint") > writer.kinds().index("create")
    node = cache.informers["Node"].get("big-0")
    assert node is not None and not any(t["key"] == wk.DISRUPTED_TAINT for t in node["spec"].get("taints") or [])
    assert registry.get_sample_value("nodeplan_disruption_abandoned_total", {"cause": "replacement"}) == 1
    assert registry.get_sample_value("karpenter_voluntary_disruption_decisions_total",
                                     {"decision": "replace", "reason": "Underutilized",
                                      "consolidation_type": "single"}) is None


def _add_pod_to_every_node(cache: ClusterCache) -> Callable[[], None]:
    def change() -> None:
        for node in cache.items("Node"):
            name = node["metadata"]["name"]
            cache.upsert("Pod", running(f"late-{name}", name, "100m"))
    return change


def _budget_to_zero(cache: ClusterCache) -> Callable[[], None]:
    def change() -> None:
        pool = copy.deepcopy(cache.items("NodePool")[0])
        pool["spec"]["disruption"]["budgets"] = [{"nodes": "0"}]
        cache.upsert("NodePool", pool)
    return change


def _pdb_exhausted(cache: ClusterCache) -> Callable[[], None]:
    def change() -> None:
        cache.upsert("PodDisruptionBudget", pdb("t", {"app": "t-pod"}, disruptions_allowed=0))
    return change


def _target_annotated(cache: ClusterCache) -> Callable[[], None]:
    def change() -> None:
        node = copy.deepcopy(cache.informers["Node"].get("target"))
        assert node is not None
        node["metadata"].setdefault("annotations", {})[wk.DO_NOT_DISRUPT] = "true"
        cache.upsert("Node", node)
    return change


def _pod_pending(cache: ClusterCache) -> Callable[[], None]:
    def change() -> None:
        pending = running("newcomer", "", "100m")
        pending["spec"].pop("nodeName", None)
        pending["status"] = {"phase": "Pending"}
        cache.upsert("Pod", pending)
    return change


@pytest.mark.parametrize(("change", "why"), [
    (_budget_to_zero, "budget now allows 0"),
    (_pdb_exhausted, "no longer a candidate: PodDisruptionBudget default/t allows 0"),
    (_target_annotated, "no longer a candidate"),
    (_pod_pending, "pending pod"),
], ids=["budget", "pdb", "do-not-disrupt", "not-quiet"])
def test_validation_abandons_a_decision_the_cluster_no_longer_supports(
        change: Callable[[ClusterCache], Callable[[], None]], why: str) -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    writer = FakeWriter(cache, _initialized)
    d, registry = disruption(cache, writer, before_revalidation=change(cache))
    record = d.step()
    assert record.outcome == "abandoned"
    assert why in record.detail
    assert record.plan is not None and [r.node for r in record.plan.remove] == ["target"]
    assert writer.calls == []  # nothing tainted, launched or deleted
    assert registry.get_sample_value("nodeplan_disruption_abandoned_total", {"cause": "validation"}) == 1


def test_pods_that_arrive_and_still_fit_do_not_abandon_the_decision() -> None:
    """Karpenter re-simulates the candidates' pods on the cluster as it is now (``validation.go``): a pod more
    on every node, the removed one included, still fits, so the decision goes ahead with the newcomer moved."""
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer, before_revalidation=_add_pod_to_every_node(cache))
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert record.plan is not None
    assert {m.pod: m.to for m in record.plan.moves} == {"default/t-pod": "keeper", "default/late-target": "keeper"}


def test_pdb_allowance_is_rechecked_across_every_removed_node() -> None:
    # three c-4x nodes with one 1-cpu "web" pod each: one node holds all three, so two are removed (2 evictions)
    cache = cluster([on_demand_pool(), *half_empty(3, labels={"app": "web"})])

    def tighter() -> None:  # one eviction allowed: each node alone is still a candidate, the pair is not
        cache.upsert("PodDisruptionBudget", pdb("web", {"app": "web"}, disruptions_allowed=1))

    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer, before_revalidation=tighter)
    record = d.step()
    assert record.plan is not None and len(record.plan.remove) == 2
    assert record.outcome == "abandoned"
    assert record.detail == "PodDisruptionBudget default/web now allows 1 eviction(s), the decision needs 2"
    assert writer.calls == []


def test_an_unrelated_change_does_not_abandon_the_decision() -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])

    def unrelated() -> None:
        cache.upsert("PodDisruptionBudget", pdb("other", {"app": "nobody"}, disruptions_allowed=0))

    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer, before_revalidation=unrelated)
    assert d.step().outcome == "disrupted"


def test_pods_that_leave_during_the_validation_wait_do_not_abandon_the_decision() -> None:
    """A scale-down still finishing deletes pods under the decision: one fewer eviction on the removed node and
    more room on the receiving one only ask less of it (Karpenter re-simulates and keeps such a decision)."""
    cache = cluster([on_demand_pool(), *keeper_and_target(), running("t-pod-2", "target", "100m")])

    def scaled_down() -> None:
        gone = cache.informers["Pod"].get("default/t-pod-2")
        assert gone is not None
        cache.informers["Pod"]._apply("DELETED", gone)
        assert cache.informers["Pod"].get("default/t-pod-2") is None

    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer, before_revalidation=scaled_down)
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert record.removed == ["target"]


def test_no_pass_while_the_cluster_is_busy() -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer)
    launching = _claim_for({"metadata": {"name": "fresh", "labels": {}}})
    launching["status"]["conditions"] = [{"type": "Launched", "status": "True"}]
    cache.upsert("NodeClaim", launching)
    record = d.step()
    assert (record.outcome, record.detail) == ("busy", "NodeClaim claim-fresh is launching")
    assert record.plan is None and writer.calls == []
    launching["status"]["conditions"].append({"type": "Initialized", "status": "True"})
    deleting = copy.deepcopy(cache.informers["NodeClaim"].get("claim-keeper"))
    assert deleting is not None
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    cache.upsert("NodeClaim", launching)
    cache.upsert("NodeClaim", deleting)
    assert d.step().detail == "NodeClaim claim-keeper is terminating"


def test_pods_the_last_batch_could_not_place_do_not_hold_consolidation_back() -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    _pod_pending(cache)()
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer)
    assert d.step().outcome == "busy"
    d._unplaceable = lambda: {"default/newcomer"}
    assert d.step().outcome == "disrupted"


def _busy_pass(cache: ClusterCache, d: Disruption) -> None:
    """One pass while a pod is pending: busy, so the pass does nothing but its clean-up."""
    pending = running("p", "", "100m")
    pending["spec"].pop("nodeName", None)
    pending["status"] = {"phase": "Pending"}
    cache.upsert("Pod", pending)
    assert d.step().outcome == "busy"


def test_a_stale_disrupted_taint_is_removed() -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    writer = FakeWriter(cache, _initialized)
    writer.taint("keeper")
    foreign = {"kind": "Node", "metadata": {"name": "foreign", "labels": {}},
               "spec": {"taints": [{"key": wk.DISRUPTED_TAINT, "effect": "NoSchedule"}]}}
    cache.upsert("Node", foreign)  # no NodeClaim of ours: someone else's taint, left alone
    writer.calls.clear()
    d, _ = disruption(cache, writer)
    _busy_pass(cache, d)
    assert writer.calls == [("untaint", "keeper")]


def test_a_terminating_pod_on_a_candidate_is_not_moved() -> None:
    # seen in the e2e: a pod still terminating (deletionTimestamp) on a candidate node crashed the model, whose
    # movable copies leave terminating pods out; it is leaving anyway, so it is not the decision's to move
    leaving = running("leaving", "target", "500m")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-28T23:59:00Z"
    cache = cluster([on_demand_pool(), *keeper_and_target(), leaving])
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer)
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert record.plan is not None and {m.pod for m in record.plan.moves} == {"default/t-pod"}


def test_every_decision_is_on_record_as_events() -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    keeper = copy.deepcopy(cache.informers["Node"].get("keeper"))
    assert keeper is not None
    keeper["metadata"]["annotations"] = {wk.DO_NOT_DISRUPT: "true"}
    cache.upsert("Node", keeper)
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer)
    recorded: list[tuple[str, str, str]] = []
    events = d._events
    assert events is not None
    original = events.record

    def record(obj: Any, type_: str, reason: str, message: str) -> None:
        recorded.append((obj["kind"], obj["metadata"]["name"], reason))
        original(obj, type_, reason, message)

    events.record = record  # type: ignore[method-assign]
    assert d.step().outcome == "disrupted"
    assert ("Node", "keeper", "DisruptionBlocked") in recorded
    assert ("Node", "target", "Disrupting") in recorded and ("NodeClaim", "claim-target", "Disrupting") in recorded
    assert ("NodePool", "default", "Consolidated") in recorded


def test_an_api_error_while_launching_rolls_the_candidates_back() -> None:
    cache = cluster(split_cluster())

    def refuse(body: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("HTTP 500")

    writer = FakeWriter(cache, refuse)
    d, registry = disruption(cache, writer)
    with pytest.raises(RuntimeError, match="HTTP 500"):
        d.step()
    assert ("untaint", "big-0") in writer.calls
    assert ("delete", "claim-big-0") not in writer.calls
    assert registry.get_sample_value("nodeplan_disruption_abandoned_total", {"cause": "error"}) == 1


def test_a_node_without_a_nodeclaim_is_not_removed() -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    cache.informers["NodeClaim"]._store.pop("claim-target")
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer)
    record = d.step()
    assert (record.outcome, record.detail) == ("abandoned", "node target has no NodeClaim: not ours to remove")
    assert writer.calls == []


def test_a_lasting_failure_is_reported_once() -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])

    def broken() -> Any:
        raise ValueError("unreadable cluster")

    d = Disruption(cache, FakeWriter(cache, _initialized), broken, options=DisruptionOptions(interval=0.01))
    errors: list[Exception] = []
    stop = threading.Event()
    thread = threading.Thread(target=d.run, args=(stop,), kwargs={"on_error": errors.append})
    thread.start()
    time.sleep(0.3)
    stop.set()
    thread.join(5)
    assert [str(e) for e in errors] == ["unreadable cluster"]


def test_a_cluster_that_has_not_changed_since_a_pass_found_nothing_is_not_solved_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Karpenter's ``IsConsolidated``: a pass that found nothing stands until the cluster changes; the change
    (here the node's do-not-disrupt annotation removed) makes the next pass solve, and it consolidates."""
    import controller.disruption as module
    solved: list[int] = []
    real = module.consolidate

    def counting(*args: Any, **kwargs: Any) -> Any:
        solved.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "consolidate", counting)
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    _target_annotated(cache)()
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer)
    assert d.step().outcome == "nothing" and len(solved) == 1
    second = d.step()
    assert second.outcome == "nothing" and "consolidated" in second.detail and len(solved) == 1
    node = copy.deepcopy(cache.informers["Node"].get("target"))
    assert node is not None
    del node["metadata"]["annotations"][wk.DO_NOT_DISRUPT]
    cache.upsert("Node", node)
    assert d.step().outcome == "disrupted" and len(solved) == 2


def test_a_pass_that_found_nothing_is_solved_again_after_five_minutes() -> None:
    """What no watch shows (prices, capacity) may change: Karpenter's consolidation state resets after 5 min."""
    import controller.disruption as module
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    _target_annotated(cache)()
    d, _ = disruption(cache, FakeWriter(cache, _initialized))
    d.step()
    d._nothing_at -= module.CONSOLIDATED_FOR - 5  # the pass found nothing a little under five minutes ago
    assert "consolidated" in d.step().detail
    d._nothing_at -= 10
    assert "consolidated" not in d.step().detail


def test_a_pass_hands_the_next_the_target_it_stepped_toward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget-free plan a decision stepped toward goes to the next pass (``ConsolidateOptions.target``: its
    next step is taken without solving it again while it holds), with the decision gap, until it is as old as
    a pass that found nothing may stand (what no watch shows may have changed)."""
    import dataclasses

    import controller.disruption as module
    from solver.disruption.target import Target
    handed: list[Target | None] = []
    real = module.consolidate
    target = Target(("target",), {}, (), time.monotonic())

    def recording(snapshot: Any, options: Any) -> Any:
        handed.append(options.target)
        result = real(snapshot, options)
        if result.outcome is not None:
            result.outcome.target = target
        return result

    monkeypatch.setattr(module, "consolidate", recording)
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    d, _ = disruption(cache, FakeWriter(cache, _initialized))
    assert d.step().outcome == "disrupted"
    d.step()
    assert handed == [None, target]
    d._target = target
    assert d._consolidate_options().target is target
    assert d._consolidate_options().gap == DisruptionOptions().decision_gap > 0
    d._target = dataclasses.replace(target, solved_at=time.monotonic() - module.CONSOLIDATED_FOR)
    assert d._consolidate_options().target is None


class RecordingSteerer:
    """A steerer that records into the writer's call list: fences, and evictions the pods' kubelet finishes at
    once with each pod's ReplicaSet binding its replacement to the one node not fenced (or not at all)."""

    def __init__(self, writer: FakeWriter, cache: ClusterCache) -> None:
        self.writer = writer
        self.cache = cache
        self.fenced: set[str] = set()
        self.landed: dict[str, str] = {}

    def fence(self, node: str, on: bool) -> None:
        self.writer.calls.append(("fence" if on else "unfence", node))
        (self.fenced.add if on else self.fenced.discard)(node)

    def evict(self, pod: Mapping[str, Any]) -> str:
        name = pod["metadata"]["name"]
        self.writer.calls.append(("evict", name))
        open_nodes = sorted(str(n["metadata"]["name"]) for n in self.cache.items("Node")
                            if str(n["metadata"]["name"]) not in self.fenced
                            and not any(t["key"] == wk.DISRUPTED_TAINT for t in n["spec"].get("taints") or []))
        self.landed[name] = open_nodes[0] if len(open_nodes) == 1 else ""
        return "evicted"


def test_a_decision_steers_its_evictions_between_the_replacements_launch_and_the_candidates_deletion() -> None:
    """The 1→2 split: both replacements are created and Initialized, then the two pods of ``big-0`` are
    evicted one destination at a time — each while the other replacement is fenced, so each would land on
    the replacement the decision planned it onto — every fence is lifted, and only then is ``big-0``'s
    NodeClaim deleted (its drain finds the pods gone or going)."""
    cache = cluster(split_cluster())

    def joined(body: dict[str, Any]) -> dict[str, Any]:  # Initialized, so its Node is there
        cache.upsert("Node", {"kind": "Node", "metadata": {"name": body["metadata"]["name"], "labels": {}},
                              "spec": {}})
        return _initialized(body)

    writer = FakeWriter(cache, joined)
    steerer = RecordingSteerer(writer, cache)
    d, _ = disruption(cache, writer, steerer=steerer, replacement_timeout=1.0)
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    kinds = writer.kinds()
    assert kinds[:3] == ["taint", "create", "create"] and kinds[-1] == "delete"
    assert sorted(name for kind, name in writer.calls if kind == "evict") == ["batch-0", "sidecar-0"]
    assert kinds.index("evict") > kinds.index("create") and steerer.fenced == set()
    planned = {m.pod.split("/")[1]: m.to for m in record.plan.moves} if record.plan is not None else {}
    created = [name for kind, name in writer.calls if kind == "create"]
    by_planned = dict(zip([c.name for c in record.plan.node_claims], created, strict=True)) if record.plan else {}
    assert steerer.landed == {pod: by_planned[to] for pod, to in planned.items()}


def test_a_stale_steering_taint_is_removed() -> None:
    """A steering taint a pass left behind (the controller stopped mid-way) is lifted by the next pass."""
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    writer = FakeWriter(cache, _initialized)
    steerer = RecordingSteerer(writer, cache)
    keeper = copy.deepcopy(cache.informers["Node"].get("keeper"))
    assert keeper is not None
    keeper["spec"]["taints"] = [{"key": "nodeplan.io/steering", "effect": "PreferNoSchedule"}]
    cache.upsert("Node", keeper)
    d, _ = disruption(cache, writer, steerer=steerer)
    _busy_pass(cache, d)
    assert writer.calls == [("unfence", "keeper")]
