"""Network-attached DRA devices (ResourceSlices with ``allNodes`` or ``nodeSelector``) in the solver and the
verifier. Expected behaviour from the Kubernetes DRA documentation and the ``resource.k8s.io/v1`` API
reference, not from nodeplan's output:

- a slice with ``allNodes: true`` offers its devices to every node, one with ``nodeSelector`` to the nodes it
  selects; a device is allocated to one claim at a time wherever the pod using it runs;
- the pods sharing one claim on network-attached devices need not share a node (the allocation's node
  selector is the slices', not one node's);
- a pod whose claim finds no free device stays pending.
"""

from __future__ import annotations

from typing import Any

from bench.workloads import nodepool, pod
from model.plan import ProvisioningPlan
from model.snapshot import Snapshot
from solver.verify import violations
from solver.verify.replay import replay
from tests.conftest import snapshot_of, solve_verified

DRIVER = "fabric.example.com"
FABRIC = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "fabric"},
          "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
ZONE = "topology.kubernetes.io/zone"


def _slice(name: str, devices: int, *, zone: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": DRIVER, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                            "devices": [{"name": f"{name}-{i}", "attributes": {"slot": {"int": i}}}
                                        for i in range(devices)]}
    if zone:
        spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": ZONE, "operator": "In", "values": [zone]}]}]}
    else:
        spec["allNodes"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def _template() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "link", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "link", "exactly": {"deviceClassName": "fabric"}}]}}}}


def _claim(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
                           "spec": {"devices": {"requests": [{"name": "link",
                                                              "exactly": {"deviceClassName": "fabric"}}]}}}
    if status:
        out["status"] = status
    return out


def _pods(name: str, count: int, *, template: str = "", claim: str = "", cpu: str = "1") -> list[dict[str, Any]]:
    ref = {"name": "link", **({"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim})}
    return [pod(f"{name}-{i}", cpu=cpu, memory="1Gi", owner=name, spec_extra={"resourceClaims": [ref]})
            for i in range(count)]


def _solve(objects: list[dict[str, Any]]) -> tuple[Snapshot, ProvisioningPlan]:
    snapshot = snapshot_of([nodepool("default"), FABRIC, *objects])
    return snapshot, solve_verified(snapshot).plan


def _order_proof(snapshot: Snapshot, plan: ProvisioningPlan) -> None:
    for outcome in replay(snapshot, plan, orders=15).outcomes:
        assert outcome.refused.get("DynamicResources", 0) == 0, (outcome.name, outcome.refused)
        assert not outcome.never_bound, outcome.name


def test_pods_take_network_devices_on_any_node() -> None:
    snapshot, plan = _solve([_slice("fabric", 4), _template(), *_pods("p", 3, template="link")])
    assert not plan.unschedulable
    assert sum(len(c.pods) for c in plan.node_claims) == 3
    devices = {d.device for c in plan.node_claims for d in c.devices or []}
    assert len(devices) == 3 and devices <= {f"fabric-{i}" for i in range(4)}
    _order_proof(snapshot, plan)


def test_pods_beyond_the_free_network_devices_stay_pending_naming_them() -> None:
    snapshot, plan = _solve([_slice("fabric", 4), _template(), *_pods("p", 6, template="link")])
    assert sum(len(c.pods) for c in plan.node_claims) == 4
    reasons = [u.reason for u in plan.unschedulable]
    assert len(reasons) == 2 and all("network-attached" in r for r in reasons)
    _order_proof(snapshot, plan)


def test_a_device_held_by_an_allocated_claim_is_not_offered_again() -> None:
    held = _claim("taken", status={"allocation": {
        "devices": {"results": [{"request": "link", "driver": DRIVER, "pool": "fabric", "device": "fabric-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": ZONE, "operator": "Exists"}]}]}}})
    _, plan = _solve([_slice("fabric", 2), _template(), held, *_pods("p", 2, template="link")])
    assert sum(len(c.pods) for c in plan.node_claims) == 1 and len(plan.unschedulable) == 1
    assert {d.device for c in plan.node_claims for d in c.devices or []} == {"fabric-1"}


def test_pods_sharing_a_claim_on_network_devices_may_run_on_different_nodes() -> None:
    """Three pods of 3 CPUs share one claim; no 4-vCPU node holds two of them, so they need three nodes, which
    a node-local device could never allow."""
    pool = nodepool("default", requirements=[{"key": "karpenter.kwok.sh/instance-cpu", "operator": "In",
                                              "values": ["4"]}])
    snapshot = snapshot_of([pool, FABRIC, _slice("fabric", 1), _claim("shared"),
                            *_pods("s", 3, claim="shared", cpu="3")])
    plan = solve_verified(snapshot).plan
    assert not plan.unschedulable
    assert len(plan.node_claims) == 3
    _order_proof(snapshot, plan)


def test_devices_reachable_from_one_zone_put_their_pods_there() -> None:
    snapshot, plan = _solve([_slice("fabric-a", 2, zone="test-zone-b"), _template(),
                             *_pods("z", 2, template="link")])
    assert not plan.unschedulable
    assert {c.zone for c in plan.node_claims} == {"test-zone-b"}
    _order_proof(snapshot, plan)


def test_verifier_rejects_a_network_device_given_twice() -> None:
    """The verifier allocates network devices across nodes: two pods on two nodes cannot both have the only
    device."""
    snapshot = snapshot_of([nodepool("default"), FABRIC, _slice("fabric", 1), _template(),
                            *_pods("p", 2, template="link")])
    from solver.provision import solve
    plan = solve(snapshot).plan
    assert len(plan.unschedulable) == 1
    claim = plan.node_claims[0]
    twice = plan.model_copy(update={"unschedulable": [], "node_claims": [
        claim.model_copy(update={"pods": [claim.pods[0]], "devices": None}),
        claim.model_copy(update={"name": "other", "pods": [plan.unschedulable[0].pod], "devices": None})]})
    assert any(v.rule == "DRA resource claims" for v in violations(snapshot, twice))
