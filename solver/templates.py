"""Node templates: every concrete node a NodePool could launch — (pool, instance type, offering) plus the
labels that node would carry — and the capacity left for pending pods after DaemonSet overhead."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from model.affinity import HostPort
from model.instancetype import InstanceType, Offering
from model.nodepool import NodePool, launched_labels
from model.resources import Resources
from model.snapshot import Snapshot
from model.taints import Taint
from solver.classes import PodClass
from solver.rules.daemonsets import daemon_overhead
from solver.rules.limits import consumption, remaining

#: Most label combinations one pool may expand into for multi-valued custom requirement keys.
MAX_LABEL_COMBINATIONS = 32


@dataclass(frozen=True)
class PoolInfo:
    """A NodePool with its place in Karpenter's order (weight descending, then name descending)."""

    nodepool: NodePool
    rank: int
    limits_remaining: dict[str, int]

    @property
    def name(self) -> str:
        return self.nodepool.name

    @property
    def taints(self) -> list[Taint]:
        return self.nodepool.taints


@dataclass(frozen=True)
class NodeTemplate:
    """A node the plan could create: a concrete offering of an instance type in a pool."""

    pool: PoolInfo
    instance_type: InstanceType
    offering: Offering
    labels: dict[str, str]
    daemon_overhead: Resources
    allocatable: Resources
    limit_use: dict[str, int] = field(default_factory=dict)
    daemon_ports: tuple[HostPort, ...] = ()

    @property
    def price_micros(self) -> int:
        return self.offering.price_micros

    @property
    def sort_key(self) -> tuple[int, str, str, str]:
        return (self.pool.rank, self.instance_type.name, self.offering.zone, self.offering.capacity_type)

    def describe(self) -> str:
        return (f"{self.pool.name}/{self.instance_type.name}/{self.offering.zone}/"
                f"{self.offering.capacity_type}")


def order_pools(nodepools: Iterable[NodePool]) -> list[NodePool]:
    """Karpenter's NodePool order: weight descending; equal weights by name descending."""
    return sorted(sorted(nodepools, key=lambda np: np.name, reverse=True), key=lambda np: -np.weight)


def pool_infos(snapshot: Snapshot) -> list[PoolInfo]:
    ordered = order_pools(snapshot.nodepools)
    weights = sorted({np.weight for np in ordered}, reverse=True)
    return [PoolInfo(nodepool=np, rank=weights.index(np.weight), limits_remaining=remaining(snapshot, np))
            for np in ordered]


def _custom_label_choices(pool: NodePool, fixed: dict[str, str], classes: Sequence[PodClass]
                          ) -> list[dict[str, str]]:
    """Values for pool requirement keys that neither the instance type nor the offering sets.

    A key the pool pins to one value is that label. A key with several allowed values is expanded over
    the values pending pods ask for (one node carries one value), so pods that disagree never share a node.
    """
    reqs = pool.requirements
    axes: list[list[tuple[str, str | None]]] = []
    for key in sorted(reqs.label_keys() - set(fixed)):
        finite = reqs.candidate_values(key)
        wanted = sorted({v for c in classes for alt in c.requirements for v in alt.values_mentioned(key)})
        if finite is not None:
            options: list[str | None] = list(finite) if len(finite) <= 1 else [
                v for v in finite if v in wanted] or [finite[0]]
        else:
            options = [v for v in wanted if reqs.allows_value(key, v)]
            if reqs.allows_value(key, None):
                options.append(None)
        if not options:
            return []
        axes.append([(key, value) for value in options])
    combos = []
    for combo in itertools.islice(itertools.product(*axes), MAX_LABEL_COMBINATIONS):
        combos.append({k: v for k, v in combo if v is not None})
    return combos


def node_labels(pool: NodePool, instance_type: InstanceType, offering: Offering) -> dict[str, str]:
    """Labels a launched node carries before custom requirement values are chosen (``model.nodepool``)."""
    return launched_labels(pool, instance_type, offering.zone, offering.capacity_type)


def build_templates(snapshot: Snapshot, classes: Sequence[PodClass]) -> list[NodeTemplate]:
    """Every launchable (pool, type, offering, labels) whose labels meet the pool's requirements."""
    out: list[NodeTemplate] = []
    for info in pool_infos(snapshot):
        pool = info.nodepool
        reqs = pool.requirements
        for it in snapshot.instance_types:
            for offering in it.offerings:
                if not offering.available:
                    continue
                base = node_labels(pool, it, offering)
                for extra in _custom_label_choices(pool, base, classes):
                    labels = {**base, **extra}
                    if not reqs.matches(labels):
                        continue
                    overhead = daemon_overhead(snapshot.daemonsets, labels, pool.taints)
                    ports = tuple(p for ds in snapshot.daemonsets if ds.runs_on(labels, pool.taints)
                                  for p in ds.pod.host_ports)
                    allocatable = it.allocatable - overhead
                    if any(v < 0 for v in allocatable.values()):
                        continue
                    out.append(NodeTemplate(
                        pool=info, instance_type=it, offering=offering, labels=labels,
                        daemon_overhead=overhead, allocatable=allocatable,
                        limit_use=consumption(it, info.limits_remaining), daemon_ports=ports))
    return out
