"""The README's GitHub Actions workflow is valid YAML and calls ``nodeplan diff`` with options that exist."""

from __future__ import annotations

import re
import shlex

import yaml
from typer.testing import CliRunner

from cli.app import app
from tests.conftest import ROOT


def _workflow() -> dict[str, object]:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n(# \.github/workflows/nodeplan\.yaml\n.*?)```", readme, re.S)
    assert block, "workflow block missing from README"
    loaded = yaml.safe_load(block.group(1))
    assert isinstance(loaded, dict)
    return loaded


def test_workflow_parses_and_comments_the_markdown() -> None:
    workflow = _workflow()
    steps = workflow["jobs"]["nodeplan"]["steps"]  # type: ignore[index]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "gh pr comment" in runs and "--body-file nodeplan-diff.md" in runs
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}  # type: ignore[index]


def test_workflow_diff_command_uses_real_options() -> None:
    steps = _workflow()["jobs"]["nodeplan"]["steps"]  # type: ignore[index]
    script = next(step["run"] for step in steps if "nodeplan diff" in step.get("run", ""))
    command = script.split("nodeplan diff", 1)[1].split('echo "exit')[0]
    args = shlex.split(command.replace("\\\n", " "))
    help_text = CliRunner().invoke(app, ["diff", "--help"], terminal_width=200).stdout
    for arg in args:
        if arg.startswith("--"):
            assert arg in help_text, arg
    assert {"--output-file", "--fail-on-unschedulable", "--max-cost-increase"} <= set(args)
    assert args[args.index("-o") + 1] == "markdown"  # -o is the format, as in kubectl


def test_every_command_help_has_an_example() -> None:
    for command in ("solve", "verify", "diff", "snapshot"):
        result = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
        assert result.exit_code == 0 and f"Example: nodeplan {command}" in result.stdout
