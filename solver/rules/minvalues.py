"""NodePool ``requirements[].minValues`` (Strict): a NodeClaim must stay flexible.

Karpenter sends a NodeClaim a list of instance types, and with ``minValues: m`` on key K the types it
lists (every type the pool allows that is compatible with the claim's pods and holds them) must span at
least m distinct values of K, or it launches nothing. A planned NodeClaim names one instance type; it is
valid when such a list exists for it: among the pool's types with an available offering in the claim's
zone and capacity type, those whose labels every pod on it accepts and whose allocatable (after
DaemonSet overhead) holds all its pods span ≥ m values of K (``alternatives`` computes them; the
verifier checks them per claim).

The solver enforces a sufficient per-class condition: a class may use template t only if the pool's
templates in t's zone and capacity type that are at least as large as t in every resource *and* admit
the class span ≥ m values — then any pod set that fits t fits all of them. Pods of different classes
that accept disjoint sets of those types could still leave a claim short (the verifier would say so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from model.nodepool import NodePool
from model.pod import Pod
from model.resources import Resources
from model.snapshot import Snapshot
from solver.rules.daemonsets import daemon_overhead
from solver.templates import NodeTemplate, node_labels


def strict_keys(pool: NodePool) -> list[tuple[str, int]]:
    return [(r.key, r.min_values) for r in pool.requirements.items if r.min_values]


def restrict(template_ok: np.ndarray, templates: Sequence[NodeTemplate], alloc: np.ndarray) -> None:
    """Close templates (in place, per class) whose pool's minValues the class could not meet there;
    ``alloc`` is each template's allocatable for pods, shape (T, R)."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for t, tmpl in enumerate(templates):
        if strict_keys(tmpl.pool.nodepool):
            groups.setdefault((tmpl.pool.name, tmpl.offering.zone, tmpl.offering.capacity_type), []).append(t)
    for members in groups.values():
        idx = np.array(members, dtype=np.int64)
        a = alloc[idx]
        dominates = np.all(a[None, :, :] >= a[:, None, :], axis=2)  # [t, u]: u at least as large as t
        keys = strict_keys(templates[members[0]].pool.nodepool)
        onehots = []
        for key, _ in keys:
            values = sorted({templates[t].labels[key] for t in members if key in templates[t].labels})
            onehot = np.zeros((len(members), len(values)), dtype=np.int64)
            for i, t in enumerate(members):
                if key in templates[t].labels:
                    onehot[i, values.index(templates[t].labels[key])] = 1
            onehots.append(onehot)
        memo: dict[bytes, np.ndarray] = {}
        for c in range(template_ok.shape[0]):
            ok = template_ok[c, idx]
            if not ok.any():
                continue
            keep = memo.get(ok.tobytes())
            if keep is None:
                reach = (dominates & ok[None, :]).astype(np.int64)
                keep = np.ones(len(members), dtype=bool)
                for (_, minimum), onehot in zip(keys, onehots, strict=True):
                    keep &= ((reach @ onehot) > 0).sum(axis=1) >= minimum
                memo[ok.tobytes()] = keep
            template_ok[c, idx] = ok & keep


def alternatives(snapshot: Snapshot, pool: NodePool, zone: str, capacity_type: str, pods: Sequence[Pod],
                 extra_labels: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """Labels of every instance type a NodeClaim of ``pool`` in this zone and capacity type could list
    for these pods (the exact check the verifier applies)."""
    requested = Resources()
    for pod in pods:
        requested = requested + pod.requests
    out = []
    for it in snapshot.instance_types:
        offering = next((o for o in it.offerings if o.zone == zone and o.capacity_type == capacity_type
                         and o.available), None)
        if offering is None:
            continue
        labels = {**(extra_labels or {}), **node_labels(pool, it, offering)}
        if not pool.requirements.matches(labels) or not all(p.accepts_labels(labels) for p in pods):
            continue
        free = it.allocatable - daemon_overhead(snapshot.daemonsets, labels, pool.taints)
        if not requested.exceeding(free):
            out.append(labels)
    return out


def shortfalls(snapshot: Snapshot, pool: NodePool, zone: str, capacity_type: str, pods: Sequence[Pod],
               extra_labels: Mapping[str, str] | None = None) -> list[str]:
    """Each minValues the claim cannot meet, as ``key: n of m``."""
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
