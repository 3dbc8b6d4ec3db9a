"""DRA claim constraints and partitionable devices with several counter sets, in the solver and the verifier.

Expected behaviour from the Kubernetes DRA documentation
(https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/) and the
``resource.k8s.io/v1`` API reference, not from nodeplan's output:

- ``matchAttribute``: every device allocated for the requests the constraint names (all of the claim's
  requests when it names none) has the attribute, with one value;
- ``distinctAttribute``: every such device has the attribute, and no two share a value;
- partitionable devices (``sharedCounters`` / ``consumesCounters``): a device can be allocated only while
  the counter set it draws on has what it consumes left; with one set per physical GPU (MIG), partitions of
  one GPU never draw on another's;
- the kube-scheduler allocates first fit, pod after pod, in whatever order pods bind: a plan must hold in
  every order (checked by replaying random bind orders: no pod may be refused its planned node by the
  DynamicResources filter).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.workloads import nodepool, pod
from model.plan import ProvisioningPlan
from model.snapshot import Snapshot
from providers.catalog_file import load_catalog
from solver.verify import violations
from solver.verify.replay import replay
from tests.conftest import snapshot_of, solve_verified

ROOT = Path(__file__).resolve().parents[2]
DRIVER = "gpu.kwok.nodeplan.io"
GPU_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
             "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
WHOLE = [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "gpu"'}}]


def _catalog(tmp: Path) -> Path:
    """The kwok-dra catalog plus ``g-32x-a100x2-mig``: two A100s, each its own counter set (80Gi memory,
    7 compute) with the whole GPU, two 3g.40gb and seven 1g.10gb partitions drawing on it — as a
    MIG-capable driver publishes them."""
    raw = yaml.safe_load((ROOT / "fixtures/catalogs/kwok-dra.yaml").read_text())
    items = raw["instanceTypes"] if isinstance(raw, dict) else raw
    mig = copy.deepcopy(next(t for t in items if t["name"] == "g-16x-a100x1-mig"))
    mig["name"] = "g-32x-a100x2-mig"
    mig["labels"] = {**mig["labels"], "node.kubernetes.io/instance-type": "g-32x-a100x2-mig",
                     "karpenter.kwok.sh/instance-size": "32", "karpenter.kwok.sh/instance-cpu": "32",
                     "karpenter.kwok.sh/instance-gpu-count": "2"}
    mig["capacity"] = {**mig["capacity"], "cpu": "32", "memory": "256Gi"}
    for offering in mig["offerings"]:
        offering["price"] = round(offering["price"] * 2, 6)
    counters, devices = mig["resourceSlices"]
    for gpu in (1,):
        counters["sharedCounters"].append({**copy.deepcopy(counters["sharedCounters"][0]),
                                           "name": f"gpu-{gpu}-counters"})
        for device in copy.deepcopy(devices["devices"][:10]):
            device["name"] = device["name"].replace("gpu-0", f"gpu-{gpu}")
            device["attributes"]["index"] = {"int": gpu}
            device["attributes"]["numa"] = {"int": gpu}
            for use in device["consumesCounters"]:
                use["counterSet"] = f"gpu-{gpu}-counters"
            devices["devices"].append(device)
    items.append(mig)
    path = tmp / "catalog.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_catalog(_catalog(tmp_path_factory.mktemp("dra-catalog")))


def _only(*types: str) -> dict[str, Any]:
    return nodepool("gpu", requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                          "values": list(types)}])


def _template(name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None
              ) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"spec": {"devices": devices}}}


def _request(name: str = "gpu", count: int = 1, selectors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu", "count": count,
                                      **({"selectors": selectors} if selectors else {})}}


def _pods(name: str, count: int, template: str, cpu: str = "500m") -> list[dict[str, Any]]:
    return [pod(f"{name}-{i}", cpu=cpu, memory="1Gi", owner=name,
                spec_extra={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]})
            for i in range(count)]


def _profile(profile: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "mig" && '
                                   f'device.attributes["{DRIVER}"].profile == "{profile}"'}}]


def _solve(objects: list[dict[str, Any]], catalog: list[Any]) -> tuple[Snapshot, ProvisioningPlan]:
    snapshot = snapshot_of([GPU_CLASS, *objects], catalog=catalog)
    return snapshot, solve_verified(snapshot).plan


def _order_proof(snapshot: Snapshot, plan: ProvisioningPlan, orders: int = 15) -> None:
    """In every bind order tried, no pod is refused its planned node by the scheduler's device allocation."""
    report = replay(snapshot, plan, orders=orders)
    for outcome in report.outcomes:
        assert outcome.refused.get("DynamicResources", 0) == 0, (outcome.name, outcome.refused)
        assert not outcome.never_bound, (outcome.name, outcome.never_bound)


def _per_node(plan: ProvisioningPlan) -> list[int]:
    return sorted((len(c.pods) for c in plan.node_claims), reverse=True)


# --- matchAttribute on one request ------------------------------------------------------------------------

NUMA = f"{DRIVER}/numa"


def test_match_attribute_takes_every_device_of_a_claim_from_one_numa_node(catalog: list[Any]) -> None:
    """g-64x-a100x8 has GPUs 0–3 on NUMA node 0 and 4–7 on NUMA node 1. Claims of 2 GPUs on one NUMA node:
    two per NUMA node, four per machine, whatever order the pods bind in; a fifth needs a second machine."""
    template = _template("pair", [_request(count=2, selectors=WHOLE)], [{"matchAttribute": NUMA}])
    snapshot, plan = _solve([_only("g-64x-a100x8"), template, *_pods("p", 5, "pair")], catalog)
    assert not plan.unschedulable
    assert _per_node(plan) == [4, 1]
    _order_proof(snapshot, plan)
    for claim in plan.node_claims:  # the plan's own allocation keeps each claim on one NUMA node
        by_claim: dict[str, set[str]] = {}
        for device in claim.devices or []:
            by_claim.setdefault(device.claim, set()).add(device.device)
        for names in by_claim.values():
            numa = {int(n.rsplit("-", 1)[1]) // 4 for n in names}
            assert len(numa) == 1, names


def test_three_gpus_on_one_numa_node_leave_one_per_numa_node_unusable(catalog: list[Any]) -> None:
    """Claims of 3 GPUs on one NUMA node of four: one claim per NUMA node, two per machine."""
    template = _template("triple", [_request(count=3, selectors=WHOLE)], [{"matchAttribute": NUMA}])
    snapshot, plan = _solve([_only("g-64x-a100x8"), template, *_pods("t", 4, "triple", cpu="1")], catalog)
    assert not plan.unschedulable
    assert _per_node(plan) == [2, 2]
    _order_proof(snapshot, plan)


def test_match_attribute_with_claims_of_different_sizes_holds_in_any_bind_order(catalog: list[Any]) -> None:
    pair = _template("pair", [_request(count=2, selectors=WHOLE)], [{"matchAttribute": NUMA}])
    triple = _template("triple", [_request(count=3, selectors=WHOLE)], [{"matchAttribute": NUMA}])
    snapshot, plan = _solve([_only("g-64x-a100x8", "g-32x-a100x4"), pair, triple,
                             *_pods("p", 3, "pair"), *_pods("t", 2, "triple")], catalog)
    assert not plan.unschedulable
    _order_proof(snapshot, plan)


def test_a_claim_larger_than_any_numa_node_is_pending_naming_the_constraint(catalog: list[Any]) -> None:
    template = _template("five", [_request(count=5, selectors=WHOLE)], [{"matchAttribute": NUMA}])
    _, plan = _solve([_only("g-64x-a100x8"), template, *_pods("f", 1, "five")], catalog)
    (reason,) = [u.reason for u in plan.unschedulable]
    assert "matchAttribute" in reason and "numa" in reason
    assert not plan.node_claims


# --- distinctAttribute ------------------------------------------------------------------------------------

def test_distinct_attribute_on_unique_values_is_a_plain_count(catalog: list[Any]) -> None:
    """Every GPU of a machine has its own ``index``: claims of 2 GPUs with distinct indexes fit four to an
    eight-GPU machine."""
    template = _template("spread", [_request(count=2, selectors=WHOLE)],
                         [{"distinctAttribute": f"{DRIVER}/index"}])
    snapshot, plan = _solve([_only("g-64x-a100x8"), template, *_pods("s", 4, "spread")], catalog)
    assert not plan.unschedulable and _per_node(plan) == [4]
    _order_proof(snapshot, plan)


def test_distinct_numa_nodes_need_as_many_numa_nodes_as_devices(catalog: list[Any]) -> None:
    """Two GPUs on different NUMA nodes: a four-GPU machine with two NUMA nodes can serve it, three GPUs on
    three NUMA nodes no machine of the catalog can (pending, naming the attribute)."""
    two = _template("two", [_request(count=2, selectors=WHOLE)], [{"distinctAttribute": NUMA}])
    three = _template("three", [_request(count=3, selectors=WHOLE)], [{"distinctAttribute": NUMA}])
    snapshot, plan = _solve([_only("g-64x-a100x8", "g-32x-a100x4"), two, three,
                             *_pods("two", 3, "two"), *_pods("three", 1, "three")], catalog)
    assert {u.pod for u in plan.unschedulable} == {"default/three-0"}
    assert "distinct" in plan.unschedulable[0].reason and "numa" in plan.unschedulable[0].reason
    assert sum(_per_node(plan)) == 3
    _order_proof(snapshot, plan)


# --- matchAttribute across requests of different devices ---------------------------------------------------

def test_match_across_two_requests_takes_both_devices_from_one_numa_node(catalog: list[Any]) -> None:
    """A claim of an even-indexed and an odd-indexed GPU, both on one NUMA node. g-16x-a100x2 has both its GPUs
    on NUMA node 0 (one claim); g-64x-a100x8 has two of each parity per NUMA node: four claims, in any
    binding order, and the devices of each claim share a NUMA node."""
    def parity(rest: int) -> list[dict[str, Any]]:
        return [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "gpu" && '
                                       f'device.attributes["{DRIVER}"].index % 2 == {rest}'}}]
    requests = [_request("even", selectors=parity(0)), _request("odd", selectors=parity(1))]
    template = _template("linked", requests, [{"matchAttribute": NUMA, "requests": ["even", "odd"]}])
    snapshot, plan = _solve([_only("g-16x-a100x2"), template, *_pods("l", 2, "linked")], catalog)
    assert not plan.unschedulable and _per_node(plan) == [1, 1]
    _order_proof(snapshot, plan)
    snapshot, plan = _solve([_only("g-64x-a100x8"), template, *_pods("l", 5, "linked")], catalog)
    assert not plan.unschedulable and _per_node(plan) == [4, 1]
    _order_proof(snapshot, plan)
    for claim in plan.node_claims:
        by_claim: dict[str, set[int]] = {}
        for device in claim.devices or []:
            by_claim.setdefault(device.claim, set()).add(int(device.device.rsplit("-", 1)[1]) // 4)
        assert all(len(numa) == 1 for numa in by_claim.values()), by_claim


def test_match_across_overlapping_requests_holds_in_any_bind_order(catalog: list[Any]) -> None:
    """One GPU of any index and one odd-indexed GPU on one NUMA node, mixed with plain 2-GPU claims: the
    candidates overlap, so the plan uses the bound that holds in any order."""
    odd = [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "gpu" && '
                                  f'device.attributes["{DRIVER}"].index % 2 == 1'}}]
    template = _template("linked", [_request("any", selectors=WHOLE), _request("odd", selectors=odd)],
                         [{"matchAttribute": NUMA}])
    plain = _template("plain", [_request(count=2, selectors=WHOLE)])
    snapshot, plan = _solve([_only("g-64x-a100x8", "g-32x-a100x4"), template, plain,
                             *_pods("l", 3, "linked"), *_pods("p", 2, "plain")], catalog)
    assert not plan.unschedulable
    _order_proof(snapshot, plan, orders=25)


# --- partitionable devices on several counter sets (one per GPU) -------------------------------------------

def test_partitions_of_two_gpus_fill_both_counter_sets(catalog: list[Any]) -> None:
    """g-32x-a100x2-mig: seven 1g.10gb partitions per GPU, each GPU its own counter set (compute 7): fourteen
    per machine, in any bind order; a fifteenth needs another machine."""
    small = _template("small", [_request(selectors=_profile("1g.10gb"))])
    snapshot, plan = _solve([_only("g-32x-a100x2-mig"), small, *_pods("s", 15, "small", cpu="250m")], catalog)
    assert not plan.unschedulable
    assert _per_node(plan) == [14, 1]
    _order_proof(snapshot, plan)


def test_a_partition_never_draws_on_another_gpus_counters(catalog: list[Any]) -> None:
    """Two 3g.40gb partitions take 80Gi of one GPU's 80Gi: with a whole GPU requested too, the machine holds
    the whole GPU on one counter set and two 3g partitions on the other, not more."""
    large = _template("large", [_request(selectors=_profile("3g.40gb"))])
    whole = _template("whole", [_request(selectors=WHOLE)])
    snapshot, plan = _solve([_only("g-32x-a100x2-mig"), large, whole, *_pods("big", 4, "large", cpu="1"),
                             *_pods("w", 1, "whole", cpu="1")], catalog)
    assert not plan.unschedulable
    _order_proof(snapshot, plan, orders=25)
    for claim in plan.node_claims:
        sets: dict[str, int] = {}
        for device in claim.devices or []:
            gpu = device.device.split("-")[1]
            sets[gpu] = sets.get(gpu, 0) + (7 if "-" not in device.device[4:] else 3)
        assert all(v <= 7 for v in sets.values()), (claim.instance_type, claim.devices)


def test_verifier_rejects_more_partitions_than_a_gpus_counters_hold(catalog: list[Any]) -> None:
    """Two GPUs, two 3g.40gb partitions each: a fifth 3g partition on the machine has no counters left."""
    large = _template("large", [_request(selectors=_profile("3g.40gb"))])
    snapshot = snapshot_of([GPU_CLASS, _only("g-32x-a100x2-mig"), large, *_pods("b", 5, "large")], catalog=catalog)
    it = next(t for t in catalog if t.name == "g-32x-a100x2-mig")
    price = next(o.price for o in it.offerings if o.zone == "test-zone-a" and o.capacity_type == "on-demand")
    def plan(pods: int) -> ProvisioningPlan:
        return ProvisioningPlan.model_validate({
            "nodeClaims": [{"name": "n0", "nodePool": "gpu", "instanceType": it.name, "zone": "test-zone-a",
                            "capacityType": "on-demand", "price": price,
                            "pods": [f"default/b-{i}" for i in range(pods)]}],
            "cost": {"total": price, "lowerBound": 0.0}, "solver": {"status": "FEASIBLE", "wallSeconds": 0.0}})
    rules = [v.rule for v in violations(snapshot, plan(5))]
    assert "DRA resource claims" in rules
    assert "DRA resource claims" not in [v.rule for v in violations(snapshot, plan(4))]


# --- random mixes -----------------------------------------------------------------------------------------

@st.composite
def _constrained_claims(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for t in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(["match", "distinct", "mig-small", "mig-large", "plain", "linked"]))
        if shape == "linked":
            first = draw(st.sampled_from(["0", "1", "any"]))
            selectors = WHOLE if first == "any" else [{"cel": {"expression": (
                f'device.attributes["{DRIVER}"].type == "gpu" && device.attributes["{DRIVER}"].index % 2 == {first}')}}]
            odd = [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "gpu" && '
                                          f'device.attributes["{DRIVER}"].index % 2 == 1'}}]
            template = _template(f"t{t}", [_request("a", count=draw(st.integers(1, 2)), selectors=selectors),
                                           _request("b", selectors=odd)], [{"matchAttribute": NUMA}])
        elif shape in ("match", "distinct"):
            attribute = draw(st.sampled_from([NUMA, f"{DRIVER}/index"]))
            count = draw(st.integers(1, 4))
            template = _template(f"t{t}", [_request(count=count, selectors=WHOLE)],
                                 [{f"{shape}Attribute": attribute}])
        elif shape == "plain":
            template = _template(f"t{t}", [_request(count=draw(st.integers(1, 3)), selectors=WHOLE)])
        else:
            profile = "1g.10gb" if shape == "mig-small" else "3g.40gb"
            template = _template(f"t{t}", [_request(selectors=_profile(profile))])
        objects += [template, *_pods(f"w{t}", draw(st.integers(1, 9)), f"t{t}", cpu="250m")]
    return objects


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=_constrained_claims())
def test_random_constraint_and_partition_mixes_verify_and_hold_in_any_order(objects: list[dict[str, Any]]) -> None:
    catalog = _random_catalog()
    pool = nodepool("gpu", requirements=[{"key": "karpenter.kwok.sh/instance-family", "operator": "In",
                                          "values": ["g"]}])
    snapshot = snapshot_of([GPU_CLASS, pool, *objects], catalog=catalog)
    plan = solve_verified(snapshot).plan
    _order_proof(snapshot, plan, orders=8)


_CATALOG: list[Any] = []


def _random_catalog() -> list[Any]:
    if not _CATALOG:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            _CATALOG.extend(load_catalog(_catalog(Path(tmp))))
    return _CATALOG
