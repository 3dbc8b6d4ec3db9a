"""Resources: the pods the plan puts on a node fit in its allocatable, less what is already there — the
pods bound to it and the daemon pods that will run on it (DaemonSet overhead).

Sums are plain integer dicts over each distinct request vector (the pods of one workload share theirs).
When a node is over, the pods to take off are found last-placed first: the last pod that alone removes the
whole excess, else the last that reduces it, until the rest fits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from model.pod import Pod
from model.quantity import format_quantity
from solver.verify.context import Context, NodeState
from solver.verify.violation import Violation

RULE = "resources"


def check(ctx: Context) -> Iterator[Violation]:
    for state in (*ctx.claims, *ctx.existing.values()):
        if state.placed and state.usable:
            yield from _node(ctx, state)


def total(pods: Iterable[Pod]) -> dict[str, int]:
    """The summed requests of ``pods``."""
    out: dict[str, int] = {}
    for requests, n in Counter(p.requests for p in pods).items():
        for name, amount in requests.items():
            out[name] = out.get(name, 0) + amount * n
    return out


def _node(ctx: Context, state: NodeState) -> Iterator[Violation]:
    free = dict(state.allocatable)
    for name, amount in total(state.resident).items():
        free[name] = free.get(name, 0) - amount
    requested = total(state.placed)
    over = [name for name, amount in sorted(requested.items()) if amount > 0 and amount > free.get(name, 0)]
    if not over:
        return
    # what must come off per resource: down to the free amount, or to nothing when none is free
    need = {name: requested[name] - max(free.get(name, 0), 0) for name in over}
    pods = ctx.pending_keys(_to_remove(state.placed, need))
    for name in over:
        left = free.get(name, 0)
        yield Violation(RULE, f"{state.where}: pods request {name}={format_quantity(name, requested[name])} but "
                              f"only {format_quantity(name, left) if left else '0'} is free", pods=pods)


def _to_remove(placed: list[Pod], need: Mapping[str, int]) -> list[Pod]:
    """Few pods, last-placed first, whose requests cover ``need`` (every amount > 0)."""
    need = dict(need)
    candidates = list(reversed(placed))
    out: list[Pod] = []
    while need and candidates:
        pick = next((i for i, p in enumerate(candidates) if all(p.requests[r] >= n for r, n in need.items())), None)
        if pick is None:
            pick = next((i for i, p in enumerate(candidates) if any(p.requests[r] > 0 for r in need)), None)
        if pick is None:
            break
        pod = candidates.pop(pick)
        out.append(pod)
        for r in list(need):
            need[r] -= pod.requests[r]
            if need[r] <= 0:
                del need[r]
    return out
