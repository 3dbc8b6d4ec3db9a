"""The machinery that lets Karpenter's diverse benchmark scale: packing classes, the resource-share bound,
an LP dive cut short by the time limit."""

from __future__ import annotations

import numpy as np

from bench.diverse import diverse_objects, karpenter_benchmark_catalog
from solver.bins import build_bins
from solver.bound import share_bound
from solver.greedy import greedy_placement
from solver.merge import merge_classes
from solver.problem import compile_problem
from solver.provision import placeable_demand
from tests.conftest import snapshot_of, solve_verified


def _mix(pods: int, seed: int, types: int):  # type: ignore[no-untyped-def]
    """Karpenter's whole diverse mix (zone spread and hostname self-affinity included: their pins are
    checked in test_rule_regressions.py) on the first ``types`` types of its benchmark catalog."""
    return snapshot_of(diverse_objects(pods, seed=seed), catalog=karpenter_benchmark_catalog(types))


def test_packing_classes_keep_every_pod_and_greedy_unchanged() -> None:
    problem = compile_problem(snapshot_of(diverse_objects(300, seed=7), catalog=karpenter_benchmark_catalog(40)))
    merged = merge_classes(problem)
    assert len(merged.classes) < len(problem.classes)
    assert sorted(p.key for c in merged.classes for p in c.pods) == sorted(p.key for c in problem.classes
                                                                           for p in c.pods)
    assert greedy_placement(merged).cost_micros(merged) == greedy_placement(problem).cost_micros(problem)


def test_share_bound_is_below_a_proven_optimum() -> None:
    snapshot = _mix(60, 3, 12)
    result = solve_verified(snapshot, time_limit=10.0)
    problem = merge_classes(compile_problem(snapshot))
    bins = build_bins(problem)
    bound = share_bound(bins, problem.sizes, placeable_demand(problem, bins))
    assert 0 < bound <= result.placement.cost_micros(result.problem)


def test_share_bound_prices_every_class_at_its_cheapest_admitting_zone_copy() -> None:
    """Bins of one instance type in several zones are priced as one (what any of them admits): the bound is at
    least each single-axis bound worked out bin by bin — zone-pinned classes included (the diverse mix pins zone
    spread and zone affinity pods) — and stays below a plan the solver verified."""
    snapshot = _mix(300, 5, 16)
    problem = merge_classes(compile_problem(snapshot))
    bins = build_bins(problem)
    demand = placeable_demand(problem, bins)
    assert len({b.cost for b in bins}) < len(bins)  # several zone copies of a type: the grouping is exercised
    single_axis = []
    for r in range(problem.sizes.shape[1]):
        total = 0.0
        for k in np.flatnonzero(demand > 0):
            prices = [b.cost * problem.sizes[k, r] / b.capacity[r] for b in bins
                      if b.compatible[k] and b.capacity[r] > 0 and all(b.capacity >= problem.sizes[k])]
            total += demand[k] * min(prices, default=0.0)
        single_axis.append(total)
    bound = share_bound(bins, problem.sizes, demand)
    assert bound >= max(single_axis) * (1 - 1e-6)
    result = solve_verified(snapshot, time_limit=5.0)
    assert bound <= result.placement.cost_micros(result.problem)


def test_diverse_plan_is_verified_with_a_bound_even_when_time_is_short() -> None:
    result = solve_verified(_mix(900, 7, 40), time_limit=2.0)
    plan = result.plan
    assert plan.cost.greedy is not None and plan.cost.total <= plan.cost.greedy
    assert plan.cost.lower_bound > 0
    assert np.isfinite(plan.cost.lower_bound)
