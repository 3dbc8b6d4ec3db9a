"""``make bench-controller``: Karpenter's perf-suite scale-out on the real control plane.

Starts a private control plane (``hack/control-plane``), runs ``nodeplan run`` as its own process, creates
Deployments totalling N pending pods (default 1,000, Karpenter's perf scenario) and measures the time from
creation until every pod is Running (bound by the real kube-scheduler to KWOK nodes), the controller's CPU
seconds and peak resident memory (``/proc``), and the reserved utilisation of the nodes it launched (pod
requests over node allocatable) — beside Karpenter's bar: < 2 min, cpu > 53 %, memory > 65 %.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic

from bench.workloads import CPU_CHOICES, KWOK_NODECLASS, MEMORY_CHOICES, deployment
from controller.run import api_client
from model.quantity import quantity_int

ROOT = Path(__file__).resolve().parents[1]
CONTROL_PLANE = ROOT / "hack" / "control-plane"
NAMESPACE = "perf"
NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}
NODECLASS = KWOK_NODECLASS
COLUMNS = ("pods", "to all Running s", "NodeClaims", "cpu reserved", "memory reserved", "controller cpu s",
           "controller peak MiB", "Karpenter's bar")


def _apply(api: client.ApiClient, obj: dict[str, Any]) -> None:
    resource = dynamic.DynamicClient(api).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    resource.server_side_apply(body=obj, namespace=obj["metadata"].get("namespace"), field_manager="bench",
                               force_conflicts=True)


def _deployments(total: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out, made = [], 0
    while made < total:
        replicas = min(total - made, rng.choice((10, 20, 30, 40)))
        out.append(deployment(f"app-{len(out):03d}", NAMESPACE, replicas, cpu=rng.choice(CPU_CHOICES),
                              memory=rng.choice(MEMORY_CHOICES)))
        made += replicas
    return out


def _proc(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) and peak resident MiB of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmHWM:"))
    return cpu, peak / 1024


def _utilisation(core: client.CoreV1Api) -> tuple[float, float]:
    nodes = [n for n in core.list_node().items if (n.metadata.labels or {}).get("karpenter.sh/nodepool")]
    alloc = [sum(quantity_int(r, n.status.allocatable.get(r, "0")) for n in nodes) for r in ("cpu", "memory")]
    names = {n.metadata.name for n in nodes}
    used = [0, 0]
    for pod in core.list_namespaced_pod(NAMESPACE).items:
        if pod.spec.node_name in names:
            for c in pod.spec.containers:
                requests = (c.resources.requests or {}) if c.resources else {}
                used[0] += quantity_int("cpu", requests.get("cpu", "0"))
                used[1] += quantity_int("memory", requests.get("memory", "0"))
    return used[0] / max(alloc[0], 1), used[1] / max(alloc[1], 1)


def run(pods: int, seed: int, timeout: float) -> list[str]:
    bin_dir = subprocess.run([str(CONTROL_PLANE / "build.sh")], check=True, capture_output=True,
                             text=True).stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NODEPLAN_CLUSTER_DIR": f"{tmp}/cluster", "NODEPLAN_CONTROL_PLANE_BIN": bin_dir}
        subprocess.run([str(CONTROL_PLANE / "cluster.sh"), "up"], check=True, env=env, capture_output=True)
        controller = None
        try:
            kubeconfig = f"{tmp}/cluster/kubeconfig"
            api = api_client(kubeconfig)
            for crd in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
                _apply(api, yaml.safe_load(crd.read_text()))
            time.sleep(2.0)  # CRDs established
            core = client.CoreV1Api(api)
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            _apply(api, NODECLASS)
            _apply(api, NODEPOOL)
            log = open(f"{tmp}/controller.log", "w")  # noqa: SIM115 - lives as long as the process
            command = [str(Path(sys.executable).parent / "nodeplan"), "run", "--kubeconfig", kubeconfig,
                       "--metrics-port", "0", "--health-port", "0", "--no-consolidation"]
            controller = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            time.sleep(3.0)
            started = time.monotonic()
            for deployment in _deployments(pods, seed):
                _apply(api, deployment)
            running = 0
            while time.monotonic() - started < timeout:
                items = core.list_namespaced_pod(NAMESPACE).items
                running = sum(1 for p in items if p.status.phase == "Running")
                if running >= pods:
                    break
                time.sleep(1.0)
            elapsed = time.monotonic() - started
            cpu_s, peak = _proc(controller.pid)
            claims = client.CustomObjectsApi(api).list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")
            cpu_u, mem_u = _utilisation(core)
            done = running >= pods
            bar = "met" if done and elapsed < 120 and cpu_u > 0.53 and mem_u > 0.65 else "missed"
            return [str(pods), f"{elapsed:.1f}" if done else f"timeout ({running} Running)",
                    str(len(claims["items"])), f"{cpu_u:.0%}", f"{mem_u:.0%}", f"{cpu_s:.1f}", f"{peak:.0f}", bar]
        finally:
            if controller is not None:
                controller.terminate()
                controller.wait(30)
            subprocess.run([str(CONTROL_PLANE / "cluster.sh"), "down"], env=env, capture_output=True, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", default="1000")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for n in (int(p) for p in args.pods.split(",")):
        print("| " + " | ".join(run(n, args.seed, args.timeout)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
