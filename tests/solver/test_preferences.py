"""Preferred node affinity under the three policies (Karpenter's default is Respect)."""

from __future__ import annotations

import pytest

from bench.workloads import linux_pool, pod
from solver.rules.preferences import PreferencePolicy
from tests.conftest import snapshot_of, solve_verified

PREFER_ON_DEMAND = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 50, "preference": {"matchExpressions": [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}]}}}


def _objects() -> list[dict]:  # type: ignore[type-arg]
    return [linux_pool("default")] + [pod(f"api-{i}", cpu="1", memory="2Gi", owner="api",
                                          spec_extra=PREFER_ON_DEMAND) for i in range(4)]


@pytest.mark.parametrize(("policy", "price", "expected"), [
    (PreferencePolicy.RESPECT, 0.0, "on-demand"),   # met whenever it can be, whatever it costs
    (PreferencePolicy.IGNORE, 0.0, "spot"),          # cost only: spot is 30 % cheaper
    (PreferencePolicy.PRICE, 0.00001, "spot"),       # worth less than the spot saving
    (PreferencePolicy.PRICE, 1.0, "on-demand"),      # worth more than the spot saving
])
def test_policy_decides_between_preference_and_cost(policy: PreferencePolicy, price: float, expected: str) -> None:
    result = solve_verified(snapshot_of(_objects()), preference_policy=policy, preference_price=price)
    assert {c.capacity_type for c in result.plan.node_claims} == {expected}


def test_greedy_yardstick_honours_the_heaviest_preference_first() -> None:
    result = solve_verified(snapshot_of(_objects()), preference_policy=PreferencePolicy.IGNORE)
    greedy_types = {result.problem.templates[n.template].offering.capacity_type for n in result.greedy.new_nodes}
    assert greedy_types == {"on-demand"}  # Karpenter treats it as required until that fails


def test_unmeetable_preference_is_dropped() -> None:
    objects = [linux_pool("spot-only", requirements=[
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])]
    objects += [pod("api", cpu="1", memory="2Gi", spec_extra=PREFER_ON_DEMAND)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and plan.node_claims[0].capacity_type == "spot"
