"""Diving: turn the LP into an integer plan by committing nodes one LP re-solve at a time.

Each round commits ⌊x*⌋ copies of every LP pattern (while many nodes are left, also one copy of each
pattern at ≥ ``round_up``; when none qualifies, one copy of the largest),
lowers the demand to what is left, re-solves the LP with a little more pricing, and repeats. When only
a few nodes' worth of pods remain, the compact model packs them exactly. This is the classic
price-and-dive heuristic for cutting stock: it lands within a node or two of the LP bound.
"""

from __future__ import annotations

import time

import numpy as np

from solver.bins import Bin
from solver.colgen import MasterLP
from solver.compact import solve_compact
from solver.patterns import Pattern

EPS = 1e-6
#: the exact finish's time when nothing short of optimal would do
FINISH_SECONDS = 0.3


def dive(master: MasterLP, bins: list[Bin], sizes: np.ndarray, demand: np.ndarray,
         limits: dict[tuple[int, str], int], deadline: float, *, seed: int, workers: int, deterministic: bool,
         finish_nodes: int = 3, pricing_rounds: int = 3, round_up: float = 0.5, round_up_above: float = 50.0,
         good_enough: int | None = None) -> dict[Pattern, int] | None:
    """The dive's plan; ``good_enough`` is a cost the caller accepts at once (its bound plus its decision gap):
    the exact finish then searches longer, up to half the time left, but stops as soon as the plan costs no
    more (a small batch's last nodes are where a 0.3 s finish loses a few per cent)."""
    residual = demand.copy()
    limits_left = dict(limits)
    counts_left = {b.index: b.count for b in bins if b.count is not None}
    committed: dict[Pattern, int] = {}
    while residual.any():
        if time.monotonic() >= deadline:
            return committed  # anytime: the caller completes the residual greedily
        master.set_demand(residual)
        master.solve()
        for _ in range(pricing_rounds):
            if time.monotonic() >= deadline or not master.price_greedily(bins, sizes, deadline):
                break
            master.solve()
        solution = master.solution()
        if not solution:
            return committed  # the LP leaves the rest unscheduled (limits): so does the plan
        nodes_left = sum(solution.values())
        if nodes_left <= finish_nodes:
            spent = sum(bins[p.bin].cost * n for p, n in committed.items())
            rest = _finish(bins, sizes, residual, limits_left, counts_left, solution, deadline, seed, workers,
                           deterministic, None if good_enough is None else good_enough - spent)
            if rest is not None:
                for pattern, n in rest.items():
                    committed[pattern] = committed.get(pattern, 0) + n
                return committed
        # ⌊x⌋ copies, and one of every pattern the LP uses at least ``round_up`` of: with hundreds of classes
        # of a few pods each most LP values are fractional, and one node per LP solve never finishes
        # (only while many nodes are left and ⌊x⌋ alone would commit less than half of them: small batches
        # keep the exact finish its room, and LPs with large values round down as before)
        floors = sum(int(v + EPS) for v in solution.values())
        threshold = round_up if nodes_left > round_up_above and floors < nodes_left / 2 else 1.0 - EPS
        take = {p: max(int(v + EPS), int(v >= threshold)) for p, v in solution.items() if v >= threshold}
        if not take:
            best = max(solution.items(), key=lambda item: (item[1], -item[0].bin, item[0].counts))[0]
            take = {best: 1}
        progress = False
        for pattern, n in sorted(take.items(), key=lambda item: (item[0].bin, item[0].counts)):
            b = bins[pattern.bin]
            for _ in range(n):
                if not residual.any():
                    break
                if not _buildable(b, counts_left, limits_left):
                    master.forbid(pattern)
                    break
                trimmed = np.minimum(pattern.array(), residual)
                if not trimmed.any():
                    break
                committed_pattern = Pattern(pattern.bin, tuple(trimmed.tolist()))
                committed[committed_pattern] = committed.get(committed_pattern, 0) + 1
                residual = residual - trimmed
                if b.count is not None:
                    counts_left[b.index] -= 1
                    master.set_count(b.index, counts_left[b.index])
                for key in limits_left:
                    if b.pool_index == key[0] and b.limit_use.get(key[1], 0):
                        limits_left[key] -= b.limit_use[key[1]]
                        master.set_limit(key, limits_left[key])
                progress = True
        if not progress:
            # the LP leans on nodes that no longer fit the limits: forbid them and re-solve
            stuck = [p for p in solution if not _buildable(bins[p.bin], counts_left, limits_left)]
            if not stuck:
                return None
            for pattern in stuck:
                master.forbid(pattern)
    return committed


def _buildable(b: Bin, counts_left: dict[int, int], limits_left: dict[tuple[int, str], int]) -> bool:
    """Can one more node of ``b`` be added without exceeding an existing-node count or a NodePool limit?"""
    if b.count is not None and counts_left[b.index] <= 0:
        return False
    return all(b.limit_use.get(name, 0) <= left for (pool, name), left in limits_left.items()
               if pool == b.pool_index)


def _finish(bins: list[Bin], sizes: np.ndarray, residual: np.ndarray, limits: dict[tuple[int, str], int],
            counts_left: dict[int, int], solution: dict[Pattern, float], deadline: float, seed: int,
            workers: int, deterministic: bool, good_enough: int | None = None) -> dict[Pattern, int] | None:
    """Pack the last few nodes' worth exactly: LP-used bins get ⌈x*⌉ + 1 slots, every other bin one. With a
    ``good_enough`` cost for them it may take up to half the time left, stopping once it is met."""
    used: dict[int, float] = {}
    for pattern, v in solution.items():
        used[pattern.bin] = used.get(pattern.bin, 0.0) + v
    slots = {}
    for b in bins:
        n = 1 + int(np.ceil(used.get(b.index, 0.0) - EPS))
        if b.count is not None:
            n = min(n, counts_left.get(b.index, 0))
        if n > 0:
            slots[b.index] = n
    left = max(deadline - time.monotonic(), 0.1)
    budget = min(left, FINISH_SECONDS if good_enough is None else max(FINISH_SECONDS, left / 2))
    result = solve_compact(bins, sizes, residual, limits, slots, time_limit=budget, seed=seed, workers=workers,
                           deterministic=deterministic,
                           good_enough=None if good_enough is None else max(good_enough, 0))
    return result.chosen
