"""The cluster-state families kept from the cache's change logs are the families a first read gives: after any
run of watch events (pods added, changed, moved between nodes, changing phase or readiness, deleted and made
again under the same name; nodes added, relabelled, deleted; NodeClaims naming nodes; a re-list) an exposition
kept since the start holds exactly the samples of one computed from scratch on the same cache, and its
published gzip body is that text. And a refresh visits only the objects that changed."""

from __future__ import annotations

import gzip
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import cluster_metrics
from controller.cache import CHANGE_LOG_LIMIT, ClusterCache, Resource
from controller.metrics import Metrics
from tests.unit.test_metrics import families

KINDS = ("Pod", "Node", "NodeClaim", "NodePool")
NODES = [f"n{i}" for i in range(5)]
PODS = [f"p{i}" for i in range(12)]
CLOCK = 1_764_547_200.0


def empty_cache() -> ClusterCache:
    return ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in KINDS})


def node(name: str, zone: str, pool: str, version: int, cpu: str = "4") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": str(version),
                         "creationTimestamp": "2026-12-01T00:00:00Z",
                         "labels": {"karpenter.sh/nodepool": pool, "topology.kubernetes.io/zone": zone}},
            "status": {"capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": "3", "memory": "15Gi", "pods": "110"}}}


def pod(name: str, on: str | None, phase: str, ready: bool, cpu: str, daemon: bool, uid: str,
        version: int) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False",
                   "lastTransitionTime": "2026-12-01T00:00:30Z"},
                  {"type": "PodScheduled", "status": "True" if on else "False",
                   "lastTransitionTime": "2026-12-01T00:00:10Z"}]
    return {"metadata": {"name": name, "namespace": "shop", "uid": uid, "resourceVersion": str(version),
                         "creationTimestamp": "2026-12-01T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet" if daemon else "ReplicaSet",
                                              "name": "web-1"}]},
            "spec": {**({"nodeName": on} if on else {}),
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": phase, "conditions": conditions}}


def claim(name: str, on: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version), "labels": {"karpenter.sh/nodepool": "a"}},
            "status": {"nodeName": on, "capacity": {"cpu": "4", "memory": "16Gi"}}}


POOL = {"metadata": {"name": "a", "resourceVersion": "1"}, "spec": {"limits": {"cpu": "100"}}}

pod_event = st.tuples(st.just("pod"), st.sampled_from(PODS), st.sampled_from([None, *NODES, "elsewhere"]),
                      st.sampled_from(["Pending", "Running", "Running", "Succeeded", "Failed"]), st.booleans(),
                      st.sampled_from(["100m", "1"]), st.booleans(), st.integers(0, 1))
pod_delete = st.tuples(st.just("pod-delete"), st.sampled_from(PODS))
node_event = st.tuples(st.just("node"), st.sampled_from(NODES), st.sampled_from(["z1", "z2"]),
                       st.sampled_from(["a", "b"]), st.sampled_from(["4", "8"]))
node_delete = st.tuples(st.just("node-delete"), st.sampled_from(NODES))
claim_event = st.tuples(st.just("claim"), st.sampled_from(["c0", "c1"]), st.sampled_from(NODES))
claim_delete = st.tuples(st.just("claim-delete"), st.sampled_from(["c0", "c1"]))
relist = st.tuples(st.just("relist"))
scrape = st.tuples(st.just("scrape"))
events = st.lists(st.one_of(pod_event, pod_event, pod_event, pod_delete, node_event, node_delete, claim_event,
                            claim_delete, relist, scrape, scrape), min_size=10, max_size=60)


def apply(cache: ClusterCache, event: tuple[Any, ...], version: int) -> None:
    """One watch event as the informer applies it (a write or a removal in its store)."""
    kind, *args = event
    informers = cache.informers
    if kind == "pod":
        name, on, phase, ready, cpu, daemon, incarnation = args
        informers["Pod"]._apply("MODIFIED", pod(name, on, phase, ready, cpu, daemon, f"{name}-{incarnation}",
                                                version))
    elif kind == "pod-delete":
        informers["Pod"]._apply("DELETED", {"metadata": {"name": args[0], "namespace": "shop"}})
    elif kind == "node":
        informers["Node"]._apply("MODIFIED", node(*args[:3], version, cpu=args[3]))
    elif kind == "node-delete":
        informers["Node"]._apply("DELETED", {"metadata": {"name": args[0]}})
    elif kind == "claim":
        informers["NodeClaim"]._apply("MODIFIED", claim(*args, version))
    elif kind == "claim-delete":
        informers["NodeClaim"]._apply("DELETED", {"metadata": {"name": args[0]}})
    elif kind == "relist":  # the store replaced by a list of the same objects (a re-list after 410 Gone)
        for informer in informers.values():
            informer._replace({str(i): obj for i, obj in enumerate(informer.items())})
            cache._notify(informer.resource.kind)


@settings(max_examples=150, deadline=None)
@given(events)
def test_kept_families_equal_a_fresh_read_after_any_churn(run: list[tuple[Any, ...]]) -> None:
    cache = empty_cache()
    cache.upsert("NodePool", POOL)
    for i, name in enumerate(NODES[:3]):
        cache.upsert("Node", node(name, "z1", "a", 1 + i))
    kept = Metrics(cache, clock=lambda: CLOCK)
    assert kept.state is not None
    kept.state.exposition(wait=None)
    for version, event in enumerate(run, start=10):
        if event[0] == "scrape":
            kept.state.exposition(wait=None)
        else:
            apply(cache, event, version)
    published = kept.state.exposition(wait=None)
    fresh = Metrics(cache, clock=lambda: CLOCK)
    assert fresh.state is not None
    expected = fresh.state.render()
    assert families(published.text()) == families(expected)
    assert families(kept.state.render()) == families(expected)
    zipped, _ = kept.render(accept_encoding="gzip", fresh_within=60.0)
    assert gzip.decompress(zipped).startswith(published.text())


def test_a_refresh_reads_only_the_pods_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = empty_cache()
    for name in NODES:
        cache.upsert("Node", node(name, "z1", "a", 1))
    for i in range(500):
        cache.informers["Pod"]._apply("ADDED", pod(f"w{i}", NODES[i % 5], "Running", True, "100m", False,
                                                   f"w{i}", 1))
    metrics = Metrics(cache, clock=lambda: CLOCK)
    metrics.exposition()
    read: list[str] = []
    real = cluster_metrics.pod_facts
    monkeypatch.setattr(cluster_metrics, "pod_facts", lambda p: read.append(p["metadata"]["name"]) or real(p))
    monkeypatch.setattr(cache, "items", lambda kind: pytest.fail(f"every {kind} listed"))  # type: ignore[method-assign]
    cache.informers["Pod"]._apply("MODIFIED", pod("w7", "n3", "Running", False, "1", False, "w7", 2))
    cache.informers["Pod"]._apply("DELETED", {"metadata": {"name": "w8", "namespace": "shop"}})
    text = metrics.exposition().decode()
    assert read == ["w7"]
    assert 'name="w8"' not in text and text.count("karpenter_pods_state{") == 499
    assert 'name="w7",namespace="shop",node="n3"' in text and 'phase="Running",ready="false"' in text


def test_a_log_not_taken_gives_up_its_slots_and_the_next_refresh_reads_everything() -> None:
    cache = empty_cache()
    log = cache.changes("Pod")
    assert log.take() is None  # the first take: everything
    cache.upsert("Pod", pod("a", None, "Pending", False, "1", False, "a", 1))
    assert [(ns, name) for ns, name, _ in log.take() or []] == [("shop", "a")]
    assert log.take() == []
    for i in range(CHANGE_LOG_LIMIT + 1):
        cache.informers["Pod"]._store.put(pod(f"x{i}", None, "Pending", False, "1", False, f"x{i}", 1))
    assert log.take() is None and log.take() == []
