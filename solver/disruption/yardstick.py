"""Karpenter's consolidation decision, reproduced as the yardstick our plans are measured against.

One disruption pass, as Karpenter runs it every 10 s (``karpenter-reference.md``): emptiness (delete every
empty candidate the budgets allow), drift (replace the first drifted candidate), multi-node consolidation
(candidates sorted by disruption cost, the first ≤ 100 within budgets, binary search for the longest prefix
whose pods fit on the other nodes plus at most one new, cheaper node), then single-node consolidation (the
first candidate that can be deleted or replaced by one cheaper node). Scheduling is simulated with the
greedy first-fit-decreasing packer, Karpenter's own. Spot candidates are only deleted, never replaced,
unless spot-to-spot is enabled. It never splits a node and never replaces N nodes by M ≥ 2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from model.pod import Pod
from model.snapshot import Snapshot
from solver.decode import shrink
from solver.disruption.candidates import ClusterState, NodeState
from solver.disruption.moves import solver_snapshot
from solver.greedy import greedy_placement
from solver.placement import Placement
from solver.problem import Problem, compile_problem

MAX_MULTI_CANDIDATES = 100


@dataclass
class Decision:
    """Nodes to remove, where their pods go (a placement over ``problem``), and which method chose it."""

    removed: list[NodeState]
    placement: Placement
    problem: Problem
    method: str

    @property
    def savings(self) -> float:
        new = sum(self.problem.templates[n.template].offering.price for n in self.placement.new_nodes)
        return sum(s.price for s in self.removed) - new


def simulate(snapshot: Snapshot, removed: list[NodeState]) -> tuple[Problem, Placement]:
    """Greedy rescheduling of the removed nodes' pods onto the rest of the cluster plus new nodes."""
    moved: dict[str, list[Pod]] = {s.name: s.pods for s in removed}
    problem = compile_problem(solver_snapshot(snapshot, moved))
    return problem, shrink(problem, greedy_placement(problem))


def within_limits(state: ClusterState, removed: list[NodeState]) -> bool:
    """Budgets (every active budget of each pool, per covered reason) and PDB allowances."""
    return not state.excesses(removed)


def balanced_allows(state: ClusterState, removed: list[NodeState], spent: dict[str, float] | None = None) -> bool:
    """The Balanced policy (the model's ``_balanced``): in each Balanced pool that consolidates (removes Empty or
    Underutilized nodes; drift and expiration are not its business), the share of the pool's hourly cost saved
    by those removals minus ``spent`` on the pool's replacements is at least half the share of its pods they
    evict."""
    spent = spent or {}
    consolidated = [s for s in removed if s.reason in ("Empty", "Underutilized")]
    for pool in {s.pool.name for s in consolidated if s.pool is not None
                 and s.pool.spec.disruption.consolidation_policy == "Balanced"}:
        members = [s for s in state.nodes if s.pool is not None and s.pool.name == pool]
        cost, pods = sum(s.price for s in members), sum(len(s.pods) for s in members)
        if not pods or not cost:
            continue
        gone = [s for s in consolidated if s.pool is not None and s.pool.name == pool]
        saved = sum(s.price for s in gone) - spent.get(pool, 0.0)
        if 2 * pods * saved < cost * sum(len(s.pods) for s in gone) - 1e-9:
            return False
    return True


def _budgeted(state: ClusterState, ordered: list[NodeState]) -> list[NodeState]:
    """The longest sub-sequence (in order) that the budgets and PDBs allow together."""
    out: list[NodeState] = []
    for s in ordered:
        if within_limits(state, [*out, s]):
            out.append(s)
    return out


class Yardstick:
    def __init__(self, snapshot: Snapshot, state: ClusterState, *, spot_to_spot: bool = False,
                 deadline: float = float("inf")) -> None:
        self.snapshot, self.state, self.spot_to_spot, self.deadline = snapshot, state, spot_to_spot, deadline
        self.simulations = 0

    def _consolidates(self, removed: list[NodeState], *, any_replacement: bool = False) -> Decision | None:
        """A valid command for ``removed``: every pod rescheduled, and (unless drift) no new node or one
        node cheaper than the removed ones (never for spot candidates without spot-to-spot)."""
        self.simulations += 1
        problem, placement = simulate(self.snapshot, removed)
        if placement.unschedulable:
            return None
        decision = Decision(removed, placement, problem, "")
        spent: dict[str, float] = {}
        for n in placement.new_nodes:
            t = problem.templates[n.template]
            spent[t.pool.name] = spent.get(t.pool.name, 0.0) + t.offering.price
        if not balanced_allows(self.state, removed, spent):
            return None
        if any_replacement:
            return decision
        new = placement.new_nodes
        if len(new) > 1:
            return None
        if new:
            if all(s.capacity_type == "spot" for s in removed) and not self.spot_to_spot:
                return None
            if decision.savings <= 0:
                return None
        return decision

    def decide(self) -> Decision | None:
        candidates = sorted(self.state.candidates, key=lambda s: (s.disruption_cost, s.name))
        voluntary = [s for s in candidates if s.reason != "Expired"]
        empty = _budgeted(self.state, [s for s in voluntary if s.reason == "Empty"])
        if empty:
            decision = self._consolidates(empty)
            if decision is not None:
                decision.method = "emptiness"
                return decision
        for s in _budgeted(self.state, [s for s in voluntary if s.reason == "Drifted"]):
            decision = self._consolidates([s], any_replacement=True)
            if decision is not None:
                decision.method = "drift"
                return decision
        movable = _budgeted(self.state, [s for s in voluntary if s.reason == "Underutilized"]
                            )[:MAX_MULTI_CANDIDATES]
        decision = self._multi(movable)
        if decision is not None:
            return decision
        for s in movable:
            if time.monotonic() > self.deadline:
                break
            decision = self._consolidates([s])
            if decision is not None:
                decision.method = "single-node"
                return decision
        return None

    def _multi(self, candidates: list[NodeState]) -> Decision | None:
        """Binary search for the longest consolidatable prefix (Karpenter's firstNConsolidationOption)."""
        lo, hi, best = 1, len(candidates), None
        while lo <= hi and time.monotonic() < self.deadline:
            mid = (lo + hi) // 2
            decision = self._consolidates(candidates[:mid])
            if decision is not None:
                best, lo = decision, mid + 1
            else:
                hi = mid - 1
        if best is not None:
            best.method = "multi-node"
        return best
