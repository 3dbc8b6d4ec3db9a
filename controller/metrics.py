"""Prometheus metrics, named and labelled as Karpenter names them (its ``pkg/metrics``, ``pkg/controllers/metrics``,
the termination and lifecycle controllers, operatorpkg's client metrics, the AWS provider's offering gauges), so
its dashboards and alerts work unchanged; what only nodeplan has (plan cost and bound, leadership, Events) is
prefixed ``nodeplan_``.

Counters, histograms and summaries are updated where things happen (a batch solved, a NodeClaim created or gone,
an eviction requested, an API request answered). The per-object cluster-state families (nodes, pods, NodePools)
come from ``controller.cluster_metrics``, kept per (uid, resourceVersion). Every ``Metrics`` owns its own
``CollectorRegistry``: two controllers in one process (tests) never collide. ``render`` is the scrape: the
format negotiated by prometheus_client's ``choose_encoder`` (text 0.0.4 or OpenMetrics), the published
cluster-state families (compressed once per publication) followed by prometheus_client's encoder output for the
registry, gzip when accepted.
"""

from __future__ import annotations

import functools
import gzip
import math
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from controller import metrics_gzip, throttle
from controller.cache import ClusterCache
from controller.cluster_metrics import FAMILIES, ClusterStateMetrics
from model import labels as wk
from model.durations import epoch
from model.instancetype import InstanceType

PREFIX = "karpenter_"
OWN = "nodeplan_"
CONTROLLER = "provisioner"

#: seconds: Karpenter's scheduling-duration buckets reach minutes; ours are bounded by --solve-time-limit
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0)
#: Karpenter's ``metrics.DurationBuckets()``
KARPENTER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
                     1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
                     120, 150, 300, 450, 600)
#: operatorpkg's client latency buckets: ExponentialBuckets(0.001, 1.5, 20)
CLIENT_BUCKETS = tuple(0.001 * 1.5 ** i for i in range(20))
#: client-go's ``rest_client_rate_limiter_duration_seconds`` buckets (component-base)
RATE_LIMITER_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
#: Karpenter's ``metrics.SummaryObjectives()`` quantiles
QUANTILES = (0.0, 0.5, 0.9, 0.99, 1.0)
#: Go's ``prometheus.DefMaxAge``: a summary's quantiles cover the last ten minutes
SUMMARY_MAX_AGE = 600.0
GZIP_LEVEL = metrics_gzip.LEVEL
#: a scrape uses cluster-state families published this recently as they are (two Prometheus replicas scraping
#: together publish once) ...
SCRAPE_FRESH_WITHIN = 1.0
#: ... and waits this long for a newer publication before it answers with the one before (issue 13: a scrape
#: within 0.5 s at 50,000 pods, also on a machine with every core busy; a publication at 50,000 pods under a
#: scale-out's churn takes 0.2-0.25 s of CPU, so a machine with a core to spare serves the cluster as it is)
SCRAPE_WAIT = 0.4


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


class WindowedSummary(Collector):
    """A summary with quantiles, which prometheus_client's ``Summary`` does not have: Karpenter's latency
    summaries (objectives 0, 0.5, 0.9, 0.99, 1) as Go's client computes them, over the observations of the last
    ``max_age`` seconds; ``_sum`` and ``_count`` are cumulative. Exact quantiles of a bounded window (at most
    ``max_kept`` observations per label set) rather than Go's ε-approximate stream."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 registry: CollectorRegistry, max_age: float = SUMMARY_MAX_AGE, max_kept: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._max_age, self._clock = max_age, clock
        self._lock = threading.Lock()
        self._window: dict[tuple[str, ...], deque[tuple[float, float]]] = {}
        self._totals: dict[tuple[str, ...], tuple[int, float]] = {}
        self._max_kept = max_kept
        registry.register(self)

    def observe(self, value: float, *labelvalues: str) -> None:
        key = tuple(labelvalues)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {key}")
        with self._lock:
            window = self._window.setdefault(key, deque(maxlen=self._max_kept))
            window.append((self._clock(), value))
            count, total = self._totals.get(key, (0, 0.0))
            self._totals[key] = (count + 1, total + value)

    def quantiles(self, *labelvalues: str) -> dict[float, float]:
        """φ → value over the current window (NaN when it is empty, as Go reports)."""
        with self._lock:
            return self._quantiles(tuple(labelvalues))

    def _quantiles(self, key: tuple[str, ...]) -> dict[float, float]:
        window = self._window.get(key, deque())
        cutoff = self._clock() - self._max_age
        while window and window[0][0] < cutoff:
            window.popleft()
        ordered = sorted(v for _, v in window)
        if not ordered:
            return {q: float("nan") for q in QUANTILES}
        # the rank Go's summary targets: the smallest value with at least φ·n observations at or below it
        n = len(ordered)
        return {q: ordered[max(0, min(n - 1, math.ceil(q * n) - 1))] for q in QUANTILES}

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, "summary")
        with self._lock:
            for key, (count, total) in sorted(self._totals.items()):
                labels = dict(zip(self.labelnames, key, strict=True))
                for q, value in self._quantiles(key).items():
                    metric.samples.append(Sample(self.name, {**labels, "quantile": _quantile(q)}, value))
                metric.samples.append(Sample(f"{self.name}_sum", labels, total))
                metric.samples.append(Sample(f"{self.name}_count", labels, float(count)))
        yield metric


def _quantile(q: float) -> str:
    """Go's label value of a quantile: ``0``, ``0.5``, ``0.99``, ``1``."""
    return f"{q:g}"


class OfferingCollector(Collector):
    """The AWS provider's catalog gauges: each offering's price estimate and availability (an offering the
    cloud refused recently is unavailable), each type's vCPUs and memory."""

    def __init__(self, catalog: Callable[[], Sequence[InstanceType]]) -> None:
        self._catalog = catalog

    def collect(self) -> Iterator[Metric]:
        labels = ["instance_type", "capacity_type", "zone"]
        price = GaugeMetricFamily(f"{PREFIX}cloudprovider_instance_type_offering_price_estimate",
                                  "Instance type offering estimated hourly price used when making informed "
                                  "decisions on node cost calculation, based on instance type, capacity type, and "
                                  "zone.", labels=labels)
        available = GaugeMetricFamily(f"{PREFIX}cloudprovider_instance_type_offering_available",
                                      "Instance type offering availability, based on instance type, capacity "
                                      "type, and zone", labels=labels)
        cpu = GaugeMetricFamily(f"{PREFIX}cloudprovider_instance_type_cpu_cores", "VCPUs cores for a given "
                                "instance type.", labels=["instance_type"])
        memory = GaugeMetricFamily(f"{PREFIX}cloudprovider_instance_type_memory_bytes", "Memory, in bytes, for a "
                                   "given instance type.", labels=["instance_type"])
        for it in sorted(self._catalog(), key=lambda t: t.name):
            cpu.add_metric([it.name], it.capacity["cpu"] / 1000)
            memory.add_metric([it.name], float(it.capacity["memory"]))
            for o in sorted(it.offerings, key=lambda o: (o.capacity_type, o.zone)):
                price.add_metric([it.name, o.capacity_type, o.zone], o.price)
                available.add_metric([it.name, o.capacity_type, o.zone], 1.0 if o.available else 0.0)
        yield from (price, available, cpu, memory)


def _request_labels(method: str, url: str) -> dict[str, str]:
    """operatorpkg's ``LatencyAdapter`` labels of one request: POST is CREATE, a GET of a collection is LIST (a
    watch: WATCH), PUT of a named object UPDATE; group, version, kind (the resource) and subresource, parsed from
    the path as operatorpkg parses it (``/api/v1/namespaces/{ns}/pods/{name}/eviction``)."""
    split = urlsplit(url)
    parts = [p for p in split.path.split("/") if p]
    labels = {"verb": method.upper(), "group": "", "version": "", "kind": "", "subresource": ""}
    if not parts or parts[0] not in ("api", "apis"):
        return labels
    group_at = 0 if parts[0] == "api" else 1
    if len(parts) < group_at + 3:
        return labels
    version_at = group_at + 1
    kind_at = version_at + 3 if parts[group_at + 2] == "namespaces" and len(parts) > group_at + 4 else version_at + 1
    named = len(parts) > kind_at + 1
    labels.update(group="" if group_at == 0 else parts[group_at], version=parts[version_at], kind=parts[kind_at],
                  subresource=parts[kind_at + 2] if len(parts) == kind_at + 3 else "")
    verb = labels["verb"]
    if verb == "POST":
        labels["verb"] = "CREATE"
    elif verb == "GET" and not named:
        labels["verb"] = "WATCH" if parse_qs(split.query).get("watch", [""])[0] in ("true", "True", "1") else "LIST"
    elif verb == "PUT":
        labels["verb"] = "UPDATE" if named else "CREATE"
    return labels


class Metrics:
    """Every metric the controller exports, in its own registry."""

    def __init__(self, cache: ClusterCache | None = None, synced: Callable[[], bool] | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # the process itself, by prometheus_client's own collectors (process_*, python_info, python_gc_*)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.scheduling_duration = Histogram(
            f"{PREFIX}scheduler_scheduling_duration_seconds", "Seconds one batch took: snapshot, solve, NodeClaims",
            ["controller"], registry=r, buckets=DURATION_BUCKETS)
        self.queue_depth = Gauge(f"{PREFIX}scheduler_queue_depth", "Provisionable pods waiting for a batch",
                                 ["controller"], registry=r)
        self.unschedulable = Gauge(f"{PREFIX}scheduler_unschedulable_pods_count",
                                   "Pods the last batch's plan could not place", ["controller"], registry=r)
        self.nodeclaims_created = Counter(
            f"{PREFIX}nodeclaims_created", "Number of nodeclaims created in total by Karpenter. Labeled by reason "
            "the nodeclaim was created, the owning nodepool, and if min values was relaxed for this nodeclaim.",
            ["reason", "nodepool", "min_values_relaxed"], registry=r)
        self.nodeclaims_terminated = Counter(
            f"{PREFIX}nodeclaims_terminated", "Number of nodeclaims terminated in total by Karpenter. Labeled by the "
            "owning nodepool, capacity type, and zone.", ["nodepool", "capacity_type", "zone"], registry=r)
        self.nodeclaims_termination_duration = Histogram(
            f"{PREFIX}nodeclaims_termination_duration_seconds", "Duration of NodeClaim termination in seconds.",
            ["nodepool"], registry=r, buckets=tuple(float(2 ** i) for i in range(12)))
        self.nodes_created = Counter(f"{PREFIX}nodes_created", "Number of nodes created in total by Karpenter. "
                                     "Labeled by owning nodepool and zone.", ["nodepool", "zone"], registry=r)
        self.nodes_terminated = Counter(f"{PREFIX}nodes_terminated", "Number of nodes terminated in total by "
                                        "Karpenter. Labeled by owning nodepool and zone.", ["nodepool", "zone"],
                                        registry=r)
        self.nodes_drained = Counter(f"{PREFIX}nodes_drained", "The total number of nodes drained by Karpenter",
                                     ["nodepool"], registry=r)
        self.nodes_termination_duration = WindowedSummary(
            f"{PREFIX}nodes_termination_duration_seconds", "The time taken between a node's deletion request and "
            "the removal of its finalizer", ["nodepool"], registry=r)
        self.nodes_lifetime = Histogram(
            f"{PREFIX}nodes_lifetime_duration_seconds", "The lifetime duration of the nodes since creation.",
            ["nodepool"], registry=r, buckets=(1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 57600.0, 86400.0, 172800.0,
                                               345600.0, 604800.0, 1209600.0, 2419200.0))
        self.pods_eviction_requests = Counter(
            f"{PREFIX}pods_eviction_requests", "The total number of pod eviction requests made by Karpenter, labeled "
            "by response code", ["code"], registry=r)
        self.pods_drained = Counter(f"{PREFIX}pods_drained", "The total number of pods drained during node "
                                    "termination by Karpenter, labeled by reason", ["reason"], registry=r)
        self.pods_startup_duration = WindowedSummary(
            f"{PREFIX}pods_startup_duration_seconds", "The time from pod creation until the pod is running.",
            registry=r)
        self.pods_bound_duration = Histogram(
            f"{PREFIX}pods_bound_duration_seconds", "The time from pod creation until the pod is bound.",
            registry=r, buckets=KARPENTER_BUCKETS)
        self.cloudprovider_errors = Counter(f"{PREFIX}cloudprovider_errors", "Total number of errors returned from "
                                            "CloudProvider calls.", ["controller", "method", "provider", "error"],
                                            registry=r)
        self.cloudprovider_duration = Histogram(
            f"{PREFIX}cloudprovider_duration_seconds", "Duration of cloud provider method calls. Labeled by the "
            "controller, method name and provider.", ["controller", "method", "provider"], registry=r)
        # operatorpkg's RegisterClientMetrics: every API request by status code and method, and its latency
        self.client_requests = Counter("client_go_request", "Number of HTTP requests, partitioned by status code "
                                       "and method.", ["code", "method"], registry=r)
        self.client_latency = Histogram(
            "client_go_request_duration_seconds", "Request latency in seconds. Broken down by verb, group, version, "
            "kind, and subresource.", ["verb", "group", "version", "kind", "subresource"], registry=r,
            buckets=CLIENT_BUCKETS)
        # controller-runtime's per-controller metrics, one "reconcile" per pass of each worker loop
        self.reconciles = Counter("controller_runtime_reconcile", "Total number of reconciliations per controller",
                                  ["controller", "result"], registry=r)
        self.reconcile_errors = Counter("controller_runtime_reconcile_errors", "Total number of reconciliation "
                                        "errors per controller", ["controller"], registry=r)
        self.reconcile_time = Histogram("controller_runtime_reconcile_time_seconds", "Length of time per "
                                        "reconciliation per controller", ["controller"], registry=r,
                                        buckets=KARPENTER_BUCKETS)
        self.workqueue_depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name", "controller"],
                                     registry=r)
        self.plan_cost = Gauge(f"{OWN}plan_cost_dollars_per_hour", "Hourly price of the last batch's new nodes",
                               registry=r)
        self.plan_lower_bound = Gauge(f"{OWN}plan_lower_bound_dollars_per_hour",
                                      "Certified lower bound on the last batch's cost", registry=r)
        self.plan_greedy_cost = Gauge(f"{OWN}plan_greedy_cost_dollars_per_hour", "Hourly price the greedy "
                                      "yardstick (Karpenter's first-fit-decreasing) would pay for the last batch",
                                      registry=r)
        self.plan_cost_sum = Counter(f"{OWN}batch_cost_dollars_per_hour", "Sum over batches of the hourly price "
                                     "of their new nodes", registry=r)
        self.plan_greedy_cost_sum = Counter(f"{OWN}batch_greedy_cost_dollars_per_hour", "Sum over batches of what "
                                            "the greedy yardstick would have paid per hour", registry=r)
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
        self.karpenter_build_info = Gauge(f"{PREFIX}build_info", "A metric with a constant '1' value labeled by "
                                          "version from which karpenter was built.", ["version", "commit"],
                                          registry=r)
        self.karpenter_build_info.labels(build_version(), build_commit()).set(1)
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
        # API throttling: requests answered 429, each repeated after its Retry-After (lists and watches by the
        # cache's informers, every other request by controller.throttle), and the waits of the client's own limit
        self.api_throttled = Counter(f"{OWN}api_throttled_requests", "API requests the API server throttled "
                                     "(429, or a 5xx with Retry-After), by kind; each was retried after its "
                                     "Retry-After", ["kind"], registry=r)
        # Karpenter exports no rate-limiter metric; this is client-go's rest_client_rate_limiter_duration_seconds
        self.rate_limiter_wait = Histogram(
            f"{OWN}client_rate_limiter_duration_seconds", "Client side rate limiter latency in seconds: how long "
            "each API request waited for a token (KUBE_CLIENT_QPS / KUBE_CLIENT_BURST), by verb", ["verb"],
            registry=r, buckets=RATE_LIMITER_BUCKETS)
        if cache is not None:
            cache.on_throttled = lambda kind: self.api_throttled.labels(kind).inc()
        self.state: ClusterStateMetrics | None = None
        if cache is not None:
            self.state = ClusterStateMetrics(cache, synced or (lambda: True),
                                             on_started=lambda s: self.pods_startup_duration.observe(s),
                                             on_bound=self.pods_bound_duration.observe, clock=clock)

    # -- wiring -------------------------------------------------------------------------------------------
    def watch_offerings(self, catalog: Callable[[], Sequence[InstanceType]]) -> None:
        """Export ``catalog()``'s offerings (price, availability) on every scrape."""
        self.registry.register(OfferingCollector(catalog))

    def instrument(self, api: client.ApiClient) -> None:
        """Count and time every request ``api`` makes (``client_go_request_*``), by wrapping its ``call_api``
        once: every generated API method (and the watch cache's lists and watches) sends through it. A client with
        a ``controller.throttle`` is observed through its hooks instead, as client-go observes: each attempt (a
        429 retry too) counted and timed without its wait for a token, the wait in its own histogram."""
        if getattr(api, "_nodeplan_instrumented", False):
            return
        limit = throttle.installed(api)
        if limit is not None:
            limit.on_wait = lambda verb, seconds: self.rate_limiter_wait.labels(verb).observe(seconds)
            limit.on_throttled = lambda verb, kind: self.api_throttled.labels(kind).inc()
            limit.on_attempt = self._attempted
            api._nodeplan_instrumented = True  # type: ignore[attr-defined]
            return
        inner = api.call_api

        def call_api(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            return throttle.attempt(inner, self._attempted, method, url, *args, **kwargs)

        api.call_api = call_api  # type: ignore[method-assign]
        api._nodeplan_instrumented = True  # type: ignore[attr-defined]

    def _attempted(self, method: str, url: str, code: str, seconds: float) -> None:
        self.client_requests.labels(code, method.upper()).inc()
        self.client_latency.labels(**_request_labels(method, url)).observe(seconds)

    # -- hooks where things happen ------------------------------------------------------------------------
    def reconciled(self, controller: str, seconds: float, *, error: bool = False, depth: int | None = None) -> None:
        """One pass of a worker loop, as controller-runtime counts a reconcile (and its queue's depth)."""
        self.reconciles.labels(controller, "error" if error else "success").inc()
        errors = self.reconcile_errors.labels(controller)  # 0 until the first error, as controller-runtime starts it
        if error:
            errors.inc()
        self.reconcile_time.labels(controller).observe(seconds)
        queue = self.workqueue_depth.labels(controller, controller)  # 0: an empty queue
        if depth is not None:
            queue.set(depth)

    def evicted(self, pod: str, outcome: str) -> None:
        """``controller.drain``'s hook: an eviction request's response code (force deletions are no request)."""
        code = {"evicted": "200", "blocked": "429", "gone": "404"}.get(outcome)
        if code is not None:
            self.pods_eviction_requests.labels(code).inc()

    def node_registered(self, claim: Mapping[str, Any]) -> None:
        labels = (claim.get("metadata") or {}).get("labels") or {}
        self.nodes_created.labels(labels.get(wk.NODEPOOL, ""), labels.get(wk.ZONE, "")).inc()

    def node_drained(self, claim: Mapping[str, Any], pods: int, reason: str) -> None:
        """A drain step that sent ``pods`` evictions or deletions (``reason``: the claim's disruption reason)."""
        if pods:
            self.pods_drained.labels(reason).inc(pods)

    def claim_terminated(self, claim: Mapping[str, Any], node: Mapping[str, Any] | None, drained: bool) -> None:
        """The termination of ``claim`` finished: its finalizer is removed (``node``: its Node, when one was)."""
        meta = claim.get("metadata") or {}
        labels = meta.get("labels") or {}
        pool = labels.get(wk.NODEPOOL, "")
        deleted = epoch(meta.get("deletionTimestamp"))
        if deleted is not None:
            self.nodeclaims_termination_duration.labels(pool).observe(max(0.0, time.time() - deleted))
        if node is None:
            return
        if drained:
            self.nodes_drained.labels(pool).inc()
        self.nodes_terminated.labels(pool, labels.get(wk.ZONE, "")).inc()
        if deleted is not None:
            self.nodes_termination_duration.observe(max(0.0, time.time() - deleted), pool)
        created = epoch((node.get("metadata") or {}).get("creationTimestamp"))
        if created is not None:
            self.nodes_lifetime.labels(pool).observe(max(0.0, time.time() - created))

    # -- the scrape ---------------------------------------------------------------------------------------
    def render(self, accept: str | None = None, accept_encoding: str | None = None,
               names: Sequence[str] | None = None, *, fresh_within: float = SCRAPE_FRESH_WITHIN,
               wait: float | None = SCRAPE_WAIT) -> tuple[bytes, list[tuple[str, str]]]:
        """The body and headers of one scrape: the format ``accept`` asks for (prometheus_client's
        ``choose_encoder``: Prometheus text or OpenMetrics), gzip when ``accept_encoding`` allows it, only the
        families in ``names`` (``?name[]=``) when given. The cluster-state families come first, as
        ``ClusterStateMetrics.exposition`` published them (``fresh_within``, ``wait``), the registry after them
        (so OpenMetrics' ``# EOF`` stays last, and the gzip member continues the published piece's CRC)."""
        encoder, content_type = choose_encoder(accept or "")
        openmetrics = content_type.startswith("application/openmetrics-text")
        registry = self.registry.restricted_registry(names) if names else self.registry
        headers = [("Content-Type", content_type)]
        zipped = gzip_accepted(accept_encoding or "")
        if zipped:
            headers.append(("Content-Encoding", "gzip"))
        if self.state is None:
            body = encoder(registry)
            return (gzip.compress(body, compresslevel=GZIP_LEVEL) if zipped else body), headers
        if names:  # a filtered scrape (rare, small): the families asked for, refreshed now
            body = self.state.render(frozenset(names), openmetrics=openmetrics) + encoder(registry)
            return (gzip.compress(body, compresslevel=GZIP_LEVEL) if zipped else body), headers
        published = self.state.exposition(fresh_within=fresh_within, wait=wait)
        tail = encoder(registry)
        if zipped:
            return metrics_gzip.member(published.bodies[openmetrics], tail, GZIP_LEVEL), headers
        return published.text(openmetrics) + tail, headers

    def exposition(self) -> bytes:
        """The Prometheus text format, uncompressed and refreshed now (tests and logs)."""
        return self.render(fresh_within=0.0, wait=None)[0]

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """One sample's value (tests and logs): ``name`` as exposed, e.g. ``karpenter_nodeclaims_created_total``."""
        wanted = dict(labels or {})
        if self.state is not None and name in {f.name for f in FAMILIES}:
            return next((v for found, v in self.state.samples(name) if found == wanted), None)
        return self.registry.get_sample_value(name, wanted)

    def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """Every sample of a cluster-state family ``name`` (tests)."""
        return list(self.state.samples(name)) if self.state is not None else []

