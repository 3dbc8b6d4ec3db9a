"""DRA claims in the solver and the verifier. Expected behaviour from the Kubernetes DRA documentation
(https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/) and the scheduler's
allocator, not from nodeplan's output:

- a pod's claim gets devices on the node the pod runs on: a ResourceClaimTemplate gives every pod its own
  claim; a named ResourceClaim is one allocation shared by every pod that references it, so those pods run
  where its devices are (node-local devices: one node);
- a request with ``allocationMode: ExactCount`` takes ``count`` devices, each matching the DeviceClass's
  selectors and the request's (CEL); a device is allocated to one claim at a time; ``All`` takes every
  matching device of the node, and fails if one is already allocated; ``adminAccess`` takes devices without
  allocating them;
- an allocated claim is usable only from the nodes its ``status.allocation.nodeSelector`` selects;
- a claim that does not exist, or a DeviceClass that does not exist, keeps the pod pending; a CEL selector
  that errors on a device aborts the pod's scheduling (the pod stays pending).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.workloads import nodepool, pod
from model.plan import ProvisioningPlan
from providers.catalog_file import load_catalog
from solver.verify import violations
from tests.conftest import snapshot_of, solve_verified

ROOT = Path(__file__).resolve().parents[2]
CATALOG = load_catalog(ROOT / "fixtures/catalogs/kwok-dra.yaml")
DRIVER = "gpu.kwok.nodeplan.io"
GPU_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
             "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def _model(model: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{model}"'}}]


def _request(count: int = 1, *, selectors: list[dict[str, Any]] | None = None, mode: str = "ExactCount",
             admin: bool = False, name: str = "gpu") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = selectors
    if admin:
        exactly["adminAccess"] = True
    return {"name": name, "exactly": exactly}


def _template(name: str, *requests: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def _claim(name: str, *requests: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": name, "namespace": "default", "uid": f"uid-claim-{name}"},
                           "spec": {"devices": {"requests": list(requests)}}}
    if status:
        out["status"] = status
    return out


def _gpu_pods(name: str, count: int, *, template: str = "", claim: str = "", cpu: str = "1",
              node_name: str | None = None) -> list[dict[str, Any]]:
    ref = {"name": "gpu", **({"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim})}
    return [pod(f"{name}-{i}", cpu=cpu, memory="1Gi", owner=name, node_name=node_name,
                spec_extra={"resourceClaims": [ref]}) for i in range(count)]


def _pool() -> dict[str, Any]:
    return nodepool("gpu", requirements=[{"key": "karpenter.kwok.sh/instance-family", "operator": "In",
                                          "values": ["g"]}])


def _solve(objects: list[dict[str, Any]]) -> ProvisioningPlan:
    return solve_verified(snapshot_of([_pool(), GPU_CLASS, *objects], catalog=CATALOG)).plan


def _gpus(plan: ProvisioningPlan) -> dict[str, int]:
    """Instance type → how many of its devices (the name says: ...x<model>x<n>)."""
    return {c.name: int(c.instance_type.split("x")[-1].split("-")[0]) for c in plan.node_claims}


def _pending(plan: ProvisioningPlan) -> dict[str, str]:
    return {u.pod: u.reason for u in plan.unschedulable}


# --- per-pod claims from a template ---------------------------------------------------------------------------

def test_every_pod_gets_its_own_devices_and_no_node_holds_more_claims_than_devices() -> None:
    plan = _solve([_template("one-gpu", _request()), *_gpu_pods("train", 5, template="one-gpu")])
    assert not plan.unschedulable
    gpus = _gpus(plan)
    for claim in plan.node_claims:
        assert len(claim.pods) <= gpus[claim.name], (claim.instance_type, claim.pods)
    assert sum(len(c.pods) for c in plan.node_claims) == 5


def test_count_needs_a_node_with_that_many_matching_devices() -> None:
    plan = _solve([_template("four-a100", _request(4, selectors=_model("a100"))),
                   *_gpu_pods("big", 1, template="four-a100")])
    assert not plan.unschedulable
    (claim,) = plan.node_claims
    assert "a100" in claim.instance_type and _gpus(plan)[claim.name] >= 4


def test_selectors_pick_the_model_and_the_cheapest_type_that_has_it() -> None:
    plan = _solve([_template("one-h100", _request(selectors=_model("h100"))),
                   *_gpu_pods("infer", 1, template="one-h100")])
    (claim,) = plan.node_claims
    assert "h100" in claim.instance_type
    h100 = [it for it in CATALOG if "h100" in it.name]
    cheapest = min(o.price for it in h100 for o in it.offerings if o.available)
    assert claim.price == pytest.approx(cheapest)


def test_a_request_no_instance_type_can_satisfy_leaves_the_pod_pending_naming_it() -> None:
    plan = _solve([_template("nine", _request(9, selectors=_model("a100"))), *_gpu_pods("huge", 1, template="nine")])
    assert not plan.node_claims
    reason = _pending(plan)["default/huge-0"]
    assert "9 free device(s)" in reason and "request gpu" in reason, reason


# --- shared and allocated claims ------------------------------------------------------------------------------

def test_pods_sharing_a_named_claim_run_on_one_node_and_use_one_device() -> None:
    plan = _solve([_claim("shared", _request(selectors=_model("t4"))), *_gpu_pods("serve", 2, claim="shared")])
    assert not plan.unschedulable
    (claim,) = plan.node_claims  # one node: the claim's one device is there
    assert sorted(claim.pods) == ["default/serve-0", "default/serve-1"]
    assert claim.instance_type == "g-4x-t4x1"  # one device is enough for both pods
    # the plan reports the allocation: one device, for the claim, with its first consumer
    assert [(d.claim, d.device) for d in claim.devices] == [("default/shared", "gpu-0")]


def test_a_pod_whose_claim_is_missing_stays_pending() -> None:
    plan = _solve(_gpu_pods("orphan", 1, claim="absent"))
    assert not plan.node_claims
    assert "resourceclaim default/absent not found" in _pending(plan)["default/orphan-0"]


def test_a_missing_device_class_keeps_the_pod_pending() -> None:
    template = _template("other", {"name": "gpu", "exactly": {"deviceClassName": "nope"}})
    plan = _solve([template, *_gpu_pods("p", 1, template="other")])
    assert not plan.node_claims
    assert "device class nope not found" in _pending(plan)["default/p-0"]


def _gpu_node(name: str, instance_type: str) -> list[dict[str, Any]]:
    """An initialized KWOK node of ``instance_type`` and the ResourceSlices it published."""
    it = next(t for t in CATALOG if t.name == instance_type)
    labels = {**it.labels, "topology.kubernetes.io/zone": "test-zone-a", "karpenter.sh/capacity-type": "on-demand",
              "karpenter.sh/nodepool": "gpu", "karpenter.sh/initialized": "true", "kubernetes.io/hostname": name}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"kwok://{name}"},
            "status": {"allocatable": {"cpu": "8", "memory": "60Gi", "pods": "110"},
                       "capacity": {"cpu": "8", "memory": "64Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    slices = [s.api(owner={"kind": "Node", "name": name}) for s in it.node_resource_slices(name)]
    return [node, *[{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **s} for s in slices]]


def test_free_devices_of_an_existing_node_are_used_before_launching() -> None:
    objects = [*_gpu_node("gpu-a", "g-8x-t4x2"), _template("one-gpu", _request()),
               *_gpu_pods("train", 2, template="one-gpu")]
    plan = _solve(objects)
    assert not plan.node_claims
    assert {k for e in plan.existing_nodes for k in e.pods} == {"default/train-0", "default/train-1"}


def test_devices_held_by_allocated_claims_are_not_offered_again() -> None:
    allocated = _claim("held", _request(), status={"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "gpu-a", "device": "gpu-0"},
                                {"request": "gpu", "driver": DRIVER, "pool": "gpu-a", "device": "gpu-1"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}]}]}}})
    objects = [*_gpu_node("gpu-a", "g-8x-t4x2"), allocated, _template("one-gpu", _request()),
               *_gpu_pods("train", 1, template="one-gpu")]
    plan = _solve(objects)
    assert len(plan.node_claims) == 1 and plan.node_claims[0].pods == ["default/train-0"]


def test_a_pod_using_an_allocated_claim_goes_where_the_devices_are() -> None:
    allocated = _claim("held", _request(), status={"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "gpu-a", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}]}]}}})
    objects = [*_gpu_node("gpu-a", "g-8x-t4x2"), *_gpu_node("gpu-b", "g-8x-t4x2"), allocated,
               *_gpu_pods("user", 1, claim="held")]
    plan = _solve(objects)
    assert [e.name for e in plan.existing_nodes if e.pods] == ["gpu-a"]


# --- All and adminAccess --------------------------------------------------------------------------------------

def test_all_takes_a_whole_node_and_nothing_else_with_devices_shares_it() -> None:
    plan = _solve([_template("all", _request(mode="All", selectors=_model("t4"))), _template("one", _request()),
                   *_gpu_pods("whole", 1, template="all"), *_gpu_pods("single", 1, template="one")])
    assert not plan.unschedulable
    where = {k: c.name for c in plan.node_claims for k in c.pods}
    assert where["default/whole-0"] != where["default/single-0"]


def test_admin_access_takes_no_device() -> None:
    objects = [*_gpu_node("gpu-a", "g-4x-t4x1"), _template("one", _request()),
               _template("watch", _request(admin=True)),
               *_gpu_pods("train", 1, template="one"), *_gpu_pods("monitor", 1, template="watch", cpu="100m")]
    plan = _solve(objects)
    assert not plan.node_claims  # the monitor shares the node's only device with the trainer
    assert {k for e in plan.existing_nodes for k in e.pods} == {"default/train-0", "default/monitor-0"}


# --- CEL and features not modelled yet ------------------------------------------------------------------------

def test_a_selector_that_errors_on_every_device_leaves_the_pod_pending_with_the_cel_error() -> None:
    broken = [{"cel": {"expression": f'device.attributes["{DRIVER}"].nosuch == "x"'}}]
    plan = _solve([_template("broken", _request(selectors=broken)), *_gpu_pods("p", 1, template="broken")])
    assert not plan.node_claims
    assert "CEL selector fails" in _pending(plan)["default/p-0"]


def test_a_selector_that_does_not_compile_leaves_the_pod_pending_naming_it() -> None:
    broken = [{"cel": {"expression": "device.driver == "}}]
    plan = _solve([_template("broken", _request(selectors=broken)), *_gpu_pods("p", 1, template="broken")])
    assert not plan.node_claims
    assert "does not compile" in _pending(plan)["default/p-0"] and "request gpu" in _pending(plan)["default/p-0"]


def _either(first: str, second: str, first_count: int = 1) -> dict[str, Any]:
    return {"name": "gpu", "firstAvailable": [
        {"name": "first", "deviceClassName": "gpu", "count": first_count, "selectors": _model(first)},
        {"name": "second", "deviceClassName": "gpu", "selectors": _model(second)}]}


def test_first_available_falls_back_to_the_second_alternative_where_the_first_is_not_offered() -> None:
    """The NodePool offers no h100 type: every pod runs on t4 devices, the sub-request the allocator tries next."""
    pool = nodepool("gpu", requirements=[{"key": "karpenter.kwok.sh/instance-gpu-name", "operator": "In",
                                          "values": ["t4"]}])
    snapshot = snapshot_of([pool, GPU_CLASS, _template("either", _either("h100", "t4")),
                            *_gpu_pods("p", 3, template="either")], catalog=CATALOG)
    plan = solve_verified(snapshot).plan
    assert not plan.unschedulable
    assert all("t4" in c.instance_type for c in plan.node_claims)
    assert {d.request for c in plan.node_claims for d in c.devices or []} == {"gpu/second"}


def test_first_available_counts_the_largest_alternative_on_nodes_where_both_can_be_taken() -> None:
    """Both alternatives match the same devices (any a100); whichever the scheduler takes must fit, so a node
    of 2 a100 holds one pod asking 'two, or else one', not two."""
    request = {"name": "gpu", "firstAvailable": [
        {"name": "two", "deviceClassName": "gpu", "count": 2, "selectors": _model("a100")},
        {"name": "one", "deviceClassName": "gpu", "count": 1, "selectors": _model("a100")}]}
    pool = nodepool("gpu", requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                          "values": ["g-16x-a100x2"]}])
    snapshot = snapshot_of([pool, GPU_CLASS, _template("flex", request), *_gpu_pods("p", 2, template="flex")],
                           catalog=CATALOG)
    plan = solve_verified(snapshot).plan
    assert len(plan.node_claims) == 2 and all(len(c.pods) == 1 for c in plan.node_claims)


# --- the verifier, on plans the solver did not make -----------------------------------------------------------

def _plan(claims: list[tuple[str, list[str]]]) -> ProvisioningPlan:
    it = {t.name: t for t in CATALOG}
    nodes = [{"name": f"n{i}", "nodePool": "gpu", "instanceType": name, "zone": "test-zone-a",
              "capacityType": "on-demand", "price": next(o.price for o in it[name].offerings
                                                        if o.zone == "test-zone-a" and o.capacity_type == "on-demand"),
              "pods": pods} for i, (name, pods) in enumerate(claims)]
    return ProvisioningPlan.model_validate({
        "nodeClaims": nodes, "cost": {"total": sum(n["price"] for n in nodes), "lowerBound": 0.0},
        "solver": {"status": "FEASIBLE", "wallSeconds": 0.0}})


def _rules(objects: list[dict[str, Any]], plan: ProvisioningPlan) -> list[str]:
    snapshot = snapshot_of([_pool(), GPU_CLASS, *objects], catalog=CATALOG)
    return [v.message for v in violations(snapshot, plan) if v.rule == "DRA resource claims"]


def test_verifier_rejects_more_claims_than_devices_on_a_node() -> None:
    objects = [_template("one", _request()), *_gpu_pods("t", 2, template="one")]
    assert _rules(objects, _plan([("g-8x-t4x2", ["default/t-0", "default/t-1"])])) == []
    bad = _rules(objects, _plan([("g-4x-t4x1", ["default/t-0", "default/t-1"])]))
    assert len(bad) == 1 and "default/t-1" in bad[0]


def test_verifier_rejects_a_gpu_pod_on_a_node_without_the_model() -> None:
    objects = [_template("h", _request(selectors=_model("h100"))), *_gpu_pods("t", 1, template="h")]
    assert _rules(objects, _plan([("g-8x-a100x1", ["default/t-0"])]))
    assert _rules(objects, _plan([("g-16x-h100x2", ["default/t-0"])])) == []


def test_verifier_rejects_a_shared_claim_split_over_two_nodes() -> None:
    objects = [_claim("shared", _request()), *_gpu_pods("s", 2, claim="shared")]
    bad = _rules(objects, _plan([("g-4x-t4x1", ["default/s-0"]), ("g-4x-t4x1", ["default/s-1"])]))
    assert len(bad) == 1 and "allocated on node" in bad[0]


def test_the_plan_gate_takes_out_what_the_verifier_rejects() -> None:
    """The verifier is the gate's arbiter: a plan that breaks a claim is never returned."""
    from solver.gate import gate
    objects = [_template("one", _request()), *_gpu_pods("t", 2, template="one")]
    snapshot = snapshot_of([_pool(), GPU_CLASS, *objects], catalog=CATALOG)
    outcome = gate(snapshot, _plan([("g-4x-t4x1", ["default/t-0", "default/t-1"])]))
    assert violations(snapshot, outcome.plan) == []
    assert "default/t-1" in {u.pod for u in outcome.plan.unschedulable}


# --- partitionable devices (shared counters) and multi-allocatable devices (consumable capacity) ----------------

def _only(instance_type: str) -> dict[str, Any]:
    return nodepool("gpu", requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                          "values": [instance_type]}])


def _profile(profile: str) -> list[dict[str, Any]]:
    """Partitions of one profile. The whole GPU has no ``profile`` attribute, and reading a missing attribute
    is a CEL runtime error that aborts the pod's scheduling, so the selector checks the type first (``&&``
    short-circuits)."""
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "mig" && '
                                   f'device.attributes["{DRIVER}"].profile == "{profile}"'}}]


def test_partitions_are_bounded_by_the_counters_they_draw_on() -> None:
    """g-16x-a100x1-mig: one counter set (80Gi memory, 7 compute); 3g.40gb partitions draw 40Gi and 3, 1g.10gb
    ones 10Gi and 1. Two 3g and one 1g need 90Gi: they cannot share one node; seven 1g fit one node."""
    small = _template("small", _request(selectors=_profile("1g.10gb")))
    large = _template("large", _request(selectors=_profile("3g.40gb")))
    pods = [*_gpu_pods("big", 2, template="large"), *_gpu_pods("tiny", 1, template="small")]
    mixed = solve_verified(snapshot_of([_only("g-16x-a100x1-mig"), GPU_CLASS, small, large, *pods],
                                       catalog=CATALOG)).plan
    assert not mixed.unschedulable and len(mixed.node_claims) == 2
    packed = solve_verified(snapshot_of([_only("g-16x-a100x1-mig"), GPU_CLASS, small,
                                         *_gpu_pods("tiny", 7, template="small", cpu="500m")], catalog=CATALOG)).plan
    assert not packed.unschedulable and len(packed.node_claims) == 1


def test_a_shared_device_holds_as_many_allocations_as_its_capacity() -> None:
    """g-8x-a100x1-shared: one multi-allocatable device, 80Gi memory, requests rounded up to 5Gi steps from 5Gi,
    10Gi when a request names none. Requests of 18Gi take 20Gi: four per device, so five pods need two nodes."""
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "18Gi"}}}}
    plan = solve_verified(snapshot_of([_only("g-8x-a100x1-shared"), GPU_CLASS, _template("slice", request),
                                       *_gpu_pods("s", 5, template="slice", cpu="500m")], catalog=CATALOG)).plan
    assert not plan.unschedulable
    assert sorted(len(c.pods) for c in plan.node_claims) == [1, 4]
    default = solve_verified(snapshot_of([_only("g-8x-a100x1-shared"), GPU_CLASS, _template("one", _request()),
                                          *_gpu_pods("d", 8, template="one", cpu="500m")], catalog=CATALOG)).plan
    assert not default.unschedulable and len(default.node_claims) == 1  # 8 × the 10Gi default = 80Gi


# --- order: the kube-scheduler allocates first fit, pod after pod -----------------------------------------------

def _index_selector(index: int) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].index == {index}'}}]


def test_overlapping_requests_are_planned_so_that_any_bind_order_allocates() -> None:
    """On g-16x-a100x2, 'any GPU' may take gpu-0 or gpu-1, 'gpu-0' only gpu-0. Both on one node hold only if the
    gpu-0 pod binds first (the allocator gives the other pod the first free device, gpu-0): the plan must not
    depend on that, and says its model is stricter than Kubernetes there."""
    from solver.verify.replay import replay
    pool = _only("g-16x-a100x2")
    objects = [pool, GPU_CLASS, _template("any", _request()),
               _template("zero", _request(selectors=_index_selector(0))),
               *_gpu_pods("any", 1, template="any"), *_gpu_pods("zero", 1, template="zero")]
    snapshot = snapshot_of(objects, catalog=CATALOG)
    plan = solve_verified(snapshot).plan
    assert not plan.unschedulable and len(plan.node_claims) == 2
    assert any("overlap partially" in note for note in plan.solver.conservative)
    assert replay(snapshot, plan, orders=20).ok
    # the same two pods on one node: valid in the plan's order, stranded when the 'any' pod binds first
    together = _plan([("g-16x-a100x2", ["default/zero-0", "default/any-0"])])
    assert [v for v in violations(snapshot, together) if v.rule == "DRA resource claims"] == []
    report = replay(snapshot, together, orders=20)
    assert not report.ok and report.by_rule.get("DynamicResources", 0) > 0
