"""A DRA mix: GPU training pods with 1–8 devices from claim templates, inference pods sharing named claims,
and CPU pods, on the KWOK catalog plus the kwok-dra GPU types (``fixtures/catalogs/kwok-dra.yaml``).

Shares (of ``count`` pods): 20 % training (Deployments of 4–16 pods; each pod its own claim from a template
asking 1, 2, 4 or 8 devices of one model, a100 or h100, or of any GPU), 20 % inference (pairs to quads of
pods sharing one named claim of one t4 or a100), 60 % CPU pods (Karpenter's generic sizes). Two NodePools:
``gpu`` (the g family) and ``general`` (the KWOK catalog's own types).

``python -m bench.dra --sizes 100,1000,5000`` prints one row per size: wall, status, nodes, $/h, greedy,
bound, plan/bound and the verifier's verdict (the DRA check allocates every claim concretely).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from bench.workloads import CPU_CHOICES, MEMORY_CHOICES, nodepool, pod
from model.instancetype import InstanceType
from model.snapshot import parse_objects
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog
from solver.provision import SolveOptions, solve
from solver.verify import violations

DRIVER = "gpu.kwok.nodeplan.io"
DRA_CATALOG = Path(__file__).resolve().parents[1] / "fixtures" / "catalogs" / "kwok-dra.yaml"


def dra_catalog() -> tuple[InstanceType, ...]:
    """The KWOK catalog and the GPU types."""
    return (*kwok_catalog(), *load_catalog(DRA_CATALOG))


def _selectors(model: str | None) -> list[dict[str, Any]]:
    if model is None:
        return []
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{model}"'}}]


def _request(count: int, model: str | None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": count}
    if model:
        exactly["selectors"] = _selectors(model)
    return {"name": "gpu", "exactly": exactly}


def dra_objects(count: int, seed: int = 42) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    gpu_family = [{"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["g"]}]
    general = [{"key": "karpenter.kwok.sh/instance-family", "operator": "NotIn", "values": ["g"]}]
    objects: list[dict[str, Any]] = [
        nodepool("gpu", requirements=gpu_family), nodepool("general", requirements=general),
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}]
    training, inference = count // 5, count // 5
    made, d = 0, 0
    while made < training:
        replicas = min(training - made, rng.randint(4, 16))
        devices, model = rng.choice((1, 1, 2, 2, 4, 8)), rng.choice(("a100", "a100", "h100", None))
        template = f"train-{d:03d}"
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                        "metadata": {"name": template, "namespace": "default"},
                        "spec": {"spec": {"devices": {"requests": [_request(devices, model)]}}}})
        cpu = f"{rng.choice((1, 2, 4)) * devices}"
        objects += [pod(f"{template}-{i}", cpu=cpu, memory=f"{4 * int(cpu)}Gi", owner=template,
                        labels={"app": template},
                        spec_extra={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]})
                    for i in range(replicas)]
        made += replicas
        d += 1
    made, g = 0, 0
    while made < inference:
        size = min(inference - made, rng.randint(2, 4))
        claim = f"serve-{g:03d}"
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                        "metadata": {"name": claim, "namespace": "default", "uid": f"uid-{claim}"},
                        "spec": {"devices": {"requests": [_request(1, rng.choice(("t4", "t4", "a100")))]}}})
        objects += [pod(f"{claim}-{i}", cpu="500m", memory="1Gi", owner=claim, labels={"app": claim},
                        spec_extra={"resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]})
                    for i in range(size)]
        made += size
        g += 1
    for i in range(count - training - inference):
        objects.append(pod(f"cpu-{i:05d}", cpu=rng.choice(CPU_CHOICES), memory=rng.choice(MEMORY_CHOICES),
                           owner=f"cpu-{i // 20:03d}"))
    return objects


COLUMNS = ("pods", "wall s", "status", "nodes", "$/h", "greedy $/h", "bound $/h", "plan/bound", "verifier")


def run(count: int, time_limit: float, seed: int) -> list[str]:
    started = time.monotonic()
    snapshot = parse_objects(dra_objects(count, seed), source=f"dra-{count}").with_catalog(dra_catalog())
    result = solve(snapshot, SolveOptions(time_limit=time_limit, started_at=started))
    wall = time.monotonic() - started
    plan, cost = result.plan, result.plan.cost
    found = violations(snapshot, plan)
    return [str(count), f"{wall:.1f}", plan.solver.status, str(len(plan.node_claims)), f"{cost.total:.3f}",
            f"{cost.greedy or 0:.3f}", f"{cost.lower_bound:.3f}",
            f"{cost.total / cost.lower_bound:.4f}" if cost.lower_bound else "n/a",
            "ok" if not found else f"{len(found)} violations"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    ok = True
    for size in (int(s) for s in args.sizes.split(",") if s):
        row = run(size, args.time_limit, args.seed)
        ok &= row[-1] == "ok"
        print("| " + " | ".join(row) + " |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
