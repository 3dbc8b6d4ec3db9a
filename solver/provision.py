"""Provisioning: snapshot in, ProvisioningPlan out.

Pipeline, each stage anytime and bounded by the time limit:
1. compile the batch: pod classes, node templates → bins, existing free capacity; classes the compiled
   rules no longer tell apart are merged into packing classes (``merge``);
2. greedy: Karpenter's first-fit-decreasing — a valid plan within milliseconds, and the yardstick (if
   compiling and greedy already used the time, it is returned with the resource-share bound);
3. column generation: patterns and the LP lower bound every plan is measured against; when it cannot
   converge in time (hundreds of classes) the resource-share dual bound (``bound``) stands in if higher;
4. dive: round the LP into an integer plan, finishing the last nodes with the exact compact model; cut
   short by the time limit, greedy places what it has not committed yet;
5. proof (small batches): the compact model over dual-filtered slots proves the plan optimal or beats it;
6. pattern master: CP-SAT over all generated patterns, warm-started, with whatever time is left (not
   built when patterns × classes is too large to build in time).
The best plan found (lexicographically: pods scheduled, NodePool weight honoured, cost) is returned.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from model.instancetype import MICRO, price_micros
from model.plan import (
    ExistingNodeAssignment,
    PlanCost,
    PlannedNodeClaim,
    ProvisioningPlan,
    SolverReport,
    UnschedulablePod,
)
from model.pod import Pod
from model.resources import CPU, Resources
from model.snapshot import Snapshot
from solver.bins import Bin, bin_of_template, build_bins
from solver.bound import share_bound
from solver.bounds import from_problem, recompiled, relaxation_bound, relaxes_in_place
from solver.colgen import ColumnGenerationResult, Objective, column_generation
from solver.cpsat import STALL_SECONDS
from solver.decode import decode, shrink
from solver.dive import dive
from solver.explain import explain
from solver.gate import gate
from solver.gcpause import paused_collection
from solver.greedy import finish_greedily, greedy_placement
from solver.lns import Matrices, construct, improve, reconstruct, size_floor
from solver.master import solve_master
from solver.merge import merge_classes
from solver.patterns import Pattern
from solver.placement import Placement
from solver.problem import Problem, compile_problem
from solver.proof import prove, slot_bounds
from solver.rules.preferences import PreferencePolicy
from solver.verify.dra import with_devices

#: seconds per pod held back from the time limit for decoding, gating and writing the plan (measured at
#: 100,000 pods: scoring, the plan, the gate and its JSON take 3.3 CPU s after the last stage; at 50,000 diverse
#: pods the relaxed bound, the gate, the JSON and the process exit took 3.1–4.8 s of wall at load 2–3)
RESERVE_PER_POD = 7e-5
#: the most of the time limit that reserve may take
RESERVE_MAX_SHARE = 0.15
#: finishing a cut-short dive greedily (its leftover pods, then shrinking every node) takes about this share of
#: the first greedy pass (measured: 0.13 at 20,000 diverse pods)
FINISH_SHARE = 0.25
#: above this many pattern × class pairs the pattern master is not built (20,000 diverse pods: 2.8 M)
MASTER_MAX_TERMS = 1_000_000
#: share of the time left after greedy the pattern construction (the first improvement) may use
CONSTRUCT_SHARE = 0.5
#: column generation's first LP (rows over the classes, columns from greedy's nodes and seed patterns) cannot be
#: cut short: about this many seconds per class × bin pair pass before its first pricing round (measured: 13.1 CPU
#: s for 4,603 classes × 1,200 bins, Karpenter's diverse mix at 50,000 pods)
COLGEN_START_PER_PAIR = 2.4e-6
#: column generation is started only when that first LP is expected within this share of the time left;
#: otherwise the construction and the large-neighbourhood search get the time
COLGEN_START_SHARE = 0.5
#: with no column generation ahead, the share of the time left kept from the construction for the resource-share
#: bound and the large-neighbourhood search
CONSTRUCT_RESERVE = 0.12
#: greedy's time for the whole batch, times this, is kept back for placing what a cut-short construction left
FINISH_MARGIN = 1.5
#: seconds per unit of demand decoding the construction's patterns into nodes takes (measured: 1.4 s for 50,000
#: diverse pods on 11,480 nodes), kept back from the construction's share
DECODE_PER_UNIT = 3e-5
#: seconds per class × bin pair the construction's set-up takes before its first pattern (its copies matrix and
#: class values: measured 2.0 s for 4,603 classes × 1,200 bins)
CONSTRUCT_SETUP_PER_PAIR = 4e-7
#: a construction cut short below this share of the units placed is dropped: greedy would redo nearly all of it
CONSTRUCT_MIN_SHARE = 0.1
#: plans with more new nodes than this are searched by re-building a share of them (``lns.reconstruct``), smaller
#: ones by exact re-packs of a few nodes (``lns.improve``)
RECONSTRUCT_ABOVE = 400
#: share of the time limit the construction may use even when loading, compiling and greedy used it all
CONSTRUCT_FLOOR = 0.03
#: column generation is not started with less than this many seconds left (LNS uses them instead)
MIN_COLGEN_SECONDS = 1.5
#: column generation's share of the time left on a batch with an encoding stricter than Kubernetes
#: (``problem.conservative``): its LP bounds the stricter model, so the reported bound comes from the relaxation
#: (``certify``) and the LP is worth only the dive's and the master's columns; the search gets the time instead.
#: At 10 s, 0.5 → 0.3: Karpenter's diverse 1,000 1.154 → 1.150 × bound (on KWOK 1.245 → 1.234), cross-workload
#: 1,000 1.155 → 1.111 (one run each, bench/run.py rows; generic batches, not conservative, keep 0.5: at 0.3 the
#: AWS-like 20,000 row came out 1.033 instead of 1.010-1.020)
CONSERVATIVE_COLGEN_SHARE = 0.3
#: the pattern master's share of the time left; the large-neighbourhood search gets the rest. The master's gains
#: come in its first seconds (from the dive's plan); after them related re-packs of a few nodes save more: generic
#: 1,000 / 5,000 / 20,000 pods on KWOK at 10 s came out 1.045 / 1.035 / 1.014 × bound with 0.9 of the time for
#: the master, 1.026 / 1.001 / 1.003 with 0.2, and cross-workload 1,000 on Karpenter's catalog 1.06 instead of
#: greedy's plan (bench/run.py rows, one run each)
MASTER_SHARE = 0.2
#: at most this share of the time left for a dive over an LP column generation left unfinished: priced over
#: the columns the time allowed, such a dive either ends quickly (hostname self-affinity, 1,000 pods: 0.4 s) or
#: crawls and, cut short, is worse than the plan it started from (Karpenter's diverse mix, 1,000 pods: 3 s for
#: nothing, and run to the end 8 % dearer than the construction's plan); the search gets the rest. 0.25 → 0.15:
#: diverse 1,000 1.150 → 1.146 × bound (KWOK 1.234 → 1.230)
UNSETTLED_DIVE_SHARE = 0.15
#: share of a cut-short dive's time kept for the large-neighbourhood search when no master follows
LNS_SHARE = 0.2
#: the bound over exact families only (conservative models) recompiles the batch: about this share of
#: the first compile, held back from the deadline (measured 0.5 at 5,000 diverse pods)
RELAXED_BOUND_SHARE = 0.6
#: column generation's own relative convergence tolerance (``colgen.column_generation``'s default)
COLGEN_TOLERANCE = 1e-4
#: with a decision gap, column generation stops once its LP is within this share of the gap above the
#: resource-share bound: the LP could raise the bound by no more. On generic 1,000-pod batches proving the
#: LP took 5–9 s of a 10 s limit for 0.1–0.3 % of bound (measured: half the gap decides 500–1,000 pods in
#: 1–2.5 s at a 2 % gap; the whole gap left the bound at the looser share bound on 250 pods)
COLGEN_KNOWN_SLACK = 0.5
#: with a decision gap, each exact pricing knapsack may stop this share of column generation's tolerance (of its
#: bin's price) short of a proof. Two recorded aws-like batches' 395 knapsacks: a tenth of a percent of the price
#: cut their CPU by a third (the few that ran into the work cap had their bound within 0.03 % of the price). The
#: nine batches of a recorded aws-like 1,000-pod scale-out: 7.9 CPU s before, 3.7 after, plans as cheap
PRICING_GAP_SHARE = 0.25
#: with a decision gap, the proof gets at most this many seconds (or ``GAP_PROOF_SHARE`` of the time left,
#: whichever is more): proofs that close do so in 0.06–0.65 s on the controller's aws-like 1,000-pod run, and
#: one that did not (a 197-pod batch) ran 7.9 s of 10 without closing, the batch's whole latency; the master
#: and the search certify or improve the plan with the rest
GAP_PROOF_SECONDS = 1.5
GAP_PROOF_SHARE = 0.25



@dataclass(frozen=True)
class SolveOptions:
    time_limit: float = 10.0
    seed: int = 0
    workers: int = 2
    #: share of the time left after greedy that column generation may use
    colgen_share: float = 0.5
    #: the decision gap: once the best plan is certified within this relative gap of the lower bound, the
    #: remaining stages are skipped (a small batch is decided in milliseconds, not at the time limit)
    gap: float = 0.0
    deterministic: bool = True
    #: largest compact model (node slots) the optimality proof may build
    max_proof_slots: int = 600
    #: how preferred node affinity weighs against cost (see ``solver.rules.preferences``)
    preference_policy: PreferencePolicy = PreferencePolicy.RESPECT
    #: with ``Price``: $/h one unit of preference weight is worth, per pod
    preference_price: float = 0.0
    #: ``time.monotonic()`` the time limit counts from (default: when ``solve`` starts); the CLI sets it
    #: before loading, so ``--time-limit`` bounds the whole command
    started_at: float | None = None
    #: called after each stage with (stage, best plan's cost $/h, lower bound $/h) — for live progress
    on_progress: Callable[[str, float, float], None] | None = field(default=None, compare=False)


@dataclass
class SolveResult:
    plan: ProvisioningPlan
    placement: Placement
    greedy: Placement
    problem: Problem


def _limits(problem: Problem) -> dict[tuple[int, str], int]:
    """What is left of each NodePool limit that a plan could reach: one that even a node per pending unit of
    the pool's largest kind stays within cannot bind, and is no row (a "no limit" 10000000Gi included)."""
    units = int(problem.demand.sum())
    most: dict[tuple[str, str], int] = {}
    for t in problem.templates:
        for name, use in t.limit_use.items():
            key = (t.pool.name, name)
            most[key] = max(most.get(key, 0), use)
    return {(i, name): value for i, pool in enumerate(problem.pools)
            for name, value in pool.limits_remaining.items()
            if value < units * most.get((pool.name, name), 0) or (pool.name, name) not in most}


def _objective(problem: Problem, bins: list[Bin], options: SolveOptions) -> Objective:
    """Weights that make the single objective lexicographic: unscheduled pods ≫ NodePool weight ≫
    preferred node affinity (under ``Respect``) ≫ cost.

    One pod moving to a better pool or a preferred node can cost at most one more node, so a per-pod
    penalty above the dearest node keeps each level above the ones below it.
    """
    cost_scale = max((b.cost for b in bins), default=0) + 1
    ranks = [b.rank for b in bins if not b.existing]
    # per class over bins, in numpy: (classes × bins) Python loops cost seconds at 20,000 pods
    compatible = np.array([b.compatible for b in bins], dtype=bool).reshape(len(bins), len(problem.classes))
    new = np.array([not b.existing for b in bins], dtype=bool)
    rank_of = np.array([b.rank for b in bins], dtype=np.int64)
    reachable = [set(rank_of[new & compatible[:, k]].tolist()) for k in range(len(problem.classes))]
    best = np.array([min(r, default=0) for r in reachable], dtype=np.int64)
    preference = np.array([b.preference for b in bins], dtype=np.int64).reshape(len(bins), len(problem.classes))
    best_preference = np.where(compatible, preference, np.iinfo(np.int64).min).max(axis=0) \
        if len(bins) else np.zeros(len(problem.classes), dtype=np.int64)
    best_preference = np.where(compatible.any(axis=0), best_preference, 0).astype(np.int64)
    if options.preference_policy is PreferencePolicy.RESPECT:
        preference_weight = cost_scale
    elif options.preference_policy is PreferencePolicy.PRICE:
        preference_weight = price_micros(options.preference_price)
    else:
        preference_weight = 0
    if not best_preference.any():
        preference_weight = 0
    preference_span = preference_weight * (int(best_preference.max(initial=0)) + 1)
    rank_weight = (preference_span + cost_scale) if any(len(r) > 1 for r in reachable) else 0
    unscheduled = (rank_weight * (max(ranks, default=0) + 1) + preference_span + cost_scale) * 4
    return Objective(rank_weight=rank_weight, unscheduled_weight=unscheduled, best_rank=best,
                     preference_weight=preference_weight, best_preference=best_preference)


def _patterns_of(problem: Problem, bins: list[Bin], placement: Placement) -> dict[Pattern, int]:
    """Express a placement (greedy's) as pattern counts, for warm starts."""
    class_of = problem.class_of()
    out: dict[Pattern, int] = {}
    existing_bin = {e: b.index for b in bins if b.existing for e in b.members}
    nodes: list[tuple[int, list[str]]] = []
    for e, pods in placement.existing.items():
        if e in existing_bin:
            nodes.append((existing_bin[e], [p.key for p in pods]))
    for node in placement.new_nodes:
        nodes.append((bin_of_template(bins, problem, node.template), [p.key for p in node.pods]))
    units = np.array([c.unit for c in problem.classes], dtype=np.int64)
    for b, keys in nodes:
        counts = np.bincount([class_of[key] for key in keys], minlength=len(problem.classes)) // units
        pattern = Pattern(b, tuple(counts.tolist()))
        out[pattern] = out.get(pattern, 0) + 1
    return out


def _score(problem: Problem, objective: Objective, placement: Placement) -> tuple[int, int]:
    """(pods left unscheduled, penalties + cost): the objective's own order (its weights already make
    NodePool weight and, under Respect, preferences outrank cost)."""
    class_of = problem.class_of()
    best_preference = objective.best_preference
    penalty = 0
    for node in placement.new_nodes:
        rank = problem.templates[node.template].pool.rank
        for p in node.pods:
            k = class_of[p.key]
            penalty += max(rank - int(objective.best_rank[k]), 0) * objective.rank_weight
            if best_preference is not None:
                deficit = int(best_preference[k]) - int(problem.template_pref[k, node.template])
                penalty += max(deficit, 0) * objective.preference_weight
    if best_preference is not None and objective.preference_weight:
        for e, pods in placement.existing.items():
            for p in pods:
                k = class_of[p.key]
                penalty += max(int(best_preference[k]) - int(problem.existing_pref[k, e]), 0) \
                    * objective.preference_weight
    return (len(placement.unschedulable), penalty + placement.cost_micros(problem))


def placeable_demand(problem: Problem, bins: list[Bin]) -> np.ndarray:
    """Demand per class, zero for classes no bin admits and holds (they are unschedulable outright)."""
    demand = problem.demand.copy()
    for c in problem.classes:
        if not any(b.compatible[c.index] and bool(np.all(b.capacity >= problem.sizes[c.index])) for b in bins):
            demand[c.index] = 0
    return demand


def _scheduled_demand(problem: Problem, placement: Placement) -> np.ndarray:
    unscheduled = {p.key for p in placement.unschedulable}
    return np.array([sum(1 for p in c.pods if p.key not in unscheduled) // c.unit for c in problem.classes],
                    dtype=np.int64)


def lower_bound(problem: Problem, bins: list[Bin], placement: Placement, deadline: float,
                initial: list[Pattern]) -> tuple[float, bool]:
    """A certified lower bound on the cost of any plan that schedules the same pods (micro-units)."""
    demand = _scheduled_demand(problem, placement)
    if not demand.any():
        return 0.0, True
    objective = Objective(rank_weight=0, unscheduled_weight=0, best_rank=np.zeros(len(demand), np.int64))
    # unscheduled slack priced at the most any pod could cost keeps the LP feasible under limits
    objective.unscheduled_weight = max(b.cost for b in bins) + 1
    result = column_generation(bins, problem.sizes, demand, objective, _limits(problem), initial, deadline)
    return max(result.lower_bound, 0.0), result.converged


@dataclass
class _Run:
    """One solve: the compiled batch, what every stage reads, and the best plan so far. Stages are
    methods that read and improve it; ``certify`` alone decides the status and the reported bound."""

    problem: Problem
    options: SolveOptions
    started: float
    deadline: float
    stats: _Stats
    greedy: Placement
    bins: list[Bin] = field(default_factory=list)
    objective: Objective | None = None
    demand: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    limits: dict[tuple[int, str], int] = field(default_factory=dict)
    #: greedy's plan as patterns (``greedy_patterns``), made when column generation or the master first asks
    _greedy_patterns: dict[Pattern, int] | None = None
    cg: ColumnGenerationResult | None = None
    #: the certified lower bound so far (micro-units)
    bound: float = 0.0
    best: Placement | None = None
    #: the stage the best plan comes from ("greedy", "dive", "proof", "master")
    source: str = "greedy"
    #: a stage proved the best plan optimal (for the compiled model)
    proven: bool = False
    #: the best plan before the master (its hint)
    warm: Placement | None = None
    #: the stage whose plan was certified within the decision gap (None: not yet)
    decided_after: str | None = None
    #: will column generation run (``colgen_fits``, decided before the construction)?
    colgen_ahead: bool = True
    #: the floored construction's matrices when its plan was kept (``reconstruct`` re-builds with them)
    floored: Matrices | None = None

    @property
    def greedy_patterns(self) -> dict[Pattern, int]:
        """Greedy's plan as patterns, the warm start of column generation and the master (not made when
        neither runs: 10,000 greedy nodes take seconds to express)."""
        if self._greedy_patterns is None:
            self._greedy_patterns = _patterns_of(self.problem, self.bins, self.greedy)
        return self._greedy_patterns

    @property
    def placement(self) -> Placement:
        return self.best if self.best is not None else self.greedy

    def score(self, placement: Placement) -> tuple[int, int]:
        assert self.objective is not None
        return _score(self.problem, self.objective, placement)

    def offer(self, placement: Placement | None, source: str) -> bool:
        """Keep ``placement`` if it beats the best plan so far; a better plan is no longer proven."""
        if placement is None or self.score(placement) >= self.score(self.placement):
            return False
        self.best, self.source, self.proven = placement, source, False
        return True

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def decided(self) -> bool:
        """Is the best plan certified within ``options.gap`` of the bound (or proven optimal)? Then no later
        stage can change the decision by more than the gap the caller accepts, and they are skipped. Only for
        a pure-cost objective with every placeable pod scheduled: otherwise the bound is no bound on the plan.
        The decision is noted once, with the stage its plan comes from."""
        if self.decided_after is not None:
            return True
        if not (self.pure_cost and self.all_placeable_scheduled):
            return False
        cost = self.placement.cost_micros(self.problem)
        if not (self.proven or cost <= self.bound * (1 + self.options.gap) + 0.5):
            return False
        self.decided_after = self.source
        if not self.proven and cost > self.bound + 0.5:
            self.stats.notes.append(f"decided: the {self.source} plan is within the {self.options.gap:.2%} "
                                    "decision gap")
        return True

    def cheap_decision(self) -> bool:
        """Before column generation: the resource-share bound (about a millisecond) may already certify the
        plan within the gap, e.g. every pod placed in room left on existing nodes (cost 0) or a batch whose
        plan fills its nodes; column generation, the dive, the proof and the master are then skipped."""
        if not (self.pure_cost and self.all_placeable_scheduled):
            return False
        if self.placement.cost_micros(self.problem) > 0.5:
            with self.stats.stage("bound"):
                share = share_bound(self.bins, self.problem.sizes, self.demand)
            if share <= self.bound:
                return False
            self.bound = share
        if not self.decided():
            return False
        self.stats.bound_method = "resource-share dual bound"
        return True

    def progress(self, stage: str) -> None:
        _report(self.options, stage, self.problem, self.placement, self.bound)

    @property
    def all_placeable_scheduled(self) -> bool:
        return _all_placeable_scheduled(self.problem, self.demand, self.placement)

    @property
    def pure_cost(self) -> bool:
        """Is the objective cost alone (no NodePool-weight or preference penalties)?"""
        return self.objective is not None and not self.objective.has_penalties

    # stages -------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        with self.stats.stage("bins"):
            self.bins = build_bins(self.problem)
            self.objective = _objective(self.problem, self.bins, self.options)
            self.limits = _limits(self.problem)
            self.demand = placeable_demand(self.problem, self.bins)
        self.stats.bins = len(self.bins)

    def first_improvement(self) -> None:
        """Pattern construction (``solver.lns.construct``): a plan better than greedy's within a share of the
        time, before column generation. The share covers the construction, decoding it and greedy placing what
        it has not placed: the construction stops while greedy's time for the units it leaves still fits (a
        plan cut short and thrown away is Karpenter's answer again; 50,000 diverse pods need about 10 s of
        construction, often more than is left after compiling and greedy). Where per-node counters force many
        nodes, a second construction opens only nodes of the size that lets those take the batch
        (``solver.lns.size_floor``) when the first one's time fits again; the cheaper plan is kept."""
        with self.stats.stage("construct"):
            now = time.monotonic()
            seconds = max(self.deadline - now, 0.0)
            # even with the time spent, a short floor: the construction is what beats Karpenter's answer
            budget = max(seconds * CONSTRUCT_SHARE, CONSTRUCT_FLOOR * self.options.time_limit)
            if not self.colgen_ahead:  # the construction is the improvement: all but the bound's and LNS's time
                budget = max(budget, seconds * (1 - CONSTRUCT_RESERVE))
            units = int(self.demand.sum())
            per_unit = FINISH_MARGIN * self.stats.greedy_seconds / max(int(self.problem.demand.sum()), 1)
            end = now + budget - DECODE_PER_UNIT * units
            setup = CONSTRUCT_SETUP_PER_PAIR * len(self.problem.classes) * len(self.bins)
            if now + setup + per_unit * units > end:
                self.stats.notes.append("pattern construction: not started, it could not be finished in the time "
                                        "left (the large-neighbourhood search improves greedy's plan instead)")
                return
            matrices = Matrices.of(self.bins, self.problem.sizes)
            started = time.monotonic()
            self._construct(matrices, end, per_unit, floored=False)
            spent = time.monotonic() - started
            # the second construction may stretch the share to what a batch without column generation gives it:
            # on such batches column generation and the dive have rarely beaten the construction (KWOK diverse
            # 5,000 pods: 2.4 s for nothing), the floored construction saves 5 %
            stretched = max(end, now + seconds * (1 - CONSTRUCT_RESERVE) - DECODE_PER_UNIT * units)
            if time.monotonic() + spent <= stretched and (floored := self._floored(matrices)) is not None:
                self._construct(floored, stretched, per_unit, floored=True)

    def _floored(self, matrices: Matrices) -> Matrices | None:
        """``matrices`` with the bins below ``solver.lns.size_floor`` closed, None when there is no floor."""
        if CPU not in self.problem.axes:
            return None
        cpu = self.problem.axes.index(CPU)
        floor = size_floor(self.bins, self.problem.sizes, self.demand, cpu, self.problem.resource_axes)
        return None if floor is None else matrices.floored(self.bins, cpu, floor)

    def _construct(self, matrices: Matrices, end: float, per_unit: float, *, floored: bool) -> None:
        """One construction over ``matrices``, decoded, finished greedily when cut short and there is time, and
        offered; a floored one is shrunk (its nodes were opened large)."""
        chosen = construct(self.bins, self.problem.sizes, self.demand, self.limits, end, finish_per_unit=per_unit,
                           matrices=matrices)
        placement = decode(self.problem, self.bins, chosen)
        left = len(placement.unschedulable) - _unplaceable_pods(self.problem, self.demand)
        pods = sum(len(c.pods) for c in self.problem.classes) - _unplaceable_pods(self.problem, self.demand)
        if left > (1 - CONSTRUCT_MIN_SHARE) * pods:
            # greedy would place nearly everything again: its own plan, searched over, is the better use
            self.stats.notes.append(f"pattern construction: cut short with {left} pods left (the "
                                    "large-neighbourhood search improves greedy's plan instead)")
            return
        if left > 0:
            # greedy places the rest only when there is time for it (its cost scales with the pods)
            share = left / max(sum(len(c.pods) for c in self.problem.classes), 1)
            if self.time_left() < FINISH_MARGIN * share * self.stats.greedy_seconds:
                self.stats.notes.append("pattern construction: cut short, no time to finish it")
                return
            placement = shrink(self.problem, finish_greedily(self.problem, placement))
            self.stats.notes.append(f"pattern construction: cut short by the time limit, greedy placed the "
                                    f"{left} pods it left")
        elif floored:
            placement = shrink(self.problem, placement)
        if self.offer(placement, "construct"):
            self.warm = self.placement
            self.floored = matrices if floored else None
            if floored:
                self.stats.notes.append("pattern construction: the floored one (large nodes, then shrunk) was "
                                        "cheaper")

    def colgen_fits(self) -> bool:
        """Can column generation get past its first LP, which nothing interrupts, in the time left? Thousands of
        classes over 1,200 bins take longer than the whole time limit (the stage then overran it by seconds)."""
        start = COLGEN_START_PER_PAIR * len(self.problem.classes) * len(self.bins)
        if start <= COLGEN_START_SHARE * self.time_left():
            return True
        if self.time_left() > MIN_COLGEN_SECONDS:
            self.stats.notes.append(f"column generation not started: its first LP ({len(self.problem.classes)} "
                                    f"classes × {len(self.bins)} bins) would take about {start:.0f} s")
        return False

    def search(self) -> None:
        """Large-neighbourhood search over the best plan with whatever time is left: what a stage cut short by
        the time limit hands over to. Plans of many nodes are re-built a few hundred nodes at a time with the
        construction's fills (``solver.lns.reconstruct``, on the placement itself), smaller ones re-packed exactly
        (``solver.lns.improve``, on patterns: decoding its result comes after it, and its time is kept back)."""
        meets_bound = self.pure_cost and self.all_placeable_scheduled \
            and self.placement.cost_micros(self.problem) <= self.bound + 0.5
        if self.proven or meets_bound or self.decided() or self.time_left() <= 0.3:
            return
        with self.stats.stage("lns"):
            if len(self.placement.new_nodes) > RECONSTRUCT_ABOVE:
                rebuilt, improved, iterations = reconstruct(self.problem, self.bins, self.placement, self.limits,
                                                            self.deadline - 0.2, seed=self.options.seed,
                                                            matrices=self.floored)
                if improved:
                    self.offer(rebuilt, "lns")
            else:
                incumbent = _patterns_of(self.problem, self.bins, self.placement)
                # building each re-pack model and decoding the result come on top of CP-SAT's own time
                # within the decision gap of the bound the batch is decided: the search stops there too
                good_enough = (within_gap(self.bound, self.options.gap)
                               if self.pure_cost and self.all_placeable_scheduled else None)
                result = improve(self.bins, self.problem.sizes, incumbent, self.limits,
                                 self.deadline - 0.2 - DECODE_PER_UNIT * int(self.demand.sum()),
                                 seed=self.options.seed, deterministic=self.options.deterministic,
                                 good_enough=good_enough, stall=self._stall(), workers=self.options.workers)
                improved, iterations = result.improved, result.iterations
                if improved:
                    self.offer(decode(self.problem, self.bins, result.chosen), "lns")
        self.stats.notes.append(f"large-neighbourhood search: {improved} of {iterations} neighbourhoods improved")

    def cheap_bound(self) -> None:
        """No time for column generation: the resource-share dual bound stands in."""
        if self.colgen_ahead:
            self.stats.notes.append("time limit reached before column generation")
        if self.pure_cost and self.all_placeable_scheduled:
            with self.stats.stage("bound"):
                self.bound = share_bound(self.bins, self.problem.sizes, self.demand,
                                         max(self.deadline, time.monotonic() + 0.1))
            self.stats.bound_method = "resource-share dual bound"

    def column_generation(self) -> None:
        assert self.objective is not None
        with self.stats.stage("colgen"):
            now = time.monotonic()
            share = self.options.colgen_share
            if self.problem.conservative:
                share = min(share, CONSERVATIVE_COLGEN_SHARE)
            # the LP need not be solved closer than a quarter of the decision gap for the decision to hold, and
            # each pricing knapsack not closer than a share of that (exact solves price exactly)
            tolerance = max(COLGEN_TOLERANCE, self.options.gap / 4)
            self.cg = column_generation(self.bins, self.problem.sizes, self.demand, self.objective, self.limits,
                                        list(self.greedy_patterns), now + (self.deadline - now) * share,
                                        workers=self.options.workers, tolerance=tolerance,
                                        known_bound=self.bound if self.pure_cost else 0.0,
                                        known_slack=self.options.gap * COLGEN_KNOWN_SLACK,
                                        pricing_gap=tolerance * PRICING_GAP_SHARE if self.options.gap > 0 else 0.0)
        self.stats.patterns = len(self.cg.patterns)
        self.bound = self.cg.lower_bound if np.isfinite(self.cg.lower_bound) else 0.0
        if not self.cg.converged and self.pure_cost:
            with self.stats.stage("bound"):  # column generation stopped early: the cheap dual bound may beat it
                share = share_bound(self.bins, self.problem.sizes, self.demand, self.deadline)
            self.stats.share_bound = share > self.bound
            self.bound = max(self.bound, share)
        self.progress("column generation")

    def dive(self) -> None:
        assert self.cg is not None
        with self.stats.stage("dive"):
            self.offer(_dive(self.problem, self.bins, self.cg, self.demand, self.limits, self.options,
                             self.deadline, self.stats, self.bound if self.pure_cost else 0.0), "dive")
        self.warm = self.placement
        self.progress("dive")

    def proof(self) -> None:
        """Small batches: prove the plan optimal over reduced-cost-filtered slots, or beat it.

        With a decision gap the proof asks less: that no plan costs below ``target`` = cost / (1 + gap). Its
        reduced-cost budget (target − LP) is smaller, so it has fewer slots and closes sooner; "none below the
        target" certifies ``target`` as a lower bound (the plan is then within the gap), and a plan found below
        it and proven best there is optimal outright."""
        assert self.cg is not None and self.objective is not None
        if not (self.pure_cost and self.cg.reduced_cost_floor and self.all_placeable_scheduled):
            return
        cost = self.placement.cost_micros(self.problem)
        target = max(math.ceil(cost / (1 + self.options.gap)), 0) if self.options.gap > 0 else cost
        slots = sum(slot_bounds(self.bins, self.problem.sizes, self.demand, self.cg.reduced_cost_floor,
                                target - self.cg.floor_lp_value, target).values())
        if slots > self.options.max_proof_slots:
            return
        with self.stats.stage("proof"):
            proof = prove(self.bins, self.problem.sizes, self.demand, self.limits, self.cg.reduced_cost_floor,
                          self.cg.floor_lp_value, max(self.cg.lower_bound, 0.0), target,
                          time_limit=self._proof_seconds(), seed=self.options.seed,
                          workers=self.options.workers, deterministic=self.options.deterministic,
                          max_slots=self.options.max_proof_slots)
        what = "optimality proof" if target == cost else f"proof within the {self.options.gap:.2%} decision gap"
        self.stats.notes.append(f"{what}: {proof.status} over {proof.slots} node slots")
        if proof.improved:
            self.offer(decode(self.problem, self.bins, proof.improved), "proof")
        if proof.proven:
            if proof.improved is not None or target >= cost:
                self.proven = True
            else:  # no plan below the target: it is a certified bound
                self.bound = max(self.bound, float(target))
        self.progress("proof")

    def _proof_seconds(self) -> float:
        """Exact solves let the proof use all the time left; a decision gap caps it (``GAP_PROOF_SECONDS``)."""
        left = self.time_left()
        if self.options.gap <= 0:
            return left
        return min(left, max(GAP_PROOF_SECONDS, GAP_PROOF_SHARE * left))

    def master(self) -> None:
        """CP-SAT over every generated pattern, warm-started, with whatever time is left."""
        assert self.cg is not None and self.objective is not None
        if self.proven:
            return
        if not _master_fits(self.problem, self.cg):
            self.stats.notes.append(f"pattern master skipped: {len(self.cg.patterns)} patterns × "
                                    f"{len(self.problem.classes)} classes")
            return
        if self.time_left() <= 0.2:
            return
        with self.stats.stage("master"):
            warm = self.warm or self.placement
            hint = self.greedy_patterns if warm is self.greedy else _patterns_of(self.problem, self.bins, warm)
            result = solve_master(self.bins, self.cg.patterns, self.demand, self.objective, self.limits, hint,
                                  time_limit=self.time_left() * MASTER_SHARE, seed=self.options.seed,
                                  workers=self.options.workers, deterministic=self.options.deterministic,
                                  lower_bound=self.bound, gap=self.options.gap, stall=self._stall())
        if result is None:
            self.stats.notes.append("the pattern master found no plan in time")
            return
        if result.stopped == "stalled":
            self.stats.notes.append(f"pattern master: stopped after {result.wall_seconds:.1f} s without a better plan")
        self.offer(decode(self.problem, self.bins, result.chosen), "master")
        if result.status == "OPTIMAL" and result.objective <= self.bound + 0.5:
            self.proven = True

    def _stall(self) -> float | None:
        """With a decision gap, the master and the search stop once they stall (``solver.cpsat.stalled``): a
        60-pod KWOK batch's master held its warm start for 7.6 s of a 10 s limit, the batch's whole latency.
        Exact solves keep their time limit (and their same-input, same-plan guarantee)."""
        return STALL_SECONDS if self.options.gap > 0 else None

    # the one place a status is decided ---------------------------------------------------------------

    def certify(self) -> tuple[str, float]:
        """(status, reported lower bound in micro-units). OPTIMAL needs a proof (a stage's, or the plan
        meeting the certified bound); it is a statement about the compiled model, so where a family's
        encoding is stricter than Kubernetes (``problem.conservative``) the status is FEASIBLE with
        ``optimality: conservative model`` and the bound comes from a relaxation that keeps only exact
        families (``_relaxed_bound``)."""
        placement, stats = self.placement, self.stats
        if placement is self.greedy and self.cg is not None:
            stats.notes.append("no CP-SAT plan beat greedy; the greedy plan is returned")
        cost = placement.cost_micros(self.problem)
        if self.cg is None:
            meets_bound = self.pure_cost and self.all_placeable_scheduled and cost <= self.bound + 0.5
            status = "OPTIMAL" if meets_bound else ("GREEDY" if self.best is None else "FEASIBLE")
        else:
            meets_bound = self.pure_cost and self.all_placeable_scheduled and cost <= self.bound + 0.5
            status = "OPTIMAL" if self.proven or meets_bound else ("GREEDY" if self.best is None else "FEASIBLE")
        if status == "OPTIMAL":
            stats.bound_method = "proven optimal (CP-SAT over reduced-cost-filtered slots)"
            reported = float(cost)
        elif self.cg is None:
            reported = self.bound
        elif self.pure_cost and self.all_placeable_scheduled:
            stats.bound_method = ("resource-share dual bound (column generation did not converge)"
                                  if stats.share_bound else "column generation LP"
                                  + ("" if self.cg.converged else " (Lagrangian, not converged)"))
            reported = self.bound
        else:
            with stats.stage("bound"):
                reported, _ = lower_bound(self.problem, self.bins, placement,
                                          max(self.deadline, time.monotonic() + 1.0), self.cg.patterns)
            stats.bound_method = "column generation LP over the pods this plan schedules"
        if self.cg is not None and self.cg.converged and self.pure_cost and self.all_placeable_scheduled \
                and self.cg.lp_value <= cost + 0.5:
            stats.lp_bound = self.cg.lp_value  # $/h only: an LP that pays for unscheduled slack is no cost
        if self.problem.conservative:
            if status == "OPTIMAL":
                status, stats.optimality = "FEASIBLE", "conservative model"
            left_out = {p.key for p in placement.unschedulable}
            # the compiled batch relaxed in place (zone pins undone, only exact counters kept) when its stricter
            # encodings allow it: milliseconds; else the batch is recompiled without those families
            with stats.stage("relaxed bound"):
                relaxation = from_problem(self.problem, _scheduled_demand(self.problem, placement))
            # recompiling the batch takes about this long: past the limit, no bound rather than a late one
            if relaxation is None and time.monotonic() + RELAXED_BOUND_SHARE * stats.stages.get("compile", 0.0) \
                    > self.deadline + RELAXED_BOUND_SHARE * stats.stages.get("compile", 0.0) * 1.2:
                stats.notes.append("no time left for a bound over the exact families: none is reported")
                stats.bound_method, relaxed = "none (time limit)", 0.0
            else:
                with stats.stage("relaxed bound"):
                    if relaxation is None:
                        relaxation = recompiled(self.problem.snapshot, {
                            p.key for p in self.problem.snapshot.pending_pods() if p.key not in left_out},
                            self.problem.conservative_by)
                    relaxed = relaxation_bound(relaxation, max(self.deadline, time.monotonic() + 0.5))
                stats.bound_method = ("per-node price bound on a relaxation keeping only Kubernetes' exact rules "
                                      "(stricter here: " + ", ".join(sorted(self.problem.conservative_by)) + ")")
            # the compiled model's own bound holds for its stricter rules only: the relaxation's alone is reported
            reported, stats.lp_bound = relaxed, None
        elif status == "OPTIMAL":
            stats.optimality = "kubernetes"
        return status, reported


def solve(snapshot: Snapshot, options: SolveOptions | None = None) -> SolveResult:
    """The cheapest plan the stages find in the time limit, certified (``_Run.certify``); the cyclic garbage
    collector is paused meanwhile (``solver.gcpause``)."""
    with paused_collection():
        return _solve(snapshot, options or SolveOptions())


def _solve(snapshot: Snapshot, options: SolveOptions) -> SolveResult:
    started = options.started_at if options.started_at is not None else time.monotonic()
    # keep a little time back for decoding, the bound and the plan itself (more for more pods)
    pods = len(snapshot.pods)
    deadline = started + options.time_limit - min(0.5 + pods * RESERVE_PER_POD,
                                                  RESERVE_MAX_SHARE * options.time_limit)
    stats = _Stats()
    with stats.stage("compile"):
        stats.compiled = compile_problem(snapshot, preference_policy=options.preference_policy,
                                         preference_price=options.preference_price)
        problem = merge_classes(stats.compiled)
    stats.notes.extend(f"not modelled: {note}" for note in problem.unmodelled)
    with stats.stage("greedy"):
        greedy = shrink(problem, greedy_placement(problem))
    stats.greedy_seconds = stats.stages["greedy"]
    if not problem.classes:
        return _result(problem, greedy, greedy, 0.0, "EMPTY", started, options, stats)
    run = _Run(problem=problem, options=options, started=started, deadline=deadline, stats=stats, greedy=greedy)
    run.prepare()
    if problem.conservative and not relaxes_in_place(problem):  # certify's bound recompiles: keep time for it
        run.deadline -= min(RELAXED_BOUND_SHARE * stats.stages["compile"], 0.2 * options.time_limit)
    run.colgen_ahead = run.colgen_fits()
    run.first_improvement()
    if run.options.gap > 0 and run.cheap_decision():
        pass  # certified within the decision gap by the cheap bound: nothing below can matter enough
    elif not run.colgen_ahead or run.time_left() <= MIN_COLGEN_SECONDS:
        # anytime: loading, compiling and greedy used most of the time, or the LP would not start in it
        run.cheap_bound()
    else:
        # each stage only runs while the decision is still open (``_Run.decided``)
        run.column_generation()
        for stage in (run.dive, run.proof, run.master):
            if run.decided():
                break
            stage()
    run.search()
    status, bound = run.certify()
    return _result(problem, run.placement, greedy, bound, status, started, options, stats)


def relaxed_bound(snapshot: Snapshot, scheduled: set[str], stricter: Collection[str] | None = None) -> float:
    """A lower bound (micro-units) that holds under Kubernetes' own rules for the ``scheduled`` pending pods:
    the batch compiled without the families whose encoding is stricter than Kubernetes (``stricter``, by name;
    every ``Rule.relaxable`` one when not known) but their exact per-node counters (``solver.bounds.relaxation``),
    bounded by per-node prices (``solver.bounds.nodeshare``).
    Dropping rules or widening admission can only make the optimum cheaper."""
    return relaxation_bound(recompiled(snapshot, scheduled, stricter))


def within_gap(bound: float, gap: float) -> int | None:
    """The dearest plan (micro-$/h) still within the decision gap of ``bound``: where a stage may stop; None
    without a gap or a bound."""
    return math.floor(bound * (1 + gap)) if gap > 0 and bound > 0 else None


def _dive(problem: Problem, bins: list[Bin], cg: ColumnGenerationResult, demand: np.ndarray,
          limits: dict[tuple[int, str], int], options: SolveOptions, deadline: float,
          stats: _Stats, bound: float = 0.0) -> Placement | None:
    if cg.master is None:
        return None
    started = time.monotonic()
    # keep time for finishing greedily; without a master to follow (too large to build in time) the dive
    # may use everything else
    share = 0.5 if _master_fits(problem, cg) else 1.0 - LNS_SHARE
    if cg.out_of_time:
        share = min(share, UNSETTLED_DIVE_SHARE)
    budget = started + max((deadline - started - FINISH_SHARE * stats.greedy_seconds) * share, 0.2)
    # a plan within the decision gap of the bound decides the batch: the finish may stop there
    chosen = dive(cg.master, bins, problem.sizes, demand, limits, budget, seed=options.seed,
                  workers=options.workers, deterministic=options.deterministic,
                  good_enough=within_gap(bound, options.gap))
    if chosen is None:
        stats.notes.append(f"LP dive: no plan (limits) in {time.monotonic() - started:.2f} s")
        return None
    placement = decode(problem, bins, chosen)
    left = len(placement.unschedulable) - _unplaceable_pods(problem, demand)
    if left > 0:  # cut short by time: greedy places the rest around what the dive committed
        placement = shrink(problem, finish_greedily(problem, placement))
    outcome = f"{left} pods left to greedy" if left > 0 else "done"
    stats.notes.append(f"LP dive: {outcome} in {time.monotonic() - started:.2f} s")
    return placement


def _master_fits(problem: Problem, cg: ColumnGenerationResult) -> bool:
    """Can the CP-SAT pattern master be built in reasonable time (its rows touch patterns × classes)?"""
    return len(cg.patterns) * len(problem.classes) <= MASTER_MAX_TERMS


def _report(options: SolveOptions, stage: str, problem: Problem, placement: Placement, bound: float) -> None:
    if options.on_progress is not None:
        options.on_progress(stage, placement.cost_micros(problem) / MICRO, max(bound, 0.0) / MICRO)


def _all_placeable_scheduled(problem: Problem, demand: np.ndarray, placement: Placement) -> bool:
    """Are the only unscheduled pods those no bin can take? (Demand counts units: a bundle is many pods.)"""
    return len(placement.unschedulable) == _unplaceable_pods(problem, demand)


def _unplaceable_pods(problem: Problem, demand: np.ndarray) -> int:
    return int((problem.demand - demand) @ np.array([c.unit for c in problem.classes], dtype=np.int64))


@dataclass
class _Stats:
    stages: dict[str, float] = field(default_factory=dict)
    greedy_seconds: float = 0.0
    bins: int = 0
    patterns: int = 0
    bound_method: str = "none"
    #: the reported bound is ``bound.share_bound``'s, not column generation's
    share_bound: bool = False
    #: the problem before ``merge_classes``: explanations name the rules of each pod's own class
    compiled: Problem | None = None
    lp_bound: float | None = None
    #: what an OPTIMAL status is a statement about: "kubernetes", or "conservative model" when a family's
    #: encoding is stricter than Kubernetes (the status is then FEASIBLE)
    optimality: str | None = None
    notes: list[str] = field(default_factory=list)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.stages[name] = round(self.stages.get(name, 0.0) + time.monotonic() - began, 3)


def _result(problem: Problem, placement: Placement, greedy: Placement, bound: float, status: str,
            started: float, options: SolveOptions, stats: _Stats) -> SolveResult:
    """The plan, through the gate: what the verifier rejects is left pending (``solver.gate``), and a
    plan the gate changed gets a bound recomputed for the pods it still schedules."""
    plan = to_plan(problem, placement, greedy, bound, status, started, options, stats)
    with stats.stage("verify"):
        outcome = gate(problem.snapshot, plan)
    if outcome.changed:
        with stats.stage("relaxed bound"):
            scheduled = {k for c in outcome.plan.node_claims for k in c.pods} | {
                k for e in outcome.plan.existing_nodes for k in e.pods}
            relaxed = relaxed_bound(problem.snapshot, scheduled) / MICRO
        cost = outcome.plan.cost
        bound = min(relaxed, cost.total)
        plan = outcome.plan.model_copy(update={
            "cost": cost.model_copy(update={"lower_bound": round(bound, 6), "gap": round(
                cost.total / bound - 1, 6) if bound > 0 else (0.0 if cost.total == 0 else None)}),
            "solver": outcome.plan.solver.model_copy(update={
                "bound_method": "resource-share bound over the pods the gated plan schedules (exact families only)",
                "notes": distinct(outcome.plan.solver.notes + outcome.notes()), "stages": stats.stages})})
    else:
        plan = plan.model_copy(update={"solver": plan.solver.model_copy(update={"stages": stats.stages})})
    return SolveResult(plan=with_devices(problem.snapshot, plan), placement=placement, greedy=greedy, problem=problem)


def _claim_name(index: int, pool: str) -> str:
    return f"{pool}-{index:05d}"


def planned_claims(problem: Problem, placement: Placement, name: Callable[[int, str], str] = _claim_name
                   ) -> tuple[list[PlannedNodeClaim], list[ExistingNodeAssignment]]:
    """A placement's new nodes as plan NodeClaims and its pods on existing nodes (provisioning and
    consolidation plans share this shape)."""
    claims = []
    for i, node in enumerate(placement.new_nodes):
        tmpl = problem.templates[node.template]
        requests = Resources()
        for pod in node.pods:
            requests = requests + pod.requests
        claims.append(PlannedNodeClaim(
            name=name(i, tmpl.pool.name), node_pool=tmpl.pool.name,
            instance_type=tmpl.instance_type.name, zone=tmpl.offering.zone,
            capacity_type=tmpl.offering.capacity_type, price=tmpl.offering.price,
            pods=sorted(p.key for p in node.pods), labels=dict(sorted(tmpl.labels.items())),
            requests=(requests + tmpl.daemon_overhead).to_quantities(),
            allocatable=tmpl.instance_type.allocatable.to_quantities()))
    existing = [ExistingNodeAssignment(name=problem.existing[e].name, pods=sorted(p.key for p in pods))
                for e, pods in sorted(placement.existing.items(), key=lambda kv: problem.existing[kv[0]].name)]
    return claims, existing


def _reasons(problem: Problem, pods: list[Pod]) -> dict[str, str]:
    """Why each pod is unschedulable: ``explain`` reads only the pod's class, so once per class (3,333
    unschedulable pods of 7 hostname-affinity groups are 7 explanations, not 3,333 class scans)."""
    if not pods:
        return {}
    class_of = problem.class_of()
    by_class: dict[int, str] = {}
    out = {}
    for pod in pods:
        c = class_of.get(pod.key, -1)
        if c not in by_class:
            by_class[c] = explain(problem, pod)
        out[pod.key] = by_class[c]
    return out


def to_plan(problem: Problem, placement: Placement, greedy: Placement, bound_micros: float, status: str,
            started: float, options: SolveOptions, stats: _Stats) -> ProvisioningPlan:
    claims, existing = planned_claims(problem, placement)
    reasons = _reasons(stats.compiled or problem, placement.unschedulable)
    unschedulable = [UnschedulablePod(pod=p.key, reason=reasons[p.key])
                     for p in sorted(placement.unschedulable, key=lambda p: p.key)]
    total = sum(c.price for c in claims)
    cost_micros = placement.cost_micros(problem)
    if bound_micros > cost_micros + 1e-6 * max(cost_micros, 1):
        raise AssertionError(f"lower bound {bound_micros} above plan cost {cost_micros}: solver defect")
    # the bound is in rounded micro-units; never let that rounding put it above the float total
    bound = min(bound_micros / MICRO, total)
    if status == "OPTIMAL":
        bound = total
    greedy_cost = sum(problem.templates[n.template].offering.price for n in greedy.new_nodes)
    return ProvisioningPlan(
        node_claims=claims, existing_nodes=existing, unschedulable=unschedulable,
        cost=PlanCost(total=round(total, 6), lower_bound=round(bound, 6),
                      gap=round(total / bound - 1, 6) if bound > 0 else (0.0 if total == 0 else None),
                      greedy=round(greedy_cost, 6),
                      lp_bound=round(min(stats.lp_bound / MICRO, total), 6) if stats.lp_bound is not None else None),
        solver=SolverReport(status=status, wall_seconds=round(time.monotonic() - started, 3), seed=options.seed,
                            time_limit_seconds=options.time_limit, pod_classes=len(problem.classes),
                            templates=stats.bins, patterns=stats.patterns, bound_method=stats.bound_method,
                            optimality=stats.optimality, conservative=distinct(problem.conservative),
                            greedy_seconds=round(stats.greedy_seconds, 3), stages=stats.stages,
                            notes=distinct(stats.notes)))


def distinct(notes: list[str]) -> list[str]:
    """Each distinct note once, in first-seen order; a repeated one ends with ``(×N)``."""
    counts = Counter(notes)
    return [note if counts[note] == 1 else f"{note} (×{counts[note]})" for note in dict.fromkeys(notes)]
