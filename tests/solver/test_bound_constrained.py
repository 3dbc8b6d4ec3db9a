"""The bound on constrained mixes (issue 12, item 4): valid under Kubernetes' rules, stronger than the resource
share where per-node counters force nodes.

Validity is checked against an optimum found without the solver: every way to split a small batch into nodes,
each node the cheapest instance type that holds its pods in the zone chosen for it, tried in order of cost until
the independent verifier (``solver.verify``, Kubernetes' rules on the final state) accepts one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from bench.diverse import diverse_objects, diverse_pods, karpenter_benchmark_catalog
from bench.workloads import pod
from model.instancetype import MICRO
from model.plan import PlannedNodeClaim, ProvisioningPlan
from model.resources import Resources
from model.snapshot import Snapshot
from solver.bins import build_bins
from solver.bound import share_bound
from solver.bounds import constrained_bound, from_problem, recompiled, relaxation_bound
from solver.greedy import greedy_placement
from solver.merge import merge_classes
from solver.problem import compile_problem
from solver.provision import planned_claims, relaxed_bound
from solver.rules.registry import RULES
from solver.verify import verify
from tests.conftest import snapshot_of, solve_verified

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _partitions(items: list[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1:]]
        yield [[first], *part]


def kubernetes_optimum(snapshot: Snapshot) -> float:
    """The cheapest plan the verifier accepts that schedules every pending pod on new nodes ($/h)."""
    pods = snapshot.pending_pods()
    templates = compile_problem(snapshot, rules=()).templates  # every launchable offering, no rule applied
    zones = sorted({t.offering.zone for t in templates})
    cheapest: dict[tuple[tuple[int, ...], str], Any] = {}

    def node(block: tuple[int, ...], zone: str) -> Any:
        if (block, zone) not in cheapest:
            load = Resources()
            for i in block:
                load = load + pods[i].requests
            fitting = [t for t in templates if t.offering.zone == zone
                       and all(t.allocatable[name] >= load[name] for name in ("cpu", "memory", "pods"))]
            cheapest[(block, zone)] = min(fitting, key=lambda t: (t.offering.price, t.sort_key), default=None)
        return cheapest[(block, zone)]

    candidates = []
    for part in _partitions(list(range(len(pods)))):
        blocks = [tuple(b) for b in part]
        for choice in itertools.product(zones, repeat=len(blocks)):
            chosen = [node(b, z) for b, z in zip(blocks, choice, strict=True)]
            if all(t is not None for t in chosen):
                candidates.append((sum(t.offering.price for t in chosen), blocks, chosen))
    candidates.sort(key=lambda c: c[0])
    shell = solve_verified(snapshot).plan
    for cost, blocks, chosen in candidates:
        claims = [PlannedNodeClaim(name=f"brute-{n}", node_pool=t.pool.name, instance_type=t.instance_type.name,
                                   zone=t.offering.zone, capacity_type=t.offering.capacity_type,
                                   price=t.offering.price, pods=sorted(pods[i].key for i in b),
                                   labels=dict(t.labels), allocatable=t.instance_type.allocatable.to_quantities())
                  for n, (b, t) in enumerate(zip(blocks, chosen, strict=True))]
        plan: ProvisioningPlan = shell.model_copy(update={
            "node_claims": claims, "existing_nodes": [], "unschedulable": [],
            "cost": shell.cost.model_copy(update={"total": cost, "lower_bound": 0.0, "gap": None})})
        if not verify(snapshot, plan):
            return float(cost)
    raise AssertionError("no plan the verifier accepts")


def _nginx(i: int, cpu: str = "250m") -> dict[str, Any]:
    labels = {"app": "nginx"}
    return pod(f"nginx-{i}", cpu=cpu, memory="256Mi", labels=labels, spec_extra={"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME}]}}})


def _zone_affine(i: int, group: str) -> dict[str, Any]:
    labels = {"group": group}
    return pod(f"affine-{group}-{i}", cpu="500m", memory="512Mi", labels=labels, spec_extra={"affinity": {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels}, "topologyKey": ZONE}]}}})


def _zone_spread(i: int) -> dict[str, Any]:
    return pod(f"spread-{i}", cpu="1000m", memory="1Gi", labels={"app": "web"}, spec_extra={
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": {"app": "web"}}}]})


def _host_spread(i: int, value: str) -> dict[str, Any]:
    return pod(f"hspread-{i}", cpu="500m", memory="256Mi", labels={"my-label": value}, spec_extra={
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": {"my-label": value}}}]})


SMALL = {
    "anti-affinity with generic pods": [_nginx(0), _nginx(1, "1500m"), _nginx(2), pod("g-0", cpu="1500m"),
                                        pod("g-1", cpu="500m", memory="2Gi"), pod("g-2", cpu="250m")],
    "zone self-affinity and zone spread": [_zone_affine(0, "a"), _zone_affine(1, "a"), _zone_affine(2, "b"),
                                           _zone_spread(0), _zone_spread(1), _zone_spread(2)],
    "hostname spread beside anti-affinity": [_nginx(0), _nginx(1), _nginx(2), _host_spread(0, "a"),
                                             _host_spread(1, "a"), pod("g-a", cpu="250m", labels={"my-label": "a"})],
}


def _small_catalog() -> Any:
    return karpenter_benchmark_catalog(4)  # 1–4 vCPU, 100m reserved per node, three zones


@pytest.mark.parametrize("name", sorted(SMALL))
def test_bound_never_above_the_kubernetes_optimum(name: str) -> None:
    """Brute force over every split into nodes, judged by the verifier: the reported bound and the relaxation's
    are at most the cheapest accepted plan."""
    from bench.workloads import nodepool
    snapshot = snapshot_of([nodepool("default"), *SMALL[name]], _small_catalog())
    optimum = kubernetes_optimum(snapshot)
    plan = solve_verified(snapshot).plan
    keys = {p.key for p in snapshot.pending_pods()}
    assert plan.cost.lower_bound <= optimum + 1e-6
    assert relaxed_bound(snapshot, keys) / MICRO <= optimum + 1e-6
    problem = merge_classes(compile_problem(snapshot))
    bound = constrained_bound(problem, problem.demand, snapshot, keys, list(problem.conservative_by))
    assert bound / MICRO <= optimum + 1e-6


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bound_never_above_the_optimum_of_small_diverse_batches(seed: int) -> None:
    """Karpenter's five diverse shares, a pod or two of each: the bound stays below the brute-force optimum."""
    from bench.workloads import nodepool
    snapshot = snapshot_of([nodepool("default"), *diverse_pods(6, seed)], _small_catalog())
    optimum = kubernetes_optimum(snapshot)
    problem = merge_classes(compile_problem(snapshot))
    keys = {p.key for p in snapshot.pending_pods()}
    assert constrained_bound(problem, problem.demand, snapshot, keys, list(problem.conservative_by)) / MICRO \
        <= optimum + 1e-6
    assert solve_verified(snapshot).plan.cost.lower_bound <= optimum + 1e-6


def test_anti_affinity_forces_a_node_per_pod_and_the_bound_counts_it() -> None:
    """Three anti-affine pods need three nodes, each paying its 100m reserved: the per-node prices see it, the
    resource share (one weighting for every node size) does not."""
    from bench.workloads import nodepool
    snapshot = snapshot_of([nodepool("default"), _nginx(0), _nginx(1), _nginx(2)], _small_catalog())
    optimum = kubernetes_optimum(snapshot)  # three 1-vCPU nodes
    relaxation = recompiled(snapshot, {p.key for p in snapshot.pending_pods()})
    stronger = relaxation_bound(relaxation) / MICRO
    problem = compile_problem(snapshot, rules=[r for r in RULES if not r.relaxable])
    weaker = share_bound(build_bins(problem), problem.sizes, problem.demand) / MICRO
    assert weaker < stronger <= optimum + 1e-6
    assert stronger == pytest.approx(optimum, rel=1e-5)  # one node per pod, each the smallest: exact here


def _today(snapshot: Snapshot, scheduled: set[str], stricter: list[str]) -> float:
    """The bound before this change: the resource share over the batch compiled without the stricter families."""
    pods = [p for p in snapshot.pending_pods() if p.key in scheduled]
    problem = compile_problem(snapshot, pods, rules=[r for r in RULES if not (r.relaxable and r.name in stricter)])
    return share_bound(build_bins(problem), problem.sizes, problem.demand)


@pytest.mark.parametrize("pods", [1000, 5000])
def test_diverse_bench_bound_below_verified_plans_and_above_todays(pods: int) -> None:
    """On the diverse bench batches (Karpenter's catalog): the bound is at most the cost of verified plans
    (Karpenter's first-fit-decreasing, and the plan the pattern construction finds), strictly above the
    resource-share bound over the exact families, and found in the compiled problem without recompiling."""
    snapshot = snapshot_of(diverse_objects(pods), karpenter_benchmark_catalog())
    problem = merge_classes(compile_problem(snapshot))
    assert from_problem(problem, problem.demand) is not None
    greedy = greedy_placement(problem)
    assert not greedy.unschedulable
    claims, existing = planned_claims(problem, greedy)
    shell = solve_verified(snapshot_of([diverse_objects(1)[0], *diverse_pods(5)], karpenter_benchmark_catalog())
                           ).plan
    plan = shell.model_copy(update={"node_claims": claims, "existing_nodes": existing, "unschedulable": [],
                                    "cost": shell.cost.model_copy(update={"total": sum(c.price for c in claims)})})
    assert verify(snapshot, plan) == []
    keys = {p.key for p in snapshot.pending_pods()}
    stricter = list(problem.conservative_by)
    bound = constrained_bound(problem, problem.demand, snapshot, keys, stricter) / MICRO
    assert bound <= plan.cost.total
    assert bound > _today(snapshot, keys, stricter) / MICRO * 1.02  # the forced nodes' reserved share
