"""The CLI as users meet it: exit codes, one-line errors naming file/object/field, outputs that round-trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from tests.conftest import EXAMPLE

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_solve_writes_a_plan_that_verify_accepts(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, stdout, _ = _run("solve", str(EXAMPLE), "--time-limit", "5", "-o", "json", "--output-file", str(out))
    assert code == 0 and stdout == ""
    plan = json.loads(out.read_text())
    assert plan["kind"] == "ProvisioningPlan" and plan["nodeClaims"]
    assert {"name", "nodePool", "instanceType", "zone", "capacityType", "price", "pods"} <= set(plan["nodeClaims"][0])
    assert {"total", "lowerBound"} <= set(plan["cost"]) and "status" in plan["solver"]
    code, _, stderr = _run("verify", str(EXAMPLE), str(out))
    assert code == 0 and "plan is valid" in stderr


def test_table_output_shows_cost_bound_and_greedy() -> None:
    code, stdout, _ = _run("solve", str(EXAMPLE), "--time-limit", "5", "--compare", "greedy")
    assert code == 0
    for text in ("New nodes", "general", "lower bound", "Greedy", "mainframe-report", "s390x"):
        assert text in stdout


def test_yaml_output_parses() -> None:
    import yaml

    code, stdout, _ = _run("solve", str(EXAMPLE), "--time-limit", "3", "-o", "yaml")
    assert code == 0 and yaml.safe_load(stdout)["kind"] == "ProvisioningPlan"


def test_verify_exits_1_listing_violations(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    assert _run("solve", str(EXAMPLE), "--time-limit", "3", "-o", "json", "--output-file", str(out))[0] == 0
    plan = json.loads(out.read_text())
    plan["nodeClaims"][0]["price"] = 0.0
    plan["nodeClaims"][0]["pods"].append("default/ghost")
    out.write_text(json.dumps(plan))
    code, stdout, stderr = _run("verify", str(EXAMPLE), str(out))
    assert code == 1
    assert "differs from the offering" in stdout and "default/ghost" in stdout and "violation" in stderr


BAD_INPUTS = {
    "missing file": (None, "file not found"),
    "malformed yaml": ("kind: Pod\nmetadata: {name: x\n", "malformed YAML"),
    "bad quantity": ("apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n  containers:\n"
                     "  - name: a\n    resources: {requests: {cpu: lots}}\n",
                     "Pod shop/web: field spec.containers[0].resources.requests.cpu: invalid quantity 'lots'"),
    "bad operator": ("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template:\n"
                     "    spec:\n      requirements: [{key: a, operator: Near, values: [b]}]\n",
                     "NodePool np: field spec.template.spec.requirements[0].operator: unknown operator 'Near'"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2(case: str, tmp_path: Path) -> None:
    text, expected = BAD_INPUTS[case]
    path = tmp_path / "snap.yaml"
    if text is not None:
        path.write_text(text)
    code, _, stderr = _run("solve", str(path))
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr
    assert str(path) in lines[0] and expected in lines[0]


def test_bad_catalog_names_the_instance_type(tmp_path: Path) -> None:
    catalog = tmp_path / "cat.yaml"
    catalog.write_text("apiVersion: nodeplan.io/v1alpha1\nkind: InstanceCatalog\nmetadata: {name: c}\n"
                       "instanceTypes:\n- name: big\n  capacity: {cpu: '4', memory: 8Gi}\n"
                       "  offerings: [{zone: z, capacityType: spot, price: -1}]\n")
    code, _, stderr = _run("solve", str(EXAMPLE), "--catalog", str(catalog))
    assert code == 2 and "instance type big" in stderr and "offerings[0].price" in stderr


def test_unknown_kinds_warn_and_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text(EXAMPLE.read_text() + "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n")
    code, _, stderr = _run("solve", str(path), "--time-limit", "2", "-o", "json")
    assert code == 0 and "skipped 1 object(s) of unsupported kind ConfigMap" in stderr


def test_realistic_catalog_solves() -> None:
    catalog = Path(__file__).resolve().parent.parent / "fixtures" / "catalogs" / "aws-like.yaml"
    code, stdout, _ = _run("solve", str(EXAMPLE), "--catalog", str(catalog), "--time-limit", "3",
                           "-o", "json")
    assert code == 0
    assert all("." in c["instanceType"] for c in json.loads(stdout)["nodeClaims"])  # m5.large-style names
