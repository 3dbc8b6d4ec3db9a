"""The scrape served from published cluster-state families: a gzip member spliced from a piece compressed once
and the registry compressed per scrape is one valid member (RFC 1952: CRC-32 and length of the whole text, read
by Python's zlib and by GNU gzip), the body is the families then prometheus_client's output, a refresh slower
than the scrape's wait is answered with the previous publication, and a node's status update re-renders none of
its pods' ``karpenter_pods_state`` lines (they depend on its labels only), and a publication compresses again
only the parts of the pod lines that hold a changed pod."""

from __future__ import annotations

import gzip
import random
import shutil
import subprocess
import threading
import time
import zlib
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from controller import cluster_metrics, metrics_gzip
from controller.cache import ClusterCache, Resource
from controller.metrics import Metrics

KINDS = ("Pod", "Node", "NodeClaim", "NodePool")


def cache_of(pods: int, nodes: int = 3) -> ClusterCache:
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in KINDS})
    for i in range(nodes):
        cache.upsert("Node", node(f"n{i}", "z1"))
    for i in range(pods):
        cache.upsert("Pod", pod(f"p{i}", f"n{i % nodes}"))
    return cache


def node(name: str, zone: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "resourceVersion": version,
                         "creationTimestamp": "2026-12-01T00:00:00Z",
                         "labels": {"karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": zone}},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def pod(name: str, on: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "uid": name, "resourceVersion": version,
                         "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kept_piece_and_a_fresh_tail_make_one_valid_gzip_member(seed: int) -> None:
    rng = random.Random(seed)
    head = [rng.randbytes(rng.randrange(0, 70_000)) + b"karpenter_pods_state{a=\"b\"} 1.0\n" * rng.randrange(2_000)
            for _ in range(rng.randrange(1, 5))]
    tail = b"# TYPE process_cpu_seconds_total counter\n" * rng.randrange(0, 500)
    body = metrics_gzip.Body.of([metrics_gzip.deflate(part) for part in head])
    zipped = metrics_gzip.member(body, tail)
    expected = b"".join(head) + tail
    assert gzip.decompress(zipped) == expected  # checks the trailer's CRC-32 and length
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    assert inflater.decompress(zipped) == expected and inflater.eof and inflater.unused_data == b""
    if shutil.which("gzip"):  # another inflater than zlib's
        assert subprocess.run(["gzip", "-dc"], input=zipped, capture_output=True, check=True).stdout == expected


def test_a_scrape_is_the_state_families_then_the_registry() -> None:
    metrics = Metrics(cache_of(20), clock=lambda: 1_764_547_200.0)
    assert metrics.state is not None
    state = metrics.state.render()
    for accept, registry in ((None, generate_latest), ("application/openmetrics-text; version=1.0.0",
                                                       openmetrics_latest)):
        zipped, headers = metrics.render(accept, "gzip")
        plain, _ = metrics.render(accept)
        assert dict(headers)["Content-Encoding"] == "gzip"
        unzipped = gzip.decompress(zipped)
        assert unzipped.startswith(state) and plain.startswith(state)  # the families first, as published
        body = plain.decode()
        assert body.count("karpenter_pods_state{") == 20 and "process_cpu_seconds_total" in body
        if accept:
            assert body.endswith("# EOF\n") and body.count("# EOF") == 1
        # what follows the families is prometheus_client's encoder output for the registry (sample values of
        # the process collectors move between two calls, so the family names are compared)
        names = {line.split()[2] for line in registry(metrics.registry).decode().splitlines()
                 if line.startswith("# TYPE")}
        assert names <= {line.split()[2] for line in body[len(state):].splitlines() if line.startswith("# TYPE")}


def test_a_refresh_slower_than_the_wait_is_answered_with_the_previous_publication() -> None:
    cache = cache_of(5)
    metrics = Metrics(cache)
    state = metrics.state
    assert state is not None
    first, _ = metrics.render(fresh_within=0.0)  # nothing published yet: the first scrape waits for it
    assert first.count(b"karpenter_pods_state{") == 5
    gate = threading.Event()
    refresh = state._refresh

    def slow() -> None:
        gate.wait(10)
        refresh()

    state._refresh = slow  # type: ignore[method-assign]
    cache.upsert("Pod", pod("late", "n0"))
    started = time.monotonic()
    stale, _ = metrics.render(fresh_within=0.0, wait=0.05)
    assert time.monotonic() - started < 5.0  # not the 10 s the refresh would take
    assert stale.count(b"karpenter_pods_state{") == 5
    gate.set()
    assert metrics.render(fresh_within=0.0, wait=None)[0].count(b"karpenter_pods_state{") == 6
    # within fresh_within the publication is served as it is, without a refresh
    cache.upsert("Pod", pod("later", "n0"))
    assert metrics.render(fresh_within=60.0)[0].count(b"karpenter_pods_state{") == 6
    assert metrics.exposition().count(b"karpenter_pods_state{") == 7  # tests and logs: refreshed now


def test_a_node_status_update_renders_no_pod_line_again(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cache_of(30)
    metrics = Metrics(cache)
    metrics.exposition()
    rendered: list[str] = []
    real = cluster_metrics.series

    def counted(name: str, labels: Any) -> str:
        if name == "karpenter_pods_state":
            rendered.append(labels["name"])
        return real(name, labels)

    monkeypatch.setattr(cluster_metrics, "series", counted)
    cache.upsert("Node", node("n0", "z1", version="2"))  # a heartbeat: a new resourceVersion, the same labels
    metrics.exposition()
    assert rendered == []
    cache.upsert("Node", node("n0", "z2", version="3"))  # relabelled: its pods' lines name the new zone
    text = metrics.exposition().decode()
    assert sorted(rendered) == sorted(f"p{i}" for i in range(0, 30, 3))
    moved = [line for line in text.splitlines() if line.startswith("karpenter_pods_state{") and 'zone="z2"' in line]
    assert sorted(line.split('name="')[1].split('"')[0] for line in moved) == sorted(rendered)


def test_a_publication_compresses_again_only_the_pod_parts_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    part = cluster_metrics.POD_PART
    cache = cache_of(3 * part)
    metrics = Metrics(cache)
    assert metrics.state is not None
    first = metrics.state.exposition(wait=None)
    compressed: list[bytes] = []
    real = metrics_gzip.deflate

    def counted(text: bytes, level: int = metrics_gzip.LEVEL) -> metrics_gzip.Piece:
        if b"karpenter_pods_state{" in text:
            compressed.append(text)
        return real(text, level)

    monkeypatch.setattr(metrics_gzip, "deflate", counted)
    cache.upsert("Pod", {**pod(f"p{part + 5}", "n0", version="2"),
                         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}})
    second = metrics.state.exposition(wait=None)
    assert second is not first
    assert len(compressed) == 1 and f'name="p{part + 5}"'.encode() in compressed[0]  # the second part only
    # the body served is still every line once, in one valid member
    plain, _ = metrics.render(fresh_within=60.0)
    zipped, _ = metrics.render(accept_encoding="gzip", fresh_within=60.0)
    assert gzip.decompress(zipped).startswith(second.text()) and plain.startswith(second.text())
    assert second.text().count(b"karpenter_pods_state{") == 3 * part
