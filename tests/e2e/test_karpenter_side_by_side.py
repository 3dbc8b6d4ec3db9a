"""The real Karpenter (its KWOK provider, ``hack/karpenter-kwok``) provisions on the test control plane.

A control plane of its own, Karpenter's CRDs as its KWOK chart installs them, a KWOKNodeClass and a NodePool;
Karpenter runs as a process (``hack/karpenter-kwok/run.sh``); 20 pending pods must end Running on the Nodes of
NodeClaims Karpenter created. This is the harness ``make bench-controller`` runs side by side with nodeplan.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from bench.controller_perf import stop
from tests.e2e.conftest import ROOT, Cluster, KarpenterKwok, apply, load_yaml, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "karpenter-smoke"
PODS = 20
NODECLASS = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}
NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "smoke"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}


@pytest.fixture(scope="module")
def karpenter(karpenter_kwok: KarpenterKwok, fresh_cluster: Cluster) -> Iterator[subprocess.Popen[bytes]]:
    api = fresh_cluster.api()
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((karpenter_kwok.crds / "kwok").glob("*.yaml")):
        for doc in load_yaml(path):
            ext.create_custom_resource_definition(doc)
            names.append(doc["metadata"]["name"])
    wait_for(lambda: all(any(c.type == "Established" and c.status == "True"
                             for c in ext.read_custom_resource_definition(n).status.conditions or []) for n in names),
             30, what="Karpenter's CRDs Established")
    apply(api, NODECLASS)
    apply(api, NODEPOOL)
    log = (fresh_cluster.dir / "logs" / "karpenter.log").open("wb")
    env = {**os.environ, "KARPENTER_KWOK_BIN": str(karpenter_kwok.bin_dir)}
    process = subprocess.Popen([str(ROOT / "hack" / "karpenter-kwok" / "run.sh"), str(fresh_cluster.kubeconfig)],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        yield process
    finally:
        stop(process)
        log.close()


def _deployment() -> dict[str, Any]:
    labels = {"app": "smoke"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "smoke", "namespace": NAMESPACE},
            "spec": {"replicas": PODS, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}}}}


def test_karpenter_runs_pending_pods_on_its_nodeclaims(fresh_cluster: Cluster,
                                                       karpenter: subprocess.Popen[bytes]) -> None:
    api = fresh_cluster.api()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    apply(api, _deployment())

    def all_running() -> list[Any] | None:
        assert karpenter.poll() is None, f"Karpenter exited:\n{fresh_cluster.log('karpenter')[-3000:]}"
        pods = core.list_namespaced_pod(NAMESPACE).items
        return pods if len(pods) == PODS and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_for(all_running, 150, interval=1.0, what=f"{PODS} pods Running under Karpenter")
    claims = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
    by_node = {c["status"].get("nodeName"): c for c in claims if c.get("status", {}).get("nodeName")}
    assert claims and all(c["metadata"]["labels"].get("karpenter.sh/nodepool") == "smoke" for c in claims)
    # Karpenter's own bookkeeping on the claims it launched (nodeplan never writes these annotations)
    assert all("karpenter.sh/nodepool-hash" in c["metadata"].get("annotations", {}) for c in claims)
    for pod in pods:
        claim = by_node.get(pod.spec.node_name)
        assert claim is not None, f"{pod.metadata.name} runs on {pod.spec.node_name}, not on a Karpenter NodeClaim"
        assert any(c["type"] == "Initialized" and c["status"] == "True" for c in claim["status"]["conditions"])
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert all(nodes[name].metadata.labels.get("karpenter.sh/nodepool") == "smoke" for name in by_node)
