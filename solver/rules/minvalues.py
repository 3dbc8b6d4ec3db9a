"""NodePool ``requirements[].minValues`` (Strict): a NodeClaim must stay flexible.

Karpenter sends a NodeClaim a list of instance types, and with ``minValues: m`` on key K the types it
lists (every type the pool allows that is compatible with the claim's pods and holds them) must span at
least m distinct values of K, or it launches nothing. A planned NodeClaim names one instance type; it is
valid when such a list exists for it: among the pool's types with an available offering in the claim's
zone and capacity type, those whose labels every pod on it accepts and whose allocatable (after
DaemonSet overhead) holds all its pods span ≥ m values of K (``model.minvalues.alternatives`` computes
them; the verifier checks them per claim).

The solver enforces a sufficient per-class condition: a class may use template t only if the pool's
templates in t's zone and capacity type that are at least as large as t in every resource *and* admit
the class span ≥ m values — then any pod set that fits t fits all of them. Pods of different classes
that accept disjoint sets of those types could still leave a claim short (the verifier would say so).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from model.minvalues import strict_keys
from solver.rules.base import BatchContext, Rule, Why
from solver.templates import NodeTemplate

if TYPE_CHECKING:
    from solver.classes import PodClass
    from solver.problem import Problem
    from solver.rules.counters import NodeCounter


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


class MinValues(Rule):
    """NodePool requirements' ``minValues`` (Strict): the sufficient per-class condition above."""

    name = "NodePool minValues"
    relaxable = True

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        pools = sorted({t.pool.name for t in batch.templates if strict_keys(t.pool.nodepool)})
        return [f"NodePool {name}: minValues enforced per class by a sufficient condition (a claim mixing "
                "classes could stay flexible on a smaller type)" for name in pools]

    def admit(self, batch: BatchContext, problem: Problem) -> None:
        restrict(problem.template_ok, problem.templates, problem.template_alloc[:, :problem.resource_axes])

    def explain(self, why: Why) -> str:
        if why.admitted and why.fits:
            return ""
        problem, c = why.problem, why.c
        closed = {(problem.templates[t].pool.name, key, m) for t in why.tolerated if not problem.template_ok[c, t]
                  and np.all(problem.template_alloc[t] >= problem.sizes[c])
                  for key, m in strict_keys(problem.templates[t].pool.nodepool)}
        return "; ".join(f"NodePool {pool} requires minValues {m} distinct {key} among the instance types that "
                         "could hold its NodeClaim (Strict), and fewer of those are large enough for it"
                         for pool, key, m in sorted(closed))
