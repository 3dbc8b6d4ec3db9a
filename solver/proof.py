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
from solver.compact import solve_compact
from solver.patterns import Pattern, copies_matrix

SCALE = 1000


@dataclass
class ProofResult:
    proven: bool
    improved: dict[Pattern, int] | None
    slots: int
    status: str


def slot_bounds(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, floors: dict[int, float], gap: float,
                incumbent_cost: int) -> dict[int, int]:
    """How many nodes of each bin a strictly cheaper plan could use.

    Bins whose floor is negative (pricing not proven) can only lower Σ floor·n, by at most floor × their
    own node bound; that slack widens the budget the positive-floor bins must fit in.
    """
    plain = _plain_bounds(bins, sizes, demand, incumbent_cost)
    slack = sum(-floors.get(i, 0.0) * n for i, n in plain.items() if floors.get(i, 0.0) < 0)
    budget = gap + slack
    out = {}
    for i, n in plain.items():
        floor = floors.get(i, 0.0)
        if floor > 1e-9:
            n = min(n, math.floor(budget / floor + 1e-9))
        if n > 0:
            out[i] = n
    return out


def _plain_bounds(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, incumbent_cost: int) -> dict[int, int]:
    """Node bounds from demand, existing counts and the incumbent's cost alone."""
    out: dict[int, int] = {}
    if not bins:
        return out
    # which classes each bin admits and holds, for all bins at once (classes × bins in numpy)
    holds = (copies_matrix(np.array([b.capacity for b in bins]), sizes) > 0) \
        & np.array([b.compatible for b in bins]).T & (demand > 0)[:, None]
    held = demand.astype(np.int64) @ holds
    for i, b in enumerate(bins):
        if not holds[:, i].any():
            continue
        n = b.count if b.count is not None else int(held[i])
        if b.cost > 0:
            n = min(n, incumbent_cost // b.cost)
        if n > 0:
            out[b.index] = n
    return out


def prove(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, limits: dict[tuple[int, str], int],
          floors: dict[int, float], lp_value: float, lower_bound: float, incumbent_cost: int,
          time_limit: float, seed: int, workers: int, deterministic: bool, max_slots: int = 600) -> ProofResult:
    """Prove ``incumbent_cost`` optimal or find a cheaper plan. ``lp_value`` is the LP value whose duals gave
    ``floors``; ``lower_bound`` any valid bound on the cost."""
    if incumbent_cost - lower_bound <= 0.5:
        return ProofResult(proven=True, improved=None, slots=0, status="BOUND")
    gap = incumbent_cost - lp_value
    bounds = slot_bounds(bins, sizes, demand, floors, gap, incumbent_cost)
    slots = sum(bounds.values())
    if slots > max_slots:
        return ProofResult(proven=False, improved=None, slots=slots, status="TOO_LARGE")

    def reduced_cost_budget(model: cp_model.CpModel, used: dict[tuple[int, int], cp_model.IntVar]) -> None:
        # every floor counts, negative ones too: cost(x) ≥ LP + Σ floor_b · n_b holds for any duals
        terms = [math.floor(floors.get(b, 0.0) * SCALE) * u for (b, s), u in used.items()
                 if floors.get(b, 0.0) != 0]
        if terms:
            model.add(sum(terms) <= math.ceil(gap * SCALE))

    result = solve_compact(bins, sizes, demand, limits, bounds, time_limit=time_limit, seed=seed,
                           workers=workers, deterministic=deterministic, cost_below=incumbent_cost,
                           cost_at_least=lower_bound, extra=reduced_cost_budget)
    if result.status == "INFEASIBLE":
        return ProofResult(proven=True, improved=None, slots=slots, status="INFEASIBLE")
    return ProofResult(proven=result.status == "OPTIMAL", improved=result.chosen, slots=slots,
                       status=result.status)
