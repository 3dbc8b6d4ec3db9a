"""Consolidation toward a target: the budget-free plan, taken one budget-sized step per decision.

A budget caps how many nodes one decision removes (Karpenter's default: 10 % of a pool's nodes), not how many
go over a series of decisions. The plan that saves most within the budget now is greedy: it empties the
nodes that save most at once, and their pods fill the room that the other nodes would have needed, so the
passes after it stop well above the cheapest reachable state (the bench's 1,000-pod scale-down: 1.08 × the
bound after four decisions, where the budget-free plan reaches 1.01 ×). Here the plan is solved once without
the budgets (the *target*: which nodes go in the end and where every evicted pod lands), and a decision takes
the part of it the budgets, PDBs, the Balanced policy and the spot-to-spot rule allow now. Pods of a step go
where the target puts them — on nodes the target keeps — so each step fits whatever the later ones do, saves
by itself, and the next pass solves its target again on the cluster the step left.

Removals that share a replacement form one *group* (an N→M move), taken whole or not at all.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from solver.disruption.budgets import Allowances
from solver.disruption.candidates import CONSOLIDATION_REASONS, ClusterState, NodeState
from solver.disruption.yardstick import balanced_allows
from solver.placement import NewNode, Placement
from solver.problem import Problem


def lifted(state: ClusterState) -> ClusterState:
    """``state`` with every budget that allows a disruption now allowing all of its pool's nodes (a budget at
    0 — a closed window, nodes already disrupting, an unreadable budget — stays closed: no step can start
    there). PDB allowances stay: they hold over the whole series too, as far as this pass can tell."""
    budgets = {pool: [dataclasses.replace(limit, allowed=len(state.nodes)) if limit.allowed > 0 else limit
                      for limit in limits] for pool, limits in state.budgets.items()}
    return dataclasses.replace(state, budgets=budgets)


@dataclasses.dataclass
class Group:
    """Removals of the target that share replacements, with those replacements."""

    removed: list[NodeState]
    launched: list[NewNode]
    saving: float


def groups(problem: Problem, removed: list[NodeState], placement: Placement) -> list[Group]:
    """The target's removals joined by the replacements their pods share (union–find over the new nodes)."""
    owner = {pod.key: s.name for s in removed for pod in s.pods}
    parent = {s.name: s.name for s in removed}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for node in placement.new_nodes:
        sources = sorted({owner[p.key] for p in node.pods if p.key in owner})
        for other in sources[1:]:
            parent[root(other)] = root(sources[0])
    members: dict[str, list[NodeState]] = {}
    for s in removed:
        members.setdefault(root(s.name), []).append(s)
    launched: dict[str, list[NewNode]] = {}
    for node in placement.new_nodes:
        sources = [owner[p.key] for p in node.pods if p.key in owner]
        if sources:
            launched.setdefault(root(sources[0]), []).append(node)
    out = []
    for key, nodes in members.items():
        new = launched.get(key, [])
        cost = sum(problem.templates[n.template].offering.price for n in new)
        out.append(Group(nodes, new, sum(s.price for s in nodes) - cost))
    return out


def _spot_replaced_by_spot(problem: Problem, group: Group) -> bool:
    """Karpenter's spot-to-spot rule for a group on its own: spot replacements need an on-demand (or drifted,
    expired) node among the removals. Checked per group, so any set of groups keeps it too."""
    spot = any(problem.templates[n.template].offering.capacity_type == "spot" for n in group.launched)
    lifts = any(s.capacity_type != "spot" or s.reason not in CONSOLIDATION_REASONS for s in group.removed)
    return spot and not lifts


def budget_step(state: ClusterState, problem: Problem, removed: list[NodeState], placement: Placement, *,
                spot_to_spot: bool = False) -> tuple[list[NodeState], Placement] | None:
    """The groups of the target (``removed``, ``placement`` over ``problem``) one decision may take now, most
    saving first, within ``state``'s budgets and PDB allowances and the Balanced policy; their pods placed as
    the target places them. None when no group that saves fits."""
    allowances = Allowances(state)
    balanced = any(s.pool is not None and s.pool.spec.disruption.consolidation_policy == "Balanced"
                   for s in removed)
    chosen: list[NodeState] = []
    launched: list[NewNode] = []
    spent: dict[str, float] = {}
    for group in sorted(groups(problem, removed, placement), key=lambda g: (-g.saving, g.removed[0].name)):
        if group.saving <= 1e-9 or (not spot_to_spot and _spot_replaced_by_spot(problem, group)):
            continue
        use = np.sum([allowances.use(s) for s in group.removed], axis=0)
        if np.any(use > allowances.left):
            continue
        if balanced:
            cost = dict(spent)
            for n in group.launched:
                t = problem.templates[n.template]
                cost[t.pool.name] = cost.get(t.pool.name, 0.0) + t.offering.price
            if not balanced_allows(state, [*chosen, *group.removed], cost):
                continue
            spent = cost
        allowances.left = allowances.left - use
        chosen += group.removed
        launched += group.launched
    if not chosen:
        return None
    names = {s.name for s in chosen}
    owner = {pod.key: s.name for s in removed for pod in s.pods}
    existing = {e: kept for e, pods in placement.existing.items()
                if (kept := [p for p in pods if owner.get(p.key) in names])}
    return chosen, Placement(new_nodes=launched, existing=existing)
