"""The decision gap (``SolveOptions.gap``, ``nodeplan run --decision-gap``): a batch is decided as soon as its plan
is certified within the gap of a lower bound, not at the time limit; the plan still passes the verifier."""

from __future__ import annotations

import random
from typing import Any

from bench.workloads import CPU_CHOICES, MEMORY_CHOICES, pod
from model.snapshot import parse_objects
from providers.kwok import kwok_catalog
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
