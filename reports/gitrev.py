"""A diff side from a git revision: ``REV:PATH`` (git's own syntax, PATH from the repository root).

``nodeplan diff origin/main:deploy HEAD:deploy`` compares two revisions of a manifests directory (or of
one snapshot / helm output file) without checking either out: the tree is exported with ``git archive``
into a temporary directory and read from there. Errors name the file as ``REV:PATH/…``, not the
temporary copy. A side is only read from git when no file or directory of that name exists.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from model.errors import InputError


def is_revision_spec(side: str) -> bool:
    """``REV:PATH`` that is not an existing path (``a:b.yaml`` in the working tree wins)."""
    rev, sep, _ = side.partition(":")
    return bool(sep and rev) and not Path(side).exists()


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=120, check=False)
    except FileNotFoundError:
        raise InputError("git is not installed") from None


def export(spec: str, dest: Path) -> Path:
    """Write ``REV:PATH`` under ``dest``; returns the local path standing for it."""
    rev, _, rel = spec.partition(":")
    rel = rel.strip("/")
    top = _git(["rev-parse", "--show-toplevel"])
    if top.returncode != 0:
        raise InputError("not a file, and not in a git repository to read a revision from", file=spec)
    root = Path(top.stdout.decode().strip())
    if _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=root).returncode != 0:
        raise InputError(f"unknown git revision {rev!r}", file=spec)
    kind = _git(["cat-file", "-t", f"{rev}:{rel}"], cwd=root)
    if kind.returncode != 0:
        raise InputError(f"no path {rel or '.'!r} in revision {rev}", file=spec)
    archive = _git(["archive", "--format=tar", rev, "--", rel or "."], cwd=root)
    if archive.returncode != 0:
        raise InputError(f"git archive failed: {archive.stderr.decode().strip()}", file=spec)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest / rel if rel else dest


def relocate(err: InputError, local: Path, spec: str) -> InputError:
    """The same error with the temporary copy's path replaced by ``REV:PATH``."""
    if err.file is None:
        return err
    rev, _, rel = spec.partition(":")
    root = str(local)[: len(str(local)) - len(rel.strip("/"))].rstrip("/") if rel.strip("/") else str(local)
    file = err.file
    if file.startswith(root):
        file = f"{rev}:{file[len(root):].lstrip('/')}"
    return InputError(err.message, file=file, obj=err.obj, field=err.field)
