"""PodDisruptionBudgets and NodePool disruption budgets: counts, percentages, windows, reasons, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli.app import app
from model.workload import PodDisruptionBudget
from tests.disruption.helpers import (
    NOW,
    blocked,
    consolidate_verified,
    node,
    on_demand_pool,
    pdb,
    pinned,
    reasons,
    removed,
    running,
    snapshot,
)

WEB = {"app": "web"}


def _targets(n: int = 3, **pool: Any) -> list[dict[str, Any]]:
    """``keeper`` (a c-8x with room for 6.9 cpu) and ``n`` c-4x nodes ``t-i`` running one 1-cpu web pod each:
    without limits every ``t-i`` goes and its pod moves onto ``keeper``."""
    objects = [on_demand_pool(**pool), node("keeper", "c-8x"), pinned("keep-pod", "keeper")]
    for i in range(n):
        objects += [node(f"t-{i}"), running(f"web-{i}", f"t-{i}", labels=WEB, owner="web-rs")]
    return objects


def test_control_every_target_goes() -> None:
    result = consolidate_verified(_targets())
    assert removed(result) == {"t-0", "t-1", "t-2"}
    assert {m.to for m in result.plan.moves} == {"keeper"}


# --- PodDisruptionBudgets -------------------------------------------------------------------------------------------

def test_pdb_allowing_one_eviction_limits_removals_across_nodes() -> None:
    result = consolidate_verified([*_targets(), pdb("web", WEB, max_unavailable=1)])
    assert len(removed(result)) == 1
    assert len(result.plan.moves) == 1
    assert [allowed for _, allowed in result.state.pdbs] == [1]


def test_pdb_blocks_a_node_whose_own_evictions_exceed_it() -> None:
    objects = [*_targets(1), running("web-extra", "t-0", labels=WEB, owner="web-rs"),
               pdb("web", WEB, max_unavailable=1)]
    result = consolidate_verified(objects)
    assert removed(result) == set()
    assert "PodDisruptionBudget default/web allows 1" in blocked(result, "t-0")


@pytest.mark.parametrize(("pods", "spec", "allowed"), [
    (3, {"max_unavailable": "50%"}, 2),   # maxUnavailable ceil(1.5) = 2
    (4, {"max_unavailable": "30%"}, 2),   # ceil(1.2) = 2 (rounding down would allow 1)
    (3, {"min_available": "50%"}, 1),     # minAvailable ceil(1.5) = 2 → 3 − 2
    (3, {"min_available": "34%"}, 1),     # ceil(1.02) = 2
    (3, {"min_available": 1}, 2),
    (3, {"max_unavailable": 0}, 0),
    (3, {"max_unavailable": 5}, 3),       # desiredHealthy clamps at 0
    (3, {}, 0),                           # neither set: expectedPods 0, nothing allowed (disruption controller)
])
def test_pdb_percentages_as_kubernetes_computes_them(pods: int, spec: dict[str, Any], allowed: int) -> None:
    objects = [*_targets(pods), pdb("web", WEB, **spec)]
    snap = snapshot(objects)
    (budget,) = snap.pdbs
    assert budget.allowed(snap.pods) == allowed
    result = consolidate_verified(snap)
    assert len(removed(result)) == min(allowed, pods)


def test_unhealthy_pods_use_up_the_pdb() -> None:
    # four selected pods, minAvailable 3: one is not Running, so no eviction is allowed
    objects = [*_targets(3), pdb("web", WEB, min_available=3),
               {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web-starting", "namespace": "default", "labels": WEB},
                "spec": {"nodeName": "keeper", "containers": [{"name": "a"}]}, "status": {"phase": "Pending"}}]
    snap = snapshot(objects)
    assert snap.pdbs[0].allowed(snap.pods) == 0
    assert removed(consolidate_verified(snap)) == set()


@pytest.mark.parametrize(("spec", "status", "expected"), [
    ({"max_unavailable": "100%"}, 0, 0),   # the controller says 0: nothing goes
    ({"min_available": 3}, 2, 2),          # computed 0, the controller says 2
])
def test_status_disruptions_allowed_wins(spec: dict[str, Any], status: int, expected: int) -> None:
    objects = [*_targets(), pdb("web", WEB, disruptions_allowed=status, **spec)]
    result = consolidate_verified(objects)
    assert len(removed(result)) == expected
    assert [allowed for _, allowed in result.state.pdbs] == [expected]


def test_pdb_selecting_nothing_is_ignored_with_a_warning() -> None:
    result = consolidate_verified([*_targets(), pdb("ghost", {"app": "ghost"}, max_unavailable=0)])
    assert removed(result) == {"t-0", "t-1", "t-2"}
    assert result.state.pdbs == []
    assert any("PodDisruptionBudget default/ghost selects no pods; ignored" in n for n in result.plan.solver.notes)


def test_pdb_in_another_namespace_selects_nothing_here() -> None:
    result = consolidate_verified([*_targets(), pdb("web", WEB, max_unavailable=0, namespace="other")])
    assert removed(result) == {"t-0", "t-1", "t-2"}
    assert any("PodDisruptionBudget other/web selects no pods" in n for n in result.plan.solver.notes)


def test_pdb_parse_rejects_a_bad_value() -> None:
    with pytest.raises(ValueError, match=r"spec\.minAvailable"):
        PodDisruptionBudget.parse(pdb("bad", WEB, min_available="half"))


# --- NodePool budgets ------------------------------------------------------------------------------------------------

def _budget(result: Any) -> list[tuple[int, int]]:
    return [(b.allowed, b.used) for b in result.plan.budgets]


def test_budget_count() -> None:
    result = consolidate_verified(_targets(budgets=[{"nodes": "1"}]))
    assert len(removed(result)) == 1 and _budget(result) == [(1, 1)]


@pytest.mark.parametrize(("percent", "allowed"), [("30%", 2), ("25%", 1), ("26%", 2), ("0%", 0)])
def test_budget_percentage_rounds_up_of_the_pools_nodes(percent: str, allowed: int) -> None:
    # four nodes in the pool (keeper + three targets)
    result = consolidate_verified(_targets(budgets=[{"nodes": percent}]))
    assert len(removed(result)) == allowed and _budget(result) == [(allowed, allowed)]


def test_budgets_are_per_nodepool() -> None:
    # pool a may not lose a node; pool b may lose both, and its pods may move onto a's nodes
    objects = [on_demand_pool("a", budgets=[{"nodes": "0"}]), on_demand_pool("b")]
    for pool in ("a", "b"):
        for i in range(2):
            objects += [node(f"{pool}-{i}", pool=pool), running(f"{pool}-pod-{i}", f"{pool}-{i}")]
    result = consolidate_verified(objects)
    assert removed(result) == {"b-0", "b-1"}
    assert {m.to for m in result.plan.moves} <= {"a-0", "a-1"}
    assert _budget(result) == [(0, 0), (2, 2)]


def test_nodes_already_disrupting_use_up_the_budget() -> None:
    not_ready = node("sick")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    deleting = node("leaving")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-28T23:59:00Z"
    disrupted = node("tainted")
    disrupted["spec"]["taints"] = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    result = consolidate_verified([*_targets(budgets=[{"nodes": "4"}]), not_ready, deleting, disrupted])
    assert len(removed(result)) == 1 and _budget(result) == [(1, 1)]
    assert blocked(result, "sick") == "NotReady" and blocked(result, "leaving") == "being deleted"
    assert blocked(result, "tainted").startswith("being disrupted")


@pytest.mark.parametrize(("hour", "active"), [(9, True), (10, True), (8, False), (17, False), (0, False)])
def test_budget_window(hour: int, active: bool) -> None:
    # no disruption from 09:00 for 8h (until 17:00 UTC); any other time, all nodes
    budgets = [{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}, {"nodes": "100%"}]
    result = consolidate_verified(_targets(budgets=budgets), now=NOW.replace(hour=hour))
    assert (removed(result) == set()) is active
    windows = [b.window for b in result.plan.budgets]
    assert windows == (["0 9 * * * for 8h", ""] if active else [""])


def test_budget_reasons_restrict_it() -> None:
    # an Empty-only budget of 0 stops empty nodes going, not underutilized ones
    budgets = [{"nodes": "0", "reasons": ["Empty"]}, {"nodes": "100%"}]
    result = consolidate_verified([*_targets(1, budgets=budgets), node("idle")])
    assert reasons(result) == {"t-0": "Underutilized"}
    assert result.state.state("idle").reason == "Empty"  # type: ignore[union-attr]
    # the same with Underutilized: only the empty node goes
    budgets = [{"nodes": "0", "reasons": ["Underutilized"]}, {"nodes": "100%"}]
    result = consolidate_verified([*_targets(1, budgets=budgets), node("idle")])
    assert reasons(result) == {"idle": "Empty"}


def test_drifted_only_budget_blocks_drift_not_consolidation() -> None:
    hash_key = "karpenter.sh/nodepool-hash"
    budgets = [{"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "100%"}]
    objects = _targets(1, budgets=budgets, annotations={hash_key: "v2"})
    objects += [node("old", annotations={hash_key: "v1"}), running("heavy", "old", "3")]
    result = consolidate_verified(objects)
    assert result.state.state("old").reason == "Drifted"  # type: ignore[union-attr]
    assert reasons(result) == {"t-0": "Underutilized"}
    budgets = [{"nodes": "0", "reasons": ["Underutilized"]}, {"nodes": "100%"}]
    objects[0]["spec"]["disruption"]["budgets"] = budgets
    assert reasons(consolidate_verified(objects)) == {"old": "Drifted"}


@pytest.mark.parametrize(("budget", "field"), [
    ({"nodes": "100%", "schedule": "0 25 * * *", "duration": "1h"}, "spec.disruption.budgets[0].schedule"),
    ({"nodes": "100%", "schedule": "@daily", "duration": "one hour"}, "spec.disruption.budgets[0].duration"),
    ({"nodes": "100%", "schedule": "0 9 * * *"}, "spec.disruption.budgets[0].duration"),
])
def test_invalid_budget_freezes_the_pool(budget: dict[str, Any], field: str, tmp_path: Path) -> None:
    objects = _targets(budgets=[budget])
    result = consolidate_verified(objects)
    assert removed(result) == set()
    assert [(b.allowed, b.window) for b in result.plan.budgets] == [(0, "invalid budget")]
    assert any("frozen" in n for n in result.plan.solver.notes)
    (err,) = result.budget_errors
    assert err.field == field and err.obj == "NodePool default"

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    run = CliRunner().invoke(app, ["consolidate", str(path), "--now", "2026-11-29T00:00:00Z", "-o", "json",
                                   "--time-limit", "3"])
    assert run.exit_code == 2
    plan = yaml.safe_load(run.stdout)  # the plan is still printed
    assert plan["kind"] == "DisruptionPlan" and plan["remove"] == []
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert str(path) in errors[0] and "NodePool default" in errors[0] and field in errors[0]
    assert "Traceback" not in run.stderr
