"""In-flight NodeClaims are capacity: pending pods go into the room a launched-but-not-joined NodeClaim has left
(after the pods already planned onto it), the plan launches nothing for them, and the verifier accepts that
plan — but not one that overfills such a claim, uses a claim that failed or is being deleted, or ignores its
taints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from model.inflight import node_views
from model.plan import ProvisioningPlan
from model.snapshot import Snapshot, load_snapshot
from providers.kwok import kwok_catalog
from solver.provision import SolveOptions, solve
from solver.verify import verify

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "snapshots" / "inflight.yaml"
CAPACITY = {"general-launched", "general-creating", "general-joining"}


@pytest.fixture(scope="module")
def snapshot() -> Snapshot:
    return load_snapshot(FIXTURE).with_catalog(kwok_catalog())


@pytest.fixture(scope="module")
def plan(snapshot: Snapshot) -> dict[str, Any]:
    return solve(snapshot, SolveOptions(time_limit=5.0)).plan.to_json_dict()


def test_node_views(snapshot: Snapshot) -> None:
    views = {v.node.name: v for v in node_views(snapshot)}
    assert set(views) == CAPACITY | {"general-tainted"}
    assert all(v.inflight and not v.initialized for v in views.values())
    launched = views["general-launched"].node
    assert launched.allocatable.to_quantities()["cpu"] == "3900m"  # the instance type's, from the catalog
    assert launched.labels["topology.kubernetes.io/zone"] == "test-zone-a"
    assert launched.labels["kubernetes.io/arch"] == "amd64"  # from the instance type
    assert launched.labels["kubernetes.io/hostname"] == "general-launched"
    # the joined Node: about to lose its unregistered taint and to turn Ready
    joining = views["general-joining"].node
    assert joining.ready and not joining.taints
    assert [t.key for t in views["general-tainted"].node.taints] == ["dedicated"]


def test_pending_pods_go_into_inflight_room_and_nothing_is_launched(snapshot: Snapshot,
                                                                    plan: dict[str, Any]) -> None:
    assert plan["nodeClaims"] == [] and plan["unschedulable"] == []
    placed = {pod: node["name"] for node in plan["existingNodes"] for pod in node["pods"]}
    assert set(placed) == {"shop/web-0", "shop/web-1", "shop/tiny-0"}
    assert set(placed.values()) <= CAPACITY
    # 1500m and 1200m cannot share either the 4-vCPU claim (1900m left) or the 2-vCPU Node (1400m left)
    assert placed["shop/web-0"] != placed["shop/web-1"]
    assert verify(snapshot, ProvisioningPlan.model_validate(plan)) == []


def test_without_the_claims_the_same_pods_need_new_nodes(snapshot: Snapshot) -> None:
    bare = snapshot.model_copy(update={"nodeclaims": ()})
    plan = solve(bare, SolveOptions(time_limit=5.0)).plan
    assert plan.node_claims and plan.cost.total > 0


def _moved(plan: dict[str, Any], node: str, pods: list[str]) -> ProvisioningPlan:
    data = json.loads(json.dumps(plan))
    for entry in data["existingNodes"]:
        entry["pods"] = [p for p in entry["pods"] if p not in pods]
    data["existingNodes"] = [e for e in data["existingNodes"] if e["pods"]] + [{"name": node, "pods": pods}]
    return ProvisioningPlan.model_validate(data)


@pytest.mark.parametrize(("node", "pods", "needle"), [
    ("general-launched", ["shop/web-0", "shop/web-1"], "is free"),      # 2700m into 1900m
    ("general-joining", ["shop/web-0"], "is free"),                     # 1500m into 1400m
    ("general-failed", ["shop/tiny-0"], "not in the snapshot"),
    ("general-deleting", ["shop/tiny-0"], "not in the snapshot"),
    ("general-tainted", ["shop/tiny-0"], "does not tolerate"),
])
def test_verifier_rejects_misuse_of_inflight_claims(snapshot: Snapshot, plan: dict[str, Any], node: str,
                                                    pods: list[str], needle: str) -> None:
    violations = verify(snapshot, _moved(plan, node, pods))
    assert any(needle in v for v in violations), violations


def test_cli_solve_and_verify(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    runner = CliRunner()
    result = runner.invoke(app, ["solve", str(FIXTURE), "--output-file", str(out), "--time-limit", "5", "--quiet"])
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert written["nodeClaims"] == []
    assert {n["name"] for n in written["existingNodes"]} <= CAPACITY
    result = runner.invoke(app, ["verify", str(FIXTURE), str(out)])
    assert result.exit_code == 0, result.output
