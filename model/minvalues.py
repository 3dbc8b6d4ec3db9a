"""NodePool ``requirements[].minValues`` (Strict): which instance types a NodeClaim could list.

Karpenter sends a NodeClaim a list of instance types, and with ``minValues: m`` on key K the types it lists
(every type the pool allows that is compatible with the claim's pods and holds them) must span at least m
distinct values of K, or it launches nothing. A planned NodeClaim names one instance type; it is valid when
such a list exists for it: among the pool's types with an available offering in the claim's zone and
capacity type, those whose labels every pod on it accepts and whose allocatable (after DaemonSet overhead)
holds all its pods span ≥ m values of K.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from model.nodepool import NodePool, launched_labels
from model.pod import Pod
from model.requirements import Requirements
from model.resources import Resources
from model.snapshot import Snapshot
from model.workload import daemon_pods


def strict_keys(pool: NodePool) -> list[tuple[str, int]]:
    """(key, minValues) of every pool requirement that sets minValues."""
    return [(r.key, r.min_values) for r in pool.requirements.items if r.min_values]


def alternatives(snapshot: Snapshot, pool: NodePool, zone: str, capacity_type: str, pods: Sequence[Pod],
                 extra_labels: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """Labels of every instance type a NodeClaim of ``pool`` in this zone and capacity type could list
    for these pods."""
    requested = Resources()
    for pod in pods:
        requested = requested + pod.requests
    accepted: set[tuple[Requirements, ...]] = {pod.node_requirements() for pod in pods}  # once per distinct pod
    pool_requirements = pool.requirements
    out = []
    for it in snapshot.instance_types:
        if not any(o.zone == zone and o.capacity_type == capacity_type and o.available for o in it.offerings):
            continue
        labels = {**(extra_labels or {}), **launched_labels(pool, it, zone, capacity_type)}
        if not pool_requirements.matches(labels) or not all(
                any(reqs.matches(labels) for reqs in alternative) for alternative in accepted):
            continue
        free = it.allocatable
        for daemon in daemon_pods(snapshot.daemonsets, labels, pool.taints):
            free = free - daemon.requests
        if not requested.exceeding(free):
            out.append(labels)
    return out


def shortfalls(snapshot: Snapshot, pool: NodePool, zone: str, capacity_type: str, pods: Sequence[Pod],
               extra_labels: Mapping[str, str] | None = None) -> list[str]:
    """Each minValues the claim cannot meet, as ``key: n of minValues m`` (empty: it can)."""
    keys = strict_keys(pool)
    if not keys:
        return []
    options = alternatives(snapshot, pool, zone, capacity_type, pods, extra_labels)
    out = []
    for key, minimum in keys:
        spanned = len({labels[key] for labels in options if key in labels})
        if spanned < minimum:
            out.append(f"{key}: {spanned} of minValues {minimum}")
    return out
