"""The controller's operational pieces without a cluster: Event deduplication, metrics, HTTP endpoints, the
RBAC table against deploy/, the permission check's message, the leader-election state machine (fake clock,
in-memory Lease), NodePool status, and the Events a real solve produces."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller import permissions
from controller.cache import ClusterCache, Resource
from controller.events import EventRecorder
from controller.health import Endpoints, Servers
from controller.leader import Conflict, LeaderElector, LeaseRecord
from controller.metrics import Metrics
from controller.nodepool_status import desired_status, validation_error
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions

ROOT = Path(__file__).resolve().parents[2]


# -- Events ------------------------------------------------------------------------------------------------
class FakeEvents:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, str, dict[str, Any]]] = []
        self.missing: set[str] = set()

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.created.append(body)

    def patch_namespaced_event(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        if name in self.missing:
            raise client.ApiException(status=404, reason="Not Found")
        self.patched.append((namespace, name, body))


class Clock:
    def __init__(self, now: float = 1_767_225_600.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


POD = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1"}}


def recorder(clock: Clock) -> tuple[EventRecorder, FakeEvents]:
    events = EventRecorder(None, clock=clock, dedup_window=120.0)
    fake = FakeEvents()
    events._core = fake  # type: ignore[assignment]
    return events, fake


CLAIM = {"kind": "NodeClaim", "apiVersion": "karpenter.sh/v1", "metadata": {"name": "general-1", "uid": "c1"}}


def test_events_are_deduplicated_then_counted() -> None:
    """A reason without a Karpenter policy (``LaunchFailed``): object, type, reason and message within the
    recorder's window are one Event; the repeats held back are counted into its next PATCH."""
    clock = Clock()
    events, fake = recorder(clock)
    for _ in range(3):  # one lifecycle pass after another fails the same launch
        events.warning(CLAIM, "LaunchFailed", "Failed to launch: insufficient capacity")
        clock.now += 10
    events.drain()
    assert len(fake.created) == 1 and fake.patched == []
    body = fake.created[0]
    assert body["involvedObject"] == {"kind": "NodeClaim", "apiVersion": "karpenter.sh/v1", "name": "general-1",
                                      "uid": "c1"}
    assert (body["type"], body["reason"], body["count"]) == ("Warning", "LaunchFailed", 1)
    assert events.suppressed == 2
    clock.now += 120  # past the window: one PATCH carrying every occurrence so far
    events.warning(CLAIM, "LaunchFailed", "Failed to launch: insufficient capacity")
    events.drain()
    assert len(fake.created) == 1
    [(namespace, name, patch)] = fake.patched
    assert (namespace, name, patch["count"]) == ("default", body["metadata"]["name"], 4)
    # another message (or reason) about the same object is another Event
    events.warning(CLAIM, "LaunchFailed", "Failed to launch: no offering left")
    events.drain()
    assert [e["message"] for e in fake.created] == ["Failed to launch: insufficient capacity",
                                                    "Failed to launch: no offering left"]


def test_failed_scheduling_is_keyed_by_the_pods_uid_for_five_minutes() -> None:
    """Karpenter's ``PodFailedToScheduleEvent``: DedupeValues the pod's UID, DedupeTimeout 5 minutes. What the
    recorder drops never reaches client-go, so the Event written after the timeout counts 2, not every batch."""
    clock = Clock()
    events, fake = recorder(clock)
    for _ in range(3):  # one batch after another reports the same pod
        events.warning(POD, "FailedScheduling", "Failed to schedule pod: NodePool batch limit cpu=64 reached")
        clock.now += 10
    events.drain()
    assert len(fake.created) == 1 and events.suppressed == 2
    body = fake.created[0]
    assert body["involvedObject"] == {"kind": "Pod", "apiVersion": "v1", "name": "web-1", "namespace": "shop",
                                      "uid": "u1"}
    assert (body["type"], body["reason"], body["count"]) == ("Warning", "FailedScheduling", 1)
    assert body["metadata"]["namespace"] == "shop"
    clock.now += 120  # 150 s after the first: still within the pod's timeout
    events.warning(POD, "FailedScheduling", "Failed to schedule pod: NodePool batch limit cpu=64 reached")
    events.drain()
    assert len(fake.created) == 1 and fake.patched == [] and events.suppressed == 3
    clock.now += 151  # 301 s after the first: the key has expired; client-go counts the repeat with a PATCH
    events.warning(POD, "FailedScheduling", "Failed to schedule pod: NodePool batch limit cpu=64 reached")
    events.drain()
    [(namespace, name, patch)] = fake.patched
    assert (namespace, name, patch["count"]) == ("shop", body["metadata"]["name"], 2)
    # another reason about the same pod has its own key
    events.normal(POD, "Nominated", "Pod should schedule on: nodeclaim/general-abc")
    events.drain()
    assert [e["reason"] for e in fake.created] == ["FailedScheduling", "Nominated"]


def test_expired_event_is_written_anew_and_cluster_scoped_objects_go_to_default() -> None:
    clock = Clock()
    events, fake = recorder(clock)
    claim = {"kind": "NodeClaim", "apiVersion": "karpenter.sh/v1", "metadata": {"name": "general-1", "uid": "c1"}}
    events.normal(claim, "Launched", "Launched m5.large")
    events.drain()
    assert fake.created[0]["metadata"]["namespace"] == "default"
    fake.missing.add(fake.created[0]["metadata"]["name"])
    clock.now += 3600
    events.normal(claim, "Launched", "Launched m5.large")
    events.drain()
    assert len(fake.created) == 2 and fake.created[1]["count"] == 2


def test_event_writer_thread_and_full_queue() -> None:
    clock = Clock()
    events = EventRecorder(None, clock=clock, queue_size=2)
    fake = FakeEvents()
    events._core = fake  # type: ignore[assignment]
    for i in range(5):  # no writer yet: the queue holds two, the rest are dropped, never blocking the caller
        events.normal({**POD, "metadata": {**POD["metadata"], "uid": f"u{i}"}}, "Nominated", "x")
    assert events.dropped == 3
    events.start()
    assert events.flush(5.0)
    events.stop()
    assert len(fake.created) == 2


# -- metrics -----------------------------------------------------------------------------------------------
def cache_with(**objects: list[dict[str, Any]]) -> ClusterCache:
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None)
                          for kind in ("Pod", "Node", "NodeClaim", "NodePool", "DaemonSet")})
    for kind, items in objects.items():
        for i, obj in enumerate(items):
            obj.setdefault("metadata", {}).setdefault("resourceVersion", str(i + 1))
            cache.upsert(kind, obj)
    return cache


NODE = {"metadata": {"name": "n1", "labels": {
            "karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": "z1",
            "node.kubernetes.io/instance-type": "c-4x", "kubernetes.io/arch": "amd64"}},
        "status": {"allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"}}}


def bound_pod(name: str, cpu: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "uid": name},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}}


def test_metrics_mirror_karpenter_and_registries_do_not_collide() -> None:
    cache = cache_with(
        Node=[NODE], Pod=[bound_pod("a", "500m"), bound_pod("b", "1"), bound_pod("done", "2", "Succeeded")],
        NodeClaim=[{"metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "general"}},
                    "status": {"nodeName": "n1", "capacity": {"cpu": "4", "memory": "16Gi"}}}],
        NodePool=[{"metadata": {"name": "general"}, "spec": {"limits": {"cpu": "100"}}}])
    synced = threading.Event()
    metrics = Metrics(cache, synced.is_set)
    # Karpenter's node labels: its well-known labels (snake_case), node_name, phase, managed, resource_type
    node = {"node_name": "n1", "nodepool": "general", "instance_type": "c-4x", "capacity_type": "", "zone": "z1",
            "region": "", "arch": "amd64", "os": "", "windows_build": "", "phase": "", "managed": "true"}
    assert metrics.value("karpenter_cluster_state_synced") == 0
    assert metrics.value("karpenter_nodes_allocatable", {**node, "resource_type": "cpu"}) is None  # not synced yet
    synced.set()
    assert metrics.value("karpenter_cluster_state_synced") == 1
    assert metrics.value("karpenter_nodes_allocatable", {**node, "resource_type": "cpu"}) == 3.9
    # the terminal pod is not counted
    assert metrics.value("karpenter_nodes_total_pod_requests", {**node, "resource_type": "cpu"}) == 1.5
    assert metrics.value("karpenter_nodes_total_pod_requests", {**node, "resource_type": "pods"}) == 2
    assert metrics.value("karpenter_nodepools_usage", {"nodepool": "general", "resource_type": "cpu"}) == 4
    assert metrics.value("karpenter_nodepools_usage", {"nodepool": "general", "resource_type": "nodes"}) == 1
    assert metrics.value("karpenter_nodepools_limit", {"nodepool": "general", "resource_type": "cpu"}) == 100
    assert metrics.value("karpenter_pods_state", {
        "name": "a", "namespace": "shop", "owner": "", "node": "n1", "scheduled": "true", "nodepool": "general",
        "zone": "z1", "arch": "amd64", "capacity_type": "", "instance_type": "c-4x", "phase": "Running",
        "ready": "false", "managed": "true"}) == 1
    labels = {"reason": "provisioning", "nodepool": "general", "min_values_relaxed": "false"}
    metrics.nodeclaims_created.labels(**labels).inc()
    metrics.scheduling_duration.labels("provisioner").observe(0.3)
    other = Metrics()  # a second controller in the same process: its own registry, no duplicate-name error
    other.nodeclaims_created.labels(**labels).inc(5)
    assert metrics.value("karpenter_nodeclaims_created_total", labels) == 1
    assert other.value("karpenter_nodeclaims_created_total", labels) == 5
    text = metrics.exposition().decode()
    for name in ("karpenter_scheduler_scheduling_duration_seconds_bucket", "karpenter_scheduler_queue_depth",
                 "karpenter_nodeclaims_created_total", "karpenter_nodeclaims_terminated_total",
                 "karpenter_nodes_allocatable", "karpenter_nodes_total_pod_requests", "karpenter_nodepools_usage",
                 "karpenter_nodepools_limit", "karpenter_pods_state", "karpenter_cluster_state_synced",
                 "karpenter_cloudprovider_errors_total", "nodeplan_leader"):
        assert f"# TYPE {name.removesuffix('_bucket')} " in text, name


# -- HTTP endpoints ----------------------------------------------------------------------------------------
def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_health_ready_and_metrics_endpoints() -> None:
    ready = threading.Event()
    metrics = Metrics()
    servers = Servers(Endpoints(lambda: (True, "running"),
                                lambda: (ready.is_set(), "cache synced" if ready.is_set() else "cache not synced"),
                                metrics.render), metrics_port=0, health_port=0, bind="127.0.0.1")
    servers.start()
    try:
        port = servers.ports["/readyz"]
        assert servers.ports["/metrics"] == port  # equal ports share one listener
        assert get(port, "/healthz") == (200, "ok: running\n")
        assert get(port, "/readyz") == (503, "not ok: cache not synced\n")
        ready.set()
        assert get(port, "/readyz") == (200, "ok: cache synced\n")
        code, text = get(port, "/metrics")
        assert code == 200 and "karpenter_scheduler_queue_depth" in text
        assert get(port, "/nope")[0] == 404
    finally:
        servers.stop()
    split = Servers(Endpoints(lambda: (True, ""), lambda: (True, ""), metrics.render), metrics_port=0,
                    health_port=None, bind="127.0.0.1")
    split.start()
    try:
        assert get(split.ports["/metrics"], "/healthz")[0] == 404  # health not served on the metrics-only port
    finally:
        split.stop()


# -- permissions -------------------------------------------------------------------------------------------
def test_deploy_rbac_grants_exactly_what_the_code_uses() -> None:
    manifests = [d for d in yaml.safe_load_all((ROOT / "deploy" / "controller.yaml").read_text()) if d]
    granted = permissions.rbac_grants(manifests)  # resourceNames included
    required = permissions.required_grants(permissions.required(provider="kwok"))
    assert required - granted == set(), "deploy/controller.yaml lacks permissions the controller uses"
    assert granted - required == set(), "deploy/controller.yaml grants more than the controller uses"


def test_least_privilege_rows() -> None:
    """Lease writes by name only (create cannot be: RBAC authorizes it before the object has a name), Node and
    ResourceSlice creation for the KWOK provider only, and every pod write names the code path making it."""
    grants = permissions.required_grants(lease_name="my-lease")
    leases = {(verb, names) for group, resource, verb, _, names in grants if resource == "leases"}
    assert leases == {("get", ("my-lease",)), ("update", ("my-lease",)), ("create", ())}
    kwok = {(p.rbac_resource, verb) for p in permissions.required(provider="kwok") for verb in p.verbs}
    cloud = {(p.rbac_resource, verb) for p in permissions.required(provider="aws") for verb in p.verbs}
    assert kwok - cloud == {("nodes", "create"), ("resourceslices", "create")}
    assert {("nodes", "patch"), ("nodes", "delete")} <= cloud  # the controller's own taints, labels and deletions
    calls = {"delete": "delete_namespaced_pod(", "patch": "patch_namespaced_pod("}
    for row in permissions.REQUIRED:
        if row.resource == "pods" and not row.subresource and set(row.verbs) & set(calls):
            source = next(word for word in row.why.replace("(", " ").split() if word.startswith("controller/"))
            text = (ROOT / source).read_text()
            assert all(calls[verb] in text for verb in row.verbs if verb in calls), (row.why, source)
    assert all(set(p.verbs) <= {"get", "list", "watch"} for p in permissions.required(shadow=True))


class FakeAuthz:
    def __init__(self, denied: set[tuple[str, str, str]]) -> None:
        self.denied = denied
        self.asked: list[tuple[str, str, str, str | None]] = []
        self.names: dict[tuple[str, str], str | None] = {}

    def create_self_subject_access_review(self, body: client.V1SelfSubjectAccessReview, **_: Any) -> Any:
        attrs = body.spec.resource_attributes
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        self.asked.append((attrs.verb, attrs.group, resource, attrs.namespace))
        self.names[(attrs.verb, resource)] = attrs.name
        allowed = (attrs.verb, attrs.group, resource) not in self.denied
        return client.V1SelfSubjectAccessReview(spec=body.spec,
                                                status=client.V1SubjectAccessReviewStatus(allowed=allowed))


def test_permission_check_names_verb_and_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAuthz({("create", "karpenter.sh", "nodeclaims"), ("patch", "", "pods/status")})
    monkeypatch.setattr(permissions.client, "AuthorizationV1Api", lambda api: fake)
    missing = permissions.check(client.ApiClient(), "nodeplan")
    assert [str(m) for m in missing] == ["create nodeclaims.karpenter.sh", "patch pods/status"]
    assert str(permissions.MissingPermissions(missing)) == (
        "missing RBAC permissions: create nodeclaims.karpenter.sh, patch pods/status "
        "(grant them as deploy/controller.yaml does)")
    # leases are asked in the Lease's namespace, everything else cluster-wide
    assert {ns for verb, group, res, ns in fake.asked if res == "leases"} == {"nodeplan"}
    assert {ns for verb, group, res, ns in fake.asked if res != "leases"} == {None}
    # the Lease is asked about by name where RBAC grants it by name
    assert {verb: fake.names[(verb, "leases")] for verb in ("get", "update", "create")} == {
        "get": "nodeplan-leader-election", "update": "nodeplan-leader-election", "create": None}
    permissions.check(client.ApiClient(), "nodeplan", lease_name="other")
    assert fake.names[("update", "leases")] == "other"
    fake.asked.clear()
    assert permissions.check(client.ApiClient(), "nodeplan", leases=False) == missing
    assert not any(res == "leases" for _, _, res, _ in fake.asked)
    one = permissions.Permission("resource.k8s.io", "resourceclaims", ("list",), "DRA")
    assert str(permissions.MissingPermissions([permissions.Missing(one, "list", "")])) == (
        "missing RBAC permission: list resourceclaims.resource.k8s.io (grant them as deploy/controller.yaml does)")


def test_cli_exits_2_with_one_line_when_a_permission_is_missing(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    fake = FakeAuthz({("list", "karpenter.sh", "nodepools")})
    monkeypatch.setattr(permissions.client, "AuthorizationV1Api", lambda api: fake)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: missing RBAC permission: list nodepools.karpenter.sh (grant them as deploy/controller.yaml does)"]


# -- leader election ---------------------------------------------------------------------------------------
class MemoryLease:
    """One Lease with optimistic concurrency (a write must carry the resourceVersion it read)."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0

    def get(self) -> LeaseRecord | None:
        return self.record

    def _write(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record

    def create(self, record: LeaseRecord) -> LeaseRecord:
        if self.record is not None:
            raise Conflict()
        return self._write(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        if self.record is None or record.resource_version != self.record.resource_version:
            raise Conflict()
        return self._write(record)


class Partitioned:
    """The same Lease as seen by a replica whose API calls can be cut off."""

    def __init__(self, lease: MemoryLease) -> None:
        self.lease = lease
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("partitioned")

    def get(self) -> LeaseRecord | None:
        self._check()
        return self.lease.get()

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        return self.lease.create(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        return self.lease.update(record)


def test_leader_election_state_machine() -> None:
    clock = Clock(0.0)
    lease = MemoryLease()
    a_store, b_store = Partitioned(lease), Partitioned(lease)
    events: list[str] = []
    a = LeaderElector(a_store, "a", clock=clock, wall=clock, on_started=lambda: events.append("a started"),
                      on_stopped=lambda: events.append("a stopped"))
    b = LeaderElector(b_store, "b", clock=clock, wall=clock, on_started=lambda: events.append("b started"))
    assert a.tick() == 2.0 and a.leading
    b.tick()
    assert not b.leading and lease.record is not None and lease.record.holder == "a"
    for _ in range(10):  # a renews every 2 s; b never sees it expire
        clock.now += 2
        a.tick()
        b.tick()
    assert a.leading and not b.leading and lease.record.transitions == 0
    # a is cut off from the API server: it keeps leading until the renew deadline (10 s), then steps down
    a_store.down = True
    clock.now += 8
    a.tick()
    assert a.leading
    clock.now += 2
    a.tick()
    assert not a.leading and a.lost.is_set() and events == ["a started", "a stopped"]
    # b takes over once the record has not changed for a whole lease duration (15 s) by b's own clock
    clock.now += 4
    b.tick()
    assert not b.leading  # 14 s since b last saw the record change
    clock.now += 1
    b.tick()
    assert b.leading and lease.record.holder == "b" and lease.record.transitions == 1
    assert events == ["a started", "a stopped", "b started"]
    # a clean release lets the next candidate in at once
    c = LeaderElector(Partitioned(lease), "c", clock=clock, wall=clock)
    c.tick()
    assert not c.leading
    assert b.release() and lease.record.holder == "" and not b.leading
    c.tick()
    assert c.leading and lease.record.transitions == 2


def test_leader_steps_down_at_once_when_someone_else_holds_the_lease() -> None:
    clock = Clock(0.0)
    lease = MemoryLease()
    a = LeaderElector(Partitioned(lease), "a", clock=clock, wall=clock)
    a.tick()
    assert a.leading and lease.record is not None
    lease.record = replace(lease.record, holder="intruder", resource_version="99")  # e.g. a forced takeover
    clock.now += 2
    a.tick()
    assert not a.leading and a.lost.is_set()


def test_leader_election_timings_are_validated() -> None:
    with pytest.raises(ValueError):
        LeaderElector(Partitioned(MemoryLease()), "a", lease_duration=10, renew_deadline=10)


# -- NodePool status ---------------------------------------------------------------------------------------
def nodepool(name: str, requirements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name, "uid": name},
            "spec": {"template": {"spec": {"requirements": requirements, "nodeClassRef": {
                "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}


def test_nodepool_validation_condition_and_resources() -> None:
    bad = nodepool("bad", [{"key": "kubernetes.io/arch", "operator": "In", "values": []}])
    good = nodepool("good", [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}])
    assert validation_error(good) is None
    # what our CRD schema already rejects at admission, but a Karpenter CRD (or an older schema) may let through
    odd = nodepool("odd", [{"key": "kubernetes.io/arch", "operator": "Sometimes", "values": ["amd64"]}])
    assert "unknown operator 'Sometimes'" in (validation_error(odd) or "")
    greedy = nodepool("greedy", [])
    greedy["spec"]["limits"] = {"cpu": "lots"}
    assert "invalid quantity 'lots'" in (validation_error(greedy) or "")
    error = validation_error(bad)
    assert error is not None and "spec.template.spec.requirements[0]" in error and "at least one value" in error
    claims = [{"metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "good"}},
               "status": {"capacity": {"cpu": "4", "memory": "16Gi"}}},
              {"metadata": {"name": "c2", "labels": {"karpenter.sh/nodepool": "good"}}, "status": {}},
              {"metadata": {"name": "c3", "labels": {"karpenter.sh/nodepool": "other"}},
               "status": {"capacity": {"cpu": "64"}}}]
    status = desired_status(good, claims)
    assert status["nodes"] == 2 and status["resources"] == {"cpu": "4", "memory": "16Gi"}
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["ValidationSucceeded"]["status"] == "True"
    bad_status = desired_status(bad, claims)
    validation = next(c for c in bad_status["conditions"] if c["type"] == "ValidationSucceeded")
    assert (validation["status"], validation["reason"]) == ("False", "NodePoolValidationFailed")
    assert validation["message"] == error
    # an unchanged condition keeps its transition time; someone else's condition is kept
    stamped = {**conditions["ValidationSucceeded"], "lastTransitionTime": "2020-01-01T00:00:00Z"}
    good["status"] = {"conditions": [stamped, {"type": "NodeClassReady", "status": "True"}]}
    again = {c["type"]: c for c in desired_status(good, claims)["conditions"]}
    assert again["ValidationSucceeded"]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert again["NodeClassReady"]["status"] == "True"


# -- the Events a batch produces (a real solve, no cluster) ------------------------------------------------
class FakeCustom:
    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: dict[str, Any],
                                     **_: Any) -> dict[str, Any]:
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "1", "uid": "claim-uid"}}


def pending_pod(name: str, cpu: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
                     **spec},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                           "reason": "Unschedulable"}]}}


def test_a_batch_nominates_placed_pods_and_reports_unplaceable_ones() -> None:
    controller = Controller(client.ApiClient(), ControllerOptions(provisioner=ProvisionerOptions(
        solve_time_limit=2.0)))
    controller.provisioner._custom = FakeCustom()  # type: ignore[assignment]
    fake = FakeEvents()
    controller.events._core = fake  # type: ignore[assignment]
    pool = nodepool("small", [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}])
    pool["spec"]["limits"] = {"cpu": "8"}
    pool["metadata"]["resourceVersion"] = "1"
    controller.cache.upsert("NodePool", pool)
    pods = [pending_pod(f"fits-{i}", "1") for i in range(3)] + [pending_pod("huge", "20"),
            pending_pod("arm", "1", nodeSelector={"kubernetes.io/arch": "s390x"})]
    for p in pods:
        controller.cache.upsert("Pod", p)
    pending = controller.provisioner.pending()
    assert set(pending) == {f"shop/{p['metadata']['name']}" for p in pods}
    record = controller.provisioner.provision(pending)
    controller._observe_batch(record, pending)
    controller.events.drain()
    by_pod = {(e["involvedObject"]["name"], e["reason"]): e["message"] for e in fake.created}
    claim = next(iter(record.claims))
    for i in range(3):
        assert by_pod[(f"fits-{i}", "Nominated")] == f"Pod should schedule on: nodeclaim/{claim}"
    assert "limit" in by_pod[("huge", "FailedScheduling")], by_pod
    assert "s390x" in by_pod[("arm", "FailedScheduling")], by_pod
    assert not any(name in ("huge", "arm") for name, reason in by_pod if reason == "Nominated")
    assert controller.metrics.value("karpenter_nodeclaims_created_total", {  # Karpenter's labels
        "reason": "provisioning", "nodepool": "small", "min_values_relaxed": "false"}) == 1
    assert controller.metrics.value("karpenter_scheduler_unschedulable_pods_count", {"controller": "provisioner"}) == 2
    # the next batch reporting the same reasons sends nothing new
    controller._observe_batch(record, pending)
    controller.events.drain()
    assert len(fake.created) == len(by_pod)


# -- controller wiring: provider errors, terminated claims, liveness ---------------------------------------
class FailingLauncher:
    def __init__(self) -> None:
        self.fail = True

    name = "kwok"

    def create(self, claim: Any) -> Any:
        from providers.protocol import InsufficientCapacityError, Launched
        if self.fail:
            raise InsufficientCapacityError("no available offering c-4x test-zone-a spot")
        status = claim.status.model_copy(update={"node_name": claim.name})
        return Launched(claim.model_copy(update={"status": status}))

    def delete(self, claim: Any) -> None:
        raise client.ApiException(status=500, reason="boom")


def test_provider_errors_count_and_launches_are_events() -> None:
    from controller.run import ObservedProvider
    from model.nodepool import NodeClaim

    metrics = Metrics()
    events, fake = recorder(Clock())
    inner = FailingLauncher()
    launcher = ObservedProvider(inner, events, metrics)  # type: ignore[arg-type]
    claim = NodeClaim.model_validate({"metadata": {"name": "general-abc", "uid": "c1", "labels": {
        "node.kubernetes.io/instance-type": "c-4x", "topology.kubernetes.io/zone": "test-zone-a",
        "karpenter.sh/capacity-type": "spot"}}, "spec": {"nodeClassRef": {
            "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}})
    with pytest.raises(Exception, match="no available offering"):
        launcher.create(claim)
    inner.fail = False
    launcher.create(claim)
    with pytest.raises(client.ApiException):
        launcher.delete(claim)
    events.drain()
    assert [(e["reason"], e["involvedObject"]["kind"]) for e in fake.created] == [
        ("LaunchFailed", "NodeClaim"), ("Launched", "NodeClaim")]
    assert fake.created[1]["message"] == "Launched c-4x in test-zone-a (spot) as node general-abc"
    assert metrics.value("karpenter_cloudprovider_errors_total", {
        "controller": "nodeclaim.lifecycle", "method": "Create", "provider": "kwok",
        "error": "InsufficientCapacityError"}) == 1
    assert metrics.value("karpenter_cloudprovider_errors_total", {
        "controller": "nodeclaim.termination", "method": "Delete", "provider": "kwok", "error": "ApiException"}) == 1


def test_terminated_claims_are_counted_and_a_stalled_loop_fails_liveness() -> None:
    controller = Controller(client.ApiClient(), ControllerOptions())
    for name in ("a", "b"):
        controller.cache.upsert("NodeClaim", {"metadata": {"name": name, "resourceVersion": "1",
                                                           "labels": {"karpenter.sh/nodepool": "general"}}})
    controller._count_terminated()  # first look: nothing counted
    controller.cache.informers["NodeClaim"]._store.pop("a")
    controller._count_terminated()
    controller._count_terminated()
    assert controller.metrics.value("karpenter_nodeclaims_terminated_total", {
        "nodepool": "general", "capacity_type": "", "zone": ""}) == 1
    assert controller.ready() == (False, "cache not synced")
    controller.synced.set()
    assert controller.ready() == (True, "cache synced; leader")
    assert controller.healthy()[0]
    controller._ticks["provisioning"] = time.monotonic() - 1000  # the loop last came round long ago: wedged
    ok, why = controller.healthy()
    assert not ok and why.startswith("provisioning loop stalled")


class FakeStatus:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def patch_cluster_custom_object_status(self, group: str, version: str, plural: str, name: str,
                                           body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((name, body))
        current = next(p for p in self.cache.items("NodePool") if p["metadata"]["name"] == name)
        resources = {k: v for k, v in body["status"]["resources"].items() if v is not None}
        version_ = str(int(current["metadata"]["resourceVersion"]) + 1)
        return {**current, "metadata": {**current["metadata"], "resourceVersion": version_},
                "status": {**body["status"], "resources": resources}}


def test_nodepool_status_is_written_once_per_change() -> None:
    from controller.nodepool_status import NodePoolStatusWriter

    bad = nodepool("bad", [{"key": "kubernetes.io/arch", "operator": "In", "values": []}])
    good = nodepool("good", [])
    cache = cache_with(NodePool=[bad, good])
    events, fake_events = recorder(Clock())
    writer = NodePoolStatusWriter(client.ApiClient(), cache, events)
    fake = FakeStatus(cache)
    writer._custom = fake  # type: ignore[assignment]
    assert writer.reconcile() == 2
    assert writer.reconcile() == 0 and writer.reconcile() == 0  # nothing changed: no writes, no new Events
    events.drain()
    assert [(e["involvedObject"]["name"], e["reason"]) for e in fake_events.created] == [("bad", "FailedValidation")]
    assert events.suppressed == 0
    assert set(writer.invalid) == {"bad"}
    cache.upsert("NodeClaim", {"metadata": {"name": "c1", "resourceVersion": "5",
                                            "labels": {"karpenter.sh/nodepool": "good"}},
                               "status": {"capacity": {"cpu": "2"}}})
    assert writer.reconcile() == 1
    name, body = fake.patches[-1]
    assert name == "good" and body["status"]["nodes"] == 1 and body["status"]["resources"] == {"cpu": "2"}
    cache.informers["NodeClaim"]._store.clear()
    assert writer.reconcile() == 1
    assert fake.patches[-1][1]["status"]["resources"] == {"cpu": None}  # removed explicitly in the merge patch


def test_preflight_asks_about_the_configured_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    import cli.run

    asked: dict[str, Any] = {}
    monkeypatch.setattr(permissions, "check", lambda api, ns, rows, **kw: asked.update(kw) or [])
    cli.run.preflight(client.ApiClient(), "nodeplan", True, lease_name="my-lease")
    assert asked == {"leases": True, "lease_name": "my-lease"}


def test_registration_waits_for_a_batch_gathering_in_the_window_not_only_one_being_decided() -> None:
    """Pods gathering in an open batch window are decided next: the lifecycle's barrier sees how long the window
    has been open (it waits for the one open as its claims launched), and can have it decided at once."""
    controller = Controller(client.ApiClient(), ControllerOptions())
    lifecycle = controller.lifecycle
    assert lifecycle._gathering() is None and not lifecycle._deciding()
    opened = time.monotonic()
    controller.window.observe({"default/late": "1"}, opened)
    age = lifecycle._gathering()
    assert age is not None and 0 <= age < 1.0 and not lifecycle._deciding()
    assert not controller.window.ready(time.monotonic())
    lifecycle._decide_now()
    assert controller.window.ready(time.monotonic()) and controller.window.deadline() == opened
    controller.window.close({})
    assert lifecycle._gathering() is None
    controller.window.observe({"default/next": "1"}, time.monotonic())
    assert not controller.window.ready(time.monotonic())  # decided now was that window, not the next one
    controller.provisioner._deciding.set()
    assert lifecycle._deciding()
