"""The compact node-slot model: each slot is one node of a bin, with an integer count per pod class.

It is exact for the slots it is given, so it serves twice: over dual-filtered slots it proves a plan
optimal (``proof``), and over the LP's support plus a little slack it completes LP rounding (``rounding``).
Slots of one bin are interchangeable, so they are used in order and hold non-increasing pod counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solver.bins import Bin
from solver.cpsat import CpModel, make_solver, solve_stopping
from solver.patterns import Pattern, node_limit


@dataclass
class CompactResult:
    status: str
    chosen: dict[Pattern, int] | None
    cost: int | None


def solve_compact(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, limits: dict[tuple[int, str], int],
                  slots: dict[int, int], *, time_limit: float, seed: int, workers: int, deterministic: bool,
                  cost_below: int | None = None, cost_at_least: float = 0.0,
                  extra: Callable[[cp_model.CpModel, dict[tuple[int, int], cp_model.IntVar]], None] | None = None,
                  hint: dict[Pattern, int] | None = None, good_enough: int | None = None) -> CompactResult:
    """Cover ``demand`` exactly with at most ``slots[b]`` nodes of each bin, at least cost; with
    ``good_enough``, the search stops at the first plan costing no more (the caller's decision gap is met)."""
    model = CpModel()
    ks = [k for k in range(len(demand)) if demand[k] > 0]
    used: dict[tuple[int, int], cp_model.IntVar] = {}
    count: dict[tuple[int, int, int], cp_model.IntVar] = {}
    for b_index, n in slots.items():
        b = bins[b_index]
        caps = {k: node_limit(b, sizes, demand, k) for k in ks if b.compatible[k]}
        caps = {k: c for k, c in caps.items() if c > 0}
        if not caps:
            continue
        for s in range(n):
            u = model.new_bool_var(f"used_b{b_index}_s{s}")
            used[b_index, s] = u
            mine = {k: model.new_int_var(0, c, f"n_b{b_index}_s{s}_c{k}") for k, c in caps.items()}
            for k, v in mine.items():
                count[b_index, s, k] = v
            for r in range(sizes.shape[1]):
                terms = [int(sizes[k, r]) * v for k, v in mine.items() if sizes[k, r]]
                if terms:
                    model.add(sum(terms) <= int(b.capacity[r]) * u)
            model.add(sum(mine.values()) >= 1).only_enforce_if(u)
            if s:
                model.add_implication(u, used[b_index, s - 1])
                prev = [count[b_index, s - 1, k] for k in mine]
                model.add(sum(prev) >= sum(mine.values()))
    for k in ks:
        model.add(sum(v for (b, s, kk), v in count.items() if kk == k) == int(demand[k]))
    # aggregate capacity cuts: implied, but they give CP-SAT's LP relaxation the bin-packing bound
    for r in range(sizes.shape[1]):
        need = int(sum(int(demand[k]) * int(sizes[k, r]) for k in ks))
        if need:
            model.add(sum(int(bins[b].capacity[r]) * u for (b, s), u in used.items()) >= need)
    for (pool, name), rem in limits.items():
        terms = [bins[b].limit_use.get(name, 0) * u for (b, s), u in used.items()
                 if bins[b].pool_index == pool and bins[b].limit_use.get(name, 0)]
        if terms:
            model.add(sum(terms) <= max(rem, 0))
    cost = sum(bins[b].cost * u for (b, s), u in used.items())
    if cost_below is not None:
        model.add(cost <= cost_below - 1)
    if cost_at_least > 0:
        model.add(cost >= math.floor(cost_at_least - 1e-6 * max(cost_at_least, 1.0)))
    if extra:
        extra(model, used)
    if hint:
        _add_hint(model, bins, hint, used, count)
    model.minimize(cost)
    solver = make_solver(time_limit, seed, workers, deterministic)
    if good_enough is None:
        status = solver.solve(model)
    else:  # ends the search at the first solution costing at most ``good_enough``
        status, _ = solve_stopping(solver, model, lambda value: value <= good_enough + 0.5)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CompactResult(status=name, chosen=None, cost=None)
    chosen: dict[Pattern, int] = {}
    for (b_index, slot), u in used.items():
        if solver.value(u):
            counts = tuple(int(solver.value(count[b_index, slot, k])) if (b_index, slot, k) in count else 0
                           for k in range(len(demand)))
            pattern = Pattern(b_index, counts)
            chosen[pattern] = chosen.get(pattern, 0) + 1
    return CompactResult(status=name, chosen=chosen, cost=int(solver.objective_value))


def _add_hint(model: cp_model.CpModel, bins: list[Bin], hint: dict[Pattern, int],
              used: dict[tuple[int, int], cp_model.IntVar], count: dict[tuple[int, int, int], cp_model.IntVar]
              ) -> None:
    """Hint a known plan, its nodes sorted per bin the way the symmetry constraints want them."""
    per_bin: dict[int, list[tuple[int, ...]]] = {}
    for pattern, n in hint.items():
        per_bin.setdefault(pattern.bin, []).extend([pattern.counts] * n)
    for (b, s), u in used.items():
        nodes = sorted(per_bin.get(b, []), key=lambda c: -sum(c))
        model.add_hint(u, s < len(nodes))
    for (b, s, k), v in count.items():
        nodes = sorted(per_bin.get(b, []), key=lambda c: -sum(c))
        model.add_hint(v, nodes[s][k] if s < len(nodes) else 0)
