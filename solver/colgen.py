"""Column generation: the LP relaxation of the pattern model, its patterns and a certified lower bound.

The restricted master LP chooses fractional counts of patterns to cover every class's demand at least
cost; its duals price new patterns on every bin. When exact pricing finds no pattern with negative
reduced cost the LP value is the Gilmore–Gomory bound; before that, the Lagrangian bound
``LP + Σ_b N_b · min(0, best reduced cost on b)`` is still valid (N_b = the most nodes b can ever have).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from ortools.linear_solver import pywraplp

from solver.bins import Bin
from solver.patterns import (
    Pattern,
    complete,
    copies_matrix,
    exact_pricing,
    fractional_upper_bound,
    greedy_pricing,
)

EPS = 1e-6
#: reduced-cost floors above minus this (micro-dollars per node) count as converged: knapsack bounds carry
#: a rounding slack of that order; the reported bound stays the Farley bound, which accounts for it
FLOOR_TOLERANCE = 1.0
#: bins priced exactly (CP-SAT) per round at first; doubled whenever those add nothing
MAX_EXACT = 48
#: CP-SAT deterministic time for one exact pricing knapsack: a work cap, not a wall-clock one, so a batch's
#: columns (and plan) do not depend on the machine's load; about the search a 50 ms wall cap allowed on an idle
#: core (250 pricing calls of a 1,000-pod batch: 13.7 ms a call against 12.4, no pattern worse)
EXACT_WORK = 0.02



@dataclass
class Objective:
    """Pattern cost: node price plus per-pod penalties for landing below the best NodePool weight
    (``rank_weight`` per rank) and for preferred node-affinity weight left unmet (``preference_weight``
    per unit of weight)."""

    rank_weight: int
    unscheduled_weight: int
    best_rank: np.ndarray  # per class
    preference_weight: int = 0
    best_preference: np.ndarray | None = None  # per class

    @property
    def has_penalties(self) -> bool:
        return self.rank_weight > 0 or self.preference_weight > 0

    def penalties(self, b: Bin) -> np.ndarray:
        penalties: np.ndarray = np.zeros(len(self.best_rank), dtype=np.int64)
        if not b.existing:
            penalties = penalties + np.maximum(b.rank - self.best_rank, 0) * self.rank_weight
        if self.preference_weight and self.best_preference is not None:
            penalties = penalties + np.maximum(self.best_preference - b.preference, 0) * self.preference_weight
        return penalties

    def cost(self, b: Bin, counts: np.ndarray) -> int:
        return int(b.cost + int(self.penalties(b) @ counts))


@dataclass
class ColumnGenerationResult:
    patterns: list[Pattern]
    lp_value: float
    lower_bound: float
    converged: bool
    iterations: int
    lp_solution: dict[Pattern, float] = field(default_factory=dict)
    #: from the last complete exact pricing round: a lower bound on the reduced cost of any pattern on each
    #: bin, and the LP value of the solve whose duals they belong to (cost(x) ≥ floor_lp + Σ floor_b·n_b)
    reduced_cost_floor: dict[int, float] = field(default_factory=dict)
    floor_lp_value: float = 0.0
    master: MasterLP | None = None
    #: pricing stopped at the deadline, not at a bound: the columns are what the time allowed
    out_of_time: bool = False


#: GLOP settings tried in turn when a solve ends ABNORMAL
GLOP_FALLBACKS = ("use_preprocessing:false", "use_preprocessing:false use_dual_simplex:true")


def solve_glop(lp: pywraplp.Solver) -> int:
    """Solve an LP; when GLOP gives up (ABNORMAL), solve it again from scratch without presolve and keep that
    setting — its presolve fails now and then on a master after columns were added (in CI, one run in three of a
    300-pod mix), while the same LP solves without it."""
    status = lp.Solve()
    for fallback in GLOP_FALLBACKS:
        if status != pywraplp.Solver.ABNORMAL:
            break
        lp.SetSolverSpecificParametersAsString(fallback)
        params = pywraplp.MPSolverParameters()
        params.SetIntegerParam(params.INCREMENTALITY, params.INCREMENTALITY_OFF)
        status = lp.Solve(params)
    return int(status)


class MasterLP:
    def __init__(self, bins: list[Bin], demand: np.ndarray, objective: Objective,
                 limits: dict[tuple[int, str], int]) -> None:
        self.bins, self.demand, self.objective = bins, demand, objective
        self.lp = pywraplp.Solver.CreateSolver("GLOP")
        inf = self.lp.infinity()
        self.cover = [self.lp.Constraint(float(d), inf, f"cover_{k}") for k, d in enumerate(demand)]
        self.count_rows = {b.index: self.lp.Constraint(-inf, float(b.count), f"count_{b.index}")
                           for b in bins if b.count is not None}
        self.limit_rows = {key: self.lp.Constraint(-inf, float(max(v, 0)), f"limit_{key[0]}_{key[1]}")
                           for key, v in limits.items()}
        self.obj = self.lp.Objective()
        self.obj.SetMinimization()
        for k, row in enumerate(self.cover):
            u = self.lp.NumVar(0.0, inf, f"u_{k}")
            row.SetCoefficient(u, 1.0)
            self.obj.SetCoefficient(u, float(objective.unscheduled_weight))
        self.columns: dict[Pattern, pywraplp.Variable] = {}
        #: bin index → its pricing family (bins sorted by cost), and the bins greedy pricing visits
        self.families: dict[int, list[int]] | None = None
        self.sampled: list[int] = []
        self.family_capacity: dict[int, np.ndarray] = {}

    def add(self, pattern: Pattern) -> bool:
        if pattern in self.columns or not any(pattern.counts):
            return False
        b = self.bins[pattern.bin]
        counts = pattern.array()
        var = self.lp.NumVar(0.0, self.lp.infinity(), f"x_{len(self.columns)}")
        for k in np.flatnonzero(counts).tolist():
            self.cover[k].SetCoefficient(var, float(counts[k]))
        if b.index in self.count_rows:
            self.count_rows[b.index].SetCoefficient(var, 1.0)
        for (pool, name), row in self.limit_rows.items():
            if b.pool_index == pool and b.limit_use.get(name, 0):
                row.SetCoefficient(var, float(b.limit_use[name]))
        self.obj.SetCoefficient(var, float(self.objective.cost(b, counts)))
        self.columns[pattern] = var
        return True

    def solve(self) -> float:
        status = solve_glop(self.lp)
        if status != pywraplp.Solver.OPTIMAL:
            raise RuntimeError(f"master LP ended with status {status}")
        return float(self.obj.Value())

    def duals(self) -> tuple[np.ndarray, dict[int, float], dict[tuple[int, str], float]]:
        pi = np.array([row.dual_value() for row in self.cover])
        mu = {i: row.dual_value() for i, row in self.count_rows.items()}
        lam = {key: row.dual_value() for key, row in self.limit_rows.items()}
        return pi, mu, lam

    def fixed_price(self, b: Bin, mu: dict[int, float], lam: dict[tuple[int, str], float]) -> float:
        """The part of a pattern's reduced cost that does not depend on its pods."""
        price = float(b.cost) - mu.get(b.index, 0.0)
        for (pool, name), dual in lam.items():
            if b.pool_index == pool:
                price -= dual * b.limit_use.get(name, 0)
        return price

    def set_demand(self, demand: np.ndarray) -> None:
        self.demand = demand
        for row, d in zip(self.cover, demand, strict=True):
            row.SetLb(float(d))

    def set_count(self, b: int, count: int) -> None:
        self.count_rows[b].SetUb(float(max(count, 0)))

    def forbid(self, pattern: Pattern) -> None:
        """Keep the LP from using a pattern again (the dive found it can no longer be built)."""
        if pattern in self.columns:
            self.columns[pattern].SetUb(0.0)

    def set_limit(self, key: tuple[int, str], value: int) -> None:
        self.limit_rows[key].SetUb(float(max(value, 0)))

    def price_greedily(self, bins: list[Bin], sizes: np.ndarray, deadline: float = float("inf")) -> int:
        """One round of heuristic pricing at the current duals; returns the columns added.

        Only a geometric sample of each family's sizes is priced (``pricing_sample``); a pattern found on
        a sampled bin moves to the cheapest bin of its family that holds it, which only lowers its
        reduced cost. With Karpenter's 400-type catalog that prices ~90 bins a round instead of 1,200."""
        pi, mu, lam = self.duals()
        if self.families is None:
            self.families = pricing_families(bins)
            self.sampled = pricing_sample(bins, self.families)
        added = 0
        for n, i in enumerate(self.sampled):
            if n % 16 == 15 and time.monotonic() > deadline:
                break
            counts = greedy_pricing(bins[i], sizes, pi - self.objective.penalties(bins[i]), self.demand)
            if not counts.any():
                continue
            b = bins[self._cheapest_holding(bins, i, counts @ sizes)]
            if self.fixed_price(b, mu, lam) - float((pi - self.objective.penalties(b)) @ counts) < -EPS:
                added += self.add(Pattern(b.index, tuple(counts.tolist())))
        return added

    def _cheapest_holding(self, bins: list[Bin], i: int, load: np.ndarray) -> int:
        """The cheapest bin of ``i``'s family whose capacity holds ``load`` (``i`` itself at worst)."""
        assert self.families is not None
        family = self.families[i]
        capacity = self.family_capacity.get(id(family))
        if capacity is None:
            capacity = np.array([bins[j].capacity for j in family])
            self.family_capacity[id(family)] = capacity
        hits = np.flatnonzero(np.all(capacity >= load, axis=1))
        return family[int(hits[0])] if len(hits) else i

    def solution(self) -> dict[Pattern, float]:
        return {p: v.solution_value() for p, v in self.columns.items() if v.solution_value() > EPS}


def pricing_families(bins: list[Bin]) -> dict[int, list[int]]:
    """Bins that differ only in shape and price (same pool, admitted classes, preferences and limited
    resources), cheapest first: a pattern found on one is valid on any member whose capacity holds it."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for b in bins:
        key: tuple[object, ...] = ("existing", b.index) if b.existing else (
            b.pool_index, b.rank, b.compatible.tobytes(), b.preference.tobytes(), tuple(sorted(b.limit_use)))
        groups.setdefault(key, []).append(b.index)
    out: dict[int, list[int]] = {}
    for members in groups.values():
        members.sort(key=lambda i: (bins[i].cost, i))
        for i in members:
            out[i] = members
    return out


def pricing_sample(bins: list[Bin], families: dict[int, list[int]], step: float = 1.25,
                   sample_above: int = 256) -> list[int]:
    """Per family, the cheapest bin, then each bin at least ``step`` × the last one's price, and the
    largest: sizes a pattern can then be shrunk back from (``MasterLP._cheapest_holding``). Up to
    ``sample_above`` bins every bin is priced."""
    if len(bins) <= sample_above:
        return [b.index for b in bins]
    seen: set[int] = set()
    out: list[int] = []
    for members in families.values():
        if id(members) in seen:
            continue
        seen.add(id(members))
        last = -1.0
        for n, i in enumerate(members):
            if n == 0 or n == len(members) - 1 or bins[i].cost >= last * step:
                out.append(i)
                last = float(bins[i].cost)
    return sorted(out)


def farley_bound(bins: list[Bin], lp_value: float, floors: dict[int, float]) -> float:
    """A valid lower bound from a non-converged LP (Farley / Lagrangian).

    Any plan x satisfies cost(x) ≥ LP + Σ_b floor_b · n_b. Existing bins have at most ``count`` nodes; for
    new bins floor_b · n_b ≥ θ · cost_b · n_b with θ = min_b floor_b / cost_b ≤ 0, so
    cost(x) ≥ (LP + Σ_existing min(0, floor)·count) / (1 − θ).
    """
    base = lp_value
    theta = 0.0
    for i, floor in floors.items():
        b = bins[i]
        if floor >= 0:
            continue
        if b.count is not None and b.cost == 0:
            base += floor * b.count
        elif b.cost > 0:
            theta = min(theta, floor / b.cost)
    return base / (1.0 - theta)


def seed_patterns(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, per_class: int = 3,
                  mixed: int = 64) -> list[Pattern]:
    """Starting columns, linear in classes plus bins: each class alone on the ``per_class`` bins that
    hold it most cheaply per pod (every class gets a column wherever it can go first), and a mixed
    fill of the ``mixed`` cheapest bins per unit of capacity."""
    out = []
    ones = np.ones(len(demand))
    if bins:
        limit = np.minimum(copies_matrix(np.array([b.capacity for b in bins]), sizes), demand[:, None])
        limit = np.where(np.array([b.compatible for b in bins]).T, limit, 0)
        costs = np.array([float(b.cost) for b in bins])
        per_pod = np.where(limit > 0, costs[None, :] / np.maximum(limit, 1), np.inf)
        for k in np.flatnonzero(demand > 0):
            # cheapest per pod, ties by bin index (a stable sort keeps the index order)
            for i in np.argsort(per_pod[k], kind="stable")[:per_class]:
                if not np.isfinite(per_pod[k, i]):
                    break
                counts = np.zeros(len(demand), dtype=np.int64)
                counts[k] = limit[k, i]
                out.append(Pattern(bins[i].index, tuple(counts.tolist())))
    capacity_price = sorted(bins, key=lambda b: (b.cost / max(float(b.capacity[0]), 1.0), b.index))
    for b in capacity_price[:mixed]:
        counts = greedy_pricing(b, sizes, ones, demand)
        if counts.any():
            out.append(Pattern(b.index, tuple(int(c) for c in counts)))
    return out


def _exact_round(master: MasterLP, bins: list[Bin], sizes: np.ndarray, demand: np.ndarray,
                 objective: Objective, pi: np.ndarray, mu: dict[int, float], lam: dict[tuple[int, str], float],
                 deadline: float, exact_time: float, pool: ThreadPoolExecutor, max_exact: int = 48,
                 pricing_gap: float = 0.0) -> tuple[int, dict[int, float] | None, bool]:
    """Price every bin: a fractional bound settles most; CP-SAT knapsacks (on the worker threads) price
    the ``max_exact`` most promising of the rest, whose other members keep their fractional floor. Each
    knapsack may stop ``pricing_gap`` × its bin's price short of proving its pattern best, and a bin whose
    fractional floor is already within that is not priced exactly at all.
    Returns the columns added, each bin's reduced-cost floor (None if time ran out mid-round), and
    whether promising bins were left unpriced."""
    floors: dict[int, float] = {}
    candidates = []
    for b in bins:
        values = pi - objective.penalties(b)
        fixed = master.fixed_price(b, mu, lam)
        cheap = fractional_upper_bound(b, sizes, values, demand)
        floors[b.index] = fixed - cheap
        if fixed - cheap < -max(EPS, pricing_gap * float(b.cost)):
            candidates.append((fixed - cheap, b.index, b, values, fixed, cheap))
    candidates.sort(key=lambda item: (item[0], item[1]))
    jobs = []
    for _, _, b, values, fixed, cheap in candidates[:max_exact]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        jobs.append((b, values, fixed, cheap,
                     pool.submit(exact_pricing, b, sizes, values, demand, remaining, EXACT_WORK,
                                 pricing_gap * float(b.cost))))
    added = 0
    complete_round = len(jobs) == min(len(candidates), max_exact)
    for b, values, fixed, cheap, future in jobs:
        if time.monotonic() > deadline + exact_time:
            future.cancel()
            complete_round = False
            continue
        counts, upper = future.result()
        floors[b.index] = fixed - min(upper, cheap)
        if not np.isfinite(floors[b.index]):
            complete_round = False
        if counts.any() and fixed - float(values @ counts) < -EPS:
            added += master.add(Pattern(b.index, tuple(int(c) for c in complete(b, sizes, demand, counts))))
    return added, floors if complete_round else None, len(candidates) > max_exact


def column_generation(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, objective: Objective,
                      limits: dict[tuple[int, str], int], initial: list[Pattern],
                      deadline: float, exact_time: float = 0.05, tolerance: float = 1e-4,
                      workers: int = 2, known_bound: float = 0.0, known_slack: float = 0.0,
                      pricing_gap: float = 0.0) -> ColumnGenerationResult:
    """Generate patterns until the LP is solved (or its bound is within ``tolerance``) or time is up.

    ``pricing_gap`` lets each exact knapsack stop that share of its bin's price short of a proof: every floor
    is then at most that much lower, so the Farley bound at most that share lower (θ moves by it) — a budget
    the caller takes out of its own tolerance. The LP can then not be called converged on floors alone.

    ``known_bound`` is a bound the caller already holds (the resource-share bound): once the restricted LP's
    value is within ``known_slack`` of it, no LP bound can add more than that, and pricing stops (on generic
    batches the share bound is within 0.2 % of the LP, and proving the LP took most of the time)."""
    master = MasterLP(bins, demand, objective, limits)
    for pattern in initial + seed_patterns(bins, sizes, demand):
        master.add(pattern)
    lower = -np.inf
    converged = False
    final_floors: dict[int, float] = {}
    floor_value = 0.0
    max_exact = MAX_EXACT
    pool = ThreadPoolExecutor(max_workers=max(workers, 1), thread_name_prefix="pricing")
    iterations = 0
    value = master.solve()
    #: the last heuristic round lowered the LP by less than the tolerance: price exactly next (on mixes where
    #: the heuristic fills stall, the exact rounds are what move the LP)
    stalled = False
    priced_out = False  # an exact round found no column (converged, or no proven bound)

    def bounded() -> bool:
        """Is the LP within the tolerance of its own bound, or within the slack of the caller's?"""
        return value - lower <= tolerance * max(value, 1.0) or value - known_bound <= known_slack * max(value, 1.0)

    while time.monotonic() < deadline and not bounded():
        iterations += 1
        pi, mu, lam = master.duals()
        added = 0 if stalled else master.price_greedily(bins, sizes, deadline)
        heuristic = bool(added)
        if not added:
            added, floors, left = _exact_round(master, bins, sizes, demand, objective, pi, mu, lam, deadline,
                                               exact_time, pool, max_exact, pricing_gap)
            if floors is not None:
                lower = max(lower, farley_bound(bins, value, floors))
                final_floors, floor_value = floors, value
                if not added and left:
                    max_exact *= 2  # nothing among the most promising: look at more bins exactly
                    continue
                if not added:
                    # converged only when no bin can still improve the LP; a bin whose knapsack ran out of
                    # time, or that was left to its fractional bound, may — then the LP value is no proven
                    # bound and the Farley bound stands in for it
                    converged = all(f >= -FLOOR_TOLERANCE for f in floors.values())
                    priced_out = True
                    break
        last, value = value, master.solve()
        stalled = heuristic and last - value < tolerance * max(value, 1.0)
    pool.shutdown(wait=True)
    return ColumnGenerationResult(patterns=list(master.columns), lp_value=value, lower_bound=float(lower),
                                  converged=converged, iterations=iterations, lp_solution=master.solution(),
                                  reduced_cost_floor=final_floors, floor_lp_value=floor_value, master=master,
                                  out_of_time=not (priced_out or bounded()))
