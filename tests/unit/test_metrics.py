"""The controller's metrics against Karpenter's definitions: names and label sets as Karpenter's source declares
them (``pkg/controllers/metrics/{node,pod,nodepool}``, ``pkg/metrics``, operatorpkg's client metrics), values as
its controllers compute them (requests of bound non-terminal pods with a ``pods`` count, DaemonSet pods apart,
cpu in cores), the scrape in prometheus_client's formats, and per-object work done once per resourceVersion."""

from __future__ import annotations

import gzip
import math
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.samples import Sample

from controller import cluster_metrics
from controller.cache import ClusterCache, Resource
from controller.drain import Drainer
from controller.metrics import Metrics, WindowedSummary, _request_labels

KINDS = ("Pod", "Node", "NodeClaim", "NodePool")


def cache_of(**objects: list[dict[str, Any]]) -> ClusterCache:
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in KINDS})
    for kind, items in objects.items():
        for obj in items:
            obj.setdefault("metadata", {}).setdefault("resourceVersion", "1")
            cache.upsert(kind, obj)
    return cache


def node(name: str, zone: str = "z1", capacity_type: str = "spot") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "creationTimestamp": "2026-12-01T00:00:00Z", "labels": {
        "karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": zone, "kubernetes.io/arch": "arm64",
        "node.kubernetes.io/instance-type": "c-4x", "karpenter.sh/capacity-type": capacity_type,
        "kubernetes.io/os": "linux"}},
        "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                   "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"}}}


def pod(name: str, on: str | None, cpu: str = "500m", *, phase: str = "Running", owner: str = "ReplicaSet",
        ready: bool = True, version: str = "1") -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False",
                   "lastTransitionTime": "2026-12-01T00:00:30Z"}]
    if on:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T00:00:10Z"})
    return {"metadata": {"name": name, "namespace": "shop", "uid": name, "resourceVersion": version,
                         "creationTimestamp": "2026-12-01T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": "web-1"}]},
            "spec": {**({"nodeName": on} if on else {}),
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": phase, "conditions": conditions}}


NODE_LABELS = {"node_name": "n1", "nodepool": "general", "zone": "z1", "region": "", "instance_type": "c-4x",
               "arch": "arm64", "os": "linux", "capacity_type": "spot", "windows_build": "", "phase": "",
               "managed": "true"}


def setup() -> tuple[Metrics, ClusterCache]:
    cache = cache_of(Node=[node("n1")],
                     Pod=[pod("a", "n1"), pod("b", "n1", "1"), pod("agent", "n1", "100m", owner="DaemonSet"),
                          pod("done", "n1", "2", phase="Succeeded"), pod("waiting", None, phase="Pending",
                                                                         ready=False)],
                     NodeClaim=[{"metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "general"}},
                                 "status": {"nodeName": "n1", "capacity": {"cpu": "4", "memory": "16Gi"}}}],
                     NodePool=[{"metadata": {"name": "general"}, "spec": {"limits": {"cpu": "100", "memory": "1Ti"}},
                                "status": {"resources": {"cpu": "4", "memory": "16Gi", "nodes": "1"}}}])
    return Metrics(cache), cache


def test_node_families_have_karpenters_labels_and_values() -> None:
    metrics, _ = setup()
    value = metrics.value
    assert value("karpenter_nodes_allocatable", {**NODE_LABELS, "resource_type": "cpu"}) == 3.9
    assert value("karpenter_nodes_allocatable", {**NODE_LABELS, "resource_type": "memory"}) == 15 * 2 ** 30
    # every bound, non-terminal pod (the DaemonSet's included), and Karpenter's "pods" count
    assert value("karpenter_nodes_total_pod_requests", {**NODE_LABELS, "resource_type": "cpu"}) == 1.6
    assert value("karpenter_nodes_total_pod_requests", {**NODE_LABELS, "resource_type": "pods"}) == 3
    assert value("karpenter_nodes_total_daemon_requests", {**NODE_LABELS, "resource_type": "cpu"}) == 0.1
    assert value("karpenter_nodes_total_daemon_requests", {**NODE_LABELS, "resource_type": "pods"}) == 1
    assert value("karpenter_nodes_system_overhead", {**NODE_LABELS, "resource_type": "cpu"}) == 0.1
    assert value("karpenter_nodes_current_lifetime_seconds", NODE_LABELS) > 0
    assert value("karpenter_cluster_state_node_count") == 1
    assert value("karpenter_cluster_utilization_percent", {"resource_type": "cpu"}) == pytest.approx(1600 / 39)


def test_pod_state_has_karpenters_labels() -> None:
    metrics, _ = setup()
    assert metrics.value("karpenter_pods_state", {
        "name": "a", "namespace": "shop", "owner": "/apis/apps/v1/namespaces/shop/replicasets/web-1", "node": "n1",
        "scheduled": "true", "nodepool": "general", "zone": "z1", "arch": "arm64", "capacity_type": "spot",
        "instance_type": "c-4x", "phase": "Running", "ready": "true", "managed": "true"}) == 1
    assert metrics.value("karpenter_pods_state", {
        "name": "waiting", "namespace": "shop", "owner": "/apis/apps/v1/namespaces/shop/replicasets/web-1",
        "node": "", "scheduled": "false", "nodepool": "", "zone": "", "arch": "", "capacity_type": "",
        "instance_type": "", "phase": "Pending", "ready": "false", "managed": "false"}) == 1
    assert len(metrics.samples("karpenter_pods_state")) == 5  # one series per pod, terminal ones too


def test_nodepool_usage_is_its_status_and_limits_its_spec() -> None:
    metrics, _ = setup()
    assert metrics.value("karpenter_nodepools_usage", {"nodepool": "general", "resource_type": "cpu"}) == 4
    assert metrics.value("karpenter_nodepools_usage", {"nodepool": "general", "resource_type": "nodes"}) == 1
    assert metrics.value("karpenter_nodepools_limit", {"nodepool": "general", "resource_type": "memory"}) == 2 ** 40


def test_per_object_work_happens_once_per_resource_version(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics, cache = setup()
    metrics.exposition()
    parsed: list[str] = []
    real = cluster_metrics.pod_facts
    monkeypatch.setattr(cluster_metrics, "pod_facts", lambda p: parsed.append(p["metadata"]["name"]) or real(p))
    metrics.exposition()
    assert parsed == []  # nothing changed: nothing re-read
    cache.upsert("Pod", pod("a", "n1", "2", version="2"))
    text = metrics.exposition().decode()
    assert parsed == ["a"]
    assert metrics.value("karpenter_nodes_total_pod_requests", {**NODE_LABELS, "resource_type": "cpu"}) == 3.1
    cache.upsert("Node", {**node("n1", zone="z2"), "metadata": {**node("n1", zone="z2")["metadata"],
                                                                "resourceVersion": "2"}})
    assert metrics.value("karpenter_pods_state", {
        "name": "b", "namespace": "shop", "owner": "/apis/apps/v1/namespaces/shop/replicasets/web-1", "node": "n1",
        "scheduled": "true", "nodepool": "general", "zone": "z2", "arch": "arm64", "capacity_type": "spot",
        "instance_type": "c-4x", "phase": "Running", "ready": "true", "managed": "true"}) == 1  # the node moved
    assert "karpenter_pods_state" in text


def _as_prometheus_client(metrics: Metrics) -> CollectorRegistry:
    """The same cluster-state samples, as prometheus_client would write them itself."""
    assert metrics.state is not None
    registry = CollectorRegistry()
    families = []
    for family in cluster_metrics.FAMILIES:
        metric = Metric(family.name, family.documentation, "gauge")
        metric.samples = [Sample(family.name, labels, value) for labels, value in metrics.samples(family.name)]
        families.append(metric)

    class Collector:
        def collect(self) -> list[Metric]:
            return families

    registry.register(Collector())  # type: ignore[arg-type]
    return registry


def test_kept_lines_are_byte_for_byte_what_prometheus_client_writes() -> None:
    metrics, cache = setup()
    metrics = Metrics(cache, clock=lambda: 1_764_547_200.5)  # a fixed clock: node lifetimes do not move
    assert metrics.state is not None
    reference = _as_prometheus_client(metrics)
    assert metrics.state.render() == generate_latest(reference)
    assert metrics.state.render(openmetrics=True) + b"# EOF\n" == openmetrics_latest(reference)


def test_scrape_negotiates_openmetrics_gzip_and_names() -> None:
    metrics, _ = setup()
    text, headers = metrics.render()
    assert dict(headers)["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"# TYPE process_cpu_seconds_total counter" in text  # prometheus_client's process collector
    assert b"# TYPE python_gc_objects_collected_total counter" in text
    om, headers = metrics.render("application/openmetrics-text; version=1.0.0")
    assert dict(headers)["Content-Type"].startswith("application/openmetrics-text")
    assert om.endswith(b"# EOF\n") and om.count(b"# EOF") == 1 and b"karpenter_pods_state{" in om
    zipped, headers = metrics.render(accept_encoding="gzip, deflate")
    assert dict(headers)["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped).split(b"\n")[0].startswith(b"# HELP")
    only, _ = metrics.render(names=["karpenter_nodes_allocatable"])
    assert b"karpenter_nodes_allocatable{" in only and b"karpenter_pods_state" not in only


def test_pod_startup_and_bound_durations_are_observed_on_transition() -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    stamp = (now - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pending = pod("p", None, phase="Pending", ready=False)
    pending["metadata"]["creationTimestamp"] = stamp
    cache = cache_of(Node=[node("n1")], Pod=[pending])
    metrics = Metrics(cache)
    metrics.exposition()  # seen Pending and unbound
    started = pod("p", "n1", version="2")
    started["metadata"]["creationTimestamp"] = stamp
    for condition in started["status"]["conditions"]:  # bound and Ready now, 30 s after creation
        condition["lastTransitionTime"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    cache.upsert("Pod", started)
    metrics.exposition()
    assert metrics.value("karpenter_pods_startup_duration_seconds_count") == 1
    assert metrics.value("karpenter_pods_startup_duration_seconds", {"quantile": "0.5"}) == pytest.approx(30, abs=3)
    assert metrics.value("karpenter_pods_bound_duration_seconds_count") == 1
    assert metrics.value("karpenter_pods_bound_duration_seconds_sum") == pytest.approx(30, abs=3)
    cache.upsert("Pod", {**started, "metadata": {**started["metadata"], "resourceVersion": "3"}})
    metrics.exposition()
    assert metrics.value("karpenter_pods_startup_duration_seconds_count") == 1  # once per start


def test_windowed_summary_quantiles_as_go_reports_them() -> None:
    now = [0.0]
    summary = WindowedSummary("s", "doc", ["nodepool"], registry=CollectorRegistry(), max_age=600,
                              clock=lambda: now[0])
    for value in (5.0, 1.0, 3.0, 2.0, 4.0):
        summary.observe(value, "a")
    assert summary.quantiles("a") == {0.0: 1.0, 0.5: 3.0, 0.9: 5.0, 0.99: 5.0, 1.0: 5.0}
    now[0] = 601.0  # older than the window
    assert all(math.isnan(v) for v in summary.quantiles("a").values())
    samples = {(s.name, s.labels.get("quantile")): s.value for m in summary.collect() for s in m.samples}
    assert samples[("s_count", None)] == 5 and samples[("s_sum", None)] == 15  # cumulative, as Go's


def test_client_requests_are_counted_by_code_and_timed_by_verb_and_kind() -> None:
    class Response:
        """What the kubernetes client's REST layer answers (read, then deserialized by the generated method)."""

        def __init__(self, status: int, data: bytes) -> None:
            self.status, self.data, self.reason = status, data, "x"
            self.headers = {"content-type": "application/json"}
            self.response = self

        def read(self) -> bytes:
            return self.data

        def getheader(self, name: str, default: str | None = None) -> str | None:
            return "application/json" if name.lower() == "content-type" else default

        def getheaders(self) -> dict[str, str]:
            return {"content-type": "application/json"}

    api = client.ApiClient()
    sent: list[tuple[str, str]] = []

    def fake(method: str, url: str, *args: Any, **kwargs: Any) -> Response:
        sent.append((method, url))
        if method == "DELETE":
            return Response(404, b'{"kind": "Status", "code": 404}')
        return Response(201 if method == "POST" else 200, b'{"items": []}' if method == "GET" else b"{}")

    api.call_api = fake  # type: ignore[method-assign,assignment]
    metrics = Metrics()
    metrics.instrument(api)
    metrics.instrument(api)  # once only
    core = client.CoreV1Api(api)
    core.list_node()
    core.create_namespaced_pod_eviction("p", "shop", client.V1Eviction())
    with pytest.raises(client.ApiException):
        core.delete_namespaced_pod("p", "shop")
    assert metrics.value("client_go_request_total", {"code": "200", "method": "GET"}) == 1
    assert metrics.value("client_go_request_total", {"code": "201", "method": "POST"}) == 1
    assert metrics.value("client_go_request_total", {"code": "404", "method": "DELETE"}) == 1
    assert metrics.value("client_go_request_duration_seconds_count", {
        "verb": "LIST", "group": "", "version": "v1", "kind": "nodes", "subresource": ""}) == 1
    assert metrics.value("client_go_request_duration_seconds_count", {
        "verb": "CREATE", "group": "", "version": "v1", "kind": "pods", "subresource": "eviction"}) == 1
    assert len(sent) == 3


def test_request_labels_follow_operatorpkgs_path_parsing() -> None:
    assert _request_labels("PATCH", "https://k/apis/karpenter.sh/v1/nodeclaims/x/status") == {
        "verb": "PATCH", "group": "karpenter.sh", "version": "v1", "kind": "nodeclaims", "subresource": "status"}
    assert _request_labels("GET", "https://k/api/v1/namespaces/shop/pods?watch=true")["verb"] == "WATCH"
    assert _request_labels("GET", "https://k/api/v1/namespaces/shop/pods/a")["verb"] == "GET"
    assert _request_labels("PUT", "https://k/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l") == {
        "verb": "UPDATE", "group": "coordination.k8s.io", "version": "v1", "kind": "leases", "subresource": ""}


def test_eviction_requests_are_counted_by_response_code() -> None:
    class Core:
        def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any) -> None:
            if name == "guarded":
                raise client.ApiException(status=429, reason="Too Many Requests")

    cache = cache_of(Pod=[pod("free", "n1"), pod("guarded", "n1")])
    metrics = Metrics()
    drainer = Drainer(client.ApiClient(), cache, on_eviction=metrics.evicted)
    drainer._core = Core()  # type: ignore[assignment]
    status = drainer.drain("n1")
    assert status.evicted == ["shop/free"] and status.blocked == ["shop/guarded"]
    assert metrics.value("karpenter_pods_eviction_requests_total", {"code": "200"}) == 1
    assert metrics.value("karpenter_pods_eviction_requests_total", {"code": "429"}) == 1


def test_termination_counts_nodes_and_observes_durations() -> None:
    metrics = Metrics()
    claim = {"metadata": {"name": "c", "deletionTimestamp": "2026-12-01T00:00:00Z", "labels": {
        "karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": "z1"}}}
    metrics.node_drained(claim, 3, "Underutilized")
    metrics.claim_terminated(claim, node("n1"), drained=True)
    assert metrics.value("karpenter_pods_drained_total", {"reason": "Underutilized"}) == 3
    assert metrics.value("karpenter_nodes_drained_total", {"nodepool": "general"}) == 1
    assert metrics.value("karpenter_nodes_terminated_total", {"nodepool": "general", "zone": "z1"}) == 1
    assert metrics.value("karpenter_nodes_termination_duration_seconds_count", {"nodepool": "general"}) == 1
    assert (metrics.value("karpenter_nodes_termination_duration_seconds", {"nodepool": "general", "quantile": "1"})
            or 0) > 0
    assert metrics.value("karpenter_nodeclaims_termination_duration_seconds_count", {"nodepool": "general"}) == 1


def test_offerings_export_price_and_availability() -> None:
    from controller.offerings import UnavailableOfferings
    from providers.kwok import kwok_catalog

    catalog = kwok_catalog()
    unavailable = UnavailableOfferings()
    it = catalog[0]
    offering = it.offerings[0]
    unavailable.mark(it.name, offering.zone, offering.capacity_type)
    metrics = Metrics()
    metrics.watch_offerings(lambda: unavailable.apply(catalog))
    labels = {"instance_type": it.name, "capacity_type": offering.capacity_type, "zone": offering.zone}
    assert metrics.value("karpenter_cloudprovider_instance_type_offering_price_estimate", labels) == offering.price
    assert metrics.value("karpenter_cloudprovider_instance_type_offering_available", labels) == 0
    assert metrics.value("karpenter_cloudprovider_instance_type_cpu_cores", {"instance_type": it.name}) == (
        it.capacity["cpu"] / 1000)


def test_reconciles_start_their_error_counter_and_queue_at_zero() -> None:
    metrics = Metrics()
    metrics.reconciled("nodeclaim.lifecycle", 0.2, depth=3)
    assert metrics.value("controller_runtime_reconcile_errors_total", {"controller": "nodeclaim.lifecycle"}) == 0
    assert metrics.value("controller_runtime_reconcile_total", {"controller": "nodeclaim.lifecycle",
                                                                "result": "success"}) == 1
    assert metrics.value("workqueue_depth", {"name": "nodeclaim.lifecycle", "controller": "nodeclaim.lifecycle"}) == 3


def test_kept_state_equals_a_fresh_read_after_changes_and_deletions() -> None:
    """The incremental totals (pods added, changed, moved, finished, deleted) match a controller that reads the
    same cache for the first time."""
    import random

    rng = random.Random(7)
    nodes = [node(f"n{i}", zone=f"z{i % 2}") for i in range(4)]
    cache = cache_of(Node=nodes)
    clock = lambda: 1_764_547_200.0  # noqa: E731
    kept = Metrics(cache, clock=clock)
    for step in range(300):
        name = f"p{rng.randrange(40)}"
        if rng.random() < 0.15:
            cache.informers["Pod"]._store.pop(f"shop/{name}", None)  # what a DELETED watch event does
        else:
            phase = rng.choice(["Running", "Running", "Pending", "Succeeded"])
            cache.upsert("Pod", pod(name, rng.choice([None, "n0", "n1", "n2", "n3"]), rng.choice(["100m", "1"]),
                                    phase=phase, owner=rng.choice(["ReplicaSet", "DaemonSet"]),
                                    version=str(step + 2)))
        if step % 25 == 0:
            kept.exposition()
    fresh = Metrics(cache, clock=clock)
    assert kept.state is not None and fresh.state is not None
    # the same families with the same samples (kept lines stay where they were, a fresh read lists the cache's
    # order: the text format orders no series within a family)
    assert families(kept.state.render()) == families(fresh.state.render())


def families(text: bytes) -> list[tuple[bytes, list[bytes]]]:
    """Each family's HELP line with its samples, sorted (the text format orders no series within a family)."""
    families: list[tuple[bytes, list[bytes]]] = []
    for line in text.splitlines():
        if line.startswith(b"# HELP"):
            families.append((line, []))
        elif not line.startswith(b"#"):
            families[-1][1].append(line)
    return [(head, sorted(samples)) for head, samples in families]


def test_a_pod_created_while_watching_counts_its_startup_even_if_first_seen_running() -> None:
    """Every pod starts Pending: one created after the controller started was seen from its start, however
    quickly it ran; one that was already running before is not a startup Karpenter would observe."""
    started = 1_764_547_200.0  # 2025-12-01T00:00:00Z
    cache = cache_of(Node=[node("n1")])
    metrics = Metrics(cache, clock=lambda: started)
    late, early = pod("late", "n1"), pod("early", "n1")
    late["metadata"]["creationTimestamp"] = "2025-12-01T00:00:10Z"
    early["metadata"]["creationTimestamp"] = "2025-11-30T23:59:00Z"
    for condition in (*late["status"]["conditions"], *early["status"]["conditions"]):
        condition["lastTransitionTime"] = "2025-12-01T00:00:25Z"
    cache.upsert("Pod", late)
    cache.upsert("Pod", early)
    metrics.exposition()
    assert metrics.value("karpenter_pods_startup_duration_seconds_count") == 1
    assert metrics.value("karpenter_pods_bound_duration_seconds_count") == 1
