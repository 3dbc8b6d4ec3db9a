"""Karpenter's scheduling-benchmark workload and catalog, rebuilt from its definition.

Catalog (``fake.InstanceTypes(400)``): type i has i+1 vCPU, 2(i+1) GiB, 10(i+1) pods, kubeReserved 100m /
10Mi, spot offerings in test-zone-1/2 and on-demand in test-zone-1/2/3, all at 0.1 × vCPU + 0.1 × memory
bytes / 1e9 per hour.

Pods (``makeDiversePods``, plus the hostname self-affinity share issue 3 asks for): equal shares of generic
pods, zone topology spread (maxSkew 1, DoNotSchedule), hostname topology spread, zone self-affinity,
hostname self-affinity and hostname self-anti-affinity (every such pod labelled app=nginx, repelling
app=nginx). Each pod draws cpu from {100, 250, 500, 1000, 1500}m and memory from {100, 256, 512, 1024, 2048,
4096}Mi; labels draw from seven values. Go's math/rand stream is not reproduced: Python's ``random`` with
the same seed (42) draws the same distributions, not the same pods.
"""

from __future__ import annotations

import random
from typing import Any

from bench.workloads import nodepool, pod
from model import labels as wk
from model.instancetype import InstanceType, Offering, Overhead
from model.resources import Resources

GIB = 2**30
LABEL_VALUES = ("a", "b", "c", "d", "e", "f", "g")
CPUS = ("100m", "250m", "500m", "1000m", "1500m")
MEMORIES = ("100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi")
SHARES = ("generic", "zone-spread", "hostname-spread", "zone-affinity", "hostname-affinity", "hostname-anti")


def karpenter_benchmark_catalog(count: int = 400) -> tuple[InstanceType, ...]:
    out = []
    for i in range(count):
        cpu, memory = i + 1, 2 * (i + 1) * GIB
        price = 0.1 * cpu + 0.1 * memory / 1e9
        offerings = tuple(Offering(zone=f"test-zone-{z}", capacity_type=ct, price=price)
                          for ct, zones in (("spot", (1, 2)), ("on-demand", (1, 2, 3))) for z in zones)
        large = cpu > 4 and memory > 8 * GIB
        labels = {wk.INSTANCE_TYPE: f"fake-it-{i}", wk.ARCH: "amd64", wk.OS: "linux", "integer": str(cpu),
                  "size": "large" if large else "small"}
        if large:
            labels["special"] = "optional"
        out.append(InstanceType(name=f"fake-it-{i}", labels=labels,
                                capacity=Resources({"cpu": cpu * 1000, "memory": memory, "pods": 10 * (i + 1)}),
                                overhead=Overhead(kube_reserved=Resources({"cpu": 100, "memory": 10 * 2**20})),
                                offerings=offerings))
    return tuple(out)


def _selector(key: str, value: str) -> dict[str, Any]:
    return {"matchLabels": {key: value}}


def diverse_pods(count: int, seed: int = 42) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    share = count // len(SHARES)
    out: list[dict[str, Any]] = []
    kinds = [kind for kind in SHARES for _ in range(share)] + ["generic"] * (count - share * len(SHARES))
    for i, kind in enumerate(kinds):
        extra: dict[str, Any] = {}
        if kind == "generic":
            labels = {"my-label": rng.choice(LABEL_VALUES)}
        elif kind in ("zone-spread", "hostname-spread"):
            labels = {"my-label": rng.choice(LABEL_VALUES)}
            key = wk.ZONE if kind == "zone-spread" else wk.HOSTNAME
            extra["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": key,
                                                   "whenUnsatisfiable": "DoNotSchedule",
                                                   "labelSelector": _selector("my-label", rng.choice(LABEL_VALUES))}]
        elif kind in ("zone-affinity", "hostname-affinity"):
            labels = {"my-affininity": rng.choice(LABEL_VALUES)}
            key = wk.ZONE if kind == "zone-affinity" else wk.HOSTNAME
            extra["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": key}]}}
        else:
            labels = {"app": "nginx"}
            extra["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": _selector("app", "nginx"), "topologyKey": wk.HOSTNAME}]}}
        labels["testing/cluster"] = "unspecified"
        out.append(pod(f"{kind}-{i:05d}", cpu=rng.choice(CPUS), memory=rng.choice(MEMORIES), labels=labels,
                       spec_extra=extra))
    return out


def diverse_objects(count: int, seed: int = 42) -> list[dict[str, Any]]:
    return [nodepool("default", limits={"cpu": "10000000", "memory": "10000000Gi"}), *diverse_pods(count, seed)]
