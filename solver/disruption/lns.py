"""Large-neighbourhood search over a consolidation plan, for clusters whose whole model CP-SAT cannot solve.

With 500 candidates (5,000 nodes, a 10 % budget) the one model over every candidate and destination found no
plan in 2.6 s, not even its warm start. The search keeps a plan (the incumbent, drain-first's to begin with)
and repeatedly frees a *window* of it: a few kept candidates the plan would gain most by removing (price per
unit of utilisation, highest first), a few removed ones it gains least from (lowest first, so a budget can
move to dearer nodes), the removed nodes whose pods sit on those kept ones or share a replacement with the
window, and as destinations the nodes the window's pods use now plus the kept nodes with the most room left.
The window is decided exactly by the consolidation model (``model.Model``) with the rest of the plan as its
``Frame``: the room the rest leaves on each kept node, and the budgets, PDB allowances, NodePool limits,
Balanced and spot-to-spot rules minus what the rest already uses. Its answer replaces its part of the plan
only when the whole plan is strictly better in the model's order (more drifted / expired nodes replaced,
then more savings net of the eviction price, then fewer evictions), so the search never returns a plan worse
than its start; ``plan.consolidate`` verifies the result and falls back to the start if it is rejected.
Candidates a window tried are tried again only after the others; once every window of a size came round
without an improvement the windows grow (``WINDOW_SCALES``). No randomness: the deadline only decides how
many windows run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from solver.bins import build_bins
from solver.cpsat import make_solver
from solver.disruption.candidates import ClusterState, NodeState
from solver.disruption.model import Frame, Model, Pattern, fill_patterns, finish, fits
from solver.placement import NewNode, Placement
from solver.problem import Problem

#: kept candidates a window offers for removal, and removed ones it offers to keep (small windows: on a
#: fragmented 1,000-node cluster with no budget limit, windows of 2 + 2 (+ feeders, up to 8) found 12
#: improvements in 10 s, windows of 8 + 8 (up to 40) none: their models do not improve on the start in 1 s)
WINDOW_KEPT = 2
WINDOW_REMOVED = 2
#: removals pulled in because their pods sit on a kept window node or share a replacement stop here
MAX_WINDOW = 8
#: window sizes (multiples of the above) tried in turn: the next once every window of one size came round
#: without an improvement, back to the first after each improvement
WINDOW_SCALES = (1, 2, 4)
#: kept existing nodes with the most room left that a window may move pods onto (besides those it uses)
WINDOW_DESTINATIONS = 16
#: CP-SAT seconds one window may take at most
WINDOW_SECONDS = 0.3
#: a window is not started with less time than this left
MIN_WINDOW_SECONDS = 0.05
#: savings closer than this ($/h) are equal
EPSILON = 1e-9


@dataclass
class Incumbent:
    """A plan over ``problem``: removed candidates (indices) and where their pods go."""

    removed: list[int]
    placement: Placement


@dataclass
class SearchReport:
    windows: int = 0
    improvements: int = 0
    seconds: float = 0.0
    #: net savings ($/h) of the start and of the result
    start: float = 0.0
    end: float = 0.0
    notes: list[str] = field(default_factory=list)


def rank(problem: Problem, removed: list[NodeState], placement: Placement, eviction_price: float
         ) -> tuple[int, float, int]:
    """A plan's place in the model's order, smaller is better: drifted and expired nodes replaced (more
    first), net savings (more first), evictions (fewer first)."""
    drifted = sum(1 for s in removed if s.reason in ("Drifted", "Expired"))
    launched = sum(problem.templates[n.template].offering.price for n in placement.new_nodes)
    net = sum(s.price for s in removed) - launched - eviction_price * sum(s.eviction_cost for s in removed)
    return -drifted, -net, sum(len(s.pods) for s in removed)


def better(a: tuple[int, float, int], b: tuple[int, float, int]) -> bool:
    """Is rank ``a`` strictly better than ``b`` (savings within ``EPSILON`` are equal)?"""
    if a[0] != b[0]:
        return a[0] < b[0]
    if abs(a[1] - b[1]) > EPSILON:
        return a[1] < b[1]
    return a[2] < b[2]


class Search:
    """The search over one compiled consolidation problem: ``candidates`` are the model's (their pods are
    ``problem``'s classes), ``patterns`` the replacements it may launch."""

    def __init__(self, problem: Problem, state: ClusterState, candidates: list[NodeState], patterns: list[Pattern],
                 *, eviction_price: float = 0.0, spot_to_spot: bool = False, seed: int = 0) -> None:
        self.problem, self.state, self.candidates, self.patterns = problem, state, candidates, patterns
        self.eviction_price, self.spot_to_spot, self.seed = eviction_price, spot_to_spot, seed
        self.class_of = {pod.key: c.index for c in problem.classes for pod in c.pods}
        self.index_of = {s.name: k for k, s in enumerate(candidates)}
        self.node_of = {cap.name: e for e, cap in enumerate(problem.existing)}
        self.free = problem.existing_free.astype(np.int64)
        self.usable = np.all(self.free >= 0, axis=1)
        alloc = np.array([[max(cap.node.allocatable["cpu"], 1), max(cap.node.allocatable["memory"], 1)]
                          for cap in problem.existing], dtype=float).reshape(-1, 2)
        self.alloc = alloc
        # each candidate's own evictable pods (cpu, memory) and its allocatable: utilisation, with what a plan
        # moved onto it, prices it (``_values``)
        self.own = np.array([[sum(p.requests["cpu"] for p in s.pods), sum(p.requests["memory"] for p in s.pods)]
                             for s in candidates], dtype=float).reshape(-1, 2)
        self.capacity = np.array([[max(s.node.allocatable["cpu"], 1), max(s.node.allocatable["memory"], 1)]
                                  for s in candidates], dtype=float).reshape(-1, 2)
        self.prices = np.array([s.price for s in candidates], dtype=float)
        self.tries = np.zeros(len(candidates), dtype=np.int64)
        self.bins = build_bins(problem)

    def rank_of(self, plan: Incumbent) -> tuple[int, float, int]:
        return rank(self.problem, [self.candidates[k] for k in plan.removed], plan.placement, self.eviction_price)

    def improve(self, start: Incumbent, deadline: float, target: float | None = None) -> tuple[Incumbent, SearchReport]:
        """The best plan found from ``start`` by ``deadline``; stops early once its net savings reach
        ``target`` (a bound no plan can beat)."""
        began = time.monotonic()
        plan, best = start, self.rank_of(start)
        report = SearchReport(start=-best[1], end=-best[1])
        step, size = 0, 0  # size: index into WINDOW_SCALES
        seen: set[tuple[int, ...]] = set()  # windows tried on the current plan: the same one gives the same answer
        while deadline - time.monotonic() > MIN_WINDOW_SECONDS:
            if target is not None and best[0] == 0 and -best[1] >= target - EPSILON:
                break
            window = self._window(plan, WINDOW_SCALES[size])
            if not window or tuple(window) in seen:
                if size + 1 == len(WINDOW_SCALES):
                    break  # the rotation of the largest windows came round without an improvement
                size += 1  # every small window tried: larger ones can make swaps small ones cannot
                seen.clear()
                continue
            seen.add(tuple(window))
            step += 1
            self.tries[window] += 1
            found = self._solve_window(plan, window, deadline, step)
            report.windows += 1
            if found is None:
                continue
            ranked = self.rank_of(found)
            if better(ranked, best):
                plan, best = found, ranked
                report.improvements += 1
                seen.clear()
                size = 0
        report.end, report.seconds = -best[1], time.monotonic() - began
        return plan, report

    def _values(self, plan: Incumbent) -> np.ndarray:
        """Price per unit of utilisation (the larger of its cpu and memory shares) of every candidate in
        ``plan``: its own pods plus those the plan moved onto it."""
        load = self.own.copy()
        for e, pods in plan.placement.existing.items():
            k = self.index_of.get(self.problem.existing[e].name)
            if k is not None:
                load[k, 0] += sum(p.requests["cpu"] for p in pods)
                load[k, 1] += sum(p.requests["memory"] for p in pods)
        return np.asarray(self.prices / np.maximum((load / self.capacity).max(axis=1), 0.05))

    def _window(self, plan: Incumbent, scale: int = 1) -> list[int]:
        """Candidate indices the next window frees (see the module docstring), ``scale`` times the base size."""
        removed = set(plan.removed)
        value = self._values(plan)
        kept = sorted((k for k in range(len(self.candidates)) if k not in removed),
                      key=lambda k: (self.tries[k], -value[k], k))
        gone = sorted(removed, key=lambda k: (self.tries[k], value[k], k))
        window = kept[:WINDOW_KEPT * scale] + gone[:WINDOW_REMOVED * scale]
        if not window:
            return []
        # a kept node holding pods the plan moved there can only go with the nodes those pods came from
        feeding: dict[int, set[int]] = {}
        for e, pods in plan.placement.existing.items():
            for pod in pods:
                feeding.setdefault(e, set()).add(self.index_of[pod.node_name])
        for k in kept[:WINDOW_KEPT * scale]:
            own = self.node_of.get(self.candidates[k].name)
            extra = sorted(feeding.get(own, set()) - set(window)) if own is not None else []
            window += extra[:max(MAX_WINDOW * scale - len(window), 0)]
        # removals whose pods share a replacement with the window's are decided together
        sharing: dict[int, set[int]] = {}
        for n, node in enumerate(plan.placement.new_nodes):
            for pod in node.pods:
                sharing.setdefault(self.index_of[pod.node_name], set()).add(n)
        members = set(window)
        frontier = list(window)
        while frontier and len(members) < MAX_WINDOW * scale:
            k = frontier.pop()
            for n in sharing.get(k, ()):
                for pod in plan.placement.new_nodes[n].pods:
                    other = self.index_of[pod.node_name]
                    if other not in members:
                        members.add(other)
                        frontier.append(other)
        if any(self.index_of[p.node_name] not in members for n in {n for k in members for n in sharing.get(k, ())}
               for p in plan.placement.new_nodes[n].pods):
            return [k for k in window if k not in sharing]  # too entangled: leave shared replacements alone
        return sorted(members)

    def _solve_window(self, plan: Incumbent, window: list[int], deadline: float, step: int) -> Incumbent | None:
        problem, inside = self.problem, set(window)
        sizes = problem.sizes.astype(np.int64)
        load = np.zeros_like(self.free)
        onto: dict[tuple[int, int], int] = {}
        for e, pods in plan.placement.existing.items():
            for pod in pods:
                c = self.class_of[pod.key]
                if self.index_of[pod.node_name] in inside:
                    onto[(e, c)] = onto.get((e, c), 0) + 1
                else:
                    load[e] += sizes[c]
        frame_nodes: list[NewNode] = []
        own_nodes: list[NewNode] = []
        for node in plan.placement.new_nodes:
            (own_nodes if any(self.index_of[p.node_name] in inside for p in node.pods) else frame_nodes).append(node)
        fixed = [self.candidates[k] for k in plan.removed if k not in inside]
        frame = Frame(removed=fixed, load=load, launched=[self._pattern_of(n) for n in frame_nodes])
        launches: dict[Pattern, int] = {}
        for node in own_nodes:
            p = self._pattern_of(node)
            launches[p] = launches.get(p, 0) + 1
        members = [self.candidates[k] for k in window]
        demand = np.zeros(len(problem.classes), dtype=np.int64)
        for s in members:
            for pod in s.pods:
                demand[self.class_of[pod.key]] += 1
        # replacements sized for this window's pods (the whole shortlist's fills only slow its model down), the
        # given patterns that fit within them, and the window's own replacements (the warm start)
        sized = [p for p in self.patterns if all(n <= demand[c] for c, n in enumerate(p[1])) and any(p[1])]
        patterns = [p for p in dict.fromkeys([*fill_patterns(problem, demand, self.bins), *sized, *launches])
                    if fits(problem, p)]
        model = Model(problem, self.state, members, patterns, eviction_price=self.eviction_price,
                      spot_to_spot=self.spot_to_spot, destinations=self._destinations(plan, window, load, onto),
                      frame=frame)
        model.hint_values([i for i, k in enumerate(window) if k in set(plan.removed)], onto, launches)
        solver = make_solver(min(WINDOW_SECONDS, deadline - time.monotonic()), self.seed + step, 1, True)
        solver.parameters.symmetry_level = 0
        status = solver.solve(model.m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        chosen, part = model.decode(solver)
        if part.unschedulable:
            return None
        merged = Placement(new_nodes=[NewNode(template=n.template, pods=list(n.pods)) for n in frame_nodes])
        for e, pods in plan.placement.existing.items():
            rest = [p for p in pods if self.index_of[p.node_name] not in inside]
            if rest:
                merged.existing[e] = rest
        for e, pods in part.existing.items():
            merged.existing.setdefault(e, []).extend(pods)
        merged.new_nodes += part.new_nodes
        removed = sorted([k for k in plan.removed if k not in inside] + [self.index_of[s.name] for s in chosen])
        merged = finish(problem, [self.candidates[k] for k in removed], merged, self.spot_to_spot)
        return Incumbent(removed=removed, placement=merged)

    def _pattern_of(self, node: NewNode) -> Pattern:
        counts = np.bincount([self.class_of[p.key] for p in node.pods], minlength=len(self.problem.classes))
        return node.template, tuple(int(v) for v in counts)

    def _destinations(self, plan: Incumbent, window: list[int], load: np.ndarray,
                      onto: dict[tuple[int, int], int]) -> set[int]:
        """Where the window's pods may go: where they are now, the window's own nodes, and the kept nodes
        with the most room the rest of the plan leaves (cpu and memory shares)."""
        out = {e for e, _ in onto}
        out |= {self.node_of[self.candidates[k].name] for k in window if self.candidates[k].name in self.node_of}
        gone = {self.node_of[self.candidates[k].name] for k in plan.removed if self.candidates[k].name in self.node_of}
        left = self.free[:, :2] - load[:, :2]
        room = (left / self.alloc).sum(axis=1)
        room[~self.usable] = -np.inf
        room[list(gone)] = -np.inf
        best = np.argsort(-room, kind="stable")[:WINDOW_DESTINATIONS]
        out |= {int(e) for e in best if np.isfinite(room[e])}
        return out - (gone - {self.node_of[self.candidates[k].name] for k in window
                              if self.candidates[k].name in self.node_of})
