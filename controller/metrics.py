"""Prometheus metrics, named as Karpenter names them (prefix ``karpenter_``) so its dashboards and alerts work
unchanged; what only nodeplan has (plan cost and bound, leadership, Events) is prefixed ``nodeplan_``.

Counters and histograms are updated where things happen (a batch solved, a NodeClaim created or gone, a
provider call failed). Cluster-state gauges (nodes, NodePools, pods) are computed from the watch cache at
scrape time by a custom collector, so they are never stale and cost nothing between scrapes. Every
``Metrics`` owns its own ``CollectorRegistry``: two controllers in one process (tests) never collide.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from controller.batch import is_bound, is_terminal
from controller.cache import ClusterCache
from model import labels as wk
from model.errors import InputError
from model.fields import RawObject
from model.pod import effective_requests
from model.resources import Resources

PREFIX = "karpenter_"
OWN = "nodeplan_"
CONTROLLER = "provisioner"

#: seconds: Karpenter's scheduling-duration buckets reach minutes; ours are bounded by --solve-time-limit
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0)


def _value(resource: str, amount: int) -> float:
    """Base units → Prometheus units: cpu in cores (we count millicores), everything else as is."""
    return amount / 1000 if resource == "cpu" else float(amount)


def _resources(raw: Any) -> Resources:
    try:
        return Resources.parse(raw if isinstance(raw, Mapping) else None)
    except InputError:
        return Resources()


def _requests(pod: Mapping[str, Any]) -> Resources:
    try:
        return effective_requests(RawObject(pod.get("spec") or {}, "spec"))
    except InputError:
        return Resources()


@functools.cache
def build_version() -> str:
    """The installed nodeplan distribution's version."""
    try:
        return metadata.version("nodeplan")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def build_commit() -> str:
    """The source commit: the ``COMMIT`` file the image build writes into the installed distribution's metadata
    (``hack/image/build.sh`` passes it as a build arg), else ``git`` on the source tree of an editable install."""
    try:
        recorded = (metadata.distribution("nodeplan").read_text("COMMIT") or "").strip()
    except metadata.PackageNotFoundError:
        recorded = ""
    if recorded:
        return recorded
    try:
        found = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parents[1],
                               capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else "unknown"


class ClusterStateCollector(Collector):
    """Karpenter's cluster-state gauges, read from the watch cache when Prometheus scrapes."""

    def __init__(self, cache: ClusterCache, synced: Callable[[], bool]) -> None:
        self._cache = cache
        self._synced = synced

    def collect(self) -> Iterator[Metric]:
        synced = self._synced()
        yield GaugeMetricFamily(f"{PREFIX}cluster_state_synced",
                                "1 when the controller's watch cache has listed every kind it reads",
                                value=1.0 if synced else 0.0)
        if not synced:
            return
        nodes = self._cache.items("Node")
        pods = [p for p in self._cache.items("Pod") if not is_terminal(p)]
        claims = self._cache.items("NodeClaim")
        pools = self._cache.items("NodePool")
        node_labels = ["node_name", "nodepool", "resource_type", "instance_type", "capacity_type", "zone", "arch",
                       "os"]
        allocatable = GaugeMetricFamily(f"{PREFIX}nodes_allocatable", "Node allocatable by resource (cpu in cores)",
                                        labels=node_labels)
        requested = GaugeMetricFamily(f"{PREFIX}nodes_total_pod_requests",
                                      "Sum of the requests of the pods bound to the node", labels=node_labels[:3])
        by_node: dict[str, Resources] = {}
        for pod in pods:
            if is_bound(pod):
                bound_to = str((pod.get("spec") or {}).get("nodeName"))
                by_node[bound_to] = by_node.get(bound_to, Resources()) + _requests(pod)
        node_info: dict[str, dict[str, str]] = {}
        for node in nodes:
            meta = node.get("metadata") or {}
            labels = meta.get("labels") or {}
            name = str(meta.get("name"))
            row = [str(labels.get(key, "")) for key in (wk.NODEPOOL, wk.INSTANCE_TYPE, wk.CAPACITY_TYPE, wk.ZONE,
                                                        wk.ARCH, wk.OS)]
            node_info[name] = {"nodepool": row[0], "instance_type": row[1], "capacity_type": row[2], "zone": row[3]}
            for resource, amount in sorted(_resources((node.get("status") or {}).get("allocatable")).items()):
                allocatable.add_metric([name, row[0], resource, *row[1:]], _value(resource, amount))
            for resource, amount in sorted(by_node.get(name, Resources()).items()):
                requested.add_metric([name, row[0], resource], _value(resource, amount))
        yield allocatable
        yield requested

        usage = GaugeMetricFamily(f"{PREFIX}nodepools_usage", "Capacity of the NodePool's NodeClaims by resource",
                                  labels=["nodepool", "resource_type"])
        limit = GaugeMetricFamily(f"{PREFIX}nodepools_limit", "The NodePool's spec.limits by resource",
                                  labels=["nodepool", "resource_type"])
        used: dict[str, Resources] = {}
        counts: dict[str, int] = {}
        for claim in claims:
            pool = ((claim.get("metadata") or {}).get("labels") or {}).get(wk.NODEPOOL, "")
            capacity = _resources((claim.get("status") or {}).get("capacity"))
            used[pool] = used.get(pool, Resources()) + capacity
            counts[pool] = counts.get(pool, 0) + 1
        for pool in pools:
            name = str((pool.get("metadata") or {}).get("name"))
            for resource, amount in sorted(used.get(name, Resources()).items()):
                usage.add_metric([name, resource], _value(resource, amount))
            usage.add_metric([name, "nodes"], float(counts.get(name, 0)))
            for resource, amount in sorted(_resources((pool.get("spec") or {}).get("limits")).items()):
                limit.add_metric([name, resource], _value(resource, amount))
        yield usage
        yield limit

        state = GaugeMetricFamily(f"{PREFIX}pods_state", "One series per pod: where it runs and its phase",
                                  labels=["name", "namespace", "node", "nodepool", "zone", "instance_type",
                                          "capacity_type", "phase"])
        for pod in pods:
            meta = pod.get("metadata") or {}
            bound_to = str((pod.get("spec") or {}).get("nodeName") or "")
            where = node_info.get(bound_to, {})
            state.add_metric([str(meta.get("name")), str(meta.get("namespace")), bound_to, where.get("nodepool", ""),
                              where.get("zone", ""), where.get("instance_type", ""), where.get("capacity_type", ""),
                              str((pod.get("status") or {}).get("phase") or "Unknown")], 1.0)
        yield state


class Metrics:
    """Every metric the controller exports, in its own registry."""

    def __init__(self, cache: ClusterCache | None = None, synced: Callable[[], bool] | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.scheduling_duration = Histogram(
            f"{PREFIX}scheduler_scheduling_duration_seconds", "Seconds one batch took: snapshot, solve, NodeClaims",
            ["controller"], registry=r, buckets=DURATION_BUCKETS)
        self.queue_depth = Gauge(f"{PREFIX}scheduler_queue_depth", "Provisionable pods waiting for a batch",
                                 ["controller"], registry=r)
        self.unschedulable = Gauge(f"{PREFIX}scheduler_unschedulable_pods_count",
                                   "Pods the last batch's plan could not place", ["controller"], registry=r)
        claim_labels = ["nodepool", "instance_type", "capacity_type", "zone"]
        self.nodeclaims_created = Counter(f"{PREFIX}nodeclaims_created", "NodeClaims created",
                                          ["reason", *claim_labels], registry=r)
        self.nodeclaims_terminated = Counter(f"{PREFIX}nodeclaims_terminated", "NodeClaims seen deleted",
                                             ["nodepool"], registry=r)
        self.cloudprovider_errors = Counter(f"{PREFIX}cloudprovider_errors", "Cloud provider calls that failed",
                                            ["controller", "method", "provider", "error"], registry=r)
        self.plan_cost = Gauge(f"{OWN}plan_cost_dollars_per_hour", "Hourly price of the last batch's new nodes",
                               registry=r)
        self.plan_lower_bound = Gauge(f"{OWN}plan_lower_bound_dollars_per_hour",
                                      "Certified lower bound on the last batch's cost", registry=r)
        self.batches = Counter(f"{OWN}batches", "Batches solved, by solver status", ["status"], registry=r)
        self.plan_rejected_pods = Counter(f"{OWN}plan_rejected_pods",
                                          "Pods the plan gate left pending because the verifier rejected their "
                                          "placement", registry=r)
        self.events = Counter(f"{OWN}events", "Kubernetes Events recorded (before deduplication)",
                              ["type", "reason"], registry=r)
        self.leader = Gauge(f"{OWN}leader", "1 while this replica holds the leader-election Lease", registry=r)
        self.nodepools_invalid = Gauge(f"{OWN}nodepools_invalid", "NodePools ignored because they are invalid",
                                       registry=r)
        self.build_info = Gauge(f"{OWN}build_info", "Always 1; the running build's version and source commit",
                                ["version", "commit"], registry=r)
        self.build_info.labels(build_version(), build_commit()).set(1)
        # shadow mode (controller.shadow): nodeplan's decision next to the other provisioner's, per batch
        self.shadow_batches = Counter(f"{OWN}shadow_batches", "Batches compared in shadow mode, by how they "
                                      "settled (bound: every pod bound; timeout)", ["settled"], registry=r)
        self.shadow_cost = Gauge(f"{OWN}shadow_cost_dollars_per_hour", "Hourly price of the new nodes each decider "
                                 "launched (karpenter) or would launch (nodeplan) for the last compared batch",
                                 ["decider"], registry=r)
        self.shadow_cost_sum = Counter(f"{OWN}shadow_batch_cost_dollars_per_hour", "Sum over compared batches of "
                                       "the hourly price of each decider's new nodes", ["decider"], registry=r)
        self.shadow_pending = Gauge(f"{OWN}shadow_pending_pods", "Pods of the last compared batch each decider "
                                    "left pending", ["decider"], registry=r)
        self.shadow_pending_sum = Counter(f"{OWN}shadow_left_pending_pods", "Pods each decider left pending, over "
                                          "every compared batch", ["decider"], registry=r)
        self.shadow_consolidation_cost = Gauge(f"{OWN}shadow_consolidation_cost_dollars_per_hour", "Cluster $/h "
                                               "now (karpenter) and after nodeplan's consolidation decision "
                                               "(nodeplan)", ["decider"], registry=r)
        for gauge in (self.queue_depth, self.unschedulable):
            gauge.labels(CONTROLLER).set(0)
        if cache is not None:
            r.register(ClusterStateCollector(cache, synced or (lambda: True)))

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """One sample's value (tests and logs): ``name`` as exposed, e.g. ``karpenter_nodeclaims_created_total``."""
        return self.registry.get_sample_value(name, dict(labels or {}))
