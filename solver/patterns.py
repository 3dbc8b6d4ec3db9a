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

VALUE_SCALE = 1_000_000


@dataclass(frozen=True)
class Pattern:
    bin: int
    counts: tuple[int, ...]

    def array(self) -> np.ndarray:
        return np.array(self.counts, dtype=np.int64)


def max_copies(capacity: np.ndarray, size: np.ndarray) -> int:
    """How many pods of this size fit in this capacity, alone."""
    used = size > 0
    if np.any(capacity[used] < 0):
        return 0
    if not used.any():
        return 1 << 30
    return int(np.min(capacity[used] // size[used]))


def fill(b: Bin, sizes: np.ndarray, values: np.ndarray, limit: np.ndarray, order: list[int]) -> np.ndarray:
    """Greedy fill of ``b`` taking classes in ``order``, each up to ``limit``."""
    counts = np.zeros(len(sizes), dtype=np.int64)
    free = b.capacity.copy()
    for k in order:
        if limit[k] <= 0 or not b.compatible[k]:
            continue
        n = min(int(limit[k]), max_copies(free, sizes[k]))
        if n > 0:
            counts[k] = n
            free -= n * sizes[k]
    return counts


def density_order(b: Bin, sizes: np.ndarray, values: np.ndarray) -> list[int]:
    cap = np.maximum(b.capacity, 1).astype(float)
    weight = (sizes / cap).sum(axis=1)
    density = np.where(weight > 0, values / np.maximum(weight, 1e-12), 0.0)
    return [int(k) for k in np.argsort(-density, kind="stable") if values[k] > 0 and b.compatible[k]]


def greedy_pricing(b: Bin, sizes: np.ndarray, values: np.ndarray, demand: np.ndarray) -> np.ndarray:
    order = density_order(b, sizes, values)
    counts = fill(b, sizes, values, demand, order)
    return complete(b, sizes, demand, counts)


def complete(b: Bin, sizes: np.ndarray, demand: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Top a pattern up with any class that still fits (a maximal pattern never costs more)."""
    free = b.capacity - counts @ sizes
    out = counts.copy()
    for k in range(len(sizes)):
        if b.compatible[k] and out[k] < demand[k]:
            n = min(int(demand[k] - out[k]), max_copies(free, sizes[k]))
            if n > 0:
                out[k] += n
                free -= n * sizes[k]
    return out


def exact_pricing(b: Bin, sizes: np.ndarray, values: np.ndarray, demand: np.ndarray,
                  time_limit: float = 1.0) -> tuple[np.ndarray, float]:
    """Best pattern for these values and an upper bound on its value (equal when proven optimal)."""
    model = cp_model.CpModel()
    ks = [k for k in range(len(sizes)) if b.compatible[k] and values[k] > 0 and demand[k] > 0]
    if not ks:
        return np.zeros(len(sizes), dtype=np.int64), 0.0
    x = {k: model.new_int_var(0, min(int(demand[k]), max_copies(b.capacity, sizes[k])), f"a_{k}") for k in ks}
    for r in range(sizes.shape[1]):
        terms = [(int(sizes[k, r]), x[k]) for k in ks if sizes[k, r] > 0]
        if terms:
            model.add(sum(c * v for c, v in terms) <= int(b.capacity[r]))
    scaled = {k: int(round(values[k] * VALUE_SCALE)) for k in ks}
    model.maximize(sum(scaled[k] * x[k] for k in ks))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.solve(model)
    counts = np.zeros(len(sizes), dtype=np.int64)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return counts, float("inf")
    for k in ks:
        counts[k] = solver.value(x[k])
    # the scaled objective rounds each value; add the worst rounding error so the bound stays valid
    slack = sum(min(int(demand[k]), max_copies(b.capacity, sizes[k])) for k in ks) * 0.5 / VALUE_SCALE
    return counts, solver.best_objective_bound / VALUE_SCALE + slack
