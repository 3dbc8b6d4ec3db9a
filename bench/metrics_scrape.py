"""``/metrics`` scrape time on a synthetic cluster: 50,000 pods on 5,000 nodes (issue #13: ≤ 0.5 s).

The cache is filled through its own ingest API (``ClusterCache.upsert``, what the controller's writes use), so
objects are decoded and kept exactly as the watch would keep them. Measured: the first scrape (every object read
once), a scrape with nothing changed, and one after ``--churn`` of the pods changed (a new resourceVersion each:
phase, node), each as Prometheus asks for it (text format, gzip accepted) and uncompressed.

    .venv/bin/python -m bench.metrics_scrape [--pods 50000] [--nodes 5000] [--churn 0.01] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from controller.cache import ClusterCache, Resource
from controller.metrics import Metrics
from providers.kwok import kwok_catalog

KINDS = ("Pod", "Node", "NodeClaim", "NodePool", "DaemonSet")
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")


def node(i: int, instance_type: str) -> dict[str, Any]:
    return {"metadata": {"name": f"node-{i}", "uid": f"node-uid-{i}", "resourceVersion": "1",
                         "creationTimestamp": "2026-12-01T00:00:00Z", "labels": {
                             "karpenter.sh/nodepool": f"pool-{i % 3}", "topology.kubernetes.io/zone": ZONES[i % 4],
                             "node.kubernetes.io/instance-type": instance_type, "kubernetes.io/arch": "amd64",
                             "kubernetes.io/os": "linux", "karpenter.sh/capacity-type": ("spot", "on-demand")[i % 2],
                             "kubernetes.io/hostname": f"node-{i}"}},
            "spec": {"providerID": f"kwok://node-{i}"},
            "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"},
                       "allocatable": {"cpu": "15890m", "memory": "62Gi", "pods": "110",
                                       "ephemeral-storage": "95Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(i: int, nodes: int, version: int = 1, phase: str = "Running") -> dict[str, Any]:
    daemon = i % 10 == 0
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet" if daemon else "ReplicaSet",
             "name": "agent" if daemon else f"web-{i % 500}-5d8f", "controller": True}
    return {"metadata": {"name": f"pod-{i}", "namespace": f"ns-{i % 50}", "uid": f"pod-uid-{i}",
                         "resourceVersion": str(version), "creationTimestamp": "2026-12-01T00:00:00Z",
                         "labels": {"app": f"web-{i % 500}"}, "ownerReferences": [owner]},
            "spec": {"nodeName": f"node-{(i + version) % nodes}",
                     "containers": [{"name": "app", "image": "registry.example.com/app:1",
                                     "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"},
                                                      {"type": "PodScheduled", "status": "True"}]}}


def build(pods: int, nodes: int) -> ClusterCache:
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in KINDS})
    types = [it.name for it in kwok_catalog()]
    for i in range(nodes):
        cache.upsert("Node", node(i, types[i % len(types)]))
        cache.upsert("NodeClaim", {"metadata": {"name": f"node-{i}", "resourceVersion": "1", "labels": {
            "karpenter.sh/nodepool": f"pool-{i % 3}"}}, "status": {"nodeName": f"node-{i}",
                                                                  "capacity": {"cpu": "16", "memory": "64Gi"}}})
    for p in range(3):
        cache.upsert("NodePool", {"metadata": {"name": f"pool-{p}", "resourceVersion": "1"},
                                  "spec": {"limits": {"cpu": "100000", "memory": "400000Gi"}}})
    for i in range(pods):
        cache.upsert("Pod", pod(i, nodes))
    return cache


def timed(metrics: Metrics, encoding: str | None) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, body bytes) of one scrape: on a shared machine the CPU time
    is what the scrape costs, the wall time what Prometheus waits."""
    started, cpu = time.perf_counter(), time.process_time()
    body, _ = metrics.render(accept_encoding=encoding)
    return time.perf_counter() - started, time.process_time() - cpu, len(body)


def median(runs: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[-1][2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--churn", type=float, default=0.01, help="share of pods changed before the churn scrape")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    started = time.perf_counter()
    cache = build(args.pods, args.nodes)
    print(f"cache: {args.pods:,} pods, {args.nodes:,} nodes, built in {time.perf_counter() - started:.1f}s")
    metrics = Metrics(cache)
    rows = [("first scrape (every object read)", *timed(metrics, "gzip"))]
    rows.append(("nothing changed, gzip", *median([timed(metrics, "gzip") for _ in range(args.repeat)])))
    rows.append(("nothing changed, uncompressed", *median([timed(metrics, None) for _ in range(args.repeat)])))
    churned = []
    changed = max(1, int(args.pods * args.churn))
    for round_ in range(args.repeat):
        for i in range(round_ * changed, (round_ + 1) * changed):
            cache.upsert("Pod", pod(i % args.pods, args.nodes, version=2 + round_))
        churned.append(timed(metrics, "gzip"))
    rows.append((f"{changed:,} pods changed, gzip", *median(churned)))
    print(f"{'scrape (median of ' + str(args.repeat) + ')':40} {'wall s':>8} {'CPU s':>8} {'bytes':>12}")
    for what, wall, cpu, size in rows:
        print(f"{what:40} {wall:8.3f} {cpu:8.3f} {size:12,}")
    series = sum(1 for line in metrics.exposition().splitlines() if line and not line.startswith(b"#"))
    print(f"series per scrape: {series:,}")


if __name__ == "__main__":
    main()
