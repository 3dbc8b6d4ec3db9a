"""Certificates mean what they say (issue "Exact means exact", §4): OPTIMAL is a statement about Kubernetes'
rules, a stricter encoding says so in ``optimality``, and every cost figure is $/h."""

from __future__ import annotations

from typing import Any

from bench.workloads import linux_pool, pod
from tests.conftest import snapshot_of, solve_verified

ZONE = "topology.kubernetes.io/zone"


def _spread(app: str) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": app}}}]}


def _pods(spread: bool) -> list[dict[str, Any]]:
    return [pod(f"web-{i}", cpu="1500m", labels={"app": "web"}, owner="web",
                spec_extra=_spread("web") if spread else None) for i in range(5)]


def test_a_resource_only_batch_is_optimal_for_kubernetes() -> None:
    plan = solve_verified(snapshot_of([linux_pool(), *_pods(spread=False)])).plan
    assert plan.solver.status == "OPTIMAL"
    assert plan.solver.optimality == "kubernetes" and plan.solver.conservative == []
    assert plan.cost.lower_bound == plan.cost.total


def test_zone_pins_make_a_proof_one_for_the_conservative_model_and_the_bound_stays_valid() -> None:
    """The zone split is chosen before packing, so no stage can prove optimality under Kubernetes' rules;
    the reported bound must still be below every valid plan, hence below the optimum without the spread
    (a relaxation of it)."""
    spread = solve_verified(snapshot_of([linux_pool(), *_pods(spread=True)])).plan
    relaxed = solve_verified(snapshot_of([linux_pool(), *_pods(spread=False)])).plan
    assert relaxed.solver.status == "OPTIMAL"
    assert spread.solver.status != "OPTIMAL"
    assert spread.solver.conservative, "the zone pins must be named"
    assert spread.solver.optimality in (None, "conservative model")
    assert spread.cost.lower_bound <= relaxed.cost.total + 1e-9
    assert spread.cost.lp_bound is None


def test_every_cost_figure_is_dollars_per_hour_when_a_limit_leaves_pods_pending() -> None:
    """A NodePool limit leaves pods pending: the LP then pays for unscheduled slack, which is no cost."""
    pool = linux_pool(limits={"cpu": "4"})
    plan = solve_verified(snapshot_of([pool, *[pod(f"p-{i}", cpu="1500m") for i in range(8)]])).plan
    assert plan.unschedulable
    for figure in (plan.cost.lower_bound, plan.cost.lp_bound, plan.cost.greedy):
        assert figure is None or 0 <= figure <= max(plan.cost.total, plan.cost.greedy or 0) + 1e-9
    assert plan.cost.lp_bound is None or plan.cost.lp_bound <= plan.cost.total + 1e-9


def test_notes_are_listed_once_with_a_count() -> None:
    from solver.provision import distinct
    assert distinct(["a", "b", "a", "a"]) == ["a (×3)", "b"]
