"""Plan adherence on the real control plane: the kube-scheduler is free to bind a pod anywhere, nodeplan nominates
each pod to its planned node once that node exists (``status.nominatedNodeName``, KEP-5278), and the share of
pods bound where they were planned is measured, with the pods planned again and each batch's decision time.

A Karpenter-style scale-out of Deployments (the real controller-manager creates the pods over tens of seconds,
so they arrive in several batches, later ones beside claims still in flight); the controller runs in a thread
with its defaults (1 % decision gap, 10 s solve limit).
"""

from __future__ import annotations

import itertools
import json
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
from tests.e2e.conftest import RUNNING_WITHIN, Cluster, apply, fits_beside_claim, open_workspace, wait_for

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
    timeline = Timeline(api, stop)
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        for d in generic_deployment_objects(total, 16, NAMESPACE):
            apply(api, d)

        def all_running() -> bool:
            pods = core.list_namespaced_pod(NAMESPACE).items
            return len(pods) == total and all(p.status.phase == "Running" for p in pods)

        wait_for(all_running, RUNNING_WITHIN, interval=1.0, what="every pod Running")
        running_s = time.monotonic() - started
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and controller.errors == [], controller.errors

    pods = [api.sanitize_for_serialization(p) for p in core.list_namespaced_pod(NAMESPACE).items]
    claims = [c for c in custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")["items"]
              if c["metadata"]["labels"].get("karpenter.sh/nodepool") == "adherence"]
    result = nodeplan_adherence(claims, pods)
    cleared = timeline.cleared()
    history = [r for r in controller.provisioner.history if r.pods]
    seconds = [r.solve_seconds for r in history]
    cpu = [r.cpu_seconds for r in history]
    print(f"\nplan adherence: {result.as_planned}/{result.planned} pods ({result.share:.1%}) bound to their first "
          f"planned node, {result.replanned} re-planned; {len(claims)} NodeClaims; all Running after "
          f"{running_s:.1f}s; {len(history)} batches, decision median {statistics.median(seconds):.3f}s "
          f"(max {max(seconds):.3f}s), CPU median {statistics.median(cpu):.3f}s; {len(cleared)} pods had a "
          f"nomination cleared while unbound ({sum(cleared.values())} times); "
          f"batches (pods, status, s): {[(r.pods, r.plan.solver.status, round(r.solve_seconds, 2)) for r in history]}")
    _print_deviations(timeline, claims, pods)
    # Measured, not asserted: the share bound where planned (the issue's target is TARGET_SHARE). kube-scheduler
    # 1.36.3 still clears a nomination in every failed scheduling cycle (preemption finds no candidate:
    # pkg/scheduler/framework/preemption/preemption.go "Specify nominatedNodeName to clear ..."), and each clear
    # requeues every pending pod; nodeplan nominates right before the untaint, once the pods are quiet, and puts
    # back what was cleared (controller.lifecycle), but pods the scheduler retries in that window still lose
    # theirs: the count above shows it. What must hold: the share covers every pod a batch decided (the pods
    # the scheduler bound into room left on a node before any batch took them up needed no plan: 23 of 300 in
    # one CI run, so no fixed share of the total is asserted), and re-plans end (every pod Running above: no
    # livelock) and are the scheduler's doing: nodeplan plans a pod again only once the scheduler dropped its
    # nomination (room it no longer keeps, so another pod may have taken it) ...
    decided = {key.split("/", 1)[1] for r in history for node in (*r.plan.node_claims, *r.plan.existing_nodes)
               for key in node.pods}
    assert decided and not decided - _planned_names(claims, pods), sorted(decided - _planned_names(claims, pods))
    # ... or once its planned node has no room left for it (``displaced_pods``: such a pod cannot fit there beside
    # what the node runs at the end and what its claim's other pods held) or its claim's bind grace ran out
    nodes = {n["metadata"]["name"]: n for n in (api.sanitize_for_serialization(x) for x in core.list_node().items)}
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    unexplained = sorted(name for name in result.replanned_pods - set(cleared)
                         if _fits_on_first_planned_node(name, pods, claims, nodes)
                         and not _waited_out_bind_grace(name, uids[name], claims, timeline,
                                                        options.provisioner.bind_grace))
    assert not unexplained, unexplained
    # ... nodeplan never clears a nomination, and the API server clears one when it binds the pod
    # (ClearingNominatedNodeNameAfterBinding, beta and on since 1.35): no bound pod keeps one
    assert not [p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("nominatedNodeName")]
    # ... and batches are decided within the 1 % gap rather than at the 10 s limit
    assert statistics.median(seconds) < options.provisioner.solve_time_limit


def _planned_names(claims: list[dict[str, Any]], pods: list[dict[str, Any]]) -> set[str]:
    """The pods ``nodeplan_adherence`` counts as planned: listed on a NodeClaim or annotated with the running
    node a plan put them on."""
    listed = {str(uid) for c in claims for uid in json.loads(c["metadata"]["annotations"]["nodeplan.io/pods"])}
    return {p["metadata"]["name"] for p in pods
            if p["metadata"]["uid"] in listed or (p["metadata"].get("annotations") or {}).get("nodeplan.io/placed")}


def _first_claim(uid: str, claims: list[dict[str, Any]]) -> dict[str, Any]:
    return min((c for c in claims if uid in json.loads(c["metadata"]["annotations"]["nodeplan.io/pods"])),
               key=lambda c: c["metadata"]["creationTimestamp"])


def _fits_on_first_planned_node(name: str, pods: list[dict[str, Any]], claims: list[dict[str, Any]],
                                nodes: dict[str, dict[str, Any]]) -> bool:
    """Could pod ``name`` still have fitted on the node of the first claim planned for it (``fits_beside_claim``)?"""
    pod = next(p for p in pods if p["metadata"]["name"] == name)
    return fits_beside_claim(pod, _first_claim(pod["metadata"]["uid"], claims), pods, nodes)


def _waited_out_bind_grace(name: str, uid: str, claims: list[dict[str, Any]], timeline: Timeline,
                           grace: float) -> bool:
    """Was pod ``name`` still unbound ``grace`` seconds after the node of its first claim lost its
    unregistered taint (the claim initializes no earlier, so its room is given up no earlier)?"""
    first = _first_claim(uid, claims)
    untainted = timeline.untainted.get((first.get("status") or {}).get("nodeName") or first["metadata"]["name"])
    return untainted is not None and timeline.bound_at(name) > untainted + grace


class Timeline:
    """What the kube-scheduler did with the nominations, as watched from outside: each pod's
    ``status.nominatedNodeName`` changes and binding, and when each Node lost the ``karpenter.sh/unregistered``
    taint (wall-clock seconds). nodeplan never clears a nomination, so every clear counted here is the
    kube-scheduler's (a failed cycle whose preemption found no candidate, kube-scheduler 1.36.3)."""

    def __init__(self, api: client.ApiClient, stop: threading.Event) -> None:
        self._api, self._stop = api, stop
        #: pod name → [(time, nominatedNodeName, nodeName)] on every change of either
        self.pods: dict[str, list[tuple[float, str, str]]] = {}
        #: node name → when its unregistered taint was first seen gone
        self.untainted: dict[str, float] = {}
        for target in (self._watch_pods, self._watch_nodes):
            threading.Thread(target=self._forever, args=(target,), name=target.__name__, daemon=True).start()

    def cleared(self) -> dict[str, int]:
        """Pod name → how often its nomination went from a node to none while the pod was unbound."""
        out: dict[str, int] = {}
        for name, changes in self.pods.items():
            for (_, before, _), (_, after, bound) in itertools.pairwise(changes):
                if before and not after and not bound:
                    out[name] = out.get(name, 0) + 1
        return out

    def explain(self, name: str, planned: str) -> str:
        """Why ``name`` did not land on ``planned``: its nomination when it was bound, and when its planned node
        and the node it got were untainted, relative to the binding."""
        changes = self.pods.get(name, [])
        bound = next(((t, nnn, node) for t, nnn, node in changes if node), None)
        if bound is None:
            return "binding not seen"
        before = [nnn for t, nnn, node in changes if not node]
        t = bound[0]
        planned_at = self.untainted.get(planned)
        got_at = self.untainted.get(bound[2])
        return (f"nominated {before[-1] if before else '-'!s} when bound (history {[n or '-' for n in before]}), "
                f"planned node untainted {'never' if planned_at is None else f'{planned_at - t:+.3f}s'}, "
                f"bound node untainted {'never' if got_at is None else f'{got_at - t:+.3f}s'}")

    def bound_at(self, name: str) -> float:
        return next((t for t, _, node in self.pods.get(name, []) if node), float("inf"))

    def _forever(self, target: Any) -> None:
        """Run one watch after another, each resuming from the resource version the last one reached, so no
        change between them is missed (a fresh list would show only the state, and hide a nomination cleared
        and set again meanwhile); a broken or expired (410) watch starts over from a list."""
        version: str | None = None
        while not self._stop.is_set():
            try:
                version = target(version)
            except Exception:  # a diagnostic: a broken watch is restarted
                version = None
                time.sleep(0.5)

    def _stream(self, watch: kwatch.Watch, func: Any, version: str | None, *args: Any) -> Iterator[Any]:
        extra = {"resource_version": version} if version else {}
        try:
            for event in watch.stream(func, *args, timeout_seconds=5, **extra):
                yield event["object"]
                if self._stop.is_set():
                    break
        finally:
            watch.stop()

    def _watch_pods(self, version: str | None) -> str | None:
        watch = kwatch.Watch()
        for pod in self._stream(watch, client.CoreV1Api(self._api).list_namespaced_pod, version, NAMESPACE):
            entry = (time.time(), pod.status.nominated_node_name or "", pod.spec.node_name or "")
            changes = self.pods.setdefault(pod.metadata.name, [])
            if not changes or changes[-1][1:] != entry[1:]:
                changes.append(entry)
        return watch.resource_version

    def _watch_nodes(self, version: str | None) -> str | None:
        watch = kwatch.Watch()
        for node in self._stream(watch, client.CoreV1Api(self._api).list_node, version):
            tainted = any(t.key == "karpenter.sh/unregistered" for t in node.spec.taints or [])
            if not tainted and node.metadata.name not in self.untainted:
                self.untainted[node.metadata.name] = time.time()
        return watch.resource_version


def _print_deviations(timeline: Timeline, claims: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
    """For each pod not on its first planned node: planned and actual node and what the timeline saw."""
    first: dict[str, str] = {}
    for c in sorted(claims, key=lambda c: c["metadata"]["creationTimestamp"]):
        node = c["status"].get("nodeName") or c["metadata"]["name"]
        for uid in json.loads(c["metadata"]["annotations"].get("nodeplan.io/pods", "[]")):
            first.setdefault(uid, node)
    deviating = [p for p in pods if p["metadata"]["uid"] in first
                 and first[p["metadata"]["uid"]] != p["spec"].get("nodeName")]
    origin = min(timeline.untainted.values(), default=0.0)
    deviating.sort(key=lambda p: timeline.bound_at(p["metadata"]["name"]))
    print(f"  {len(deviating)} pods not on their first planned node; the first bound (seconds after the first "
          f"untaint):")
    for p in deviating[:12]:
        planned = first[p["metadata"]["uid"]]
        print(f"  {timeline.bound_at(p['metadata']['name']) - origin:+.3f}s {p['metadata']['name']}: planned "
              f"{planned}, bound {p['spec'].get('nodeName')}: {timeline.explain(p['metadata']['name'], planned)}")
