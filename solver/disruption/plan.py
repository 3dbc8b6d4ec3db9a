"""``consolidate``: snapshot in, DisruptionPlan out (the library call behind ``nodeplan consolidate``)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from model import labels as wk
from model.disruption import (
    BudgetUse,
    Disruption,
    DisruptionCost,
    DisruptionPlan,
    DisruptionSolverReport,
    NodeRemoval,
    PodMove,
)
from model.errors import InputError
from model.snapshot import Snapshot
from solver.disruption.budgets import Allowances
from solver.disruption.candidates import ClusterState, analyse, eviction_cost
from solver.disruption.consolidate import ConsolidateOptions, Outcome, plan_consolidation
from solver.disruption.verify import verify_disruption
from solver.provision import planned_claims

#: seconds kept back from the deadline per pod in the snapshot, for the plan and its verification (~1.5 s at
#: 29,000 pods: a fragmented 5,000-node cluster)
RESERVE_PER_POD = 5e-5


@dataclass
class ConsolidationResult:
    plan: DisruptionPlan
    state: ClusterState
    outcome: Outcome | None

    @property
    def budget_errors(self) -> list[InputError]:
        return self.state.errors


def _blocker(reason: str) -> str:
    """The kind of rule a blocked node's reason names (``analyse``'s wording), for counting."""
    for needle, kind in ((wk.DO_NOT_DISRUPT, "do-not-disrupt"), ("PodDisruptionBudget", "PDB"),
                         ("consolidationPolicy WhenEmpty", "WhenEmpty policy"),
                         ("consolidateAfter is", "consolidateAfter Never"), ("consolidateAfter", "consolidateAfter"),
                         ("nominated", "nominated"), ("pod affinity", "hostname pod affinity"),
                         ("being disrupted", "being disrupted")):
        if needle in reason:
            return kind
    return reason.split(" (")[0]


def why_nothing(result: ConsolidationResult) -> str:
    """Why ``result`` disrupts nothing, in one line an operator can act on: no candidate (and what blocks the
    nodes), budgets or PDBs that allow no removal now, a plan the verifier rejected, or no move that saves
    (with the solver's status and the bound it proved)."""
    state, plan = result.state, result.plan
    counts = Counter(_blocker(n.blocked) for n in state.nodes if n.blocked)
    blocked = ", ".join(f"{kind}: {n}" for kind, n in sorted(counts.items()))
    held = f"; blocked nodes: {blocked}" if blocked else ""
    if not state.candidates:
        return f"no candidate node among {len(state.nodes)}{held}"
    allowances = Allowances(state)
    if not any(allowances.allows(s) for s in state.candidates):
        budgets = [s for s in state.candidates if s.pool is not None and any(
            limit.allowed == 0 and s.reason is not None and limit.covers(s.reason)
            for limit in state.budgets.get(s.pool.name, []))]
        if len(budgets) == len(state.candidates):
            limits = "; ".join(f"NodePool {b.node_pool} {'/'.join(b.reasons)}: {b.allowed}"
                               + (f" ({b.window})" if b.window else "") for b in plan.budgets)
            return f"disruption budgets allow no removal now ({limits}); {len(state.candidates)} candidate(s)"
        return (f"PodDisruptionBudgets allow no candidate's evictions now ({len(state.candidates)} "
                f"candidate(s){held})")
    gate = next((n for n in plan.solver.notes if n.startswith("plan gate:")), "")
    if gate:
        return gate
    bound = plan.cost.lower_bound if plan.cost.lower_bound is not None else plan.solver.objective_bound
    allowed = sum(b.allowed for b in plan.budgets)
    return (f"no move saves: {len(state.candidates)} candidate(s), budgets allow {allowed} node(s); solver "
            f"{plan.solver.status}, {plan.cost.before:.4f} $/h now, lower bound "
            + (f"{bound:.4f} $/h" if bound is not None else "unknown") + held)


def _replacement_name(index: int, pool: str) -> str:
    return f"{pool}-replacement-{index:04d}"


def _budget_use(state: ClusterState, outcome: Outcome | None) -> list[BudgetUse]:
    removed = outcome.removed if outcome else []
    out = []
    for pool, limits in sorted(state.budgets.items()):
        for limit in limits:
            used = sum(1 for s in removed if s.pool is not None and s.pool.name == pool
                       and s.reason is not None and limit.covers(s.reason))
            out.append(BudgetUse(node_pool=pool, reasons=sorted(limit.reasons), allowed=limit.allowed, used=used,
                                 window=limit.window))
    return out


def _nothing_to_do(state: ClusterState, before: float, started: float, stages: dict[str, float],
                   notes: list[str]) -> ConsolidationResult:
    """The plan that disrupts nothing (no candidate, or the gate rejected the plan)."""
    plan = DisruptionPlan(
        cost=DisruptionCost(before=round(before, 6), after=round(before, 6), savings=0.0),
        disruption=Disruption(evictions=0, cost=0.0), budgets=_budget_use(state, None),
        solver=DisruptionSolverReport(status="NOTHING_TO_DO", wall_seconds=round(time.monotonic() - started, 3),
                                      stages=stages, notes=notes))
    return ConsolidationResult(plan=plan, state=state, outcome=None)


def consolidate(snapshot: Snapshot, options: ConsolidateOptions | None = None) -> ConsolidationResult:
    """The disruption plan minimising hourly cost after the move (plus eviction cost at its price) within
    budgets, PDBs, do-not-disrupt and the pools' policies. Invalid budgets freeze their pool (fail closed)
    and are reported in ``budget_errors``."""
    options = options or ConsolidateOptions()
    started = options.started_at if options.started_at is not None else time.monotonic()
    # keep time back for building and verifying the plan (the verifier re-derives every rule over the cluster)
    reserve = min(0.4 + len(snapshot.pods) * RESERVE_PER_POD, 0.2 * options.time_limit)
    deadline = started + options.time_limit - reserve
    stages: dict[str, float] = {}
    t0 = time.monotonic()
    now = options.now or datetime.now(UTC)
    if not snapshot.nodepools:
        raise InputError("the snapshot has no NodePools: consolidation only removes nodes a NodePool manages "
                         "(add them with kubectl get nodepools.karpenter.sh -o yaml)", file=snapshot.source)
    state = analyse(snapshot, now)
    stages["analyse"] = round(time.monotonic() - t0, 3)

    def stage(name: str, seconds: float) -> None:
        stages[name] = round(seconds, 3)

    outcome = plan_consolidation(snapshot, state, options, deadline, stage)
    before = sum(s.price for s in state.nodes)
    notes = list(state.warnings) + [f"{err}; NodePool frozen (0 disruptions)" for err in state.errors]
    if outcome is None:
        blocked = sum(1 for s in state.nodes if s.blocked)
        notes.append(f"no candidate node ({blocked} node(s) blocked; see `--explain`)")
        return _nothing_to_do(state, before, started, stages, notes)
    while True:
        plan = disruption_plan(state, outcome, options, started=started, stages=stages, notes=notes)
        t0 = time.monotonic()
        rejected = verify_disruption(snapshot, plan, now, spot_to_spot=options.spot_to_spot)
        stages["verify"] = round(time.monotonic() - t0, 3)
        if not rejected:
            return ConsolidationResult(plan=plan, state=state, outcome=outcome)
        fallback = outcome.fallen_back()
        if fallback is None:  # the gate: a plan the verifier rejects is never returned, nothing moves
            notes.append(f"plan gate: the disruption plan failed verification ({len(rejected)} violation(s), "
                         f"first: {rejected[0]}); nothing is disrupted")
            return _nothing_to_do(state, before, started, stages, notes)
        notes.append(f"plan gate: the improved plan failed verification ({len(rejected)} violation(s), first: "
                     f"{rejected[0]}); the plan it started from is returned")
        fallback.yardstick, fallback.notes = outcome.yardstick, outcome.notes
        outcome = fallback


def disruption_plan(state: ClusterState, outcome: Outcome, options: ConsolidateOptions, *,
                    started: float | None = None, stages: dict[str, float] | None = None,
                    notes: list[str] | None = None) -> DisruptionPlan:
    """The DisruptionPlan of an outcome: removals, replacements as NodeClaims, moves, cost and report."""
    before = sum(s.price for s in state.nodes)
    started = started if started is not None else time.monotonic()
    stages, notes = stages if stages is not None else {}, notes if notes is not None else []
    claims, existing = planned_claims(outcome.problem, outcome.placement, _replacement_name)
    where = {pod: a.name for a in existing for pod in a.pods}
    where.update({pod: c.name for c in claims for pod in c.pods})
    moves = [PodMove(pod=p.key, source=s.name, to=where[p.key]) for s in outcome.removed for p in s.pods
             if p.key in where]
    after = before - sum(s.price for s in outcome.removed) + sum(c.price for c in claims)
    evicted = [p for s in outcome.removed for p in s.pods]
    yardstick = outcome.yardstick.savings if outcome.yardstick is not None else (0.0 if options.yardstick else None)
    # OPTIMAL only when the plan meets the cheapest state reachable within the budgets; CP-SAT's own proof
    # covers its candidate shortlist, destinations and replacement patterns, which is noted, not claimed
    status = "OPTIMAL" if outcome.lower_bound is not None and after <= outcome.lower_bound + 1e-6 else (
        "FEASIBLE" if outcome.status == "OPTIMAL" else outcome.status)
    if outcome.status == "OPTIMAL" and status != "OPTIMAL":
        outcome.notes.append("CP-SAT proved this plan optimal over the candidates, destinations and replacement "
                             "patterns it considered")
    plan = DisruptionPlan(
        remove=[NodeRemoval(node=s.name, node_pool=s.pool.name if s.pool else "", reason=s.reason or "Underutilized",
                            price=s.price, evictions=len(s.pods)) for s in outcome.removed],
        node_claims=claims, moves=moves,
        cost=DisruptionCost(before=round(before, 6), after=round(after, 6), savings=round(before - after, 6),
                            lower_bound=round(outcome.lower_bound, 6) if outcome.lower_bound is not None else None,
                            yardstick_savings=round(yardstick, 6) if yardstick is not None else None),
        disruption=Disruption(evictions=len(evicted), cost=round(sum(eviction_cost(p) for p in evicted), 6)),
        budgets=_budget_use(state, outcome),
        solver=DisruptionSolverReport(
            status=status,
            wall_seconds=round(time.monotonic() - started, 3),
            objective_bound=round(outcome.objective_bound, 6) if outcome.objective_bound is not None else None,
            candidates=len(state.candidates), pod_classes=len(outcome.problem.classes), patterns=outcome.patterns,
            stages=stages, notes=notes + outcome.notes))
    return plan
