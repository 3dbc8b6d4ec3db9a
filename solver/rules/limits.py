"""NodePool ``spec.limits``: the summed capacity of a pool's nodes (and their count, ``nodes``) is capped.

Usage counts every node and in-flight NodeClaim the pool already owns; a new node adds its instance
type's full capacity (not allocatable) and one ``nodes``, as Karpenter counts it.
"""

from __future__ import annotations

from collections.abc import Mapping

from model.instancetype import InstanceType
from model.labels import NODEPOOL
from model.nodepool import NodePool
from model.resources import Resources
from model.snapshot import Snapshot

NODES = "nodes"


def pool_usage(snapshot: Snapshot, nodepool: NodePool) -> Resources:
    """Capacity the pool already holds: its nodes, plus launched NodeClaims that have no node yet."""
    usage = Resources()
    node_names = set()
    for node in snapshot.nodes:
        if node.labels.get(NODEPOOL) == nodepool.name:
            usage = usage + node.capacity + {NODES: 1}
            node_names.add(node.name)
    for claim in snapshot.nodeclaims:
        if claim.nodepool == nodepool.name and claim.status.node_name not in node_names:
            capacity = claim.status.capacity or claim.spec.resources.requests
            usage = usage + capacity + {NODES: 1}
    return usage


def remaining(snapshot: Snapshot, nodepool: NodePool) -> dict[str, int]:
    """What the pool may still add per limited resource (may be negative when already over)."""
    usage = pool_usage(snapshot, nodepool)
    return {name: limit - usage[name] for name, limit in nodepool.limits.items()}


def consumption(instance_type: InstanceType, limited: Mapping[str, int]) -> dict[str, int]:
    """What one new node of ``instance_type`` counts against each limited resource."""
    return {name: 1 if name == NODES else instance_type.capacity[name] for name in limited}
