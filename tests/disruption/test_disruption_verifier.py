"""The disruption-plan verifier must catch every kind of broken plan: each case starts from a plan it accepts
and breaks one rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from bench.fragmented import split_cluster
from model.disruption import DisruptionPlan
from model.snapshot import Snapshot
from solver.disruption.verify import verify_disruption
from tests.disruption.helpers import (
    CATALOG,
    NOW,
    balanced_cluster,
    consolidate_verified,
    keeper_and_target,
    node,
    nodepool,
    on_demand_pool,
    pdb,
    pinned,
    price,
    running,
    snapshot,
)

WEB = {"app": "web"}


def _pdb_cluster() -> list[dict[str, Any]]:
    """keeper (room for 6.9 cpu), three c-4x nodes with a web pod each (a PDB lets 2 go), and ``guarded``,
    whose node has do-not-disrupt."""
    objects = [on_demand_pool(), node("keeper", "c-8x"), pinned("keep-pod", "keeper"),
               node("guarded", annotations={"karpenter.sh/do-not-disrupt": "true"}), running("g-pod", "guarded"),
               pdb("web", WEB, max_unavailable=2)]
    for i in range(3):
        objects += [node(f"t-{i}"), running(f"web-{i}", f"t-{i}", labels=WEB, owner="web-rs")]
    return objects


def _budget_cluster() -> list[dict[str, Any]]:
    """keeper and three c-4x nodes with one pod each; the pool's budget lets 2 go."""
    objects = [on_demand_pool(budgets=[{"nodes": "2"}]), node("keeper", "c-8x"), pinned("keep-pod", "keeper")]
    for i in range(3):
        objects += [node(f"t-{i}"), running(f"p-{i}", f"t-{i}")]
    return objects


def _limited_cluster() -> list[dict[str, Any]]:
    """keeper and target (c-4x each) and an idle c-8x in a pool limited to 20 cpu."""
    objects = [on_demand_pool(), *keeper_and_target(), node("idle", "c-8x")]
    objects[0]["spec"]["limits"] = {"cpu": "20"}
    return objects


def _spot_cluster() -> list[dict[str, Any]]:
    return [nodepool(), node("s-0", "c-8x", capacity_type="spot"), running("p", "s-0")]


SCENARIOS: dict[str, tuple[Callable[[], list[dict[str, Any]]], dict[str, Any]]] = {
    "pdb": (_pdb_cluster, {}),
    "budget": (_budget_cluster, {}),
    "split": (split_cluster, {}),
    "spot": (_spot_cluster, {"spot_to_spot": True}),
    "balanced": (lambda: balanced_cluster("Balanced"), {}),
    "limits": (_limited_cluster, {}),
}


@pytest.fixture(scope="module")
def plans() -> dict[str, tuple[Snapshot, dict[str, Any]]]:
    out = {}
    for name, (build, options) in SCENARIOS.items():
        snap = snapshot(build())
        out[name] = (snap, consolidate_verified(snap, **options).plan.to_json_dict())
    return out


def _unused_target(plan: dict[str, Any]) -> str:
    gone = {r["node"] for r in plan["remove"]}
    return next(f"t-{i}" for i in range(3) if f"t-{i}" not in gone)


def _remove_also(name: str, pod: str, to: str = "keeper") -> Callable[[dict[str, Any]], None]:
    """Remove one more node (priced and moved as the solver would write it)."""
    def change(plan: dict[str, Any]) -> None:
        target = _unused_target(plan) if name == "unused" else name
        moved = pod.replace("#", target[-1])
        plan["remove"].append({"node": target, "nodePool": "default", "reason": "Underutilized",
                               "price": price("c-4x"), "evictions": 1})
        plan["moves"].append({"pod": f"default/{moved}", "from": target, "to": to})
        plan["cost"]["after"] -= price("c-4x")
        plan["cost"]["savings"] += price("c-4x")
    return change


def _onto_removed(plan: dict[str, Any]) -> None:
    plan["moves"][0]["to"] = plan["remove"][-1]["node"]


def _shrink_claim(plan: dict[str, Any]) -> None:
    # the replacement for the 31-cpu pod becomes a c-16x, priced as the catalog prices it
    claim = next(c for c in plan["nodeClaims"] if "default/batch-0" in c["pods"])
    it = CATALOG["c-16x-amd64-linux"]
    new = next(o.price for o in it.offerings if o.zone == claim["zone"] and o.capacity_type == claim["capacityType"])
    plan["cost"]["after"] += new - claim["price"]
    plan["cost"]["savings"] -= new - claim["price"]
    claim.update(instanceType=it.name, price=new, allocatable=it.allocatable.to_quantities(),
                 labels={**claim["labels"], "node.kubernetes.io/instance-type": it.name})


def _extra_claim(plan: dict[str, Any]) -> None:
    # an extra (empty) c-32x: the kept keeper's 4 cpu plus 32 break the pool's 20-cpu limit
    it = CATALOG["c-32x-amd64-linux"]
    labels = {**it.labels, "topology.kubernetes.io/zone": "test-zone-a", "karpenter.sh/capacity-type": "on-demand",
              "karpenter.sh/nodepool": "default"}
    plan["nodeClaims"].append({"name": "extra", "nodePool": "default", "instanceType": it.name,
                               "zone": "test-zone-a", "capacityType": "on-demand", "price": price("c-32x"),
                               "pods": [], "labels": labels, "requests": {},
                               "allocatable": it.allocatable.to_quantities()})
    plan["cost"]["after"] += price("c-32x")
    plan["cost"]["savings"] -= price("c-32x")


def _drain_target(plan: dict[str, Any]) -> None:
    assert plan["remove"] == []
    plan["remove"].append({"node": "target", "nodePool": "default", "reason": "Underutilized",
                           "price": price("c-2x"), "evictions": 10})
    plan["moves"] += [{"pod": f"default/small-{i}", "from": "target", "to": "keeper"} for i in range(10)]
    plan["cost"]["after"] -= price("c-2x")
    plan["cost"]["savings"] += price("c-2x")


CASES: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "removing a blocked node": ("pdb", _remove_also("guarded", "g-pod"), "remove guarded: may not be disrupted"),
    "move onto a removed node": ("pdb", _onto_removed, "is being removed"),
    "missing move": ("pdb", lambda p: p["moves"].pop(), "has no destination"),
    "pod moved twice": ("pdb", lambda p: p["moves"].append(dict(p["moves"][0], to="keeper")), "moved 2 times"),
    "move to an unknown node": ("pdb", lambda p: p["moves"][0].update(to="nowhere"),
                                "neither a node nor a replacement"),
    "move from the wrong node": ("pdb", lambda p: p["moves"][0].update({"from": "keeper"}), "from keeper"),
    "exceeding a PDB": ("pdb", _remove_also("unused", "web-#"),
                        "PodDisruptionBudget default/web: 3 eviction(s), it allows 2"),
    "exceeding a budget": ("budget", _remove_also("unused", "p-#"),
                           "NodePool default: 3 removal(s) for Drifted/Empty/Underutilized but its budget allows 2"),
    "wrong cost.after": ("pdb", lambda p: p["cost"].update(after=p["cost"]["after"] - 0.05,
                                                          savings=p["cost"]["savings"] + 0.05), "cost.after"),
    "wrong cost.before": ("pdb", lambda p: p["cost"].update(before=p["cost"]["before"] + 1), "cost.before"),
    "wrong removal price": ("pdb", lambda p: p["remove"][0].update(price=0.01), "the offering's is"),
    "wrong reason": ("pdb", lambda p: p["remove"][0].update(reason="Drifted"), "but the node is Underutilized"),
    "node removed twice": ("pdb", lambda p: p["remove"].append(dict(p["remove"][0])), "removed 2 times"),
    "lower bound above after": ("pdb", lambda p: p["cost"].update(lowerBound=p["cost"]["after"] + 1),
                                "above cost.after"),
    "replacement that does not fit its pods": ("split", _shrink_claim,
                                               "pods request cpu=31 but only 15900m is free"),
    "replacement beyond the pool's limits": ("limits", _extra_claim,
                                             "NodePool default: limit cpu=20 exceeded (36 with this plan)"),
    "a move Balanced refuses": ("balanced", _drain_target, "consolidationPolicy Balanced"),
    "claim listing a pod no move sends": ("split", lambda p: p["moves"].pop(), "which no move sends there"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_verifier_catches(name: str, plans: dict[str, tuple[Snapshot, dict[str, Any]]]) -> None:
    scenario, change, expected = CASES[name]
    snap, plan = plans[scenario]
    broken = copy.deepcopy(plan)
    change(broken)
    violations = verify_disruption(snap, DisruptionPlan.model_validate(broken), NOW)
    assert any(expected in v for v in violations), violations
    assert len(violations) == len(set(violations)), violations


def test_scenarios_do_what_the_cases_assume(plans: dict[str, tuple[Snapshot, dict[str, Any]]]) -> None:
    assert len(plans["pdb"][1]["remove"]) == 2 and "guarded" not in {r["node"] for r in plans["pdb"][1]["remove"]}
    assert len(plans["budget"][1]["remove"]) == 2
    assert len(plans["split"][1]["nodeClaims"]) == 2
    assert [c["capacityType"] for c in plans["spot"][1]["nodeClaims"]] == ["spot"]
    assert plans["balanced"][1]["remove"] == []
    assert {r["node"] for r in plans["limits"][1]["remove"]} == {"idle", "target"}


def test_spot_replacement_of_all_spot_removals_needs_the_flag(plans: dict[str, tuple[Snapshot, dict[str, Any]]]
                                                              ) -> None:
    snap, plan = plans["spot"]
    parsed = DisruptionPlan.model_validate(plan)
    assert verify_disruption(snap, parsed, NOW, spot_to_spot=True) == []
    violations = verify_disruption(snap, parsed, NOW)
    assert any("spot replacement of spot nodes needs spot-to-spot" in v for v in violations), violations


def test_plan_made_at_another_time_is_rejected(plans: dict[str, tuple[Snapshot, dict[str, Any]]]) -> None:
    # the same plan, checked at a moment when a maintenance window forbids any disruption
    objects = _budget_cluster()
    objects[0]["spec"]["disruption"]["budgets"] = [{"nodes": "0", "schedule": "0 0 * * *", "duration": "1h"},
                                                   {"nodes": "2"}]
    snap = snapshot(objects)
    plan = DisruptionPlan.model_validate(plans["budget"][1])
    assert verify_disruption(snap, plan, NOW.replace(hour=2)) == []
    violations = verify_disruption(snap, plan, NOW.replace(minute=30))
    assert any("its budget allows 0 (0 0 * * * for 1h)" in v for v in violations), violations
