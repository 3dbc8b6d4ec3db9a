"""DRA on and off (issue #11 item 6): ``nodeplan run --dra/--no-dra``, ``NODEPLAN_DRA`` and Kubernetes'
``DynamicResourceAllocation`` feature gate.

What is asserted comes from Karpenter's ``--ignore-dra-requests`` (``pkg/operator/options``,
``provisioning/scheduling/scheduler.go``: a pod with ``spec.resourceClaims`` or a container's
``resources.claims`` is not provisioned for and gets a ``FailedScheduling`` warning Event) and its #3249 (a
controller without DRA RBAC must not crash-loop): with DRA off nothing of ``resource.k8s.io`` is asked for, read
or written; with DRA on a missing DRA verb is one line naming the verb and resource, exit 2.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

import cli.run
from cli.app import app
from cli.settings import KARPENTER_NAMES, TOOLING
from controller import permissions
from controller.cache import resources
from controller.kinds import READ
from controller.provisioner import DRA_DISABLED, Provisioner, ProvisionerOptions, has_dra_requirements
from controller.run import Controller, ControllerOptions
from tests.unit.test_operations import FakeAuthz
from tests.unit.test_shadow import NODEPOOL, NoWrites, fake_cache, pending_pod

ROOT = Path(__file__).resolve().parents[2]
DRA_CATALOG = ROOT / "fixtures" / "catalogs" / "kwok-dra.yaml"
DRA_KINDS = {"DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"}
#: every verb on every resource.k8s.io resource the controller could ask for
ALL_DRA_DENIED = {(verb, p.group, p.rbac_resource) for p in permissions.REQUIRED if p.group == "resource.k8s.io"
                  for verb in p.verbs}


# -- the permission table and the cache ----------------------------------------------------------------------
def test_dra_off_drops_exactly_the_dra_rows() -> None:
    on, off = permissions.required(), permissions.required(dra=False)
    assert {p.group for p in on} >= {"resource.k8s.io"}
    assert [p for p in on if p.group != "resource.k8s.io"] == list(off)
    # the reads of all four DRA kinds and the KWOK provider's slice publishing are the rows that go
    assert {(p.resource, v) for p in on if p not in off for v in p.verbs} == {
        *((r, v) for r in ("deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices")
          for v in ("get", "list", "watch")), ("resourceslices", "create")}
    shadow_off = permissions.required(shadow=True, dra=False)
    assert shadow_off and all(p.shadow and p.group != "resource.k8s.io" for p in shadow_off)


def test_the_cache_watches_the_dra_kinds_only_with_dra_on() -> None:
    api = client.ApiClient()
    assert set(resources(api)) >= DRA_KINDS
    off = set(resources(api, dra=False))
    assert off == {k.kind for k in READ} - DRA_KINDS


# -- the command line --------------------------------------------------------------------------------------------
class Started:
    def __init__(self) -> None:
        self.options: list[ControllerOptions] = []
        self.catalogs: list[Any] = []


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Started, Path]:
    """``nodeplan run`` with the real permission check against a fake authorizer, the controller replaced by a
    recorder; no environment leaks in."""
    for name in list(os.environ):
        if (name.startswith("NODEPLAN_") and name not in TOOLING) or name in KARPENTER_NAMES.values():
            monkeypatch.delenv(name)
    record = Started()

    class Recorder:
        lost_leadership = crashed = False

        def __init__(self, api: Any, options: ControllerOptions, instance_types: Any) -> None:
            record.options.append(options)
            record.catalogs.append(instance_types)

        def run(self, stop: Any) -> None:
            return None

    monkeypatch.setattr(cli.run, "configure_logging", lambda level, **_: None)
    monkeypatch.setattr(cli.run, "Controller", Recorder)
    monkeypatch.setattr(signal, "signal", lambda signum, handler: None)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return record, kubeconfig


def invoke(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, denied: set[tuple[str, str, str]],
           args: list[str], env: dict[str, str] | None = None) -> tuple[Any, FakeAuthz]:
    fake = FakeAuthz(denied)
    monkeypatch.setattr(client, "AuthorizationV1Api", lambda api: fake)
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(kubeconfig), "--catalog", str(DRA_CATALOG),
                                      *args], env=env or {})
    return result, fake


WARNING = ("warning: DRA is disabled: ResourceClaims, DeviceClasses and ResourceSlices are not read, and pods with "
           "resource claims are left to others")


@pytest.mark.parametrize(("args", "env"), [
    (["--no-dra"], {}),
    ([], {"NODEPLAN_DRA": "false"}),
    ([], {"FEATURE_GATES": "DynamicResourceAllocation=false"}),
    ([], {"NODEPLAN_FEATURE_GATES": "DynamicResourceAllocation=false,SpotToSpotConsolidation=true"}),
])
def test_dra_off_starts_without_dra_rbac_and_warns_once(started: tuple[Started, Path], monkeypatch: pytest.MonkeyPatch,
                                                         args: list[str], env: dict[str, str]) -> None:
    record, kubeconfig = started
    result, fake = invoke(kubeconfig, monkeypatch, ALL_DRA_DENIED, args, env)
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [WARNING]
    assert record.options[-1].provisioner.dra is False
    assert not any(group == "resource.k8s.io" for _, group, _, _ in fake.asked)  # not even asked
    # the KWOK provider plays the DRA driver from the inventories: with DRA off no node publishes devices
    assert not any(it.resource_slices for it in record.catalogs[-1])


def test_dra_on_by_default_and_the_flag_beats_the_gate(started: tuple[Started, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    record, kubeconfig = started
    result, fake = invoke(kubeconfig, monkeypatch, set(), [])
    assert result.exit_code == 0 and result.stderr == ""
    assert record.options[-1].provisioner.dra is True
    assert {("list", "resourceclaims"), ("create", "resourceslices")} <= {
        (verb, res) for verb, group, res, _ in fake.asked if group == "resource.k8s.io"}
    assert any(it.resource_slices for it in record.catalogs[-1])
    result, _ = invoke(kubeconfig, monkeypatch, set(), ["--dra"], {"FEATURE_GATES": "DynamicResourceAllocation=false"})
    assert result.exit_code == 0 and result.stderr == ""
    assert record.options[-1].provisioner.dra is True


@pytest.mark.parametrize(("denied", "line"), [
    (("list", "resource.k8s.io", "resourceclaims"), "list resourceclaims.resource.k8s.io"),
    (("watch", "resource.k8s.io", "resourceslices"), "watch resourceslices.resource.k8s.io"),
    (("create", "resource.k8s.io", "resourceslices"), "create resourceslices.resource.k8s.io"),
])
def test_dra_on_and_a_missing_dra_verb_is_one_line_and_exit_2(started: tuple[Started, Path],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              denied: tuple[str, str, str], line: str) -> None:
    record, kubeconfig = started
    result, _ = invoke(kubeconfig, monkeypatch, {denied}, [])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: missing RBAC permission: {line} (grant them as deploy/controller.yaml does)"]
    assert record.options == []  # the controller never started


def test_unknown_gate_lists_the_dra_gate(started: tuple[Started, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, kubeconfig = started
    result, _ = invoke(kubeconfig, monkeypatch, set(), [], {"FEATURE_GATES": "DynamicResourceAlocation=false"})
    assert result.exit_code == 2
    [message] = result.output.strip().splitlines()
    assert message.startswith("error: FEATURE_GATES='DynamicResourceAlocation=false': unknown feature gate")
    assert "DynamicResourceAllocation" in message


# -- provisioning with DRA off ---------------------------------------------------------------------------------
def claim_pod(i: int, where: str) -> dict[str, Any]:
    pod = pending_pod(100 + i)
    pod["metadata"]["name"] = f"gpu-{i}"
    if where == "pod":
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    else:  # a container naming a claim (the pod-level list is what the API server requires with it; Karpenter
        # checks both)
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return pod


def test_has_dra_requirements_reads_pod_and_container_claims() -> None:
    assert has_dra_requirements(claim_pod(0, "pod")) and has_dra_requirements(claim_pod(1, "container"))
    assert not has_dra_requirements(pending_pod(0))


def test_pods_with_claims_are_left_pending_with_an_event_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    options = ControllerOptions(provisioner=ProvisionerOptions(solve_time_limit=3.0, dra=False))
    controller = Controller(NoWrites(), options)
    assert not DRA_KINDS & set(controller.cache.informers)  # nothing of resource.k8s.io is watched
    cache = fake_cache()
    cache.upsert("NodePool", NODEPOOL)
    plain, gpu, other = pending_pod(1), claim_pod(0, "pod"), claim_pod(1, "container")
    for pod in (plain, gpu, other):
        cache.upsert("Pod", pod)
    provisioner = Provisioner(NoWrites(), cache, controller.provisioner._catalog, options.provisioner)
    batch = provisioner.pending()
    assert set(batch) == {"default/web-1", "default/gpu-0", "default/gpu-1"}  # still pending pods, not hidden
    with caplog.at_level(logging.WARNING, logger="controller.provisioner"):
        record, bodies = provisioner.plan(batch)
        again, _ = provisioner.plan(batch)
    plan = record.plan
    assert [p for c in plan.node_claims for p in c.pods] == ["default/web-1"]
    assert {(u.pod, u.reason) for u in plan.unschedulable} == {("default/gpu-0", DRA_DISABLED),
                                                              ("default/gpu-1", DRA_DISABLED)}
    assert record.pods == 3 and len(bodies) == 1
    assert {u.pod for u in again.plan.unschedulable} == {"default/gpu-0", "default/gpu-1"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "DRA is disabled" in warnings[0] and "default/gpu-0" in warnings[0]
    # the controller turns each into a FailedScheduling warning Event on the pod, as Karpenter's ignore does
    sent: list[tuple[str, str, str]] = []
    events = controller.events
    events.warning = lambda obj, reason, message: sent.append(  # type: ignore[method-assign]
        (obj["metadata"]["name"], reason, message))
    events.normal = lambda obj, reason, message: None  # type: ignore[method-assign]
    controller._observe_batch(record, batch)
    assert sorted(sent) == [(name, "FailedScheduling", f"Failed to schedule pod: {DRA_DISABLED}")
                            for name in ("gpu-0", "gpu-1")]


def test_with_dra_on_a_pod_with_claims_is_planned() -> None:
    cache = fake_cache()
    cache.upsert("NodePool", NODEPOOL)
    gpu = claim_pod(0, "pod")
    cache.upsert("Pod", gpu)
    provisioner = Provisioner(NoWrites(), cache, (), ProvisionerOptions(solve_time_limit=3.0))
    record, _ = provisioner.plan(provisioner.pending())
    # the solver decides it (here: its template is missing, so the DRA rule's reason, not the switch's)
    [item] = record.plan.unschedulable
    assert (item.pod, item.reason) == ("default/gpu-0",
                                       "DRA resource claims: resourceclaimtemplate default/one-gpu not found")


def test_with_dra_off_consolidation_never_moves_a_pod_with_claims() -> None:
    """With DRA off the cache holds no claims, slices or templates: a running pod's claim cannot be found, so it
    is never moved (where would its devices be?) — the two half-empty GPU nodes that merge with DRA on
    (``tests/disruption/test_dra_consolidation.py``) stay as they are."""
    from model.snapshot import parse_objects
    from solver.disruption.consolidate import ConsolidateOptions
    from solver.disruption.plan import consolidate
    from solver.disruption.verify import verify_disruption
    from tests.disruption.helpers import NOW
    from tests.disruption.test_dra_consolidation import CATALOG, _gpu_node, _gpu_pod, _pool

    def without_dra(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [o for o in objects if o.get("apiVersion") != "resource.k8s.io/v1"]

    objects = without_dra([_pool(), *_gpu_node("gpu-a"), *_gpu_node("gpu-b"),
                           *_gpu_pod("train-0", "gpu-a", "gpu-0"), *_gpu_pod("train-1", "gpu-b", "gpu-0")])
    assert any(o["kind"] == "Pod" and o["spec"].get("resourceClaims") for o in objects)
    snapshot = parse_objects(objects, source="test").with_catalog(tuple(
        it.model_copy(update={"resource_slices": ()}) for it in CATALOG))
    plan = consolidate(snapshot, ConsolidateOptions(now=NOW, time_limit=3.0)).plan
    assert verify_disruption(snapshot, plan, NOW) == []
    assert not plan.remove and not plan.moves
