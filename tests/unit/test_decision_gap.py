"""The decision gap (``SolveOptions.gap``, ``nodeplan run --decision-gap``): a batch is decided as soon as its plan
is certified within the gap of a lower bound, not at the time limit; the plan still passes the verifier."""

from __future__ import annotations

import random
from typing import Any

from ortools.linear_solver import pywraplp

from bench.workloads import CPU_CHOICES, MEMORY_CHOICES, pod
from model.snapshot import parse_objects
from providers.kwok import kwok_catalog
from solver.colgen import solve_glop
from solver.provision import SolveOptions, solve
from solver.verify import verify

NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}


def deployments(total: int, seed: int = 42) -> list[dict[str, Any]]:
    """Pending pods of seeded Deployments (10–40 replicas of one shape each), as ``make bench-controller``."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    made = 0
    while made < total:
        replicas = min(total - made, rng.choice((10, 20, 30, 40)))
        cpu, memory = rng.choice(CPU_CHOICES), rng.choice(MEMORY_CHOICES)
        name = f"app-{made}"
        out += [pod(f"{name}-{i}", namespace="perf", cpu=cpu, memory=memory, owner=f"{name}-rs")
                for i in range(replicas)]
        made += replicas
    return out


def snapshot(objects: list[dict[str, Any]]) -> Any:
    return parse_objects([NODEPOOL, *objects], source="test").with_catalog(kwok_catalog())


def test_a_plan_decided_within_the_gap_is_certified_and_verifies() -> None:
    for pods in (1, 10, 100):
        snap = snapshot(deployments(pods))
        plan = solve(snap, SolveOptions(time_limit=10.0, workers=1, gap=0.01)).plan
        assert plan.solver.status in ("OPTIMAL", "FEASIBLE") and not plan.unschedulable
        assert verify(snap, plan) == [], pods
        decided = plan.cost.total <= plan.cost.lower_bound * 1.01 + 1e-6
        if pods <= 10:  # milliseconds: decided long before the limit, no master, no search
            assert decided and "master" not in plan.solver.stages and "lns" not in plan.solver.stages, pods
        else:  # decided within the gap, or (on a loaded machine) the stages ran to the limit
            assert decided or plan.solver.wall_seconds >= 0.8 * 10.0, plan.solver


def test_without_a_gap_small_batches_are_still_proven_optimal() -> None:
    snap = snapshot(deployments(10))
    plan = solve(snap, SolveOptions(time_limit=10.0, workers=1)).plan
    assert plan.solver.status == "OPTIMAL" and plan.cost.gap == 0.0


def test_pods_that_fit_the_room_left_on_a_node_are_decided_without_column_generation() -> None:
    """Cost 0 meets any bound: neither column generation nor any later stage can improve on it."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "big", "labels": {
        "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "karpenter.sh/nodepool": "default"}},
        "spec": {}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                               "conditions": [{"type": "Ready", "status": "True"}]}}
    snap = snapshot([node, *(pod(f"p-{i}", cpu="500m", memory="512Mi") for i in range(8))])
    plan = solve(snap, SolveOptions(time_limit=10.0, workers=1, gap=0.01)).plan
    assert plan.node_claims == [] and [len(n.pods) for n in plan.existing_nodes] == [8]
    assert plan.solver.status == "OPTIMAL" and "colgen" not in plan.solver.stages
    assert verify(snap, plan) == []


def _compiled(pods: int) -> tuple[Any, Any, Any, Any]:
    from solver.bins import build_bins
    from solver.merge import merge_classes
    from solver.problem import compile_problem
    from solver.provision import _limits, placeable_demand
    problem = merge_classes(compile_problem(snapshot(deployments(pods))))
    bins = build_bins(problem)
    return problem, bins, placeable_demand(problem, bins), _limits(problem)


def test_column_generation_stops_once_its_lp_is_within_the_slack_of_a_known_bound() -> None:
    """The restricted LP's value bounds the true LP from above, so once it is within ``known_slack`` of a
    bound the caller holds, pricing on cannot raise that bound by more; its own bound stays valid."""
    import time

    import numpy as np

    from solver.bound import share_bound
    from solver.colgen import Objective, column_generation
    problem, bins, demand, limits = _compiled(400)
    objective = Objective(rank_weight=0, unscheduled_weight=max(b.cost for b in bins) * 10,
                          best_rank=np.zeros(len(demand), dtype=np.int64))
    share = share_bound(bins, problem.sizes, demand)
    full = column_generation(bins, problem.sizes, demand, objective, limits, [], time.monotonic() + 60)
    early = column_generation(bins, problem.sizes, demand, objective, limits, [], time.monotonic() + 60,
                              known_bound=share, known_slack=0.05)
    assert share <= full.lp_value + 1 and full.lp_value - full.lower_bound <= 1e-4 * full.lp_value
    assert early.iterations < full.iterations
    assert early.lp_value - share <= 0.05 * early.lp_value
    assert early.lower_bound <= full.lp_value + 1  # whatever it certifies is still a bound


def test_the_exact_finish_stops_at_the_first_plan_within_the_target() -> None:
    """``good_enough``: the compact model ends the search at the first plan at or below the target."""
    from solver.compact import solve_compact
    problem, bins, demand, limits = _compiled(120)
    slots = {b.index: 2 for b in bins}
    best = solve_compact(bins, problem.sizes, demand, limits, slots, time_limit=30, seed=0, workers=1,
                         deterministic=True)
    assert best.cost is not None
    loose = solve_compact(bins, problem.sizes, demand, limits, slots, time_limit=30, seed=0, workers=1,
                          deterministic=True, good_enough=best.cost * 2)
    assert loose.cost is not None and loose.cost <= best.cost * 2
    assert loose.status == "FEASIBLE" or loose.cost == best.cost  # stopped early, unless its first plan was best


def test_a_500_pod_batch_is_decided_within_a_two_percent_gap() -> None:
    """The default decision gap (2 %): certified by the bound, and the plan verifies."""
    snap = snapshot(deployments(500))
    plan = solve(snap, SolveOptions(time_limit=10.0, workers=1, gap=0.02)).plan
    assert verify(snap, plan) == [] and not plan.unschedulable
    decided = plan.cost.total <= plan.cost.lower_bound * 1.02 + 1e-6
    assert decided or plan.solver.wall_seconds >= 0.8 * 10.0, plan.solver
    if decided:
        assert any(n.startswith("decided:") for n in plan.solver.notes) or plan.solver.status == "OPTIMAL"


class _PresolveFailsLP:
    """A GLOP stand-in whose presolve gives up (ABNORMAL) the way GLOP's did on a master in CI."""

    def __init__(self) -> None:
        self.settings: list[str] = []
        self.incremental: list[bool] = []

    def SetSolverSpecificParametersAsString(self, text: str) -> bool:
        self.settings.append(text)
        return True

    def Solve(self, params: pywraplp.MPSolverParameters | None = None) -> int:
        self.incremental.append(params is None or params.GetIntegerParam(params.INCREMENTALITY)
                                != params.INCREMENTALITY_OFF)
        presolve_off = bool(self.settings) and "use_preprocessing:false" in self.settings[-1]
        return int(pywraplp.Solver.OPTIMAL if presolve_off else pywraplp.Solver.ABNORMAL)


def test_an_abnormal_lp_solve_is_retried_from_scratch_without_presolve() -> None:
    lp = _PresolveFailsLP()
    assert solve_glop(lp) == pywraplp.Solver.OPTIMAL
    assert lp.settings == ["use_preprocessing:false"] and lp.incremental == [True, False]



def test_the_master_starts_from_its_hint_even_where_column_generation_never_priced_its_nodes() -> None:
    """The warm start is the dive's or greedy's plan, whose nodes need not be generated patterns: the master
    takes the hint's patterns as columns, so its plan is never worse than the hint — with no other column at
    all, the hint is the whole model."""
    import numpy as np

    from solver.colgen import Objective
    from solver.greedy import greedy_placement
    from solver.master import solve_master
    from solver.provision import _patterns_of
    problem, bins, demand, limits = _compiled(60)
    objective = Objective(rank_weight=0, unscheduled_weight=max(b.cost for b in bins) * 10,
                          best_rank=np.zeros(len(demand), dtype=np.int64))
    hint = _patterns_of(problem, bins, greedy_placement(problem))
    hinted = sum(objective.cost(bins[p.bin], p.array()) * n for p, n in hint.items())
    result = solve_master(bins, [], demand, objective, limits, hint, time_limit=30.0, seed=0, workers=1,
                          deterministic=True)
    assert result is not None and not result.unscheduled.any()
    assert result.objective <= hinted
    assert set(result.chosen) <= set(hint)


def test_a_master_that_finds_nothing_better_stops_instead_of_holding_its_warm_start_to_the_limit() -> None:
    """With a decision gap the pattern master stalls (``solver.cpsat.stalled``): on this 80-pod batch it found
    nothing better than its warm start, and without the stall held it for 7.2 s of a 60 s limit; the plan is
    the same either way, and it verifies."""
    snap = snapshot(deployments(80, seed=6))
    plan = solve(snap, SolveOptions(time_limit=60.0, workers=1, gap=0.02)).plan
    assert "master" in plan.solver.stages, plan.solver.notes
    assert any(n.startswith("pattern master: stopped after") for n in plan.solver.notes), plan.solver.notes
    assert verify(snap, plan) == [] and not plan.unschedulable
    exact = solve(snap, SolveOptions(time_limit=5.0, workers=1)).plan
    assert not any(n.startswith("pattern master: stopped") for n in exact.solver.notes)  # exact runs never stall


def test_with_a_gap_the_proof_gets_a_capped_share_of_the_time_exact_solves_all_of_it(monkeypatch: Any) -> None:
    """A gap-mode proof that does not close is cut at ``GAP_PROOF_SECONDS`` (or ``GAP_PROOF_SHARE`` of the time
    left): one ran 7.9 s of 10 on a 197-pod batch, the batch's whole latency. Exact solves keep the whole time."""
    import solver.provision as provision
    given: list[float] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        given.append(kwargs["time_limit"])
        return prove(*args, **kwargs)

    from solver.proof import prove
    monkeypatch.setattr(provision, "prove", recording)
    snap = snapshot(deployments(60, seed=1))
    gapped = solve(snap, SolveOptions(time_limit=10.0, workers=1, gap=0.02)).plan
    assert len(given) == 1 and given[0] <= max(provision.GAP_PROOF_SECONDS, provision.GAP_PROOF_SHARE * 10.0)
    assert verify(snap, gapped) == [] and not gapped.unschedulable
    given.clear()
    solve(snap, SolveOptions(time_limit=10.0, workers=1))
    assert len(given) == 1 and given[0] > 0.5 * 10.0


def test_a_pricing_knapsack_stopped_at_its_gap_limit_still_bounds_the_best_pattern() -> None:
    """``gap_limit``: the knapsack may stop short of a proof, but its bound is still an upper bound on every
    pattern's value (the Farley bound rests on it) and is within the limit of the pattern it returns."""
    import numpy as np

    from solver.patterns import VALUE_SCALE, exact_pricing, node_limit
    problem, bins, demand, _ = _compiled(200)
    rng = np.random.default_rng(7)
    stopped = 0
    for b in bins[:12]:
        values = rng.uniform(0.2, 1.0, len(demand)) * float(b.cost) / 4
        exact, exact_bound = exact_pricing(b, problem.sizes, values, demand, 30.0)
        best = float(values @ exact)
        for limit in (float(b.cost) * 1e-3, float(b.cost)):
            counts, bound = exact_pricing(b, problem.sizes, values, demand, 30.0, gap_limit=limit)
            value = float(values @ counts)
            slack = sum(node_limit(b, problem.sizes, demand, k) for k in range(len(demand))) / VALUE_SCALE
            assert value <= best + 1e-6 and bound >= best - 1e-6
            assert bound - value <= limit + slack
            stopped += value < best - 1e-6
        assert exact_bound >= best - 1e-6
    assert stopped  # the loose limit did stop some searches at a worse pattern: the limit is applied


def test_column_generation_with_a_pricing_gap_still_certifies_a_bound_within_its_tolerance() -> None:
    """Knapsacks stopped ``pricing_gap`` short of a proof lower the floors, never past the LP optimum: the
    bound stays below the exact LP's value and within the tolerance of the restricted LP."""
    import time

    import numpy as np

    from solver.colgen import Objective, column_generation
    problem, bins, demand, limits = _compiled(400)
    objective = Objective(rank_weight=0, unscheduled_weight=max(b.cost for b in bins) * 10,
                          best_rank=np.zeros(len(demand), dtype=np.int64))
    full = column_generation(bins, problem.sizes, demand, objective, limits, [], time.monotonic() + 60)
    gapped = column_generation(bins, problem.sizes, demand, objective, limits, [], time.monotonic() + 60,
                               tolerance=0.005, pricing_gap=0.00125)
    assert full.lp_value - full.lower_bound <= 1e-4 * full.lp_value
    assert gapped.lower_bound <= full.lp_value + 1
    assert gapped.lp_value - gapped.lower_bound <= 0.005 * gapped.lp_value
