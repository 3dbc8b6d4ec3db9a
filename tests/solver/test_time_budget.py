"""The time limit counts from when the command started (``SolveOptions.started_at``): a solve that starts
with its time already spent still returns a verified plan, quickly, and never nothing."""

from __future__ import annotations

import time
from typing import Any

from bench.diverse import diverse_objects, karpenter_benchmark_catalog, karpenter_generic_objects
from solver.provision import SolveOptions, solve
from solver.verify import verify
from tests.conftest import snapshot_of


def _bench(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The benchmark objects with the NodePool's memory limit (10,000,000 Gi, above the 2^53 bytes the
    model now accepts) brought within range; no batch here comes near it."""
    for obj in objects:
        if obj.get("kind") == "NodePool" and "memory" in obj["spec"].get("limits", {}):
            obj["spec"]["limits"]["memory"] = "8000000Gi"
    return objects


def test_a_solve_started_at_its_limit_returns_a_verified_plan_quickly() -> None:
    snapshot = snapshot_of(_bench(karpenter_generic_objects(300, seed=4)), catalog=karpenter_benchmark_catalog(30))
    limit = 5.0
    began = time.monotonic()
    result = solve(snapshot, SolveOptions(time_limit=limit, started_at=began - limit + 0.05))
    assert time.monotonic() - began < 2.0
    plan = result.plan
    assert verify(snapshot, plan) == []
    assert len(plan.unschedulable) == 0 and plan.node_claims
    assert plan.cost.lower_bound <= plan.cost.total + 1e-6
    # the construction stage still runs: Karpenter's answer is beaten even with no time left
    assert plan.cost.greedy is not None and plan.cost.total < plan.cost.greedy
    assert plan.solver.status == "FEASIBLE"


def test_a_solve_past_its_limit_on_the_diverse_mix_still_returns_a_verified_plan() -> None:
    snapshot = snapshot_of(_bench(diverse_objects(200, seed=8)), catalog=karpenter_benchmark_catalog(30))
    began = time.monotonic()
    result = solve(snapshot, SolveOptions(time_limit=2.0, started_at=began - 3.0))
    assert time.monotonic() - began < 3.0
    assert verify(snapshot, result.plan) == []
    assert result.plan.solver.status in {"FEASIBLE", "GREEDY"}
    assert result.plan.cost.total <= (result.plan.cost.greedy or 0) + 1e-6


def test_the_limit_bounds_the_whole_solve() -> None:
    snapshot = snapshot_of(_bench(karpenter_generic_objects(2000, seed=6)), catalog=karpenter_benchmark_catalog(60))
    began = time.monotonic()
    result = solve(snapshot, SolveOptions(time_limit=4.0, started_at=began))
    # a runaway check only: the wall-time target (limit + 5 %) is measured by the benchmarks, not a timed test
    assert time.monotonic() - began <= 4.0 * 2
    assert verify(snapshot, result.plan) == []


def test_when_no_stage_fits_the_search_over_greedys_plan_is_what_beats_it(monkeypatch: Any) -> None:
    """The construction is not started when it could not be finished in time, nor column generation when its
    first LP would not: the time goes to the large-neighbourhood search over greedy's plan (re-building shares of
    its nodes), and the status says a searched plan, not greedy's, comes back — verified."""
    import solver.provision as provision

    monkeypatch.setattr(provision, "CONSTRUCT_SETUP_PER_PAIR", 1e3)  # as on 50,000 pods: set-up alone overruns
    monkeypatch.setattr(provision, "COLGEN_START_PER_PAIR", 1e3)
    monkeypatch.setattr(provision, "RECONSTRUCT_ABOVE", 0)
    snapshot = snapshot_of(_bench(diverse_objects(600, seed=5)), catalog=karpenter_benchmark_catalog(40))
    began = time.monotonic()
    plan = solve(snapshot, SolveOptions(time_limit=4.0)).plan
    assert time.monotonic() - began < 4.0 + 1.0
    assert verify(snapshot, plan) == []
    assert plan.solver.status == "FEASIBLE" and plan.cost.greedy is not None and plan.cost.total < plan.cost.greedy
    assert any(n.startswith("pattern construction: not started") for n in plan.solver.notes)
    assert any(n.startswith("large-neighbourhood search:") and not n.startswith("large-neighbourhood search: 0 ")
               for n in plan.solver.notes)
