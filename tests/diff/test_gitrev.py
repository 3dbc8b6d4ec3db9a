"""``REV:PATH`` sides read exactly the tree at REV: the revision's own .gitattributes cannot hide a file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from model.errors import InputError
from reports.gitrev import export

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: NAME}
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    (root / "deploy").mkdir(parents=True)
    (root / "deploy" / "web.yaml").write_text(DEPLOYMENT.replace("NAME", "web"))
    (root / "deploy" / "big.yaml").write_text(DEPLOYMENT.replace("NAME", "big"))
    # the change under review marks its own new workload as not exported
    (root / ".gitattributes").write_text("deploy/big.yaml export-ignore\ndeploy/web.yaml filter=secret\n")
    (root / "deploy" / "escape.yaml").symlink_to("/etc/hostname")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "c")
    monkeypatch.chdir(root)
    return root


def test_export_ignore_does_not_hide_a_file(repo: Path, tmp_path: Path) -> None:
    local = export("HEAD:deploy", tmp_path / "out")
    assert sorted(p.name for p in local.iterdir()) == ["big.yaml", "web.yaml"]  # symlink left out
    assert (local / "big.yaml").read_text() == DEPLOYMENT.replace("NAME", "big")  # raw blob, no filter


def test_a_single_file_and_errors(repo: Path, tmp_path: Path) -> None:
    local = export("HEAD:deploy/web.yaml", tmp_path / "one")
    assert local.read_text() == DEPLOYMENT.replace("NAME", "web")
    with pytest.raises(InputError, match="no path 'nothing'"):
        export("HEAD:nothing", tmp_path / "x")
    for rev in ("--output=/tmp/pwned", "-h", "no-such-branch"):
        with pytest.raises(InputError, match="unknown git revision"):
            export(f"{rev}:deploy", tmp_path / "y")
