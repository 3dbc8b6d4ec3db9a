"""Which nodes may go: do-not-disrupt, consolidation policies, consolidateAfter, drift, expiration, spot rules,
nominated nodes. Each case is checked against a control that does consolidate."""

from __future__ import annotations

from typing import Any

import pytest

from model import labels as wk
from model.snapshot import parse_objects
from providers.kwok import kwok_catalog
from tests.disruption.helpers import (
    ago,
    balanced_cluster,
    blocked,
    consolidate_verified,
    keeper_and_target,
    node,
    nodepool,
    on_demand_pool,
    pdb,
    pinned,
    price,
    reasons,
    removed,
    running,
)

DND = wk.DO_NOT_DISRUPT
HASH = "karpenter.sh/nodepool-hash"


def test_control_target_is_removed_onto_keeper() -> None:
    result = consolidate_verified([on_demand_pool(), *keeper_and_target()])
    assert reasons(result) == {"target": "Underutilized"}
    assert [(m.pod, m.source, m.to) for m in result.plan.moves] == [("default/t-pod", "target", "keeper")]
    assert result.plan.cost.savings == pytest.approx(price("c-4x"), abs=1e-6)


# --- karpenter.sh/do-not-disrupt -------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["node", "pod"])
def test_do_not_disrupt_true_blocks(where: str) -> None:
    kwargs: dict[str, Any] = {"annotations": {DND: "true"}}
    objects = keeper_and_target(**({"node_kwargs": kwargs} if where == "node" else {"pod_kwargs": kwargs}))
    result = consolidate_verified([on_demand_pool(), *objects])
    assert removed(result) == set()
    assert DND in blocked(result, "target")
    assert (where == "node") == blocked(result, "target").startswith("node has")
    assert result.plan.moves == []


@pytest.mark.parametrize(("where", "since", "protected"), [
    ("pod", {"minutes": 30}, True), ("pod", {"hours": 2}, False),
    ("node", {"minutes": 30}, True), ("node", {"hours": 2}, False),
])
def test_do_not_disrupt_duration_protects_only_while_it_runs(where: str, since: dict[str, float],
                                                             protected: bool) -> None:
    # the duration counts from the pod's status.startTime / the node's creationTimestamp
    if where == "pod":
        objects = keeper_and_target(pod_kwargs={"annotations": {DND: "1h"}, "started": ago(**since)})
    else:
        objects = keeper_and_target(node_kwargs={"annotations": {DND: "1h"}, "created": ago(**since)})
    result = consolidate_verified([on_demand_pool(), *objects])
    if protected:
        assert removed(result) == set() and DND in blocked(result, "target")
    else:
        assert removed(result) == {"target"} and blocked(result, "target") == ""


def test_do_not_disrupt_false_does_not_block() -> None:
    objects = keeper_and_target(pod_kwargs={"annotations": {DND: "false"}})
    assert removed(consolidate_verified([on_demand_pool(), *objects])) == {"target"}


# --- consolidationPolicy and consolidateAfter ----------------------------------------------------------------------

def test_when_empty_removes_only_empty_nodes() -> None:
    objects = [on_demand_pool(policy="WhenEmpty"), *keeper_and_target(), node("empty-0"), node("empty-1")]
    result = consolidate_verified(objects)
    assert reasons(result) == {"empty-0": "Empty", "empty-1": "Empty"}
    assert result.plan.moves == [] and result.plan.node_claims == []
    assert "WhenEmpty" in blocked(result, "target")


@pytest.mark.parametrize(("after", "since", "consolidates"), [
    ("1h", {"minutes": 10}, False), ("1h", {"hours": 2}, True), ("Never", {"days": 20}, False),
])
def test_consolidate_after(after: str, since: dict[str, float], consolidates: bool) -> None:
    objects = [on_demand_pool(consolidate_after=after), *keeper_and_target(pod_kwargs={"started": ago(**since)})]
    result = consolidate_verified(objects)
    assert (removed(result) == {"target"}) is consolidates
    if not consolidates:
        assert "consolidateAfter" in blocked(result, "target")


def test_balanced_refuses_a_move_saving_too_little_for_its_evictions() -> None:
    assert removed(consolidate_verified(balanced_cluster("WhenEmptyOrUnderutilized"))) == {"target"}
    result = consolidate_verified(balanced_cluster("Balanced"))
    assert removed(result) == set(), result.plan.solver.notes


def test_balanced_accepts_a_clearly_good_move() -> None:
    # target: a c-16x running one 1-cpu pod — 80 % of the cost for 50 % of the pods
    objects = [on_demand_pool(policy="Balanced"), node("keeper"), pinned("keep-pod", "keeper"),
               node("target", "c-16x"), running("t-pod", "target")]
    result = consolidate_verified(objects)
    assert removed(result) == {"target"}
    assert result.plan.cost.savings == pytest.approx(price("c-16x"), abs=1e-6)


# --- drift and expiration ------------------------------------------------------------------------------------------

def _lone(pool: dict[str, Any], **node_kwargs: Any) -> list[dict[str, Any]]:
    """One c-4x node whose 3-cpu pod needs a c-4x again: consolidation alone would never touch it."""
    return [pool, node("d-0", **node_kwargs), running("heavy", "d-0", "3")]


def test_no_drift_no_change() -> None:
    result = consolidate_verified(_lone(on_demand_pool(annotations={HASH: "v1"}), annotations={HASH: "v1"}))
    assert removed(result) == set()


def test_drift_by_nodepool_hash_replaces_even_when_not_cheaper() -> None:
    result = consolidate_verified(_lone(on_demand_pool(annotations={HASH: "v2"}), annotations={HASH: "v1"}))
    assert reasons(result) == {"d-0": "Drifted"}
    assert [c.instance_type for c in result.plan.node_claims] == ["c-4x-amd64-linux"]
    assert result.plan.cost.savings == pytest.approx(0.0, abs=1e-6)
    assert "hash" in result.state.state("d-0").detail  # type: ignore[union-attr]


def test_balanced_does_not_hold_back_drift_or_expiration() -> None:
    # Balanced weighs consolidation's savings against its evictions; a drifted node (replaced at no saving) and
    # an expired one go anyway
    result = consolidate_verified(_lone(on_demand_pool(policy="Balanced", annotations={HASH: "v2"}),
                                        annotations={HASH: "v1"}))
    assert reasons(result) == {"d-0": "Drifted"}
    result = consolidate_verified(_lone(on_demand_pool(policy="Balanced", expire_after="24h")))
    assert reasons(result) == {"d-0": "Expired"}
    assert [c.instance_type for c in result.plan.node_claims] == ["c-4x-amd64-linux"]


def test_drift_by_requirement_no_longer_met() -> None:
    pool = on_demand_pool(requirements=[{"key": wk.ZONE, "operator": "In", "values": ["test-zone-b"]}])
    result = consolidate_verified(_lone(pool, zone="test-zone-a"))
    assert reasons(result) == {"d-0": "Drifted"}
    assert [c.zone for c in result.plan.node_claims] == ["test-zone-b"]
    assert wk.ZONE in result.state.state("d-0").detail  # type: ignore[union-attr]


def test_drift_by_instance_type_gone_from_the_catalog() -> None:
    catalog = [it for it in kwok_catalog() if it.name != "c-4x-amd64-linux"]
    snap = parse_objects(_lone(on_demand_pool()), source="test").with_catalog(catalog)
    result = consolidate_verified(snap)
    assert reasons(result) == {"d-0": "Drifted"}
    assert len(result.plan.node_claims) == 1
    assert result.plan.node_claims[0].instance_type != "c-4x-amd64-linux"
    assert any("no catalog offering" in note for note in result.plan.solver.notes)
    # priced at 0 $/h: its replacement costs more, and drift replaces it anyway
    assert result.plan.cost.savings < 0


def test_expired_node_is_removed_even_with_a_zero_budget() -> None:
    objects = [on_demand_pool(expire_after="24h", budgets=[{"nodes": "0"}]), *keeper_and_target()]
    result = consolidate_verified(objects)
    # both nodes are older than 24h: both expire, whatever the budget. keeper's pinned pod can go nowhere, so
    # keeper stays — and that must not make the whole model infeasible: target still goes
    assert result.state.state("keeper").reason == "Expired"  # type: ignore[union-attr]
    assert reasons(result) == {"target": "Expired"}
    assert not any("INFEASIBLE" in note for note in result.plan.solver.notes)


def test_expiration_ignores_the_budget_but_not_age() -> None:
    young = ago(hours=2)
    objects = [on_demand_pool(expire_after="24h", budgets=[{"nodes": "0"}]),
               node("keeper", created=young), pinned("keep-pod", "keeper", started=young),
               node("target"), running("t-pod", "target")]
    result = consolidate_verified(objects)
    assert reasons(result) == {"target": "Expired"}
    assert [(m.pod, m.to) for m in result.plan.moves] == [("default/t-pod", "keeper")]
    assert result.state.state("keeper").reason != "Expired"  # type: ignore[union-attr]


def test_expiration_ignores_pdbs() -> None:
    young = ago(hours=2)
    objects = [on_demand_pool(expire_after="24h"), node("keeper", created=young),
               pinned("keep-pod", "keeper", started=young), node("target"),
               running("t-pod", "target", labels={"app": "web"}), pdb("web", {"app": "web"}, max_unavailable=0)]
    result = consolidate_verified(objects)
    assert reasons(result) == {"target": "Expired"}


# --- spot and nominated nodes ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("spot_to_spot", [False, True])
def test_spot_replacement_needs_spot_to_spot(spot_to_spot: bool) -> None:
    # one spot c-8x running a 1-cpu pod: a spot c-2x would replace it, but only with spot-to-spot; without it
    # (Karpenter: spot candidates are only deleted) an on-demand replacement is the most the plan may use
    objects = [nodepool(), node("s-0", "c-8x", capacity_type="spot"), running("p", "s-0")]
    result = consolidate_verified(objects, spot_to_spot=spot_to_spot)
    claims = [(c.instance_type, c.capacity_type) for c in result.plan.node_claims]
    if spot_to_spot:
        assert removed(result) == {"s-0"}
        assert claims == [("c-2x-amd64-linux", "spot")]
        assert result.plan.cost.after == pytest.approx(price("c-2x", capacity_type="spot"), abs=1e-6)
    else:
        assert all(ct == "on-demand" for _, ct in claims), claims
        assert bool(claims) == bool(removed(result))


def test_spot_nodes_are_still_deleted_without_spot_to_spot() -> None:
    # deleting a spot node whose pod fits on another node needs no replacement at all
    objects = [nodepool(), node("s-0", capacity_type="spot"), running("p", "s-0"),
               node("s-1", capacity_type="spot"), pinned("q", "s-1")]
    result = consolidate_verified(objects)
    assert removed(result) == {"s-0"} and result.plan.node_claims == []


def test_spot_replacement_allowed_when_an_on_demand_node_goes_too() -> None:
    # a spot and an on-demand c-8x, one 1-cpu pod each: both go, the replacement may be spot
    objects = [nodepool(), node("s-0", "c-8x", capacity_type="spot"), running("p", "s-0"),
               node("o-0", "c-8x"), running("q", "o-0")]
    result = consolidate_verified(objects)
    assert removed(result) == {"s-0", "o-0"}
    assert result.plan.node_claims and all(c.capacity_type == "spot" for c in result.plan.node_claims)
    assert result.plan.cost.after == pytest.approx(price("c-4x", capacity_type="spot"), abs=1e-6)


def test_nominated_node_is_not_a_candidate() -> None:
    waiting = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "waiting", "namespace": "default", "uid": "uid-waiting"},
               "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]},
               "status": {"phase": "Pending", "nominatedNodeName": "target"}}
    result = consolidate_verified([on_demand_pool(), *keeper_and_target(), waiting])
    assert removed(result) == set()
    assert "nominated" in blocked(result, "target")
