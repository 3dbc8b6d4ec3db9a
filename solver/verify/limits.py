"""NodePool ``spec.limits``: what the pool already holds (``pool_usage``) plus each planned NodeClaim's full
instance-type capacity and one ``nodes`` stays within every limit. A pool over its limits gives up its
planned claims last first, those that add to a resource still over, until it is within them."""

from __future__ import annotations

from collections.abc import Iterator

from model.nodepool import NODES, pool_usage
from model.quantity import format_quantity
from solver.verify.context import Context, NodeState
from solver.verify.violation import Violation

RULE = "NodePool limits"


def check(ctx: Context) -> Iterator[Violation]:
    by_pool: dict[str, list[NodeState]] = {}
    for state in ctx.claims:
        if state.usable:
            by_pool.setdefault(state.claim.node_pool if state.claim else "", []).append(state)
    for name, claims in by_pool.items():
        pool = claims[0].pool
        assert pool is not None
        limits = dict(pool.limits)
        if not limits:
            continue
        usage = dict(pool_usage(ctx.snapshot, pool))
        use = [_use(state) for state in claims]
        for u in use:
            for resource in limits:
                usage[resource] = usage.get(resource, 0) + u.get(resource, 0)
        over = [r for r, limit in limits.items() if usage.get(r, 0) > limit]
        if not over:
            continue
        excess = {r: usage[r] - limits[r] for r in over}
        dropped = []
        for state, u in reversed(list(zip(claims, use, strict=True))):
            if not excess:
                break
            if any(u.get(r, 0) > 0 for r in excess):
                dropped.append(state)
                excess = {r: e - u.get(r, 0) for r, e in excess.items() if e - u.get(r, 0) > 0}
        pods = tuple(k for state in dropped for k in ctx.pending_keys(state.placed))
        names = tuple(state.name for state in dropped)
        quantities = pool.limits.to_quantities()
        for resource in over:
            yield Violation(RULE, f"NodePool {name}: limit {resource}={quantities[resource]} exceeded "
                                  f"({format_quantity(resource, usage[resource])} with this plan)",
                            pods=pods, claims=names)


def _use(state: NodeState) -> dict[str, int]:
    """What one planned node counts against its pool's limits: its type's capacity and one ``nodes``."""
    assert state.instance_type is not None
    return {**state.instance_type.capacity, NODES: 1}
