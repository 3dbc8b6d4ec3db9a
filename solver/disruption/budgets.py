"""NodePool disruption budgets evaluated at one moment.

A budget limits how many of a pool's nodes may be disrupting at once: ``nodes`` is a count or a percentage
of the pool's nodes (rounded up, as Karpenter does); with ``schedule`` (cron, UTC) and ``duration`` it is
active only inside each window; ``reasons`` restricts it to Empty / Underutilized / Drifted. Every active
budget is a separate constraint over the removals whose reason it covers, minus the pool's nodes already
disrupting (deleting or NotReady). A budget that cannot be read fails closed: 0 disruptions for its pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np
from croniter import croniter

from model.durations import parse_duration
from model.errors import InputError
from model.nodepool import NodePool

if TYPE_CHECKING:  # candidates.py builds its budgets with this module
    from solver.disruption.candidates import ClusterState, NodeState

BUDGET_REASONS = frozenset({"Empty", "Underutilized", "Drifted"})


@dataclass(frozen=True)
class BudgetLimit:
    pool: str
    reasons: frozenset[str]
    allowed: int
    window: str = ""

    def covers(self, reason: str) -> bool:
        return reason in self.reasons


def _active(schedule: str, duration: float, now: datetime) -> bool:
    """Is ``now`` inside a window that opened at a cron tick no more than ``duration`` ago?"""
    last = croniter(schedule, now + timedelta(seconds=1)).get_prev(datetime)
    return bool(now < last + timedelta(seconds=duration))


def budget_limits(pool: NodePool, nodes: int, disrupting: int, now: datetime) -> list[BudgetLimit]:
    """The pool's budgets active at ``now`` (UTC). Raises InputError naming the budget's field when a
    schedule or duration is invalid; callers fail closed with ``frozen``."""
    out = []
    for i, budget in enumerate(pool.spec.disruption.budgets):
        where = f"spec.disruption.budgets[{i}]"
        window = ""
        if (budget.schedule is None) != (budget.duration is None):
            raise InputError("schedule and duration must be set together", obj=f"NodePool {pool.name}",
                             field=f"{where}.{'duration' if budget.duration is None else 'schedule'}")
        if budget.schedule is not None and budget.duration is not None:
            if not croniter.is_valid(budget.schedule):
                raise InputError(f"invalid cron schedule {budget.schedule!r}", obj=f"NodePool {pool.name}",
                                 field=f"{where}.schedule")
            try:
                seconds = parse_duration(budget.duration)
            except ValueError as err:
                raise InputError(str(err), obj=f"NodePool {pool.name}", field=f"{where}.duration") from None
            if seconds is None:
                raise InputError("duration cannot be Never", obj=f"NodePool {pool.name}", field=f"{where}.duration")
            if not _active(budget.schedule, seconds, now):
                continue
            window = f"{budget.schedule} for {budget.duration}"
        text = budget.nodes
        limit = -(-int(text[:-1]) * nodes // 100) if text.endswith("%") else int(text)
        reasons = frozenset(budget.reasons) if budget.reasons else BUDGET_REASONS
        out.append(BudgetLimit(pool=pool.name, reasons=reasons, allowed=max(limit - disrupting, 0), window=window))
    return out


def frozen(pool: str) -> BudgetLimit:
    """Fail closed: no disruption of any reason for ``pool``."""
    return BudgetLimit(pool=pool, reasons=BUDGET_REASONS, allowed=0, window="invalid budget")


class Allowances:
    """Budgets and PDB allowances as counters for a growing removal set: each node's use of every limit is
    fixed (one per covering budget, its selected pods per PDB, Expired nodes outside PDBs), so adding a node
    is checked in O(limits) instead of recounting the set. The same rule as ``ClusterState.excesses``."""

    def __init__(self, state: ClusterState) -> None:
        self.budgets = [(pool, limit) for pool, limits in state.budgets.items() for limit in limits]
        self.pdbs = list(state.pdbs)
        self.left = np.array([limit.allowed for _, limit in self.budgets] + [a for _, a in self.pdbs], dtype=np.int64)
        self._use: dict[str, np.ndarray] = {}

    def use(self, s: NodeState) -> np.ndarray:
        if s.name not in self._use:
            row = [int(s.pool is not None and s.pool.name == pool and s.reason is not None and limit.covers(s.reason))
                   for pool, limit in self.budgets]
            row += [0 if s.reason == "Expired" else sum(1 for p in s.pods if pdb.selects(p)) for pdb, _ in self.pdbs]
            self._use[s.name] = np.array(row, dtype=np.int64)
        return self._use[s.name]

    def allows(self, s: NodeState) -> bool:
        return bool(np.all(self.use(s) <= self.left))

    def take(self, s: NodeState) -> None:
        self.left = self.left - self.use(s)
