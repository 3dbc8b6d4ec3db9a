"""The plan gate: no provisioning plan leaves the solver unless the independent verifier accepts it.

A plan the verifier rejects is repaired, never returned as valid: the pods each violation names
(``solver.verify.Violation.pods``) come off their nodes and are reported unschedulable with the rule and
"not modelled exactly", claims it names are dropped, and the rest is verified again. Taking pods out can
break another rule (a pod's affinity partner leaves, a domain's count drops), hence the loop; every round
removes at least one placement, and past ``MAX_ROUNDS`` every planned pod is taken out (a plan that places
nothing always verifies), so the gate ends.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from model.plan import ExistingNodeAssignment, ProvisioningPlan, UnschedulablePod
from model.snapshot import Snapshot
from solver.verify import Violation, violations

#: verification rounds before the gate takes every planned pod out
MAX_ROUNDS = 25


@dataclass
class GateOutcome:
    plan: ProvisioningPlan
    #: every violation found, over all rounds
    found: list[Violation] = field(default_factory=list)
    #: pods taken off the plan's nodes
    rejected: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.found)

    def notes(self) -> list[str]:
        """One note per rule family whose violations the gate repaired."""
        by_rule = Counter(v.rule for v in self.found)
        out = [f"plan gate: {n} violation(s) of {rule} repaired by leaving their pods pending"
               for rule, n in sorted(by_rule.items())]
        if self.rejected:
            out.append(f"plan gate: {len(self.rejected)} pod(s) left pending as not modelled exactly")
        return out


def gate(snapshot: Snapshot, plan: ProvisioningPlan) -> GateOutcome:
    """``plan`` if it verifies, else the plan with the offending pods left pending (see the module)."""
    outcome = GateOutcome(plan=plan)
    pending = {p.key for p in snapshot.pending_pods()}
    for _ in range(MAX_ROUNDS):
        found = violations(snapshot, outcome.plan)
        if not found:
            return outcome
        outcome.found.extend(found)
        outcome.plan, taken = _without(outcome.plan, found, pending)
        outcome.rejected.extend(taken)
    everyone = [Violation(rule="plan gate", message=f"still rejected after {MAX_ROUNDS} rounds",
                          pods=tuple(k for c in outcome.plan.node_claims for k in c.pods)
                          + tuple(k for e in outcome.plan.existing_nodes for k in e.pods))]
    outcome.plan, taken = _without(outcome.plan, everyone, pending)
    outcome.rejected.extend(taken)
    return outcome


def _without(plan: ProvisioningPlan, found: list[Violation], pending: set[str]
             ) -> tuple[ProvisioningPlan, list[str]]:
    """The plan minus the pods and claims the violations name; named pending pods become unschedulable
    with the first violation's rule and message, keys that are not pending pods simply leave."""
    reasons: dict[str, str] = {}
    for v in found:
        for key in v.pods:
            reasons.setdefault(key, f"{v.rule}: not modelled exactly ({v.message})")
    dropped = {c for v in found for c in v.claims}
    placed = {k for c in plan.node_claims for k in c.pods} | {k for e in plan.existing_nodes for k in e.pods}
    claims = []
    for claim in plan.node_claims:
        if claim.name in dropped:
            continue
        keep = [k for k in claim.pods if k not in reasons and k in pending]
        if keep:
            claims.append(claim.model_copy(update={"pods": keep}) if keep != claim.pods else claim)
    existing = [ExistingNodeAssignment(name=e.name, pods=kept) for e in plan.existing_nodes
                if (kept := [k for k in e.pods if k not in reasons and k in pending])]
    still = {k for c in claims for k in c.pods} | {k for e in existing for k in e.pods}
    unschedulable = {u.pod: u for u in plan.unschedulable if u.pod in pending and u.reason.strip()}
    for key in sorted(pending - still - unschedulable.keys()):
        reason = reasons.get(key) or ("plan gate: its node was dropped" if key in placed
                                      else "solver defect: missing from the plan")
        unschedulable[key] = UnschedulablePod(pod=key, reason=reason)
    taken = sorted(k for k in placed if k in pending and k not in still)
    total = round(sum(c.price for c in claims), 6)
    cost = plan.cost.model_copy(update={"total": total, "lower_bound": min(plan.cost.lower_bound, total),
                                        "lp_bound": None})
    solver = plan.solver.model_copy(update={
        "status": "FEASIBLE" if plan.solver.status == "OPTIMAL" else plan.solver.status, "optimality": None,
        "rejected_pods": plan.solver.rejected_pods + len(taken)})
    return plan.model_copy(update={"node_claims": claims, "existing_nodes": existing, "cost": cost, "solver": solver,
                                   "unschedulable": sorted(unschedulable.values(), key=lambda u: u.pod)}), taken
