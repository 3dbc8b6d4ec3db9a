"""NodePool ``spec.limits``: the summed capacity of a pool's nodes (and their count, ``nodes``) is capped.

Usage counts every node and in-flight NodeClaim the pool already owns; a new node adds its instance
type's full capacity (not allocatable) and one ``nodes``, as Karpenter counts it.
"""

from __future__ import annotations

from collections.abc import Mapping

from model.instancetype import InstanceType
from model.nodepool import NODES, NodePool, pool_usage
from model.snapshot import Snapshot
from solver.rules.base import Rule, Why


def remaining(snapshot: Snapshot, nodepool: NodePool) -> dict[str, int]:
    """What the pool may still add per limited resource (may be negative when already over)."""
    usage = pool_usage(snapshot, nodepool)
    return {name: limit - usage[name] for name, limit in nodepool.limits.items()}


def consumption(instance_type: InstanceType, limited: Mapping[str, int]) -> dict[str, int]:
    """What one new node of ``instance_type`` counts against each limited resource."""
    return {name: 1 if name == NODES else instance_type.capacity[name] for name in limited}


class NodePoolLimits(Rule):
    """NodePool ``spec.limits``: a coupling constraint of the integer master (``remaining`` per pool)."""

    name = "NodePool limits"
    reads = ("NodePool", "NodeClaim")

    def explain(self, why: Why) -> str:
        if not why.fits:
            return ""
        problem = why.problem
        pools = sorted({problem.templates[t].pool.name for t in why.fits})
        limited = [p for p in problem.pools if p.name in pools and p.limits_remaining]
        if not limited or len(limited) != len(pools):
            return ""
        return "; ".join(f"NodePool {p.name} limit "
                         + ", ".join(f"{k}={v}" for k, v in sorted(p.nodepool.limits.to_quantities().items()))
                         + " reached" for p in limited)
