"""The greedy yardstick's device allocator for pods with claims: Karpenter's (``pkg/scheduling/dynamicresources``).

Expected behaviour from Karpenter's design (``designs/dra-scheduling.md``: existing nodes first, then in-flight
NodeClaims, then a new one; on a NodeClaim not launched yet one search per candidate instance type, the types
whose search fails are pruned; a pod's devices are committed when it is added; a 5 s timeout per pod) and from the
Kubernetes DRA documentation (a device is allocated to one claim at a time unless it allows multiple
allocations, each taking its share of the device's capacity; a claim several pods share is allocated once).
Every greedy plan must pass the independent verifier.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.dra import dra_catalog, dra_objects
from bench.workloads import nodepool, pod
from model.dra import ClaimSpec
from model.plan import ProvisioningPlan
from model.snapshot import Snapshot
from providers.catalog_file import load_catalog
from solver.greedy import DeviceTracker, GreedyScheduler, fresh_devices
from solver.placement import Placement
from solver.problem import Problem, compile_problem
from solver.provision import SolveOptions, _Stats, to_plan
from solver.verify import verify
from solver.verify.dra import with_devices
from tests.conftest import snapshot_of

ROOT = Path(__file__).resolve().parents[2]
CATALOG = load_catalog(ROOT / "fixtures/catalogs/kwok-dra.yaml")
DRIVER = "gpu.kwok.nodeplan.io"
GPU_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
             "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
POOL = nodepool("gpu", requirements=[{"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["g"]}])


def whole(model: str) -> dict[str, Any]:
    """One whole GPU (not a MIG partition) of ``model``."""
    return {"name": "gpu", "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": (
        f'device.attributes["{DRIVER}"].type == "gpu" && device.attributes["{DRIVER}"].model == "{model}"')}}]}}


def template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def claim(name: str, *requests: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
           "spec": {"devices": {"requests": list(requests)}}}
    return {**out, "status": status} if status else out


def gpu_pods(name: str, count: int, *, template_name: str = "", claim_name: str = "", cpu: str = "500m"
             ) -> list[dict[str, Any]]:
    ref = {"name": "gpu", **({"resourceClaimTemplateName": template_name} if template_name
                             else {"resourceClaimName": claim_name})}
    return [pod(f"{name}-{i}", cpu=cpu, memory="1Gi", owner=name, spec_extra={"resourceClaims": [ref]})
            for i in range(count)]


def greedy(objects: list[dict[str, Any]], catalog: Any = CATALOG) -> tuple[Snapshot, Problem, GreedyScheduler,
                                                                           Placement, ProvisioningPlan]:
    """Greedy's placement and its plan, which the verifier must accept."""
    snapshot = snapshot_of(objects, catalog=catalog)
    problem = compile_problem(snapshot)
    scheduler = GreedyScheduler(problem)
    placement = scheduler.run()
    plan = to_plan(problem, placement, placement, 0.0, "FEASIBLE", time.monotonic(), SolveOptions(), _Stats())
    assert verify(snapshot, plan) == []
    plan = with_devices(snapshot, plan)  # the verifier's concrete allocation, as ``solve`` reports it
    return snapshot, problem, scheduler, placement, plan


def one_a100_capacity(name: str) -> int:
    """How many 1-GPU a100 claims a node of this type takes, read from its inventory: its whole a100 GPUs, and for
    a device that allows multiple allocations its memory over the request policy's default share."""
    it = next(t for t in CATALOG if t.name == name)
    total = 0
    for d in fresh_devices(it, "n").devices:
        if d.device.driver != DRIVER or d.device.attribute("model") != "a100" or d.device.attribute("type") != "gpu":
            continue
        if d.device.allow_multiple_allocations:
            memory = d.device.capacity["memory"]
            assert memory.request_policy is not None and memory.request_policy.default == "10Gi"
            total += int(memory.amount // (10 * 2**30))
        else:
            total += 1
    return total


# -- the per-instance-type search and its pruning ------------------------------------------------------------------
def test_a_nodeclaim_keeps_only_the_types_whose_devices_take_every_pod_so_far() -> None:
    _, problem, _, _, _ = greedy([POOL, GPU_CLASS, template("a100", whole("a100")),
                                  *gpu_pods("t", 1, template_name="a100")])
    tracker = DeviceTracker(problem)
    candidates = np.arange(len(problem.templates))
    state: dict[str, Any] = {}
    spec = ClaimSpec.parse({"devices": {"requests": [whole("a100")]}})
    for n in range(1, 10):
        candidates, taken = tracker.on_types([(f"default/t-{n}/gpu", spec)], candidates, state, "claim-0")
        tracker.commit([(f"default/t-{n}/gpu", spec)], taken, state)
        names = {problem.templates[t].instance_type.name for t in candidates.tolist()}
        expected = {it.name for it in CATALOG if one_a100_capacity(it.name) >= n}
        assert names == expected == set(state), n
        # each surviving type holds exactly the n devices (or shares) committed so far
        for it_name, devices in state.items():
            taken_now = len(devices.in_use) or sum(
                int(c["memory"] // (10 * 2**30)) for c in devices.consumed.values())
            assert taken_now == n, (it_name, n)
    assert not len(candidates)  # nine whole a100 GPUs: no type has them


def test_a_shared_device_takes_claims_until_its_capacity_is_gone_then_a_new_node() -> None:
    """Nine 1-GPU a100 pods: after eight, the in-flight claim can only still be the 8-GPU type or the shared device
    (8 × its 10Gi default share of 80Gi), and the shared one is cheaper; the ninth needs a new node."""
    _, _, scheduler, placement, plan = greedy([POOL, GPU_CLASS, template("a100", whole("a100")),
                                               *gpu_pods("t", 9, template_name="a100")])
    assert not placement.unschedulable
    by_size = sorted(plan.node_claims, key=lambda c: -len(c.pods))
    assert [len(c.pods) for c in by_size] == [8, 1]
    assert by_size[0].instance_type == "g-8x-a100x1-shared"
    singles = [it for it in CATALOG if one_a100_capacity(it.name) >= 1]
    cheapest = min(o.price for it in singles for o in it.offerings if o.available)
    assert by_size[1].price == cheapest and one_a100_capacity(by_size[1].instance_type) >= 1
    assert scheduler.devices is not None and scheduler.devices.timeouts == 0


def test_existing_nodes_devices_are_searched_first() -> None:
    """An initialized g-8x-t4x2 node published two t4 GPUs; an allocated claim holds gpu-0. One t4 pod takes
    gpu-1 there; the next finds no free t4 on it and gets a new node."""
    it = next(t for t in CATALOG if t.name == "g-8x-t4x2")
    labels = {**it.labels, "topology.kubernetes.io/zone": "test-zone-a", "karpenter.sh/capacity-type": "on-demand",
              "karpenter.sh/nodepool": "gpu", "karpenter.sh/initialized": "true", "kubernetes.io/hostname": "gpu-a"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a", "labels": labels},
            "spec": {"providerID": "kwok://gpu-a"},
            "status": {"allocatable": {"cpu": "8", "memory": "60Gi", "pods": "110"},
                       "capacity": {"cpu": "8", "memory": "64Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    slices = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               **s.api(owner={"kind": "Node", "name": "gpu-a"})} for s in it.node_resource_slices("gpu-a")]
    held = claim("held", whole("t4"), status={"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "gpu-a", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}]}]}}})
    _, _, scheduler, placement, plan = greedy([POOL, GPU_CLASS, node, *slices, held, template("t4", whole("t4")),
                                               *gpu_pods("t", 2, template_name="t4")])
    assert [len(p) for p in placement.existing.values()] == [1]
    assert len(placement.new_nodes) == 1 and len(placement.new_nodes[0].pods) == 1
    assert scheduler.devices is not None
    [devices] = scheduler.devices.existing.values()
    assert sorted(d.device for d in devices.in_use) == ["gpu-0", "gpu-1"]
    [existing] = [e for e in plan.existing_nodes if e.pods]
    assert existing.name == "gpu-a"


def test_a_claim_shared_by_several_pods_is_allocated_once_on_one_node() -> None:
    _, _, scheduler, _, plan = greedy([POOL, GPU_CLASS, claim("shared", whole("t4")),
                                       *gpu_pods("serve", 3, claim_name="shared")])
    [node] = plan.node_claims
    assert sorted(node.pods) == ["default/serve-0", "default/serve-1", "default/serve-2"]
    assert [(d.claim, d.device) for d in node.devices or []] == [("default/shared", "gpu-0")]
    assert scheduler.devices is not None and scheduler.devices.allocated == {"default/shared"}


# -- the timeout -------------------------------------------------------------------------------------------------
def test_a_search_past_karpenters_budget_is_a_timeout_and_does_not_fit() -> None:
    """Nine one-device requests on an eight-GPU node: the depth-first search tries every order of the eight
    devices over the first eight requests before it can give up, far past the budget standing for Karpenter's 5 s.
    Eight requests fit at once."""
    _, problem, _, _, _ = greedy([POOL, GPU_CLASS, template("a100", whole("a100")),
                                  *gpu_pods("t", 1, template_name="a100")])
    tracker = DeviceTracker(problem)
    it = next(t for t in CATALOG if t.name == "g-64x-a100x8")
    requests = [{**whole("a100"), "name": f"r{i}"} for i in range(9)]
    nine = ClaimSpec.parse({"devices": {"requests": requests}})
    eight = ClaimSpec.parse({"devices": {"requests": requests[:8]}})
    started = time.monotonic()
    assert tracker.search([("default/nine", nine)], fresh_devices(it, "n")) is None
    assert tracker.timeouts == 1
    assert time.monotonic() - started < 30
    found = tracker.search([("default/eight", eight)], fresh_devices(it, "n"))
    assert found is not None and len({r.device for r in found}) == 8 and tracker.timeouts == 1


# -- the bench mix: valid, deterministic ---------------------------------------------------------------------------
def test_greedy_on_the_dra_bench_mix_verifies_and_is_deterministic() -> None:
    objects = dra_objects(300, seed=7)
    _, problem, scheduler, placement, plan = greedy(objects, catalog=dra_catalog())
    assert scheduler.devices is not None and scheduler.devices.allocated  # shared claims went through it
    assert len(placement.unschedulable) == 0
    again = GreedyScheduler(problem).run()
    assert [(n.template, [p.key for p in n.pods]) for n in again.new_nodes] == \
        [(n.template, [p.key for p in n.pods]) for n in placement.new_nodes]
    gpu_nodes = [c for c in plan.node_claims if c.devices]
    assert gpu_nodes and all(len({(d.pool, d.device) for d in c.devices or []}) >= 1 for c in gpu_nodes)
