"""Volume topology: bound PVs pin pods to their zones, WaitForFirstConsumer classes to allowed zones."""

from __future__ import annotations

from typing import Any

from bench.workloads import linux_pool, pod
from tests.conftest import snapshot_of, solve_verified

ZONE = "topology.kubernetes.io/zone"


def _claim(name: str, volume: str = "", storage_class: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    if volume:
        spec["volumeName"] = volume
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


def _pv(name: str, zone: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "10Gi"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}}}}


def _class(name: str, mode: str, zones: list[str] | None = None) -> dict[str, Any]:
    sc: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                          "provisioner": "ebs.csi.example", "volumeBindingMode": mode}
    if zones:
        sc["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    return sc


def _with_claim(name: str, claim: str) -> dict[str, Any]:
    return pod(name, cpu="500m", memory="1Gi", labels={"app": "db"}, owner="db", spec_extra={
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]})


def test_bound_volumes_pin_each_pod_to_its_volume_zone() -> None:
    objects = [linux_pool("default"), _pv("pv-a", "test-zone-b"), _pv("pv-b", "test-zone-c"),
               _claim("data-db-0", volume="pv-a"), _claim("data-db-1", volume="pv-b"),
               _with_claim("db-0", "data-db-0"), _with_claim("db-1", "data-db-1")]
    plan = solve_verified(snapshot_of(objects)).plan
    zone_of = {p: c.zone for c in plan.node_claims for p in c.pods}
    assert zone_of == {"default/db-0": "test-zone-b", "default/db-1": "test-zone-c"}


def test_wait_for_first_consumer_allows_only_the_class_topologies() -> None:
    objects = [linux_pool("default"), _class("zonal", "WaitForFirstConsumer", ["test-zone-d"])]
    objects += [_claim(f"data-db-{i}", storage_class="zonal") for i in range(3)]
    objects += [_with_claim(f"db-{i}", f"data-db-{i}") for i in range(3)]
    result = solve_verified(snapshot_of(objects))
    assert {c.zone for c in result.plan.node_claims} == {"test-zone-d"}
    assert len(result.problem.classes) == 1  # per-pod claim names do not split the class


def test_unbound_immediate_claim_keeps_the_pod_pending_with_a_reason() -> None:
    objects = [linux_pool("default"), _class("fast", "Immediate"), _claim("data", storage_class="fast"),
               _with_claim("db-0", "data"), _with_claim("db-1", "missing")]
    plan = solve_verified(snapshot_of(objects)).plan
    reasons = {u.pod: u.reason for u in plan.unschedulable}
    assert "binds Immediate" in reasons["default/db-0"]
    assert "default/missing not found" in reasons["default/db-1"]
