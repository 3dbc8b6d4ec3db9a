"""The floored construction (``solver.lns.size_floor``, ``Matrices.floored``): where per-node counters force
many nodes, the construction opens only nodes large enough for those to take the batch, then shrinks them.
Each test checks a property the construction must keep (same demand, verified plan, every class still
placeable) and the saving it is for, on Karpenter's diverse mix over the KWOK catalog."""

from __future__ import annotations

import time

import numpy as np

from bench.diverse import diverse_objects, karpenter_benchmark_catalog, karpenter_generic_objects
from model.instancetype import MICRO
from model.labels import INSTANCE_TYPE
from model.resources import CPU
from solver.decode import decode, shrink
from solver.lns import Matrices, construct, forced_nodes, reconstruct, size_floor
from solver.placement import Placement
from solver.problem import Problem
from solver.provision import SolveOptions, _Stats, to_plan
from solver.verify import verify
from tests.conftest import snapshot_of, solve_verified
from tests.solver.test_lns import _bench, _compiled, _covered

#: Karpenter's ``makeDiversePods``: a fifth of the batch are ``app=nginx`` pods repelling each other per node
PODS = 250


def _diverse():  # type: ignore[no-untyped-def]
    snapshot = snapshot_of(_bench(diverse_objects(PODS, seed=42)))
    return (snapshot, *_compiled(snapshot))


def _nginx(problem: Problem) -> int:
    return sum(1 for c in problem.classes for pod in c.pods if pod.labels.get("app") == "nginx")


def _verified(snapshot, problem: Problem, placement: Placement) -> int:  # type: ignore[no-untyped-def]
    plan = to_plan(problem, placement, placement, 0.0, "FEASIBLE", time.monotonic(), SolveOptions(), _Stats())
    assert verify(snapshot, plan) == []
    assert not placement.unschedulable
    return placement.cost_micros(problem)


def test_hostname_anti_affinity_forces_one_node_per_owner_and_resources_force_none() -> None:
    _, problem, bins, demand, _ = _diverse()
    assert forced_nodes(bins, problem.sizes, demand, problem.resource_axes) == _nginx(problem) == PODS // 5
    generic = snapshot_of(_bench(karpenter_generic_objects(PODS, seed=42)))
    g_problem, g_bins, g_demand, _ = _compiled(generic)
    assert forced_nodes(g_bins, g_problem.sizes, g_demand, g_problem.resource_axes) == 0
    assert size_floor(g_bins, g_problem.sizes, g_demand, g_problem.axes.index(CPU), g_problem.resource_axes) is None


def test_the_floor_is_the_smallest_size_at_which_the_forced_nodes_hold_the_batch() -> None:
    _, problem, bins, demand, _ = _diverse()
    cpu = problem.axes.index(CPU)
    floor = size_floor(bins, problem.sizes, demand, cpu, problem.resource_axes)
    sizes = sorted({int(b.capacity[cpu]) for b in bins if not b.existing})
    total = float(demand @ problem.sizes[:, cpu])
    forced = PODS // 5
    assert floor is not None and floor > sizes[0]
    assert forced * floor >= total
    smaller = [s for s in sizes if s < floor]
    assert forced * smaller[-1] < total


def test_the_floored_construction_places_the_same_pods_verified_and_cheaper() -> None:
    """The plain construction opens each nginx pod's node as the smallest that holds it and strands the rest on
    nodes of their own (KWOK's sizes double); floored, the forced nodes take the batch."""
    snapshot, problem, bins, demand, limits = _diverse()
    cpu = problem.axes.index(CPU)
    floor = size_floor(bins, problem.sizes, demand, cpu, problem.resource_axes)
    assert floor is not None
    matrices = Matrices.of(bins, problem.sizes)
    deadline = time.monotonic() + 60
    plain = construct(bins, problem.sizes, demand, limits, deadline, matrices=matrices)
    floored = construct(bins, problem.sizes, demand, limits, deadline, matrices=matrices.floored(bins, cpu, floor))
    assert (_covered(plain, problem) == demand).all()
    assert (_covered(floored, problem) == demand).all()
    plain_cost = _verified(snapshot, problem, decode(problem, bins, plain))
    floored_placement = shrink(problem, decode(problem, bins, floored))
    floored_cost = _verified(snapshot, problem, floored_placement)
    assert floored_cost < plain_cost
    assert len(floored_placement.new_nodes) < len(decode(problem, bins, plain).new_nodes)


def test_a_class_only_small_nodes_take_keeps_them_under_the_floor() -> None:
    """A pod pinned to the smallest instance type is not left out by the floor: bins below it close only to
    classes some bin at or above it holds."""
    objects = _bench(diverse_objects(PODS, seed=42))
    pinned = next(o for o in objects if o["kind"] == "Pod" and "affinity" not in o["spec"]
                  and "topologySpreadConstraints" not in o["spec"])
    pinned["metadata"]["name"] = "pinned-small"
    pinned["spec"]["nodeSelector"] = {INSTANCE_TYPE: "c-1x-amd64-linux"}
    pinned["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "100m", "memory": "100Mi"}
    snapshot = snapshot_of(objects)
    problem, bins, demand, limits = _compiled(snapshot)
    cpu = problem.axes.index(CPU)
    floor = size_floor(bins, problem.sizes, demand, cpu, problem.resource_axes)
    assert floor is not None
    floored = Matrices.of(bins, problem.sizes).floored(bins, cpu, floor)
    k = problem.class_of()[f"{pinned['metadata'].get('namespace', 'default')}/pinned-small"]
    assert floored.fit[:, k].any()
    assert not any(floored.fit[i, k] for i, b in enumerate(bins) if not b.existing and b.capacity[cpu] >= floor)
    chosen = construct(bins, problem.sizes, demand, limits, time.monotonic() + 60, matrices=floored)
    assert (_covered(chosen, problem) == demand).all()
    _verified(snapshot, problem, shrink(problem, decode(problem, bins, chosen)))
    closed = np.array([not b.existing and b.capacity[cpu] < floor for b in bins])
    plain = Matrices.of(bins, problem.sizes).fit
    others = [j for j in range(len(problem.classes)) if j != k and plain[~closed, j].any()]
    assert not floored.fit[np.ix_(closed, others)].any()


def test_solve_keeps_the_floored_construction_where_it_is_cheaper() -> None:
    """The pipeline runs both constructions and keeps the cheaper (the floored one here), and the plan it returns
    costs no more than that construction did."""
    snapshot, problem, bins, demand, limits = _diverse()
    cpu = problem.axes.index(CPU)
    floor = size_floor(bins, problem.sizes, demand, cpu, problem.resource_axes)
    assert floor is not None
    floored = construct(bins, problem.sizes, demand, limits, time.monotonic() + 60,
                        matrices=Matrices.of(bins, problem.sizes).floored(bins, cpu, floor))
    floored_cost = shrink(problem, decode(problem, bins, floored)).cost_micros(problem)
    result = solve_verified(snapshot, time_limit=5.0)
    assert any("floored one" in note for note in result.plan.solver.notes)
    assert result.plan.cost.total * MICRO <= floored_cost + 1


def test_reconstruct_rebuilds_a_floored_plan_with_its_own_matrices_never_dearer_and_verified() -> None:
    snapshot, problem, bins, demand, limits = _diverse()
    cpu = problem.axes.index(CPU)
    floor = size_floor(bins, problem.sizes, demand, cpu, problem.resource_axes)
    assert floor is not None
    matrices = Matrices.of(bins, problem.sizes).floored(bins, cpu, floor)
    start = shrink(problem, decode(problem, bins, construct(bins, problem.sizes, demand, limits,
                                                           time.monotonic() + 60, matrices=matrices)))
    rebuilt, _, iterations = reconstruct(problem, bins, start, limits, time.monotonic() + 60, seed=1,
                                         max_iterations=6, matrices=matrices)
    assert iterations == 6
    assert sorted(p.key for n in rebuilt.new_nodes for p in n.pods) == \
        sorted(p.key for n in start.new_nodes for p in n.pods)
    assert _verified(snapshot, problem, rebuilt) <= start.cost_micros(problem)


def test_a_catalog_stepping_one_vcpu_at_a_time_gets_no_floor() -> None:
    """On Karpenter's 400-type catalog (sizes one vCPU apart) the same batch forces as many nodes, but the next
    size below the floor is within ``FINE_STEP`` of it: nothing is closed (floored, it came out dearer there)."""
    snapshot = snapshot_of(_bench(diverse_objects(PODS, seed=42)), catalog=karpenter_benchmark_catalog())
    problem, bins, demand, _ = _compiled(snapshot)
    assert forced_nodes(bins, problem.sizes, demand, problem.resource_axes) == PODS // 5
    assert size_floor(bins, problem.sizes, demand, problem.axes.index(CPU), problem.resource_axes) is None
