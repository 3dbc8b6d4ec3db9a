"""Consolidation with a decision gap (the controller's ``--decision-gap``): a warm start already within the gap
of the bound is the decision, without a CP-SAT search that would only stop at it (OR-Tools 9.15 aborts the
process when an interleaved search is stopped while it loads that hint)."""

from __future__ import annotations

from tests.disruption.helpers import consolidate_verified, node, nodepool, removed, running


def _two_half_full() -> list[dict[str, object]]:
    """Two c-4x nodes (3.9 cpu each) running a 1.9-cpu pod each: one holds both (drain-first), or one cheaper
    node replaces both (the yardstick's multi-node move); either is within 10 % of the re-provisioning bound."""
    return [nodepool(budgets=[{"nodes": "100%"}]), node("n-0"), node("n-1"),
            running("a", "n-0", "1900m"), running("b", "n-1", "1900m")]


def test_a_warm_start_within_the_gap_is_the_decision() -> None:
    result = consolidate_verified(_two_half_full(), gap=0.1)
    plan = result.plan
    assert any("no model solved" in note for note in plan.solver.notes), plan.solver.notes
    assert "model" not in plan.solver.stages
    assert removed(result) and plan.cost.lower_bound is not None
    assert plan.cost.after <= plan.cost.lower_bound * 1.1 + 1e-6  # within the gap it claims


def test_without_a_gap_the_model_decides_and_saves_no_more() -> None:
    exact = consolidate_verified(_two_half_full()).plan
    assert not any("no model solved" in note for note in exact.solver.notes)
    assert "model" in exact.solver.stages
    gapped = consolidate_verified(_two_half_full(), gap=0.1).plan
    assert gapped.cost.after <= exact.cost.after * 1.1 + 1e-6
