"""Karpenter's provisioning scheduler, re-implemented faithfully as the yardstick and the warm start.

First-fit-decreasing: pods in queue order (cpu, then memory, descending); each pod goes to the first
existing node that fits (initialized first, then by name), else the in-flight new NodeClaim with the
fewest pods that can still take it, else a new NodeClaim from the first NodePool (weight descending,
name descending) with an instance type that fits. A NodeClaim keeps every offering that can still hold
all its pods and launches on the cheapest at the end (ties: instance-type name, then offering order).

Deliberate deviations, both for validity: the NodePool ``nodes`` limit is decremented by new NodeClaims
within one batch (Karpenter only checks it against existing nodes), and capacity limits are charged the
largest candidate type's capacity at creation, exactly as Karpenter does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from model.pod import Pod
from solver.classes import karpenter_order
from solver.placement import NewNode, Placement
from solver.problem import Problem
from solver.rules.limits import NODES


@dataclass
class _Claim:
    pool_index: int
    candidates: np.ndarray
    requests: np.ndarray
    pods: list[Pod] = field(default_factory=list)
    order: int = 0
    #: per-resource maximum over the candidates: a cheap first test before narrowing
    ceiling: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    #: pods per class on this claim, for per-node caps (hostname anti-affinity, host ports)
    per_class: dict[int, int] = field(default_factory=dict)


class GreedyScheduler:
    def __init__(self, problem: Problem) -> None:
        self.p = problem
        self.class_of: dict[str, int] = {pod.key: c.index for c in problem.classes for pod in c.pods}
        self.by_pool: list[np.ndarray] = []
        for pool in problem.pools:
            idx = [t for t, tmpl in enumerate(problem.templates) if tmpl.pool.name == pool.name]
            self.by_pool.append(np.array(idx, dtype=np.int64))
        self.remaining = [dict(pool.limits_remaining) for pool in problem.pools]
        self.limit_names = [sorted(pool.limits_remaining) for pool in problem.pools]
        self.limit_use = [
            np.array([[problem.templates[t].limit_use.get(n, 0) for n in names] for t in idx],
                     dtype=np.int64).reshape(len(idx), len(names))
            for idx, names in zip(self.by_pool, self.limit_names, strict=True)]
        self.free = problem.existing_free.copy()
        self.on_existing = np.zeros((len(problem.existing), len(problem.classes)), dtype=np.int64)

    def _try_existing(self, c: int, size: np.ndarray, prefer: bool) -> int | None:
        ok = self.p.existing_ok[c] & np.all(self.free >= size, axis=1) & (self.on_existing[:, c] < self.p.node_cap[c])
        if prefer:
            ok &= self.p.existing_heaviest[c]
        hits = np.flatnonzero(ok)
        return int(hits[0]) if len(hits) else None

    def _narrow(self, claim: _Claim, c: int, total: np.ndarray, prefer: bool) -> np.ndarray:
        cand = claim.candidates
        keep = self.p.template_ok[c, cand] & np.all(self.p.template_alloc[cand] >= total, axis=1)
        if prefer:
            keep &= self.p.template_heaviest[c, cand]
        narrowed: np.ndarray = cand[keep]
        return narrowed

    def _new_claim(self, c: int, size: np.ndarray, order: int, prefer: bool) -> _Claim | None:
        for pool_index, idx in enumerate(self.by_pool):
            remaining = self.remaining[pool_index]
            if remaining.get(NODES, 1) <= 0:
                continue
            mask = self.p.template_ok[c, idx] & np.all(self.p.template_alloc[idx] >= size, axis=1)
            if prefer:
                mask &= self.p.template_heaviest[c, idx]
            if self.limit_names[pool_index]:
                rem = np.array([remaining[n] for n in self.limit_names[pool_index]], dtype=np.int64)
                mask &= np.all(self.limit_use[pool_index] <= rem, axis=1)
            if not mask.any():
                continue
            charged = self.limit_use[pool_index][mask].max(axis=0) if self.limit_names[pool_index] else []
            for name, amount in zip(self.limit_names[pool_index], charged, strict=True):
                remaining[name] -= int(amount)
            return _Claim(pool_index=pool_index, candidates=idx[mask], requests=size.copy(), order=order)
        return None

    def run(self, pods: list[Pod] | None = None) -> Placement:
        queue = sorted(pods if pods is not None else [p for c in self.p.classes for p in c.pods],
                       key=karpenter_order)
        placement = Placement()
        claims: list[_Claim] = []
        placed_bundles: set[int] = set()
        for pod in queue:
            c = self.class_of[pod.key]
            group = [pod]
            if self.p.classes[c].bundle:  # a self-affine group goes whole to one node
                if c in placed_bundles:
                    continue
                placed_bundles.add(c)
                group = [p for p in queue if self.class_of[p.key] == c]
            # Karpenter tries the heaviest preferred node-affinity term as if required, then relaxes it
            attempts = (True, False) if pod.preferred_terms else (False,)
            if not any(self._place(group, c, claims, placement, prefer) for prefer in attempts):
                placement.unschedulable.extend(group)
        for claim in claims:
            placement.new_nodes.append(NewNode(template=self._cheapest(claim.candidates), pods=claim.pods))
        return placement

    def _place(self, pods: list[Pod], c: int, claims: list[_Claim], placement: Placement, prefer: bool) -> bool:
        size = self.p.sizes[c]
        e = self._try_existing(c, size, prefer)
        if e is not None:
            self.free[e] -= size
            self.on_existing[e, c] += 1
            placement.existing.setdefault(e, []).extend(pods)
            return True
        size_list = size.tolist()
        for claim in sorted(claims, key=lambda cl: (len(cl.pods), cl.order)):
            if any(r + z > m for r, z, m in zip(claim.used, size_list, claim.ceiling, strict=True)):
                continue
            if claim.per_class.get(c, 0) >= self.p.node_cap[c]:
                continue
            total = claim.requests + size
            narrowed = self._narrow(claim, c, total, prefer)
            if len(narrowed):
                claim.candidates, claim.requests = narrowed, total
                claim.ceiling = self.p.template_alloc[narrowed].max(axis=0).tolist()
                claim.used = total.tolist()
                claim.per_class[c] = claim.per_class.get(c, 0) + 1
                claim.pods.extend(pods)
                return True
        new_claim = self._new_claim(c, size, len(claims), prefer)
        if new_claim is None:
            return False
        new_claim.pods.extend(pods)
        new_claim.ceiling = self.p.template_alloc[new_claim.candidates].max(axis=0).tolist()
        new_claim.used = size_list
        new_claim.per_class[c] = 1
        claims.append(new_claim)
        return True

    def _cheapest(self, candidates: np.ndarray) -> int:
        templates = self.p.templates
        return int(min(candidates, key=lambda t: (templates[t].price_micros, templates[t].instance_type.name,
                                                  templates[t].instance_type.offerings.index(
                                                      templates[t].offering))))


def greedy_placement(problem: Problem) -> Placement:
    return GreedyScheduler(problem).run()
