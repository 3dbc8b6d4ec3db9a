"""The large-neighbourhood search over consolidation plans (``solver/disruption/lns.py``): it finds a strictly
better plan than the drain-first start where that start is a trap, every plan it returns passes the
independent disruption verifier, and it never returns a plan worse than the one it started from."""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

import pytest

from bench.fragmented import fragmented_cluster
from solver.disruption import consolidate as consolidation
from solver.disruption import plan as planning
from solver.disruption.budgets import Allowances
from solver.disruption.candidates import analyse
from solver.disruption.consolidate import ConsolidateOptions, Outcome, _placement_of, compile_candidates
from solver.disruption.drain import drain_first
from solver.disruption.lns import Incumbent, Search, better, rank
from solver.disruption.model import fill_patterns
from solver.disruption.plan import disruption_plan
from solver.disruption.verify import verify_disruption
from solver.placement import Placement
from tests.disruption.helpers import (
    NOW,
    consolidate_verified,
    node,
    on_demand_pool,
    pdb,
    pinned,
    price,
    removed,
    running,
    snapshot,
)


def drain_trap() -> list[dict[str, Any]]:
    """``keeper`` (c-4x, a pinned 0.9-cpu pod: 3 cpu free), ``big`` (c-4x, one 3-cpu pod) and ``small-0..2``
    (c-2x, one 1-cpu pod each, 0.9 cpu left beside it). Drain-first takes the dearest node first: ``big``'s pod
    fills the keeper and no small pod fits anywhere else, saving one c-4x. Removing the three c-2x instead
    (their pods fill the keeper) saves 1.5 times as much; no replacement does better (3 cpu needs a c-4x)."""
    objects = [on_demand_pool(), node("keeper", "c-4x"), pinned("keep-pod", "keeper", "900m"),
               node("big", "c-4x"), running("big-pod", "big", "3")]
    for i in range(3):
        objects += [node(f"small-{i}", "c-2x"), running(f"small-pod-{i}", f"small-{i}", "1")]
    return objects


def _search_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decide every cluster with the search, as clusters above ``WHOLE_MODEL_CANDIDATES`` are."""
    monkeypatch.setattr(consolidation, "WHOLE_MODEL_CANDIDATES", 0)


def test_drain_first_is_the_trap_the_cluster_sets() -> None:
    snap = snapshot(drain_trap())
    state = analyse(snap, NOW)
    compiled = compile_candidates(snap, state)
    drained, _ = drain_first(compiled.problem, state, compiled.candidates, compiled.class_of)
    assert {compiled.candidates[k].name for k in drained} == {"big"}


def test_search_finds_a_strictly_better_verified_plan_than_drain_first(monkeypatch: pytest.MonkeyPatch) -> None:
    _search_only(monkeypatch)
    result = consolidate_verified(drain_trap(), yardstick=False, time_limit=5.0)
    outcome = result.outcome
    assert outcome is not None and outcome.search is not None
    assert outcome.search.start == pytest.approx(price("c-4x"))
    assert outcome.search.improvements >= 1
    assert removed(result) == {"small-0", "small-1", "small-2"}
    assert result.plan.cost.savings == pytest.approx(3 * price("c-2x"), abs=1e-6)
    assert result.plan.cost.savings > price("c-4x") + 1e-6
    assert {m.to for m in result.plan.moves} == {"keeper"}
    assert not any("plan gate" in n for n in result.plan.solver.notes)


def test_search_reaches_what_the_whole_model_proves_optimal(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = consolidate_verified(drain_trap(), yardstick=False, time_limit=5.0)
    _search_only(monkeypatch)
    searched = consolidate_verified(drain_trap(), yardstick=False, time_limit=5.0)
    assert searched.plan.cost.savings == pytest.approx(whole.plan.cost.savings, abs=1e-6)
    assert searched.plan.disruption.evictions == whole.plan.disruption.evictions


def _verified(snap: Any, state: Any, outcome: Outcome) -> list[str]:
    return verify_disruption(snap, disruption_plan(state, outcome, ConsolidateOptions(now=NOW)), NOW)


@pytest.mark.parametrize(("nodes", "seed", "budget"), [(30, 1, "20%"), (40, 2, "100%"), (60, 5, "10%")])
def test_search_never_returns_a_worse_plan_and_every_plan_verifies(nodes: int, seed: int, budget: str) -> None:
    """From an empty plan and from drain-first on fragmented clusters: the result ranks no worse than its
    start (strictly better from the empty plan, where removing something always pays) and verifies."""
    snap = snapshot(fragmented_cluster(nodes, seed, budget=budget))
    state = analyse(snap, NOW)
    compiled = compile_candidates(snap, state)
    problem, candidates = compiled.problem, compiled.candidates
    total = problem.demand
    search = Search(problem, state, candidates, fill_patterns(problem, total))
    drained, onto = drain_first(problem, state, candidates, compiled.class_of)
    starts = [Incumbent([], Placement()),
              Incumbent(drained, _placement_of(problem, candidates, drained, onto, compiled.class_of))]
    for start in starts:
        before = search.rank_of(start)
        found, report = search.improve(start, time.monotonic() + 2.0)
        after = search.rank_of(found)
        assert not better(before, after), (before, after)
        assert report.end >= report.start - 1e-9
        outcome = Outcome([candidates[k] for k in found.removed], found.placement, problem, "FEASIBLE")
        assert _verified(snap, state, outcome) == []
        assert rank(problem, outcome.removed, found.placement, 0.0) == after
        if not start.removed:
            assert found.removed and after[1] < 0, "a fragmented cluster always has something to consolidate"


def test_an_improved_plan_the_verifier_rejects_falls_back_to_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate: the search's plan is returned only once verified; rejected, the verified start is returned."""
    _search_only(monkeypatch)
    real, calls = planning.verify_disruption, []

    def reject_first(*args: Any, **kwargs: Any) -> list[str]:
        calls.append(1)
        return ["planted violation"] if len(calls) == 1 else real(*args, **kwargs)
    monkeypatch.setattr(planning, "verify_disruption", reject_first)
    result = consolidate_verified(drain_trap(), yardstick=False, time_limit=5.0)
    assert len(calls) == 2
    assert removed(result) == {"big"}  # the drain-first start
    assert result.plan.cost.savings == pytest.approx(price("c-4x"), abs=1e-6)
    assert any("improved plan failed verification" in n and "planted violation" in n
               for n in result.plan.solver.notes)


def _limited() -> list[dict[str, Any]]:
    """Six half-empty c-4x nodes of one web Deployment and a keeper with room; a budget of two nodes and a PDB
    allowing three web evictions: the search may not remove more than either allows."""
    objects = [on_demand_pool(budgets=[{"nodes": "2"}]), node("keeper", "c-8x"), pinned("keep-pod", "keeper"),
               pdb("web", {"app": "web"}, disruptions_allowed=3)]
    for i in range(6):
        objects += [node(f"t-{i}"), running(f"web-{i}", f"t-{i}", labels={"app": "web"}, owner="web-rs")]
    return objects


def test_search_keeps_budgets_and_pdbs(monkeypatch: pytest.MonkeyPatch) -> None:
    _search_only(monkeypatch)
    result = consolidate_verified(_limited(), yardstick=False, time_limit=3.0)
    assert len(result.plan.remove) == 2  # the budget (the PDB would allow three)
    assert result.plan.disruption.evictions == 2


def test_allowances_accept_exactly_the_sets_the_budgets_and_pdbs_allow() -> None:
    """``Allowances`` (counters, O(limits) per node) against ``ClusterState.excesses`` (the one rule) on every
    growing removal order of a cluster with a node budget and a PDB."""
    objects = [on_demand_pool(budgets=[{"nodes": "3"}, {"nodes": "1", "reasons": ["Empty"]}]),
               pdb("web", {"app": "web"}, disruptions_allowed=2)]
    for i in range(4):
        objects += [node(f"t-{i}"), running(f"web-{i}", f"t-{i}", labels={"app": "web"}, owner="web-rs")]
    objects += [node("e-0"), node("e-1")]  # empty
    state = analyse(snapshot(objects), NOW)
    rng = random.Random(3)
    orders = list(itertools.permutations(state.candidates))
    for order in rng.sample(orders, 60):
        counters, chosen = Allowances(state), []
        for s in order:
            assert counters.allows(s) == (not state.excesses([*chosen, s])), [c.name for c in [*chosen, s]]
            if counters.allows(s):
                counters.take(s)
                chosen.append(s)


def test_consolidation_started_at_its_limit_returns_a_verified_plan_quickly() -> None:
    """The limit counts from ``started_at`` (the process start for ``nodeplan consolidate``): started at its
    limit, the search is skipped and the verified start comes back at once."""
    objects = fragmented_cluster(300, 4, budget="100%")
    snap = snapshot(objects)
    began = time.monotonic()
    result = consolidate_verified(snap, time_limit=5.0, started_at=began - 5.0 + 0.05)
    assert time.monotonic() - began < 5.0  # fixed costs only: analysis, compile, drain, verify
    assert result.plan.remove
