"""NodePool ``minValues`` (Strict): the instance types a planned NodeClaim could list for its pods
(``model.minvalues``) span at least ``minValues`` values of each such key. A claim short of them gives up its
last-placed pods until the rest leaves enough types (fewer pods accept and fit more types); when even an
empty claim would be short, the claim goes."""

from __future__ import annotations

from collections.abc import Iterator

from model.minvalues import shortfalls, strict_keys
from solver.verify.context import Context, NodeState
from solver.verify.violation import Violation

RULE = "NodePool minValues"


def check(ctx: Context) -> Iterator[Violation]:
    for state in ctx.claims:
        if state.usable and state.pool is not None and strict_keys(state.pool):
            short = _shortfalls(ctx, state, len(state.placed))
            if not short:
                continue
            claim = state.claim
            assert claim is not None
            keep = _most_kept(ctx, state)
            pods, claims = (state.placed[keep:], ()) if keep is not None else (state.placed, (claim.name,))
            yield Violation(RULE, f"{state.where}: NodePool {state.pool.name} minValues not met by the instance "
                                  f"types that could hold its pods ({'; '.join(short)})",
                            pods=ctx.pending_keys(list(reversed(pods))), claims=claims)


def _shortfalls(ctx: Context, state: NodeState, keep: int) -> list[str]:
    assert state.pool is not None and state.claim is not None
    claim = state.claim
    return shortfalls(ctx.snapshot, state.pool, claim.zone, claim.capacity_type, state.placed[:keep], claim.labels)


def _most_kept(ctx: Context, state: NodeState) -> int | None:
    """The most of the claim's first pods that leave no shortfall (None: not even none of them)."""
    if _shortfalls(ctx, state, 0):
        return None
    low, high = 0, len(state.placed)  # low passes, high fails
    while high - low > 1:
        mid = (low + high) // 2
        if _shortfalls(ctx, state, mid):
            high = mid
        else:
            low = mid
    return low
