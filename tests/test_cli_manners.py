"""kubectl's manners (issue 15, item 6): ``-o/--output`` is the format and ``--output-file`` the file, for every
command that writes a plan or a report; ``--version``; help that reads at 80 columns without a cut word, option
or ``<bool>``; terminal output that prints user strings literally; messages that say what is wrong; and
``consolidate`` then ``verify`` agreeing on the bundled example."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from cli.app import app
from tests.conftest import ROOT

EXAMPLE = ROOT / "fixtures" / "snapshots" / "example.yaml"
NOW = ["--now", "2026-11-29T09:00:00Z"]


def _run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def _commands() -> Iterator[tuple[list[str], Any]]:
    """Every command and group of the app, with its path (``["catalog", "aws"]``)."""
    def walk(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])
    yield from walk(typer.main.get_command(app), [])


# -- -o is the format, --output-file the file ---------------------------------------------------------------
def test_o_is_the_format_and_never_names_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = _run("solve", str(EXAMPLE), "-o", "json", "--time-limit", "3", "-q")
    assert result.exit_code == 0 and json.loads(result.stdout)["kind"] == "ProvisioningPlan"
    assert list(tmp_path.iterdir()) == []  # `-o json` once wrote a file named json
    wrong = _run("solve", str(EXAMPLE), "-o", "plan.json")
    assert wrong.exit_code == 2 and "Traceback" not in wrong.output
    assert "'plan.json' is not an output format" in wrong.stderr and "--output-file plan.json" in wrong.stderr
    assert list(tmp_path.iterdir()) == []


def test_yaml_and_wide(tmp_path: Path) -> None:
    result = _run("solve", str(EXAMPLE), "-o", "yaml", "--time-limit", "3", "-q")
    assert result.exit_code == 0 and yaml.safe_load(result.stdout)["kind"] == "ProvisioningPlan"
    saved = tmp_path / "plan.json"  # the plan the wide table shows (a second solve under load may differ)
    wide = _run("solve", str(EXAMPLE), "-o", "wide", "--output-file", str(saved), "--time-limit", "3", "-q")
    plan = json.loads(saved.read_text())
    assert wide.exit_code == 0 and "NodeClaims" in wide.stdout  # wide: one row per NodeClaim with its pods
    assert all(c["name"] in wide.stdout for c in plan["nodeClaims"])


def test_every_writing_command_takes_output_file(tmp_path: Path) -> None:
    plan, report, verdict = tmp_path / "plan.json", tmp_path / "diff.md", tmp_path / "verify.json"
    assert _run("solve", str(EXAMPLE), "--output-file", str(plan), "--time-limit", "3", "-q").exit_code == 0
    assert json.loads(plan.read_text())["kind"] == "ProvisioningPlan"  # the table printed, the plan written
    assert _run("diff", str(plan), str(plan), "-o", "markdown", "--output-file", str(report), "-q").exit_code == 0
    assert report.read_text().startswith("#") or "nodeplan" in report.read_text()
    result = _run("verify", str(EXAMPLE), str(plan), "-o", "json", "--output-file", str(verdict))
    assert result.exit_code == 0 and json.loads(verdict.read_text()) == {
        "kind": "Verification", "plan": str(plan), "valid": True, "violations": []}
    unwritable = str(tmp_path / "missing" / "out")
    for command in (["snapshot", "--kubeconfig", str(tmp_path / "nope")], ["catalog", "aws", "--region", "x"],
                    ["shadow-report", str(tmp_path / "nope.jsonl")], ["consolidate", str(EXAMPLE)]):
        result = _run(*command, "--output-file", unwritable)
        assert result.exit_code == 2 and "--output-file" in result.stderr, (command, result.output)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_version() -> None:
    result = _run("--version")
    assert result.exit_code == 0 and re.fullmatch(r"nodeplan \S+ \(commit \S+\)\n", result.stdout)


# -- help at 80 columns -------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [p for p, _ in _commands()], ids=lambda p: " ".join(p) or "nodeplan")
def test_help_reads_at_80_columns(path: list[str]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    text = result.stdout
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "<bool>" not in text and "…" not in text
    assert not [line for line in lines if line.rstrip().endswith("...") and not line.startswith("Usage:")]
    command = next(c for p, c in _commands() if p == path)
    for param in command.params:
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("-"):  # every option whole on one line, never split at its hyphens
                assert re.search(rf"(^|[\s,/]){re.escape(opt)}($|[\s,=\[])", text, re.M), opt


# -- terminal output prints user strings literally -----------------------------------------------------------
HOSTILE = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}]
---
apiVersion: v1
kind: Pod
metadata: {name: "x[/bold]", namespace: default}
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [s390x, ppc64le]}]
  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: y, namespace: default}
spec:
  nodeSelector: {example.com/team: "[link=http://x]"}
  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: gpu, namespace: default}
spec:
  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


def test_markup_in_names_and_reasons_prints_literally(tmp_path: Path) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(HOSTILE)
    result = _run("solve", str(path), "--time-limit", "3", "-q")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())  # rich may wrap long reasons
    assert "default/x[/bold]: requires kubernetes.io/arch In [s390x, ppc64le]" in out
    assert "example.com/team=[link=http://x]" in out
    assert "\x1b]8;" not in result.stdout  # no OSC 8 hyperlink escape


def test_a_resource_no_instance_type_has_is_said_so(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(HOSTILE)
    plan = json.loads(_run("solve", str(path), "-o", "json", "--time-limit", "3", "-q").stdout)
    reason = next(u["reason"] for u in plan["unschedulable"] if u["pod"] == "default/gpu")
    assert "no instance type of the catalog (144 types) has nvidia.com/gpu" in reason
    assert "--catalog" in reason and "after DaemonSet overhead" not in reason
    with_gpus = json.loads(_run("solve", str(path), "-o", "json", "--time-limit", "5", "-q", "--catalog",
                                str(ROOT / "fixtures" / "catalogs" / "aws-like.yaml")).stdout)
    assert "default/gpu" not in {u["pod"] for u in with_gpus["unschedulable"]}  # the suggested catalog places it


# -- consolidate and verify agree -----------------------------------------------------------------------------
def test_consolidate_then_verify_agree_on_the_example(tmp_path: Path) -> None:
    """Karpenter restricts spot-to-spot replacement in consolidation only (consolidation.go); a drifted node's
    replacement is whatever the scheduling simulation launches (drift.go), spot included."""
    plan = tmp_path / "disruption.json"
    result = _run("consolidate", str(EXAMPLE), *NOW, "--time-limit", "10", "--output-file", str(plan), "-q")
    assert result.exit_code == 0, result.output
    data = json.loads(plan.read_text())
    assert [r["reason"] for r in data["remove"]] == ["Drifted"]
    assert [c["capacityType"] for c in data["nodeClaims"]] == ["spot"]  # the example's drifted spot node
    verified = _run("verify", str(EXAMPLE), str(plan), *NOW)
    assert verified.exit_code == 0, verified.output
    assert "cheapest reachable 0.0000" not in result.stdout and "0.0000 $/h" not in result.stdout



def test_narrow_terminals_wrap_tables_and_never_cut_them() -> None:
    """A table wider than the terminal folds its cells; rich's default would end them in "…" (text lost)."""
    from rich.console import Console

    from model.disruption import DisruptionPlan
    from model.plan import ProvisioningPlan
    from reports.terminal import render_disruption, render_plan

    plan = ProvisioningPlan.model_validate(json.loads(_run("solve", str(EXAMPLE), "-o", "json", "--time-limit", "3",
                                                           "-q").stdout))
    disruption = DisruptionPlan.model_validate(json.loads(_run("consolidate", str(EXAMPLE), *NOW, "-o", "json",
                                                               "-q").stdout))
    for width in (60, 80):
        console = Console(width=width, record=True, color_system=None)
        render_plan(plan, console, wide=True)
        render_disruption(disruption, console, wide=True)
        text = console.export_text()
        assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
