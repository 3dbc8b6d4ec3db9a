"""Drain-first heuristic: the warm start for the consolidation model.

Candidates in order of price (most expensive first, fewer pods first on ties) are tentatively emptied into
the free capacity of nodes that stay, best fit per pod; a candidate is removed when all its pods fit and the
budgets and PDBs still allow it. Nodes that receive pods are kept. N→0 moves only — the model adds
replacements and better combinations from here.
"""

from __future__ import annotations

import numpy as np

from solver.disruption.candidates import ClusterState, NodeState
from solver.disruption.yardstick import balanced_allows, within_limits
from solver.problem import Problem


def drain_first(problem: Problem, state: ClusterState, candidates: list[NodeState],
                class_of: dict[str, int]) -> tuple[list[int], dict[tuple[int, int], int]]:
    """Removed candidate indices and pods per (existing node, class) that receive them."""
    index = {cap.name: e for e, cap in enumerate(problem.existing)}
    free = problem.existing_free.astype(np.int64).copy()
    alive = np.all(free >= 0, axis=1)
    receiving = np.zeros(len(problem.existing), dtype=bool)
    removed: list[int] = []
    onto: dict[tuple[int, int], int] = {}
    order = sorted(range(len(candidates)), key=lambda k: (-candidates[k].price, len(candidates[k].pods),
                                                          candidates[k].name))
    chosen: list[NodeState] = []
    for k in order:
        s = candidates[k]
        if (s.reason == "Drifted" or not within_limits(state, [*chosen, s])
                or not balanced_allows(state, [*chosen, s])):
            continue
        own = index.get(s.name)
        if own is not None and receiving[own]:
            continue
        trial = free.copy()
        usable = alive.copy()
        if own is not None:
            usable[own] = False
        for e in (index[c.name] for c in chosen if c.name in index):
            usable[e] = False
        placed: list[tuple[int, int]] = []
        for pod in sorted(s.pods, key=lambda p: -int(problem.sizes[class_of[p.key], 0])):
            c = class_of[pod.key]
            size = problem.sizes[c]
            fits = usable & problem.existing_ok[c] & np.all(trial >= size, axis=1)
            if not fits.any():
                break
            slack = np.where(fits, (trial - size)[:, 0], np.iinfo(np.int64).max)
            e = int(np.argmin(slack))
            trial[e] -= size
            placed.append((e, c))
        else:
            free = trial
            removed.append(k)
            chosen.append(s)
            for e, c in placed:
                receiving[e] = True
                onto[(e, c)] = onto.get((e, c), 0) + 1
    return removed, onto
