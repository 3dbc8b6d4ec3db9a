"""Shadow mode over a fake cache: nodeplan decides against the capacity there was when the batch opened, compares
with the NodeClaims another provisioner created for those pods once they are bound, and never calls the API server;
its read-only permission table, deploy/shadow.yaml, the CLI's refusals and ``nodeplan shadow-report``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from typer.testing import CliRunner

import cli.run
from cli.app import app
from controller import permissions
from controller.cache import ClusterCache, Resource
from controller.kinds import READ
from controller.metrics import Metrics
from controller.provisioner import Provisioner, ProvisionerOptions
from controller.shadow import Shadow, ShadowOptions, capacity_before
from model import labels as wk
from providers.kwok import kwok_catalog

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
CATALOG = kwok_catalog()


class NoWrites(client.ApiClient):
    """An API client that fails every request: shadow mode must not make one."""

    calls: list[str] = []

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        NoWrites.calls.append(f"{args[1]} {args[0]}")
        raise AssertionError(f"shadow mode called the API server: {args[1]} {args[0]}")


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def fake_cache() -> ClusterCache:
    return ClusterCache({k.kind: Resource(k.kind, k.api_version, lambda **kw: None) for k in READ})


NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general", "uid": "np"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                                 {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}


def pending_pod(i: int, cpu: str = "1", created: float = 0.0) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"web-{i}", "namespace": "default", "uid": f"uid-{i}", "resourceVersion": "1",
                         "creationTimestamp": stamp(created)},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                           "reason": "Unschedulable"}]}}


def karpenter_claim(name: str, instance_type: str, created: float, zone: str = "test-zone-a") -> list[dict[str, Any]]:
    """What Karpenter leaves: a NodeClaim (labelled with its NodePool) and its registered Node."""
    labels = {wk.NODEPOOL: "general", wk.INSTANCE_TYPE: instance_type, wk.ZONE: zone,
              wk.CAPACITY_TYPE: "on-demand", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "kubernetes.io/hostname": name}
    it = next(i for i in CATALOG if i.name == instance_type)
    allocatable = {k: str(v) for k, v in it.allocatable.to_quantities().items()}
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
             "metadata": {"name": name, "uid": f"claim-{name}", "labels": labels, "creationTimestamp": stamp(created)},
             "spec": {"requirements": [], "nodeClassRef": NODEPOOL["spec"]["template"]["spec"]["nodeClassRef"]},
             "status": {"nodeName": name, "providerID": f"kwok://{name}", "allocatable": allocatable,
                        "capacity": allocatable,
                        "conditions": [{"type": t, "status": "True"} for t in ("Launched", "Registered",
                                                                                "Initialized")]}}
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"node-{name}", "labels": {**labels, wk.INITIALIZED: "true"},
                         "creationTimestamp": stamp(created + 1)},
            "spec": {"providerID": f"kwok://{name}"},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    return [claim, node]


def bind(cache: ClusterCache, pod: dict[str, Any], node: str) -> None:
    bound = json.loads(json.dumps(pod))
    bound["spec"]["nodeName"] = node
    bound["status"] = {"phase": "Running"}
    cache.upsert("Pod", bound)


def shadow(cache: ClusterCache, tmp_path: Path, clock: list[float], **options: Any) -> tuple[Shadow, Metrics]:
    provisioner = Provisioner(NoWrites(), cache, CATALOG, ProvisionerOptions(solve_time_limit=3.0),
                              clock=lambda: clock[0])
    metrics = Metrics()
    opts = ShadowOptions(record=tmp_path / "shadow.jsonl", **options)
    return Shadow(cache, provisioner, CATALOG, opts, metrics, clock=lambda: clock[0]), metrics


def test_a_batch_is_decided_on_the_capacity_before_it_and_compared_once_karpenters_nodes_run_it(
        tmp_path: Path) -> None:
    cache = fake_cache()
    cache.upsert("NodePool", NODEPOOL)
    pods = [pending_pod(i) for i in range(4)]
    for pod in pods:
        cache.upsert("Pod", pod)
    clock = [(T0 + timedelta(seconds=5)).timestamp()]
    # Karpenter acted first: a 16-core node for four 1-core pods, created after the pods (2 s into the batch)
    for obj in karpenter_claim("general-abcde", "c-16x-amd64-linux", created=2):
        cache.upsert(obj["kind"], obj)
    s, metrics = shadow(cache, tmp_path, clock)
    batch = s.pending()
    assert sorted(batch) == [f"default/web-{i}" for i in range(4)]
    decided = s.decide(batch)
    # Karpenter's claim is its answer to these pods, not capacity nodeplan could have used
    assert decided.nodeplan["pending"] == 0 and decided.nodeplan["onExisting"] == 0
    assert decided.nodeplan["nodeClaims"] and decided.nodeplan["cost"] > 0
    assert s.pending() == {}  # in an open batch: not batched again
    assert s.settle() == []  # the pods are not bound yet
    for pod in pods:
        bind(cache, pod, "general-abcde")
    [record] = s.settle()
    karpenter_price = next(o.price for it in CATALOG if it.name == "c-16x-amd64-linux" for o in it.offerings
                           if o.zone == "test-zone-a" and o.capacity_type == "on-demand")
    assert record["type"] == "batch" and record["settled"] == "bound" and record["pods"] == 4
    assert record["karpenter"]["cost"] == pytest.approx(karpenter_price, abs=1e-6)
    assert [c["instanceType"] for c in record["karpenter"]["nodeClaims"]] == ["c-16x-amd64-linux"]
    assert record["karpenter"]["pending"] == 0 and record["nodeplan"]["pending"] == 0
    # four 1-core, 1 GiB pods fit a much smaller node than 16 cores: nodeplan is cheaper
    assert record["nodeplan"]["cost"] < karpenter_price
    assert record["saving"] == pytest.approx(karpenter_price - record["nodeplan"]["cost"], abs=1e-6)
    lines = (tmp_path / "shadow.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [record]
    assert metrics.value("nodeplan_shadow_cost_dollars_per_hour", {"decider": "karpenter"}) == pytest.approx(
        karpenter_price, abs=1e-6)
    assert metrics.value("nodeplan_shadow_cost_dollars_per_hour", {"decider": "nodeplan"}) == pytest.approx(
        record["nodeplan"]["cost"], abs=1e-6)
    assert metrics.value("nodeplan_shadow_batches_total", {"settled": "bound"}) == 1
    assert NoWrites.calls == []


def test_existing_capacity_before_the_batch_counts_for_both(tmp_path: Path) -> None:
    """A node that was there before the pods is capacity: nodeplan places onto it, and Karpenter's pods bound
    there cost nothing new."""
    cache = fake_cache()
    cache.upsert("NodePool", NODEPOOL)
    for obj in karpenter_claim("old", "c-8x-amd64-linux", created=-600):
        cache.upsert(obj["kind"], obj)
    pods = [pending_pod(i) for i in range(2)]
    for pod in pods:
        cache.upsert("Pod", pod)
    clock = [(T0 + timedelta(seconds=3)).timestamp()]
    s, _ = shadow(cache, tmp_path, clock)
    decided = s.decide(s.pending())
    assert decided.nodeplan["nodeClaims"] == [] and decided.nodeplan["onExisting"] == 2
    for pod in pods:
        bind(cache, pod, "old")
    [record] = s.settle()
    assert record["karpenter"]["cost"] == 0 and record["karpenter"]["onExisting"] == 2 and record["saving"] == 0


def test_a_batch_not_bound_in_time_counts_karpenters_unbound_pods_as_left_pending(tmp_path: Path) -> None:
    cache = fake_cache()
    cache.upsert("NodePool", NODEPOOL)
    pods = [pending_pod(i) for i in range(3)]
    for pod in pods:
        cache.upsert("Pod", pod)
    clock = [(T0 + timedelta(seconds=2)).timestamp()]
    s, metrics = shadow(cache, tmp_path, clock, settle_timeout=60.0)
    s.decide(s.pending())
    for obj in karpenter_claim("k1", "c-2x-amd64-linux", created=3):
        cache.upsert(obj["kind"], obj)
    bind(cache, pods[0], "k1")
    clock[0] += 30
    assert s.settle() == []
    clock[0] += 31
    [record] = s.settle()
    assert record["settled"] == "timeout" and record["karpenter"]["pending"] == 2
    assert metrics.value("nodeplan_shadow_left_pending_pods_total", {"decider": "karpenter"}) == 2
    assert metrics.value("nodeplan_shadow_pending_pods", {"decider": "nodeplan"}) == 0


def test_capacity_before_drops_what_came_after_and_unbinds_the_batch() -> None:
    claim, node = karpenter_claim("new", "c-4x-amd64-linux", created=2)
    old_claim, old_node = karpenter_claim("old", "c-4x-amd64-linux", created=-100)
    mine, later = pending_pod(1), pending_pod(2, created=10)
    mine["spec"]["nodeName"] = later["spec"]["nodeName"] = "new"
    slice_ = {"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {"nodeName": "new"}}
    out = capacity_before([claim, node, old_claim, old_node, mine, later, slice_], T0.timestamp(), ["uid-1"])
    names = [(o["kind"], o["metadata"]["name"]) for o in out]
    assert names == [("NodeClaim", "old"), ("Node", "old"), ("Pod", "web-1")]
    assert "nodeName" not in out[-1]["spec"] and mine["spec"]["nodeName"] == "new"  # a copy, input untouched


# -- permissions and manifests --------------------------------------------------------------------------------
def test_shadow_mode_needs_reads_only() -> None:
    rows = permissions.required(shadow=True)
    assert rows and all(set(p.verbs) == {"get", "list", "watch"} for p in rows)
    assert {p.resource for p in rows} == {k.resource for k in READ}
    assert not any(p.resource in ("events", "leases") for p in rows)
    assert set(rows) < set(permissions.REQUIRED)


def test_deploy_shadow_grants_exactly_the_shadow_rows() -> None:
    objects = [d for d in yaml.safe_load_all((ROOT / "deploy" / "shadow.yaml").read_text()) if d]
    assert permissions.rbac_rules(objects) == permissions.required_rules(permissions.required(shadow=True))
    container = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--shadow" in container["args"] and "--no-leader-elect" in container["args"]
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding")]


def test_run_shadow_refuses_leader_election() -> None:
    result = CliRunner().invoke(app, ["run", "--shadow", "--leader-elect", "--kubeconfig", "/dev/null"])
    assert result.exit_code == 2
    assert "leader election writes a Lease" in result.stderr


def test_shadow_preflight_names_the_missing_read_and_the_shadow_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    class Review:
        def __init__(self, allowed: bool) -> None:
            self.status = type("S", (), {"allowed": allowed})()

    asked: list[tuple[str, str]] = []

    class Authz:
        def create_self_subject_access_review(self, body: Any, **kw: Any) -> Review:
            attrs = body.spec.resource_attributes
            asked.append((attrs.verb, attrs.resource))
            return Review(not (attrs.resource == "persistentvolumeclaims" and attrs.verb == "watch"))

    monkeypatch.setattr(permissions.client, "AuthorizationV1Api", lambda api: Authz())
    with pytest.raises(Exception) as info:
        cli.run.preflight(client.ApiClient(), "nodeplan", False, shadow=True)
    assert getattr(info.value, "exit_code", None) == 2
    assert {verb for verb, _ in asked} == {"get", "list", "watch"}  # never asks for a write
    assert ("create", "nodeclaims") not in asked


# -- shadow-report ----------------------------------------------------------------------------------------------
def _batch(time: str, nodeplan: float, karpenter: float, np_pending: int = 0, k_pending: int = 0) -> dict[str, Any]:
    return {"version": 1, "type": "batch", "time": time, "pods": 10, "settled": "bound",
            "nodeplan": {"cost": nodeplan, "pending": np_pending, "nodeClaims": [{}]},
            "karpenter": {"cost": karpenter, "pending": k_pending, "nodeClaims": [{}, {}]},
            "saving": karpenter - nodeplan}


def test_shadow_report_sums_like_for_like_batches_in_the_window(tmp_path: Path) -> None:
    path = tmp_path / "shadow.jsonl"
    records = [_batch("2026-03-01T10:00:00Z", 1.0, 2.0), _batch("2026-03-01T11:00:00Z", 1.5, 1.0),
               _batch("2026-03-01T12:00:00Z", 0.5, 3.0, np_pending=1),  # not like for like: kept out of the sums
               _batch("2026-03-02T12:00:00Z", 9.0, 9.5),  # outside the window
               {"version": 1, "type": "consolidation", "time": "2026-03-01T12:30:00Z", "clusterCost": 4.0,
                "nodeplan": {"cost": 3.0, "remove": ["a"]}, "karpenter": {"cost": 4.0}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    window = ["--since", "2026-03-01T00:00:00Z", "--until", "2026-03-01T23:59:59Z"]
    result = CliRunner().invoke(app, ["shadow-report", str(path), *window, "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["batches"] == 3 and out["comparableBatches"] == 2
    assert out["cost"] == {"nodeplan": 2.5, "karpenter": 3.0} and out["saving"] == 0.5
    assert out["cheaper"] == {"nodeplan": 1, "karpenter": 1, "equal": 0}
    assert out["leftPending"] == {"nodeplan": 1, "karpenter": 0}
    assert out["consolidation"]["saving"] == 1.0
    md = CliRunner().invoke(app, ["shadow-report", str(path), *window])
    assert md.exit_code == 0
    assert "| new nodes' $/h, 2 like-for-like batches | 2.5000 | 3.0000 |" in md.stdout
    assert "saved 0.5000 $/h (+16.67 %)" in md.stdout


def test_shadow_report_bad_line_is_one_error_naming_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "shadow.jsonl"
    bad = _batch("2026-03-01T10:00:00Z", 1.0, 2.0)
    bad["karpenter"]["cost"] = "cheap"
    path.write_text(json.dumps(_batch("2026-03-01T09:00:00Z", 1, 1)) + "\n" + json.dumps(bad) + "\n")
    result = CliRunner().invoke(app, ["shadow-report", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: line 2: field karpenter.cost: expected a number, got 'cheap'"
    result = CliRunner().invoke(app, ["shadow-report", str(path), "--since", "yesterday"])
    assert result.exit_code == 2 and "field --since" in result.stderr
