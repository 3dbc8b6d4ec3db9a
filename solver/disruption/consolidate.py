"""Consolidation: which candidate nodes to remove, where each evicted pod goes, what replaces them.

The decision is the CP-SAT model of ``model.py`` over a shortlist of candidates. Replacement patterns come
from re-provisioning every candidate's pods with the full pipeline (whose LP bound is also the
cheapest-reachable-state bound), single-class and mixed fills of every bin, and the yardstick's replacement;
Karpenter's own decision and the drain-first heuristic (over every kept node) are warm starts, so the plan is
never worse than either. Up to ``WHOLE_MODEL_CANDIDATES`` candidates one model decides them all; above, the
large-neighbourhood search of ``lns.py`` improves the better start window by window (the whole model does not
reach its warm start in time there), and stops once the plan reaches the savings bound. When the budgets
stop the plan short of the cheapest reachable state, the decision is a budget-sized step toward the
budget-free plan instead (``target.py``), unless Karpenter's own decision saves more now.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from ortools.sat.python import cp_model

from model.instancetype import MICRO
from model.plan import ProvisioningPlan
from model.pod import Pod
from model.snapshot import Snapshot
from solver.cpsat import STALL_SECONDS, make_solver, solve_stopping
from solver.disruption.candidates import ClusterState, NodeState
from solver.disruption.drain import drain_first
from solver.disruption.lns import Incumbent, Search, SearchReport
from solver.disruption.model import Model, Pattern, fill_patterns, finish, fits, onto_existing, patterns_from
from solver.disruption.moves import movable_copies, solver_snapshot
from solver.disruption.target import Target, budget_step, lifted, portable, restore, workload
from solver.disruption.yardstick import Decision, Yardstick
from solver.placement import Placement
from solver.problem import Problem, compile_problem
from solver.provision import SolveOptions, solve

#: the model considers at least this many candidates, and at most the larger figure (``_shortlist``)
MIN_SHORTLIST = 80
MAX_SHORTLIST = 400
#: existing nodes the whole model may move pods onto, besides the candidates (``_destinations``)
MAX_DESTINATIONS = 400
#: up to this many candidates one model decides them all (200 at 1,000 nodes: OPTIMAL in the bench's 10 s);
#: above, the large-neighbourhood search (500 at 5,000 nodes: the whole model found no plan in 2.6 s)
WHOLE_MODEL_CANDIDATES = 250
#: the re-provisioning solve (patterns, bound) gets at most this many seconds
MAX_REPROVISION = 4.0
#: share of the time left that solving the budget-free target may use (``_toward_target``)
TARGET_SHARE = 0.5


@dataclass(frozen=True)
class ConsolidateOptions:
    time_limit: float = 10.0
    #: the moment budgets, consolidateAfter, expireAfter and do-not-disrupt durations are evaluated at
    now: datetime | None = None
    #: $/h one unit of Karpenter eviction cost is worth; 0 = any saving justifies a move, fewer evictions
    #: break ties
    eviction_price: float = 0.0
    #: allow replacing spot nodes with spot nodes (Karpenter: feature flag, off by default)
    spot_to_spot: bool = False
    #: run the Karpenter-style yardstick too (warm start, never-worse guarantee, ``cost.yardstickSavings``)
    yardstick: bool = True
    seed: int = 0
    workers: int = 2
    deterministic: bool = True
    #: share of the time limit the re-provisioning solve (patterns and bound) may use
    reprovision_share: float = 0.25
    started_at: float | None = None
    #: when the budgets cap the plan, step toward the budget-free plan (``target.py``) rather than save the
    #: most now
    lookahead: bool = True
    #: the decision gap (``SolveOptions.gap``; the controller's ``--decision-gap``): the re-provisioning solve
    #: stops once its plan is certified within it, and the whole model once CP-SAT's bound is within it of the
    #: best plan's cost after the move. 0: each runs to its share of the time limit
    gap: float = 0.0
    #: the budget-free plan an earlier pass stepped toward (``Outcome.target``): its next step is taken
    #: without solving it again while it still holds on this cluster (``target.restore``)
    target: Target | None = None


@dataclass
class Outcome:
    """The chosen removals and where their pods go, as a placement over ``problem``."""

    removed: list[NodeState]
    placement: Placement
    problem: Problem
    status: str
    objective_bound: float | None = None
    lower_bound: float | None = None
    yardstick: Decision | None = None
    notes: list[str] = field(default_factory=list)
    patterns: int = 0
    #: the plan this one improved on (the search's start): what is returned if this one fails verification; or
    #: how to work it out, when that costs a compile only a rejected plan needs (``fallen_back``)
    fallback: Outcome | Callable[[], Outcome | None] | None = None
    search: SearchReport | None = None
    #: the budget-free plan this outcome is a step of, for the next pass (``ConsolidateOptions.target``)
    target: Target | None = None

    def fallen_back(self) -> Outcome | None:
        """The plan to return instead of this one (``fallback``), or None."""
        return self.fallback() if callable(self.fallback) else self.fallback


def _receivers(snapshot: Snapshot, state: ClusterState, shortlist: list[NodeState]) -> Snapshot:
    """The snapshot the re-provisioning solve packs into: nodes outside the shortlist that are not among the
    ``MAX_DESTINATIONS`` with the most free cpu + memory are marked unschedulable, so they neither receive
    pods nor cost its compile time (they still count for NodePool limits and topology)."""
    if len(snapshot.nodes) <= MAX_DESTINATIONS + len(shortlist):
        return snapshot
    used: dict[str, list[float]] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.terminal:
            row = used.setdefault(pod.node_name, [0.0, 0.0])
            row[0] += pod.requests["cpu"]
            row[1] += pod.requests["memory"]
    room = {}
    for node in snapshot.nodes:
        cpu, mem = node.allocatable["cpu"] or 1, node.allocatable["memory"] or 1
        row = used.get(node.name, [0.0, 0.0])
        room[node.name] = (cpu - row[0]) / cpu + (mem - row[1]) / mem
    keep = {s.name for s in shortlist}
    keep |= set(sorted((n for n in room if n not in keep), key=lambda n: (-room[n], n))[:MAX_DESTINATIONS])
    nodes = tuple(n if n.name in keep else n.model_copy(update={"unschedulable": True}) for n in snapshot.nodes)
    return snapshot.model_copy(update={"nodes": nodes})


def _destinations(problem: Problem, shortlist: list[NodeState]) -> set[int] | None:
    """Existing nodes the whole model moves pods onto: the shortlist's and the ``MAX_DESTINATIONS`` others
    with the most free cpu + memory (shares of allocatable); None (every node) on smaller clusters. The
    drain-first start and the search use every node."""
    if len(problem.existing) <= MAX_DESTINATIONS + len(shortlist):
        return None
    names = {s.name for s in shortlist}
    alloc = np.array([[max(c.node.allocatable["cpu"], 1), max(c.node.allocatable["memory"], 1)]
                      for c in problem.existing], dtype=float)
    room = (problem.existing_free[:, :2] / alloc).sum(axis=1)
    others = sorted((e for e, c in enumerate(problem.existing) if c.name not in names), key=lambda e: (-room[e], e))
    return {e for e, c in enumerate(problem.existing) if c.name in names} | set(others[:MAX_DESTINATIONS])


def _shortlist(state: ClusterState) -> list[NodeState]:
    """Candidates the model decides on: every forced or drifted one, and the most expensive others up to
    a few times what the budgets allow at once (the rest stay, as destinations). Keeps 1,000+ node
    clusters tractable; the limit is reported in the plan's notes."""
    allowance = sum(max((lim.allowed for lim in limits), default=0) for limits in state.budgets.values())
    keep = max(min(max(MIN_SHORTLIST, 2 * allowance), MAX_SHORTLIST), allowance)
    forced = [s for s in state.candidates if s.reason in ("Expired", "Drifted")]
    others = sorted((s for s in state.candidates if s.reason not in ("Expired", "Drifted")),
                    key=lambda s: (-s.price, len(s.pods), s.name))
    return forced + others[:keep]


def _placement_of(problem: Problem, candidates: list[NodeState], removed: list[int],
                  onto: dict[tuple[int, int], int], class_of: dict[str, int]) -> Placement:
    """The drain heuristic's counts as real pods on existing nodes."""
    queues: list[list[Pod]] = [[] for _ in problem.classes]
    for k in removed:
        for pod in candidates[k].pods:
            queues[class_of[pod.key]].append(pod)
    placement = Placement()
    onto_existing(placement, queues, onto)
    placement.unschedulable = [p for q in queues for p in q]
    return placement


def _after_bound(state: ClusterState, candidates: list[NodeState], options: ConsolidateOptions,
                 bound_micros: float) -> float | None:
    """CP-SAT's bound as a cost after the move, over what the model considered (not with drift/expiration
    weights or an eviction price in the objective)."""
    if options.eviction_price or any(s.reason in ("Drifted", "Expired") for s in candidates):
        return None
    return sum(s.price for s in state.nodes) + bound_micros / MICRO


def reachable_cost(state: ClusterState, reprovisioned: ProvisioningPlan) -> float | None:
    """Cheapest reachable cluster cost, ignoring budgets and PDBs: nodes that may not go, plus the LP bound
    of re-provisioning every candidate's pods. Valid when each candidate could be bought again at its price
    (priced from the catalog, not drifted) and every pod found a place."""
    if reprovisioned.unschedulable or not all(s.priced and s.reason != "Drifted" for s in state.candidates):
        return None
    return sum(s.price for s in state.nodes if not s.candidate) + reprovisioned.cost.lower_bound


def budget_savings_bound(state: ClusterState) -> float:
    """No plan saves more than the forced (expired) nodes plus, per pool, its most expensive voluntary
    candidates up to what the budgets allow per reason: replacements only cost, removals are capped."""
    total = sum(s.price for s in state.candidates if s.reason == "Expired")
    for pool, limits in state.budgets.items():
        members = [s for s in state.candidates if s.pool is not None and s.pool.name == pool
                   and s.reason != "Expired"]
        voluntary = sorted((s.price for s in members), reverse=True)
        cap = 0
        for reason in ("Empty", "Underutilized", "Drifted"):
            covering = [lim.allowed for lim in limits if lim.covers(reason)]
            cap += min(covering) if covering else len(voluntary)
        for lim in limits:  # a budget covering several reasons caps their sum
            cap = min(cap, lim.allowed + sum(1 for s in members if s.reason and not lim.covers(s.reason)))
        total += sum(voluntary[:cap])
    return total


def savings(outcome_removed: list[NodeState], problem: Problem, placement: Placement) -> float:
    return sum(s.price for s in outcome_removed) - sum(problem.templates[n.template].offering.price
                                                         for n in placement.new_nodes)


def _beats(removed: list[NodeState], saving: float, outcome: Outcome, eviction_price: float) -> bool:
    """Is a fallback (drain-first, yardstick) better than ``outcome`` in the model's order: more expired and
    drifted nodes replaced first, then more savings net of ``eviction_price`` × eviction cost?"""
    def drifted(nodes: list[NodeState]) -> int:
        return sum(1 for s in nodes if s.reason in ("Drifted", "Expired"))

    def net(nodes: list[NodeState], gross: float) -> float:
        return gross - eviction_price * sum(s.eviction_cost for s in nodes)
    if drifted(removed) != drifted(outcome.removed):
        return drifted(removed) > drifted(outcome.removed)
    return net(removed, saving) > net(outcome.removed, savings(outcome.removed, outcome.problem,
                                                                outcome.placement)) + 1e-9


@dataclass
class Compiled:
    """The candidates the model decides on, compiled: their pods (as movable copies, ``moves.py``) are the
    classes, every node stays (kept nodes receive pods)."""

    candidates: list[NodeState]
    problem: Problem
    class_of: dict[str, int]
    copies: list[Pod]
    snapshot: Snapshot
    state: ClusterState

    def emptied(self) -> Snapshot:
        """The shortlist removed and its pods pending, on the nodes ``_receivers`` keeps: what re-provisioning
        packs."""
        return solver_snapshot(_receivers(self.snapshot, self.state, self.candidates),
                               {s.name: s.pods for s in self.candidates})


def _drain_outcome(compiled: Compiled, removed: list[int], onto: dict[tuple[int, int], int], lower: float,
                   patterns: int = 0) -> Outcome:
    """The drain heuristic's removals and counts as a plan."""
    problem, candidates = compiled.problem, compiled.candidates
    return Outcome([candidates[k] for k in removed],
                   _placement_of(problem, candidates, removed, onto, compiled.class_of), problem, "FEASIBLE",
                   lower_bound=lower, patterns=patterns)


def compile_candidates(snapshot: Snapshot, state: ClusterState) -> Compiled:
    """The shortlist (``_shortlist``) and its pods compiled against the whole cluster."""
    candidates = _shortlist(state)
    nodes, raw = {n.name: n for n in snapshot.nodes}, list(snapshot.raw_objects)
    copies = [c for c in movable_copies(((nodes[s.name], s.pods) for s in candidates), raw)
              if c.pending and not c.daemon and not c.scheduling_gated]  # as Snapshot.pending_pods
    problem = compile_problem(snapshot.model_copy(update={"pods": tuple(p for p in snapshot.pods if p.node_name)}),
                              pods=copies)
    class_of = {pod.key: c.index for c in problem.classes for pod in c.pods}
    return Compiled(candidates, problem, class_of, copies, snapshot, state)


def plan_consolidation(snapshot: Snapshot, state: ClusterState, options: ConsolidateOptions,
                       deadline: float, stage: Callable[[str, float], None]) -> Outcome | None:
    """The best removal set found by the deadline, or None when there is no candidate."""
    if not state.candidates:
        return None
    decision = None
    if options.yardstick:
        t0 = time.monotonic()
        budget = t0 + (deadline - t0) * 0.3
        decision = Yardstick(snapshot, state, spot_to_spot=options.spot_to_spot, deadline=budget).decide()
        stage("yardstick", time.monotonic() - t0)
    bound = budget_savings_bound(state)
    lower = sum(s.price for s in state.nodes) - bound
    notes: list[str] = []
    if options.lookahead and _budget_binds(state, bound, options):
        step = _toward_target(snapshot, state, options, deadline, stage, lower)
        if step is not None and (decision is None or not _beats(decision.removed, decision.savings, step, 0.0)):
            # should the step fail verification the gate falls back to drain-first over the budgeted shortlist,
            # compiled only then (at 5,000 nodes 1.4 s of a pass the step alone decides)
            step.fallback = lambda: _drain_first_outcome(snapshot, state, lower)
            step.yardstick = decision
            step.notes = [f"not modelled: {n}" for n in step.problem.unmodelled] + step.notes
            return step
        if step is not None:
            notes.append(f"the yardstick's {decision.method if decision else ''} decision saves more now than "
                         "the step toward the budget-free plan; the budgeted plan is solved")
    started = time.monotonic()
    compiled = compile_candidates(snapshot, state)
    candidates, problem, class_of, copies = compiled.candidates, compiled.problem, compiled.class_of, compiled.copies
    stage("compile", time.monotonic() - started)
    notes[:0] = [f"not modelled: {n}" for n in problem.unmodelled]
    if len(candidates) < len(state.candidates):
        notes.append(f"the model considered the {len(candidates)} most expensive of {len(state.candidates)} "
                     "candidates (the budgets' allowance, or twice it up to a few hundred); the others stay")
    t0 = time.monotonic()
    drained, onto = drain_first(problem, state, candidates, class_of)
    drain_saving = sum(candidates[k].price for k in drained)
    stage("drain", time.monotonic() - t0)
    large = len(candidates) > WHOLE_MODEL_CANDIDATES
    # on the search's side a drain-first plan that already saves the bound is the answer (nothing can save
    # more; the whole model would still look for fewer evictions)
    settled = large and not options.eviction_price and drain_saving >= bound - 1e-9 and not any(
        s.reason in ("Drifted", "Expired") for s in candidates)
    patterns: list[Pattern] = []
    if settled:
        notes.append("the drain-first plan reaches the savings bound: no re-provisioning or search needed")
    else:
        t0 = time.monotonic()
        share = min((deadline - t0) * options.reprovision_share, MAX_REPROVISION)
        everything = solve(compiled.emptied(),
                           SolveOptions(time_limit=max(share, 0.5), seed=options.seed, workers=options.workers,
                                        deterministic=options.deterministic, gap=options.gap))
        stage("reprovision", time.monotonic() - t0)
        if len(candidates) == len(state.candidates):
            reachable = reachable_cost(state, everything.plan)
            lower = max(lower, reachable) if reachable is not None else lower
        total = np.bincount([class_of[p.key] for p in copies], minlength=len(problem.classes))
        patterns = patterns_from(problem, everything.problem, everything.placement, class_of)
        patterns += fill_patterns(problem, total)
        if decision is not None:
            patterns += patterns_from(problem, decision.problem, decision.placement, class_of)
        patterns = [p for p in dict.fromkeys(patterns) if fits(problem, p)]
    drain = _drain_outcome(compiled, drained, onto, lower, len(patterns))
    outcome: Outcome
    if settled:
        outcome = drain
    elif large:
        t0 = time.monotonic()
        search = Search(problem, state, candidates, patterns, eviction_price=options.eviction_price,
                        spot_to_spot=options.spot_to_spot, seed=options.seed)
        found, report = search.improve(Incumbent(drained, drain.placement), deadline,
                                       target=bound if not options.eviction_price else None)
        stage("search", time.monotonic() - t0)
        notes.append(f"large-neighbourhood search from the drain-first plan: {report.windows} window(s), "
                     f"{report.improvements} improvement(s), net savings {report.start:.3f} → {report.end:.3f} $/h")
        outcome = Outcome([candidates[k] for k in found.removed], found.placement, problem, "FEASIBLE",
                          lower_bound=lower, patterns=len(patterns),
                          fallback=drain if report.improvements else None, search=report)
    elif (ceiling := _gap_ceiling(state, candidates, options, lower)) is not None and \
            sum(s.price for s in state.nodes) - max(drain_saving, decision.savings if decision else 0.0) <= ceiling:
        # the warm start is already a plan within the decision gap: solving would only stop at it, and OR-Tools
        # 9.15 aborts the process when an interleaved search is stopped while it loads that hint (``SearchStop``)
        notes.append(f"the warm start is within the {options.gap:.2%} decision gap of the {lower:.3f} $/h bound: "
                     "no model solved")
        outcome = drain  # the yardstick's decision, below, when it saves more
    else:
        outcome = _whole_model(problem, state, candidates, patterns, options, deadline, stage, lower,
                               drained, onto, drain_saving, decision, notes)
        if _beats(drain.removed, drain_saving, outcome, options.eviction_price):
            notes.append("the drain-first heuristic saves more than CP-SAT found in time; it is the plan")
            outcome = drain
    if decision is not None and _beats(decision.removed, decision.savings, outcome, options.eviction_price):
        notes.append(f"the yardstick's {decision.method} decision saves more; it is the plan")
        outcome = Outcome(decision.removed, decision.placement, decision.problem, "FEASIBLE", lower_bound=lower,
                          patterns=len(patterns))
    outcome.yardstick = decision
    outcome.notes = notes + outcome.notes
    return outcome


def _gap_ceiling(state: ClusterState, candidates: list[NodeState], options: ConsolidateOptions,
                 lower: float) -> float | None:
    """The cost after the move that ends the whole model's search (within ``options.gap`` of ``lower``), or None
    without a gap or where the objective is not cost and evictions alone (drift weights, an eviction price:
    ``_after_bound``)."""
    if options.gap <= 0 or _after_bound(state, candidates, options, 0.0) is None:
        return None
    return lower * (1 + options.gap) + 1e-9


def _drain_first_outcome(snapshot: Snapshot, state: ClusterState, lower: float) -> Outcome | None:
    """Drain-first over the budgeted shortlist, as a plan (None when it removes nothing)."""
    compiled = compile_candidates(snapshot, state)
    drained, onto = drain_first(compiled.problem, state, compiled.candidates, compiled.class_of)
    return _drain_outcome(compiled, drained, onto, lower) if drained else None


def _budget_binds(state: ClusterState, bound: float, options: ConsolidateOptions) -> bool:
    """Do the budgets cap what the candidates could save (so the greedy plan may stall above the reachable
    state)? Drift and expiration go first by their own rules, and an eviction price weighs each step's
    evictions: those plans stay the budgeted model's."""
    return (not options.eviction_price and not any(s.reason in ("Drifted", "Expired") for s in state.candidates)
            and bound < sum(s.price for s in state.candidates) - 1e-9)


def _restored(snapshot: Snapshot, state: ClusterState, previous: Target | None) -> Outcome | None:
    """The rest of the previous pass's target on this cluster (``target.restore``), or None (also when the pods
    it was solved for are gone: ``Target.stale``)."""
    if previous is None or previous.stale(snapshot):
        return None
    free = lifted(state)
    compiled = compile_candidates(snapshot, free)
    rest = restore(previous, compiled.problem, free)
    if rest is None:
        return None
    removed, placement, kept = rest
    notes = [f"the previous pass's target keeps {len(kept)} node(s) it removed, e.g. {kept[0]}"] if kept else []
    return Outcome(removed, placement, compiled.problem, "FEASIBLE", target=previous, notes=notes)


def _toward_target(snapshot: Snapshot, state: ClusterState, options: ConsolidateOptions, deadline: float,
                   stage: Callable[[str, float], None], lower: float) -> Outcome | None:
    """One budget-sized step of the budget-free plan (``target.py``): the rest of ``options.target`` where it
    still holds, else solved in ``TARGET_SHARE`` of the time left; None when the target removes nothing or no
    part of it fits the budgets now."""
    t0 = time.monotonic()
    target = _restored(snapshot, state, options.target)
    restored = target is not None
    if options.target is not None:
        stage("target restored" if restored else "target not restored", time.monotonic() - t0)
    if target is None:
        t0 = time.monotonic()
        target = plan_consolidation(snapshot, lifted(state), dataclasses.replace(options, yardstick=False,
                                                                                 lookahead=False, target=None),
                                    t0 + (deadline - t0) * TARGET_SHARE, lambda name, s: stage(f"target {name}", s))
        stage("target", time.monotonic() - t0)
        if target is not None:
            target.target = portable(target.problem, target.removed, target.placement, t0, workload(snapshot))
    if target is None or not target.removed or target.placement.unschedulable:
        return None
    step = budget_step(state, target.problem, target.removed, target.placement, spot_to_spot=options.spot_to_spot)
    if step is None:
        return None
    removed, placement = step
    after = sum(s.price for s in state.nodes) - savings(target.removed, target.problem, target.placement)
    source = "the previous pass's, still holding" if restored else "solved now"
    note = (f"a step toward the budget-free plan ({source}: it removes {len(target.removed)} node(s), "
            f"{after:.3f} $/h after): {len(removed)} of them now, within the budgets")
    # a plan within the budgets is a plan without them: the target's bound holds for the step too (a restored
    # target's bound was for an earlier cluster: not carried over)
    floor = max(lower, target.lower_bound) if target.lower_bound is not None else lower
    return Outcome(removed, placement, target.problem, "FEASIBLE", lower_bound=floor, patterns=target.patterns,
                   notes=[note, *(target.notes if restored else [])], target=target.target)


def _whole_model(problem: Problem, state: ClusterState, candidates: list[NodeState], patterns: list[Pattern],
                 options: ConsolidateOptions, deadline: float, stage: Callable[[str, float], None], lower: float,
                 drained: list[int], onto: dict[tuple[int, int], int], drain_saving: float,
                 decision: Decision | None, notes: list[str]) -> Outcome:
    """One CP-SAT model over every shortlisted candidate, warm-started by the better of the yardstick and
    drain-first."""
    t0 = time.monotonic()
    destinations = _destinations(problem, candidates)
    if destinations is not None:
        destinations |= {e for e, _ in onto}  # drain-first used every node: its warm start stays feasible
    model = Model(problem, state, candidates, patterns, eviction_price=options.eviction_price,
                  spot_to_spot=options.spot_to_spot, destinations=destinations)
    if decision is not None and decision.savings >= drain_saving:
        model.hint_placement([s.name for s in decision.removed], decision.problem, decision.placement)
    else:
        model.hint_values(drained, onto)
    solver = make_solver(max(deadline - time.monotonic(), 0.1), options.seed, options.workers, options.deterministic)
    solver.parameters.symmetry_level = 0  # symmetry detection alone can take seconds at 1,000 nodes
    if options.deterministic:
        # interleaved subsolvers (LNS included) stay deterministic; one plain worker often never reaches
        # the warm start's neighbourhood on 1,000-node models
        solver.parameters.interleave_search = True
        solver.parameters.num_workers = max(options.workers, 4)
    if options.gap > 0:
        # the objective is minus the savings (scaled): a plan within the gap of the most saving
        solver.parameters.relative_gap_limit = options.gap
        # CP-SAT's own bound on the savings rarely closes the gap (its LP does not know the re-provisioning
        # bound): the first plan whose cost after the move is within the gap of ``lower`` ends the search
        ceiling = _gap_ceiling(state, candidates, options, lower)
        before, tie = sum(s.price for s in state.nodes), model.tie

        def within(objective: float) -> bool:
            # the objective is tie × (cost after − cost before) in micro-$/h plus evictions (< tie)
            return ceiling is not None and before + (objective // tie) / MICRO <= ceiling
        status, stop = solve_stopping(solver, model.m, within, stall=STALL_SECONDS)
        if stop.reason == "enough":
            notes.append(f"the model stopped at a plan within the {options.gap:.2%} decision gap of the "
                         f"{lower:.3f} $/h bound")
        elif stop.reason == "stalled":
            notes.append(f"the model stopped after {time.monotonic() - t0:.1f} s: no better plan for as long as "
                         "its best took")
    else:
        status = solver.solve(model.m)
    stage("model", time.monotonic() - t0)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        notes.append(f"CP-SAT found no plan in time ({solver.status_name(status)})")
        return Outcome([], Placement(), problem, "TIMEOUT", lower_bound=lower, patterns=len(patterns))
    removed, placement = model.decode(solver)
    placement = finish(problem, removed, placement, options.spot_to_spot)
    if placement.unschedulable:
        notes.append(f"decode left {len(placement.unschedulable)} pod(s) without a destination; plan dropped")
        return Outcome([], Placement(), problem, "TIMEOUT", lower_bound=lower, patterns=len(patterns))
    # a search stopped by the gap limit also reports OPTIMAL: only a bound the plan meets proves it
    proven = status == cp_model.OPTIMAL and solver.objective_value <= solver.best_objective_bound + 0.5
    return Outcome(removed, placement, problem, "OPTIMAL" if proven else "FEASIBLE",
                   objective_bound=_after_bound(state, candidates, options, solver.best_objective_bound / model.tie),
                   lower_bound=lower, patterns=len(patterns))
