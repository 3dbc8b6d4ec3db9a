"""The in-cluster controller reads volumes (``controller.kinds``): a StatefulSet whose pods claim
``WaitForFirstConsumer`` volumes that can only bind to pre-created zonal PersistentVolumes gets nodes in those
volumes' zones, and the real kube-scheduler (VolumeBinding) and PV controller bind and run every pod. Before the
table of kinds the watch cache held no PVC, so each such pod was "claim not found" and never provisioned."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from bench.workloads import KWOK_NODECLASS
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions
from model import labels as wk
from tests.e2e.conftest import Cluster, apply, release_finalizers, wait_for
from tests.e2e.test_provisioning import NODEPOOL

pytestmark = pytest.mark.e2e

NAMESPACE = "volumes"
ZONES = {"data-db-0": "test-zone-b", "data-db-1": "test-zone-c"}


@pytest.fixture
def workspace(cluster: Cluster, crds: list[str]) -> Iterator[client.ApiClient]:
    api = cluster.api()
    core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    apply(api, KWOK_NODECLASS)
    apply(api, NODEPOOL)
    storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": "zonal-local"}, "provisioner": "kubernetes.io/no-provisioner",
                                  "volumeBindingMode": "WaitForFirstConsumer"})
    for i, (claim, zone) in enumerate(sorted(ZONES.items())):
        # each PV can bind only to its StatefulSet pod's claim (claimRef) and lives in one zone
        core.create_persistent_volume({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-{i}"},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "zonal-local", "persistentVolumeReclaimPolicy": "Retain",
                     "claimRef": {"namespace": NAMESPACE, "name": claim},
                     "local": {"path": f"/mnt/disk{i}"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": wk.ZONE, "operator": "In", "values": [zone]}]}]}}}})
    yield api
    client.AppsV1Api(api).delete_collection_namespaced_stateful_set(NAMESPACE)
    core.delete_namespace(NAMESPACE, grace_period_seconds=0)
    custom = client.CustomObjectsApi(api)
    custom.delete_collection_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")
    release_finalizers(api)
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", "general")
    for i in range(len(ZONES)):
        core.delete_persistent_volume(f"pv-{i}")
    storage.delete_storage_class("zonal-local")
    wait_for(lambda: NAMESPACE not in [n.metadata.name for n in core.list_namespace().items]
             and not core.list_node().items, 120, interval=1.0, what="namespace and nodes deleted")


def test_statefulset_with_wait_for_first_consumer_claims_gets_nodes_in_the_volumes_zones(
        workspace: client.ApiClient) -> None:
    api = workspace
    core = client.CoreV1Api(api)
    apply(api, {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": NAMESPACE},
                "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                         "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                             "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "db", "image": "registry.example.com/db:1",
                                             "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                                             "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                         "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                             "accessModes": ["ReadWriteOnce"], "storageClassName": "zonal-local",
                             "resources": {"requests": {"storage": "10Gi"}}}}]}})
    controller = Controller(api, ControllerOptions(batch_idle=1.0, batch_max=5.0,
                                                   provisioner=ProvisionerOptions(solve_time_limit=5.0)))
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
    thread.start()
    try:
        def running() -> bool:
            pods = core.list_namespaced_pod(NAMESPACE).items
            return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

        wait_for(running, 180, interval=1.0, what="both StatefulSet pods Running")
    finally:
        stop.set()
        thread.join(30)
    assert controller.errors == [], controller.errors
    nodes = {n.metadata.name: n.metadata.labels for n in core.list_node().items}
    for pod in core.list_namespaced_pod(NAMESPACE).items:
        claim = f"data-{pod.metadata.name}"
        assert nodes[pod.spec.node_name][wk.ZONE] == ZONES[claim]
        pvc = core.read_namespaced_persistent_volume_claim(claim, NAMESPACE)
        assert pvc.status.phase == "Bound"
