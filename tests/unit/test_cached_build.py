"""hack/lib/cached-build.sh's ``go`` wrapper: a cold build's hundreds of ``go: downloading`` lines become a
progress line every 50 modules and a total, while go's stdout, its errors and its exit status stay as they are
(checked with a stand-in ``go`` on PATH: a real cold build takes half an hour)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import ROOT

FAKE_GO = """#!/usr/bin/env bash
for i in $(seq 1 120); do echo "go: downloading example.com/m$i v1.0.$i" >&2; done
echo "out: $*"
[[ "$1" != fail ]] || { echo "main.go:3:1: syntax error" >&2; exit 3; }
"""


def _bash(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "go").write_text(FAKE_GO)
    (tmp_path / "go").chmod(0o755)
    body = f"set -euo pipefail\nsource {ROOT / 'hack' / 'lib' / 'cached-build.sh'}\n{script}\n"
    return subprocess.run(["bash", "-c", body, "build.sh"], capture_output=True, text=True, check=False,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)})


def test_downloads_are_counted_not_listed(tmp_path: Path) -> None:
    done = _bash(tmp_path, 'printf "captured=%s\\n" "$(go list -m x)"; go build ./...')
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["captured=out: list -m x", "out: build ./..."]
    assert "go: downloading" not in done.stderr
    assert done.stderr.splitlines().count("build.sh: go: 120 modules downloaded") == 2
    assert "build.sh: go: 50 modules downloaded so far" in done.stderr


def test_errors_and_exit_status_survive(tmp_path: Path) -> None:
    done = _bash(tmp_path, 'if go fail; then echo ok; else echo "status $?"; fi; go fail; echo unreachable')
    assert done.returncode == 3  # set -e stops the build with go's own status
    assert done.stdout.splitlines() == ["out: fail", "status 3", "out: fail"]
    assert done.stderr.count("main.go:3:1: syntax error") == 2


def test_a_long_compile_says_it_is_alive(tmp_path: Path) -> None:
    slow = 'with_heartbeat k8s bash -c "sleep 2.6; exit 4" || echo "status $?"'
    done = subprocess.run(["bash", "-c", f"set -euo pipefail\nsource {ROOT / 'hack' / 'lib' / 'cached-build.sh'}\n"
                           f"{slow}\n", "build.sh"], capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "NODEPLAN_BUILD_HEARTBEAT": "1"})
    assert done.returncode == 0 and done.stdout == "status 4\n"
    beats = [line for line in done.stderr.splitlines() if line.startswith("build.sh: k8s: still building after")]
    assert len(beats) == 2, done.stderr
