"""Validity regressions the diverse benchmark sweep found: plans (and greedy plans) the verifier rejected.

1. Zone spread: a DoNotSchedule group was planned only from a pod carrying it that no other group had pinned
   yet, so a selector whose carriers were all pinned by other groups left the pods it matches unpinned
   (skew above maxSkew).
2. Hostname self-affinity: a lone pod carrying the term was a bundle of one, free to go anywhere, although
   its term also selects pending pods that do not carry it (zone self-affinity pods with the same label),
   so it had to share a node with one of them.
"""

from __future__ import annotations

from typing import Any

from bench.diverse import diverse_objects, karpenter_benchmark_catalog
from bench.workloads import linux_pool, pod
from model.plan import ProvisioningPlan, UnschedulablePod
from model.snapshot import Snapshot
from solver.problem import compile_problem
from solver.provision import SolveResult, planned_claims
from solver.verify import verify
from tests.conftest import snapshot_of, solve_verified

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def _greedy_plan(result: SolveResult) -> ProvisioningPlan:
    """The greedy placement as a plan the verifier reads (its own claims, unschedulable pods and cost)."""
    claims, existing = planned_claims(result.problem, result.greedy)
    unschedulable = [UnschedulablePod(pod=p.key, reason="greedy")
                     for p in sorted(result.greedy.unschedulable, key=lambda p: p.key)]
    cost = result.plan.cost.model_copy(update={"total": round(sum(c.price for c in claims), 6)})
    return result.plan.model_copy(update={"node_claims": claims, "existing_nodes": existing,
                                          "unschedulable": unschedulable, "cost": cost})


def _solve_both_verified(snapshot: Snapshot) -> SolveResult:
    result = solve_verified(snapshot, time_limit=2.0)
    assert verify(snapshot, _greedy_plan(result)) == []
    return result


def _spread_pod(name: str, label: str, selects: str) -> dict[str, Any]:
    return pod(name, labels={"my": label}, spec_extra={"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"my": selects}}}]})


def test_spread_group_whose_carriers_are_all_pinned_by_other_groups_is_still_spread() -> None:
    # x carries the spread on my=b but is itself my=a, so the my=a group (planned first, from y) pins it;
    # the my=b group must still be spread although its only carrier is already pinned
    objects = [linux_pool(), _spread_pod("y", "b", "a"), _spread_pod("x", "a", "b"),
               *(pod(f"a-{i}", labels={"my": "a"}) for i in range(6)),
               *(pod(f"b-{i}", labels={"my": "b"}) for i in range(6))]
    snapshot = snapshot_of(objects)
    problem = compile_problem(snapshot)
    zones = {p.name: p.zone_pin for c in problem.classes for p in c.pods}
    assert all(zones[f"b-{i}"] for i in range(6)), zones
    plan = _solve_both_verified(snapshot).plan
    counts: dict[str, int] = {}
    for claim in plan.node_claims:
        counts[claim.zone] = counts.get(claim.zone, 0) + sum(p.startswith(("default/b-", "default/y")) for p in
                                                             claim.pods)
    assert max(counts.values()) - min(counts.get(z, 0) for z in zones.values() if z) <= 1, counts


def test_diverse_zone_spread_respects_max_skew() -> None:
    snapshot = snapshot_of(diverse_objects(600, seed=7), catalog=karpenter_benchmark_catalog(40))
    pods = [p for c in compile_problem(snapshot).classes for p in c.pods]
    selectors = {s.selector_for(p.labels) for p in pods for s in p.topology_spread if s.topology_key == ZONE}
    for selector in selectors:  # my-label=f: its carriers were all pinned by other groups
        assert selector is not None
        assert [p.name for p in pods if selector.matches(p.labels) and not p.zone_pin] == [], selector.describe()
    _solve_both_verified(snapshot)


def test_lone_hostname_self_affine_pod_joins_a_pod_its_term_selects() -> None:
    def affine(name: str, key: str, cpu: str) -> dict[str, Any]:
        term = {"labelSelector": {"matchLabels": {"team": "x"}}, "topologyKey": key}
        return pod(name, cpu=cpu, labels={"team": "x"},
                   spec_extra={"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}})
    objects = [linux_pool(), affine("host-0", HOST, "3"), affine("zone-0", ZONE, "3"), affine("zone-1", ZONE, "3")]
    snapshot = snapshot_of(objects)
    bundle = next(c for c in compile_problem(snapshot).classes if any(p.name == "host-0" for p in c.pods))
    assert bundle.bundle and len(bundle.pods) == 3  # every pod its term selects: any bind order holds
    plan = _solve_both_verified(snapshot).plan
    node = next(c for c in plan.node_claims if "default/host-0" in c.pods)
    assert any(p.startswith("default/zone-") for p in node.pods)


def test_diverse_hostname_self_affinity_groups_stay_together() -> None:
    from bench.hostaffinity import hostname_affinity_objects
    snapshot = snapshot_of(hostname_affinity_objects(60, seed=3), catalog=karpenter_benchmark_catalog(12))
    _solve_both_verified(snapshot)
