"""Patterns: one node's worth of pods (counts per class) on one bin, and the knapsacks that find them.

Column generation asks, for dual values per class, which pattern on each bin is worth most. That is a
bounded multi-dimensional knapsack; a density-ordered fill answers fast and usually well, and a small
CP-SAT model answers exactly (or with a proven upper bound) when the fill finds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solver.bins import Bin
from solver.cpsat import CpModel

VALUE_SCALE = 1_000  # duals are in micro-dollars already; 1e-3 of that is plenty


@dataclass(frozen=True)
class Pattern:
    bin: int
    counts: tuple[int, ...]

    def array(self) -> np.ndarray:
        return np.array(self.counts, dtype=np.int64)


def max_copies(capacity: np.ndarray, size: np.ndarray) -> int:
    """How many pods of this size fit in this capacity, alone."""
    return _copies(capacity.tolist(), size.tolist())


def copies_matrix(capacity: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``max_copies`` for every (class, bin) pair at once, shape (K, B): one numpy pass per resource
    instead of K × B Python calls (1,000 classes × 1,200 bins at 20,000 pods)."""
    out = np.full((sizes.shape[0], capacity.shape[0]), 1 << 30, dtype=np.int64)
    for r in range(sizes.shape[1]):
        size = sizes[:, r]
        paid = size > 0
        if not paid.any():
            continue
        fits = capacity[None, :, r] // np.where(paid, size, 1)[:, None]
        out = np.where(paid[:, None], np.minimum(out, fits), out)
    result: np.ndarray = np.maximum(out, 0)
    return result


def node_limit(b: Bin, sizes: np.ndarray, demand: np.ndarray, k: int) -> int:
    """Most units of class ``k`` one node of ``b`` can take: its demand, and what fits (per-node rules are
    resource dimensions too, see ``rules/counters.py``)."""
    return min(int(demand[k]), max_copies(b.capacity, sizes[k]))


def _copies(free: list[int], size: list[int]) -> int:
    best = 1 << 30
    for f, z in zip(free, size, strict=True):
        if z > 0:
            if f < z:
                return 0
            best = min(best, f // z)
    return best


_SPARSE: list[tuple[np.ndarray, list[list[tuple[int, int]]], list[tuple[int, int]]]] = []


def sparse_rows(sizes: np.ndarray) -> list[list[tuple[int, int]]]:
    """Each class's non-zero (axis, size) pairs, for the last ``sizes`` array seen: a class uses 3–5 of a
    dozen axes (most per-node counters are zero), and pricing asks "how many fit" millions of times."""
    return _sparse(sizes)[1]


def _floors(sizes: np.ndarray) -> list[tuple[int, int]]:
    """(axis, smallest size) for every axis each class uses (cpu, memory, pods for most batches): a node
    whose room on one of them is below the smallest size can take no class at all."""
    return _sparse(sizes)[2]


def _sparse(sizes: np.ndarray) -> tuple[np.ndarray, list[list[tuple[int, int]]], list[tuple[int, int]]]:
    if not _SPARSE or _SPARSE[0][0] is not sizes:
        rows = [[(r, z) for r, z in enumerate(row) if z > 0] for row in sizes.tolist()]
        floors = [(r, int(sizes[:, r].min())) for r in range(sizes.shape[1])
                  if len(sizes) and bool(np.all(sizes[:, r] > 0))]
        _SPARSE[:] = [(sizes, rows, floors)]
    return _SPARSE[0]


def _full(free: list[int], floors: list[tuple[int, int]]) -> bool:
    return any(free[r] < z for r, z in floors)


def _fits(free: list[int], row: list[tuple[int, int]]) -> int:
    best = 1 << 30
    for r, z in row:
        f = free[r]
        if f < z:
            return 0
        if f // z < best:
            best = f // z
    return best


def _take(free: list[int], row: list[tuple[int, int]], n: int) -> None:
    for r, z in row:
        free[r] -= n * z


def fill(b: Bin, sizes: np.ndarray, values: np.ndarray, limit: np.ndarray, order: list[int]) -> np.ndarray:
    """Greedy fill of ``b`` taking classes in ``order``, each up to ``limit``."""
    compatible = b.compatible.tolist()
    return fill_listed(b.capacity.tolist(), sizes, limit.tolist(), [k for k in order if compatible[k]])


def fill_listed(free: list[int], sizes: np.ndarray, limits: list[int], order: list[int]) -> np.ndarray:
    """``fill`` on plain lists (``free`` is used up): classes in ``order`` (all admitted), each up to
    ``limits``. Callers that fill many bins against one demand convert it to a list once; thousands of
    classes make those conversions, not the fill, the cost."""
    _, rows, floors = _sparse(sizes)
    taken: list[int] = []
    amounts: list[int] = []
    for k in order:
        n = int(limits[k])
        # ``_fits`` inlined, capped at the limit: this loop visits millions of classes at 50,000 pods
        for r, z in rows[k]:
            f = free[r]
            if f < z:
                n = 0
                break
            if f // z < n:
                n = f // z
        if n > 0:
            taken.append(k)
            amounts.append(n)
            _take(free, rows[k], n)
            if _full(free, floors):
                break
    counts = np.zeros(len(rows), dtype=np.int64)
    counts[taken] = amounts
    return counts


def density_order(b: Bin, sizes: np.ndarray, values: np.ndarray, axis: int | None = None) -> list[int]:
    """Classes by value per unit of size: of one resource (``axis``) or of the normalised sum."""
    cap = np.maximum(b.capacity, 1).astype(float)
    scaled = sizes / cap
    weight = scaled.sum(axis=1) if axis is None else scaled[:, axis]
    density = np.where(weight > 0, values / np.maximum(weight, 1e-12), np.inf)
    order = np.argsort(-density, kind="stable")
    order = order[((values > 0) & b.compatible)[order]]
    result: list[int] = order.tolist()
    return result


def greedy_pricing(b: Bin, sizes: np.ndarray, values: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Best of a few density-ordered fills (normalised size, then each of cpu and memory)."""
    best = np.zeros(len(sizes), dtype=np.int64)
    best_value = 0.0
    for axis in (None, 0, 1):
        if axis is not None and axis >= sizes.shape[1]:
            continue
        counts = fill(b, sizes, values, demand, density_order(b, sizes, values, axis))
        value = float(values @ counts)
        if value > best_value + 1e-9:
            best, best_value = counts, value
    return complete(b, sizes, demand, best)


def complete(b: Bin, sizes: np.ndarray, demand: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Top a pattern up with any class that still fits (a maximal pattern never costs more)."""
    _, rows, floors = _sparse(sizes)
    free = (b.capacity - counts @ sizes).tolist()
    out = counts.tolist()
    room = (demand - counts).tolist()
    if _full(free, floors):
        return counts
    for k in np.flatnonzero(b.compatible & (counts < demand)).tolist():
        n = min(int(room[k]), _fits(free, rows[k]))
        if n > 0:
            out[k] += n
            _take(free, rows[k], n)
            if _full(free, floors):
                break
    return np.array(out, dtype=np.int64)


def fractional_upper_bound(b: Bin, sizes: np.ndarray, values: np.ndarray, demand: np.ndarray) -> float:
    """An upper bound on any pattern's value on ``b``: the fractional knapsack of the tightest resource.

    Each resource alone is a relaxation, so the smallest of their fractional optima bounds the knapsack.
    It is cheap, and when it already shows a bin cannot improve the LP, the exact model is skipped.
    """
    ks = [k for k in range(len(sizes)) if b.compatible[k] and values[k] > 0 and demand[k] > 0]
    if not ks:
        return 0.0
    upper = np.array([node_limit(b, sizes, demand, k) for k in ks], dtype=float)
    vals = values[ks]
    best = float(vals @ upper)
    for r in range(sizes.shape[1]):
        size = sizes[ks, r].astype(float)
        if not np.any(size > 0):
            continue
        free_items = size == 0
        bound = float(vals[free_items] @ upper[free_items])
        room = float(b.capacity[r])
        paid = np.flatnonzero(~free_items)
        for j in paid[np.argsort(-(vals[paid] / size[paid]), kind="stable")]:
            take = min(upper[j], room / size[j])
            bound += take * vals[j]
            room -= take * size[j]
            if room <= 0:
                break
        best = min(best, bound)
    return best


def exact_pricing(b: Bin, sizes: np.ndarray, values: np.ndarray, demand: np.ndarray,
                  time_limit: float = 1.0, work_limit: float | None = None, gap_limit: float = 0.0
                  ) -> tuple[np.ndarray, float]:
    """Best pattern for these values and an upper bound on its value (equal when proven optimal).

    ``work_limit`` caps the search in CP-SAT's deterministic time, so the same knapsack gives the same answer
    however loaded the machine is (a wall-clock cap made plans of the same input differ under load);
    ``time_limit`` (wall seconds) is only the outer guard of the caller's deadline. ``gap_limit`` (in value
    units) stops the search once the bound is that close to the best pattern: the bound stays valid, only
    less tight."""
    model = CpModel()
    ks = [k for k in range(len(sizes)) if b.compatible[k] and values[k] > 0 and demand[k] > 0]
    if not ks:
        return np.zeros(len(sizes), dtype=np.int64), 0.0
    x = {k: model.new_int_var(0, node_limit(b, sizes, demand, k), f"a_{k}") for k in ks}
    for r in range(sizes.shape[1]):
        terms = [(int(sizes[k, r]), x[k]) for k in ks if sizes[k, r] > 0]
        if terms:
            model.add(sum(c * v for c, v in terms) <= int(b.capacity[r]))
    scaled = {k: round(values[k] * VALUE_SCALE) for k in ks}
    model.maximize(sum(scaled[k] * x[k] for k in ks))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    if work_limit is not None:
        solver.parameters.max_deterministic_time = work_limit
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    # presolve costs more than it saves on a knapsack of a few dozen variables: without it 395 pricing calls of
    # two recorded aws-like batches took 4.7 ms each instead of 7.3, every answer and bound the same
    solver.parameters.cp_model_presolve = False
    if gap_limit > 0:
        solver.parameters.absolute_gap_limit = gap_limit * VALUE_SCALE
    status = solver.solve(model)
    counts = np.zeros(len(sizes), dtype=np.int64)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return counts, float("inf")
    for k in ks:
        counts[k] = solver.value(x[k])
    # the scaled objective rounds each value; add the worst rounding error so the bound stays valid
    slack = sum(node_limit(b, sizes, demand, k) for k in ks) * 0.5 / VALUE_SCALE
    return counts, solver.best_objective_bound / VALUE_SCALE + slack
