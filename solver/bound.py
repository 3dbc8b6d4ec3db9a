"""A lower bound that needs no column generation: a dual-feasible price per pod from resource shares.

For weights w ≥ 0 summing to 1 over the resource axes (per-node counters included), price each class at
π_k = min over the bins that admit and hold it of cost_b · Σ_r w_r · size_kr / capacity_br. Any pattern on
bin b then costs at least Σ_k a_k π_k (its w-weighted share of b's capacity is at most 1), so
Σ_k demand_k · π_k bounds every plan that schedules that demand. It is the LP dual of the pattern model
restricted to such prices: weaker than a converged column generation, but it takes milliseconds per w and
holds at any scale (20,000 pods, 1,200 bins), where column generation cannot converge in the time limit.
A few w (each axis alone, then mixes of the best axes) are tried and the best bound kept.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from solver.bins import Bin
from solver.patterns import copies_matrix


def share_bound(bins: list[Bin], sizes: np.ndarray, demand: np.ndarray, deadline: float = float("inf")) -> float:
    """The best resource-share bound over a few weightings (micro-units; 0 when nothing is priced)."""
    ks = np.flatnonzero(demand > 0)
    if not len(ks) or not bins:
        return 0.0
    # bins of one capacity and cost (an instance type in each of its zones) price every class alike: one column
    # each, admitting what any of them admits (the minimum over them is the same)
    groups: dict[tuple[float, tuple[int, ...]], np.ndarray] = {}
    for b in bins:
        key = (float(b.cost), tuple(b.capacity.tolist()))
        admitted = b.compatible[ks]
        groups[key] = groups[key] | admitted if key in groups else admitted.copy()
    capacity = np.array([cap for _, cap in groups], dtype=float)
    costs = np.array([cost for cost, _ in groups])
    holds = (copies_matrix(capacity.astype(np.int64), sizes[ks]) > 0) & np.array(list(groups.values())).T
    # share of bin b's capacity one pod of class k takes on axis r, priced at b's cost (inf where b cannot
    # hold k): (R, K, B)
    with np.errstate(divide="ignore", invalid="ignore"):
        priced = [np.where(holds, costs[None, :] * np.nan_to_num(sizes[ks, r][:, None] / capacity[None, :, r],
                                                                   nan=0.0, posinf=np.inf), np.inf)
                  for r in range(sizes.shape[1])]
    weights = demand[ks].astype(float)
    none_held = ~holds.any(axis=1)

    def bound(w: np.ndarray) -> float:
        prices = sum((w[r] * priced[r] for r in range(len(priced)) if w[r] > 0), np.zeros_like(priced[0]))
        per_class = np.min(prices, axis=1)
        per_class[none_held | ~np.isfinite(per_class)] = 0.0
        return float(weights @ per_class)

    axes = sizes.shape[1]
    best, best_w = 0.0, np.zeros(axes)
    singles = []
    for r in range(axes):
        w = np.zeros(axes)
        w[r] = 1.0
        value = bound(w)
        singles.append((value, r))
        if value > best:
            best, best_w = value, w
    top = [r for _, r in sorted(singles, reverse=True)[:4]]
    for r1, r2 in itertools.combinations(top, 2):
        for t in (0.2, 0.4, 0.5, 0.6, 0.8):
            if time.monotonic() > deadline:
                return best
            w = np.zeros(axes)
            w[r1], w[r2] = t, 1.0 - t
            value = bound(w)
            if value > best:
                best, best_w = value, w
    for r in range(axes):  # nudge the best mix towards each axis
        if time.monotonic() > deadline:
            break
        for t in (0.1, 0.25):
            w = best_w * (1 - t)
            w[r] += t
            value = bound(w)
            if value > best:
                best, best_w = value, w
    # float rounding must never lift the bound above a plan that meets it exactly
    return best * (1 - 1e-9)
