"""The plan gate (``solver.gate``): whatever is wrong with a plan, what leaves the gate verifies, every
pending pod is accounted for exactly once, and the pods taken out say which rule rejected them."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from model.plan import ProvisioningPlan
from model.snapshot import Snapshot
from solver.gate import gate
from solver.provision import SolveOptions, solve
from solver.verify import verify
from tests.conftest import snapshot_of
from tests.solver.test_verify import CASES, _tamper


@pytest.fixture(scope="module")
def solved(example_snapshot: Snapshot) -> dict[str, Any]:
    return solve(example_snapshot, SolveOptions(time_limit=5.0)).plan.to_json_dict()


def _accounted_once(snapshot: Snapshot, plan: ProvisioningPlan) -> None:
    seen = Counter([k for c in plan.node_claims for k in c.pods] + [k for e in plan.existing_nodes for k in e.pods]
                   + [u.pod for u in plan.unschedulable])
    assert set(seen) == {p.key for p in snapshot.pending_pods()}
    assert all(n == 1 for n in seen.values()), seen
    assert all(u.reason.strip() for u in plan.unschedulable)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_broken_plan_leaves_the_gate_verified(case: str, solved: dict[str, Any],
                                                    example_snapshot: Snapshot) -> None:
    change, _ = CASES[case]
    broken = _tamper(solved, change)
    assert verify(example_snapshot, broken), "the tampered plan must be invalid to begin with"
    outcome = gate(example_snapshot, broken)
    assert verify(example_snapshot, outcome.plan) == []
    _accounted_once(example_snapshot, outcome.plan)
    assert outcome.changed and outcome.plan.solver.status != "OPTIMAL"
    assert outcome.plan.cost.total == pytest.approx(sum(c.price for c in outcome.plan.node_claims), abs=1e-5)


def test_a_valid_plan_passes_unchanged(solved: dict[str, Any], example_snapshot: Snapshot) -> None:
    plan = ProvisioningPlan.model_validate(solved)
    outcome = gate(example_snapshot, plan)
    assert not outcome.changed and outcome.plan == plan


def _web(name: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                           "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
                     "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}}


def test_pods_that_break_anti_affinity_are_left_pending_naming_the_rule() -> None:
    """Kubernetes: required anti-affinity on the hostname keeps the two pods off one node. A plan that
    puts both on one claim loses the later one to the gate, with the rule in its reason."""
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {
                "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}
    snapshot = snapshot_of([pool, _web("a"), _web("b")])
    plan = solve(snapshot, SolveOptions(time_limit=2.0)).plan
    assert verify(snapshot, plan) == [] and len(plan.node_claims) == 2
    first, second = plan.node_claims
    merged = first.model_copy(update={"pods": sorted(first.pods + second.pods)})
    broken = plan.model_copy(update={"node_claims": [merged],
                                     "cost": plan.cost.model_copy(update={"total": merged.price})})
    outcome = gate(snapshot, broken)
    assert verify(snapshot, outcome.plan) == []
    _accounted_once(snapshot, outcome.plan)
    assert len(outcome.rejected) == 1
    (left,) = outcome.plan.unschedulable
    assert "anti-affinity" in left.reason and "not modelled exactly" in left.reason
    assert outcome.plan.solver.rejected_pods == 1
