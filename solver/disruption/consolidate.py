"""Consolidation as one CP-SAT model: which candidate nodes to remove, where each evicted pod goes.

Variables: ``remove[k]`` per candidate node; ``onto[e, c]`` evicted pods of class ``c`` placed on existing node
``e`` (only while ``e`` is kept); ``launch[p]`` copies of replacement pattern ``p`` (a template and pods per
class). Constraints: evicted demand of every class covered; kept nodes' free capacity (resources and the
per-node counters of ``rules.counters``); every active disruption budget; PDB allowances; NodePool limits
(removals give capacity back); the Balanced policy; spot-to-spot. Objective, lexicographic through weights:
drifted nodes replaced first (Karpenter replaces drift regardless of cost), then hourly cost after the move
plus ``eviction_price`` × eviction cost, then fewest evictions. Any shape results: N→0, N→1, 1→2, N→M.

Replacement patterns come from re-provisioning every candidate's pods with the full pipeline (whose LP
bound is also the cheapest-reachable-state bound), single-class and mixed fills of every bin, and the
yardstick's replacement; Karpenter's own decision is the warm start, so the plan is never worse than it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from ortools.sat.python import cp_model

from model.instancetype import MICRO, price_micros
from model.plan import ProvisioningPlan
from model.pod import Pod
from model.snapshot import Snapshot
from solver.bins import build_bins
from solver.cpsat import make_solver
from solver.decode import shrink
from solver.disruption.candidates import CONSOLIDATION_REASONS, ClusterState, NodeState
from solver.disruption.drain import drain_first
from solver.disruption.moves import solver_snapshot
from solver.disruption.yardstick import Decision, Yardstick
from solver.patterns import fill, max_copies
from solver.placement import NewNode, Placement
from solver.problem import Problem, compile_problem
from solver.provision import SolveOptions, solve

Pattern = tuple[int, tuple[int, ...]]  # (template index, pods per class)

#: the model considers at least this many candidates, and at most the larger figure (``_shortlist``)
MIN_SHORTLIST = 80
MAX_SHORTLIST = 400
#: existing nodes the model may move pods onto, besides the candidates (``_receivers``)
MAX_DESTINATIONS = 400
#: the re-provisioning solve (patterns, bound) gets at most this many seconds
MAX_REPROVISION = 4.0


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


def _template_keys(problem: Problem) -> dict[tuple[str, str, str, str], int]:
    return {(t.pool.name, t.instance_type.name, t.offering.zone, t.offering.capacity_type): i
            for i, t in enumerate(problem.templates)}


def _patterns_from(target: Problem, source: Problem, placement: Placement, class_of: dict[str, int]
                   ) -> list[Pattern]:
    """New nodes of a placement over another compilation, as patterns over ``target``."""
    keys, out = _template_keys(target), []
    for node in placement.new_nodes:
        t = source.templates[node.template]
        index = keys.get((t.pool.name, t.instance_type.name, t.offering.zone, t.offering.capacity_type))
        known = [class_of[p.key] for p in node.pods if p.key in class_of]
        if index is None or not known:
            continue
        counts = np.bincount(known, minlength=len(target.classes))
        out.append((index, tuple(int(v) for v in counts)))
    return out


#: single-class fill patterns kept per class: the bins cheapest per pod
FILLS_PER_CLASS = 6


def _fill_patterns(problem: Problem, total: np.ndarray) -> list[Pattern]:
    """A largest-first mixed fill of every bin, and each class alone on its cheapest bins per pod."""
    out: list[Pattern] = []
    values = np.zeros(len(problem.classes))
    order = sorted(range(len(problem.classes)), key=lambda c: -int(problem.sizes[c, 0]))
    singles: dict[int, list[tuple[float, Pattern]]] = {}
    for b in build_bins(problem):
        if b.existing:
            continue
        t = b.members[0]
        for c in range(len(problem.classes)):
            if b.compatible[c] and total[c] > 0:
                n = min(int(total[c]), max_copies(b.capacity, problem.sizes[c]))
                if n > 0:
                    counts = [0] * len(problem.classes)
                    counts[c] = n
                    singles.setdefault(c, []).append((b.cost / n, (t, tuple(counts))))
        mixed = fill(b, problem.sizes, values, total, order)
        if mixed.sum() > 0:
            out.append((t, tuple(int(v) for v in mixed)))
    for options in singles.values():
        out += [p for _, p in sorted(options)[:FILLS_PER_CLASS]]
    return out


def _receivers(snapshot: Snapshot, state: ClusterState, shortlist: list[NodeState]) -> Snapshot:
    """The snapshot the model compiles: nodes outside the shortlist that are not among the
    ``MAX_DESTINATIONS`` with the most free cpu + memory are marked unschedulable, so they neither receive
    pods nor cost compile time (they still count for NodePool limits and topology)."""
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


def _fits(problem: Problem, pattern: Pattern) -> bool:
    t, counts = pattern
    load = np.array(counts, dtype=np.int64) @ problem.sizes
    return bool(np.all(load <= problem.template_alloc[t])) and all(
        problem.template_ok[c, t] for c, n in enumerate(counts) if n)


class Model:
    """The CP-SAT model over one compiled candidate set."""

    def __init__(self, problem: Problem, state: ClusterState, candidates: list[NodeState],
                 patterns: list[Pattern], options: ConsolidateOptions) -> None:
        self.problem, self.state, self.candidates, self.patterns = problem, state, candidates, patterns
        self.options = options
        self.class_of = {pod.key: c.index for c in problem.classes for pod in c.pods}
        n_classes = len(problem.classes)
        self.demand = {k: np.bincount([self.class_of[p.key] for p in s.pods], minlength=n_classes)
                       for k, s in enumerate(candidates)}
        self.total = sum(self.demand.values(), np.zeros(n_classes, dtype=np.int64))
        self.m = cp_model.CpModel()
        m = self.m
        # expired (forceful) and drifted nodes are not forced: an objective weight puts them first, so one
        # whose pods have nowhere to go cannot make the whole model infeasible
        self.remove = [m.new_bool_var(f"remove[{s.name}]") for s in candidates]
        self.existing_of = {s.name: k for k, s in enumerate(candidates)}
        self.onto: dict[tuple[int, int], cp_model.IntVar] = {}
        self._existing()
        self.launch = [m.new_int_var(0, self._launch_bound(p), f"launch[{i}]") for i, p in enumerate(patterns)]
        self._cover()
        self._budgets()
        self._pdbs()
        self._limits()
        self._balanced()
        self._spot()
        self._objective()

    def _launch_bound(self, pattern: Pattern) -> int:
        return max((-(-int(self.total[c]) // n) for c, n in enumerate(pattern[1]) if n), default=0)

    def _existing(self) -> None:
        problem, m = self.problem, self.m
        for e, cap in enumerate(problem.existing):
            free = problem.existing_free[e]
            if np.any(free < 0):
                continue
            k = self.existing_of.get(cap.name)
            own = self.demand[k] if k is not None else 0
            row: dict[int, cp_model.IntVar] = {}
            for c in range(len(problem.classes)):
                avail = int(self.total[c] - (own[c] if k is not None else 0))  # type: ignore[index]
                if avail <= 0 or not problem.existing_ok[c, e]:
                    continue
                ub = min(avail, max_copies(free, problem.sizes[c]))
                if ub > 0:
                    row[c] = m.new_int_var(0, ub, f"onto[{cap.name},{c}]")
                    self.onto[(e, c)] = row[c]
            if len(row) < 2 and k is None:
                continue  # one class: its bound already is the node's capacity
            for r in range(problem.sizes.shape[1]):
                terms = [int(problem.sizes[c, r]) * v for c, v in row.items() if problem.sizes[c, r]]
                if not terms:
                    continue
                if k is None:
                    m.add(sum(terms) <= int(free[r]))
                else:
                    m.add(sum(terms) + int(free[r]) * self.remove[k] <= int(free[r]))

    def _cover(self) -> None:
        for c in range(len(self.problem.classes)):
            if not self.total[c]:
                continue
            placed: list[cp_model.LinearExprT] = [v for (e, cc), v in self.onto.items() if cc == c]
            placed += [p[1][c] * self.launch[i] for i, p in enumerate(self.patterns) if p[1][c]]
            evicted = [int(d[c]) * self.remove[k] for k, d in self.demand.items() if d[c]]
            self.m.add(sum(placed) >= sum(evicted))

    def _budgets(self) -> None:
        for pool, limits in self.state.budgets.items():
            for limit in limits:
                members = [self.remove[k] for k, s in enumerate(self.candidates)
                           if s.pool is not None and s.pool.name == pool and s.reason and limit.covers(s.reason)]
                if members:
                    self.m.add(sum(members) <= limit.allowed)

    def _pdbs(self) -> None:
        for pdb, allowed in self.state.pdbs:
            terms = [sum(1 for p in s.pods if pdb.selects(p)) * self.remove[k]
                     for k, s in enumerate(self.candidates) if s.reason != "Expired"]
            if terms:
                self.m.add(sum(terms) <= allowed)

    def _limits(self) -> None:
        problem = self.problem
        for info in problem.pools:
            if not info.limits_remaining:
                continue
            for name, left in info.limits_remaining.items():
                used = [problem.templates[t].limit_use.get(name, 0) * self.launch[i]
                        for i, (t, _) in enumerate(self.patterns) if problem.templates[t].pool.name == info.name]
                if not used:
                    continue
                freed = [(1 if name == "nodes" else s.node.capacity[name]) * self.remove[k]
                         for k, s in enumerate(self.candidates) if s.pool is not None and s.pool.name == info.name]
                # a pool already over its limit may still shrink; it may not grow
                self.m.add(sum(used) - sum(freed) <= max(left, 0))

    def _balanced(self) -> None:
        """Balanced: a pool's share of cost saved must be at least half its share of pods evicted. It governs
        consolidation (Empty / Underutilized removals), not drift or expiration: the constraint holds only when
        the pool consolidates; every launch in the pool counts as spent (conservative when drift mixes in)."""
        problem = self.problem
        for pool in {s.pool.name for s in self.state.nodes if s.pool is not None
                     and s.pool.spec.disruption.consolidation_policy == "Balanced"}:
            members = [s for s in self.state.nodes if s.pool is not None and s.pool.name == pool]
            cost = sum(price_micros(s.price) for s in members)
            pods = sum(len(s.pods) for s in members)
            voluntary = [k for k, s in enumerate(self.candidates) if s.pool is not None and s.pool.name == pool
                         and s.reason in ("Empty", "Underutilized")]
            if not pods or not cost or not voluntary:
                continue
            saved = [price_micros(self.candidates[k].price) * self.remove[k] for k in voluntary]
            spent = [problem.templates[t].price_micros * self.launch[i] for i, (t, _) in enumerate(self.patterns)
                     if problem.templates[t].pool.name == pool]
            evicted = [len(self.candidates[k].pods) * self.remove[k] for k in voluntary]
            consolidating = self.m.new_bool_var(f"consolidating[{pool}]")
            self.m.add_max_equality(consolidating, [self.remove[k] for k in voluntary])
            self.m.add(2 * pods * (sum(saved) - sum(spent)) >= cost * sum(evicted)).only_enforce_if(consolidating)

    def _spot(self) -> None:
        """Karpenter's consolidation rule: when every removed node is a spot node removed for consolidation,
        replacements may not be spot (unless spot-to-spot is enabled); a set that includes on-demand nodes, or
        drifted or expired ones (replaced as any pending pod is, drift.go), may be replaced by spot."""
        if self.options.spot_to_spot:
            return
        launches = [i for i, (t, _) in enumerate(self.patterns)
                    if self.problem.templates[t].offering.capacity_type == "spot"]
        if not launches:
            return
        on_demand = [self.remove[k] for k, s in enumerate(self.candidates)
                     if s.capacity_type != "spot" or s.reason not in CONSOLIDATION_REASONS]
        removes_on_demand = self.m.new_bool_var("removes_on_demand")
        self.m.add(sum(on_demand) >= 1).only_enforce_if(removes_on_demand)
        for i in launches:
            self.m.add(self.launch[i] == 0).only_enforce_if(~removes_on_demand)

    def _objective(self) -> None:
        problem = self.problem
        before = sum(price_micros(s.price) for s in self.state.nodes)
        # expiration and drift outrank cost: more than the cluster's price plus a node of the dearest pattern
        # per such pod (an unpriced drifted node, e.g. its instance type gone, saves nothing when removed)
        dearest = max((problem.templates[t].price_micros for t, _ in self.patterns), default=0)
        drifted = [s for s in self.candidates if s.reason in ("Drifted", "Expired")]
        drift_weight = 10 * (before + 1 + sum(dearest * len(s.pods) + abs(round(
            self.options.eviction_price * MICRO * s.eviction_cost)) for s in drifted))
        evictions = [len(s.pods) * self.remove[k] for k, s in enumerate(self.candidates)]
        tie = sum(len(s.pods) for s in self.candidates) + 1
        cost = [problem.templates[t].price_micros * self.launch[i] for i, (t, _) in enumerate(self.patterns)]
        cost += [-price_micros(s.price) * self.remove[k] for k, s in enumerate(self.candidates)]
        cost += [round(self.options.eviction_price * MICRO * s.eviction_cost) * self.remove[k]
                 for k, s in enumerate(self.candidates) if self.options.eviction_price]
        cost += [-drift_weight * self.remove[k] for k, s in enumerate(self.candidates)
                 if s.reason in ("Drifted", "Expired")]
        self.m.minimize(tie * sum(cost) + sum(evictions))
        self.tie = tie

    def hint_drain(self, removed: list[int], onto: dict[tuple[int, int], int]) -> None:
        """Warm start from the drain-first heuristic (``drain.py``): N→0 moves, no replacements."""
        chosen = set(removed)
        for k, var in enumerate(self.remove):
            self.m.add_hint(var, k in chosen)
        for key, var in self.onto.items():
            self.m.add_hint(var, onto.get(key, 0))
        for var in self.launch:
            self.m.add_hint(var, 0)

    def hint(self, decision: Decision) -> None:
        """Warm start from a yardstick decision (its placement is over another compilation)."""
        removed = {s.name for s in decision.removed}
        for k, s in enumerate(self.candidates):
            self.m.add_hint(self.remove[k], s.name in removed)
        names = {cap.name: e for e, cap in enumerate(self.problem.existing)}
        counts: dict[tuple[int, int], int] = {}
        for e_src, pods in decision.placement.existing.items():
            e = names.get(decision.problem.existing[e_src].name)
            for pod in pods:
                if e is not None and pod.key in self.class_of:
                    key = (e, self.class_of[pod.key])
                    counts[key] = counts.get(key, 0) + 1
        for key, var in self.onto.items():
            self.m.add_hint(var, counts.get(key, 0))
        wanted = _patterns_from(self.problem, decision.problem, decision.placement, self.class_of)
        for i, p in enumerate(self.patterns):
            self.m.add_hint(self.launch[i], wanted.count(p))

    def decode(self, solver: cp_model.CpSolver) -> tuple[list[NodeState], Placement]:
        removed = [s for k, s in enumerate(self.candidates) if solver.boolean_value(self.remove[k])]
        queues: list[list[Pod]] = [[] for _ in self.problem.classes]
        for s in removed:
            for pod in s.pods:
                queues[self.class_of[pod.key]].append(pod)
        placement = Placement()
        _onto_existing(placement, queues, {key: solver.value(var) for key, var in self.onto.items()})
        templates = self.problem.templates
        order = sorted(range(len(self.patterns)), key=lambda i: -templates[self.patterns[i][0]].price_micros)
        for i in order:
            t, counts = self.patterns[i]
            for _ in range(solver.value(self.launch[i])):
                pods: list[Pod] = []
                for c, n in enumerate(counts):
                    pods.extend(queues[c][:n])
                    del queues[c][:n]
                if pods:
                    placement.new_nodes.append(NewNode(template=t, pods=pods))
        placement.unschedulable = [p for q in queues for p in q]
        return removed, placement


def _finish(problem: Problem, removed: list[NodeState], placement: Placement, options: ConsolidateOptions
            ) -> Placement:
    """Shrink each replacement to its cheapest fitting offering, undoing a move onto spot when spot-to-spot
    is off and every removed node is spot (``shrink`` changes the nodes in place)."""
    before = {id(n): n.template for n in placement.new_nodes}
    shrunk = shrink(problem, placement)
    if options.spot_to_spot or not removed or any(s.capacity_type != "spot" or s.reason not in CONSOLIDATION_REASONS
                                                  for s in removed):
        return shrunk
    for node in shrunk.new_nodes:
        if problem.templates[node.template].offering.capacity_type == "spot":
            node.template = before[id(node)]
    return shrunk


def _onto_existing(placement: Placement, queues: list[list[Pod]], counts: dict[tuple[int, int], int]) -> None:
    """Move ``counts[(existing node, class)]`` pods of each class from its queue onto that node."""
    for (e, c), n in sorted(counts.items()):
        take = min(n, len(queues[c]))
        if take:
            placement.existing.setdefault(e, []).extend(queues[c][:take])
            del queues[c][:take]


def _placement_of(problem: Problem, candidates: list[NodeState], removed: list[int],
                  onto: dict[tuple[int, int], int], class_of: dict[str, int]) -> Placement:
    """The drain heuristic's counts as real pods on existing nodes."""
    queues: list[list[Pod]] = [[] for _ in problem.classes]
    for k in removed:
        for pod in candidates[k].pods:
            queues[class_of[pod.key]].append(pod)
    placement = Placement()
    _onto_existing(placement, queues, onto)
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


def plan_consolidation(snapshot: Snapshot, state: ClusterState, options: ConsolidateOptions,
                       deadline: float, stage: Callable[[str, float], None]) -> Outcome | None:
    """The best removal set found by the deadline, or None when there is no candidate."""
    if not state.candidates:
        return None
    candidates = _shortlist(state)
    started = time.monotonic()
    moved = {s.name: s.pods for s in candidates}
    receivers = _receivers(snapshot, state, candidates)
    # the candidates removed, their pods pending: what the re-provisioning solve packs, and the model's classes
    emptied = solver_snapshot(receivers, moved)
    copies = list(emptied.pending_pods())
    # every node stays in the compiled problem (kept nodes receive pods); candidates' pods are the classes
    problem = compile_problem(receivers.model_copy(update={"pods": tuple(p for p in snapshot.pods if p.node_name)}),
                              pods=copies)
    class_of = {pod.key: c.index for c in problem.classes for pod in c.pods}
    stage("compile", time.monotonic() - started)
    notes: list[str] = [f"not modelled: {n}" for n in problem.unmodelled]
    if len(candidates) < len(state.candidates):
        notes.append(f"the model considered the {len(candidates)} most expensive of {len(state.candidates)} "
                     "candidates (the budgets' allowance, or twice it up to a few hundred); the others stay")
    decision = None
    if options.yardstick:
        t0 = time.monotonic()
        budget = t0 + (deadline - t0) * 0.3
        decision = Yardstick(snapshot, state, spot_to_spot=options.spot_to_spot, deadline=budget).decide()
        stage("yardstick", time.monotonic() - t0)
    t0 = time.monotonic()
    share = min((deadline - t0) * options.reprovision_share, MAX_REPROVISION)
    everything = solve(emptied,
                       SolveOptions(time_limit=max(share, 0.5), seed=options.seed, workers=options.workers,
                                    deterministic=options.deterministic))
    stage("reprovision", time.monotonic() - t0)
    lower = sum(s.price for s in state.nodes) - budget_savings_bound(state)
    if len(candidates) == len(state.candidates):
        reachable = reachable_cost(state, everything.plan)
        lower = max(lower, reachable) if reachable is not None else lower
    total = np.bincount([class_of[p.key] for p in copies], minlength=len(problem.classes))
    patterns = _patterns_from(problem, everything.problem, everything.placement, class_of)
    patterns += _fill_patterns(problem, total)
    if decision is not None:
        patterns += _patterns_from(problem, decision.problem, decision.placement, class_of)
    patterns = [p for p in dict.fromkeys(patterns) if _fits(problem, p)]
    t0 = time.monotonic()
    model = Model(problem, state, candidates, patterns, options)
    drained, onto = drain_first(problem, state, candidates, class_of)
    drain_saving = sum(candidates[k].price for k in drained)
    if decision is not None and decision.savings >= drain_saving:
        model.hint(decision)
    else:
        model.hint_drain(drained, onto)
    solver = make_solver(max(deadline - time.monotonic(), 0.1), options.seed, options.workers, options.deterministic)
    solver.parameters.symmetry_level = 0  # symmetry detection alone can take seconds at 1,000 nodes
    if options.deterministic:
        # interleaved subsolvers (LNS included) stay deterministic; one plain worker often never reaches
        # the warm start's neighbourhood on 1,000-node models
        solver.parameters.interleave_search = True
        solver.parameters.num_workers = max(options.workers, 4)
    status = solver.solve(model.m)
    stage("model", time.monotonic() - t0)
    outcome: Outcome
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        removed, placement = model.decode(solver)
        placement = _finish(problem, removed, placement, options)
        outcome = Outcome(removed, placement, problem, "OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE",
                          objective_bound=_after_bound(state, candidates, options,
                                                       solver.best_objective_bound / model.tie),
                          lower_bound=lower,
                          patterns=len(patterns))
        if placement.unschedulable:
            notes.append(f"decode left {len(placement.unschedulable)} pod(s) without a destination; plan dropped")
            outcome = Outcome([], Placement(), problem, "TIMEOUT", lower_bound=lower, patterns=len(patterns))
    else:
        notes.append(f"CP-SAT found no plan in time ({solver.status_name(status)})")
        outcome = Outcome([], Placement(), problem, "TIMEOUT", lower_bound=lower, patterns=len(patterns))
    if _beats([candidates[k] for k in drained], drain_saving, outcome, options.eviction_price):
        notes.append("the drain-first heuristic saves more than CP-SAT found in time; it is the plan")
        outcome = Outcome([candidates[k] for k in drained], _placement_of(problem, candidates, drained, onto, class_of),
                          problem, "FEASIBLE", lower_bound=lower, patterns=len(patterns))
    if decision is not None and _beats(decision.removed, decision.savings, outcome, options.eviction_price):
        notes.append(f"the yardstick's {decision.method} decision saves more; it is the plan")
        outcome = Outcome(decision.removed, decision.placement, decision.problem, "FEASIBLE", lower_bound=lower,
                          patterns=len(patterns))
    outcome.yardstick = decision
    outcome.notes = notes + outcome.notes
    return outcome

