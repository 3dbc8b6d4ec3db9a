"""Per-node prices: a lower bound that knows per-node counters.

Give every column b of the relaxation (a node kind, ``relaxation.Relaxation``) prices λ_b ≥ 0 per axis —
resources and per-node counters — with λ_b·capacity_b ≤ cost_b for a new node, and price each unit of class k
at π_k = min over the columns that hold it of λ_b·size_k. Then every plan of the relaxation costs at least
Σ_k demand_k·π_k − Σ_existing count_e·λ_e·capacity_e. Proof: a new node of column b with load L ≤ capacity_b
costs cost_b ≥ λ_b·capacity_b ≥ λ_b·L = Σ_k n_k·λ_b·size_k ≥ Σ_k n_k·π_k (n_k units of class k on it); an
existing node costs 0 ≥ Σ_k n_k·π_k − λ_e·capacity_e. Summed over the nodes, every unit of demand is on one.

The resource-share bound (``solver.bound``) is the case λ_b = cost_b·w / capacity_b with one weighting w for
every column. With a price set per column the bound can charge a counter differently on small and large nodes:
on Karpenter's catalog (price ∝ size, 100m cpu reserved per node) a node holding one hostname-anti-affine pod
is worth ρ·(cpu + 100m) to that pod, whatever the node's size, so the reserved share of every node the counter
forces is counted, which no single weighting can do. The best prices are the duals of the LP "cover the demand
with fractional nodes whose loads fit" (fractional pods on fractional nodes, counters included): it is solved
over a sample of the columns — per admission family, a ladder of prices ×1.25 apart, and each class's cheapest
column — and every other column takes the prices of its nearest sampled neighbour, scaled down to its own cost
where they exceed it. Whatever the LP returns, the bound is computed from the prices as above, so neither the
sample nor the LP's tolerances can make it invalid.
"""

from __future__ import annotations

import math
import time

import numpy as np
from ortools.linear_solver import pywraplp

from model.instancetype import MICRO
from model.snapshot import Snapshot
from solver.bins import Bin
from solver.bound import share_bound
from solver.bounds.relaxation import Relaxation, from_problem, recompiled
from solver.colgen import solve_glop
from solver.problem import Problem

#: price ratio between neighbouring sampled columns of one admission family
LADDER = 1.25
#: up to this many new columns the LP sees them all (no prices carried over)
SAMPLE_ABOVE = 160


def constrained_bound(problem: Problem, demand: np.ndarray, snapshot: Snapshot, scheduled: set[str],
                      stricter: list[str] | None = None, deadline: float = math.inf) -> float:
    """A lower bound (micro-units) under Kubernetes' own rules for the plans that schedule ``demand`` units per
    class of the compiled ``problem`` (the pods ``scheduled``): the relaxation of the compiled problem where it
    can be undone in place, else recompiled, bounded by the better of per-node and resource-share prices."""
    return relaxation_bound(from_problem(problem, demand) or recompiled(snapshot, scheduled, stricter), deadline)


def relaxation_bound(relaxation: Relaxation, deadline: float = math.inf) -> float:
    """The better of the per-node-price and the resource-share bound of the relaxation (micro-units)."""
    return max(share_bound(_bins(relaxation), relaxation.sizes, relaxation.demand, deadline),
               node_share_bound(relaxation, deadline))


def node_share_bound(relaxation: Relaxation, deadline: float = math.inf) -> float:
    """The per-node-price bound of the module docstring (micro-units; 0 when nothing is priced)."""
    demand = relaxation.demand
    holds, existing_holds = relaxation.holds, relaxation.existing_holds
    if not len(demand) or not (holds.any() or existing_holds.any()):
        return 0.0
    sample = _sample(relaxation, holds)
    prices = _lp_prices(relaxation, holds, existing_holds, sample, deadline)
    if prices is None:
        return 0.0
    sampled, existing = prices
    new = _spread_prices(relaxation, holds, sample, sampled)
    sizes = relaxation.sizes.astype(np.float64)
    per_class = np.full(len(demand), np.inf)
    if len(new):
        per_class = np.minimum(per_class, np.where(holds, new @ sizes.T, np.inf).min(axis=0))
    if len(existing):
        per_class = np.minimum(per_class, np.where(existing_holds, existing @ sizes.T, np.inf).min(axis=0))
    per_class[~np.isfinite(per_class)] = 0.0  # held nowhere: nothing of it is scheduled
    paid_back = float(relaxation.existing_count @ (existing * relaxation.existing_capacity).sum(axis=1)) \
        if len(existing) else 0.0
    value = float(demand @ per_class) - paid_back
    # float rounding must never lift the bound above a plan that meets it exactly
    return max(value * (1 - 1e-9), 0.0)


def _bins(relaxation: Relaxation) -> list[Bin]:
    """The relaxation's columns as bins, for ``share_bound`` (which reads cost, capacity and admission)."""
    k = len(relaxation.demand)
    out = [Bin(index=i, existing=True, members=[i], capacity=relaxation.existing_capacity[i], cost=0,
               count=int(relaxation.existing_count[i]), pool_index=None, limit_use={},
               compatible=relaxation.existing_admits[i], rank=0, preference=np.zeros(k, dtype=np.int64))
           for i in range(len(relaxation.existing_count))]
    out += [Bin(index=len(out) + i, existing=False, members=[i], capacity=relaxation.capacity[i],
                cost=int(relaxation.cost[i]), count=None, pool_index=None, limit_use={},
                compatible=relaxation.admits[i], rank=0, preference=np.zeros(k, dtype=np.int64))
            for i in range(len(relaxation.cost))]
    return out


def _sample(relaxation: Relaxation, holds: np.ndarray) -> np.ndarray:
    """New columns the LP sees: all of them up to ``SAMPLE_ABOVE``, else per admission family a price ladder
    (cheapest, each ≥ ``LADDER`` × the last, dearest) and every class's cheapest column."""
    if len(relaxation.cost) <= SAMPLE_ABOVE:
        return np.arange(len(relaxation.cost), dtype=np.int64)
    families: dict[bytes, list[int]] = {}
    for b in range(len(relaxation.cost)):
        families.setdefault(relaxation.admits[b].tobytes(), []).append(b)
    chosen: set[int] = set()
    for members in families.values():
        members.sort(key=lambda b: (relaxation.cost[b], b))
        last = -1.0
        for n, b in enumerate(members):
            if n == 0 or n == len(members) - 1 or relaxation.cost[b] >= last * LADDER:
                chosen.add(b)
                last = float(relaxation.cost[b])
    for k in range(len(relaxation.demand)):
        held = np.flatnonzero(holds[:, k])
        if len(held):
            chosen.add(int(held[np.argmin(relaxation.cost[held])]))
    return np.array(sorted(chosen), dtype=np.int64)


def _lp_prices(relaxation: Relaxation, holds: np.ndarray, existing_holds: np.ndarray, sample: np.ndarray,
               deadline: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Prices per axis (micro-units per unit) of the sampled new columns and of the existing ones: the duals of
    their capacity rows in the fractional-node LP, or None when the LP is not solved in time."""
    sizes, demand = relaxation.sizes, relaxation.demand
    # axes scaled to at most 1 on every column: memory in bytes beside counters of 1 is no LP for GLOP
    scale = np.maximum(np.concatenate([relaxation.capacity[sample], relaxation.existing_capacity]).max(
        axis=0, initial=1), 1).astype(np.float64)
    lp = pywraplp.Solver.CreateSolver("GLOP")
    inf = lp.infinity()
    objective = lp.Objective()
    objective.SetMinimization()
    cover = [lp.Constraint(float(d), inf) for d in demand]
    nodes = [(cap, float(relaxation.cost[b]) / MICRO, holds[b], inf) for b, cap in
             zip(sample.tolist(), relaxation.capacity[sample], strict=True)]
    nodes += [(cap, 0.0, existing_holds[e], float(relaxation.existing_count[e]))
              for e, cap in enumerate(relaxation.existing_capacity)]
    rows: list[dict[int, pywraplp.Constraint]] = []
    for capacity, cost, held, count in nodes:
        y = lp.NumVar(0.0, count, "")
        objective.SetCoefficient(y, cost)
        ks = np.flatnonzero(held).tolist()
        used = [r for r in range(sizes.shape[1]) if any(sizes[k, r] for k in ks)]
        row = {r: lp.Constraint(-inf, 0.0) for r in used}
        for r in used:
            row[r].SetCoefficient(y, -float(capacity[r]) / scale[r])
        for k in ks:
            x = lp.NumVar(0.0, inf, "")
            cover[k].SetCoefficient(x, 1.0)
            for r in used:
                if sizes[k, r]:
                    row[r].SetCoefficient(x, float(sizes[k, r]) / scale[r])
        rows.append(row)
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    if math.isfinite(left):
        lp.SetTimeLimit(max(int(left * 1000), 1))
    if solve_glop(lp) != pywraplp.Solver.OPTIMAL:
        return None
    prices = np.zeros((len(nodes), sizes.shape[1]))
    for i, row in enumerate(rows):
        for r, constraint in row.items():
            prices[i, r] = max(-constraint.dual_value(), 0.0) * MICRO / scale[r]
    return prices[:len(sample)], prices[len(sample):]


def _spread_prices(relaxation: Relaxation, holds: np.ndarray, sample: np.ndarray, sampled: np.ndarray
                   ) -> np.ndarray:
    """Prices of every new column: its own when sampled, else its nearest sampled neighbour's (by log price, in
    its admission family), scaled down so that its capacity costs no more than the column."""
    cost, capacity = relaxation.cost, relaxation.capacity.astype(np.float64)
    prices = np.zeros_like(capacity)
    at = {int(b): i for i, b in enumerate(sample.tolist())}
    families: dict[bytes, list[int]] = {}
    for b in sample.tolist():
        families.setdefault(relaxation.admits[b].tobytes(), []).append(b)
    for b in range(len(cost)):
        if b in at:
            source = at[b]
        else:
            peers = families.get(relaxation.admits[b].tobytes()) or sample.tolist()
            near = min(peers, key=lambda s: (abs(math.log(max(cost[s], 1.0) / max(cost[b], 1.0))), s))
            source = at[near]
        price = sampled[source]
        worth = float(price @ capacity[b])
        prices[b] = price * min(1.0, cost[b] / worth) if worth > 0 else price
    return prices
