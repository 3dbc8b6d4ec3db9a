"""Anytime improvement without column generation: a pattern construction and large-neighbourhood search.

On a busy machine loading, compiling and Karpenter's greedy can use most of the time limit, and column
generation then never reaches a plan. Two cheap stages keep the answer better than greedy's:

* ``construct`` — sequential pattern construction: each step fills a short list of bins with the
  remaining pods by value density (a pod's value is its resource-share price, the dual prices of
  ``solver.bound``), takes the bin whose fill costs least per unit of value, and repeats that pattern as
  often as the remaining demand allows. One pass over the classes, not the pods: milliseconds at 20,000
  pods.
* ``improve`` — large-neighbourhood search over an incumbent given as patterns: destroy a few new nodes
  (the worst filled, a random few, or a worst-filled node and nodes that could trade pods with it), re-pack
  their pods exactly with the compact slot model (``solver.compact``) over the destroyed nodes' bins and the
  best few others, and keep the result only when it is strictly cheaper; one disjoint neighbourhood per
  worker at a time. Existing nodes are never destroyed; NodePool limits are what the kept nodes leave.

Both work on the compiled matrices (capacities include the per-node counters and admission is
``Bin.compatible``), so every plan they return is a plan of the same model the other stages solve.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import compress, islice

import numpy as np

from solver.bins import Bin
from solver.compact import CompactResult, solve_compact
from solver.cpsat import stalled
from solver.decode import decode, pattern_order
from solver.patterns import Pattern, complete, copies_matrix, density_order, fill_listed, greedy_pricing
from solver.placement import NewNode, Placement
from solver.problem import Problem

#: bins whose fill ``construct`` tries at each step (the cheapest per unit of value first)
SHORTLIST = 6
#: how much worse than its last pattern a bin's next one may score and still be taken without pricing the
#: shortlist again (0: only while it is as good; the construction's speed comes from skipping that pricing)
STICKY = 0.03
#: node counts a neighbourhood destroys, tried in turn
NEIGHBOURHOODS = (4, 8, 12, 6)
#: CP-SAT seconds one re-pack may take at most
REPACK_SECONDS = 0.3
#: share of the new nodes one ``reconstruct`` step destroys, and the fewest it destroys
RECONSTRUCT_SHARE = 0.1
RECONSTRUCT_MIN_NODES = 24
#: ``size_floor`` closes nothing when the next size below the floor is at least this share of it: a catalog that
#: steps that finely lets the plain construction size the forced nodes closely, and closing bins only costs it
#: (Karpenter's 400-type catalog, one vCPU apart: floored constructions 3 % / 10 % dearer at 1,000 / 5,000 diverse
#: pods; KWOK's and AWS's sizes double)
FINE_STEP = 0.7


def class_values(bins: list[Bin], sizes: np.ndarray, copies: np.ndarray | None = None) -> np.ndarray:
    """A price per class unit: the cheapest bin's cost times the largest share of its capacity the unit
    takes (what a node full of such pods charges each). Classes no bin holds get 0. ``copies``: the
    bins' ``copies_matrix`` when the caller has it (classes × bins)."""
    if not bins:
        return np.zeros(len(sizes))
    capacity = np.array([b.capacity for b in bins], dtype=float)
    costs = np.array([float(b.cost) for b in bins])
    if copies is None:
        copies = copies_matrix(capacity.astype(np.int64), sizes)
    holds = (copies > 0) & np.array([b.compatible for b in bins]).T
    share = np.zeros((len(sizes), len(bins)))
    for r in range(sizes.shape[1]):  # axis by axis: (classes × bins) at a time, not × axes
        with np.errstate(divide="ignore", invalid="ignore"):
            part = np.nan_to_num(sizes[:, r][:, None] / capacity[None, :, r], nan=0.0, posinf=np.inf)
        np.maximum(share, part, out=share)
    with np.errstate(invalid="ignore"):  # a free bin (cost 0) next to an infinite share: not a price
        priced = np.where(holds, np.nan_to_num(costs[None, :] * share, nan=np.inf), np.inf)
    best = priced.min(axis=1) if priced.shape[1] else np.full(len(sizes), np.inf)
    return np.where(np.isfinite(best), best, 0.0)


def _limit_room(bins: list[Bin], limits: dict[tuple[int, str], int], b: Bin, room: dict[tuple[int, str], int]
                ) -> int:
    """How many more nodes of ``b`` the NodePool limits leave room for (``room`` is what is left)."""
    most = 1 << 30
    for (pool, name), _ in limits.items():
        use = b.limit_use.get(name, 0)
        if b.pool_index == pool and use > 0:
            most = min(most, max(room[pool, name], 0) // use)
    return most


@dataclass
class Matrices:
    """What the construction reads of the bins besides the demand, built once (seconds at 50,000 pods: the
    copies matrix over 4,603 classes × 1,200 bins) and shared by every construction over the same bins."""

    costs: np.ndarray
    values: np.ndarray
    #: bins × classes: how many units of the class one empty node of the bin holds (0 where it is not admitted)
    fit: np.ndarray

    @classmethod
    def of(cls, bins: list[Bin], sizes: np.ndarray) -> Matrices:
        capacity = np.array([b.capacity for b in bins], dtype=float) if bins else np.zeros((0, sizes.shape[1]))
        compatible = np.array([b.compatible for b in bins], dtype=bool).reshape(len(bins), len(sizes))
        held = copies_matrix(capacity.astype(np.int64), sizes)
        return cls(costs=np.array([float(b.cost) for b in bins]), values=class_values(bins, sizes, held),
                   fit=held.T * compatible)

    def floored(self, bins: list[Bin], cpu_axis: int, floor: int) -> Matrices:
        """The same, with new bins of less than ``floor`` on ``cpu_axis`` closed to every class that some bin
        of at least that size (or an existing node) holds: the construction then opens only large nodes, and
        decoding's shrink moves each to the cheapest type that holds what it got."""
        small = np.array([not b.existing and b.capacity[cpu_axis] < floor for b in bins], dtype=bool)
        fit = self.fit.copy()
        elsewhere = fit[~small].any(axis=0)
        fit[np.ix_(small, elsewhere)] = 0
        return Matrices(costs=self.costs, values=self.values, fit=fit)


def forced_nodes(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, first_counter: int) -> int:
    """The fewest new nodes the per-node counters (axes from ``first_counter`` on) leave any plan of ``demand``:
    on each, its demand over the most one new node holds. Hostname anti-affinity makes it the number of
    owners; resources are left out (what they force is what the largest nodes hold, no reason to open more)."""
    new = [b.capacity[first_counter:] for b in bins if not b.existing]
    if not new or sizes.shape[1] <= first_counter:
        return 0
    most = np.max(np.array(new, dtype=float), axis=0)
    total = demand.astype(float) @ sizes[:, first_counter:]
    held = most > 0
    return int(np.max(np.ceil(total[held] / most[held]), initial=0.0))


def size_floor(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, cpu_axis: int, first_counter: int
               ) -> int | None:
    """The smallest new-bin size on ``cpu_axis`` at which the nodes the rules force (``forced_nodes``) hold the
    batch's demand on that axis; None when that is the smallest size there is (nothing to close).

    Why: the construction judges a fill bin by bin. Where per-node counters force many nodes (one pod per node of
    a hostname anti-affinity group), it opens each as the smallest bin that holds its owner, fills that well,
    and opens other nodes for the rest; on a catalog whose sizes double (KWOK's) the forced nodes are then
    stranded half empty. Opening the forced nodes at the size that lets them take the batch avoids that
    (Karpenter's diverse mix on KWOK, 1,000 pods: 415 nodes, 17.35 $/h → 201 nodes, 15.14 $/h). None too where the
    next size down is within ``FINE_STEP`` of the floor."""
    forced = forced_nodes(bins, sizes, demand, first_counter)
    sizes_of = sorted({int(b.capacity[cpu_axis]) for b in bins if not b.existing})
    if len(sizes_of) < 2 or forced < 2:
        return None
    total = float(demand.astype(float) @ sizes[:, cpu_axis])
    floor = next((size for size in sizes_of if forced * size >= total), sizes_of[-1])
    below = [size for size in sizes_of if size < floor]
    if not below or below[-1] >= FINE_STEP * floor:
        return None  # the sizes step finely there: the plain construction already sizes the forced nodes closely
    return floor


def construct(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, limits: dict[tuple[int, str], int],
              deadline: float, finish_per_unit: float = 0.0, matrices: Matrices | None = None,
              existing: bool = True) -> dict[Pattern, int]:
    """Patterns covering as much of ``demand`` as the time allows (the caller places what is left, as a
    cut-short dive's rest is placed: ``greedy.finish_greedily``). ``finish_per_unit``: seconds the caller needs
    per unit left to place the rest; the construction stops while that still fits before ``deadline`` (so a
    cut-short construction is always finished in time: the deadline moves closer as fewer units are left).
    ``existing``: False when the existing nodes' room is already taken (``reconstruct``)."""
    remaining = demand.astype(np.int64).copy()
    units_left = int(remaining.sum())
    if time.monotonic() + finish_per_unit * units_left > deadline:
        return {}  # not even the set-up below (seconds at 50,000 pods) fits
    room = dict(limits)
    existing_left = {b.index: int(b.count or 0) if existing else 0 for b in bins if b.existing}
    m = matrices or Matrices.of(bins, sizes)
    costs, values, fit = m.costs, m.values, m.fit
    is_existing = [b.existing for b in bins]
    # each bin's worth (``_estimate``), kept up to date class by class: only the classes a pattern takes change
    live = np.flatnonzero(remaining)  # a re-build's demand is a few hundred of thousands of classes
    worth = np.minimum(fit[:, live], remaining[None, live]).astype(float) @ values[live]
    pricer = _Pricer(bins, sizes, values, fit)
    chosen: dict[Pattern, int] = {}
    last: tuple[float, int] | None = None  # the score and bin of the last pattern taken
    while units_left > 0:
        if time.monotonic() + finish_per_unit * units_left > deadline:
            return chosen
        listed = remaining.tolist()

        def price(i: int, remaining: np.ndarray = remaining, listed: list[int] = listed
                  ) -> tuple[float, int, np.ndarray] | None:
            """(cost per value, bin, pattern) of the best fill of bin ``i``, None if it can take nothing."""
            b = bins[i]
            if (b.existing and existing_left[i] <= 0) or (not b.existing and _limit_room(bins, limits, b, room) <= 0):
                return None
            counts = pricer.price(i, remaining, listed)
            value = float(values @ counts)
            return (b.cost / value, i, counts) if value > 0 else None

        # the bin just used, again, while it is still as good as it was: every bin's fill can only lose
        # value as the demand shrinks, so no other bin has become better than that score meanwhile
        best = price(last[1]) if last is not None else None
        if best is None or best[0] > last[0] * (1 + STICKY):  # type: ignore[index]
            order = _order(costs, worth)
            free_existing = list(islice((i for i in order if is_existing[i] and existing_left[i] > 0), SHORTLIST))
            shortlist = free_existing + list(islice((i for i in order if not is_existing[i]), SHORTLIST))
            best = None
            for i in shortlist:
                priced = price(i)
                if priced is not None and (best is None or priced[:2] < best[:2]):
                    best = priced
                if bins[i].existing:
                    break  # free capacity first, the way every other stage uses it
        if best is None:
            return chosen
        score, i, counts = best
        last = (score, i)
        b = bins[i]
        used = counts > 0
        copies = int(np.min(remaining[used] // counts[used]))
        copies = max(copies, 1)
        if b.existing:
            copies = min(copies, existing_left[i])
            existing_left[i] -= copies
        else:
            copies = min(copies, _limit_room(bins, limits, b, room))
            for (pool, name) in room:
                if b.pool_index == pool:
                    room[pool, name] -= copies * b.limit_use.get(name, 0)
        take = np.minimum(counts * copies, remaining)
        # the last copy may be partly empty: record the copies as they are filled
        full = int(np.min(remaining[used] // counts[used])) if used.any() else 0
        if full >= copies:
            pattern = Pattern(i, tuple(counts.tolist()))
            chosen[pattern] = chosen.get(pattern, 0) + copies
        else:
            left = remaining.copy()
            for _ in range(copies):
                part = np.minimum(counts, left)
                left -= part
                pattern = Pattern(i, tuple(part.tolist()))
                chosen[pattern] = chosen.get(pattern, 0) + 1
        for k in np.flatnonzero(take).tolist():
            column = fit[:, k]
            worth -= (np.minimum(column, remaining[k]) - np.minimum(column, remaining[k] - take[k])) * values[k]
        remaining -= take
        units_left -= int(take.sum())
    return chosen


class _Pricer:
    """``patterns.greedy_pricing`` for the construction, the same fills in less time: the construction's values
    are fixed and only which classes have demand left changes, so each bin's density orders (one per fill) are
    sorted once, less the classes it does not admit or hold even empty, and each fill keeps those with demand
    left — the order ``greedy_pricing`` sorts again from the live values at every call (thousands of classes
    made that sort, not the fill, the cost)."""

    def __init__(self, bins: list[Bin], sizes: np.ndarray, values: np.ndarray, fit: np.ndarray) -> None:
        self.bins, self.sizes, self.values, self.fit = bins, sizes, values, fit
        self.orders: dict[int, list[np.ndarray]] = {}
        self.axes: tuple[int | None, ...] = tuple(a for a in (None, 0, 1) if a is None or a < sizes.shape[1])

    def price(self, i: int, remaining: np.ndarray, listed: list[int]) -> np.ndarray:
        b = self.bins[i]
        orders = self.orders.get(i)
        if orders is None:
            holds = self.fit[i] > 0
            orders = self.orders[i] = [order[holds[order]] for order in (
                np.array(density_order(b, self.sizes, self.values, axis), dtype=np.int64) for axis in self.axes)]
        best = np.zeros(len(self.sizes), dtype=np.int64)
        best_value = 0.0
        for j, order in enumerate(orders):
            live = orders[j] = order[remaining[order] > 0]  # demand only shrinks: what ran out stays out
            counts = fill_listed(b.capacity.tolist(), self.sizes, listed, live.tolist())
            value = float(self.values @ counts)
            if value > best_value + 1e-9:
                best, best_value = counts, value
        return complete(b, self.sizes, remaining, best)


@dataclass
class SearchResult:
    chosen: dict[Pattern, int]
    improved: int
    iterations: int


def improve(bins: list[Bin], sizes: np.ndarray, incumbent: dict[Pattern, int], limits: dict[tuple[int, str], int],
            deadline: float, *, seed: int, max_iterations: int | None = None, deterministic: bool = True,
            values: np.ndarray | None = None, good_enough: float | None = None,
            stall: float | None = None, workers: int = 1) -> SearchResult:
    """Destroy-and-repack over ``incumbent``'s new nodes until ``deadline`` (or ``max_iterations``, or the new
    nodes cost at most ``good_enough`` micro-$/h: a plan within the caller's decision gap, or it stalls:
    ``solver.cpsat.stalled`` with ``stall`` seconds); the result is never
    dearer than the incumbent and schedules exactly the same units. ``values``: ``class_values`` when the caller
    has them. Each node's value is worked out once (10,000 greedy nodes over 4,603 classes: per iteration, that
    was seconds). ``workers`` neighbourhoods, disjoint, are re-packed at a time, each by its own one-worker
    CP-SAT (the solver releases the interpreter while it searches); every one that saves is kept."""
    rng = random.Random(seed)
    fixed = {p: n for p, n in incumbent.items() if bins[p.bin].existing}
    nodes = [p for p, n in sorted(incumbent.items(), key=lambda kv: pattern_order(kv[0]))
             if not bins[p.bin].existing for _ in range(n)]
    if values is None:
        values = class_values(bins, sizes)
    listed_values = values.tolist()

    def waste_of(p: Pattern) -> float:
        """$/h per unit of value the node holds (the worst filled are destroyed first)."""
        value = float(sum(listed_values[k] * p.counts[k] for k in compress(range(len(p.counts)), p.counts)))
        return float(bins[p.bin].cost) / max(value, 1e-9)

    node_waste = [waste_of(p) for p in nodes]

    def pick(kind: int, k: int, taken: set[int]) -> list[int]:
        free = [i for i in range(len(nodes)) if i not in taken]
        if kind == 1:  # the worst-filled nodes (cost per unit of value), ties broken at random
            waste = [(node_waste[i], rng.random(), i) for i in free]
            start = rng.randrange(max(1, min(len(free) - k + 1, 3)))
            return [i for _, _, i in heapq.nlargest(start + k, waste)[start:start + k]]
        if kind == 2:
            return _related(bins, nodes, node_waste, k, rng, taken)
        return rng.sample(free, k)

    def repack(picked: list[int], number: int, left: float) -> tuple[list[int], int, CompactResult]:
        destroyed = [nodes[i] for i in picked]
        freed = np.sum([p.array() for p in destroyed], axis=0)
        old_cost = sum(bins[p.bin].cost for p in destroyed)
        gone = set(picked)
        used = _limit_use(bins, limits, [p for i, p in enumerate(nodes) if i not in gone]) if limits else {}
        room = {key: left - used[key] for key, left in limits.items()}
        slots: dict[int, int] = {}
        for p in destroyed:
            slots[p.bin] = slots.get(p.bin, 0) + 1
        for b in _ranked_bins(new_bins, sizes, values, freed)[:4]:
            slots[b] = max(slots.get(b, 0), min(len(picked), 2))
        hint: dict[Pattern, int] = {}
        for p in destroyed:
            hint[p] = hint.get(p, 0) + 1
        return picked, old_cost, solve_compact(
            bins, sizes, freed, room, slots, time_limit=min(REPACK_SECONDS, 0.5 * left), seed=seed + number,
            workers=1, deterministic=deterministic, cost_below=old_cost, hint=hint)

    new_bins = [b for b in bins if not b.existing]
    improved = iterations = failures = 0
    cost = sum(bins[p.bin].cost for p in nodes)
    started = last = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lns") if workers > 1 else None
    try:
        while nodes and (max_iterations is None or iterations < max_iterations):
            now = time.monotonic()
            left = deadline - now
            if left <= 0.05 or (good_enough is not None and cost <= good_enough):
                break
            if stall is not None and stalled(started, last, now, stall):
                break
            taken: set[int] = set()
            jobs: list[tuple[list[int], int]] = []
            for _ in range(max(workers, 1)):
                k = min(NEIGHBOURHOODS[iterations % len(NEIGHBOURHOODS)], len(nodes) - len(taken))
                if (jobs and k < 2) or k < 1 or (max_iterations is not None and iterations >= max_iterations):
                    break
                iterations += 1
                picked = pick(iterations % 3, k, taken)
                taken.update(picked)
                jobs.append((picked, iterations))
            if pool is None or len(jobs) == 1:
                outcomes = [repack(picked, number, left) for picked, number in jobs]
            else:
                outcomes = list(pool.map(repack, [p for p, _ in jobs], [n for _, n in jobs], [left] * len(jobs)))
            kept = _kept_repacks(bins, limits, nodes, outcomes)
            failures = 0 if kept else failures + len(outcomes)
            gone = {i for picked, _, _ in kept for i in picked}
            added = [p for _, new, _ in kept for p in new]
            improved += len(kept)
            cost -= sum(saving for _, _, saving in kept)
            if gone:
                last = time.monotonic()
                node_waste = [w for i, w in enumerate(node_waste) if i not in gone] + [waste_of(p) for p in added]
                nodes = [p for i, p in enumerate(nodes) if i not in gone] + added
            elif len(nodes) <= max(NEIGHBOURHOODS) and failures >= 2 * len(NEIGHBOURHOODS):
                break  # the neighbourhoods already span the whole plan: nothing left to find
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    chosen = dict(fixed)
    for p in nodes:
        chosen[p] = chosen.get(p, 0) + 1
    return SearchResult(chosen=chosen, improved=improved, iterations=iterations)


def _kept_repacks(bins: list[Bin], limits: dict[tuple[int, str], int], nodes: list[Pattern],
                  outcomes: list[tuple[list[int], int, CompactResult]]) -> list[tuple[list[int], list[Pattern], int]]:
    """The re-packs of one round that are kept, in order: (destroyed positions, new nodes, saving). A re-pack is
    kept when it is cheaper than the nodes it destroyed and, beside those kept before it, the plan still fits
    the NodePool limits (each was solved beside the others' old nodes: two that grow could not both fit)."""
    kept: list[tuple[list[int], list[Pattern], int]] = []
    gone: set[int] = set()
    for picked, old_cost, result in outcomes:
        if result.chosen is None or result.cost is None or result.cost >= old_cost:
            continue
        new = [p for p, n in sorted(result.chosen.items(), key=lambda kv: pattern_order(kv[0])) for _ in range(n)]
        if limits and kept:
            after = [p for i, p in enumerate(nodes) if i not in gone and i not in picked]
            if not _within_limits(bins, limits, after + [p for _, added, _ in kept for p in added] + new):
                continue
        kept.append((picked, new, old_cost - result.cost))
        gone.update(picked)
    return kept


def _within_limits(bins: list[Bin], limits: dict[tuple[int, str], int], nodes: list[Pattern]) -> bool:
    """Do ``nodes`` together stay within the NodePool ``limits`` left for new nodes?"""
    used = _limit_use(bins, limits, nodes)
    return all(used[key] <= left for key, left in limits.items())


def _limit_use(bins: list[Bin], limits: dict[tuple[int, str], int], nodes: list[Pattern]) -> dict[tuple[int, str], int]:
    """What ``nodes`` count against each limited (NodePool, resource)."""
    used = dict.fromkeys(limits, 0)
    for p in nodes:
        b = bins[p.bin]
        for (pool, name) in used:
            if b.pool_index == pool:
                used[pool, name] += b.limit_use.get(name, 0)
    return used


def _related(bins: list[Bin], nodes: list[Pattern], waste: list[float], k: int, rng: random.Random,
             taken: set[int] | None = None) -> list[int]:
    """``_related_draw`` over patterns: a node's bin admits the other's classes."""
    held = [np.flatnonzero(p.array()) for p in nodes]
    return _related_draw(held, lambda i, classes: bool(bins[nodes[i].bin].compatible[classes].all()), waste, k, rng,
                         taken or set())


def _related_draw(held: list[np.ndarray], admits: Callable[[int, np.ndarray], bool], waste: list[float], k: int,
                  rng: random.Random, taken: set[int]) -> list[int]:
    """One of the three worst-filled nodes not ``taken`` and ``k - 1`` drawn among the others whose pods could
    trade places with its own: each admits the other's classes (``held[i]``; ``admits(i, classes)``), i.e. the
    same zone and pool where pins and selectors say so. Random draws mostly pair nodes that cannot exchange pods
    — another zone's, a pinned class's — and re-pack nothing."""
    free = [i for i in range(len(held)) if i not in taken]
    seed = rng.choice(heapq.nlargest(min(3, len(free)), free, key=waste.__getitem__))
    related = [i for i in free if i != seed and admits(i, held[seed]) and admits(seed, held[i])]
    return [seed, *rng.sample(related, min(k - 1, len(related)))]


def reconstruct(problem: Problem, bins: list[Bin], placement: Placement, limits: dict[tuple[int, str], int],
                deadline: float, *, seed: int, max_iterations: int | None = None, matrices: Matrices | None = None
                ) -> tuple[Placement, int, int]:
    """Large-neighbourhood search whose repair is the construction: destroy a share of the new nodes (a random
    draw among the worst filled, then a random draw among all, in turn), build patterns for their pods with
    ``construct`` over every new bin, and keep the new nodes when they hold all those pods for less. On 10,000
    greedy nodes one CP-SAT re-pack of a dozen nodes (``improve``) moves the cost by about 0.01 %; re-building a
    few hundred at a time with the construction's fills is what a cut-short construction would have done to
    them. Works on the placement itself (a pattern lists every class: 4,603 of them at 50,000 diverse pods), so
    each step costs what its own nodes do. Existing nodes are kept as they are. Returns (the placement, the
    steps that improved it, the steps). ``matrices``: the construction's, when the plan came from a floored one
    (``Matrices.floored``): its nodes are re-built the way they were built."""
    rng = random.Random(seed)
    class_of = problem.class_of()
    units = [c.unit for c in problem.classes]
    matrices = matrices or Matrices.of(bins, problem.sizes)
    listed_values = matrices.values.tolist()
    prices = [t.price_micros for t in problem.templates]
    pool_of = {pool.name: i for i, pool in enumerate(problem.pools)}
    nodes = list(placement.new_nodes)

    def waste_of(node: NewNode) -> float:
        """$/h per unit of value the node holds (a bundle's value is its unit's, counted once per pod)."""
        value = sum(listed_values[class_of[p.key]] / units[class_of[p.key]] for p in node.pods)
        return float(prices[node.template]) / max(float(value), 1e-9)

    def use_of(node: NewNode) -> dict[tuple[int, str], int]:
        template = problem.templates[node.template]
        pool = pool_of[template.pool.name]
        return {(pool, name): template.limit_use.get(name, 0) for (p, name) in limits if p == pool}

    used: dict[tuple[int, str], int] = dict.fromkeys(limits, 0)
    for node in nodes:
        for key, amount in use_of(node).items():
            used[key] += amount
    waste = [waste_of(node) for node in nodes]
    improved = iterations = 0
    while nodes and (max_iterations is None or iterations < max_iterations) and time.monotonic() < deadline - 0.05:
        iterations += 1
        k = min(max(RECONSTRUCT_MIN_NODES, int(len(nodes) * RECONSTRUCT_SHARE)), len(nodes))
        kind = iterations % 3
        if kind == 1:
            worst = heapq.nlargest(min(2 * k, len(nodes)), range(len(nodes)), key=waste.__getitem__)
            picked = sorted(rng.sample(worst, k))
        elif kind == 2:
            picked = sorted(_related_nodes(problem, nodes, waste, k, rng, class_of))
        else:
            picked = sorted(rng.sample(range(len(nodes)), k))
        destroyed = [nodes[i] for i in picked]
        freed_pods = [p for node in destroyed for p in node.pods]
        freed = np.zeros(len(problem.classes), dtype=np.int64)
        for pod in freed_pods:
            freed[class_of[pod.key]] += 1
        freed //= np.array(units, dtype=np.int64)
        room = dict(limits)
        for key in room:
            room[key] -= used[key] - sum(use_of(node).get(key, 0) for node in destroyed)
        chosen = construct(bins, problem.sizes, freed, room, deadline, matrices=matrices, existing=False)
        rebuilt = decode(problem, bins, chosen, freed_pods)
        if rebuilt.unschedulable or rebuilt.existing or \
                sum(prices[n.template] for n in rebuilt.new_nodes) >= sum(prices[n.template] for n in destroyed):
            continue  # cut short by the deadline, or no cheaper
        improved += 1
        for node in destroyed:
            for key, amount in use_of(node).items():
                used[key] -= amount
        for node in rebuilt.new_nodes:
            for key, amount in use_of(node).items():
                used[key] += amount
        gone = set(picked)
        waste = [w for i, w in enumerate(waste) if i not in gone] + [waste_of(n) for n in rebuilt.new_nodes]
        nodes = [n for i, n in enumerate(nodes) if i not in gone] + rebuilt.new_nodes
    out = Placement(new_nodes=nodes, existing={e: list(pods) for e, pods in placement.existing.items()},
                    unschedulable=list(placement.unschedulable))
    return out, improved, iterations


def _related_nodes(problem: Problem, nodes: list[NewNode], waste: list[float], k: int, rng: random.Random,
                   class_of: dict[str, int]) -> list[int]:
    """``_related_draw`` over placed nodes: a node's template admits the other's classes."""
    held = [np.unique(np.fromiter((class_of[p.key] for p in node.pods), np.int64, len(node.pods))) for node in nodes]
    ok = problem.template_ok
    return _related_draw(held, lambda i, classes: bool(ok[classes, nodes[i].template].all()), waste, k, rng, set())


def _ranked_bins(bins: list[Bin], sizes: np.ndarray, values: np.ndarray, demand: np.ndarray) -> list[int]:
    """New bins by cost per unit of the value they could hold of ``demand`` (best first): a vectorised
    estimate over every bin, then exact density fills on the best ``SHORTLIST``."""
    if not bins:
        return []
    capacity = np.array([b.capacity for b in bins], dtype=float)
    costs = np.array([float(b.cost) for b in bins])
    compatible = np.array([b.compatible for b in bins], dtype=bool).reshape(len(bins), len(demand))
    order = [bins[i].index for i in _estimate(capacity, costs, compatible, sizes, values, demand)[:SHORTLIST]]
    by_index = {b.index: b for b in bins}
    out = []
    for i in order:
        counts = greedy_pricing(by_index[i], sizes, np.where(demand > 0, values, 0.0), demand)
        value = float(values @ counts)
        if value > 0:
            out.append((by_index[i].cost / value, i))
    out.sort()
    return [i for _, i in out]


def _estimate(capacity: np.ndarray, costs: np.ndarray, compatible: np.ndarray, sizes: np.ndarray,
              values: np.ndarray, demand: np.ndarray) -> list[int]:
    """Positions of the bins that can hold some of ``demand``, cheapest per unit of the most valuable
    single class they could hold (a cheap proxy for a full fill)."""
    live = demand > 0
    held = copies_matrix(capacity.astype(np.int64), sizes[live]).T * compatible[:, live]
    return _order(costs, np.minimum(held, demand[live][None, :]).astype(float) @ values[live])


def _order(costs: np.ndarray, worth: np.ndarray) -> list[int]:
    """``_estimate``'s order from each bin's worth (the value of what it could hold of the demand)."""
    worth = np.where(worth > 1e-9, worth, 0.0)  # a worth kept up to date may drift by rounding, not to a bin
    ratio = np.where(worth > 0, costs / np.maximum(worth, 1e-12), np.inf)
    by_ratio = np.argsort(ratio, kind="stable")
    cheap = by_ratio[np.isfinite(ratio[by_ratio])].tolist()
    # the proxy favours bins just big enough for everything; the largest bins pack best: take both
    by_cost = np.argsort(-costs, kind="stable")
    large = by_cost[worth[by_cost] > 0].tolist()
    half = SHORTLIST // 2
    return list(dict.fromkeys(cheap[:half] + large[:half] + cheap[half:]))
