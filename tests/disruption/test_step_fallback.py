"""When the budgets cap consolidation, the pass takes a step toward the budget-free plan. Its fallback — drain-first
over the budgeted shortlist, what the gate returns should the step fail verification — is compiled only when the
gate needs it: a pass the step decides compiles the cluster once (the target's), not twice."""

from __future__ import annotations

from typing import Any

import pytest

import solver.disruption.consolidate as consolidate_module
import solver.disruption.plan as plan_module
from bench.fragmented import scaled_down
from solver.disruption.verify import verify_disruption
from tests.disruption.helpers import NOW, consolidate_verified, snapshot


def _budgeted() -> list[dict[str, Any]]:
    """Karpenter's perf scenario at 150 pods scaled to 30 % under a 10 % budget: the first pass is a step toward
    the budget-free plan (``tests/solver/test_consolidation_target.py``)."""
    return scaled_down(150, seed=1, keep=0.3, budget="10%")


def _counting_compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = consolidate_module.compile_candidates

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)
    monkeypatch.setattr(consolidate_module, "compile_candidates", counted)
    return calls


def test_a_step_the_gate_accepts_compiles_the_cluster_once(monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = _counting_compiles(monkeypatch)
    plan = consolidate_verified(_budgeted()).plan
    assert any("a step toward the budget-free plan" in note for note in plan.solver.notes), plan.solver.notes
    assert plan.remove and len(compiles) == 1


def test_a_step_the_gate_rejects_falls_back_to_drain_first(monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = _counting_compiles(monkeypatch)
    seen: list[object] = []

    def reject_the_first(snap: Any, plan: Any, now: Any, **kwargs: Any) -> list[str]:
        seen.append(plan)
        return ["rejected for the test"] if len(seen) == 1 else verify_disruption(snap, plan, now, **kwargs)
    monkeypatch.setattr(plan_module, "verify_disruption", reject_the_first)
    snap = snapshot(_budgeted())
    result = plan_module.consolidate(snap, consolidate_module.ConsolidateOptions(now=NOW, time_limit=3.0))
    plan = result.plan
    assert len(seen) == 2 and len(compiles) == 2  # the fallback was compiled for the gate
    assert any("the plan it started from is returned" in note for note in plan.solver.notes), plan.solver.notes
    assert plan.remove and len(plan.remove) <= 2  # drain-first, within the budget (10 % of 11 nodes)
    assert verify_disruption(snap, plan, NOW) == []
