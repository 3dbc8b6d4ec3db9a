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

from model.nodepool import NODES
from model.pod import Pod
from solver.classes import karpenter_order
from solver.placement import NewNode, Placement
from solver.problem import Problem


@dataclass
class _Claim:
    pool_index: int
    candidates: np.ndarray
    requests: np.ndarray
    pods: list[Pod] = field(default_factory=list)
    order: int = 0
    #: classes none of its remaining candidates admits (candidates only ever narrow, so this only grows)
    refuses: set[int] = field(default_factory=set)


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
        self._launch_order: np.ndarray | None = None
        # zones as small integers: a claim whose candidates all sit in one zone skips pods pinned elsewhere
        zones = sorted({t.offering.zone for t in problem.templates})
        self.template_zone = np.array([zones.index(t.offering.zone) for t in problem.templates], dtype=np.int64)
        self.class_zone = np.array([zones.index(c.representative.zone_pin) if c.representative.zone_pin in zones
                                    else -1 for c in problem.classes], dtype=np.int64)
        self.claim_zone = np.zeros(0, dtype=np.int64)
        #: pods per in-flight claim: Karpenter tries the emptiest claim first
        self.npods = np.zeros(0, dtype=np.int64)
        # per in-flight claim (row): requests so far, largest candidate allocatable, units per class
        self.used = np.zeros((0, len(problem.axes)), dtype=np.int64)
        self.ceiling = np.zeros((0, len(problem.axes)), dtype=np.int64)

    def _try_existing(self, c: int, size: np.ndarray, prefer: bool) -> int | None:
        ok = self.p.existing_ok[c] & np.all(self.free >= size, axis=1)
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
            placement.existing.setdefault(e, []).extend(pods)
            return True
        n = len(claims)
        if n:
            # every in-flight claim at once: cheap tests in numpy, then the fewest-pods-first order
            fits = np.all(self.used[:n] + size <= self.ceiling[:n], axis=1)
            if self.class_zone[c] >= 0:
                fits &= (self.claim_zone[:n] < 0) | (self.claim_zone[:n] == self.class_zone[c])
            hits = np.flatnonzero(fits)
            for i in hits[np.lexsort((hits, self.npods[hits]))].tolist():
                claim = claims[i]
                if c in claim.refuses:
                    continue
                total = claim.requests + size
                narrowed = self._narrow(claim, c, total, prefer)
                if len(narrowed):
                    changed = len(narrowed) != len(claim.candidates)
                    claim.candidates, claim.requests = narrowed, total
                    self._record(i, claim, pods, changed)
                    return True
                if not prefer and not self.p.template_ok[c, claim.candidates].any():
                    claim.refuses.add(c)
        new_claim = self._new_claim(c, size, n, prefer)
        if new_claim is None:
            return False
        claims.append(new_claim)
        self._record(n, new_claim, pods)
        return True

    def _record(self, i: int, claim: _Claim, pods: list[Pod], candidates_changed: bool = True) -> None:
        """Book ``pods`` onto claim ``i``; its ceiling and zone only move when its candidates narrowed
        (narrowing only drops candidates, so an unchanged count is an unchanged set)."""
        if i >= len(self.used):
            grow = max(64, len(self.used))
            self.used = np.vstack([self.used, np.zeros((grow, self.used.shape[1]), np.int64)])
            self.ceiling = np.vstack([self.ceiling, np.zeros((grow, self.ceiling.shape[1]), np.int64)])
            self.claim_zone = np.concatenate([self.claim_zone, np.full(grow, -1, np.int64)])
            self.npods = np.concatenate([self.npods, np.zeros(grow, np.int64)])
        claim.pods.extend(pods)
        self.npods[i] = len(claim.pods)
        self.used[i] = claim.requests
        if not candidates_changed:
            return
        self.ceiling[i] = self.p.template_alloc[claim.candidates].max(axis=0)
        zones = np.unique(self.template_zone[claim.candidates])
        self.claim_zone[i] = int(zones[0]) if len(zones) == 1 else -1

    def _cheapest(self, candidates: np.ndarray) -> int:
        """Karpenter's launch choice: cheapest offering; ties by instance-type name, then catalog order."""
        if self._launch_order is None:
            templates = self.p.templates
            keys = sorted(range(len(templates)), key=lambda t: (
                templates[t].price_micros, templates[t].instance_type.name,
                templates[t].instance_type.offerings.index(templates[t].offering)))
            self._launch_order = np.empty(len(templates), dtype=np.int64)
            self._launch_order[keys] = np.arange(len(templates))
        return int(candidates[np.argmin(self._launch_order[candidates])])


def greedy_placement(problem: Problem) -> Placement:
    return GreedyScheduler(problem).run()


def finish_greedily(problem: Problem, placement: Placement) -> Placement:
    """Place a partial plan's unscheduled pods with Karpenter's greedy, around what the plan already uses
    (existing free capacity, NodePool limits): an LP rounding cut short by the time limit still ends in
    a complete plan. Pods greedy cannot place stay unschedulable."""
    if not placement.unschedulable:
        return placement
    scheduler = GreedyScheduler(problem)
    units = np.array([c.unit for c in problem.classes], dtype=np.int64)
    for e, pods in placement.existing.items():
        counts = np.bincount([scheduler.class_of[p.key] for p in pods], minlength=len(problem.classes))
        scheduler.free[e] -= (counts // units) @ problem.sizes
    pool_index = {pool.name: i for i, pool in enumerate(problem.pools)}
    for node in placement.new_nodes:
        tmpl = problem.templates[node.template]
        remaining = scheduler.remaining[pool_index[tmpl.pool.name]]
        for name, use in tmpl.limit_use.items():
            if name in remaining:
                remaining[name] -= use
    extra = scheduler.run(list(placement.unschedulable))
    for e, pods in extra.existing.items():
        placement.existing.setdefault(e, []).extend(pods)
    placement.new_nodes.extend(extra.new_nodes)
    placement.unschedulable = extra.unschedulable
    return placement
