"""``make bench-controller``: nodeplan and the real Karpenter, side by side, on the real control plane.

For each catalog (``--catalogs``) and each controller (``--controllers``: ``nodeplan run`` and Karpenter's KWOK
provider, ``hack/karpenter-kwok``), on a fresh control plane of its own (``hack/control-plane``):

1. **Scale-out** (Karpenter's perf-suite scenario): Deployments totalling N pending pods (default 1,000; the same
   Deployments for both controllers, seeded); the time from their creation until every pod is Running (bound by
   the real kube-scheduler to KWOK nodes), the NodeClaims launched and their $/h, and the reserved utilisation.
2. **Fragmented scale-down**: every Deployment is scaled to ``--keep`` of its replicas (the ReplicaSets pick the
   pods to delete, leaving holes on most nodes); the controller consolidates until its NodeClaims have not
   changed for ``--settle`` seconds: the end state's $/h and the saving.

Controller CPU seconds (when every pod is Running, and at the end) and peak resident memory are read from
``/proc`` of the controller process; both start from compiled code (Karpenter's binary, nodeplan's bytecode
written before the runs as its image's install does: ``compile_sources``). Per-batch decisions come from each
controller's own log line of a decided batch (``decisions``): nodeplan's "solved batch" (wall and CPU seconds
from the batch's pods to its plan), Karpenter's "found provisionable pod(s)" (its ``duration``, the same span;
Karpenter logs no CPU per batch). Plan adherence (``adherence``) is measured after
the scale-out: the share of pods the kube-scheduler bound to the node their controller first planned for them
(nodeplan: the NodeClaims' ``nodeplan.io/pods`` annotations; Karpenter: the first "Nominated" Event of each pod,
which Karpenter deduplicates per pod for 2 minutes, so its re-plans cannot be counted) and the pods re-planned.
The lower bound of each state (all its pods pending, no nodes) is the solver's certified bound
(``plan.cost.lower_bound``), computed offline after the live runs so it does not steal CPU from them.

Catalogs: ``kwok`` is the KWOK provider's own (Karpenter runs its built-in list; nodeplan its copy of it).
``aws-like`` is ``fixtures/catalogs/aws-like.yaml`` restricted to the c/m/r families (the benchmark's
general-purpose pool); Karpenter's KWOK provider reads instance types from the JSON file named by
``INSTANCE_TYPES_FILE_PATH``, which this module writes from that catalog. Karpenter's provider always subtracts
its own overhead (100m CPU, 10Mi), so each type's capacity is written as the catalog's allocatable plus that
overhead: both controllers then see the same allocatable per type, which is all scheduling depends on.

``--scheduler-log`` keeps each run's kube-scheduler log, written at the verbosity ``bench.scheduler_log`` reads:
its attempts, the queue moves and the events behind them, new pods' wait for a first attempt, and the cascades of
requeues a cleared nomination starts.

Karpenter binds its metrics and health ports on every interface (it has no bind-address option); it gets two
currently free ports (``hack/karpenter-kwok/run.sh``). nodeplan binds nothing (``--metrics-port 0``).
"""

from __future__ import annotations

import argparse
import compileall
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client, dynamic

from bench.workloads import KWOK_NODECLASS, generic_deployment_objects, pod
from controller.run import api_client
from model.durations import parse_duration
from model.instancetype import InstanceType
from model.quantity import format_quantity, quantity_int
from model.snapshot import parse_objects
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog
from solver.provision import SolveOptions, solve

ROOT = Path(__file__).resolve().parents[1]
CONTROL_PLANE = ROOT / "hack" / "control-plane"
KARPENTER_KWOK = ROOT / "hack" / "karpenter-kwok"
AWS_LIKE = ROOT / "fixtures" / "catalogs" / "aws-like.yaml"
#: kube-scheduler flags for ``--scheduler-log``: -v=2 logs each failed attempt and each bind; every attempt, the
#: queue's moves (with the event behind each) and the pod events come from these files at -v=3 to 5 (what
#: ``bench.scheduler_log`` reads)
SCHEDULER_LOG_ARGS = ("-v=2 --vmodule=scheduling_queue=5,backoff_queue=5,active_queue=5,schedule_one=3,"
                      "eventhandlers=4")
#: the aws-like catalog's general-purpose families (as bench/scenarios.py's pool selects them)
AWS_CATEGORIES = ("c", "m", "r")
#: what Karpenter's KWOK provider subtracts from every instance type's capacity (kwok/cloudprovider/helpers.go)
KARPENTER_KWOK_OVERHEAD = {"cpu": 100, "memory": 10 * 2**20}
NAMESPACE = "perf"
NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}
NODECLASS = KWOK_NODECLASS
COLUMNS = ("catalog", "controller", "pods", "to all Running s", "NodeClaims", "$/h", "bound $/h", "cpu reserved",
           "memory reserved", "batches", "decision median s", "decision p95 s", "decision cpu median s",
           "bound as planned", "re-planned pods", "scale-down pods", "settled s", "NodeClaims after", "$/h after",
           "saving $/h", "bound after $/h", "controller cpu s to all Running", "controller cpu s",
           "controller peak MiB")


def _apply(api: client.ApiClient, obj: dict[str, Any]) -> None:
    resource = dynamic.DynamicClient(api).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    resource.server_side_apply(body=obj, namespace=obj["metadata"].get("namespace"), field_manager="bench",
                               force_conflicts=True)


def _kept(replicas: int, keep: float) -> int:
    return max(1, round(replicas * keep))


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
    for p in core.list_namespaced_pod(NAMESPACE).items:
        if p.spec.node_name in names:
            for c in p.spec.containers:
                requests = (c.resources.requests or {}) if c.resources else {}
                used[0] += quantity_int("cpu", requests.get("cpu", "0"))
                used[1] += quantity_int("memory", requests.get("memory", "0"))
    return used[0] / max(alloc[0], 1), used[1] / max(alloc[1], 1)


# --- decisions and adherence ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    seconds: float
    #: None: the controller does not log it (Karpenter)
    cpu_seconds: float | None = None


def decisions(kind: str, log_text: str) -> list[Decision]:
    """Each provisioning batch the controller decided, from its JSON log lines."""
    out = []
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") or entry.get("msg")
        if kind == "nodeplan" and message == "solved batch" and entry.get("pods"):
            out.append(Decision(float(entry["seconds"]), float(entry.get("cpu_seconds") or 0.0)))
        elif kind == "karpenter" and message == "found provisionable pod(s)":
            seconds = parse_duration(str(entry.get("duration", "")))
            if seconds is not None:
                out.append(Decision(seconds))
    return out


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1))]


@dataclass(frozen=True)
class Adherence:
    """How closely the kube-scheduler followed the plans: ``planned`` pods with a recorded plan, ``as_planned`` of
    them bound to the node first planned for them, ``replanned`` planned more than once (None: not knowable),
    ``replanned_pods`` their names."""

    planned: int
    as_planned: int
    replanned: int | None
    replanned_pods: frozenset[str] = frozenset()

    @property
    def share(self) -> float:
        return self.as_planned / self.planned if self.planned else 0.0


PODS_ANNOTATION, PLACED_ANNOTATION = "nodeplan.io/pods", "nodeplan.io/placed"


def nodeplan_adherence(claims: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]) -> Adherence:
    """From nodeplan's own record of its plans: the NodeClaims listing each pod (oldest first) and the node a
    plan put it on in room left on a running node (``nodeplan.io/placed``)."""
    plans: dict[str, list[str]] = {}
    for claim in sorted(claims, key=lambda c: str(c["metadata"].get("creationTimestamp"))):
        node = (claim.get("status") or {}).get("nodeName") or claim["metadata"]["name"]
        for uid in json.loads((claim["metadata"].get("annotations") or {}).get(PODS_ANNOTATION) or "[]"):
            plans.setdefault(str(uid), []).append(str(node))
    planned = as_planned = 0
    replanned: set[str] = set()
    for p in pods:
        meta = p["metadata"]
        targets = list(plans.get(str(meta.get("uid")), []))
        placed = (meta.get("annotations") or {}).get(PLACED_ANNOTATION)
        if placed and placed not in targets:
            targets.append(placed)
        if not targets:
            continue
        planned += 1
        as_planned += (p.get("spec") or {}).get("nodeName") == targets[0]
        if len(targets) > 1:
            replanned.add(str(meta.get("name")))
    return Adherence(planned, as_planned, len(replanned), frozenset(replanned))


def nomination_adherence(events: Sequence[dict[str, Any]], claims: Sequence[dict[str, Any]],
                         pods: Sequence[dict[str, Any]]) -> Adherence:
    """From the "Nominated" Events a controller writes for each pod it plans ("Pod should schedule on:
    nodeclaim/X[, node/Y]", Karpenter's wording, which nodeplan shares): the first one names the planned node."""
    node_of = {c["metadata"]["name"]: (c.get("status") or {}).get("nodeName") or "" for c in claims}
    first: dict[str, tuple[str, str]] = {}
    for event in events:
        if event.get("reason") != "Nominated":
            continue
        uid = str((event.get("involvedObject") or {}).get("uid"))
        stamp = str(event.get("eventTime") or event.get("firstTimestamp") or "")
        targets = dict(part.strip().split("/", 1) for part in str(event.get("message", "")).split(":", 1)[-1]
                       .split(",") if "/" in part)
        node = targets.get("node") or node_of.get(targets.get("nodeclaim", ""), "")
        if node and (uid not in first or stamp < first[uid][0]):
            first[uid] = (stamp, node)
    planned = as_planned = 0
    for p in pods:
        target = first.get(str(p["metadata"].get("uid")))
        if target is not None:
            planned += 1
            as_planned += (p.get("spec") or {}).get("nodeName") == target[1]
    return Adherence(planned, as_planned, None)


def adherence(kind: str, api: client.ApiClient, namespace: str = NAMESPACE) -> Adherence:
    core = client.CoreV1Api(api)
    pods = [api.sanitize_for_serialization(p) for p in core.list_namespaced_pod(namespace).items]  # type: ignore[no-untyped-call]
    claims = _claims(api)
    if kind == "nodeplan":
        return nodeplan_adherence(claims, pods)
    listed = core.list_namespaced_event(namespace, field_selector="reason=Nominated").items
    events = [api.sanitize_for_serialization(e) for e in listed]  # type: ignore[no-untyped-call]
    return nomination_adherence(events, claims, pods)


# --- catalogs -----------------------------------------------------------------------------------------------

@dataclass
class Catalog:
    name: str
    instance_types: tuple[InstanceType, ...]
    #: ``nodeplan run --catalog`` (None: its built-in KWOK catalog)
    nodeplan_file: Path | None = None
    #: Karpenter's ``INSTANCE_TYPES_FILE_PATH`` (None: its built-in KWOK catalog)
    karpenter_file: Path | None = None

    def price(self, instance_type: str, zone: str, capacity_type: str) -> float:
        for it in self.instance_types:
            if it.name == instance_type:
                for offering in it.offerings:
                    if offering.zone == zone and offering.capacity_type == capacity_type:
                        return offering.price
        raise KeyError(f"catalog {self.name} has no offering {instance_type}/{zone}/{capacity_type}")


def karpenter_instance_types(instance_types: Sequence[InstanceType]) -> list[dict[str, Any]]:
    """Instance types in the JSON format of Karpenter's KWOK provider (``kwok/cloudprovider/instance_types.json``),
    with capacity = nodeplan's allocatable + the overhead the provider subtracts."""
    out = []
    for it in instance_types:
        resources = {name: format_quantity(name, it.allocatable[name] + KARPENTER_KWOK_OVERHEAD[name]
                                           if name in KARPENTER_KWOK_OVERHEAD else value)
                     for name, value in sorted(it.capacity.items())}
        out.append({
            "name": it.name,
            "offerings": [{"Price": o.price, "Available": o.available, "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [o.capacity_type]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [o.zone]}]}
                for o in it.offerings],
            "architecture": it.labels.get("kubernetes.io/arch", "amd64"),
            "operatingSystems": [it.labels.get("kubernetes.io/os", "linux")],
            "resources": resources,
        })
    return out


def catalog(name: str, workdir: Path) -> Catalog:
    if name == "kwok":
        return Catalog("kwok", tuple(kwok_catalog()))
    if name != "aws-like":
        raise SystemExit(f"unknown catalog {name!r} (kwok, aws-like)")
    document = yaml.safe_load(AWS_LIKE.read_text())
    document["instanceTypes"] = [t for t in document["instanceTypes"]
                                 if t["labels"].get("karpenter.k8s.aws/instance-category") in AWS_CATEGORIES]
    nodeplan_file = workdir / "aws-like-cmr.yaml"
    nodeplan_file.write_text(yaml.safe_dump(document, sort_keys=False))
    types = tuple(load_catalog(nodeplan_file))
    karpenter_file = workdir / "aws-like-cmr.karpenter.json"
    karpenter_file.write_text(json.dumps(karpenter_instance_types(types), indent=1))
    return Catalog("aws-like", types, nodeplan_file, karpenter_file)


def pending_pods(deployments: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every replica of ``deployments`` as a pending pod (what the scale-out asks the provisioner for)."""
    out: list[dict[str, Any]] = []
    for d in deployments:
        requests = d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        out += [pod(f"{d['metadata']['name']}-{i}", namespace=NAMESPACE, cpu=requests["cpu"],
                    memory=requests["memory"], labels=d["spec"]["selector"]["matchLabels"],
                    owner=f"{d['metadata']['name']}-rs") for i in range(d["spec"]["replicas"])]
    return out


def lower_bound(cat: Catalog, deployments: Sequence[dict[str, Any]], time_limit: float) -> float:
    """The solver's certified lower bound ($/h) for every pod of ``deployments`` pending on an empty cluster."""
    snapshot = parse_objects([NODEPOOL, *pending_pods(deployments)], source="bench").with_catalog(cat.instance_types)
    return solve(snapshot, SolveOptions(time_limit=time_limit)).plan.cost.lower_bound


# --- one run ------------------------------------------------------------------------------------------------

@dataclass
class Result:
    catalog: str
    controller: str
    pods: int
    running_s: float | None = None
    running: int = 0
    claims: int = 0
    cost: float = 0.0
    cpu_reserved: float = 0.0
    memory_reserved: float = 0.0
    kept_pods: int = 0
    settled_s: float | None = None
    claims_after: int = 0
    cost_after: float = 0.0
    #: controller CPU seconds when every pod was Running (the scale-out's share of ``cpu_s``)
    cpu_out_s: float = 0.0
    cpu_s: float = 0.0
    peak_mib: float = 0.0
    bounds: dict[str, float] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    adherence: Adherence | None = None


@contextmanager
def _fresh_cluster(tmp: str, bin_dir: str, scheduler_args: str = "") -> Iterator[tuple[client.ApiClient, str]]:
    """A fresh control plane; ``scheduler_args`` go to kube-scheduler after any the environment gives it."""
    given = os.environ.get("NODEPLAN_CLUSTER_SCHEDULER_ARGS", "")
    env = {**os.environ, "NODEPLAN_CLUSTER_DIR": f"{tmp}/cluster", "NODEPLAN_CONTROL_PLANE_BIN": bin_dir,
           "NODEPLAN_CLUSTER_SCHEDULER_ARGS": f"{given} {scheduler_args}".strip()}
    try:
        subprocess.run([str(CONTROL_PLANE / "cluster.sh"), "up"], check=True, env=env, capture_output=True)
        kubeconfig = f"{tmp}/cluster/kubeconfig"
        yield api_client(kubeconfig), kubeconfig
    finally:
        subprocess.run([str(CONTROL_PLANE / "cluster.sh"), "down"], env=env, capture_output=True, check=False)


def _install_crds(api: client.ApiClient, paths: Sequence[Path]) -> None:
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                _apply(api, doc)
                names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + 60
    while not all(any(c.type == "Established" and c.status == "True"
                      for c in ext.read_custom_resource_definition(n).status.conditions or []) for n in names):
        if time.monotonic() > deadline:
            raise RuntimeError("CRDs not Established after 60s")
        time.sleep(0.5)


#: nodeplan's packages, run from this source tree by ``nodeplan run`` (an editable install)
SOURCE_PACKAGES = ("cli", "controller", "model", "providers", "reports", "solver")


def compile_sources() -> None:
    """Compile nodeplan's sources to bytecode before the runs, as its image is installed (pip compiles a wheel
    on install): with ``PYTHONDONTWRITEBYTECODE`` set, as on these machines, each controller start would compile
    them again, 0.45 CPU s counted against nodeplan that a deployed controller never spends."""
    for package in SOURCE_PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)


def _controller(kind: str, cat: Catalog, kubeconfig: str, karpenter_bin: str, log: Any,
                batches: Path | None = None) -> subprocess.Popen[bytes]:
    if kind == "nodeplan":
        command = [str(Path(sys.executable).parent / "nodeplan"), "run", "--kubeconfig", kubeconfig,
                   "--metrics-port", "0", "--health-port", "0"]
        if cat.nodeplan_file is not None:
            command += ["--catalog", str(cat.nodeplan_file)]
        if batches is not None:
            command += ["--record-batches", str(batches)]
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    env = {**os.environ, "KARPENTER_KWOK_BIN": karpenter_bin}
    if cat.karpenter_file is not None:
        env["INSTANCE_TYPES_FILE_PATH"] = str(cat.karpenter_file)
    return subprocess.Popen([str(KARPENTER_KWOK / "run.sh"), kubeconfig], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, env=env)


def _claims(api: client.ApiClient) -> list[dict[str, Any]]:
    items = client.CustomObjectsApi(api).list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
    return [c for c in items if not c["metadata"].get("deletionTimestamp")]


def _cost(cat: Catalog, claims: Sequence[dict[str, Any]]) -> float:
    total = 0.0
    for c in claims:
        labels = c["metadata"].get("labels") or {}
        total += cat.price(labels["node.kubernetes.io/instance-type"], labels["topology.kubernetes.io/zone"],
                           labels["karpenter.sh/capacity-type"])
    return total


def _running(core: client.CoreV1Api) -> tuple[int, int]:
    items = core.list_namespaced_pod(NAMESPACE).items
    live = [p for p in items if not p.metadata.deletion_timestamp]
    return sum(1 for p in live if p.status.phase == "Running"), len(live)


def run(kind: str, cat: Catalog, deployments: Sequence[dict[str, Any]], *, keep: float, settle: float,
        timeout: float, bin_dir: str, karpenter_bin: str, karpenter_crds: Path, logs: Path | None = None,
        record_batches: bool = False, scheduler_log: bool = False) -> Result:
    pods = sum(d["spec"]["replicas"] for d in deployments)
    result = Result(cat.name, kind, pods)
    scheduler_args = SCHEDULER_LOG_ARGS if scheduler_log else ""
    with tempfile.TemporaryDirectory() as tmp, _fresh_cluster(tmp, bin_dir, scheduler_args) as (api, kubeconfig):
        crds = sorted((ROOT / "deploy" / "crds").glob("*.yaml")) if kind == "nodeplan" else sorted(
            (karpenter_crds / "kwok").glob("*.yaml"))
        _install_crds(api, crds)
        core = client.CoreV1Api(api)
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        _apply(api, NODECLASS)
        _apply(api, NODEPOOL)
        log = open(f"{tmp}/controller.log", "wb")  # noqa: SIM115 - lives as long as the process
        batches = logs / f"{cat.name}-{kind}-{pods}-batches" if record_batches and logs is not None else None
        controller = _controller(kind, cat, kubeconfig, karpenter_bin, log, batches)
        try:
            time.sleep(5.0)  # both controllers list and watch before the pods arrive
            if controller.poll() is not None:
                raise RuntimeError(f"{kind} exited: {Path(f'{tmp}/controller.log').read_text()[-2000:]}")
            started = time.monotonic()
            for d in deployments:
                _apply(api, d)
            while time.monotonic() - started < timeout:
                result.running, _ = _running(core)
                if result.running >= pods:
                    result.running_s = time.monotonic() - started
                    result.cpu_out_s = _proc(controller.pid)[0]
                    break
                time.sleep(1.0)
            claims = _claims(api)
            result.claims, result.cost = len(claims), _cost(cat, claims)
            result.cpu_reserved, result.memory_reserved = _utilisation(core)
            result.adherence = adherence(kind, api)
            if logs is not None:  # where every pod went against its plan, for reading adherence offline
                keep_snapshot(api, logs / f"{cat.name}-{kind}-{pods}-running.json")
            log.flush()
            result.decisions = decisions(kind, Path(f"{tmp}/controller.log").read_text(errors="replace"))
            if keep < 1.0 and result.running_s is not None:
                _scale_down(api, core, cat, deployments, keep, settle, timeout, result,
                            logs / f"{cat.name}-{kind}-{pods}-end.json" if logs is not None else None)
            result.cpu_s, result.peak_mib = _proc(controller.pid)
        finally:
            stop(controller)
            log.close()
            if logs is not None:  # kept for reading the controller's own account of the run
                logs.mkdir(parents=True, exist_ok=True)
                shutil.copy(f"{tmp}/controller.log", logs / f"{cat.name}-{kind}-{pods}.log")
                if scheduler_log:
                    shutil.copy(f"{tmp}/cluster/logs/kube-scheduler.log",
                                logs / f"{cat.name}-{kind}-{pods}-scheduler.log")
    return result


def stop(process: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL once ``grace`` seconds have passed: a controller gets to shut down cleanly."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _scale_down(api: client.ApiClient, core: client.CoreV1Api, cat: Catalog, deployments: Sequence[dict[str, Any]],
                keep: float, settle: float, timeout: float, result: Result, snapshot: Path | None = None) -> None:
    apps = client.AppsV1Api(api)
    result.kept_pods = sum(_kept(d["spec"]["replicas"], keep) for d in deployments)
    started = time.monotonic()
    for d in deployments:
        apps.patch_namespaced_deployment_scale(d["metadata"]["name"], NAMESPACE,
                                               {"spec": {"replicas": _kept(d["spec"]["replicas"], keep)}})
    names: frozenset[str] = frozenset()
    changed = time.monotonic()
    kept = False
    while time.monotonic() - started < timeout:
        claims = _claims(api)
        now = frozenset(c["metadata"]["name"] for c in claims)
        if now != names:
            names, changed = now, time.monotonic()
        running, live = _running(core)
        if not kept and live == result.kept_pods and snapshot is not None:
            # the scale-down done, before the first decision's 15 s validation wait ends: what consolidation
            # starts from
            keep_snapshot(api, snapshot.with_name(snapshot.name.replace("-end.json", "-start.json")))
            kept = True
        if running == live == result.kept_pods and time.monotonic() - changed >= settle:
            result.settled_s = changed - started
            break
        time.sleep(2.0)
    claims = _claims(api)
    result.claims_after, result.cost_after = len(claims), _cost(cat, claims)
    if snapshot is not None:
        keep_snapshot(api, snapshot)


def keep_snapshot(api: client.ApiClient, path: Path) -> None:
    """The cluster as ``kubectl get -o json`` would list it (NodePools, Nodes, NodeClaims, pods), for
    ``nodeplan consolidate`` to be run on offline."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    items: list[dict[str, Any]] = []
    for kind, listed in (("Node", core.list_node().items), ("Pod", core.list_namespaced_pod(NAMESPACE).items)):
        for obj in listed:
            raw = api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
            items.append({"apiVersion": "v1", "kind": kind, **raw})
    for plural, kind in (("nodepools", "NodePool"), ("nodeclaims", "NodeClaim")):
        listed_custom = cast(dict[str, Any], custom.list_cluster_custom_object("karpenter.sh", "v1", plural))
        for raw in listed_custom["items"]:
            items.append({**raw, "apiVersion": "karpenter.sh/v1", "kind": kind})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


# --- table --------------------------------------------------------------------------------------------------

def _row(r: Result) -> list[str]:
    out = "-" if r.running_s is None else f"{r.running_s:.1f}"
    if r.running_s is None:
        out = f"timeout ({r.running} Running)"
    scaled = r.kept_pods > 0
    return [r.catalog, r.controller, str(r.pods), out, str(r.claims), f"{r.cost:.2f}",
            f"{r.bounds.get('out', 0):.2f}", f"{r.cpu_reserved:.0%}", f"{r.memory_reserved:.0%}",
            *_decision_cells(r), *_adherence_cells(r),
            str(r.kept_pods) if scaled else "-",
            ("-" if not scaled else "not settled" if r.settled_s is None else f"{r.settled_s:.0f}"),
            str(r.claims_after) if scaled else "-", f"{r.cost_after:.2f}" if scaled else "-",
            f"{r.cost - r.cost_after:.2f}" if scaled else "-",
            f"{r.bounds.get('after', 0):.2f}" if scaled else "-",
            f"{r.cpu_out_s:.1f}" if r.running_s is not None else "-", f"{r.cpu_s:.1f}", f"{r.peak_mib:.0f}"]


def _decision_cells(r: Result) -> list[str]:
    if not r.decisions:
        return ["0", "-", "-", "-"]
    seconds = [d.seconds for d in r.decisions]
    cpu = [d.cpu_seconds for d in r.decisions if d.cpu_seconds is not None]
    return [str(len(seconds)), f"{percentile(seconds, 0.5):.3f}", f"{percentile(seconds, 0.95):.3f}",
            f"{percentile(cpu, 0.5):.3f}" if cpu else "-"]


def _adherence_cells(r: Result) -> list[str]:
    a = r.adherence
    if a is None or not a.planned:
        return ["-", "-"]
    return [f"{a.share:.1%} of {a.planned}", "-" if a.replanned is None else str(a.replanned)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="1000", help="comma-separated scale-out sizes")
    parser.add_argument("--catalogs", default="kwok,aws-like")
    parser.add_argument("--controllers", default="karpenter,nodeplan")
    parser.add_argument("--keep", type=float, default=0.3,
                        help="share of each Deployment's replicas kept by the scale-down (1: no scale-down)")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds without a NodeClaim change that end the consolidation phase")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=600.0, help="per phase")
    parser.add_argument("--bound-time-limit", type=float, default=30.0)
    parser.add_argument("--logs", type=Path, help="directory to keep each controller's log (and, as JSON "
                        "snapshots, the cluster once every pod is Running, the state after the scale-down and the "
                        "consolidated end state: CATALOG-CONTROLLER-PODS-running.json, -start.json and -end.json) in")
    parser.add_argument("--record-batches", action="store_true", help="nodeplan writes each batch's snapshot to "
                        "LOGS/CATALOG-nodeplan-PODS-batches/ (replay offline with nodeplan solve; costs it some CPU)")
    parser.add_argument("--scheduler-log", action="store_true", help="run the kube-scheduler with the verbosity "
                        "bench.scheduler_log reads (its queue and its attempts) and keep its log as "
                        "LOGS/CATALOG-CONTROLLER-PODS-scheduler.log (the logging costs the scheduler some CPU)")
    args = parser.parse_args(argv)
    if args.scheduler_log and args.logs is None:
        parser.error("--scheduler-log needs --logs")
    bin_dir = subprocess.run([str(CONTROL_PLANE / "build.sh")], check=True, capture_output=True,
                             text=True).stdout.strip().splitlines()[-1]
    controllers = [c.strip() for c in args.controllers.split(",") if c.strip()]
    karpenter_bin = ""
    if "karpenter" in controllers:
        karpenter_bin = subprocess.run([str(KARPENTER_KWOK / "build.sh")], check=True, capture_output=True,
                                       text=True).stdout.strip().splitlines()[-1]
    karpenter_crds = Path(karpenter_bin).parent / "crds" if karpenter_bin else Path()
    if "nodeplan" in controllers:
        compile_sources()
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS), flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        for catalog_name in (c.strip() for c in args.catalogs.split(",") if c.strip()):
            cat = catalog(catalog_name, Path(workdir))
            for n in (int(p) for p in args.pods.split(",")):
                deployments = generic_deployment_objects(n, args.seed, NAMESPACE)
                results = [run(kind, cat, deployments, keep=args.keep, settle=args.settle, timeout=args.timeout,
                               bin_dir=bin_dir, karpenter_bin=karpenter_bin, karpenter_crds=karpenter_crds,
                               logs=args.logs, record_batches=args.record_batches,
                               scheduler_log=args.scheduler_log)
                           for kind in controllers]
                bounds = {"out": lower_bound(cat, deployments, args.bound_time_limit)}
                if args.keep < 1.0:
                    kept = [{**d, "spec": {**d["spec"], "replicas": _kept(d["spec"]["replicas"], args.keep)}}
                            for d in deployments]
                    bounds["after"] = lower_bound(cat, kept, args.bound_time_limit)
                for r in results:
                    r.bounds = bounds
                    print("| " + " | ".join(_row(r)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
