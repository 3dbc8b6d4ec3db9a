"""Decision latency of single batches: the ``bench-controller`` Deployments (KWOK catalog, one NodePool) solved
offline at a decision gap, for batch sizes a scale-out sees — or batches ``nodeplan run --record-batches``
wrote, replayed as the controller solved them.

    PYTHONPATH=. .venv/bin/python -m bench.decisions --sizes 100,200,300,500,1000 --seeds 1,2 --gap 0.02
    PYTHONPATH=. .venv/bin/python -m bench.decisions --replay DIR/batch-*.json

Prints one Markdown row per batch: pods, wall and CPU seconds of ``solve`` (the time limit counts from before
parsing), plan and bound $/h, the certified gap, and the stage whose plan decided the batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.controller_perf import NAMESPACE, NODEPOOL, pending_pods
from bench.workloads import generic_deployment_objects
from model.snapshot import Snapshot, parse_objects
from providers.kwok import kwok_catalog
from solver.provision import SolveOptions, solve


def deployment_pods(total: int, seed: int) -> list[dict[str, Any]]:
    """The first ``total`` pods of the seeded ``bench-controller`` Deployments, as pending pods."""
    return pending_pods(generic_deployment_objects(total, seed, NAMESPACE))[:total]


def row(label: str, load: Any, options: SolveOptions) -> tuple[str, float]:
    started, cpu = time.monotonic(), time.process_time()
    snapshot: Snapshot = load()
    plan = solve(snapshot, replace(options, started_at=started)).plan
    wall, used = time.monotonic() - started, time.process_time() - cpu
    decided = next((n.split("the ")[1].split(" plan")[0] for n in plan.solver.notes if n.startswith("decided:")),
                   plan.solver.status.lower())
    gap = f"{plan.cost.gap:.4f}" if plan.cost.gap is not None else "–"
    return (f"| {label} | {len(snapshot.pending_pods())} | {wall:.2f} | {used:.2f} | {plan.cost.total:.4f} | "
            f"{plan.cost.lower_bound:.4f} | {gap} | {decided} |"), used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,200,300,500,1000")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--gap", type=float, default=0.02)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--replay", nargs="*", type=Path, default=[], help="recorded batch files")
    args = parser.parse_args(argv)
    options = SolveOptions(time_limit=args.time_limit, gap=args.gap)
    catalog = kwok_catalog()
    print("| batch | pods | wall s | cpu s | $/h | bound $/h | gap | decided by |")
    print("|---|---|---|---|---|---|---|---|")
    cpu: list[float] = []
    jobs: list[tuple[str, Any]] = []
    for path in args.replay:
        jobs.append((path.name, lambda path=path: parse_objects(json.loads(path.read_text())["items"],
                                                                 source=str(path)).with_catalog(catalog)))
    if not args.replay:
        for seed in (int(s) for s in args.seeds.split(",") if s):
            for n in (int(x) for x in args.sizes.split(",") if x):
                jobs.append((f"seed {seed}", lambda n=n, seed=seed: parse_objects(
                    [NODEPOOL, *deployment_pods(n, seed)], source="bench").with_catalog(catalog)))
    for label, load in jobs:
        line, used = row(label, load, options)
        cpu.append(used)
        print(line, flush=True)
    if cpu:
        print(f"\nmedian CPU {statistics.median(cpu):.2f} s, max {max(cpu):.2f} s over {len(cpu)} batches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
