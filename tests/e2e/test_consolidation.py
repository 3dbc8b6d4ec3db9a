"""A Deployment scaled from 300 to 100 pods fragments the cluster; the controller consolidates it to fewer, cheaper
nodes within the PodDisruptionBudget and the NodePool's disruption budget (issue #5, item 5).

The controller provisions 300 pods (250m / 512Mi each, on-demand types of at most 4 vCPU, so about 15 pods per
node) while the NodePool's budget is ``nodes: "0"`` (no consolidation yet); the Deployment is scaled to 100 pods,
then the budget opens to ``nodes: "20%"``. Watches follow every pod and every Node / NodeClaim from before the
scale-down to the end: the Deployment's available pods never drop below the PDB's minimum (maxUnavailable 10 %:
90 of 100), and never more Nodes are disrupting (tainted ``karpenter.sh/disrupted`` or their NodeClaim deleting)
than 20 % of the pool's Nodes, rounded up. The run ends when consolidation has nothing more to do (or, at the
latest, after ``CONSOLIDATION_S``: the budget closes again and the cluster settles); then there must be fewer
Nodes, a lower hourly cost, and every pod of the Deployment Running.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from bench.workloads import KWOK_NODECLASS, deployment
from controller.disruption import DisruptionOptions
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions
from providers.kwok import kwok_catalog
from tests.e2e.conftest import Cluster, apply, release_finalizers, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "consolidation"
POOL = "consolidation"
GROUP, VERSION = "karpenter.sh", "v1"
LABELS = {"app": "web"}
BEFORE, AFTER = 300, 100
MIN_AVAILABLE = AFTER - math.ceil(AFTER * 0.10)
BUDGET = 0.20
#: how long consolidation may run before the budget is closed again and the result judged
CONSOLIDATION_S = 120.0
NODEPOOL = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": POOL},
    "spec": {"template": {"spec": {
        "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                         {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                         {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                         {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["5"]}],
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                       "budgets": [{"nodes": "0"}]}},
}
NODECLASS = KWOK_NODECLASS
DEPLOYMENT = deployment("web", NAMESPACE, BEFORE, cpu="250m", memory="512Mi", labels=LABELS)
PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": NAMESPACE},
       "spec": {"maxUnavailable": "10%", "selector": {"matchLabels": LABELS}}}
PRICES = {(it.name, o.zone, o.capacity_type): o.price for it in kwok_catalog() for o in it.offerings}


@pytest.fixture
def workspace(cluster: Cluster, crds: list[str]) -> Iterator[client.ApiClient]:
    api = cluster.api()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    apply(api, NODECLASS)
    apply(api, copy.deepcopy(NODEPOOL))
    yield api
    client.AppsV1Api(api).delete_collection_namespaced_deployment(NAMESPACE)
    core.delete_namespace(NAMESPACE, grace_period_seconds=0)
    for claim in custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")["items"]:
        if claim["metadata"].get("labels", {}).get("karpenter.sh/nodepool") == POOL:
            custom.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", claim["metadata"]["name"])
    release_finalizers(api)  # the controller that would drain them has stopped
    custom.delete_cluster_custom_object(GROUP, VERSION, "nodepools", POOL)

    def clean() -> bool:
        namespaces = [n.metadata.name for n in core.list_namespace().items]
        return NAMESPACE not in namespaces and not _pool_nodes(core)

    wait_for(clean, 120, interval=1.0, what="namespace and nodes deleted")


def _pool_nodes(core: client.CoreV1Api) -> list[Any]:
    return [n for n in core.list_node().items if (n.metadata.labels or {}).get("karpenter.sh/nodepool") == POOL]


def _cost(nodes: list[Any]) -> float:
    labels = [n.metadata.labels for n in nodes]
    return sum(PRICES[(lb["node.kubernetes.io/instance-type"], lb["topology.kubernetes.io/zone"],
                       lb["karpenter.sh/capacity-type"])] for lb in labels)


def _available(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


class Follow:
    """One watch stream from a resourceVersion on, in a thread, calling ``on_event``; records a broken stream."""

    def __init__(self, name: str, lister: Any, resource_version: str, on_event: Any, *args: Any, **kwargs: Any
                 ) -> None:
        self._watch = watch.Watch()
        self._stopped = False
        self.error: str | None = None
        self._args = (lister, *args)
        self._kwargs = {**kwargs, "resource_version": resource_version, "timeout_seconds": 600}
        self._on_event = on_event
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._watch.stream(*self._args, **self._kwargs):
                self._on_event(event)
        except Exception as err:
            if not self._stopped:
                self.error = f"{type(err).__name__}: {err}"
        else:
            if not self._stopped:
                self.error = "the watch ended early"

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


class Invariants:
    """Watches the Deployment's pods (PDB) and the pool's Nodes and NodeClaims (budget) from before the
    scale-down to the end, remembering the worst moment of each."""

    def __init__(self, api: client.ApiClient) -> None:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self._lock = threading.Lock()
        pods = core.list_namespaced_pod(NAMESPACE, label_selector="app=web")
        self.pods = {p.metadata.name: p for p in pods.items}
        self.min_available = sum(_available(p) for p in self.pods.values())
        self.evicted: set[str] = set()
        nodes = core.list_node()
        self.nodes = {n.metadata.name: n for n in nodes.items if self._ours(n.metadata.labels)}
        claims = custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")
        self.claims = {c["metadata"]["name"]: c for c in claims["items"] if self._ours(c["metadata"].get("labels"))}
        self.max_disrupting = 0
        self.budget_violations: list[str] = []
        self._check_budget()
        self.follows = [
            Follow("pods", core.list_namespaced_pod, pods.metadata.resource_version, self._pod, NAMESPACE,
                   label_selector="app=web"),
            Follow("nodes", core.list_node, nodes.metadata.resource_version, self._node),
            Follow("nodeclaims", custom.list_cluster_custom_object, claims["metadata"]["resourceVersion"],
                   self._claim, GROUP, VERSION, "nodeclaims"),
        ]

    @staticmethod
    def _ours(labels: dict[str, str] | None) -> bool:
        return (labels or {}).get("karpenter.sh/nodepool") == POOL

    def _pod(self, event: dict[str, Any]) -> None:
        pod = event["object"]
        with self._lock:
            for cond in pod.status.conditions or []:
                if cond.type == "DisruptionTarget" and cond.status == "True" and cond.reason == "EvictionByEvictionAPI":
                    self.evicted.add(pod.metadata.name)
            if event["type"] == "DELETED":
                self.pods.pop(pod.metadata.name, None)
            else:
                self.pods[pod.metadata.name] = pod
            self.min_available = min(self.min_available, sum(_available(p) for p in self.pods.values()))

    def _node(self, event: dict[str, Any]) -> None:
        node = event["object"]
        if not self._ours(node.metadata.labels):
            return
        with self._lock:
            if event["type"] == "DELETED":
                self.nodes.pop(node.metadata.name, None)
            else:
                self.nodes[node.metadata.name] = node
            self._check_budget()

    def _claim(self, event: dict[str, Any]) -> None:
        claim = event["object"]
        if not self._ours(claim["metadata"].get("labels")):
            return
        with self._lock:
            if event["type"] == "DELETED":
                self.claims.pop(claim["metadata"]["name"], None)
            else:
                self.claims[claim["metadata"]["name"]] = claim
            self._check_budget()

    def _check_budget(self) -> None:
        """Disrupting: a Node of the pool that is tainted karpenter.sh/disrupted, being deleted, or whose
        NodeClaim is being deleted. At most ceil(20 % of the pool's Nodes) at any moment."""
        deleting = {(c.get("status") or {}).get("nodeName") or c["metadata"]["name"] for c in self.claims.values()
                    if c["metadata"].get("deletionTimestamp")}
        disrupting = sorted(name for name, n in self.nodes.items()
                            if name in deleting or n.metadata.deletion_timestamp is not None
                            or any(t.key == "karpenter.sh/disrupted" for t in n.spec.taints or []))
        self.max_disrupting = max(self.max_disrupting, len(disrupting))
        allowed = math.ceil(BUDGET * len(self.nodes))
        if len(disrupting) > allowed:
            self.budget_violations.append(f"{len(disrupting)} of {len(self.nodes)} nodes disrupting: {disrupting}")

    def stop(self) -> list[str]:
        for follow in self.follows:
            follow.stop()
        return [f"{name}: {f.error}" for name, f in zip(("pods", "nodes", "nodeclaims"), self.follows, strict=True)
                if f.error]


def _diagnosis(api: client.ApiClient, controller: Controller) -> str:
    pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector="app=web").items
    phases: dict[str, int] = {}
    for pod in pods:
        phase = "Terminating" if pod.metadata.deletion_timestamp else pod.status.phase
        phase += "" if pod.spec.node_name else "/unbound"
        phases[phase] = phases.get(phase, 0) + 1
    claims = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, "nodeclaims")["items"]
    states: dict[str, int] = {}
    for claim in claims:
        conditions = {c["type"]: c["status"] for c in (claim.get("status") or {}).get("conditions") or []}
        state = ("deleting " if claim["metadata"].get("deletionTimestamp") else "") + ",".join(
            f"{k}={v}" for k, v in sorted(conditions.items()) if k in ("Launched", "Registered", "Initialized"))
        states[state] = states.get(state, 0) + 1
    batches = [(r.pods, len(r.created), r.plan.solver.status, len(r.plan.unschedulable))
               for r in controller.provisioner.history]
    passes = [(r.outcome, r.detail[:120]) for r in controller.disruption.history[-5:]]
    return (f"pods: {phases}; nodeclaims: {states}; batches (pods, created, status, unschedulable): {batches}; "
            f"last consolidation passes: {passes}; controller errors: {controller.errors}")


def test_scaled_down_deployment_is_consolidated_within_pdb_and_budget(cluster: Cluster,
                                                                      workspace: client.ApiClient) -> None:
    api = workspace
    core, custom, apps = client.CoreV1Api(api), client.CustomObjectsApi(api), client.AppsV1Api(api)
    options = ControllerOptions(
        batch_idle=1.0, batch_max=10.0, provisioner=ProvisionerOptions(solve_time_limit=10.0),
        disruption=DisruptionOptions(interval=1.0, time_limit=5.0, validation_wait=1.0, replacement_timeout=60.0))
    controller = Controller(api, options)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
    thread.start()
    invariants: Invariants | None = None
    started = time.monotonic()

    def running(count: int) -> bool:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector="app=web").items
        return len(pods) == count and all(_available(p) for p in pods)

    def budget(nodes: str) -> None:
        custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", POOL,
                                           {"spec": {"disruption": {"budgets": [{"nodes": nodes}]}}})

    def explained(predicate: Any, timeout: float, what: str) -> None:
        """``wait_for``, and on a timeout say where the cluster and the controller stand."""
        try:
            wait_for(predicate, timeout, interval=1.0, what=what)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{_diagnosis(api, controller)}") from None

    try:
        apply(api, PDB)
        apply(api, copy.deepcopy(DEPLOYMENT))
        explained(lambda: running(BEFORE), 180, f"{BEFORE} pods Running")
        provisioned_s = time.monotonic() - started
        before = _pool_nodes(core)
        cost_before = _cost(before)

        invariants = Invariants(cluster.api())  # its own connections: three long watches
        apps.patch_namespaced_deployment_scale("web", NAMESPACE, {"spec": {"replicas": AFTER}})
        explained(lambda: running(AFTER), 60, f"the scale-down to {AFTER} pods")
        wait_for(lambda: (client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(
            "web", NAMESPACE).status.disruptions_allowed == AFTER - MIN_AVAILABLE), 60, what="the PDB to settle")
        passes = len(controller.disruption.history)
        budget(f"{round(BUDGET * 100)}%")
        consolidating = time.monotonic()

        def settled() -> bool:
            """Consolidation has acted, then found nothing more to do three passes in a row."""
            history = controller.disruption.history[passes:]
            acted = any(r.outcome == "disrupted" for r in history)
            tail = [r.outcome for r in history if r.outcome != "busy"][-3:]
            return acted and tail == ["nothing"] * 3

        try:
            wait_for(settled, CONSOLIDATION_S, interval=1.0, what="consolidation to finish")
            converged = True
        except AssertionError:
            converged = False
            budget("0")  # stop taking new decisions; let the ones under way finish
        consolidated_s = time.monotonic() - consolidating

        def quiet() -> bool:
            claims = custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")["items"]
            return running(AFTER) and not any(c["metadata"].get("deletionTimestamp") for c in claims)

        explained(quiet, 90, "the cluster to settle")
        after = _pool_nodes(core)
        broken = invariants.stop()
    finally:
        stop.set()
        thread.join(30)
        if invariants is not None:
            invariants.stop()
    assert not thread.is_alive()
    assert controller.errors == [], controller.errors
    assert broken == [], broken

    history = controller.disruption.history[passes:]
    decisions = [r for r in history if r.outcome == "disrupted"]
    outcomes = [r.outcome for r in history]
    removed = sum(len(r.removed) for r in decisions)
    cost_after = _cost(after)
    print(f"\nconsolidation: {BEFORE} pods on {len(before)} nodes ({cost_before:.4f} $/h) provisioned in "
          f"{provisioned_s:.0f}s; at {AFTER} pods {len(decisions)} decision(s) removed {removed} node(s), launched "
          f"{sum(len(r.replacements) for r in decisions)}: {len(after)} nodes ({cost_after:.4f} $/h) in "
          f"{consolidated_s:.0f}s ({'converged' if converged else 'stopped at the time limit'}); "
          f"{len(invariants.evicted)} pod(s) evicted; min available {invariants.min_available}/{AFTER} "
          f"(PDB minimum {MIN_AVAILABLE}); max {invariants.max_disrupting} node(s) disrupting at once; "
          f"passes {dict((o, outcomes.count(o)) for o in sorted(set(outcomes)))}; last pass: {history[-1].outcome} "
          f"{history[-1].detail} (nodes blocked: {history[-1].blocked}); "
          f"total {time.monotonic() - started:.0f}s")
    assert decisions, f"no consolidation decision was carried out: {[(r.outcome, r.detail) for r in history]}"
    assert len(after) < len(before)
    assert cost_after < cost_before - 1e-9
    # a third of the pods: far cheaper (observed 0.34–0.45 of the cost before; the bound leaves room)
    assert cost_after <= 0.75 * cost_before, (cost_after, cost_before)
    # every pod of the Deployment Running at the end (checked by ``quiet``), on the pool's remaining nodes
    pods = core.list_namespaced_pod(NAMESPACE, label_selector="app=web").items
    assert len(pods) == AFTER and {p.spec.node_name for p in pods} <= {n.metadata.name for n in after}
    # pods left their nodes through the Eviction API, never below the PDB's minimum
    assert invariants.evicted, "consolidation removed nodes without evicting a pod"
    assert invariants.min_available >= MIN_AVAILABLE, invariants.min_available
    assert invariants.budget_violations == [], invariants.budget_violations[:5]
    assert not any(r.outcome == "failed" for r in history), [(r.outcome, r.detail) for r in history]
    # every decision is on record: Events on the Nodes and the NodePool, Karpenter's metrics
    events = client.CoreV1Api(api).list_namespaced_event("default").items
    disrupting = {e.involved_object.name for e in events
                  if e.reason == "Disrupting" and e.involved_object.kind == "Node"}
    assert {name for r in decisions for name in r.removed} <= disrupting
    assert any(e.reason == "Consolidated" and e.involved_object.kind == "NodePool" and e.involved_object.name == POOL
               for e in events)
    metric = controller.metrics.value
    counted = sum(metric("karpenter_voluntary_disruption_decisions_total",
                         {"decision": kind, "reason": reason, "consolidation_type": shape}) or 0
                  for kind in ("delete", "replace") for reason in ("Empty", "Underutilized")
                  for shape in ("empty", "single", "multi"))
    assert counted == len(decisions)
    assert sum(metric("karpenter_nodeclaims_disrupted_total",
                      {"reason": reason, "nodepool": POOL, "capacity_type": "on-demand",
                       "consolidation_policy": "WhenEmptyOrUnderutilized", "termination_mode": "graceful"}) or 0
               for reason in ("Empty", "Underutilized")) == removed
