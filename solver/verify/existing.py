"""Existing nodes the plan puts pods on: known to the snapshot (a Node or an in-flight NodeClaim, as pods will
find it: ``model.inflight``), and neither cordoned, being deleted nor not Ready. Its pods come off."""

from __future__ import annotations

from collections.abc import Iterator

from solver.verify.context import Context
from solver.verify.violation import Violation

RULE = "existing node"


def check(ctx: Context) -> Iterator[Violation]:
    for assignment in ctx.plan.existing_nodes:
        where = f"existing node {assignment.name}"
        pods = tuple(k for k in assignment.pods if k in ctx.pending)
        state = ctx.existing.get(assignment.name)
        node = state.node if state is not None else None
        if node is None:
            yield Violation(RULE, f"{where}: not in the snapshot", pods=pods)
        elif node.unschedulable or node.deleting or not node.ready:
            yield Violation(RULE, f"{where}: is cordoned, being deleted or not Ready", pods=pods)
