"""The real Karpenter beside nodeplan on identical input (``make bench-karpenter``, ``bench.run --karpenter``).

``bench/karpenter`` is a Go harness around sigs.k8s.io/karpenter's provisioning scheduler, set up as
Karpenter's own scheduling benchmark sets it up (fake cloud provider holding the catalog, state cluster,
topology, ``Solve``), each NodeClaim launched by the fake provider's own ``Create``. This module turns a
snapshot into the harness input (the Kubernetes objects, the pods nodeplan counts as pending, the catalog in
``InstanceCatalog`` item form), runs the binary with a wall clock around the whole process, reads its
ProvisioningPlan and checks it with nodeplan's verifier, and builds the comparison rows: nodeplan's ``solve``,
the yardstick (``solver/greedy.py``, Karpenter re-implemented — the plan behind ``cost.greedy``) and the real
Karpenter, each with its cost, nodes, wall and the verifier's violations counted per rule.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.diverse import diverse_objects, karpenter_benchmark_catalog, karpenter_generic_objects
from bench.workloads import as_list
from model.errors import InputError
from model.instancetype import InstanceType
from model.plan import PlanCost, ProvisioningPlan, SolverReport, UnschedulablePod
from model.snapshot import Snapshot, load_snapshot, read_documents
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog
from solver.provision import SolveOptions, SolveResult, planned_claims, solve
from solver.verify import violations

HARNESS_DIR = Path(__file__).resolve().parent / "karpenter"
#: the kinds the harness reads (everything else in a snapshot is left out of its input)
HARNESS_KINDS = frozenset({"Pod", "Node", "NodePool", "DaemonSet", "Namespace"})
#: overrides where the harness binary is (default: the build cache ``build.sh`` fills)
BINARY_ENV = "NODEPLAN_KARPENTER_HARNESS"


class HarnessError(RuntimeError):
    """The harness binary failed; the message carries its exit code and stderr."""


def pinned_version() -> str:
    """``KARPENTER_VERSION`` from ``bench/karpenter/versions.env``, the one place it is pinned."""
    for line in (HARNESS_DIR / "versions.env").read_text().splitlines():
        if line.startswith("KARPENTER_VERSION="):
            return line.split("=", 1)[1].strip()
    raise HarnessError("bench/karpenter/versions.env does not set KARPENTER_VERSION")


def harness_binary() -> Path | None:
    """The built harness, or None when it has not been built (``bench/karpenter/build.sh``)."""
    override = os.environ.get(BINARY_ENV)
    if override:
        return Path(override) if Path(override).is_file() else None
    cache = Path(os.environ.get("NODEPLAN_CACHE") or Path.home() / ".cache" / "nodeplan")
    path = cache / "karpenter-harness" / pinned_version() / "bin" / "karpenter-harness"
    return path if path.is_file() else None


def build_harness() -> Path:
    """Build the harness if missing (``build.sh`` is idempotent) and return the binary."""
    done = subprocess.run([str(HARNESS_DIR / "build.sh")], check=False, text=True, stdout=subprocess.PIPE)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise HarnessError(f"bench/karpenter/build.sh failed with exit code {done.returncode}")
    return Path(lines[-1]) / "karpenter-harness"


def catalog_item(it: InstanceType) -> dict[str, Any]:
    """One instance type in ``InstanceCatalog`` item form (``providers/catalog_file.py``)."""
    return {"name": it.name, "labels": dict(it.labels), "capacity": it.capacity.to_quantities(),
            "overhead": {"kubeReserved": it.overhead.kube_reserved.to_quantities(),
                         "systemReserved": it.overhead.system_reserved.to_quantities(),
                         "evictionThreshold": it.overhead.eviction_threshold.to_quantities()},
            "offerings": [{"zone": o.zone, "capacityType": o.capacity_type, "price": o.price,
                           "available": o.available} for o in it.offerings]}


def harness_input(objects: Iterable[Mapping[str, Any]], snapshot: Snapshot) -> dict[str, Any]:
    """What the harness reads: the snapshot's objects of the kinds it uses, the pods nodeplan would provision
    for (so both solve the same batch) and the snapshot's catalog."""
    return {"objects": [dict(o) for o in objects if o.get("kind") in HARNESS_KINDS],
            "pending": [p.key for p in snapshot.pending_pods()],
            "instanceTypes": [catalog_item(it) for it in snapshot.instance_types]}


def snapshot_objects(path: str | Path) -> list[Any]:
    """The raw objects of a snapshot file (``List``s flattened), as the harness input wants them."""
    return list(read_documents(Path(path)))


@dataclass(frozen=True)
class KarpenterRun:
    plan: ProvisioningPlan
    #: the whole harness process, start to exit
    wall: float
    #: ``Solve()`` alone (what Karpenter's benchmark times)
    solve_seconds: float
    version: str


def run_karpenter(binary: Path, objects: Iterable[Mapping[str, Any]], snapshot: Snapshot, workdir: Path,
                  timeout: float = 0.0) -> KarpenterRun:
    """Run the real scheduler on the snapshot; ``timeout`` > 0 bounds ``Solve`` as the provisioner's 1 min
    does (0: unbounded, as the benchmark)."""
    workdir.mkdir(parents=True, exist_ok=True)
    source, out = workdir / "karpenter-input.json", workdir / "karpenter-plan.json"
    source.write_text(json.dumps(harness_input(objects, snapshot)))
    started = time.monotonic()
    done = subprocess.run([str(binary), "-in", str(source), "-o", str(out), "-timeout", f"{timeout}s"],
                          check=False, text=True, capture_output=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise HarnessError(f"{binary.name} exited {done.returncode}: {done.stderr.strip()}")
    raw = json.loads(out.read_text())
    harness = raw.get("harness", {})
    return KarpenterRun(plan=ProvisioningPlan.model_validate(raw), wall=wall,
                        solve_seconds=float(harness.get("solveSeconds", 0.0)), version=str(harness.get("version")))


def yardstick_plan(result: SolveResult) -> ProvisioningPlan:
    """The yardstick's own plan (the greedy placement ``cost.greedy`` prices), for the verifier."""
    claims, existing = planned_claims(result.problem, result.greedy)
    stages = result.plan.solver.stages
    return ProvisioningPlan(
        node_claims=claims, existing_nodes=existing,
        unschedulable=[UnschedulablePod(pod=p.key, reason="the yardstick places it nowhere")
                       for p in result.greedy.unschedulable],
        cost=PlanCost(total=round(sum(c.price for c in claims), 6), lower_bound=0.0),
        solver=SolverReport(status="GREEDY", wall_seconds=stages.get("greedy", 0.0)))


def verdict(snapshot: Snapshot, plan: ProvisioningPlan) -> str:
    """The verifier's violations counted per rule family (``ok`` when there are none)."""
    counts = Counter(v.rule for v in violations(snapshot, plan))
    return "ok" if not counts else ", ".join(f"{rule} ×{n}" for rule, n in sorted(counts.items()))


COLUMNS = ("mix", "catalog", "pods", "seed", "scheduler", "wall s", "solve s", "status", "nodes", "cost $/h",
           "/ karpenter", "bound $/h", "bound / karpenter", "plan / bound", "unschedulable", "verifier")

#: the mixes compared with the real Karpenter: its benchmark's generators
MIXES: dict[str, Callable[[int, int], list[dict[str, Any]]]] = {
    "generic": karpenter_generic_objects,
    "diverse": diverse_objects,
}


def catalog_named(name: str) -> tuple[InstanceType, ...]:
    if name == "karpenter-400":
        return karpenter_benchmark_catalog()
    if name == "kwok":
        return kwok_catalog()
    raise ValueError(f"unknown catalog {name!r} (karpenter-400 or kwok)")


def _cells(mix: str, catalog: str, pods: int, seed: int, scheduler: str, wall: float, solve_s: float,
           plan: ProvisioningPlan, karpenter_cost: float, snapshot: Snapshot, bound: float) -> list[str]:
    """One row; the bound cells are nodeplan's certified lower bound (its own plan's, ``bound``), "-" when none."""
    total = plan.cost.total
    bound_cells = ["-"] * 3
    if bound > 0:
        bound_cells = [f"{bound:.3f}", f"{bound / karpenter_cost:.3f}" if karpenter_cost else "n/a",
                       f"{total / bound:.3f}"]
    return [mix, catalog, str(pods), str(seed), scheduler, f"{wall:.1f}", f"{solve_s:.1f}", plan.solver.status,
            str(len(plan.node_claims)), f"{total:.3f}", f"{total / karpenter_cost:.3f}" if karpenter_cost else "n/a",
            *bound_cells, str(len(plan.unschedulable)), verdict(snapshot, plan)]


def compare(mix: str, catalog_name: str, pods: int, seed: int, time_limit: float, binary: Path,
            workdir: Path, karpenter_timeout: float = 0.0) -> list[list[str]]:
    """Three rows on one generated batch, back to back: nodeplan (loaded from YAML and solved as
    ``bench/run.py`` does; wall includes loading, solve s does not), its yardstick (wall: compile + greedy;
    solve s: greedy) and the real Karpenter (wall: the whole harness process; solve s: ``Solve()``)."""
    objects = MIXES[mix](pods, seed)
    path = workdir / f"karpenter-{mix}-{catalog_name}-{pods}-{seed}.yaml"
    path.write_text(yaml.safe_dump(as_list(objects), sort_keys=False))
    started = time.monotonic()
    snapshot = load_snapshot(path).with_catalog(catalog_named(catalog_name))
    loaded = time.monotonic()
    result = solve(snapshot, SolveOptions(time_limit=time_limit, started_at=started))
    wall = time.monotonic() - started
    karpenter = run_karpenter(binary, objects, snapshot, workdir / path.stem, karpenter_timeout)
    stages = result.plan.solver.stages
    yardstick = yardstick_plan(result)
    reference = karpenter.plan.cost.total
    bound = result.plan.cost.lower_bound
    return [
        _cells(mix, catalog_name, pods, seed, "nodeplan", wall, wall - (loaded - started), result.plan, reference,
               snapshot, bound),
        _cells(mix, catalog_name, pods, seed, "yardstick", stages.get("compile", 0.0) + stages.get("greedy", 0.0),
               stages.get("greedy", 0.0), yardstick, reference, snapshot, bound),
        _cells(mix, catalog_name, pods, seed, f"karpenter {karpenter.version}", karpenter.wall,
               karpenter.solve_seconds, karpenter.plan, reference, snapshot, bound),
    ]


def batches(mixes: Sequence[str], sizes: Sequence[int], seed: int, other_seed: int | None,
            other_seed_sizes: Sequence[int]) -> list[tuple[str, int, int]]:
    """(mix, pods, seed) rows in order: every mix at every size with ``seed``, then the other seed at its sizes."""
    out = [(mix, size, seed) for mix in mixes for size in sizes]
    if other_seed is not None:
        out += [(mix, size, other_seed) for mix in mixes for size in other_seed_sizes]
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.realkarpenter SNAPSHOT [--catalog FILE] [-o PLAN]``: the real Karpenter's plan for any
    snapshot, and the verifier's verdict on it (stderr)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("snapshot")
    parser.add_argument("--catalog", help="InstanceCatalog file (default: the built-in KWOK catalog)")
    parser.add_argument("-o", "--output", default="-", help="where to write the plan JSON ('-': stdout)")
    parser.add_argument("--timeout", type=float, default=0.0, help="bound Solve() in seconds (0: none)")
    args = parser.parse_args(argv)
    try:
        snapshot = load_snapshot(args.snapshot).with_catalog(
            load_catalog(args.catalog) if args.catalog else kwok_catalog())
        objects = snapshot_objects(args.snapshot)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    binary = harness_binary() or build_harness()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            run = run_karpenter(binary, objects, snapshot, Path(tmp), args.timeout)
        except HarnessError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2 if " exited 2:" in str(err) else 1
    text = json.dumps(run.plan.to_json_dict(), indent=2)
    if args.output == "-":
        print(text)
    else:
        Path(args.output).write_text(text + "\n")
    print(f"karpenter {run.version}: {len(run.plan.node_claims)} nodes, ${run.plan.cost.total:.3f}/h, "
          f"{len(run.plan.unschedulable)} unschedulable, wall {run.wall:.1f} s (Solve {run.solve_seconds:.1f} s); "
          f"verifier: {verdict(snapshot, run.plan)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
