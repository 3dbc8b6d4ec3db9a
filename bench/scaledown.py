"""The ``bench-controller`` scale-down, offline: what each consolidation pass costs and where the passes end.

The same seeded Deployments as ``bench.controller_perf`` are provisioned by ``solve`` (the controller's decision
gap), every node made a Node, then every Deployment scaled to ``--keep`` the way a ReplicaSet picks the pods to
delete (LogarithmicScaleDown: a pod sharing its node with more replicas of its ReplicaSet goes first; the
creation times are equal). Then ``consolidate`` runs pass after pass with the controller's options, each plan
applied before the next (removed nodes go, replacements become Nodes), until a pass removes nothing.
``--placement`` says where each evicted pod's replacement lands: ``planned`` where the plan put it;
``scheduler`` where the kube-scheduler's default scores would put it (``scheduled``: LeastAllocated,
BalancedAllocation and the default hostname spreading of a ReplicaSet's pods, each as its plugin weighs it);
``steered`` the same, with the pods evicted one destination at a time and every other node tainted
PreferNoSchedule (TaintToleration, weight 3), as the controller's steered eviction does (``controller.steering``).

    PYTHONPATH=. .venv/bin/python -m bench.scaledown --catalog kwok --pods 1000 --keep 0.3 --seed 42

Prints a row per pass (wall and CPU seconds of ``consolidate``, nodes removed, replacements, $/h after, the
solver's status and stages) and the end state against the certified bound of the kept pods (all pending, no
nodes). CPU seconds count every thread of this process (CP-SAT's workers included). The starting cluster is
the scale-out solve's plan, so it varies with how far a time-limited solve gets on a loaded machine (KWOK:
4 to 49 nodes): compare runs by the start line they print.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.controller_perf import NAMESPACE, NODEPOOL, Catalog, catalog, pending_pods
from bench.fragmented import node_object
from bench.workloads import generic_deployment_objects
from model.disruption import DisruptionPlan
from model.instancetype import InstanceType
from model.quantity import quantity_int
from model.snapshot import Snapshot, parse_objects
from solver.disruption.consolidate import ConsolidateOptions
from solver.disruption.plan import consolidate
from solver.provision import SolveOptions, solve

#: the controller's defaults (``DisruptionOptions``, ``ProvisionerOptions.decision_gap``)
TIME_LIMIT = 15.0
DECISION_GAP = 0.02


@dataclass
class Cluster:
    """Nodes and pods as plain objects, the way the watch cache would list them."""

    nodes: dict[str, dict[str, Any]]
    pods: dict[str, dict[str, Any]]
    catalog: Catalog

    def snapshot(self) -> Snapshot:
        objects = [NODEPOOL, *self.nodes.values(), *self.pods.values()]
        return parse_objects(copy.deepcopy(objects), source="scaledown").with_catalog(self.catalog.instance_types)

    def cost(self) -> float:
        return sum(_price(self.catalog, n) for n in self.nodes.values())


def _price(cat: Catalog, node: dict[str, Any]) -> float:
    labels = node["metadata"]["labels"]
    return cat.price(labels["node.kubernetes.io/instance-type"], labels["topology.kubernetes.io/zone"],
                     labels["karpenter.sh/capacity-type"])


def _types(cat: Catalog) -> dict[str, InstanceType]:
    return {t.name: t for t in cat.instance_types}


def provisioned(cat: Catalog, deployments: list[dict[str, Any]], time_limit: float) -> Cluster:
    """Every replica pending, solved at the decision gap, and bound where the plan put it."""
    pods = {p["metadata"]["name"]: p for p in pending_pods(deployments)}
    snap = parse_objects([NODEPOOL, *pods.values()], source="scale-out").with_catalog(cat.instance_types)
    plan = solve(snap, SolveOptions(time_limit=time_limit, gap=DECISION_GAP)).plan
    types, nodes = _types(cat), {}
    for claim in plan.node_claims:
        nodes[claim.name] = node_object(claim.name, types[claim.instance_type], claim.zone, claim.capacity_type)
        for key in claim.pods:
            _bind(pods[key.split("/", 1)[1]], claim.name)
    return Cluster(nodes, pods, cat)


def _bind(pod: dict[str, Any], node: str) -> None:
    pod["spec"]["nodeName"] = node
    pod["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    pod["status"] = {"phase": "Running", "startTime": "2026-11-01T00:00:00Z"}


def scale_down(cluster: Cluster, deployments: list[dict[str, Any]], keep: float, seed: int) -> None:
    """Each Deployment to ``keep`` of its replicas, deleting from the node holding most of its replicas first
    (ties broken by ``seed``), as the ReplicaSet controller ranks pods."""
    rng = random.Random(seed)
    for d in deployments:
        app = d["metadata"]["name"]
        members = [p for p in cluster.pods.values() if p["metadata"]["labels"]["app"] == app]
        kept = max(1, round(len(members) * keep))
        for _ in range(len(members) - kept):
            colocated = Counter(p["spec"]["nodeName"] for p in members)
            most = max(colocated.values())
            victim = rng.choice([p for p in members if colocated[p["spec"]["nodeName"]] == most])
            members.remove(victim)
            del cluster.pods[victim["metadata"]["name"]]


def _requests(pod: dict[str, Any]) -> tuple[int, int]:
    """(cpu millicores, memory bytes) the pod's containers request."""
    cpu = memory = 0
    for c in pod["spec"]["containers"]:
        r = (c.get("resources") or {}).get("requests") or {}
        cpu += quantity_int("cpu", r.get("cpu", "0"))
        memory += quantity_int("memory", r.get("memory", "0"))
    return cpu, memory


def scheduled(cluster: Cluster, pod: dict[str, Any], removed: set[str], preferred: set[str]) -> str | None:
    """The node the kube-scheduler's default scores pick for ``pod`` among those it fits on (not ``removed``):
    NodeResourcesFit LeastAllocated and NodeResourcesBalancedAllocation (weight 1 each, 0-100), the default
    hostname spreading of its ReplicaSet's pods (PodTopologySpread, weight 2) and, when ``preferred`` is given,
    TaintToleration (weight 3) against a PreferNoSchedule taint on every other node. None: it fits nowhere."""
    used: dict[str, list[int]] = {}
    app = pod["metadata"]["labels"].get("app")
    for other in cluster.pods.values():
        node = other["spec"].get("nodeName")
        if node:
            cpu, memory = _requests(other)
            u = used.setdefault(node, [0, 0, 0, 0])
            u[0], u[1], u[2] = u[0] + cpu, u[1] + memory, u[2] + 1
            u[3] += other["metadata"]["labels"].get("app") == app
    cpu, memory = _requests(pod)
    fits = []
    for name, node in cluster.nodes.items():
        alloc = node["status"]["allocatable"]
        ac, am, ap = (quantity_int("cpu", alloc["cpu"]), quantity_int("memory", alloc["memory"]),
                      int(alloc.get("pods", "110")))
        u = used.get(name, [0, 0, 0, 0])
        if name in removed or u[0] + cpu > ac or u[1] + memory > am or u[2] + 1 > ap:
            continue
        free_cpu, free_memory = (ac - u[0] - cpu) / ac, (am - u[1] - memory) / am
        least = (free_cpu + free_memory) / 2 * 100
        balanced = (1 - abs(free_cpu - free_memory) / 2) * 100
        fits.append((name, least + balanced + (300 if not preferred or name in preferred else 0), u[3]))
    if not fits:
        return None
    most, fewest = max(f[2] for f in fits), min(f[2] for f in fits)

    def score(fit: tuple[str, float, int]) -> tuple[float, str]:
        spread = 100 * (most - fit[2]) / (most - fewest) if most > fewest else 100
        return fit[1] + 2 * spread, fit[0]
    return max(fits, key=score)[0]


def apply(cluster: Cluster, plan: DisruptionPlan, placement: str = "planned") -> int:
    """A disruption plan carried out: replacements registered, pods moved (``placement``, see the module),
    removed nodes gone. Returns how many pods landed elsewhere than planned."""
    types = _types(cluster.catalog)
    for claim in plan.node_claims:
        cluster.nodes[claim.name] = node_object(claim.name, types[claim.instance_type], claim.zone,
                                                claim.capacity_type)
    removed = {r.node for r in plan.remove}
    moves = sorted(plan.moves, key=lambda m: m.to) if placement == "steered" else list(plan.moves)
    for move in moves:
        cluster.pods[move.pod.split("/", 1)[1]]["spec"]["nodeName"] = None
    elsewhere = 0
    for move in moves:
        pod = cluster.pods[move.pod.split("/", 1)[1]]
        to = move.to
        if placement != "planned":
            to = scheduled(cluster, pod, removed, {move.to} if placement == "steered" else set()) or move.to
        elsewhere += to != move.to
        _bind(pod, to)
    for removal in plan.remove:
        del cluster.nodes[removal.node]
    stranded = [k for k, p in cluster.pods.items() if p["spec"]["nodeName"] not in cluster.nodes]
    if stranded:
        raise SystemExit(f"plan left {len(stranded)} pod(s) on removed nodes, e.g. {stranded[0]}")
    return elsewhere


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalog", default="kwok", help="kwok | aws-like")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--keep", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="per consolidation pass")
    parser.add_argument("--gap", type=float, default=DECISION_GAP, help="ConsolidateOptions.gap")
    parser.add_argument("--max-passes", type=int, default=40)
    parser.add_argument("--placement", choices=("planned", "scheduler", "steered"), default="planned",
                        help="where evicted pods land (see the module)")
    parser.add_argument("--solve-target-each-pass", action="store_true",
                        help="do not hand a pass the target the last one stepped toward (the controller does)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cat = catalog(args.catalog, Path(tmp))
        deployments = generic_deployment_objects(args.pods, args.seed, NAMESPACE)
        cluster = provisioned(cat, deployments, 10.0)
        start = cluster.cost()
        scale_down(cluster, deployments, args.keep, args.seed)
        kept = parse_objects([NODEPOOL, *(_pending(p) for p in cluster.pods.values())],
                             source="bound").with_catalog(cat.instance_types)
        bound = solve(kept, SolveOptions(time_limit=30.0)).plan.cost.lower_bound
        print(f"{args.catalog}: {args.pods} pods on {len(cluster.nodes)} nodes ({start:.3f} $/h), scaled to "
              f"{len(cluster.pods)} pods; bound {bound:.3f} $/h")
        print("| pass | wall s | cpu s | removed | replacements | evictions | landed elsewhere | $/h after | status "
              "| stages |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        now = datetime(2026, 11, 2, tzinfo=UTC)
        wall_total = cpu_total = 0.0
        target = None
        for n in range(1, args.max_passes + 1):
            snap = cluster.snapshot()
            t0, c0 = time.monotonic(), time.process_time()
            result = consolidate(snap, ConsolidateOptions(time_limit=args.time_limit, now=now, gap=args.gap,
                                                          target=target))
            if not args.solve_target_each_pass:
                target = result.outcome.target if result.outcome is not None else None
            wall, cpu = time.monotonic() - t0, time.process_time() - c0
            wall_total, cpu_total = wall_total + wall, cpu_total + cpu
            plan = result.plan
            stages = ", ".join(f"{k} {v:.2f}" for k, v in (plan.solver.stages or {}).items())
            elsewhere = apply(cluster, plan, args.placement) if plan.remove else 0
            print(f"| {n} | {wall:.2f} | {cpu:.2f} | {len(plan.remove)} | {len(plan.node_claims)} | "
                  f"{len(plan.moves)} | {elsewhere} | {cluster.cost():.3f} | {plan.solver.status} | {stages} |")
            if not plan.remove:
                break
            now += timedelta(minutes=1)
        end = cluster.cost()
        print(f"end {end:.3f} $/h = {end / bound:.3f} x bound; {n} passes, {wall_total:.1f} s wall, "
              f"{cpu_total:.1f} s CPU")
    return 0


def _pending(pod: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["spec"].pop("nodeName", None)
    out.pop("status", None)
    return out


if __name__ == "__main__":
    sys.exit(main())
