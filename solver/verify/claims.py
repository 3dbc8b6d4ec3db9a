"""Planned NodeClaims: a NodePool that exists, an instance type in the catalog, an available offering in the
claim's zone and capacity type at its price, labels that agree with what the offering sets, and the NodePool's
requirements met. A claim failing any of these is dropped whole (``claims``) with its pods."""

from __future__ import annotations

from collections.abc import Iterator

from model.requirements import Requirements
from solver.verify.context import Context, NodeState
from solver.verify.violation import Violation

RULE = "NodeClaim"
PRICE_TOLERANCE = 1e-6


def check(ctx: Context) -> Iterator[Violation]:
    requirements: dict[str, Requirements] = {}
    for state in ctx.claims:
        if state.pool is not None and state.pool.name not in requirements:
            requirements[state.pool.name] = state.pool.requirements
        yield from _claim(ctx, state, requirements)


def _claim(ctx: Context, state: NodeState, requirements: dict[str, Requirements]) -> Iterator[Violation]:
    claim, pool, it, offering = state.claim, state.pool, state.instance_type, state.offering
    assert claim is not None
    where = state.where

    def defect(message: str) -> Violation:
        return Violation(RULE, f"{where}: {message}", pods=ctx.pending_keys(state.placed), claims=(claim.name,))

    if pool is None:
        yield defect(f"NodePool {claim.node_pool} does not exist")
        return
    if it is None:
        yield defect(f"instance type {claim.instance_type} is not in the catalog")
        return
    if offering is None:
        yield defect(f"no available offering {claim.zone}/{claim.capacity_type} of {it.name}")
        return
    if abs(offering.price - claim.price) > PRICE_TOLERANCE:
        yield defect(f"price {claim.price} differs from the offering's {offering.price}")
    labels = state.labels
    for key, value in claim.labels.items():
        if labels[key] != value:
            yield defect(f"label {key}={value} contradicts {labels[key]} from the offering")
    failing = requirements[pool.name].failing(labels)
    if failing:
        yield defect(f"NodePool {pool.name} requirement(s) not met: " + ", ".join(r.describe() for r in failing))
