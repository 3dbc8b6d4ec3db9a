"""``make bench``: solve generated clusters end to end (write YAML, load, solve, verify) and print a table.

Wall time includes loading the snapshot file. Every plan is checked by the verifier; ``plan/bound`` is the
plan's cost over its certified lower bound, ``plan/greedy`` over Karpenter's first-fit-decreasing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.scenarios import catalogs, generic_objects
from bench.workloads import as_list
from model.snapshot import load_snapshot
from solver.provision import SolveOptions, solve
from solver.verify import verify

COLUMNS = ("scenario", "catalog", "pods", "wall s", "status", "nodes", "cost $/h", "greedy $/h", "bound $/h",
           "plan/bound", "plan/greedy", "verifier")


def run_one(scenario: str, catalog_name: str, pods: int, time_limit: float, seed: int,
            workdir: Path) -> list[str]:
    catalog = catalogs()[catalog_name]
    objects = generic_objects(pods, catalog_name, seed)
    path = workdir / f"{scenario}-{catalog_name}-{pods}.yaml"
    path.write_text(yaml.safe_dump(as_list(objects), sort_keys=False))
    started = time.monotonic()
    snapshot = load_snapshot(path).with_catalog(catalog)
    result = solve(snapshot, SolveOptions(time_limit=time_limit, started_at=started))
    wall = time.monotonic() - started
    violations = verify(snapshot, result.plan)
    cost = result.plan.cost
    bound = cost.lower_bound
    return [scenario, catalog_name, str(pods), f"{wall:.1f}", result.plan.solver.status,
            str(len(result.plan.node_claims)), f"{cost.total:.3f}", f"{cost.greedy or 0:.3f}", f"{bound:.3f}",
            f"{cost.total / bound:.4f}" if bound else "n/a",
            f"{cost.total / cost.greedy:.4f}" if cost.greedy else "n/a",
            "ok" if not violations else f"{len(violations)} violations"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100,1000,5000,20000")
    parser.add_argument("--catalogs", default="kwok,aws-like")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for catalog_name in args.catalogs.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                row = run_one("generic", catalog_name, size, args.time_limit, args.seed, Path(tmp))
                failed |= row[-1] != "ok"
                print("| " + " | ".join(row) + " |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
