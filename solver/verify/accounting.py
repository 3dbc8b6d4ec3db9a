"""Every pending pod exactly once: on a new NodeClaim, on an existing node, or unschedulable with a reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from solver.verify.context import Context
from solver.verify.violation import Violation

RULE = "accounting"


def check(ctx: Context) -> Iterator[Violation]:
    plan = ctx.plan
    seen: Counter[str] = Counter()
    for claim in plan.node_claims:
        seen.update(claim.pods)
    for assigned in plan.existing_nodes:
        seen.update(assigned.pods)
    seen.update(u.pod for u in plan.unschedulable)
    for key in sorted(ctx.pending - seen.keys()):
        yield Violation(RULE, f"pending pod {key} is missing from the plan", pods=(key,))
    repeated = [key for key, n in seen.items() if n > 1] if sum(seen.values()) > len(seen) else []
    for key in sorted(set(repeated) | (seen.keys() - ctx.pending)):
        if key not in ctx.pending:
            yield Violation(RULE, f"plan places {key}, which is not a pending pod in the snapshot", pods=(key,))
        else:
            yield Violation(RULE, f"pod {key} appears {seen[key]} times in the plan", pods=(key,))
    for u in plan.unschedulable:
        if not u.reason.strip():
            yield Violation(RULE, f"unschedulable pod {u.pod} has no reason", pods=(u.pod,))
