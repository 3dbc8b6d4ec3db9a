"""Human output for plans: a rich table grouped by NodePool / instance type / zone / capacity type."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.table import Table

from model.disruption import DisruptionPlan
from model.plan import ProvisioningPlan
from model.quantity import quantity_int
from reports.text import terminal


def _ratio(requests: dict[str, str], allocatable: dict[str, str], resource: str) -> float:
    alloc = quantity_int(resource, allocatable.get(resource, "0"))
    return quantity_int(resource, requests.get(resource, "0")) / alloc if alloc else 0.0


def render_plan(plan: ProvisioningPlan, console: Console, *, compare_greedy: bool = False, wide: bool = False) -> None:
    """The plan's new nodes by group, then placements, unschedulable pods and cost; ``wide`` (``-o wide``)
    adds every NodeClaim with its pods."""
    groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for i, claim in enumerate(plan.node_claims):
        groups[(claim.node_pool, claim.instance_type, claim.zone, claim.capacity_type)].append(i)
    table = Table(title="New nodes", show_lines=False)
    for column in ("NodePool", "instance type", "zone", "capacity", "nodes", "pods", "cpu util", "mem util",
                   "$/h each", "$/h total"):
        table.add_column(column, justify="right" if column[0] in "npcm$" and column != "NodePool" else "left",
                         overflow="fold")  # every column folds: a narrow terminal wraps cells, never cuts them
    for (pool, itype, zone, ctype), members in sorted(groups.items()):
        claims = [plan.node_claims[i] for i in members]
        cpu = sum(_ratio(c.requests, c.allocatable, "cpu") for c in claims) / len(claims)
        mem = sum(_ratio(c.requests, c.allocatable, "memory") for c in claims) / len(claims)
        table.add_row(terminal(pool), terminal(itype), terminal(zone), terminal(ctype),
                      str(len(claims)), str(sum(len(c.pods) for c in claims)),
                      f"{cpu:.0%}", f"{mem:.0%}", f"{claims[0].price:.4f}", f"{sum(c.price for c in claims):.4f}")
    console.print(table)
    if wide:
        _claims_table(plan, console)
    if plan.existing_nodes:
        placed = sum(len(n.pods) for n in plan.existing_nodes)
        console.print(f"Existing nodes: {placed} pending pod(s) placed on {len(plan.existing_nodes)} node(s)")
    if plan.unschedulable:
        console.print(f"[bold red]Unschedulable: {len(plan.unschedulable)} pod(s)[/]")
        for u in plan.unschedulable:
            console.print(f"  {terminal(u.pod)}: {terminal(u.reason)}", highlight=False)
    cost = plan.cost
    gap = f"{cost.gap:.2%}" if cost.gap is not None else "n/a"
    console.print(f"Cost: [bold]{cost.total:.4f} $/h[/] ({cost.total * 730:.2f} $/month)   "
                  f"lower bound {cost.lower_bound:.4f}   gap {gap}   status {plan.solver.status}   "
                  f"solved in {plan.solver.wall_seconds:.2f} s")
    if compare_greedy and cost.greedy is not None:
        saving = 1 - cost.total / cost.greedy if cost.greedy else 0.0
        console.print(f"Greedy (Karpenter first-fit-decreasing): {cost.greedy:.4f} $/h — this plan saves "
                      f"{saving:.1%} ({(cost.greedy - cost.total) * 730:.2f} $/month)")


def _claims_table(plan: ProvisioningPlan | DisruptionPlan, console: Console) -> None:
    """One row per NodeClaim with the pods planned onto it (``-o wide``)."""
    table = Table(title="NodeClaims")
    for column in ("nodeClaim", "NodePool", "instance type", "zone", "capacity", "$/h", "pods"):
        table.add_column(column, justify="right" if column == "$/h" else "left", overflow="fold")
    for c in plan.node_claims:
        table.add_row(terminal(c.name), terminal(c.node_pool), terminal(c.instance_type), terminal(c.zone),
                      terminal(c.capacity_type), f"{c.price:.4f}", terminal(", ".join(c.pods)))
    console.print(table)


def _moves_table(plan: DisruptionPlan, console: Console) -> None:
    table = Table(title="Moves")
    for column in ("pod", "from", "to"):
        table.add_column(column, overflow="fold")
    for move in plan.moves:
        table.add_row(terminal(move.pod), terminal(move.source), terminal(move.to))
    console.print(table)


#: the note ``solver.disruption.plan`` adds when CP-SAT's proof covers only what the model considered
CONSIDERED_PROOF = "CP-SAT proved this plan optimal over the candidates"


def _after_bound(plan: DisruptionPlan) -> str:
    """The certified bound on the cost after the move; a bound of 0 under a plan that keeps paying is no
    information (only the budgets bounded it), so it is said as such rather than as a reachable 0 $/h."""
    bound = plan.cost.lower_bound
    if bound is None:
        return ""
    if bound <= 1e-9 < plan.cost.after:
        return "   no lower bound certified beyond 0 $/h"
    return f"   no plan costs less than {bound:.4f} $/h"


def _status(plan: DisruptionPlan) -> str:
    """FEASIBLE with what was proven, when CP-SAT proved the plan optimal over the model's own choices."""
    status = plan.solver.status
    if status == "FEASIBLE" and any(note.startswith(CONSIDERED_PROOF) for note in plan.solver.notes):
        return "FEASIBLE (optimal over the candidates and replacements considered)"
    return status


def render_disruption(plan: DisruptionPlan, console: Console, explain: list[tuple[str, str]] | None = None,
                      *, wide: bool = False) -> None:
    """Removed nodes, replacements, cost before/after, bound, the yardstick's savings and budget use;
    ``wide`` (``-o wide``) adds every replacement's pods and every move."""
    table = Table(title="Remove")
    for column in ("node", "NodePool", "reason", "evictions", "$/h"):
        table.add_column(column, justify="right" if column in ("evictions", "$/h") else "left", overflow="fold")
    for r in plan.remove:
        table.add_row(terminal(r.node), terminal(r.node_pool), terminal(r.reason), str(r.evictions), f"{r.price:.4f}")
    console.print(table)
    if plan.node_claims:
        replacements = Table(title="Replacements")
        for column in ("nodeClaim", "instance type", "zone", "capacity", "pods", "$/h"):
            replacements.add_column(column, justify="right" if column in ("pods", "$/h") else "left", overflow="fold")
        for c in plan.node_claims:
            replacements.add_row(terminal(c.name), terminal(c.instance_type), terminal(c.zone),
                                 terminal(c.capacity_type), str(len(c.pods)), f"{c.price:.4f}")
        console.print(replacements)
    if wide and plan.node_claims:
        _claims_table(plan, console)
    if wide and plan.moves:
        _moves_table(plan, console)
    cost = plan.cost
    console.print(f"Cost: {cost.before:.4f} → [bold]{cost.after:.4f} $/h[/] (saves {cost.savings:.4f} $/h, "
                  f"{cost.savings * 730:.2f} $/month){_after_bound(plan)}   {plan.disruption.evictions} "
                  f"eviction(s), eviction cost {plan.disruption.cost:.2f}   status {_status(plan)} in "
                  f"{plan.solver.wall_seconds:.2f} s")
    if cost.yardstick_savings is not None:
        console.print(f"Karpenter-style consolidation (one pass) would save {cost.yardstick_savings:.4f} $/h")
    for b in plan.budgets:
        window = f" ({b.window})" if b.window else ""
        console.print(terminal(f"Budget {b.node_pool} [{', '.join(b.reasons)}]{window}: {b.used} of {b.allowed} used"))
    for note in plan.solver.notes:
        console.print(f"note: {terminal(note)}", highlight=False)
    for name, why in explain or []:
        console.print(f"  {terminal(name)}: {terminal(why)}", highlight=False)
