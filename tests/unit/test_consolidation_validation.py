"""The consolidation decision's re-check after its validation wait (``controller.disruption_validation``), with
Karpenter's meaning (``pkg/controllers/disruption/validation.go`` and ``helpers.go`` ``SimulateScheduling``,
v1.15.0): the candidates are re-computed (candidate filter, budgets) and the pods *now* on them are
re-scheduled onto the cluster *as it is now*; the command goes ahead if every pod lands without more or other
replacements than it launches. Pods arriving on a receiving node matter only through the room they take;
pods arriving on a removed node are moved with the others when they fit somewhere (they are among the
candidate's reschedulable pods the simulation places); ``consolidateAfter`` restarts with a pod event on the
node (Karpenter's ``Consolidatable`` condition), so an arrival on a removed node blocks it while that runs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from bench.fragmented import split_cluster
from controller.cache import ClusterCache
from controller.disruption import Decision, Disruption
from tests.disruption.helpers import ago, node, on_demand_pool, pinned, running
from tests.unit.test_disruption_controller import FakeWriter, _initialized, cluster, disruption


def _capture(d: Disruption, taken: list[Decision]) -> None:
    """Record each decision the pass takes (before its re-check) in ``taken``, so a test can act on it."""
    decide = d._decision

    def recorded(*args: Any) -> Decision:
        taken.append(decide(*args))
        return taken[-1]

    d._decision = recorded  # type: ignore[method-assign]


def _add(cache: ClusterCache, *pods: dict[str, Any]) -> Callable[[], None]:
    def change() -> None:
        for p in pods:
            p = copy.deepcopy(p)
            p["metadata"]["uid"] = f"uid-{p['metadata']['name']}"
            cache.upsert("Pod", p)
    return change


def _keeper_and_target(**pool: Any) -> list[dict[str, Any]]:
    """keeper (c-4x: 3.9 cpu allocatable) runs a pinned 1-cpu pod; target (c-4x) runs the 1-cpu ``t-pod``. The
    only saving: remove target, ``t-pod`` onto keeper (2.9 cpu free there)."""
    return [on_demand_pool(**pool), node("keeper"), pinned("keep-pod", "keeper"), node("target"),
            running("t-pod", "target")]


def _moves(record: Any) -> dict[str, str]:
    assert record.plan is not None
    return {m.pod: m.to for m in record.plan.moves}


def test_an_arrival_on_the_receiving_node_that_leaves_room_proceeds() -> None:
    cache = cluster(_keeper_and_target())
    writer = FakeWriter(cache, _initialized)
    d, registry = disruption(cache, writer, before_revalidation=_add(cache, running("late", "keeper", "1500m")))
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert record.removed == ["target"]
    assert _moves(record) == {"default/t-pod": "keeper"}  # 1 + 1.5 + 1 cpu of keeper's 3.9
    assert writer.calls == [("taint", "target"), ("delete", "claim-target")]
    assert registry.get_sample_value("karpenter_voluntary_disruption_failed_validations_total",
                                     {"consolidation_type": "single"}) is None


def test_an_arrival_that_takes_the_room_abandons_the_decision() -> None:
    cache = cluster(_keeper_and_target())
    writer = FakeWriter(cache, _initialized)
    d, registry = disruption(cache, writer, before_revalidation=_add(cache, running("late", "keeper", "2500m")))
    record = d.step()
    assert record.outcome == "abandoned"
    # 1 + 2.5 cpu on keeper leaves 0.4: t-pod would need a new node, which a delete decision does not launch
    assert record.detail.startswith("pod default/t-pod fits nowhere in the cluster as it is now")
    assert writer.calls == []
    assert registry.get_sample_value("nodeplan_disruption_abandoned_total", {"cause": "validation"}) == 1
    assert registry.get_sample_value("karpenter_voluntary_disruption_failed_validations_total",
                                     {"consolidation_type": "single"}) == 1


def test_when_the_planned_room_is_taken_the_pod_goes_where_room_is_left() -> None:
    """Karpenter re-simulates from scratch: the command holds if the pod fits on another node, even though
    the one first planned for it filled up."""
    objects = [*_keeper_and_target(), node("keeper-2"), pinned("keep-pod-2", "keeper-2")]
    cache = cluster(objects)
    writer = FakeWriter(cache, _initialized)
    planned: list[Decision] = []

    def fill_the_receiver() -> None:
        (receiver,) = {m.to for m in planned[0].plan.moves}
        _add(cache, running("late", receiver, "2500m"))()

    d, _ = disruption(cache, writer, before_revalidation=fill_the_receiver)
    _capture(d, planned)
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert record.removed == ["target"]
    first = planned[0].plan.moves[0].to
    assert first in ("keeper", "keeper-2")
    assert _moves(record) == {"default/t-pod": ({"keeper", "keeper-2"} - {first}).pop()}


def test_new_pods_on_a_removed_node_that_fit_elsewhere_move_with_the_others() -> None:
    # consolidateAfter 0s: a pod event does not make the node wait (Karpenter: Consolidatable at once)
    cache = cluster(_keeper_and_target(consolidate_after="0s"))
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer,
                      before_revalidation=_add(cache, running("newcomer", "target", "500m", started=ago(seconds=5))))
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert _moves(record) == {"default/t-pod": "keeper", "default/newcomer": "keeper"}
    assert record.plan is not None and record.plan.remove[0].evictions == 2
    assert record.plan.disruption.evictions == 2


def test_new_pods_on_a_removed_node_that_fit_nowhere_abandon_the_decision() -> None:
    cache = cluster(_keeper_and_target(consolidate_after="0s"))
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer,
                      before_revalidation=_add(cache, running("newcomer", "target", "2", started=ago(seconds=5))))
    record = d.step()
    assert record.outcome == "abandoned"
    # 1 + 1 + 2 cpu onto keeper's 3.9: one of the two must stay, so target cannot go without a new node
    assert "fits nowhere in the cluster as it is now" in record.detail
    assert writer.calls == []


def test_a_pod_event_on_a_removed_node_restarts_consolidate_after() -> None:
    cache = cluster(_keeper_and_target())  # consolidateAfter 30s
    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer,
                      before_revalidation=_add(cache, running("newcomer", "target", "100m", started=ago(seconds=5))))
    record = d.step()
    assert record.outcome == "abandoned"
    assert record.detail.startswith("node target is no longer a candidate: consolidateAfter 30s not elapsed")
    assert writer.calls == []


def test_a_removed_node_that_became_do_not_disrupt_abandons_the_decision() -> None:
    cache = cluster(_keeper_and_target())

    def annotate() -> None:
        target = copy.deepcopy(cache.informers["Node"].get("target"))
        assert target is not None
        target["metadata"].setdefault("annotations", {})["karpenter.sh/do-not-disrupt"] = "true"
        cache.upsert("Node", target)

    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer, before_revalidation=annotate)
    record = d.step()
    assert (record.outcome, record.detail) == (
        "abandoned", "node target is no longer a candidate: node has karpenter.sh/do-not-disrupt")
    assert writer.calls == []


def test_a_replacement_the_pods_no_longer_need_abandons_the_decision() -> None:
    """Karpenter: a re-simulation that needs fewer new nodes than the command launches means a cheaper
    command exists now; it is not carried out. Here big-0's sidecar leaves, so the c-2x planned for it would
    launch empty."""
    cache = cluster(split_cluster())

    def sidecar_leaves() -> None:
        gone = cache.informers["Pod"].get("default/sidecar-0")
        assert gone is not None
        cache.informers["Pod"]._apply("DELETED", gone)

    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer, before_revalidation=sidecar_leaves)
    record = d.step()
    assert record.plan is not None and len(record.plan.node_claims) == 2
    assert record.outcome == "abandoned"
    assert "would now hold no pod: a cheaper decision exists" in record.detail
    assert writer.calls == []



def test_a_removed_node_that_emptied_meanwhile_is_still_removed() -> None:
    """Empty and Underutilized are both consolidation: the decision stands, with nothing left to move (nodeplan
    reads consolidateAfter from the pods a node runs, so a departure does not restart it)."""
    cache = cluster(_keeper_and_target())

    def t_pod_leaves() -> None:
        gone = cache.informers["Pod"].get("default/t-pod")
        assert gone is not None
        cache.informers["Pod"]._apply("DELETED", gone)

    writer = FakeWriter(cache, _initialized)
    d, _ = disruption(cache, writer, before_revalidation=t_pod_leaves)
    record = d.step()
    assert record.outcome == "disrupted", record.detail
    assert record.plan is not None
    assert [(r.node, r.reason, r.evictions) for r in record.plan.remove] == [("target", "Empty", 0)]
    assert record.plan.moves == []
