"""The consolidation CP-SAT model: which candidate nodes to remove, where each evicted pod goes.

Variables: ``remove[k]`` per candidate node; ``onto[e, c]`` evicted pods of class ``c`` placed on existing node
``e`` (only while ``e`` is kept); ``launch[p]`` copies of replacement pattern ``p`` (a template and pods per
class). Constraints: evicted demand of every class covered; kept nodes' free capacity (resources and the
per-node counters of ``rules.counters``); every active disruption budget; PDB allowances; NodePool limits
(removals give capacity back); the Balanced policy; spot-to-spot. Objective, lexicographic through weights:
drifted nodes replaced first (Karpenter replaces drift regardless of cost), then hourly cost after the move
plus ``eviction_price`` × eviction cost, then fewest evictions. Any shape results: N→0, N→1, 1→2, N→M.

The same model decides a *window* of a larger plan (``lns.py``): a ``Frame`` holds the rest of that plan —
its removals, the load their pods put on kept nodes, its replacements — and every cluster-wide constraint
counts the frame as constants, so a window's answer merged into the frame is a plan of the whole model.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from model.instancetype import MICRO, price_micros
from model.pod import Pod
from solver.bins import Bin, build_bins
from solver.cpsat import CpModel
from solver.decode import shrink
from solver.disruption.budgets import BudgetLimit
from solver.disruption.candidates import CONSOLIDATION_REASONS, ClusterState, NodeState
from solver.patterns import fill, max_copies
from solver.placement import NewNode, Placement
from solver.problem import Problem

Pattern = tuple[int, tuple[int, ...]]  # (template index, pods per class)

#: single-class fill patterns kept per class: the bins cheapest per pod
FILLS_PER_CLASS = 6


@dataclass
class Frame:
    """The part of a plan a window leaves as it is."""

    #: candidates the plan removes outside the window
    removed: list[NodeState]
    #: what their pods occupy on kept existing nodes, shape (E, R)
    load: np.ndarray
    #: the replacements launched for them
    launched: list[Pattern] = field(default_factory=list)


def template_keys(problem: Problem) -> dict[tuple[str, str, str, str], int]:
    return {(t.pool.name, t.instance_type.name, t.offering.zone, t.offering.capacity_type): i
            for i, t in enumerate(problem.templates)}


def patterns_from(target: Problem, source: Problem, placement: Placement, class_of: dict[str, int]
                  ) -> list[Pattern]:
    """New nodes of a placement over another compilation, as patterns over ``target``."""
    keys, out = template_keys(target), []
    for node in placement.new_nodes:
        t = source.templates[node.template]
        index = keys.get((t.pool.name, t.instance_type.name, t.offering.zone, t.offering.capacity_type))
        known = [class_of[p.key] for p in node.pods if p.key in class_of]
        if index is None or not known:
            continue
        counts = np.bincount(known, minlength=len(target.classes))
        out.append((index, tuple(int(v) for v in counts)))
    return out


def fill_patterns(problem: Problem, total: np.ndarray, bins: list[Bin] | None = None) -> list[Pattern]:
    """A largest-first mixed fill of every bin, and each class alone on its cheapest bins per pod (``bins``:
    ``build_bins(problem)`` when already built)."""
    out: list[Pattern] = []
    values = np.zeros(len(problem.classes))
    order = sorted(range(len(problem.classes)), key=lambda c: -int(problem.sizes[c, 0]))
    singles: dict[int, list[tuple[float, Pattern]]] = {}
    for b in build_bins(problem) if bins is None else bins:
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


def fits(problem: Problem, pattern: Pattern) -> bool:
    t, counts = pattern
    load = np.array(counts, dtype=np.int64) @ problem.sizes
    return bool(np.all(load <= problem.template_alloc[t])) and all(
        problem.template_ok[c, t] for c, n in enumerate(counts) if n)


def _moves_on_demand(s: NodeState) -> bool:
    """Does removing ``s`` lift the spot-to-spot rule (an on-demand node, or drift / expiration)?"""
    return s.capacity_type != "spot" or s.reason not in CONSOLIDATION_REASONS


class Model:
    """The CP-SAT model over one compiled candidate set (or a window of a plan, within its ``frame``).
    ``destinations`` are the existing nodes (indices into ``problem.existing``) pods may move onto: all of
    them when None."""

    def __init__(self, problem: Problem, state: ClusterState, candidates: list[NodeState],
                 patterns: list[Pattern], *, eviction_price: float = 0.0, spot_to_spot: bool = False,
                 destinations: Collection[int] | None = None, frame: Frame | None = None) -> None:
        self.problem, self.state, self.candidates, self.patterns = problem, state, candidates, patterns
        self.eviction_price, self.spot_to_spot, self.frame = eviction_price, spot_to_spot, frame
        self.class_of = {pod.key: c.index for c in problem.classes for pod in c.pods}
        n_classes = len(problem.classes)
        self.demand = {k: np.bincount([self.class_of[p.key] for p in s.pods], minlength=n_classes)
                       for k, s in enumerate(candidates)}
        self.total = sum(self.demand.values(), np.zeros(n_classes, dtype=np.int64))
        self.m = CpModel()
        m = self.m
        # expired (forceful) and drifted nodes are not forced: an objective weight puts them first, so one
        # whose pods have nowhere to go cannot make the whole model infeasible
        self.remove = [m.new_bool_var(f"remove[{s.name}]") for s in candidates]
        self.existing_of = {s.name: k for k, s in enumerate(candidates)}
        self.onto: dict[tuple[int, int], cp_model.IntVar] = {}
        self._existing(destinations)
        self.launch = [m.new_int_var(0, self._launch_bound(p), f"launch[{i}]") for i, p in enumerate(patterns)]
        self._cover()
        self._budgets()
        self._pdbs()
        self._limits()
        self._balanced()
        self._spot()
        self._objective()

    @property
    def _fixed(self) -> list[NodeState]:
        return self.frame.removed if self.frame is not None else []

    def _launch_bound(self, pattern: Pattern) -> int:
        return max((-(-int(self.total[c]) // n) for c, n in enumerate(pattern[1]) if n), default=0)

    def _existing(self, destinations: Collection[int] | None) -> None:
        problem, m = self.problem, self.m
        allowed = None if destinations is None else set(destinations)
        gone = {s.name for s in self._fixed}
        for e, cap in enumerate(problem.existing):
            free = problem.existing_free[e]
            k = self.existing_of.get(cap.name)
            if self.frame is not None:
                if np.any(self.frame.load[e] > 0) and k is not None:
                    m.add(self.remove[k] == 0)  # it holds pods the frame moved there
                free = free - self.frame.load[e]
            if np.any(free < 0) or cap.name in gone or (allowed is not None and e not in allowed):
                continue
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
        by_class: dict[int, list[cp_model.LinearExprT]] = {}
        for (_, c), v in self.onto.items():
            by_class.setdefault(c, []).append(v)
        for c in range(len(self.problem.classes)):
            if not self.total[c]:
                continue
            placed = by_class.get(c, [])
            placed += [p[1][c] * self.launch[i] for i, p in enumerate(self.patterns) if p[1][c]]
            evicted = [int(d[c]) * self.remove[k] for k, d in self.demand.items() if d[c]]
            self.m.add(sum(placed) >= sum(evicted))

    def _budgets(self) -> None:
        for pool, limits in self.state.budgets.items():
            for limit in limits:
                def covered(s: NodeState, pool: str = pool, limit: BudgetLimit = limit) -> bool:
                    return (s.pool is not None and s.pool.name == pool and s.reason is not None
                            and limit.covers(s.reason))
                members = [self.remove[k] for k, s in enumerate(self.candidates) if covered(s)]
                if members:
                    self.m.add(sum(members) <= limit.allowed - sum(1 for s in self._fixed if covered(s)))

    def _pdbs(self) -> None:
        for pdb, allowed in self.state.pdbs:
            terms = [sum(1 for p in s.pods if pdb.selects(p)) * self.remove[k]
                     for k, s in enumerate(self.candidates) if s.reason != "Expired"]
            if terms:
                used = sum(1 for s in self._fixed if s.reason != "Expired" for p in s.pods if pdb.selects(p))
                self.m.add(sum(terms) <= allowed - used)

    def _limits(self) -> None:
        problem = self.problem
        launched = self.frame.launched if self.frame is not None else []
        for info in problem.pools:
            if not info.limits_remaining:
                continue
            for name, left in info.limits_remaining.items():
                def use(t: int, pool: str = info.name, name: str = name) -> int:
                    return problem.templates[t].limit_use.get(name, 0) if problem.templates[t].pool.name == pool else 0

                def gives(s: NodeState, pool: str = info.name, name: str = name) -> int:
                    return ((1 if name == "nodes" else s.node.capacity[name])
                            if s.pool is not None and s.pool.name == pool else 0)
                used = [use(t) * self.launch[i] for i, (t, _) in enumerate(self.patterns) if use(t)]
                if not used:
                    continue
                freed = [gives(s) * self.remove[k] for k, s in enumerate(self.candidates) if gives(s)]
                fixed = sum(use(t) for t, _ in launched) - sum(gives(s) for s in self._fixed)
                # a pool already over its limit may still shrink; it may not grow
                self.m.add(sum(used) - sum(freed) + fixed <= max(left, 0))

    def _balanced(self) -> None:
        """Balanced: a pool's share of cost saved must be at least half its share of pods evicted. It governs
        consolidation (Empty / Underutilized removals), not drift or expiration: the constraint holds only when
        the pool consolidates; every launch in the pool counts as spent (conservative when drift mixes in)."""
        problem = self.problem
        launched = self.frame.launched if self.frame is not None else []
        for pool in {s.pool.name for s in self.state.nodes if s.pool is not None
                     and s.pool.spec.disruption.consolidation_policy == "Balanced"}:
            members = [s for s in self.state.nodes if s.pool is not None and s.pool.name == pool]
            cost = sum(price_micros(s.price) for s in members)
            pods = sum(len(s.pods) for s in members)

            def voluntary(s: NodeState, pool: str = pool) -> bool:
                return s.pool is not None and s.pool.name == pool and s.reason in ("Empty", "Underutilized")
            window = [k for k, s in enumerate(self.candidates) if voluntary(s)]
            fixed = [s for s in self._fixed if voluntary(s)]
            if not pods or not cost or not (window or fixed):
                continue
            saved = [price_micros(self.candidates[k].price) * self.remove[k] for k in window]
            spent = [problem.templates[t].price_micros * self.launch[i] for i, (t, _) in enumerate(self.patterns)
                     if problem.templates[t].pool.name == pool]
            evicted = [len(self.candidates[k].pods) * self.remove[k] for k in window]
            # the frame's part: constants
            net = sum(price_micros(s.price) for s in fixed) - sum(
                problem.templates[t].price_micros for t, _ in launched if problem.templates[t].pool.name == pool)
            gone = sum(len(s.pods) for s in fixed)
            constraint = self.m.add(2 * pods * (sum(saved) - sum(spent) + net) >= cost * (sum(evicted) + gone))
            if not fixed:  # the frame consolidates nothing here: it binds only if the window does
                consolidating = self.m.new_bool_var(f"consolidating[{pool}]")
                self.m.add_max_equality(consolidating, [self.remove[k] for k in window])
                constraint.only_enforce_if(consolidating)

    def _spot(self) -> None:
        """Karpenter's consolidation rule: when every removed node is a spot node removed for consolidation,
        replacements may not be spot (unless spot-to-spot is enabled); a set that includes on-demand nodes, or
        drifted or expired ones (replaced as any pending pod is, drift.go), may be replaced by spot."""
        if self.spot_to_spot or any(_moves_on_demand(s) for s in self._fixed):
            return
        launches = [i for i, (t, _) in enumerate(self.patterns)
                    if self.problem.templates[t].offering.capacity_type == "spot"]
        frame_spot = self.frame is not None and any(
            self.problem.templates[t].offering.capacity_type == "spot" for t, _ in self.frame.launched)
        if not launches and not frame_spot:
            return
        on_demand = [self.remove[k] for k, s in enumerate(self.candidates) if _moves_on_demand(s)]
        removes_on_demand = self.m.new_bool_var("removes_on_demand")
        self.m.add(sum(on_demand) >= 1).only_enforce_if(removes_on_demand)
        for i in launches:
            self.m.add(self.launch[i] == 0).only_enforce_if(~removes_on_demand)
        if frame_spot:  # the frame's spot replacements rest on an on-demand removal in the window
            self.m.add(removes_on_demand == 1)

    def _objective(self) -> None:
        problem = self.problem
        before = sum(price_micros(s.price) for s in self.state.nodes)
        # expiration and drift outrank cost: more than the cluster's price plus a node of the dearest pattern
        # per such pod (an unpriced drifted node, e.g. its instance type gone, saves nothing when removed)
        dearest = max((problem.templates[t].price_micros for t, _ in self.patterns), default=0)
        drifted = [s for s in self.candidates if s.reason in ("Drifted", "Expired")]
        drift_weight = 10 * (before + 1 + sum(dearest * len(s.pods) + abs(round(
            self.eviction_price * MICRO * s.eviction_cost)) for s in drifted))
        evictions = [len(s.pods) * self.remove[k] for k, s in enumerate(self.candidates)]
        tie = sum(len(s.pods) for s in self.candidates) + 1
        cost = [problem.templates[t].price_micros * self.launch[i] for i, (t, _) in enumerate(self.patterns)]
        cost += [-price_micros(s.price) * self.remove[k] for k, s in enumerate(self.candidates)]
        cost += [round(self.eviction_price * MICRO * s.eviction_cost) * self.remove[k]
                 for k, s in enumerate(self.candidates) if self.eviction_price]
        cost += [-drift_weight * self.remove[k] for k, s in enumerate(self.candidates)
                 if s.reason in ("Drifted", "Expired")]
        self.m.minimize(tie * sum(cost) + sum(evictions))
        self.tie = tie

    def hint_values(self, removed: Collection[int], onto: dict[tuple[int, int], int],
                    launches: dict[Pattern, int] | None = None) -> None:
        """Warm start: candidates ``removed`` (indices), pods per (existing node, class), pattern copies."""
        chosen = set(removed)
        for k, var in enumerate(self.remove):
            self.m.add_hint(var, k in chosen)
        for key, var in self.onto.items():
            self.m.add_hint(var, onto.get(key, 0))
        launches = launches or {}
        for i, p in enumerate(self.patterns):
            self.m.add_hint(self.launch[i], launches.get(p, 0))

    def hint_placement(self, removed: Collection[str], source: Problem, placement: Placement) -> None:
        """Warm start from a plan whose placement is over another compilation (the yardstick's)."""
        names = {cap.name: e for e, cap in enumerate(self.problem.existing)}
        counts: dict[tuple[int, int], int] = {}
        for e_src, pods in placement.existing.items():
            e = names.get(source.existing[e_src].name)
            for pod in pods:
                if e is not None and pod.key in self.class_of:
                    key = (e, self.class_of[pod.key])
                    counts[key] = counts.get(key, 0) + 1
        wanted: dict[Pattern, int] = {}
        for p in patterns_from(self.problem, source, placement, self.class_of):
            wanted[p] = wanted.get(p, 0) + 1
        self.hint_values([k for k, s in enumerate(self.candidates) if s.name in set(removed)], counts, wanted)

    def decode(self, solver: cp_model.CpSolver) -> tuple[list[NodeState], Placement]:
        removed = [s for k, s in enumerate(self.candidates) if solver.boolean_value(self.remove[k])]
        queues: list[list[Pod]] = [[] for _ in self.problem.classes]
        for s in removed:
            for pod in s.pods:
                queues[self.class_of[pod.key]].append(pod)
        placement = Placement()
        onto_existing(placement, queues, {key: solver.value(var) for key, var in self.onto.items()})
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


def onto_existing(placement: Placement, queues: list[list[Pod]], counts: dict[tuple[int, int], int]) -> None:
    """Move ``counts[(existing node, class)]`` pods of each class from its queue onto that node."""
    for (e, c), n in sorted(counts.items()):
        take = min(n, len(queues[c]))
        if take:
            placement.existing.setdefault(e, []).extend(queues[c][:take])
            del queues[c][:take]


def finish(problem: Problem, removed: list[NodeState], placement: Placement, spot_to_spot: bool) -> Placement:
    """Shrink each replacement to its cheapest fitting offering, undoing a move onto spot when spot-to-spot
    is off and every removed node is spot (``shrink`` changes the nodes in place)."""
    before = {id(n): n.template for n in placement.new_nodes}
    shrunk = shrink(problem, placement)
    if spot_to_spot or not removed or any(_moves_on_demand(s) for s in removed):
        return shrunk
    for node in shrunk.new_nodes:
        if problem.templates[node.template].offering.capacity_type == "spot":
            node.template = before[id(node)]
    return shrunk
