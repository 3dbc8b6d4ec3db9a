"""``make bench``: solve generated clusters end to end (write YAML, load, solve, verify) and print a table.

Wall time includes loading the snapshot file. Every plan is checked by the verifier; ``plan/bound`` is the
plan's cost over its certified lower bound, ``plan/greedy`` over Karpenter's first-fit-decreasing;
``verify s`` is the verifier's own time on the plan (not part of ``wall s``). ``replay``
(``solver/verify/replay.py``) binds each plan's pods one at a time as the kube-scheduler's filters would, in
the planned order and ``--replay-orders`` random ones: orders stranding a pod / orders tried, the most pods one
order strands, and how many of those no retry binds ("never"); not part of ``wall s`` either.

``--karpenter`` prints only the comparison with the real Karpenter instead (``bench/realkarpenter.py``,
``make bench-karpenter``): Karpenter's generic and diverse batches on its benchmark catalog, each solved by
nodeplan, its yardstick and the real scheduler built from ``bench/karpenter``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import consolidation, realkarpenter
from bench.crossworkload import cross_workload_objects
from bench.diverse import diverse_objects, karpenter_benchmark_catalog
from bench.hostaffinity import hostname_affinity_objects
from bench.scenarios import catalogs, generic_objects
from bench.workloads import as_list
from model.plan import ProvisioningPlan
from model.snapshot import Snapshot, load_snapshot
from solver.provision import SolveOptions, SolveResult, solve
from solver.verify import verify
from solver.verify.replay import replay

COLUMNS = ("scenario", "catalog", "pods", "wall s", "status", "nodes", "cost $/h", "greedy $/h", "bound $/h",
           "plan/bound", "plan/greedy", "replay", "verify s", "verifier")

#: bind orders the replay column tries besides the planned one (``--replay-orders``; 0: no replay)
REPLAY_ORDERS = 20


def run_one(scenario: str, catalog_name: str, pods: int, time_limit: float, seed: int,
            workdir: Path) -> list[str]:
    catalog = catalogs()[catalog_name]
    objects = generic_objects(pods, catalog_name, seed)
    path = workdir / f"{scenario}-{catalog_name}-{pods}.yaml"
    path.write_text(yaml.safe_dump(as_list(objects), sort_keys=False))
    started = time.monotonic()
    snapshot = load_snapshot(path).with_catalog(catalog)
    result = solve(snapshot, SolveOptions(time_limit=time_limit, started_at=started))
    return _row(scenario, catalog_name, pods, time.monotonic() - started, snapshot, result)


def _row(scenario: str, catalog_name: str, pods: int, wall: float, snapshot: Snapshot,
         result: SolveResult) -> list[str]:
    verify_started = time.perf_counter()
    violations = verify(snapshot, result.plan)
    verify_seconds = time.perf_counter() - verify_started
    cost = result.plan.cost
    bound = cost.lower_bound
    return [scenario, catalog_name, str(pods), f"{wall:.1f}", result.plan.solver.status,
            str(len(result.plan.node_claims)), f"{cost.total:.3f}", f"{cost.greedy or 0:.3f}", f"{bound:.3f}",
            f"{cost.total / bound:.4f}" if bound else "n/a",
            f"{cost.total / cost.greedy:.4f}" if cost.greedy else "n/a",
            replay(snapshot, result.plan, orders=REPLAY_ORDERS).short() if REPLAY_ORDERS else "-",
            f"{verify_seconds:.2f}", "ok" if not violations else f"{len(violations)} violations"]


def _run_mix(scenario: str, objects: list[dict[str, Any]], catalog_name: str, pods: int, time_limit: float,
             workdir: Path) -> list[str]:
    """One generated mix on Karpenter's 400-type catalog or the KWOK catalog: write, load, solve, row."""
    catalog = karpenter_benchmark_catalog() if catalog_name == "karpenter-400" else catalogs()["kwok"]
    path = workdir / f"{scenario}-{catalog_name}-{pods}.yaml"
    path.write_text(yaml.safe_dump(as_list(objects), sort_keys=False))
    started = time.monotonic()
    snapshot = load_snapshot(path).with_catalog(catalog)
    result = solve(snapshot, SolveOptions(time_limit=time_limit, started_at=started))
    return _row(scenario, catalog_name, pods, time.monotonic() - started, snapshot, result)


def run_diverse(catalog_name: str, pods: int, time_limit: float, seed: int, workdir: Path) -> list[str]:
    """Karpenter's diverse mix (``bench/diverse.py``)."""
    return _run_mix("diverse", diverse_objects(pods, seed), catalog_name, pods, time_limit, workdir)


def run_cross(catalog_name: str, pods: int, time_limit: float, seed: int, workdir: Path) -> list[str]:
    """Karpenter's older cross-workload mix (``bench/crossworkload.py``): affinity, anti-affinity and spread
    selectors drawn apart from the pods' own labels."""
    return _run_mix("cross-workload", cross_workload_objects(pods, seed), catalog_name, pods, time_limit, workdir)


def run_host_affinity(catalog_name: str, pods: int, time_limit: float, seed: int, workdir: Path) -> list[str]:
    """Hostname self-affinity beside generic pods (``bench/hostaffinity.py``)."""
    return _run_mix("hostname-affinity", hostname_affinity_objects(pods, seed), catalog_name, pods, time_limit,
                    workdir)


SCALE_COLUMNS = ("scenario", "catalog", "pods", "time limit s", "wall s", "status", "nodes", "cost $/h", "greedy $/h",
                 "bound $/h", "plan/bound", "plan/greedy", "peak GiB", "verifier")
#: the time limit of the scale rows (issue 12's target: 100,000 generic pods in 30 s)
SCALE_TIME_LIMIT = 30.0


def run_scale(spec: str, seed: int, workdir: Path, time_limit: float = SCALE_TIME_LIMIT) -> list[str]:
    """One ``mix:pods`` batch on Karpenter's 400-type catalog, solved by ``nodeplan solve`` as its own process
    (wall around the whole process, peak memory its maximum resident set from ``getrusage``), then verified."""
    import json
    import resource
    import subprocess

    from bench.diverse import karpenter_generic_objects
    from providers.catalog_file import load_catalog

    mix, pods = spec.split(":")
    objects = (karpenter_generic_objects if mix == "generic" else diverse_objects)(int(pods), seed)
    path, catalog_path, plan_path = (workdir / f"scale-{mix}-{pods}.json", workdir / "karpenter-400.json",
                                     workdir / f"scale-{mix}-{pods}-plan.json")
    path.write_text(json.dumps(as_list(objects)))
    catalog_path.write_text(json.dumps({"apiVersion": "nodeplan.io/v1alpha1", "kind": "InstanceCatalog",
                                        "metadata": {"name": "karpenter-400"}, "instanceTypes": [
                                            realkarpenter.catalog_item(it) for it in karpenter_benchmark_catalog()]}))
    del objects
    command = [str(Path(sys.executable).with_name("nodeplan")), "solve", str(path), "--catalog", str(catalog_path),
               "--time-limit", f"{time_limit:g}", "-o", "json", "--output-file", str(plan_path), "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    wall = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux; the largest child so far
    if done.returncode not in (0, 1):
        return [mix, "karpenter-400", pods, f"{time_limit:g}", f"{wall:.1f}", f"exit {done.returncode}", *["-"] * 7,
                done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"]
    plan = ProvisioningPlan.model_validate_json(plan_path.read_text())
    snapshot = load_snapshot(path).with_catalog(load_catalog(catalog_path))
    violations = verify(snapshot, plan)
    cost = plan.cost
    return [mix, "karpenter-400", pods, f"{time_limit:g}", f"{wall:.1f}", plan.solver.status,
            str(len(plan.node_claims)), f"{cost.total:.3f}", f"{cost.greedy or 0:.3f}", f"{cost.lower_bound:.3f}",
            f"{cost.total / cost.lower_bound:.4f}" if cost.lower_bound else "n/a",
            f"{cost.total / cost.greedy:.4f}" if cost.greedy else "n/a",
            f"{peak / 2**20:.2f}" + ("" if peak > before else " (≤ an earlier row)"),
            "ok" if not violations else f"{len(violations)} violations"]


#: issue 3's targets: 5,000 diverse pods in 10 s, 20,000 in 30 s
LARGE_DIVERSE_LIMIT = 30.0


def diverse_time_limit(pods: int, default: float) -> float:
    """The time limit a diverse row runs with: the default up to 5,000 pods, 30 s above."""
    return default if pods <= 5000 else max(default, LARGE_DIVERSE_LIMIT)


SMALL_COLUMNS = ("catalog", "pods", "runs", "proven optimal", "proven in ≤ 2 s", "median s", "max s",
                 "mean plan/bound", "mean plan/greedy", "verifier")


def run_small(catalog_name: str, pods: int, seeds: range, time_limit: float, workdir: Path) -> list[str]:
    """Several seeds of one small size: how often, and how fast, the plan is proven optimal."""
    walls, proven, fast, ratios, vs_greedy, bad = [], 0, 0, [], [], 0
    for seed in seeds:
        row = run_one("generic", catalog_name, pods, time_limit, seed, workdir)
        wall = float(row[3])
        walls.append(wall)
        if row[4] == "OPTIMAL":
            proven += 1
            fast += wall <= 2.0
        ratios.append(float(row[9]) if row[9] != "n/a" else 1.0)
        vs_greedy.append(float(row[10]) if row[10] != "n/a" else 1.0)
        bad += row[-1] != "ok"
    walls.sort()
    return [catalog_name, str(pods), str(len(walls)), str(proven), str(fast), f"{walls[len(walls) // 2]:.1f}",
            f"{walls[-1]:.1f}", f"{sum(ratios) / len(ratios):.4f}", f"{sum(vs_greedy) / len(vs_greedy):.4f}",
            "ok" if not bad else f"{bad} plan(s) with violations"]


def _emit(row: list[str]) -> bool:
    """Print one table row; True when its plan failed the verifier (the last column)."""
    print("| " + " | ".join(row) + " |", flush=True)
    return row[-1] != "ok"


def _table(columns: tuple[str, ...]) -> None:
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def _sizes(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


def run_karpenter_table(args: argparse.Namespace) -> int:
    """nodeplan, its yardstick and the real Karpenter on each batch; time limits as the tables above use.
    Exit 1 when nodeplan's own plan fails the verifier (the others' verdicts are what is being measured)."""
    binary = realkarpenter.harness_binary() or realkarpenter.build_harness()
    other = args.karpenter_other_seed if args.karpenter_other_seed >= 0 else None
    failed = False
    _table(realkarpenter.COLUMNS)
    with tempfile.TemporaryDirectory() as tmp:
        for mix, size, seed in realkarpenter.batches(args.karpenter_mixes.split(","), _sizes(args.karpenter_sizes),
                                                     args.seed, other, _sizes(args.karpenter_other_seed_sizes)):
            limit = args.time_limit if mix == "generic" else (
                args.diverse_time_limit or diverse_time_limit(size, args.time_limit))
            rows = realkarpenter.compare(mix, args.karpenter_catalog, size, seed, limit, binary, Path(tmp),
                                         args.karpenter_timeout)
            for row in rows:
                print("| " + " | ".join(row) + " |", flush=True)
            failed |= rows[0][-1] != "ok"
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    global REPLAY_ORDERS
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100,1000,5000,20000")
    parser.add_argument("--catalogs", default="kwok,aws-like")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--small-sizes", default="50,100,200", help="sizes for the optimality table ('' to skip)")
    parser.add_argument("--diverse-sizes", default="1000,5000,10000,20000",
                        help="sizes of Karpenter's diverse mix, on its 400-type catalog and KWOK ('' to skip)")
    parser.add_argument("--diverse-catalogs", default="karpenter-400,kwok")
    parser.add_argument("--diverse-time-limit", type=float, default=None,
                        help="time limit for the diverse rows (default: --time-limit up to 5,000 pods, "
                             f"{LARGE_DIVERSE_LIMIT:.0f} s above, issue 3's targets)")
    parser.add_argument("--cross-sizes", default="1000,5000",
                        help="sizes of the cross-workload mix, on the --diverse-catalogs ('' to skip)")
    parser.add_argument("--host-affinity-sizes", default="1000,5000",
                        help="sizes of the hostname self-affinity mix, on the --diverse-catalogs ('' to skip)")
    parser.add_argument("--small-seeds", type=int, default=5)
    parser.add_argument("--consolidation-sizes", default="100,1000,5000,10000",
                        help="fragmented-cluster sizes in nodes for the consolidation table ('' to skip)")
    parser.add_argument("--consolidation-budget", default="10%")
    parser.add_argument("--consolidation-time-limit", type=float, default=10.0)
    parser.add_argument("--replay-orders", type=int, default=REPLAY_ORDERS,
                        help="random bind orders the replay column tries besides the planned one (0: skip); "
                             "'2/21 max 3' = orders stranding a pod / orders tried, most pods one order strands")
    parser.add_argument("--karpenter", action="store_true",
                        help="only the comparison with the real Karpenter (builds bench/karpenter if missing)")
    parser.add_argument("--karpenter-mixes", default="generic,diverse")
    parser.add_argument("--karpenter-sizes", default="1000,5000,20000")
    parser.add_argument("--karpenter-catalog", default="karpenter-400", help="karpenter-400 or kwok")
    parser.add_argument("--karpenter-other-seed", type=int, default=7,
                        help="a second seed, run at --karpenter-other-seed-sizes (-1: none)")
    parser.add_argument("--karpenter-other-seed-sizes", default="20000")
    parser.add_argument("--karpenter-timeout", type=float, default=0.0,
                        help="bound Karpenter's Solve() in seconds (0: none, as its benchmark)")
    parser.add_argument("--scale-sizes", default="",
                        help="mix:pods batches solved as their own nodeplan process with peak memory, e.g. "
                             "generic:50000,generic:100000,diverse:50000 (default: none)")
    parser.add_argument("--scale-time-limit", type=float, default=SCALE_TIME_LIMIT)
    args = parser.parse_args(argv)
    REPLAY_ORDERS = args.replay_orders
    if args.karpenter:
        return run_karpenter_table(args)
    if args.sizes:
        _table(COLUMNS)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for catalog_name in args.catalogs.split(",") if args.sizes else ():
            for size in (int(s) for s in args.sizes.split(",")):
                failed |= _emit(run_one("generic", catalog_name, size, args.time_limit, args.seed, Path(tmp)))
        for sizes, run_mix in ((args.diverse_sizes, run_diverse), (args.cross_sizes, run_cross),
                               (args.host_affinity_sizes, run_host_affinity)):
            if not sizes:
                continue
            print()
            _table(COLUMNS)
            for catalog_name in args.diverse_catalogs.split(","):
                for size in (int(s) for s in sizes.split(",")):
                    limit = args.diverse_time_limit or diverse_time_limit(size, args.time_limit)
                    failed |= _emit(run_mix(catalog_name, size, limit, args.seed, Path(tmp)))
        if args.small_sizes:
            print()
            _table(SMALL_COLUMNS)
            for catalog_name in args.catalogs.split(","):
                for size in (int(s) for s in args.small_sizes.split(",")):
                    seeds = range(1, args.small_seeds + 1)
                    failed |= _emit(run_small(catalog_name, size, seeds, args.time_limit, Path(tmp)))
        if args.scale_sizes:
            print()
            _table(SCALE_COLUMNS)
            for spec in args.scale_sizes.split(","):
                failed |= _emit(run_scale(spec, args.seed, Path(tmp), args.scale_time_limit))
        if args.consolidation_sizes:
            print()
            _table(consolidation.COLUMNS)
            sizes = [int(s) for s in args.consolidation_sizes.split(",") if s]
            for name, budget, objects in consolidation.scenarios(sizes, args.consolidation_budget):
                failed |= _emit(consolidation.run_row(name, objects, budget, args.consolidation_time_limit, Path(tmp)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
