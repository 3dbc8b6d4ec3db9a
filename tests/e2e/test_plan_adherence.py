"""Plan adherence on the real control plane: the kube-scheduler is free to bind a pod anywhere, nodeplan nominates
each pod to its planned node once that node exists (``status.nominatedNodeName``, KEP-5278), and the share of
pods bound where they were planned is measured, with the pods planned again and each batch's decision time.

A Karpenter-style scale-out of Deployments (the real controller-manager creates the pods over tens of seconds,
so they arrive in several batches, later ones beside claims still in flight); the controller runs in a thread
with its defaults (1 % decision gap, 10 s solve limit).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes import watch as kwatch

from bench.controller_perf import nodeplan_adherence
from bench.workloads import KWOK_NODECLASS, generic_deployment_objects
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions
from tests.e2e.conftest import Cluster, apply, open_workspace, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "adherence"
GROUP, VERSION = "karpenter.sh", "v1"
NODEPOOL = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "adherence"},
    "spec": {"template": {"spec": {
        "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                         {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}},
}
#: the issue's target (not met on kube-scheduler 1.36.3, see the test): pods bound where their plan put them
TARGET_SHARE = 0.99


@pytest.fixture
def workspace(cluster: Cluster, crds: list[str]) -> Iterator[client.ApiClient]:
    yield from open_workspace(cluster, NAMESPACE, NODEPOOL, KWOK_NODECLASS)


def test_pods_are_bound_to_their_planned_nodes(cluster: Cluster, workspace: client.ApiClient) -> None:
    api = workspace
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    total = 300
    options = ControllerOptions(provisioner=ProvisionerOptions())  # defaults: 1 % decision gap, 10 s limit
    controller = Controller(api, options)
    stop = threading.Event()
    cleared = _watch_cleared_nominations(api, stop)
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        for d in generic_deployment_objects(total, 16, NAMESPACE):
            apply(api, d)

        def all_running() -> bool:
            pods = core.list_namespaced_pod(NAMESPACE).items
            return len(pods) == total and all(p.status.phase == "Running" for p in pods)

        wait_for(all_running, 360, interval=1.0, what="every pod Running")
        running_s = time.monotonic() - started
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and controller.errors == [], controller.errors

    pods = [api.sanitize_for_serialization(p) for p in core.list_namespaced_pod(NAMESPACE).items]
    claims = [c for c in custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")["items"]
              if c["metadata"]["labels"].get("karpenter.sh/nodepool") == "adherence"]
    result = nodeplan_adherence(claims, pods)
    history = [r for r in controller.provisioner.history if r.pods]
    seconds = [r.solve_seconds for r in history]
    cpu = [r.cpu_seconds for r in history]
    print(f"\nplan adherence: {result.as_planned}/{result.planned} pods ({result.share:.1%}) bound to their first "
          f"planned node, {result.replanned} re-planned; {len(claims)} NodeClaims; all Running after "
          f"{running_s:.1f}s; {len(history)} batches, decision median {statistics.median(seconds):.3f}s "
          f"(max {max(seconds):.3f}s), CPU median {statistics.median(cpu):.3f}s; {len(cleared)} pods had a "
          f"nomination cleared while unbound ({sum(cleared.values())} times); "
          f"batches (pods, status, s): {[(r.pods, r.plan.solver.status, round(r.solve_seconds, 2)) for r in history]}")
    _print_deviations(api, claims, pods)
    # Measured, not asserted: the share bound where planned (the issue's target is TARGET_SHARE). kube-scheduler
    # 1.36.3 still clears a nomination in a failed scheduling cycle whose preemption finds no candidate
    # (pkg/scheduler/framework/preemption/preemption.go: "Specify nominatedNodeName to clear ..."), e.g. a pod
    # tried, while its node is still tainted, on the event of another node's untaint: the count above shows it.
    # What must hold: nearly every pod was planned before the scheduler bound it (a few land in room left on a
    # node before their batch closes), and re-plans end (every pod Running above: no livelock) and are the
    # scheduler's doing: nodeplan plans a pod again only once the scheduler dropped its nomination (room it no
    # longer keeps, so another pod may have taken it), never while the pod's nomination still reserves its room ...
    assert result.planned >= 0.9 * total
    assert not result.replanned_pods - set(cleared), sorted(result.replanned_pods - set(cleared))
    # ... nodeplan never clears a nomination, and the API server clears one when it binds the pod
    # (ClearingNominatedNodeNameAfterBinding, beta and on since 1.35): no bound pod keeps one
    assert not [p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("nominatedNodeName")]
    # ... and batches are decided within the 1 % gap rather than at the 10 s limit
    assert statistics.median(seconds) < options.provisioner.solve_time_limit


def _watch_cleared_nominations(api: client.ApiClient, stop: threading.Event) -> dict[str, int]:
    """Pod name → how often its ``status.nominatedNodeName`` went from a node to none while the pod was still
    unbound. nodeplan never clears a nomination, so each one is the kube-scheduler's (a failed cycle whose
    preemption found no candidate, kube-scheduler 1.36.3)."""
    cleared: dict[str, int] = {}
    last: dict[str, str] = {}

    def run() -> None:
        while not stop.is_set():
            watch = kwatch.Watch()
            try:
                for event in watch.stream(client.CoreV1Api(api).list_namespaced_pod, NAMESPACE, timeout_seconds=5):
                    pod = event["object"]
                    name, nominated = pod.metadata.name, pod.status.nominated_node_name or ""
                    if last.get(name) and not nominated and not pod.spec.node_name:
                        cleared[name] = cleared.get(name, 0) + 1
                    last[name] = nominated
                    if stop.is_set():
                        break
            except Exception:  # a diagnostic: a broken watch is restarted
                time.sleep(0.5)
            finally:
                watch.stop()

    threading.Thread(target=run, name="nomination-watch", daemon=True).start()
    return cleared


def _print_deviations(api: client.ApiClient, claims: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
    """For each pod not on its first planned node: planned and actual node, when each was registered, and
    how often the scheduler failed it (what a failure to follow the plan looks like)."""
    import json

    registered = {}
    first: dict[str, str] = {}
    for c in sorted(claims, key=lambda c: c["metadata"]["creationTimestamp"]):
        node = c["status"].get("nodeName") or c["metadata"]["name"]
        registered[node] = next((k["lastTransitionTime"] for k in c["status"].get("conditions", [])
                                 if k["type"] == "Registered"), "?")
        for uid in json.loads(c["metadata"]["annotations"].get("nodeplan.io/pods", "[]")):
            first.setdefault(uid, node)
    events = client.CoreV1Api(api).list_namespaced_event(NAMESPACE).items
    failed: dict[str, int] = {}
    bound_at: dict[str, str] = {}
    for e in events:
        if e.reason == "FailedScheduling":
            failed[e.involved_object.uid] = failed.get(e.involved_object.uid, 0) + (e.count or 1)
        if e.reason == "Scheduled":
            bound_at[e.involved_object.uid] = str(e.event_time or e.first_timestamp)
    deviating = [p for p in pods if p["metadata"]["uid"] in first and first[p["metadata"]["uid"]] != p["spec"].get(
        "nodeName")]
    for p in deviating[:10]:
        uid, node = p["metadata"]["uid"], p["spec"].get("nodeName")
        if True:
            print(f"  {p['metadata']['name']}: planned {first[uid]} (registered {registered.get(first[uid])}), "
                  f"bound {node} (registered {registered.get(node)}) at {bound_at.get(uid)}, "
                  f"{failed.get(uid, 0)} FailedScheduling")
