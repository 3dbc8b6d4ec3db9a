"""The real Karpenter harness (``bench/karpenter``, ``bench/realkarpenter.py``).

The input conversion is tested always; the runs need the harness binary (``bench/karpenter/build.sh``, not
part of ``make test``) and are skipped without it. What a run must show follows Karpenter's documented
behaviour: every pod of a batch that fits is placed, on instance types of the catalog, launched at the
cheapest compatible offering (the fake provider's ``Create``), existing nodes' free capacity is used before
launching, DaemonSet overhead is part of every new NodeClaim's requests, and a pod no NodePool admits is
reported with Karpenter's error — and nodeplan's verifier accepts such plans.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bench import realkarpenter
from bench.diverse import karpenter_generic_objects
from bench.workloads import linux_pool, pod
from model.instancetype import InstanceType
from model.plan import ProvisioningPlan
from model.quantity import parse_quantity
from model.snapshot import Snapshot, load_snapshot, parse_objects
from providers.kwok import kwok_catalog
from solver.verify import verify

BINARY = realkarpenter.harness_binary()
needs_binary = pytest.mark.skipif(BINARY is None, reason="Karpenter harness not built (bench/karpenter/build.sh)")


def _snapshot(objects: list[dict[str, Any]]) -> Snapshot:
    return parse_objects(objects, source="test").with_catalog(kwok_catalog())


def _node(name: str, cpu: str, memory: str) -> dict[str, Any]:
    """A Ready node outside any NodePool, as the API server returns it."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "topology.kubernetes.io/zone": "test-zone-a", "node.kubernetes.io/instance-type": "c-8x-amd64-linux"}
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"kwok://{name}"},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _daemonset(cpu: str) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1",
                                         "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template}}


def test_version_is_pinned_in_one_place_and_go_mod_agrees() -> None:
    version = realkarpenter.pinned_version()
    assert re.fullmatch(r"v\d+\.\d+\.\d+", version)
    go_mod = (realkarpenter.HARNESS_DIR / "go.mod").read_text()
    assert re.search(rf"^\s*sigs\.k8s\.io/karpenter {re.escape(version)}$", go_mod, re.M)


def test_harness_input_is_the_snapshot_batch_and_catalog() -> None:
    objects = [linux_pool(), pod("web-0", cpu="500m"), pod("bound-0", node_name="node-a"), _node("node-a", "8", "32Gi"),
               _daemonset("100m"), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]
    snapshot = _snapshot(objects)
    data = realkarpenter.harness_input(objects, snapshot)
    assert [o["kind"] for o in data["objects"]] == ["NodePool", "Pod", "Pod", "Node", "DaemonSet"]
    assert data["pending"] == ["default/web-0"]
    assert len(data["instanceTypes"]) == len(kwok_catalog())


def test_catalog_items_read_back_as_the_same_instance_types() -> None:
    for it in kwok_catalog()[:12]:
        back = InstanceType.parse(realkarpenter.catalog_item(it))
        assert back.capacity == it.capacity and back.allocatable == it.allocatable
        assert back.offerings == it.offerings and back.labels == it.labels


def _run(objects: list[dict[str, Any]], tmp_path: Path) -> tuple[Snapshot, realkarpenter.KarpenterRun]:
    assert BINARY is not None
    snapshot = _snapshot(objects)
    return snapshot, realkarpenter.run_karpenter(BINARY, objects, snapshot, tmp_path)


@needs_binary
def test_twenty_generic_pods_land_on_catalog_types_and_verify(tmp_path: Path) -> None:
    objects = karpenter_generic_objects(20, seed=5)
    snapshot, run = _run(objects, tmp_path)
    plan = run.plan
    assert run.version == realkarpenter.pinned_version()
    assert plan.unschedulable == [] and plan.existing_nodes == []
    placed = sorted(k for c in plan.node_claims for k in c.pods)
    assert placed == sorted(p.key for p in snapshot.pending_pods())
    catalog = {it.name: it for it in kwok_catalog()}
    for claim in plan.node_claims:
        it = catalog[claim.instance_type]
        offering = next(o for o in it.offerings if (o.zone, o.capacity_type) == (claim.zone, claim.capacity_type))
        assert claim.price == pytest.approx(offering.price)
        assert claim.price == pytest.approx(min(o.price for o in it.offerings))  # cheapest compatible offering
        assert claim.node_pool == "default"
    assert plan.cost.total == pytest.approx(sum(c.price for c in plan.node_claims))
    assert verify(snapshot, plan) == []


@needs_binary
def test_existing_free_capacity_is_used_before_launching(tmp_path: Path) -> None:
    objects = [linux_pool(), _node("node-a", "8", "32Gi"), pod("bound-0", cpu="2", node_name="node-a"),
               *(pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(3))]
    snapshot, run = _run(objects, tmp_path)
    assert run.plan.node_claims == []
    (assignment,) = run.plan.existing_nodes
    assert assignment.name == "node-a" and assignment.pods == ["default/web-0", "default/web-1", "default/web-2"]
    assert verify(snapshot, run.plan) == []


@needs_binary
def test_daemonset_overhead_is_in_every_new_nodeclaim(tmp_path: Path) -> None:
    objects = [linux_pool(), _daemonset("1"), pod("web-0", cpu="1", memory="1Gi")]
    snapshot, run = _run(objects, tmp_path)
    (claim,) = run.plan.node_claims
    assert parse_quantity(claim.requests["cpu"]) == 2  # the pod's 1 cpu + the daemon's 1 cpu
    assert verify(snapshot, run.plan) == []


@needs_binary
def test_a_pod_no_nodepool_admits_is_unschedulable_with_karpenters_error(tmp_path: Path) -> None:
    objects = [linux_pool(), pod("s390x-0", spec_extra={"nodeSelector": {"kubernetes.io/arch": "s390x"}}),
               pod("web-0")]
    snapshot, run = _run(objects, tmp_path)
    (unschedulable,) = run.plan.unschedulable
    assert unschedulable.pod == "default/s390x-0"
    assert unschedulable.reason.startswith("no instance type met all requirements")
    assert "kubernetes.io/arch In [s390x]" in unschedulable.reason
    assert [k for c in run.plan.node_claims for k in c.pods] == ["default/web-0"]
    assert verify(snapshot, run.plan) == []


@needs_binary
def test_bad_input_is_exit_2_naming_the_object(tmp_path: Path) -> None:
    assert BINARY is not None
    objects = [linux_pool(), pod("web-0")]
    objects[1]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(realkarpenter.HarnessError, match=r"exited 2: .*Pod web-0"):
        realkarpenter.run_karpenter(BINARY, objects, _snapshot([linux_pool(), pod("web-0")]), tmp_path)


@needs_binary
def test_compare_gives_three_rows_on_identical_input(tmp_path: Path) -> None:
    assert BINARY is not None
    rows = realkarpenter.compare("generic", "karpenter-400", 60, 3, 3.0, BINARY, tmp_path)
    assert [r[4].split()[0] for r in rows] == ["nodeplan", "yardstick", "karpenter"]
    assert rows[2][10] == "1.000"
    assert all(r[-1] == "ok" for r in rows)  # generic pods: every plan verifies
    assert float(rows[0][9]) <= float(rows[1][9]) + 1e-6  # nodeplan never worse than its yardstick
    # the bound cells are nodeplan's certified bound, the same on all three rows, never above any verified plan
    bound = float(rows[0][11])
    assert 0 < bound <= min(float(r[9]) for r in rows) + 1e-6
    assert all(r[11] == rows[0][11] for r in rows)
    assert rows[2][12] == f"{bound / float(rows[2][9]):.3f}"
    assert rows[0][13] == f"{float(rows[0][9]) / bound:.3f}"


@needs_binary
def test_any_snapshot_file_runs_through_the_command(tmp_path: Path) -> None:
    """The bundled example (existing nodes, several NodePools, taints, a pod no pool admits)."""
    from tests.conftest import EXAMPLE

    out = tmp_path / "plan.json"
    assert realkarpenter.main([str(EXAMPLE), "-o", str(out)]) == 0
    plan = ProvisioningPlan.model_validate_json(out.read_text())
    snapshot = load_snapshot(EXAMPLE).with_catalog(kwok_catalog())
    assert verify(snapshot, plan) == []
    accounted = {k for c in plan.node_claims for k in c.pods} | {k for e in plan.existing_nodes for k in e.pods} | {
        u.pod for u in plan.unschedulable}
    assert accounted == {p.key for p in snapshot.pending_pods()}


def test_an_unreadable_snapshot_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert realkarpenter.main([str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: file not found" in capsys.readouterr().err
