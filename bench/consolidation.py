"""Consolidation benchmark rows: fragmented clusters (100 / 1,000 / 5,000 nodes), Karpenter's perf scenario
(1,000 pods scaled down to 700) and the 1→2 split cluster, each written to YAML, loaded, consolidated,
verified. Savings are compared with the Karpenter-style yardstick (one disruption pass) and with the savings
bound (before − lower bound: the most any plan can save within the budgets). The NodePool budget is
Karpenter's default, 10 %; the smallest cluster also runs with no budget limit."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bench.fragmented import fragmented_cluster, scaled_down, split_cluster
from bench.workloads import as_list
from model.snapshot import load_snapshot
from providers.kwok import kwok_catalog
from solver.disruption.consolidate import ConsolidateOptions
from solver.disruption.plan import consolidate
from solver.disruption.verify import verify_disruption

COLUMNS = ("scenario", "nodes", "pods", "budget", "wall s", "status", "removed", "new", "evictions",
           "savings $/h", "yardstick $/h", "savings/yardstick", "savings bound $/h", "verifier")
NOW = datetime(2026, 11, 29, tzinfo=UTC)


def scenarios(sizes: list[int], budget: str) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(name, budget, objects): fragmented clusters at ``budget``, the smallest also with no budget limit
    (where N→M moves matter most), Karpenter's perf scenario and the split cluster."""
    out = [(f"fragmented-{n}", budget, fragmented_cluster(n, seed=7, keep=0.5, budget=budget)) for n in sizes]
    if sizes:
        out.append((f"fragmented-{sizes[0]}", "100%", fragmented_cluster(sizes[0], seed=7, keep=0.5, budget="100%")))
    out.append(("perf 1000→700 pods", budget, scaled_down(1000, seed=7, keep=0.7, budget=budget)))
    out.append(("1→2 split", "100%", split_cluster()))
    return out


def run_row(name: str, objects: list[dict[str, Any]], budget: str, time_limit: float, workdir: Path) -> list[str]:
    path = workdir / f"consolidate-{name.replace(' ', '_').replace('→', '-')}-{budget.rstrip('%')}.yaml"
    path.write_text(yaml.safe_dump(as_list(objects), sort_keys=False))
    started = time.monotonic()
    snapshot = load_snapshot(path).with_catalog(kwok_catalog())
    result = consolidate(snapshot, ConsolidateOptions(time_limit=time_limit, now=NOW, started_at=started))
    wall = time.monotonic() - started
    plan = result.plan
    violations = verify_disruption(snapshot, plan, NOW)
    yard = plan.cost.yardstick_savings or 0.0
    reachable = plan.cost.before - plan.cost.lower_bound if plan.cost.lower_bound is not None else None
    ratio = f"{plan.cost.savings / yard:.2f}" if yard > 1e-9 else ("∞" if plan.cost.savings > 1e-9 else "—")
    return [name, str(len(snapshot.nodes)), str(sum(1 for p in snapshot.pods if p.node_name)),
            budget, f"{wall:.1f}", plan.solver.status, str(len(plan.remove)),
            str(len(plan.node_claims)), str(plan.disruption.evictions), f"{plan.cost.savings:.3f}", f"{yard:.3f}",
            ratio, f"{reachable:.3f}" if reachable is not None else "n/a",
            "ok" if not violations else f"{len(violations)} violations"]
