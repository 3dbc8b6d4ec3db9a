"""Cost figures: ``cost.total`` is the sum of the planned claims' offering prices, ``cost.lowerBound`` is not
above it, and every figure (the claims' prices, total, lowerBound, greedy, lpBound, gap) is finite. Nothing
placed causes these but a claim's own price: such a claim goes."""

from __future__ import annotations

import math
from collections.abc import Iterator

from solver.verify.context import Context
from solver.verify.violation import Violation

RULE = "cost"
TOLERANCE = 1e-4


def check(ctx: Context) -> Iterator[Violation]:
    cost = ctx.plan.cost
    for state in ctx.claims:
        claim = state.claim
        assert claim is not None
        if not math.isfinite(claim.price):
            yield Violation(RULE, f"{state.where}: price {claim.price} is not a finite $/h figure",
                            pods=ctx.pending_keys(state.placed), claims=(claim.name,))
    total = math.fsum(s.offering.price for s in ctx.claims if s.usable and s.offering is not None)
    for name, value in (("cost.total", cost.total), ("cost.lowerBound", cost.lower_bound),
                        ("cost.greedy", cost.greedy), ("cost.lpBound", cost.lp_bound), ("cost.gap", cost.gap)):
        if value is not None and not math.isfinite(value):
            yield Violation(RULE, f"{name} {value} is not a finite figure")
    if abs(total - cost.total) > TOLERANCE:
        yield Violation(RULE, f"cost.total {cost.total} differs from the sum of offering prices {total:.6f}")
    if cost.lower_bound > cost.total + TOLERANCE:
        yield Violation(RULE, f"cost.lowerBound {cost.lower_bound} is above cost.total {cost.total}")
