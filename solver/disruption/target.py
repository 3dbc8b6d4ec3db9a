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
``restore``) while the rest of its removals are still candidates and every pod on them still finds a place
the target keeps — where the target put it, or, for a pod the kube-scheduler put elsewhere than planned (it
spreads new pods onto the emptiest nodes, which the target removes next) or whose destination filled up,
wherever it fits tightest; a removal that no longer works that way is kept. Once nothing of it is left, the
pass solves a new target. Solving it was nearly all of a pass's CPU (the bench's scale-down: 6–7 of 7.5 CPU
seconds a pass, ten passes).

Removals that share a replacement form one *group* (an N→M move), taken whole or not at all.

A target is a plan for the pods it was solved with. Evicted pods come back (their controllers create them
again), but once pods asking for more than ``WORKLOAD_LEFT`` of the requests are gone for good (a scale-down, a
rollout) the target keeps nodes for pods that no longer exist, and the pass solves a new one (``stale``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping

import numpy as np

from model.pod import Pod
from model.resources import CPU, MEMORY, Resources
from model.snapshot import Snapshot
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

#: one kind of pod the workload runs: namespace, controller kind and name (the pod's own name without one),
#: requests. An evicted pod's replacement is the same kind of pod under another name.
Demand = tuple[str, str, str, Resources]

#: a target is solved again once pods asking for more than this share of the workload's cpu or memory requests
#: are gone since it was solved (the decision gap's size: a plan within 2 % of its bound for a cluster that
#: needs 2 % less is no longer within it)
WORKLOAD_LEFT = 0.02


def workload(snapshot: Snapshot) -> Counter[Demand]:
    """How many pods of each kind the cluster runs or waits to run (daemon, finished and deleting pods aside)."""
    return Counter((p.namespace, p.owner_kind, p.owner_name or p.name, p.requests) for p in snapshot.pods
                   if not p.daemon and not p.terminal and not p.deleting)


def left_share(then: Mapping[Demand, int], now: Mapping[Demand, int]) -> float:
    """The largest share of ``then``'s cpu or memory requests whose pods are not in ``now`` (net of pods of the
    same kind that came back or were added)."""
    share = 0.0
    for resource in (CPU, MEMORY):
        total = sum(n * demand[3][resource] for demand, n in then.items())
        gone = sum(max(0, n - now.get(demand, 0)) * demand[3][resource] for demand, n in then.items())
        if total:
            share = max(share, gone / total)
    return share


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
    #: the pods it was solved for (``workload``)
    workload: Mapping[Demand, int] = dataclasses.field(default_factory=dict)

    def stale(self, snapshot: Snapshot) -> bool:
        """Are pods asking for more than ``WORKLOAD_LEFT`` of its workload's requests gone from ``snapshot``?"""
        return left_share(self.workload, workload(snapshot)) > WORKLOAD_LEFT


def portable(problem: Problem, removed: list[NodeState], placement: Placement, solved_at: float,
             solved_for: Mapping[Demand, int]) -> Target:
    """The target by name, solved at ``solved_at`` for the workload ``solved_for``."""
    where: dict[str, str | int] = {p.key: problem.existing[e].name for e, pods in placement.existing.items()
                                   for p in pods}
    where.update({p.key: i for i, n in enumerate(placement.new_nodes) for p in n.pods})
    return Target(tuple(s.name for s in removed), where,
                  tuple(_offer(problem, n.template) for n in placement.new_nodes), solved_at, solved_for)


def restore(target: Target, problem: Problem, state: ClusterState
            ) -> tuple[list[NodeState], Placement, list[str]] | None:
    """What is left of ``target`` as removals and a placement over ``problem`` (a fresh compile of the same
    candidates), with a line for each removal it had to keep; None when nothing of it is left. Removals already
    gone are the steps taken. Each pod goes where the target put it while that node is kept, accepts it and
    has room; the others — pods that arrived since (the kube-scheduler put an evicted pod elsewhere than
    planned), pods whose destination filled up — go where they fit tightest, on the kept nodes and the
    target's replacements. A removal that is no longer a candidate, or with a pod that fits nowhere, is
    kept instead (its pods stay: no other move depends on a removed node), so one pod the scheduler put on
    it does not cost solving the whole target again. The plan gate still verifies whatever step comes of it."""
    candidates = {s.name: s for s in state.candidates}
    present = {n.name for n in state.nodes}
    kept: list[str] = []
    removing = []
    for name in target.removed:
        if name in candidates:
            removing.append(candidates[name])
        elif name in present:
            state_of = state.state(name)
            kept.append(f"{name} is no longer a candidate"
                        + (f": {state_of.blocked}" if state_of is not None and state_of.blocked else ""))
    existing = {c.name: e for e, c in enumerate(problem.existing)}
    templates = {_offer(problem, t): t for t in range(len(problem.templates))}
    class_of = problem.class_of()
    pods = {p.key: p for c in problem.classes for p in c.pods}
    homes = _Homes(problem, {existing[s.name] for s in removing if s.name in existing})
    for i, offer in enumerate(target.launched):
        if offer in templates:
            homes.launch(i, templates[offer])
    removed = []
    for s in removing:
        why = _home_all(s, pods, class_of, target, existing, homes)
        if why:
            kept.append(f"{s.name}: {why}")
            if s.name in existing:
                homes.keep(existing[s.name])
        else:
            removed.append(s)
    if not removed:
        return None
    return removed, homes.placement(), kept


def _home_all(node: NodeState, pods: Mapping[str, Pod], class_of: Mapping[str, int], target: Target,
              existing: Mapping[str, int], homes: _Homes) -> str:
    """Place every pod of ``node`` (planned homes first, then the tightest fit); on failure undo them all
    and say why."""
    problem = homes.problem
    placed: list[tuple[tuple[str, int], Pod, int]] = []
    unplaced: list[tuple[Pod, int]] = []
    why = ""
    for original in node.pods:
        pod = pods.get(original.key)
        if pod is None:
            why = f"pod {original.key} is not among the candidates' pods"
            break
        c = class_of[pod.key]
        if problem.classes[c].bundle:  # a bundle lands whole; the model, not this check, places it
            why = f"pod {pod.key} belongs to a bundle"
            break
        goes = target.where.get(pod.key)
        planned = (("new", goes) if isinstance(goes, int) else
                   ("existing", existing[goes]) if isinstance(goes, str) and goes in existing else None)
        if planned is not None and homes.put(planned, pod, c):
            placed.append((planned, pod, c))
        else:
            unplaced.append((pod, c))
    if not why:
        for pod, c in sorted(unplaced, key=lambda item: (-float(problem.sizes[item[1], 0]), item[0].key)):
            where = homes.tightest(c)
            if where is None or not homes.put(where, pod, c):
                why = f"pod {pod.key} fits nowhere the target keeps"
                break
            placed.append((where, pod, c))
    if why:
        for where, pod, c in placed:
            homes.take(where, pod, c)
    return why


class _Homes:
    """Where restored pods may go — kept existing nodes and the target's replacements — with their load."""

    def __init__(self, problem: Problem, gone: set[int]) -> None:
        self.problem = problem
        self.gone = gone
        self.load = np.zeros_like(problem.existing_free)
        self.existing: dict[int, list[Pod]] = {}
        self.new: dict[int, NewNode] = {}
        self.new_load: dict[int, np.ndarray] = {}

    def keep(self, e: int) -> None:
        """Existing node ``e`` stays after all: a home for the pods of the removals after it."""
        self.gone.discard(e)

    def launch(self, i: int, template: int) -> None:
        self.new[i] = NewNode(template)
        self.new_load[i] = np.zeros(self.problem.template_alloc.shape[1], dtype=self.problem.sizes.dtype)

    def room(self, where: tuple[str, int], c: int) -> np.ndarray | None:
        """What would be left at ``where`` after one more pod of class ``c`` (None: it does not go there)."""
        kind, i = where
        p = self.problem
        if kind == "new":
            if i not in self.new or not p.template_ok[c, self.new[i].template]:
                return None
            left = p.template_alloc[self.new[i].template] - self.new_load[i] - p.sizes[c]
        else:
            if i in self.gone or not p.existing_ok[c, i]:
                return None
            left = p.existing_free[i] - self.load[i] - p.sizes[c]
        return left if bool(np.all(left >= 0)) else None

    def put(self, where: tuple[str, int] | None, pod: Pod, c: int) -> bool:
        if where is None or self.room(where, c) is None:
            return False
        kind, i = where
        if kind == "new":
            self.new_load[i] += self.problem.sizes[c]
            self.new[i].pods.append(pod)
        else:
            self.load[i] += self.problem.sizes[c]
            self.existing.setdefault(i, []).append(pod)
        return True

    def take(self, where: tuple[str, int], pod: Pod, c: int) -> None:
        """Undo ``put``."""
        kind, i = where
        if kind == "new":
            self.new_load[i] -= self.problem.sizes[c]
            self.new[i].pods.remove(pod)
        else:
            self.load[i] -= self.problem.sizes[c]
            self.existing[i].remove(pod)
            if not self.existing[i]:
                del self.existing[i]

    def tightest(self, c: int) -> tuple[str, int] | None:
        """The home that would have the least cpu and memory left (shares of what it has) after a pod of class
        ``c``: best fit, as the re-simulation of a held decision places its pods."""
        p = self.problem
        best: tuple[float, tuple[str, int]] | None = None
        options = [("new", i) for i in self.new] + [("existing", e) for e in range(len(p.existing))]
        for where in options:
            left = self.room(where, c)
            if left is None:
                continue
            size = (p.template_alloc[self.new[where[1]].template] if where[0] == "new"
                    else p.existing_free[where[1]])
            score = float(sum(left[a] / size[a] for a in range(min(2, len(left))) if size[a] > 0))
            if best is None or score < best[0]:
                best = (score, where)
        return best[1] if best is not None else None

    def placement(self) -> Placement:
        return Placement(new_nodes=[self.new[i] for i in sorted(self.new) if self.new[i].pods],
                         existing=self.existing)
