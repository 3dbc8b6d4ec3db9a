"""Bins: the node choices the model actually sees.

Concrete templates that no rule can tell apart (same pool, allocatable, price, limit use and the same set
of classes they admit) collapse into one bin; a bin no cheaper than another bin of the same pool that is
at least as large, admits at least the same classes and uses no more of the pool's limits is dropped.
On the KWOK catalog that turns 1,152 offerings per pool into a few dozen bins. Existing nodes with the
same free capacity and the same admitted classes form one bin with a count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.problem import Problem


@dataclass
class Bin:
    index: int
    existing: bool
    #: problem template indices (new) or existing-capacity indices, the representative first
    members: list[int]
    capacity: np.ndarray
    cost: int
    count: int | None
    pool_index: int | None
    limit_use: dict[str, int]
    compatible: np.ndarray  # bool over classes
    rank: int
    #: preferred node-affinity score of each class on this bin
    preference: np.ndarray


def _new_bins(problem: Problem) -> list[Bin]:
    groups: dict[tuple[object, ...], list[int]] = {}
    pool_index = {pool.name: i for i, pool in enumerate(problem.pools)}
    for t, tmpl in enumerate(problem.templates):
        if any(use > tmpl.pool.limits_remaining.get(name, use) for name, use in tmpl.limit_use.items()):
            continue  # one node of this template already breaks its NodePool's limits
        key = (tmpl.pool.name, tuple(problem.template_alloc[t]), tmpl.price_micros,
               tuple(sorted(tmpl.limit_use.items())), problem.template_ok[:, t].tobytes(),
               problem.template_pref[:, t].tobytes())
        groups.setdefault(key, []).append(t)
    bins = []
    for members in groups.values():
        members.sort(key=lambda t: problem.templates[t].sort_key)
        rep = problem.templates[members[0]]
        if not problem.template_ok[:, members[0]].any():
            continue
        bins.append(Bin(index=-1, existing=False, members=members, capacity=problem.template_alloc[members[0]],
                        cost=rep.price_micros, count=None, pool_index=pool_index[rep.pool.name],
                        limit_use=dict(rep.limit_use), compatible=problem.template_ok[:, members[0]].copy(),
                        rank=rep.pool.rank,
                        preference=problem.template_pref[:, members[0]].copy()))
    return _drop_dominated(bins)


def _dominates(a: Bin, b: Bin) -> bool:
    """Is ``a`` at least as good as ``b`` for every purpose of the model?"""
    return (a.pool_index == b.pool_index and a.cost <= b.cost and bool(np.all(a.capacity >= b.capacity))
            and bool(np.all(a.compatible >= b.compatible)) and bool(np.all(a.preference >= b.preference))
            and all(a.limit_use.get(k, 0) <= v for k, v in b.limit_use.items()))


def _drop_dominated(bins: list[Bin]) -> list[Bin]:
    """Keep the bins no cheaper-or-equal kept bin dominates; the cheap tests (pool, cost, capacity) run in
    numpy over all kept bins at once, ``_dominates`` only on the few that pass them."""
    bins.sort(key=lambda b: (b.cost, -int(b.capacity.sum()), b.members[0]))
    if not bins:
        return bins
    pools = np.array([-1 if b.pool_index is None else b.pool_index for b in bins])
    costs = np.array([b.cost for b in bins])
    capacity = np.array([b.capacity for b in bins])
    kept_mask = np.zeros(len(bins), dtype=bool)
    for j, candidate in enumerate(bins):
        near = kept_mask & (pools == pools[j]) & (costs <= costs[j]) & np.all(capacity >= capacity[j], axis=1)
        if not any(_dominates(bins[i], candidate) for i in np.flatnonzero(near)):
            kept_mask[j] = True
    return [b for b, kept in zip(bins, kept_mask, strict=True) if kept]


def _existing_bins(problem: Problem) -> list[Bin]:
    groups: dict[tuple[object, ...], list[int]] = {}
    for e in range(len(problem.existing)):
        if not problem.existing_ok[:, e].any() or np.any(problem.existing_free[e] < 0):
            continue
        key = (tuple(problem.existing_free[e]), problem.existing_ok[:, e].tobytes(),
               problem.existing_pref[:, e].tobytes())
        groups.setdefault(key, []).append(e)
    return [Bin(index=-1, existing=True, members=members, capacity=problem.existing_free[members[0]],
                cost=0, count=len(members), pool_index=None, limit_use={},
                compatible=problem.existing_ok[:, members[0]].copy(), rank=0,
                preference=problem.existing_pref[:, members[0]].copy())
            for members in groups.values()]


def build_bins(problem: Problem) -> list[Bin]:
    bins = _existing_bins(problem) + _new_bins(problem)
    for i, b in enumerate(bins):
        b.index = i
    return bins


def bin_of_template(bins: list[Bin], problem: Problem, template: int) -> int:
    """The bin standing for a concrete template: its own group, or the bin that dominates it."""
    for b in bins:
        if not b.existing and template in b.members:
            return b.index
    tmpl_alloc = problem.template_alloc[template]
    ok = problem.template_ok[:, template]
    pool = next(i for i, p in enumerate(problem.pools) if p.name == problem.templates[template].pool.name)
    price = problem.templates[template].price_micros
    use = problem.templates[template].limit_use
    for b in sorted(bins, key=lambda b: b.cost):
        if (not b.existing and b.pool_index == pool and b.cost <= price and np.all(b.capacity >= tmpl_alloc)
                and np.all(b.compatible >= ok) and np.all(b.preference >= problem.template_pref[:, template])
                and all(b.limit_use.get(k, 0) <= v for k, v in use.items())):
            return b.index
    raise LookupError(f"no bin covers template {template}")
