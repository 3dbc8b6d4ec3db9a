"""What a check reports: one violation, its rule family, and what the plan must give up to be rid of it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from solver.verify.context import Context


@dataclass(frozen=True)
class Violation:
    """One broken rule in a plan.

    ``rule`` names the family (``"topology spread"``, ``"resources"``, ...) and ``message`` says what is wrong
    in one line. ``pods`` are the pods (``ns/name``) to take off their planned nodes (and report pending) so
    that this violation goes away — as few as the check can tell, the last-placed first; ``claims`` are
    planned NodeClaims to drop entirely (a bad offering, a NodePool over its limits), their pods with them
    (those pods are in ``pods`` too). A key that is not a pending pod of the snapshot (``accounting``) must
    simply leave the plan; a pending pod the plan misses is in ``pods`` so that it gets reported pending.
    Both empty: nothing placed causes it (the cost figures).
    """

    rule: str
    message: str
    pods: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()


#: A check: one rule family, reading the final state the plan leads to.
Check = Callable[["Context"], Iterable[Violation]]
