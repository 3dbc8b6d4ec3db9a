"""Proving a plan optimal (or finding a better one) with a compact CP-SAT model cut down by duals.

After column generation converges, every pattern's reduced cost is at least the floor found for its bin,
and any plan costs at least ``LP + Σ_b floor_b · n_b`` (n_b = nodes on bin b). So a plan cheaper than the
incumbent can only use bins and node counts with ``Σ_b floor_b · n_b < incumbent − LP``. That leaves few
node slots on small batches; the compact model (slot used?, pods per class per slot) over them is exact:
INFEASIBLE below the incumbent proves it optimal, a solution improves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solver.bins import Bin
from solver.cpsat import make_solver
from solver.patterns import Pattern, max_copies

SCALE = 1000


@dataclass
class ProofResult:
    proven: bool
    improved: dict[Pattern, int] | None
    slots: int
    status: str


def slot_bounds(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, floors: dict[int, float], gap: float,
                incumbent_cost: int) -> dict[int, int]:
    """How many nodes of each bin a strictly cheaper plan could use."""
    out = {}
    for b in bins:
        holds = [k for k in range(len(demand)) if demand[k] and b.compatible[k] and max_copies(b.capacity, sizes[k])]
        if not holds:
            continue
        n = b.count if b.count is not None else int(sum(int(demand[k]) for k in holds))
        if b.cost > 0:
            n = min(n, incumbent_cost // b.cost)
        floor = floors.get(b.index, 0.0)
        if floor > 1e-9:
            n = min(n, math.floor(gap / floor + 1e-9))
        if n > 0:
            out[b.index] = n
    return out


def prove(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, limits: dict[tuple[int, str], int],
          floors: dict[int, float], lp_value: float, incumbent: dict[Pattern, int], incumbent_cost: int,
          time_limit: float, seed: int, workers: int, deterministic: bool, max_slots: int = 600) -> ProofResult:
    gap = incumbent_cost - lp_value
    if gap <= 0.5:
        return ProofResult(proven=True, improved=None, slots=0, status="BOUND")
    bounds = slot_bounds(bins, sizes, demand, floors, gap, incumbent_cost)
    slots = sum(bounds.values())
    if slots > max_slots:
        return ProofResult(proven=False, improved=None, slots=slots, status="TOO_LARGE")
    model = cp_model.CpModel()
    ks = [k for k in range(len(demand)) if demand[k] > 0]
    used: dict[tuple[int, int], cp_model.IntVar] = {}
    count: dict[tuple[int, int, int], cp_model.IntVar] = {}
    for b_index, n in bounds.items():
        b = bins[b_index]
        for s in range(n):
            u = model.new_bool_var(f"used_b{b_index}_s{s}")
            used[b_index, s] = u
            for k in ks:
                if b.compatible[k]:
                    cap = min(int(demand[k]), max_copies(b.capacity, sizes[k]))
                    if cap > 0:
                        count[b_index, s, k] = model.new_int_var(0, cap, f"n_b{b_index}_s{s}_c{k}")
            for r in range(sizes.shape[1]):
                terms = [int(sizes[k, r]) * v for (bb, ss, k), v in count.items()
                         if bb == b_index and ss == s and sizes[k, r]]
                if terms:
                    model.add(sum(terms) <= int(b.capacity[r]) * u)
            if s:
                model.add_implication(u, used[b_index, s - 1])
                first = [v for (bb, ss, k), v in count.items() if bb == b_index and ss == s]
                prev = [v for (bb, ss, k), v in count.items() if bb == b_index and ss == s - 1]
                model.add(sum(prev) >= sum(first))  # symmetry: slots of one bin in non-increasing pod count
    for k in ks:
        model.add(sum(v for (b, s, kk), v in count.items() if kk == k) == int(demand[k]))
    for (pool, name), rem in limits.items():
        terms = [bins[b].limit_use.get(name, 0) * u for (b, s), u in used.items()
                 if bins[b].pool_index == pool and bins[b].limit_use.get(name, 0)]
        if terms:
            model.add(sum(terms) <= max(rem, 0))
    floor_terms = [int(math.floor(floors.get(b, 0.0) * SCALE)) * u for (b, s), u in used.items()
                   if floors.get(b, 0.0) > 0]
    if floor_terms:
        model.add(sum(floor_terms) <= int(math.ceil(gap * SCALE)))
    cost = sum(bins[b].cost * u for (b, s), u in used.items())
    model.add(cost <= incumbent_cost - 1)
    model.add(cost >= int(math.floor(lp_value - 1e-6 * max(lp_value, 1.0))))
    model.minimize(cost)
    solver = make_solver(time_limit, seed, workers, deterministic)
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE:
        return ProofResult(proven=True, improved=None, slots=slots, status="INFEASIBLE")
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        chosen: dict[Pattern, int] = {}
        for (b, s), u in used.items():
            if solver.value(u):
                counts = tuple(int(solver.value(count[b, s, k])) if (b, s, k) in count else 0
                               for k in range(len(demand)))
                pattern = Pattern(b, counts)
                chosen[pattern] = chosen.get(pattern, 0) + 1
        return ProofResult(proven=status == cp_model.OPTIMAL, improved=chosen, slots=slots,
                           status=solver.status_name(status))
    return ProofResult(proven=False, improved=None, slots=slots, status=solver.status_name(status))
