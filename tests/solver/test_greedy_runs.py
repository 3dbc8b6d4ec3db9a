"""The yardstick places rows of identical pods at once (``GreedyScheduler._place_run``): the decisions must be
Karpenter's per-pod ones — existing nodes first in order, then the in-flight NodeClaim with the fewest pods,
then a new NodeClaim from the NodePools by weight, NodePool limits charged as claims open — pod for pod."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bench.controller_scale import api_node
from bench.diverse import diverse_objects, karpenter_benchmark_catalog, karpenter_generic_objects
from bench.workloads import linux_pool, pod
from solver.greedy import GreedyScheduler
from solver.merge import merge_classes
from solver.placement import Placement
from solver.problem import compile_problem
from tests.conftest import snapshot_of


def _decisions(placement: Placement) -> tuple[Any, ...]:
    return ([(n.template, [p.key for p in n.pods]) for n in placement.new_nodes],
            sorted((e, [p.key for p in pods]) for e, pods in placement.existing.items()),
            [p.key for p in placement.unschedulable])


def _both(objects: list[dict[str, Any]], catalog: Any = None) -> tuple[Placement, Placement]:
    problem = merge_classes(compile_problem(snapshot_of(objects, catalog)))
    return GreedyScheduler(problem).run(), GreedyScheduler(problem, batch_runs=False).run()


@pytest.mark.parametrize(("pods", "existing", "new"), [(6, [4, 2], 0), (20, [4, 4], 12)])
def test_identical_pods_fill_existing_nodes_in_order_then_new_claims(pods: int, existing: list[int],
                                                                    new: int) -> None:
    # two nodes with 4 allocatable cpu (Karpenter tries existing nodes first, initialized ones by name)
    objects = [linux_pool("default"), api_node("node-a"), api_node("node-b"),
               *(pod(f"p-{i:02d}", cpu="1", memory="1Gi") for i in range(pods))]
    batched, per_pod = _both(objects)
    assert _decisions(batched) == _decisions(per_pod)
    assert [len(batched.existing.get(e, [])) for e in (0, 1)] == existing
    assert sum(len(n.pods) for n in batched.new_nodes) == new and not batched.unschedulable


def test_a_nodepool_limit_leaves_the_rest_of_a_row_pending() -> None:
    objects = [linux_pool("default", limits={"cpu": "8"}), *(pod(f"p-{i:02d}", cpu="2", memory="1Gi")
                                                            for i in range(12))]
    batched, per_pod = _both(objects)
    assert _decisions(batched) == _decisions(per_pod)
    assert batched.unschedulable and batched.new_nodes


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_batches_match_the_per_pod_loop(seed: int) -> None:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = [linux_pool("default", limits={"cpu": str(rng.choice([40, 400, 4000]))}),
                                     linux_pool("spare", weight=1)]
    objects += [api_node(f"node-{i}", cpu=str(rng.choice([2, 4, 8])), zone=rng.choice(["test-zone-a", "test-zone-b"]))
                for i in range(rng.randint(0, 4))]
    for i in range(rng.randint(50, 300)):
        objects.append(pod(f"p-{i:03d}", cpu=rng.choice(["100m", "500m", "1", "3"]),
                           memory=rng.choice(["128Mi", "1Gi", "6Gi"]),
                           labels={"app": rng.choice("abc")}))
    batched, per_pod = _both(objects)
    assert _decisions(batched) == _decisions(per_pod)


@pytest.mark.parametrize("make", [karpenter_generic_objects, diverse_objects])
def test_karpenter_benchmark_mixes_match_the_per_pod_loop(make: Any) -> None:
    batched, per_pod = _both(make(1500, 5), karpenter_benchmark_catalog(60))
    assert _decisions(batched) == _decisions(per_pod)
