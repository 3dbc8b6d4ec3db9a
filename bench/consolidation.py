"""Consolidation benchmark rows: fragmented clusters (100 / 1,000 / 5,000 / 10,000 nodes), Karpenter's perf
scenario (1,000 pods scaled down to 700) and the 1→2 split cluster, each written as a JSON snapshot (what
``kubectl get -o json`` gives), consolidated by ``nodeplan consolidate`` as its own process (wall, CPU time and
peak memory of the whole process: start-up, loading and writing the plan included; wall also counts the
~0.05 s start of the small process that measures it) and verified here.
Savings are compared with the Karpenter-style yardstick (one disruption pass) and with the savings bound
(before − lower bound: the most any plan can save within the budgets). The NodePool budget is Karpenter's
default, 10 %; the smallest cluster also runs with no budget limit."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.fragmented import fragmented_cluster, scaled_down, split_cluster
from bench.workloads import as_list
from model.disruption import DisruptionPlan
from model.snapshot import load_snapshot
from providers.kwok import kwok_catalog
from solver.disruption.verify import verify_disruption

COLUMNS = ("scenario", "nodes", "pods", "budget", "wall s", "cpu s", "peak MiB", "status", "removed", "new",
           "evictions", "savings $/h", "yardstick $/h", "savings/yardstick", "savings bound $/h", "bound share",
           "verifier")
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


#: runs ``argv[2:]`` and writes its CPU seconds (user + system) and peak resident set (KiB) to ``argv[1]``. A
#: fresh, small process: a child forked from this bench process would count this process's size (the
#: generated clusters) in its own peak, which survives exec
_MEASURE = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[2:]); "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "open(sys.argv[1], 'w').write(f'{u.ru_utime + u.ru_stime} {u.ru_maxrss}'); sys.exit(done.returncode)")


def run_row(name: str, objects: list[dict[str, Any]], budget: str, time_limit: float, workdir: Path) -> list[str]:
    stem = f"consolidate-{name.replace(' ', '_').replace('→', '-')}-{budget.rstrip('%')}"
    path, plan_path, usage = workdir / f"{stem}.json", workdir / f"{stem}-plan.json", workdir / f"{stem}.rusage"
    path.write_text(json.dumps(as_list(objects)))
    command = [sys.executable, "-c", _MEASURE, str(usage), str(Path(sys.executable).with_name("nodeplan")),
               "consolidate", str(path), "--time-limit", f"{time_limit:g}", "--now",
               NOW.strftime("%Y-%m-%dT%H:%M:%SZ"), "-o", "json", "--output-file", str(plan_path), "-q"]
    started = time.monotonic()
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
        return [name, "-", "-", budget, f"{wall:.1f}", "-", "-", f"exit {done.returncode}", *["-"] * 8, last]
    plan = DisruptionPlan.model_validate_json(plan_path.read_text())
    snapshot = load_snapshot(path).with_catalog(kwok_catalog())
    violations = verify_disruption(snapshot, plan, NOW)
    yard = plan.cost.yardstick_savings or 0.0
    reachable = plan.cost.before - plan.cost.lower_bound if plan.cost.lower_bound is not None else None
    ratio = f"{plan.cost.savings / yard:.2f}" if yard > 1e-9 else ("∞" if plan.cost.savings > 1e-9 else "—")
    share = f"{plan.cost.savings / reachable:.1%}" if reachable else "n/a"
    cpu, peak = (float(v) for v in usage.read_text().split())
    return [name, str(len(snapshot.nodes)), str(sum(1 for p in snapshot.pods if p.node_name)),
            budget, f"{wall:.1f}", f"{cpu:.1f}", f"{peak / 1024:.0f}", plan.solver.status,
            str(len(plan.remove)), str(len(plan.node_claims)), str(plan.disruption.evictions),
            f"{plan.cost.savings:.3f}", f"{yard:.3f}", ratio, f"{reachable:.3f}" if reachable is not None else "n/a",
            share, "ok" if not violations else f"{len(violations)} violations"]
