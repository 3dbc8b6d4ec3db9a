"""``nodeplan diff``: every report format pinned with syrupy, every gate, every bad-input case.

The fixture sides (``fixtures/manifests/base`` → ``head``) are small enough that both solves end on their
own (proven optimal) in well under a second, so the reports are the same on every machine.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from typer.testing import CliRunner

from cli.app import app
from model.plandiff import PlanDiff
from providers.kwok import kwok_catalog
from reports.diff import Catalog, compute_diff, load_side
from reports.diff_render import render_diff_markdown, render_diff_terminal
from solver.provision import SolveOptions
from tests.conftest import ROOT

BASE = "fixtures/manifests/base"
HEAD = "fixtures/manifests/head"
runner = CliRunner()


class TextSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "txt"


class MarkdownSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "md"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # sources appear as the relative paths a CI job would pass


def _diff(base: str | Path = BASE, head: str | Path = HEAD) -> PlanDiff:
    catalog = Catalog("built-in KWOK", kwok_catalog())
    options = SolveOptions(time_limit=30.0)
    sides = [load_side(name, Path(path), catalog, options) for name, path in (("base", base), ("head", head))]
    return compute_diff(*sides)


@pytest.fixture(scope="module")
def pr_diff() -> PlanDiff:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        diff = _diff()
    assert diff.base.status == diff.head.status == "OPTIMAL"  # deterministic only when proven
    return diff


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["diff", *args])
    return result.exit_code, result.stdout, result.stderr


def variant(tmp_path: Path, name: str, edits: dict[str, tuple[str, str]]) -> Path:
    """A copy of the base manifests with ``{relative file: (old, new)}`` text edits."""
    out = tmp_path / name
    shutil.copytree(ROOT / BASE, out)
    for rel, (old, new) in edits.items():
        path = out / rel
        text = path.read_text()
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new))
    return out


# ------------------------------------------------------------------------------------------ what is found


def test_the_pr_diff_finds_every_kind_of_change(pr_diff: PlanDiff) -> None:
    d = pr_diff
    assert d.verdict == "regression"
    assert [c.pod for c in d.newly_unschedulable] == [
        "analytics/nightly-report-0", "analytics/nightly-report-1", "shop/legacy-billing-0"]
    assert d.newly_unschedulable[0].base == "batch" and "workload=batch" in (d.newly_unschedulable[0].reason or "")
    assert d.newly_unschedulable[2].base == "(absent)" and "s390x" in (d.newly_unschedulable[2].reason or "")
    assert [(c.pod, c.base, c.head) for c in d.pool_changes] == [
        ("default/cache-0", "general", "batch"), ("default/cache-1", "general", "batch")]
    assert d.added_pods == ["shop/legacy-billing-0", "shop/web-4", "shop/web-5", "shop/web-6", "shop/web-7"]
    assert d.cost.per_hour == pytest.approx(d.head.cost_per_hour - d.base.cost_per_hour, abs=1e-6)
    assert d.cost.per_month == pytest.approx(d.cost.per_hour * 730, abs=0.01)
    assert sum(c.cost_delta_per_hour for c in d.nodes) == pytest.approx(d.cost.per_hour, abs=1e-6)
    assert d.nodes_added - d.nodes_removed == d.head.nodes - d.base.nodes
    assert d.utilisation.cpu.base is not None and d.utilisation.cpu.head is not None
    assert d.base.gap == 0.0 and d.head.lower_bound <= d.head.cost_per_hour
    assert d.catalog_mismatch is None


def test_identical_sides_are_unchanged() -> None:
    code, stdout, _ = _run("fixtures/snapshots/example.yaml", "fixtures/snapshots/example.yaml",
                           "-o", "json", "--fail-on-unschedulable", "--max-cost-increase", "0")
    assert code == 0
    data = json.loads(stdout)
    assert data["verdict"] == "unchanged" and data["nodes"] == [] and data["cost"]["perHour"] == 0


def test_a_saved_plan_compares_with_a_solved_side(tmp_path: Path) -> None:
    plan = tmp_path / "base-plan.json"
    assert runner.invoke(app, ["solve", BASE, "-o", "json", "--output-file", str(plan)]).exit_code == 0
    code, stdout, _ = _run(str(plan), BASE, "-o", "json")
    data = json.loads(stdout)
    assert code == 0 and data["verdict"] == "unchanged"
    assert data["base"]["input"] == "plan" and data["base"]["catalog"] == "unknown (saved plan)"
    assert data["head"]["input"] == "manifests" and data["catalogMismatch"] is None


# ------------------------------------------------------------------------------------------ report formats


def test_terminal_report(pr_diff: PlanDiff, snapshot: SnapshotAssertion) -> None:
    console = Console(file=io.StringIO(), width=110, color_system=None, record=True)
    render_diff_terminal(pr_diff, console)
    assert console.export_text() == snapshot.use_extension(TextSnapshot)


def test_markdown_report(pr_diff: PlanDiff, snapshot: SnapshotAssertion) -> None:
    text = render_diff_markdown(pr_diff)
    first = text.splitlines()[0]
    assert first.startswith("### ❌ nodeplan: Regression:")  # verdict first
    assert text.index("| cost $/h |") < text.index("<details>")  # summary before the folded detail
    assert text == snapshot.use_extension(MarkdownSnapshot)


def test_json_report_schema(pr_diff: PlanDiff, snapshot: SnapshotAssertion) -> None:
    data = pr_diff.model_dump(mode="json", by_alias=True)
    assert PlanDiff.model_validate(data) == pr_diff  # the JSON round-trips into the documented model
    assert {"kind", "apiVersion", "verdict", "headline", "base", "head", "cost", "utilisation", "nodes",
            "newlyUnschedulable", "newlySchedulable", "poolChanges", "addedPods", "removedPods",
            "catalogMismatch", "gateFailures"} == set(data)
    assert data == snapshot.use_extension(JSONSnapshotExtension)


def test_cli_formats_match_the_library(pr_diff: PlanDiff, tmp_path: Path) -> None:
    code, stdout, stderr = _run(BASE, HEAD, "-o", "markdown")
    assert code == 0 and stdout == render_diff_markdown(pr_diff)
    assert "warning: base:" in stderr and "Service" in stderr  # skipped kinds: stderr, not the report
    out = tmp_path / "diff.json"
    code, stdout, _ = _run(BASE, HEAD, "-o", "json", "--output-file", str(out))
    assert code == 0 and stdout == "" and json.loads(out.read_text())["verdict"] == "regression"
    code, stdout, _ = _run(BASE, HEAD, "--width", "110")
    assert code == 0 and "Pods that become unschedulable: 3" in stdout and "Node changes" in stdout


def test_markdown_folds_long_lists(pr_diff: PlanDiff) -> None:
    text = render_diff_markdown(pr_diff, max_rows=1)
    assert "… and 2 more (see the JSON report)" in text and "… and 4 more groups" in text
    big = pr_diff.model_copy(update={"pool_changes": pr_diff.pool_changes * 5000})
    assert len(render_diff_markdown(big)) < 20_000  # far below GitHub's 65,536-character comment limit


# ------------------------------------------------------------------------------------------ gates


def test_fail_on_unschedulable_exits_1_with_one_line(tmp_path: Path) -> None:
    out = tmp_path / "diff.md"
    code, _, stderr = _run(BASE, HEAD, "--fail-on-unschedulable", "-o", "markdown", "--output-file", str(out))
    assert code == 1
    assert stderr.strip().splitlines()[-1] == (
        "gate failed: 3 pod(s) become unschedulable: analytics/nightly-report-0 (requires workload=batch; "
        "NodePools allow workload no value) and 2 more")
    assert "**Gate failed:** 3 pod(s) become unschedulable" in out.read_text()  # the report still says why


def test_fail_on_unschedulable_passes_when_nothing_breaks(tmp_path: Path) -> None:
    head = variant(tmp_path, "head", {"apps/db.yaml": ("replicas: 3", "replicas: 1")})
    code, stdout, _ = _run(BASE, str(head), "--fail-on-unschedulable", "-o", "json")
    assert code == 0 and json.loads(stdout)["verdict"] == "cheaper"


def test_max_cost_increase(tmp_path: Path) -> None:
    head = variant(tmp_path, "head", {"apps/web.yaml": ("replicas: 4", "replicas: 12")})
    code, stdout, _ = _run(BASE, str(head), "-o", "json")
    data = json.loads(stdout)
    assert code == 0 and data["verdict"] == "costlier" and data["cost"]["percent"] > 10
    percent = data["cost"]["percent"]
    code, _, stderr = _run(BASE, str(head), "--max-cost-increase", "10", "-o", "json")
    assert code == 1
    line = stderr.strip().splitlines()[-1]
    assert line.startswith(f"gate failed: cost rises {percent:+.2f} % (") and line.endswith("above the limit of +10 %")
    code, _, _ = _run(BASE, str(head), "--max-cost-increase", str(percent + 1), "-o", "json")
    assert code == 0
    # cheaper never trips the cost gate, even with a limit of 0 %
    assert _run(str(head), BASE, "--max-cost-increase", "0", "-o", "json")[0] == 0


def test_max_cost_increase_from_nothing(tmp_path: Path) -> None:
    empty = variant(tmp_path, "empty", {"apps/web.yaml": ("replicas: 4", "replicas: 0")})
    for rel in ("apps/db.yaml", "apps/cache-helm.yaml", "jobs/batch.yaml"):
        (empty / rel).unlink()
    code, _, stderr = _run(str(empty), BASE, "--max-cost-increase", "50", "-o", "json")
    assert code == 1 and "gate failed: cost rises from 0 to" in stderr


def test_both_gates_fail_on_one_line(tmp_path: Path) -> None:
    code, _, stderr = _run(BASE, HEAD, "--fail-on-unschedulable", "--max-cost-increase", "0", "-o", "json")
    lines = stderr.strip().splitlines()
    assert code == 1 and lines[-1].startswith("gate failed: 3 pod(s)")


# ------------------------------------------------------------------------------------------ catalogs


def test_different_catalogs_are_reported_not_compared_silently() -> None:
    code, stdout, stderr = _run(BASE, BASE, "--head-catalog", "fixtures/catalogs/aws-like.yaml",
                                "-o", "json")
    data = json.loads(stdout)
    assert code == 0 and data["catalogMismatch"].startswith("base was solved with catalog built-in KWOK")
    assert "fixtures/catalogs/aws-like.yaml" in data["catalogMismatch"]
    assert data["base"]["catalogFingerprint"] != data["head"]["catalogFingerprint"]
    assert "warning: catalogs differ" in stderr
    code, stdout, _ = _run(BASE, BASE, "--head-catalog", "fixtures/catalogs/aws-like.yaml", "-o", "markdown")
    assert "**Catalogs differ:**" in stdout.split("<details>")[0]


def test_a_saved_plan_priced_from_another_catalog_is_detected(tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", BASE, "-o", "json", "--output-file", str(plan_path)]).exit_code == 0
    plan = json.loads(plan_path.read_text())
    for claim in plan["nodeClaims"]:
        claim["price"] = round(claim["price"] * 1.25, 6)
    plan_path.write_text(json.dumps(plan))
    code, stdout, _ = _run(str(plan_path), BASE, "-o", "json")
    mismatch = json.loads(stdout)["catalogMismatch"]
    assert code == 0 and "price the same offering differently" in mismatch


# ------------------------------------------------------------------------------------------ bad input

BAD_SIDES: dict[str, tuple[str, dict[str, Any], str]] = {
    "missing base file": ("base", {"path": "nope.yaml"}, "error: base: nope.yaml: file not found"),
    "malformed head yaml": ("head", {"file": "apps/web.yaml", "text": "kind: Deployment\nmetadata: {name: x\n"},
                            "error: head: {dir}/apps/web.yaml: malformed YAML"),
    "bad quantity in head workload": (
        "head", {"file": "apps/web.yaml", "edit": ("cpu: 500m", "cpu: lots")},
        "error: head: {dir}/apps/web.yaml: Deployment shop/web: field "
        "spec.template.spec.containers[0].resources.requests.cpu: invalid quantity 'lots'"),
    "bad base nodepool": (
        "base", {"file": "platform/nodepools.yaml", "edit": ("operator: In, values: [c, m, s]",
                                                             "operator: Near, values: [c]")},
        "error: base: {dir}/platform/nodepools.yaml: NodePool general: field "
        "spec.template.spec.requirements[1].operator: unknown operator 'Near'"),
    "broken saved plan": ("head", {"plan": {"kind": "ProvisioningPlan", "nodeClaims": []}},
                          "error: head: {dir}: ProvisioningPlan: field cost: Field required"),
    "bad head catalog": ("head", {"catalog": "kind: Pod\n"},
                         "error: head: {dir}: field kind: expected one object of kind InstanceCatalog"),
}


@pytest.mark.parametrize("case", sorted(BAD_SIDES))
def test_a_side_that_fails_to_load_is_one_line_exit_2(case: str, tmp_path: Path) -> None:
    side, how, expected = BAD_SIDES[case]
    bad: Path
    extra: list[str] = []
    if "path" in how:
        bad = Path(how["path"])
    elif "plan" in how:
        bad = tmp_path / "plan.json"
        bad.write_text(json.dumps(how["plan"]))
    elif "catalog" in how:
        bad = tmp_path / "catalog.yaml"
        bad.write_text(how["catalog"])
        extra = ["--head-catalog", str(bad)]
    else:
        bad = variant(tmp_path, side, {}) if "text" in how else variant(tmp_path, side, {how["file"]: how["edit"]})
        if "text" in how:
            (bad / how["file"]).write_text(how["text"])
    sides = [BASE, BASE] if extra else ([str(bad), BASE] if side == "base" else [BASE, str(bad)])
    code, stdout, stderr = _run(*sides, *extra, "-o", "json")
    assert code == 2 and stdout == ""
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and "Traceback" not in stderr
    assert lines[0].startswith(expected.format(dir=bad)), lines[0]


def test_quiet_keeps_stderr_for_errors_and_gates() -> None:
    code, stdout, stderr = _run(BASE, HEAD, "-o", "json", "--quiet")
    assert code == 0 and stderr == "" and json.loads(stdout)["verdict"] == "regression"
    code, _, stderr = _run(BASE, HEAD, "-o", "json", "-q", "--fail-on-unschedulable")
    assert code == 1 and stderr.startswith("gate failed: 3 pod(s)") and len(stderr.strip().splitlines()) == 1


def test_shell_completion_knows_diff_options() -> None:
    env = {**os.environ, "_NODEPLAN_COMPLETE": "complete_bash", "COMP_WORDS": "nodeplan diff --fail",
           "COMP_CWORD": "2"}
    script = 'from cli.app import app; app(prog_name="nodeplan")'
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60,
                         check=False, cwd=ROOT)
    assert "--fail-on-unschedulable" in out.stdout


def test_json_schema_is_pinned(snapshot: SnapshotAssertion) -> None:
    """The machine-readable schema of ``--format json``; a change here is a contract change, reviewed."""
    schema = PlanDiff.model_json_schema(by_alias=True, mode="serialization")
    assert schema["title"] == "PlanDiff" and "newlyUnschedulable" in schema["properties"]
    assert schema == snapshot.use_extension(JSONSnapshotExtension)


# ------------------------------------------------------------------------------------------ git revisions


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", *args], cwd=repo, check=True,
                   capture_output=True, timeout=60)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository whose first commit holds the base manifests under deploy/ and whose second the head's."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    shutil.copytree(ROOT / BASE, root / "deploy")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "base")
    shutil.rmtree(root / "deploy")
    shutil.copytree(ROOT / HEAD, root / "deploy")
    _git(root, "rm", "-r", "-q", "--cached", "deploy")  # copies keep size and mtime: make git re-read them
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "head")
    monkeypatch.chdir(root / "deploy")  # REV:PATH is from the repository root, wherever we run
    return root


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_two_git_revisions(repo: Path, pr_diff: PlanDiff) -> None:
    code, stdout, stderr = _run("HEAD~1:deploy", "HEAD:deploy", "-o", "json")
    data = json.loads(stdout)
    assert code == 0 and data["base"]["source"] == "HEAD~1:deploy" and data["head"]["input"] == "manifests"
    expected = pr_diff.model_dump(mode="json", by_alias=True)
    for key in ("verdict", "cost", "nodes", "newlyUnschedulable", "poolChanges", "addedPods"):
        assert data[key] == expected[key]
    assert "warning: base: HEAD~1:deploy: skipped 1 object(s) of kind ConfigMap" in stderr
    # one file of a revision works too
    code, stdout, _ = _run("HEAD~1:deploy/apps/web.yaml", "HEAD:deploy/apps/web.yaml", "-o", "json")
    assert code == 0 and json.loads(stdout)["addedPods"] == ["shop/web-4", "shop/web-5", "shop/web-6", "shop/web-7"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_bad_git_revisions_are_one_line_exit_2(repo: Path) -> None:
    (repo / "deploy" / "apps" / "web.yaml").write_text(
        (repo / "deploy" / "apps" / "web.yaml").read_text().replace("cpu: 500m", "cpu: lots"))
    _git(repo, "commit", "-qam", "broken")
    cases = {
        ("nosuch:deploy", "HEAD:deploy"): "error: base: nosuch:deploy: unknown git revision 'nosuch'",
        ("HEAD~2:deploy", "HEAD:nothing"): "error: head: HEAD:nothing: no path 'nothing' in revision HEAD",
        ("HEAD~2:deploy", "HEAD:deploy"): "error: head: HEAD:deploy/apps/web.yaml: Deployment shop/web: field "
                                          "spec.template.spec.containers[0].resources.requests.cpu: invalid "
                                          "quantity 'lots'",
    }
    for (base, head), expected in cases.items():
        code, stdout, stderr = _run(base, head, "-o", "json", "-q")
        assert (code, stdout, stderr.strip()) == (2, "", expected)


def test_progress_appears_only_after_the_delay() -> None:
    import time

    from cli.diff import _progress

    with _progress(enabled=True, delay=0.05) as progress:
        assert progress is not None and not progress.live.is_started
        time.sleep(0.3)
        assert progress.live.is_started
    assert not progress.live.is_started
    with _progress(enabled=True, delay=10) as quick:
        assert quick is not None
    time.sleep(0.05)
    assert not quick.live.is_started  # a solve quicker than the delay never shows a spinner
    with _progress(enabled=False) as nothing:
        assert nothing is None
