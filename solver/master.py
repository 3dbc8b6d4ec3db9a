"""The integer master: CP-SAT chooses how many nodes of each generated pattern to build.

Objective, lexicographic through weights: first schedule as many pods as possible, then keep pods on
their highest-weight NodePool, then minimise hourly cost. Existing-node counts and NodePool limits are
master rows; per-node rules are already inside every pattern.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solver.bins import Bin
from solver.colgen import Objective
from solver.cpsat import CpModel, make_solver, solve_stopping
from solver.patterns import Pattern


@dataclass
class MasterResult:
    chosen: dict[Pattern, int]
    unscheduled: np.ndarray
    objective: int
    best_bound: float
    status: str
    wall_seconds: float
    #: why the search was stopped before its limit ("enough", "stalled"), None if it ran to the end
    stopped: str | None = None


def solve_master(bins: list[Bin], patterns: list[Pattern], demand: np.ndarray, objective: Objective,
                 limits: dict[tuple[int, str], int], hint: dict[Pattern, int] | None, time_limit: float,
                 seed: int, workers: int, deterministic: bool, lower_bound: float = 0.0, gap: float = 0.0,
                 at_least: dict[Pattern, int] | None = None, stall: float | None = None) -> MasterResult | None:
    """Solve the pattern IP; ``lower_bound`` (any valid bound on the objective) is added as a cut and
    ends the search early once a plan is within ``gap`` of it. ``at_least`` fixes a floor on some pattern
    counts (LP rounding: keep the integer part of the LP and let CP-SAT decide only the rest); ``stall`` stops a
    search that finds no better plan (``solver.cpsat.SearchStop``). The hint's own
    patterns are columns too: a warm start from a plan whose nodes column generation never priced (the dive's,
    greedy's) is otherwise no start at all — CP-SAT then spent a 60-pod batch's 7.7 s without reaching it."""
    model = CpModel()
    if hint:
        known = set(patterns)
        patterns = [*patterns, *(p for p in hint if p not in known)]
    x: dict[Pattern, cp_model.IntVar] = {}
    for i, p in enumerate(patterns):
        counts = p.array()
        b = bins[p.bin]
        used = counts > 0
        upper = int(np.max(-(-demand[used] // counts[used]))) if used.any() else 0
        if b.count is not None:
            upper = min(upper, b.count)
        low = min((at_least or {}).get(p, 0), upper)
        if upper > 0:
            x[p] = model.new_int_var(low, upper, f"x{i}_bin{p.bin}")
    u = [model.new_int_var(0, int(d), f"unscheduled_{k}") for k, d in enumerate(demand)]
    for k, d in enumerate(demand):
        terms = [p.counts[k] * var for p, var in x.items() if p.counts[k]]
        model.add(sum(terms) + u[k] >= int(d))
    for b in bins:
        if b.count is not None:
            own = [var for p, var in x.items() if p.bin == b.index]
            if own:
                model.add(sum(own) <= b.count)
    for (pool, name), rem in limits.items():
        terms = [bins[p.bin].limit_use.get(name, 0) * var for p, var in x.items()
                 if bins[p.bin].pool_index == pool and bins[p.bin].limit_use.get(name, 0)]
        if terms:
            model.add(sum(terms) <= max(rem, 0))
    total = (sum(objective.unscheduled_weight * v for v in u)
             + sum(objective.cost(bins[p.bin], p.array()) * var for p, var in x.items()))
    if lower_bound > 0:
        model.add(total >= math.floor(lower_bound - 1e-6 * max(lower_bound, 1.0)))
    model.minimize(total)
    if hint:
        for p, var in x.items():
            model.add_hint(var, hint.get(p, 0))
    solver = make_solver(time_limit, seed, workers, deterministic)
    # stops once the plan is within ``gap`` of the lower bound
    status, stop = solve_stopping(solver, model, lambda value: lower_bound > 0 and value <= lower_bound * (1 + gap),
                                  stall=stall)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    chosen = {p: int(solver.value(var)) for p, var in x.items() if solver.value(var) > 0}
    return MasterResult(chosen=chosen, unscheduled=np.array([solver.value(v) for v in u], dtype=np.int64),
                        objective=int(solver.objective_value), best_bound=float(solver.best_objective_bound),
                        status=solver.status_name(status), wall_seconds=solver.wall_time, stopped=stop.reason)
