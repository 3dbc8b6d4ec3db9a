"""``nodeplan consolidate`` and ``nodeplan verify`` on DisruptionPlans as users meet them; the eviction cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from bench.fragmented import split_cluster
from cli.app import app
from model.pod import Pod
from solver.disruption.candidates import DELETION_COST, eviction_cost
from tests.disruption.helpers import (
    consolidate_verified,
    keeper_and_target,
    node,
    nodepool,
    on_demand_pool,
    pinned,
    running,
)

runner = CliRunner()
NOW_ARG = ("--now", "2026-11-29T00:00:00Z")


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _write(tmp_path: Path, objects: list[dict[str, Any]], name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objects))
    return path


def _cluster() -> list[dict[str, Any]]:
    """split_cluster plus a guarded node (do-not-disrupt) and an idle one."""
    return [*split_cluster(), node("guarded", annotations={"karpenter.sh/do-not-disrupt": "true"}),
            pinned("g-pod", "guarded"), node("idle")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("cli"), _cluster())


def test_table_output(cluster: Path) -> None:
    code, stdout, _ = _run("consolidate", str(cluster), *NOW_ARG, "--time-limit", "3")
    assert code == 0
    for text in ("Remove", "big-0", "idle", "Empty", "Replacements", "c-32x-amd64-linux", "Cost:",
                 "Karpenter-style consolidation", "Budget default"):
        assert text in stdout, text
    assert "guarded" not in stdout  # only --explain lists the nodes that stay


def test_explain_lists_why_nodes_stay(cluster: Path) -> None:
    code, stdout, _ = _run("consolidate", str(cluster), *NOW_ARG, "--time-limit", "3", "--explain")
    assert code == 0
    assert "guarded: node has karpenter.sh/do-not-disrupt" in stdout
    assert "idle: candidate (Empty)" in stdout
    assert "big-0: candidate (Underutilized)" in stdout


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_output(cluster: Path, fmt: str) -> None:
    code, stdout, _ = _run("consolidate", str(cluster), *NOW_ARG, "--time-limit", "3", "-o", fmt)
    assert code == 0
    plan = json.loads(stdout) if fmt == "json" else yaml.safe_load(stdout)
    assert plan["kind"] == "DisruptionPlan"
    assert {r["node"]: r["reason"] for r in plan["remove"]} == {"big-0": "Underutilized", "idle": "Empty"}
    assert {"name", "nodePool", "instanceType", "zone", "capacityType", "price", "pods"} <= set(plan["nodeClaims"][0])
    assert {"pod", "from", "to"} == set(plan["moves"][0])
    assert {"before", "after", "savings", "lowerBound", "yardstickSavings"} <= set(plan["cost"])
    assert plan["disruption"] == {"evictions": 2, "cost": 2.0}
    assert plan["budgets"] == [{"nodePool": "default", "reasons": ["Drifted", "Empty", "Underutilized"],
                                "allowed": 3, "used": 2, "window": ""}]
    assert plan["solver"]["status"] in ("OPTIMAL", "FEASIBLE")


def test_output_file_then_verify(cluster: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, stdout, _ = _run("consolidate", str(cluster), *NOW_ARG, "--time-limit", "3", "--output-file", str(out))
    assert code == 0 and "Remove" in stdout  # table on stdout, JSON in the file
    plan = json.loads(out.read_text())
    assert plan["kind"] == "DisruptionPlan"
    code, stdout, stderr = _run("verify", str(cluster), str(out), *NOW_ARG)
    assert code == 0 and stdout == "" and "plan is valid" in stderr

    yaml_out = tmp_path / "plan.yaml"
    code, stdout, _ = _run("consolidate", str(cluster), *NOW_ARG, "--time-limit", "3", "-o", "yaml",
                           "--output-file", str(yaml_out))
    assert code == 0 and stdout == ""
    assert yaml.safe_load(yaml_out.read_text())["kind"] == "DisruptionPlan"
    assert _run("verify", str(cluster), str(yaml_out), *NOW_ARG)[0] == 0


def test_verify_exits_1_on_a_broken_disruption_plan(cluster: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    assert _run("consolidate", str(cluster), *NOW_ARG, "--time-limit", "3", "-o", "json",
                "--output-file", str(out))[0] == 0
    plan = json.loads(out.read_text())
    plan["remove"].append({"node": "guarded", "nodePool": "default", "reason": "Underutilized",
                           "price": 0.1, "evictions": 1})
    plan["cost"]["after"] = 0.0
    out.write_text(json.dumps(plan))
    code, stdout, stderr = _run("verify", str(cluster), str(out), *NOW_ARG)
    assert code == 1
    assert "remove guarded: may not be disrupted" in stdout and "pod default/g-pod" in stdout
    assert "cost.after" in stdout and "violation(s)" in stderr


def test_verify_depends_on_now(tmp_path: Path) -> None:
    # a plan made at midnight, checked inside a no-disruption window, is refused
    objects = _cluster()
    objects[0]["spec"]["disruption"]["budgets"] = [{"nodes": "0", "schedule": "0 9 * * *", "duration": "1h"},
                                                   {"nodes": "100%"}]
    path = _write(tmp_path, objects)
    out = tmp_path / "plan.json"
    assert _run("consolidate", str(path), *NOW_ARG, "--time-limit", "3", "-o", "json",
                "--output-file", str(out))[0] == 0
    assert json.loads(out.read_text())["remove"]
    assert _run("verify", str(path), str(out), *NOW_ARG)[0] == 0
    code, stdout, _ = _run("verify", str(path), str(out), "--now", "2026-11-29T09:30:00Z")
    assert code == 1 and "its budget allows 0 (0 9 * * * for 1h)" in stdout


def test_snapshot_without_nodepools_is_one_line_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, [o for o in _cluster() if o["kind"] != "NodePool"])
    code, stdout, stderr = _run("consolidate", str(path), *NOW_ARG)
    assert code == 2 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr
    assert str(path) in lines[0] and "no NodePools" in lines[0] and "kubectl get nodepools" in lines[0]


@pytest.mark.parametrize("args", [("--now", "yesterday"), ("--time-limit", "0.1")])
def test_bad_options_exit_2(cluster: Path, args: tuple[str, str]) -> None:
    code, _, stderr = _run("consolidate", str(cluster), *args)
    assert code == 2 and "Traceback" not in stderr


# --- eviction cost: 1 + deletion-cost/2^27 + priority/2^25, clamped to [-10, 10] ------------------------------------

def _pod(deletion_cost: str | None = None, priority: int = 0) -> Pod:
    annotations = {DELETION_COST: deletion_cost} if deletion_cost is not None else {}
    return Pod(namespace="default", name="p", annotations=annotations, priority=priority)


@pytest.mark.parametrize(("deletion_cost", "priority", "expected"), [
    (None, 0, 1.0),
    (str(2**27), 0, 2.0),
    (None, 2**25, 2.0),
    (str(-(2**26)), 2**24, 1.0),
    (str(2**27), 2**25, 3.0),
    (str(-(2**31)), 0, -10.0),      # 1 − 16 clamped
    (None, 1_000_000_000, 10.0),    # 1 + 29.8 clamped
    ("not-a-number", 0, 1.0),
])
def test_eviction_cost_formula(deletion_cost: str | None, priority: int, expected: float) -> None:
    assert eviction_cost(_pod(deletion_cost, priority)) == pytest.approx(expected)


def test_plan_disruption_cost_sums_the_evicted_pods(tmp_path: Path) -> None:
    objects = [on_demand_pool(), node("keeper", "c-8x"), pinned("keep-pod", "keeper"), node("target")]
    costs = {"cheap": (str(-(2**27)), 0), "dear": (str(2**28), 2**25), "critical": (None, 2_000_000_000)}
    for name, (deletion, priority) in costs.items():
        obj = running(name, "target", "500m",
                      annotations={DELETION_COST: deletion} if deletion is not None else None)
        obj["spec"]["priority"] = priority
        objects.append(obj)
    result = consolidate_verified(objects)
    assert result.plan.disruption.evictions == 3
    assert result.plan.disruption.cost == pytest.approx(0.0 + 4.0 + 10.0)
    code, stdout, _ = _run("consolidate", str(_write(tmp_path, objects)), *NOW_ARG, "--time-limit", "3",
                           "-o", "json")
    assert code == 0 and json.loads(stdout)["disruption"] == {"evictions": 3, "cost": 14.0}


@pytest.mark.parametrize(("price_per_eviction", "moves"), [(0.0, True), (0.05, True), (0.2, False)])
def test_eviction_price_weighs_savings_against_evictions(price_per_eviction: float, moves: bool,
                                                         tmp_path: Path) -> None:
    # removing target saves 0.1086 $/h for one eviction (cost 1.0): worth it below 0.1086 $/h per eviction
    objects = [on_demand_pool(), *keeper_and_target()]
    result = consolidate_verified(objects, eviction_price=price_per_eviction)
    assert bool(result.plan.remove) is moves, result.plan.solver.notes
    code, stdout, _ = _run("consolidate", str(_write(tmp_path, objects)), *NOW_ARG, "--time-limit", "3",
                           "-o", "json", "--eviction-price", str(price_per_eviction))
    assert code == 0 and bool(json.loads(stdout)["remove"]) is moves


def test_spot_to_spot_flag_on_both_commands(tmp_path: Path) -> None:
    path = _write(tmp_path, [nodepool(), node("s-0", "c-8x", capacity_type="spot"), running("p", "s-0")])
    out = tmp_path / "plan.json"
    code, _, _ = _run("consolidate", str(path), *NOW_ARG, "--time-limit", "3", "--spot-to-spot", "-o", "json",
                      "--output-file", str(out))
    assert code == 0 and [c["capacityType"] for c in json.loads(out.read_text())["nodeClaims"]] == ["spot"]
    assert _run("verify", str(path), str(out), *NOW_ARG, "--spot-to-spot")[0] == 0
    code, stdout, _ = _run("verify", str(path), str(out), *NOW_ARG)
    assert code == 1 and "needs spot-to-spot" in stdout
