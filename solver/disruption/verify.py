"""The disruption-plan verifier: independent of the CP-SAT encoding, it re-derives every rule from the
snapshot — candidate rules, budgets, PDBs, the Balanced policy, spot-to-spot, where each evicted pod goes, the
cost figures — and checks the cluster after the plan with the provisioning verifier (every placement rule, final
state)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from model.disruption import DisruptionPlan
from model.plan import ExistingNodeAssignment, PlanCost, ProvisioningPlan, SolverReport
from model.snapshot import Snapshot
from solver.disruption.candidates import CONSOLIDATION_REASONS, analyse
from solver.disruption.moves import final_snapshot
from solver.disruption.yardstick import balanced_allows
from solver.verify import verify

TOLERANCE = 1e-4


def verify_disruption(snapshot: Snapshot, plan: DisruptionPlan, now: datetime, *, spot_to_spot: bool = False
                      ) -> list[str]:
    """Every violation, one line each (empty = valid)."""
    out: list[str] = []
    state = analyse(snapshot, now)
    removed = []
    for removal in plan.remove:
        node = state.state(removal.node)
        if node is None:
            out.append(f"remove {removal.node}: no such node")
            continue
        removed.append(node)
        if not node.candidate:
            out.append(f"remove {removal.node}: may not be disrupted ({node.blocked or 'nothing to gain'})")
        elif removal.reason != node.reason:
            out.append(f"remove {removal.node}: reason {removal.reason}, but the node is {node.reason}")
    counts = Counter(r.node for r in plan.remove)
    out += [f"node {name} removed {n} times" for name, n in counts.items() if n > 1]
    for excess in state.excesses(removed):
        limit = excess.limit
        if limit is None:
            out.append(f"PodDisruptionBudget {excess.name}: {excess.used} eviction(s), it allows {excess.allowed}")
        else:
            out.append(f"NodePool {excess.name}: {excess.used} removal(s) for {'/'.join(sorted(limit.reasons))} "
                       f"but its budget allows {excess.allowed}{' (' + limit.window + ')' if limit.window else ''}")
    spent: dict[str, float] = {}
    for c in plan.node_claims:
        spent[c.node_pool] = spent.get(c.node_pool, 0.0) + c.price
    if not balanced_allows(state, removed, spent):
        out.append("consolidationPolicy Balanced: a NodePool's share of cost saved is below half its share of "
                   "pods evicted")
    # Karpenter's rule is consolidation's (consolidation.go); drift and expiration replacements are provisioned
    # as any pending pod is (drift.go: the simulation's new NodeClaims, spot or not)
    if not spot_to_spot and removed and all(s.capacity_type == "spot" and s.reason in CONSOLIDATION_REASONS
                                            for s in removed):
        out += [f"nodeClaim {c.name}: spot replacement of spot nodes needs spot-to-spot"
                for c in plan.node_claims if c.capacity_type == "spot"]
    out += _moves(plan, removed, snapshot)
    out += _cost(plan, state.nodes, removed)
    moved = {s.name: s.pods for s in removed}
    claims = {c.name for c in plan.node_claims}
    onto: dict[str, list[str]] = {}
    for move in plan.moves:
        if move.to not in claims:
            onto.setdefault(move.to, []).append(move.pod)
    final = ProvisioningPlan(
        node_claims=plan.node_claims,
        existing_nodes=[ExistingNodeAssignment(name=n, pods=sorted(p)) for n, p in sorted(onto.items())],
        cost=PlanCost(total=sum(c.price for c in plan.node_claims), lower_bound=0.0),
        solver=SolverReport(status="FEASIBLE", wall_seconds=0.0))
    out += [f"after the plan: {line}" for line in verify(final_snapshot(snapshot, moved), final)]
    return out


def _moves(plan: DisruptionPlan, removed: list, snapshot: Snapshot) -> list[str]:  # type: ignore[type-arg]
    out = []
    expected = {p.key: s.name for s in removed for p in s.pods}
    seen = Counter(m.pod for m in plan.moves)
    gone = {s.name for s in removed}
    nodes = {n.name for n in snapshot.nodes}
    claims = {c.name: set(c.pods) for c in plan.node_claims}
    for key, node in sorted(expected.items()):
        if not seen[key]:
            out.append(f"pod {key} on removed node {node} has no destination")
    for move in plan.moves:
        if move.pod not in expected:
            out.append(f"move of {move.pod}: not a pod on a removed node")
        elif seen[move.pod] > 1:
            if move is next(m for m in plan.moves if m.pod == move.pod):  # once per pod
                out.append(f"pod {move.pod} moved {seen[move.pod]} times")
        elif move.source != expected[move.pod]:
            out.append(f"move of {move.pod}: from {move.source}, but it runs on {expected[move.pod]}")
        if move.to in gone:
            out.append(f"move of {move.pod}: destination {move.to} is being removed")
        elif move.to not in nodes and move.to not in claims:
            out.append(f"move of {move.pod}: destination {move.to} is neither a node nor a replacement")
        elif move.to in claims and move.pod not in claims[move.to]:
            out.append(f"move of {move.pod}: nodeClaim {move.to} does not list it")
    for name, pods in claims.items():
        for key in sorted(pods - {m.pod for m in plan.moves if m.to == name}):
            out.append(f"nodeClaim {name} lists {key}, which no move sends there")
    return out


def _cost(plan: DisruptionPlan, nodes: list, removed: list) -> list[str]:  # type: ignore[type-arg]
    out = []
    before = sum(s.price for s in nodes)
    after = before - sum(s.price for s in removed) + sum(c.price for c in plan.node_claims)
    cost = plan.cost
    if abs(cost.before - before) > TOLERANCE:
        out.append(f"cost.before {cost.before} differs from the nodes' prices {before:.6f}")
    if abs(cost.after - after) > TOLERANCE:
        out.append(f"cost.after {cost.after} differs from before − removed + replacements {after:.6f}")
    if abs(cost.savings - (cost.before - cost.after)) > TOLERANCE:
        out.append(f"cost.savings {cost.savings} is not before − after")
    if cost.lower_bound is not None and cost.lower_bound > cost.after + TOLERANCE:
        out.append(f"cost.lowerBound {cost.lower_bound} is above cost.after {cost.after}")
    prices: dict[str, float] = {}
    for s in removed:
        prices.setdefault(s.name, s.price)
    for r in plan.remove:
        price = prices.get(r.node)
        if price is not None and abs(price - r.price) > TOLERANCE:
            out.append(f"remove {r.node}: price {r.price}, the offering's is {price}")
    return out
