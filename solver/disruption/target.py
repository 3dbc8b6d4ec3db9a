"""Consolidation toward a target: the budget-free plan, taken one budget-sized step per decision.

A budget caps how many nodes one decision removes (Karpenter's default: 10 % of a pool's nodes), not how many
go over a series of decisions. The plan that saves most within the budget now is greedy: it empties the
nodes that save most at once, and their pods fill the room that the other nodes would have needed, so the
passes after it stop well above the cheapest reachable state (the bench's 1,000-pod scale-down: 1.08 × the
bound after four decisions, where the budget-free plan reaches 1.01 ×). Here the plan is solved once without
the budgets (the *target*: which nodes go in the end and where every evicted pod lands), and a decision takes
the part of it the budgets, PDBs, the Balanced policy and the spot-to-spot rule allow now. Pods of a step go
where the target puts them — on nodes the target keeps — so each step fits whatever the later ones do, and
saves by itself. The next pass takes the target's next step without solving it again (``Target``,
``restore``) while the cluster is still as the step left it: the rest of its removals still candidates, no
pod on them that it has no place for, every destination still free enough. Otherwise — the kube-scheduler
put an evicted pod elsewhere, pods came or went — that pass solves a new target. Solving it was nearly all of
a pass's CPU (the bench's scale-down: 6–7 of 7.5 CPU seconds a pass, ten passes).

Removals that share a replacement form one *group* (an N→M move), taken whole or not at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

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


#: a replacement's offering: NodePool, instance type, zone, capacity type
Offer = tuple[str, str, str, str]


def _offer(problem: Problem, template: int) -> Offer:
    t = problem.templates[template]
    return t.pool.name, t.instance_type.name, t.offering.zone, t.offering.capacity_type


@dataclasses.dataclass(frozen=True)
class Target:
    """A budget-free plan by name — nodes, pods, offerings — rather than by a compiled problem's indices, so a
    later pass can map it onto its own compile (``restore``)."""

    removed: tuple[str, ...]
    #: each evicted pod's destination: a kept node's name, or its replacement's index into ``launched``
    where: Mapping[str, str | int]
    launched: tuple[Offer, ...]
    #: ``time.monotonic()`` when it was solved (the controller solves it again once it is old)
    solved_at: float


def portable(problem: Problem, removed: list[NodeState], placement: Placement, solved_at: float) -> Target:
    where: dict[str, str | int] = {p.key: problem.existing[e].name for e, pods in placement.existing.items()
                                   for p in pods}
    where.update({p.key: i for i, n in enumerate(placement.new_nodes) for p in n.pods})
    return Target(tuple(s.name for s in removed), where,
                  tuple(_offer(problem, n.template) for n in placement.new_nodes), solved_at)


def restore(target: Target, problem: Problem, state: ClusterState) -> tuple[list[NodeState], Placement] | None:
    """What is left of ``target`` as removals and a placement over ``problem`` (a fresh compile of the same
    candidates), or None when the cluster no longer is as the target left it: one of its removals still
    here but no longer a candidate, a pod on one that the target has no place for (it arrived since), a
    destination gone, no longer accepting its class or no longer free enough, an offering no longer sold.
    Removals already gone are the steps taken. The plan gate still verifies whatever step comes of it."""
    candidates = {s.name: s for s in state.candidates}
    present = {n.name for n in state.nodes}
    removed = []
    for name in target.removed:
        if name in candidates:
            removed.append(candidates[name])
        elif name in present:
            return None
    if not removed:
        return None
    existing = {c.name: e for e, c in enumerate(problem.existing)}
    templates = {_offer(problem, t): t for t in range(len(problem.templates))}
    class_of = problem.class_of()
    pods = {p.key: p for c in problem.classes for p in c.pods}
    gone = {s.name for s in removed}
    load = np.zeros_like(problem.existing_free)
    new: dict[int, NewNode] = {}
    placement = Placement()
    for s in removed:
        for original in s.pods:
            pod, goes = pods.get(original.key), target.where.get(original.key)
            if pod is None or goes is None:
                return None
            c = class_of[pod.key]
            if problem.classes[c].bundle:  # a bundle lands whole; the model, not this check, places it
                return None
            if isinstance(goes, int):
                t = templates.get(target.launched[goes])
                if t is None or not problem.template_ok[c, t]:
                    return None
                new.setdefault(goes, NewNode(t)).pods.append(pod)
                continue
            e = existing.get(goes)
            if e is None or goes in gone or not problem.existing_ok[c, e]:
                return None
            load[e] += problem.sizes[c]
            placement.existing.setdefault(e, []).append(pod)
    if np.any(load > problem.existing_free):
        return None
    for node in new.values():
        size = np.sum([problem.sizes[class_of[p.key]] for p in node.pods], axis=0)
        if np.any(size > problem.template_alloc[node.template]):
            return None
    placement.new_nodes = [new[i] for i in sorted(new)]
    return removed, placement
