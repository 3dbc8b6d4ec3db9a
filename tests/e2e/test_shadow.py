"""Shadow mode beside another provisioner on the real control plane: ``nodeplan run --shadow`` runs as a process
with a token of a ServiceAccount bound to deploy/shadow.yaml's read-only ClusterRole (so its start-up permission
check is the one a real install makes), while the test plays the other provisioner the way Karpenter does — a
NodeClaim labelled with its NodePool and the Node it launches, one oversized node for the whole batch. nodeplan
must record a comparison that finds the saving, and an audit of every object in the cluster must find nothing it
created, patched or deleted: no field manager ``nodeplan``, no Event from it, only the other provisioner's claim.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

from bench.workloads import KWOK_NODECLASS, deployment
from controller.run import FIELD_MANAGER
from model import labels as wk
from providers.kwok import kwok_catalog
from tests.e2e.conftest import ROOT, Cluster, apply, load_yaml, release_finalizers, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "shadow"
ACCOUNT_NAMESPACE = "nodeplan"
STAND_IN = "karpenter-stand-in"
NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                                 {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                                 {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}
NODEPLAN = [sys.executable, "-c", "import sys; from cli.app import app; sys.argv[0] = 'nodeplan'; app()"]
#: what the stand-in launches for the batch: one node far larger than six 1-core pods need
OVERSIZED = "c-32x-amd64-linux"


def _price(instance_type: str, zone: str) -> float:
    return next(o.price for it in kwok_catalog() if it.name == instance_type for o in it.offerings
                if o.zone == zone and o.capacity_type == "on-demand")


def _kubeconfig(cluster: Cluster, api: client.ApiClient, path: Path) -> Path:
    token = client.CoreV1Api(api).create_namespaced_service_account_token(
        "nodeplan-shadow", ACCOUNT_NAMESPACE, {"spec": {"expirationSeconds": 3600}}).status.token
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "nodeplan-shadow", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "nodeplan-shadow"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def workspace(cluster: Cluster, crds: list[str]) -> Iterator[client.ApiClient]:
    api = cluster.api()
    api.user_agent = STAND_IN  # the test's own writes must not look like nodeplan's
    core = client.CoreV1Api(api)
    for name in (NAMESPACE, ACCOUNT_NAMESPACE):
        with contextlib.suppress(client.ApiException):
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for obj in load_yaml(ROOT / "deploy" / "shadow.yaml"):
        if obj["kind"] != "Deployment":
            apply(api, obj)
    apply(api, KWOK_NODECLASS)
    apply(api, NODEPOOL)
    yield api
    client.AppsV1Api(api).delete_collection_namespaced_deployment(NAMESPACE)
    custom = client.CustomObjectsApi(api)
    custom.delete_collection_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")
    release_finalizers(api)
    for node in core.list_node().items:
        with contextlib.suppress(client.ApiException):
            core.delete_node(node.metadata.name)
    core.delete_namespace(NAMESPACE, grace_period_seconds=0)
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", "general")
    wait_for(lambda: NAMESPACE not in [n.metadata.name for n in core.list_namespace().items]
             and not core.list_node().items, 120, interval=1.0, what="namespace and nodes deleted")


def _launch_like_karpenter(api: client.ApiClient, name: str, instance_type: str, zone: str) -> None:
    """The other provisioner's answer: a NodeClaim of pool ``general`` and its KWOK Node, Ready, untainted."""
    it = next(i for i in kwok_catalog() if i.name == instance_type)
    labels = {**it.labels, wk.NODEPOOL: "general", wk.INSTANCE_TYPE: instance_type, wk.ZONE: zone,
              wk.CAPACITY_TYPE: "on-demand", wk.HOSTNAME: name}
    quantities = {k: str(v) for k, v in it.allocatable.to_quantities().items()}
    client.CustomObjectsApi(api).create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name, "labels": labels},
        "spec": {"requirements": [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": [instance_type]}],
                 "nodeClassRef": NODEPOOL["spec"]["template"]["spec"]["nodeClassRef"]}})
    client.CoreV1Api(api).create_node({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, wk.REGISTERED: "true", wk.INITIALIZED: "true"},
                     "annotations": {wk.KWOK_NODE_ANNOTATION: "fake"}},
        "spec": {"providerID": f"kwok://{name}"},
        "status": {"capacity": quantities, "allocatable": quantities}})


def _since(stamp: Any, started: datetime) -> bool:
    """Was a managedFields / Event time (RFC 3339 text or datetime) at or after ``started``?"""
    if not stamp:
        return True  # no time recorded: count it
    when = stamp if isinstance(stamp, datetime) else datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return when >= started - timedelta(seconds=1)


def _audit(api: client.ApiClient, started: datetime) -> tuple[list[str], set[str]]:
    """Every object of every listable resource that nodeplan's field manager wrote since ``started`` (the shadow
    process's start: the cluster is shared with earlier tests whose controllers did write), or an Event it
    reported since then; and every field manager seen (so an audit that read nothing cannot pass)."""
    found: list[str] = []
    seen: set[str] = set()
    dyn = dynamic.DynamicClient(api)
    for resource in dyn.resources.search():
        if "list" not in (resource.verbs or []) or "/" in resource.name or resource.kind.endswith("List"):
            continue
        with contextlib.suppress(client.ApiException, Exception):
            items = resource.get().to_dict().get("items") or []
            for item in items:
                meta = item.get("metadata") or {}
                fields = meta.get("managedFields") or []
                seen |= {f"{resource.kind}:{m.get('manager')}" for m in fields}
                if any(m.get("manager") == FIELD_MANAGER and _since(m.get("time"), started) for m in fields):
                    found.append(f"{resource.kind} {meta.get('namespace', '')}/{meta.get('name')}")
                when = item.get("lastTimestamp") or item.get("eventTime") or meta.get("creationTimestamp")
                if resource.kind == "Event" and _since(when, started) and "nodeplan" in (
                        str(item.get("reportingComponent") or item.get("reportingController") or ""),
                        str((item.get("source") or {}).get("component") or "")):
                    found.append(f"Event {meta.get('namespace')}/{meta.get('name')} from nodeplan")
    return found, seen


def test_shadow_mode_records_the_saving_beside_another_provisioner_and_writes_nothing(
        cluster: Cluster, workspace: client.ApiClient, tmp_path: Path) -> None:
    api = workspace
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    record = tmp_path / "shadow.jsonl"
    kubeconfig = _kubeconfig(cluster, api, tmp_path / "shadow.kubeconfig")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEPLAN_") or k == "NODEPLAN_CACHE"}
    log = (tmp_path / "shadow.log").open("w")
    started = datetime.now(UTC)
    process = subprocess.Popen(
        [*NODEPLAN, "run", "--shadow", "--kubeconfig", str(kubeconfig), "--shadow-record",
         str(record), "--metrics-port", "0", "--health-port", "0", "--batch-idle", "1s", "--batch-max", "5s",
         "--solve-time-limit", "3s", "--consolidation-interval", "3s", "--consolidation-time-limit", "3s"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(3)
        assert process.poll() is None, (tmp_path / "shadow.log").read_text()  # the read-only RBAC suffices
        apply(api, deployment("web", NAMESPACE, 6, cpu="1", memory="1Gi"))

        def unschedulable() -> bool:
            pods = core.list_namespaced_pod(NAMESPACE).items
            return len(pods) == 6 and all(any(c.type == "PodScheduled" and c.reason == "Unschedulable"
                                              for c in p.status.conditions or []) for p in pods)

        wait_for(unschedulable, 60, what="six pods reported Unschedulable by the kube-scheduler")
        time.sleep(2)  # the other provisioner's batch window
        _launch_like_karpenter(api, "general-standin", OVERSIZED, "test-zone-a")
        wait_for(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(NAMESPACE).items),
                 90, what="the pods Running on the other provisioner's node")

        def batch_record() -> dict[str, Any] | None:
            lines = record.read_text().splitlines() if record.exists() else []
            batches = [json.loads(line) for line in lines if json.loads(line)["type"] == "batch"]
            return batches[-1] if batches else None

        compared = wait_for(batch_record, 60, what="a shadow batch record")
        # a quiet cluster: the shadow consolidation decision is recorded too (the oversized node is replaceable)
        # (one taken once the other provisioner's node exists: an earlier one may see an empty cluster)
        consolidation = wait_for(lambda: [c for c in (json.loads(line) for line in record.read_text().splitlines())
                                          if c["type"] == "consolidation" and c["clusterCost"] > 0], 60,
                                 what="a shadow consolidation record of the cluster with its node")
        assert process.poll() is None, (tmp_path / "shadow.log").read_text()
    finally:
        process.terminate()
        process.wait(30)
        log.close()
    output = (tmp_path / "shadow.log").read_text()
    assert "HTTP 403" not in output and "Forbidden" not in output, output[-3000:]
    oversized = _price(OVERSIZED, "test-zone-a")
    assert compared["pods"] == 6 and compared["settled"] == "bound"
    assert compared["karpenter"]["pending"] == 0 and compared["nodeplan"]["pending"] == 0
    assert [c["name"] for c in compared["karpenter"]["nodeClaims"]] == ["NodeClaim/general-standin"]
    assert compared["karpenter"]["cost"] == pytest.approx(oversized, abs=1e-6)
    assert 0 < compared["nodeplan"]["cost"] < oversized and compared["saving"] > 0
    assert consolidation[-1]["clusterCost"] == pytest.approx(oversized, abs=1e-6)
    assert consolidation[-1]["nodeplan"]["cost"] < oversized
    # nodeplan wrote nothing: no object has its field manager, no Event came from it, the only NodeClaim and Node
    # are the other provisioner's, and the NodePool's status is untouched
    found, seen = _audit(api, started)
    assert found == []
    assert {f"NodeClaim:{STAND_IN}", f"Node:{STAND_IN}", "Pod:kube-scheduler"} <= seen  # the audit read them
    claims = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
    assert [c["metadata"]["name"] for c in claims] == ["general-standin"]
    assert [n.metadata.name for n in core.list_node().items] == ["general-standin"]
    pool = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", "general")
    assert not (pool.get("status") or {}).get("conditions")
    report = subprocess.run([*NODEPLAN, "shadow-report", str(record), "-o", "json"],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["saving"] == pytest.approx(compared["saving"], abs=1e-6)
