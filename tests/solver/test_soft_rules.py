"""Soft pod-to-pod rules kept under the preference policy (``solver/rules/hostpreferences.py``).

From the Kubernetes API reference: ``whenUnsatisfiable: ScheduleAnyway`` "tells the scheduler to schedule
the pod in any location, but giving higher precedence to topologies that would help reduce the skew";
for ``preferredDuringSchedulingIgnoredDuringExecution`` pod (anti-)affinity "the node that is most
preferred is the one with the greatest sum of weights", a term's weight counting (affinity) or
subtracting (anti-affinity) where the node's topology domain holds pods matching its term. Neither ever
makes a pod unschedulable, so: under ``Respect`` the preference is met whenever a plan can meet it, at
extra cost; under ``Ignore`` cost alone decides; and a preference never leaves a pod pending that the plan
would otherwise schedule (NodePool limits); every plan verifies.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.workloads import linux_pool, pod
from model.plan import ProvisioningPlan
from solver.problem import compile_problem
from solver.provision import SolveResult
from solver.rules.preferences import PreferencePolicy
from tests.conftest import snapshot_of, solve_verified

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
RESPECT, IGNORE, PRICE = PreferencePolicy.RESPECT, PreferencePolicy.IGNORE, PreferencePolicy.PRICE


def _spread(app: str, skew: int = 1, when: str = "ScheduleAnyway") -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": skew, "topologyKey": HOST, "whenUnsatisfiable": when,
                                           "labelSelector": {"matchLabels": {"app": app}}}]}


def _preferred(kind: str, app: str, key: str = HOST, weight: int = 50) -> dict[str, Any]:
    return {"affinity": {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}}]}}}


def _workload(app: str, n: int, cpu: str = "500m", spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [pod(f"{app}-{i}", cpu=cpu, labels={"app": app}, owner=app, spec_extra=spec) for i in range(n)]


def _node(name: str, cpu: str = "8") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", HOST: name, ZONE: "test-zone-a"}},
            "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _solve(objects: list[dict[str, Any]], policy: PreferencePolicy = RESPECT, price: float = 0.0) -> SolveResult:
    return solve_verified(snapshot_of(objects), preference_policy=policy, preference_price=price)


def _per_node(plan: ProvisioningPlan, app: str) -> list[int]:
    """How many of the app's pods each node of the plan (new or existing) holds, largest first."""
    nodes = [c.pods for c in plan.node_claims] + [e.pods for e in plan.existing_nodes]
    return sorted((n for n in (sum(p.startswith(f"default/{app}-") for p in pods) for pods in nodes) if n),
                  reverse=True)


def _scheduled(plan: ProvisioningPlan) -> int:
    return sum(len(c.pods) for c in plan.node_claims) + sum(len(e.pods) for e in plan.existing_nodes)


def _unmodelled(plan: ProvisioningPlan) -> list[str]:
    return [n for n in plan.solver.notes if "not modelled" in n]


# --- (a) ScheduleAnyway topology spread on kubernetes.io/hostname ---------------------------------------------

def test_schedule_anyway_hostname_spread_is_kept_under_respect_and_priced_out_under_ignore() -> None:
    objects = [linux_pool(), *_workload("web", 4, spec=_spread("web"))]
    respect, ignore = _solve(objects).plan, _solve(objects, IGNORE).plan
    assert _per_node(respect, "web") == [1, 1, 1, 1]  # the skew kube-scheduler prefers: none above the others
    assert len(_per_node(ignore, "web")) < 4 and ignore.cost.total < respect.cost.total  # cost only
    assert _unmodelled(respect) == [] and _unmodelled(ignore) == []
    assert any("prefer-spread" in n for n in respect.solver.conservative)  # a cap Kubernetes only scores


def test_schedule_anyway_max_skew_two_allows_two_per_node() -> None:
    plan = _solve([linux_pool(), *_workload("web", 6, cpu="250m", spec=_spread("web", skew=2))]).plan
    assert _per_node(plan, "web") == [2, 2, 2]


def test_schedule_anyway_spread_counts_pods_already_running() -> None:
    """A free existing node already running a matching pod is the skew's top: the pending pods go elsewhere
    under Respect, onto the free node under Ignore."""
    objects = [linux_pool(), _node("old"), pod("web-running", labels={"app": "web"}, node_name="old")]
    objects += _workload("web", 2, spec=_spread("web"))
    respect, ignore = _solve(objects).plan, _solve(objects, IGNORE).plan
    assert respect.existing_nodes == [] and len(respect.node_claims) == 2
    assert ignore.node_claims == [] and len(ignore.existing_nodes[0].pods) == 2


def test_schedule_anyway_spread_never_costs_a_scheduled_pod_under_limits() -> None:
    """Two nodes at most: spreading four pods one per node would leave two pending, so the preference is
    dropped (and noted) and all four run, as they do without the constraint."""
    pool = linux_pool(limits={"nodes": "2"})
    kept = _solve([pool, *_workload("web", 4, spec=_spread("web"))]).plan
    without = _solve([pool, *_workload("web", 4)]).plan
    assert _scheduled(kept) == _scheduled(without) == 4 and kept.unschedulable == []
    assert any("topology spread on kubernetes.io/hostname (ScheduleAnyway)" in n and "limits" in n
               for n in _unmodelled(kept))


def test_schedule_anyway_spread_is_kept_where_limits_leave_room() -> None:
    plan = _solve([linux_pool(limits={"cpu": "100"}), *_workload("web", 3, spec=_spread("web"))]).plan
    assert _per_node(plan, "web") == [1, 1, 1] and _unmodelled(plan) == []


@pytest.mark.parametrize(("price", "spread"), [(1.0, True), (1e-6, False)])
def test_price_keeps_the_spread_only_when_a_pod_is_worth_a_node(price: float, spread: bool) -> None:
    objects = [linux_pool(), *_workload("web", 4, spec=_spread("web"))]
    plan = _solve(objects, PRICE, price).plan
    assert (_per_node(plan, "web") == [1, 1, 1, 1]) is spread
    assert bool(_unmodelled(plan)) is not spread  # dropped under Price: said so


# --- (b) preferred pod (anti-)affinity on kubernetes.io/hostname to its own pods --------------------------------

def test_preferred_self_anti_affinity_on_hostname_keeps_the_pods_apart_under_respect() -> None:
    objects = [linux_pool(), *_workload("db", 3, spec=_preferred("podAntiAffinity", "db"))]
    respect, ignore = _solve(objects).plan, _solve(objects, IGNORE).plan
    assert _per_node(respect, "db") == [1, 1, 1] and _unmodelled(respect) == []
    assert len(ignore.node_claims) == 1 and ignore.cost.total < respect.cost.total


def test_preferred_self_anti_affinity_also_avoids_pods_it_selects_without_the_term() -> None:
    """The term selects ``app=db`` pods that carry no rule: a carrier shares no node with them, they may
    share one with each other."""
    objects = [linux_pool(), *_workload("db", 2, spec=_preferred("podAntiAffinity", "db"))]
    objects += [pod(f"tool-{i}", labels={"app": "db", "role": "tool"}, owner="tool") for i in range(3)]
    plan = _solve(objects).plan
    for claim in plan.node_claims:
        carriers = [p for p in claim.pods if p.startswith("default/db-")]
        assert len(carriers) <= 1 and (not carriers or len(claim.pods) == 1)
    assert len(plan.node_claims) == 3


def test_preferred_self_anti_affinity_never_costs_a_scheduled_pod_under_limits() -> None:
    pool = linux_pool(limits={"nodes": "1"})
    kept = _solve([pool, *_workload("db", 3, spec=_preferred("podAntiAffinity", "db"))]).plan
    assert kept.unschedulable == [] and len(kept.node_claims) == 1
    assert any("preferred pod anti-affinity on kubernetes.io/hostname" in n for n in _unmodelled(kept))


def test_preferred_self_affinity_on_hostname_shares_one_node_under_respect() -> None:
    objects = [linux_pool(), *_workload("cache", 3, cpu="3", spec=_preferred("podAffinity", "cache"))]
    respect, ignore = _solve(objects).plan, _solve(objects, IGNORE).plan
    assert _per_node(respect, "cache") == [3] and _unmodelled(respect) == []
    assert ignore.cost.total < respect.cost.total  # three small nodes are cheaper than one large one


def test_preferred_self_affinity_is_not_bundled_where_limits_could_bind() -> None:
    pool = linux_pool(limits={"cpu": "8"})
    plan = _solve([pool, *_workload("cache", 3, cpu="3", spec=_preferred("podAffinity", "cache"))]).plan
    without = _solve([pool, *_workload("cache", 3, cpu="3")]).plan
    assert _scheduled(plan) >= _scheduled(without)
    assert any("preferred pod affinity on kubernetes.io/hostname" in n and "limits" in n for n in _unmodelled(plan))


def test_preferred_self_affinity_keeps_the_nodepool_weight_order() -> None:
    """The heavier NodePool offers no type that holds the whole group: the group is not bundled onto the
    lighter one (NodePool weight outranks preferences)."""
    small = linux_pool("small", weight=50, requirements=[
        {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["5"]}])
    objects = [small, linux_pool("large"), *_workload("cache", 3, cpu="3", spec=_preferred("podAffinity", "cache"))]
    plan = _solve(objects).plan
    assert {c.node_pool for c in plan.node_claims} == {"small"}
    assert any("NodePool small" in n for n in _unmodelled(plan))


# --- (c) preferred pod (anti-)affinity towards pending pods of other workloads --------------------------------

def test_preferred_affinity_to_pending_pods_whose_domain_is_decided() -> None:
    """``cache`` must run on on-demand capacity; ``web`` prefers the capacity type cache runs on: under
    Respect it pays for on-demand, under Ignore it takes spot."""
    cache = [pod(f"cache-{i}", cpu="1", labels={"app": "cache"}, owner="cache",
                 spec_extra={"nodeSelector": {CAPACITY_TYPE: "on-demand"}}) for i in range(2)]
    objects = [linux_pool(), *cache, *_workload("web", 3, cpu="1", spec=_preferred("podAffinity", "cache",
                                                                                      CAPACITY_TYPE))]
    respect, ignore = _solve(objects).plan, _solve(objects, IGNORE).plan
    web = lambda plan: {c.capacity_type for c in plan.node_claims if any("/web-" in p for p in c.pods)}  # noqa: E731
    assert web(respect) == {"on-demand"} and _unmodelled(respect) == []
    assert "spot" in web(ignore) and ignore.cost.total < respect.cost.total


def test_preferred_anti_affinity_to_pending_pods_pinned_to_a_zone() -> None:
    batch = [pod(f"batch-{i}", cpu="1", labels={"app": "batch"}, owner="batch",
                 spec_extra={"nodeSelector": {ZONE: "test-zone-a"}}) for i in range(2)]
    objects = [linux_pool(), *batch, *_workload("web", 3, cpu="1", spec=_preferred("podAntiAffinity", "batch",
                                                                                      ZONE))]
    plan = _solve(objects).plan
    assert all(c.zone != "test-zone-a" for c in plan.node_claims if any("/web-" in p for p in c.pods))
    assert _unmodelled(plan) == []


def test_preference_towards_pending_pods_that_may_land_anywhere_is_still_reported() -> None:
    objects = [linux_pool(), *_workload("batch", 2), *_workload("web", 2, spec=_preferred("podAntiAffinity", "batch",
                                                                                            ZONE))]
    plan = _solve(objects).plan
    assert any("preferred pod anti-affinity on topology.kubernetes.io/zone towards pending pods" in n
               for n in _unmodelled(plan))


# --- notes by policy -------------------------------------------------------------------------------------------

def test_notes_follow_the_policy() -> None:
    """No policy stated (consolidation, bounds): nothing is encoded and the notes say so; Ignore: cost only,
    nothing to report."""
    objects = [linux_pool(), *_workload("web", 2, spec=_spread("web")),
               *_workload("db", 2, spec=_preferred("podAntiAffinity", "db"))]
    snapshot = snapshot_of(objects)
    stated = compile_problem(snapshot, preference_policy=RESPECT)
    assert stated.unmodelled == [] and any(a.startswith("prefer-") for a in stated.axes)
    plain = compile_problem(snapshot)
    assert not any(a.startswith("prefer-") for a in plain.axes)
    assert len(plain.unmodelled) == 2 and all("is not modelled" in n for n in plain.unmodelled)
    assert compile_problem(snapshot, preference_policy=IGNORE).unmodelled == []
