"""Karpenter's scheduling-benchmark workload and catalog, rebuilt from its definition
(``pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go`` and ``pkg/cloudprovider/fake``
in sigs.k8s.io/karpenter v1.15.0, the release ``bench/karpenter`` pins).

Catalog (``fake.InstanceTypes(400)``): type i has i+1 vCPU, 2(i+1) GiB, 10(i+1) pods, kubeReserved 100m /
10Mi, spot offerings in test-zone-1/2 and on-demand in test-zone-1/2/3, all at 0.1 × vCPU + 0.1 × memory
bytes / 1e9 per hour.

Pods (``makeDiversePods(count)``): five blocks of ``count // 5`` pods, in this order, then the remainder as
generic pods:

- generic (``makeGenericPods``): label ``my-label=<v>``;
- zone spread and hostname spread (``makeTopologySpreadPods``): label ``my-label=<v>`` and one constraint,
  maxSkew 1, DoNotSchedule, selecting ``my-label=<w>`` — v and w drawn independently, so a pod mostly
  spreads against other pods, itself only when v == w;
- zone self-affinity (``makePodAffinityPods``): label ``my-affininity=<v>`` (Karpenter's spelling) and a
  required pod affinity term selecting exactly that label;
- hostname self-anti-affinity (``makePodAntiAffinityPods``): label ``app=nginx`` and a required
  anti-affinity term selecting ``app=nginx`` — one such pod per node.

Every pod draws, in Karpenter's order, its label value(s), then cpu from {100, 250, 500, 1000, 1500}m, then
memory from {100, 256, 512, 1024, 2048, 4096}Mi, each uniformly; label values are uniform over seven.
Every pod also carries ``testing/cluster=unspecified`` (``test.ObjectMeta``). Go's ``math/rand`` stream is
not reproduced: Python's ``random`` with the same seed (42) draws from the same distributions, not the
same pods. ``karpenter_generic_objects`` is Karpenter's all-generic batch (``makeGenericPods`` alone).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from bench.workloads import nodepool, pod
from model import labels as wk
from model.instancetype import InstanceType, Offering, Overhead
from model.resources import Resources

GIB = 2**30
LABEL_VALUES = ("a", "b", "c", "d", "e", "f", "g")
CPUS = ("100m", "250m", "500m", "1000m", "1500m")
MEMORIES = ("100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi")
#: ``makeDiversePods``' blocks, in its order
SHARES = ("generic", "zone-spread", "hostname-spread", "zone-affinity", "hostname-anti")
#: the label every pod gets from Karpenter's ``test.ObjectMeta``
DISCOVERY_LABEL = {"testing/cluster": "unspecified"}
#: the benchmark NodePool's limits
LIMITS = {"cpu": "10000000", "memory": "10000000Gi"}

PodFactory = Callable[[random.Random, str], dict[str, Any]]


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


def _value(rng: random.Random) -> str:
    """``randomLabelValue``: one of seven, uniformly."""
    return rng.choice(LABEL_VALUES)


def _pod(name: str, rng: random.Random, labels: dict[str, str], extra: dict[str, Any]) -> dict[str, Any]:
    """A pending pod with Karpenter's labels, then its cpu and memory drawn (Karpenter's draw order)."""
    cpu = rng.choice(CPUS)
    memory = rng.choice(MEMORIES)
    return pod(name, cpu=cpu, memory=memory, labels={**labels, **DISCOVERY_LABEL}, spec_extra=extra)


def generic_pod(rng: random.Random, name: str) -> dict[str, Any]:
    """``makeGenericPods``: ``my-label=<v>``, nothing else."""
    return _pod(name, rng, {"my-label": _value(rng)}, {})


def _spread_pod(key: str) -> PodFactory:
    def make(rng: random.Random, name: str) -> dict[str, Any]:
        """``makeTopologySpreadPods``: own label and selector value drawn independently."""
        labels = {"my-label": _value(rng)}
        selector = {"my-label": _value(rng)}
        return _pod(name, rng, labels, {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": selector}}]})
    return make


def self_affinity_pod(key: str) -> PodFactory:
    """``makePodAffinityPods``: required pod affinity on ``key`` to the pod's own label."""
    def make(rng: random.Random, name: str) -> dict[str, Any]:
        labels = {"my-affininity": _value(rng)}
        return _pod(name, rng, labels, {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": key}]}}})
    return make


def _anti_affinity_pod(key: str) -> PodFactory:
    def make(rng: random.Random, name: str) -> dict[str, Any]:
        """``makePodAntiAffinityPods``: every pod ``app=nginx``, repelling ``app=nginx`` on ``key``."""
        labels = {"app": "nginx"}
        return _pod(name, rng, labels, {"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": key}]}}})
    return make


FACTORIES: dict[str, PodFactory] = {
    "generic": generic_pod,
    "zone-spread": _spread_pod(wk.ZONE),
    "hostname-spread": _spread_pod(wk.HOSTNAME),
    "zone-affinity": self_affinity_pod(wk.ZONE),
    "hostname-anti": _anti_affinity_pod(wk.HOSTNAME),
}


def blocks(count: int, shares: tuple[str, ...]) -> list[str]:
    """The kind of each pod: ``count // len(shares)`` of each share in order, the remainder generic."""
    share = count // len(shares)
    kinds = [kind for kind in shares for _ in range(share)]
    return kinds + ["generic"] * (count - len(kinds))


def make_pods(kinds: list[str], seed: int, factories: dict[str, PodFactory] = FACTORIES) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [factories[kind](rng, f"{kind}-{i:05d}") for i, kind in enumerate(kinds)]


def diverse_pods(count: int, seed: int = 42) -> list[dict[str, Any]]:
    """``makeDiversePods(count)``."""
    return make_pods(blocks(count, SHARES), seed)


def benchmark_nodepool() -> dict[str, Any]:
    """The benchmark's one NodePool: no requirements, limits far above any batch."""
    return nodepool("default", limits=dict(LIMITS))


def diverse_objects(count: int, seed: int = 42) -> list[dict[str, Any]]:
    return [benchmark_nodepool(), *diverse_pods(count, seed)]


def karpenter_generic_objects(count: int, seed: int = 42) -> list[dict[str, Any]]:
    """Karpenter's all-generic batch: ``makeGenericPods(count)`` and the benchmark NodePool."""
    return [benchmark_nodepool(), *make_pods(["generic"] * count, seed)]
