"""Re-checking a consolidation decision after its validation wait, with Karpenter's meaning of "still valid".

Karpenter (``pkg/controllers/disruption/validation.go``, v1.15.0) does not compare pod sets: after the
consolidation TTL it re-computes the candidates (each must still pass the candidate filter — not deleting,
no ``do-not-disrupt``, no blocking PDB, not nominated — and the NodePool budgets must still cover them), then
re-simulates scheduling of the pods *now* on the candidates onto the rest of the cluster as it is now
(``SimulateScheduling``: the candidates' current reschedulable pods, every other active node with what it
runs now) and carries the command out if every pod still lands without more or dearer replacements than the
command launches. A pod that arrived on a receiving node therefore breaks the decision only if it took the
room a moved pod needed and no other room is left; a pod that arrived on a removed node is moved with the
others if it fits somewhere.

nodeplan's re-simulation: the decision's own placement first (every pod still on a removed node keeps its
planned destination while that destination exists), checked on the fresh cluster by the independent
verifier (``solver.verify``: every placement rule, with what the receiving nodes run now); pods that have no
destination (arrivals) or whose destination no longer holds them (the verifier names them) are placed
largest first, each where it fits tightest (replacements, then the plan's receiving nodes, then any other
schedulable node on a tie), until the verifier accepts the whole. A heuristic: a cluster packed tighter than
it can re-pack abandons the decision (safe; the next pass decides afresh). The result is the decision as it
holds now, gated once more by ``verify_disruption`` (candidates, budgets, PDBs, Balanced, spot-to-spot, cost
figures, final state).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from model import labels as wk
from model.disruption import Disruption, DisruptionCost, DisruptionPlan, NodeRemoval, PodMove
from model.plan import (
    ExistingNodeAssignment,
    PlanCost,
    PlannedNodeClaim,
    ProvisioningPlan,
    SolverReport,
    UnschedulablePod,
)
from model.pod import Pod
from model.snapshot import Snapshot
from solver.disruption.candidates import CONSOLIDATION_REASONS, ClusterState, NodeState, eviction_cost
from solver.disruption.moves import final_snapshot
from solver.disruption.verify import verify_disruption
from solver.verify import Context, violations
from solver.verify.resources import total

#: verifier rounds one re-simulation may take (each re-homes the pods the last one named)
MAX_ROUNDS = 8
_UNPLACED = "re-simulation: not placed yet"


@dataclass
class Revalidation:
    """The decision as it holds on the fresh cluster (``plan``), or why it no longer does (``why``)."""

    plan: DisruptionPlan | None
    why: str = ""
    #: pods the decision now moves that it did not plan for (arrived on a removed node, or re-homed)
    replaced: tuple[str, ...] = ()


def _abandon(why: str) -> Revalidation:
    return Revalidation(None, why)


def _candidates(plan: DisruptionPlan, state: ClusterState) -> tuple[list[NodeState], str]:
    """The removed nodes' fresh states, or why one may no longer be removed (Karpenter's candidate re-check).
    Empty and Underutilized are both consolidation: a node that emptied (or filled) meanwhile stays one."""
    removed = []
    for removal in plan.remove:
        node = state.state(removal.node)
        if node is None:
            return [], f"node {removal.node} is gone"
        if not node.candidate:
            return [], f"node {removal.node} is no longer a candidate: {node.blocked or 'no reason to remove it'}"
        if node.reason != removal.reason and not {node.reason, removal.reason} <= CONSOLIDATION_REASONS:
            return [], f"node {removal.node} is now {node.reason}, was {removal.reason}"
        removed.append(node)
    for excess in state.excesses(removed):
        if excess.limit is not None:
            return [], (f"NodePool {excess.name} budget now allows {excess.allowed} disruption(s), the decision "
                        f"needs {excess.used}")
        return [], (f"PodDisruptionBudget {excess.name} now allows {excess.allowed} eviction(s), the decision "
                    f"needs {excess.used}")
    return removed, ""


def _destinations(final: Snapshot, plan: DisruptionPlan, removed: set[str]) -> list[str]:
    """Where a pod may go, in the order tried: the replacements, the plan's receiving nodes, then every other
    node pods can be scheduled on (not cordoned, deleting, NotReady or already being disrupted)."""
    usable = {n.name for n in final.nodes if n.name not in removed and not n.unschedulable and not n.deleting
              and n.ready and not any(t.key == wk.DISRUPTED_TAINT for t in n.taints)}
    claims = [c.name for c in plan.node_claims]
    receivers = sorted({m.to for m in plan.moves} & usable)
    return claims + receivers + sorted(usable - set(receivers))


def _provisioning(claims: list[PlannedNodeClaim], where: Mapping[str, str], unplaced: Iterable[str]
                  ) -> ProvisioningPlan:
    """The placement as a provisioning plan over the fresh cluster after the removals (the verifier's input)."""
    onto: dict[str, list[str]] = {}
    for pod, dest in where.items():
        onto.setdefault(dest, []).append(pod)
    names = {c.name for c in claims}
    return ProvisioningPlan(
        node_claims=[c.model_copy(update={"pods": sorted(onto.get(c.name, []))}) for c in claims],
        existing_nodes=[ExistingNodeAssignment(name=n, pods=sorted(p)) for n, p in sorted(onto.items())
                        if n not in names],
        unschedulable=[UnschedulablePod(pod=k, reason=_UNPLACED) for k in sorted(unplaced)],
        cost=PlanCost(total=sum(c.price for c in claims), lower_bound=0.0),
        solver=SolverReport(status="FEASIBLE", wall_seconds=0.0))


def _free(ctx: Context) -> dict[str, dict[str, int]]:
    """Room left on every final node: allocatable less what runs there and what the placement adds."""
    out = {}
    for name, state in ctx.final.items():
        free = dict(state.allocatable)
        for resource, amount in total([*state.resident, *state.placed]).items():
            free[resource] = free.get(resource, 0) - amount
        out[name] = free
    return out


def _fits(pod: Pod, free: Mapping[str, int]) -> bool:
    return all(amount <= free.get(resource, 0) for resource, amount in pod.requests.items() if amount > 0)


def _best_fit(pod: Pod, order: list[str], free: Mapping[str, Mapping[str, int]]) -> str | None:
    """The destination the pod fits on with the least cpu left over (the first in ``order`` on a tie): the
    tightest fit keeps the larger gaps for the larger pods still to place."""
    fitting = [(free[d].get("cpu", 0) - pod.requests.get("cpu", 0), i, d) for i, d in enumerate(order)
               if d in free and _fits(pod, free[d])]
    return min(fitting)[2] if fitting else None


def resimulate(plan: DisruptionPlan, snapshot: Snapshot, removed: list[NodeState]
               ) -> tuple[dict[str, str], tuple[str, ...], str]:
    """Where each pod now on a removed node goes (pod → node or replacement), the pods placed anew, or why
    some pod fits nowhere."""
    gone = {s.name for s in removed}
    pods = {p.key: p for s in removed for p in s.pods}
    final = final_snapshot(snapshot, {s.name: s.pods for s in removed})
    order = _destinations(final, plan, gone)
    allowed = set(order)
    planned = {m.pod: m.to for m in plan.moves}
    where = {k: planned[k] for k in pods if planned.get(k) in allowed}
    unplaced = sorted(set(pods) - where.keys())
    tried: dict[str, set[str]] = {k: set() for k in pods}
    anew: set[str] = set(unplaced)
    last = ""
    for _ in range(MAX_ROUNDS):
        if unplaced:
            free = _free(Context.build(final, _provisioning(plan.node_claims, where, unplaced)))
            for key in sorted(unplaced, key=lambda k: (-pods[k].requests.get("cpu", 0), k)):
                dest = _best_fit(pods[key], [d for d in order if d not in tried[key]], free)
                if dest is None:
                    return {}, (), (f"pod {pods[key].key} fits nowhere in the cluster as it is now"
                                    + (f" ({last})" if last else ""))
                where[key] = dest
                for resource, amount in pods[key].requests.items():
                    free[dest][resource] = free[dest].get(resource, 0) - amount
            unplaced = []
        found = violations(final, _provisioning(plan.node_claims, where, ()))
        if not found:
            return where, tuple(sorted(anew)), ""
        named = sorted({k for v in found for k in v.pods if k in where})
        if not named:
            return {}, (), found[0].message  # not a placement: an offering or a pool limit, say
        last = next(v.message for v in found if set(v.pods) & set(named))
        for key in named:
            tried[key].add(where.pop(key))
        unplaced, anew = named, anew | set(named)
    return {}, (), f"re-simulation did not settle in {MAX_ROUNDS} rounds ({last})"


def revalidate(plan: DisruptionPlan, snapshot: Snapshot, state: ClusterState, now: datetime, *,
               spot_to_spot: bool = False) -> Revalidation:
    """Is ``plan`` (decided earlier) still valid on the fresh ``snapshot`` (``state`` = its analysis)?"""
    removed, why = _candidates(plan, state)
    if why:
        return _abandon(why)
    where, anew, why = resimulate(plan, snapshot, removed)
    if why:
        return _abandon(why)
    onto: dict[str, list[str]] = {}
    for pod, dest in where.items():
        onto.setdefault(dest, []).append(pod)
    claims = [c.model_copy(update={"pods": sorted(onto.get(c.name, []))}) for c in plan.node_claims]
    idle = [c.name for c in claims if not c.pods]
    if idle:  # Karpenter: fewer new nodes than the command launches means a better decision exists now
        return _abandon(f"replacement {idle[0]} would now hold no pod: a cheaper decision exists")
    source = {p.key: s.name for s in removed for p in s.pods}
    before = sum(s.price for s in state.nodes)
    after = before - sum(s.price for s in removed) + sum(c.price for c in claims)
    if before - after <= 1e-9:
        return _abandon(f"the decision no longer saves anything ({before:.4f} → {after:.4f} $/h)")
    evicted = [p for s in removed for p in s.pods]
    fresh = plan.model_copy(update={
        "remove": [NodeRemoval(node=s.name, node_pool=s.pool.name if s.pool else "", reason=s.reason or "Underutilized",
                               price=s.price, evictions=len(s.pods)) for s in removed],
        "node_claims": claims,
        "moves": [PodMove(pod=k, source=source[k], to=where[k]) for k in sorted(where)],
        "cost": DisruptionCost(before=round(before, 6), after=round(after, 6), savings=round(before - after, 6)),
        "disruption": Disruption(evictions=len(evicted), cost=round(sum(eviction_cost(p) for p in evicted), 6)),
    })
    rejected = verify_disruption(snapshot, fresh, now, spot_to_spot=spot_to_spot)
    if rejected:
        return _abandon(f"the re-simulated decision fails verification: {rejected[0]}")
    return Revalidation(fresh, replaced=anew)
