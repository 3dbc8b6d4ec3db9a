"""Deleting a NodeClaim drains its Node through the Eviction API, one PDB-permitted pod at a time.

A Deployment of 6 one-cpu pods behind a PodDisruptionBudget (maxUnavailable 1) runs on NodeClaims the
controller launched (4-vCPU types at most, so some hold two or three of its pods). Deleting the claim with the
most of them must: taint its Node, evict (not delete) those pods while a watch sees at most one pod of the
Deployment unavailable at any moment, let the ReplicaSet's replacements run elsewhere (the controller launches
room for them), delete the Node, and release the claim's finalizer so it disappears.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from bench.workloads import KWOK_NODECLASS, deployment
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions
from tests.e2e.conftest import Cluster, apply, release_finalizers, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "deletion"
GROUP, VERSION = "karpenter.sh", "v1"
REPLICAS = 6
LABELS = {"app": "guarded"}
NODEPOOL = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "drain"},
    "spec": {"template": {"spec": {
        "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                         {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                         {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["5"]}],
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}},
}
NODECLASS = KWOK_NODECLASS
DEPLOYMENT = deployment("guarded", NAMESPACE, REPLICAS, cpu="1", memory="512Mi", labels=LABELS)
PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
       "metadata": {"name": "guarded", "namespace": NAMESPACE},
       "spec": {"maxUnavailable": 1, "selector": {"matchLabels": LABELS}}}


@pytest.fixture
def workspace(cluster: Cluster, crds: list[str]) -> Iterator[client.ApiClient]:
    api = cluster.api()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    apply(api, NODECLASS)
    apply(api, NODEPOOL)
    yield api
    client.AppsV1Api(api).delete_collection_namespaced_deployment(NAMESPACE)
    core.delete_namespace(NAMESPACE, grace_period_seconds=0)
    ours = [c["metadata"]["name"] for c in custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")["items"]
            if c["metadata"].get("labels", {}).get("karpenter.sh/nodepool") == "drain"]
    for name in ours:
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", name)
    release_finalizers(api)  # the controller that would drain them has stopped
    custom.delete_cluster_custom_object(GROUP, VERSION, "nodepools", "drain")

    def clean() -> bool:
        namespaces = [n.metadata.name for n in core.list_namespace().items]
        nodes = [n for n in core.list_node().items if (n.metadata.labels or {}).get("karpenter.sh/nodepool") == "drain"]
        return NAMESPACE not in namespaces and not nodes

    wait_for(clean, 120, interval=1.0, what="namespace and nodes deleted")


def _available(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


class PodWatch:
    """Follows the Deployment's pods from a resourceVersion on; remembers the worst unavailability it saw and
    how each pod that went away was removed."""

    def __init__(self, api: client.ApiClient, pods: list[Any], resource_version: str) -> None:
        self._core = client.CoreV1Api(api)
        self.pods = {p.metadata.name: p for p in pods}
        self.max_unavailable = REPLICAS - sum(_available(p) for p in pods)
        self.disruption: dict[str, str] = {}  # pod → reason of its DisruptionTarget condition
        self.deleted: list[str] = []
        self._rv = resource_version
        self._stopped = False
        self.error: str | None = None
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._watch.stream(self._core.list_namespaced_pod, NAMESPACE, resource_version=self._rv,
                                            label_selector="app=guarded", timeout_seconds=300):
                self._apply(event)
        except Exception as err:  # the stream broke before the test had seen everything: it must say so
            if not self._stopped:
                self.error = f"{type(err).__name__}: {err}"
        else:
            if not self._stopped:
                self.error = "the watch ended early"

    def _apply(self, event: dict[str, Any]) -> None:
        pod = event["object"]
        name = pod.metadata.name
        for cond in pod.status.conditions or []:
            if cond.type == "DisruptionTarget" and cond.status == "True":
                self.disruption[name] = cond.reason
        if event["type"] == "DELETED":
            self.pods.pop(name, None)
            self.deleted.append(name)
        else:
            self.pods[name] = pod
        unavailable = REPLICAS - sum(_available(p) for p in self.pods.values())
        self.max_unavailable = max(self.max_unavailable, unavailable)

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


def test_deleting_a_nodeclaim_evicts_within_the_pdb_then_removes_node_and_claim(
        cluster: Cluster, workspace: client.ApiClient) -> None:
    api = workspace
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    controller = Controller(api, ControllerOptions(batch_idle=1.0, batch_max=5.0,
                                                   provisioner=ProvisionerOptions(solve_time_limit=3.0)))
    outcomes: list[tuple[str, str]] = []
    controller.lifecycle.terminator.drainer.on_eviction = lambda pod, outcome: outcomes.append((pod, outcome))
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
    thread.start()
    try:
        apply(api, PDB)
        apply(api, copy.deepcopy(DEPLOYMENT))

        def all_available() -> list[Any] | None:
            pods = core.list_namespaced_pod(NAMESPACE, label_selector="app=guarded")
            ok = len(pods.items) == REPLICAS and all(_available(p) for p in pods.items)
            return [pods] if ok else None

        listed = wait_for(all_available, 120, interval=0.5, what="every pod Running and Ready")[0]
        wait_for(lambda: (client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(
            "guarded", NAMESPACE).status.disruptions_allowed == 1), 60, what="the PDB to allow one disruption")
        by_node: dict[str, list[str]] = {}
        for pod in listed.items:
            by_node.setdefault(pod.spec.node_name, []).append(pod.metadata.name)
        victim, victims = max(by_node.items(), key=lambda item: (len(item[1]), item[0]))
        assert len(victims) >= 2, f"every node holds one pod of the Deployment: {by_node}"
        claim = custom.get_cluster_custom_object(GROUP, VERSION, "nodeclaims", victim)
        assert claim["metadata"]["finalizers"] == ["karpenter.sh/termination"]
        node = core.read_node(victim)
        assert "karpenter.sh/termination" in (node.metadata.finalizers or [])

        pods_watch = PodWatch(api, listed.items, listed.metadata.resource_version)
        started = time.monotonic()
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", victim)

        def tainted() -> bool:
            taints = core.read_node(victim).spec.taints or []
            return any(t.key == "karpenter.sh/disrupted" and t.effect == "NoSchedule" for t in taints)

        wait_for(tainted, 30, interval=0.2, what="the disrupted taint on the node")

        def claim_gone() -> bool:
            try:
                custom.get_cluster_custom_object(GROUP, VERSION, "nodeclaims", victim)
            except client.ApiException as err:
                return err.status == 404
            return False

        wait_for(claim_gone, 240, interval=0.5, what="the NodeClaim's finalizer released and the claim gone")
        drained_s = time.monotonic() - started
        assert victim not in {n.metadata.name for n in core.list_node().items}

        def replaced() -> list[Any] | None:
            pods = core.list_namespaced_pod(NAMESPACE, label_selector="app=guarded").items
            ok = len(pods) == REPLICAS and all(_available(p) for p in pods)
            return pods if ok else None

        final = wait_for(replaced, 120, interval=0.5, what="replacements Running and Ready")
        assert pods_watch.error is None, pods_watch.error
        pods_watch.stop()
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert controller.errors == [], controller.errors
    # every pod of the victim left through the Eviction API, one at a time as the PDB allowed
    assert set(victims) <= set(pods_watch.deleted)
    assert {pods_watch.disruption.get(name) for name in victims} == {"EvictionByEvictionAPI"}, pods_watch.disruption
    evicted = [pod for pod, outcome in outcomes if outcome == "evicted"]
    assert sorted(evicted) == sorted(f"{NAMESPACE}/{name}" for name in victims)
    assert not any(outcome == "deleted" for _, outcome in outcomes)
    refused = sum(1 for _, outcome in outcomes if outcome == "blocked")
    assert refused >= 1, "the second eviction should have waited for the PDB"
    assert pods_watch.max_unavailable <= 1, f"{pods_watch.max_unavailable} pods unavailable at once"
    # the replacements run elsewhere, on Nodes the controller manages
    assert all(p.spec.node_name != victim for p in final)
    managed = {n.metadata.name for n in core.list_node().items
               if (n.metadata.labels or {}).get("karpenter.sh/nodepool") == "drain"}
    assert {p.spec.node_name for p in final} <= managed
    print(f"\ndeletion: node {victim} drained of {len(victims)} pods in {drained_s:.1f}s, "
          f"{refused} eviction(s) refused by the PDB, max unavailable {pods_watch.max_unavailable}, "
          f"{len(controller.provisioner.history)} batch(es)")
