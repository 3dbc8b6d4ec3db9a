"""Fragmented clusters for the consolidation benchmark: nodes a provisioner filled, then Deployments scaled
down so every node is left part-empty (Karpenter's perf scenario: 1,000 pods scaled down to 700)."""

from __future__ import annotations

import random
from typing import Any

from bench.workloads import CPU_CHOICES, MEMORY_CHOICES, linux_pool, pod
from model import labels as wk
from model.instancetype import InstanceType
from model.quantity import quantity_int
from providers.kwok import kwok_catalog
from solver.greedy import greedy_placement
from solver.problem import compile_problem

CREATED = "2026-11-01T00:00:00Z"
SIZES = ("c-4x", "c-8x", "c-16x", "s-4x", "s-8x", "m-4x", "m-8x")
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")


def node_object(name: str, it: InstanceType, zone: str, capacity_type: str, pool: str = "default"
                ) -> dict[str, Any]:
    """A Node as a provisioner registered it: offering labels, initialized, Ready."""
    labels = {**it.labels, wk.ZONE: zone, wk.CAPACITY_TYPE: capacity_type, wk.NODEPOOL: pool,
              wk.INITIALIZED: "true", wk.REGISTERED: "true", wk.HOSTNAME: name}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "creationTimestamp": CREATED},
            "spec": {"providerID": f"kwok://{name}"},
            "status": {"capacity": it.capacity.to_quantities(), "allocatable": it.allocatable.to_quantities(),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pool(budget: str) -> dict[str, Any]:
    pool = linux_pool("default")
    pool["spec"]["disruption"]["budgets"] = [{"nodes": budget}]
    return pool


def _running(p: dict[str, Any]) -> dict[str, Any]:
    p["metadata"]["creationTimestamp"] = CREATED
    p["status"]["startTime"] = CREATED
    return p


def fragmented_cluster(nodes: int, seed: int, *, keep: float = 0.5, spot_share: float = 0.2,
                       budget: str = "100%") -> list[dict[str, Any]]:
    """``nodes`` nodes of mixed sizes filled to ~90 % cpu by Deployments, each then scaled to ``keep``."""
    rng = random.Random(seed)
    catalog = {it.name: it for it in kwok_catalog()}
    objects: list[dict[str, Any]] = [_pool(budget)]
    apps = [(f"app-{d:04d}", rng.choice(CPU_CHOICES), rng.choice(MEMORY_CHOICES)) for d in range(max(nodes // 4, 8))]
    placed: list[tuple[str, str, str, str, str]] = []  # (pod name, app, cpu, memory, node)
    serial = 0
    for i in range(nodes):
        it = catalog[f"{rng.choice(SIZES)}-amd64-linux"]
        name = f"node-{i:05d}"
        objects.append(node_object(name, it, rng.choice(ZONES), "spot" if rng.random() < spot_share else "on-demand"))
        cpu_left = int(it.allocatable["cpu"] * 0.9)
        mem_left = int(it.allocatable["memory"] * 0.9)
        for _ in range(200):
            app, cpu, memory = rng.choice(apps)
            c, m = quantity_int("cpu", cpu), quantity_int("memory", memory)
            if c <= cpu_left and m <= mem_left:
                placed.append((f"{app}-{serial:06d}", app, cpu, memory, name))
                serial += 1
                cpu_left, mem_left = cpu_left - c, mem_left - m
    by_app: dict[str, list[tuple[str, str, str, str, str]]] = {}
    for item in placed:
        by_app.setdefault(item[1], []).append(item)
    for members in by_app.values():
        kept = rng.sample(members, max(1, round(len(members) * keep)))
        for pod_name, app, cpu, memory, node in sorted(kept):
            objects.append(_running(pod(pod_name, cpu=cpu, memory=memory, labels={"app": app},
                                        owner=f"{app}-rs", node_name=node)))
    return objects


def scaled_down(total_pods: int, seed: int, *, keep: float = 0.7, budget: str = "100%") -> list[dict[str, Any]]:
    """Karpenter's perf scenario: ``total_pods`` generic pods provisioned by the greedy packer (Karpenter's),
    then every Deployment scaled down to ``keep`` of its replicas."""
    from bench.workloads import generic_deployments
    from model.snapshot import parse_objects

    rng = random.Random(seed)
    pending = generic_deployments(total_pods, seed)
    pool = _pool(budget)
    # nodes of at most 8 vCPU, so 1,000 pods make a cluster worth consolidating (not three huge nodes)
    pool["spec"]["template"]["spec"]["requirements"].append(
        {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["9"]})
    snap = parse_objects([pool, *pending], source="scaled-down").with_catalog(kwok_catalog())
    problem = compile_problem(snap)
    placement = greedy_placement(problem)
    objects: list[dict[str, Any]] = [pool]
    by_name = {p["metadata"]["name"]: p for p in pending}
    by_app: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for i, new in enumerate(placement.new_nodes):
        tmpl = problem.templates[new.template]
        name = f"node-{i:05d}"
        objects.append(node_object(name, tmpl.instance_type, tmpl.offering.zone, tmpl.offering.capacity_type))
        for p in new.pods:
            raw = by_name[p.name]
            by_app.setdefault(raw["metadata"]["labels"]["app"], []).append((raw, name))
    for members in by_app.values():
        for raw, node in rng.sample(members, max(1, round(len(members) * keep))):
            raw["spec"]["nodeName"] = node
            raw["status"] = {"phase": "Running"}
            objects.append(_running(raw))
    return objects


def split_cluster() -> list[dict[str, Any]]:
    """One on-demand c-48x node running a 31-cpu pod and a 1.5-cpu pod: any single node that holds both needs
    48 cpu again (no cheaper replacement, no room elsewhere), while a c-32x plus a c-2x cost 30 % less — the
    only saving is a 1→2 split, which Karpenter never makes."""
    catalog = {it.name: it for it in kwok_catalog()}
    pool = _pool("100%")
    pool["spec"]["template"]["spec"]["requirements"].append(
        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]})
    objects: list[dict[str, Any]] = [pool,
                                     node_object("big-0", catalog["c-48x-amd64-linux"], "test-zone-a", "on-demand")]
    for name, cpu in (("batch-0", "31"), ("sidecar-0", "1500m")):
        objects.append(_running(pod(name, cpu=cpu, memory="1Gi", labels={"app": name[:-2]}, owner=f"{name}-rs",
                                    node_name="big-0")))
    return objects
