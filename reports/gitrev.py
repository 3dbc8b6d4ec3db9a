"""A diff side from a git revision: ``REV:PATH`` (git's own syntax, PATH from the repository root).

``nodeplan diff origin/main:deploy HEAD:deploy`` compares two revisions of a manifests directory (or of
one snapshot / helm output file) without checking either out: the tree at REV is copied object by object
(``git ls-tree`` and ``git cat-file``, which ignore ``.gitattributes``) into a temporary directory and read
from there. Errors name the file as ``REV:PATH/…``, not the
temporary copy. A side is only read from git when no file or directory of that name exists.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from model.errors import InputError


def is_revision_spec(side: str) -> bool:
    """``REV:PATH`` that is not an existing path (``a:b.yaml`` in the working tree wins)."""
    rev, sep, _ = side.partition(":")
    return bool(sep and rev) and not Path(side).exists()


#: seconds one git command may take before the side is an input error
GIT_TIMEOUT = 60.0


def _git(args: list[str], cwd: Path | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, timeout=GIT_TIMEOUT,
                              check=False)
    except FileNotFoundError:
        raise InputError("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"git {args[0]} took longer than {GIT_TIMEOUT:g} s") from None


def _blobs(root: Path, shas: list[str]) -> list[bytes]:
    """The contents of ``shas`` in one ``git cat-file --batch`` (raw objects: no filters, no attributes)."""
    if not shas:
        return []
    out = _git(["cat-file", "--batch"], cwd=root, stdin="".join(f"{sha}\n" for sha in shas).encode())
    if out.returncode != 0:
        raise InputError(f"git cat-file failed: {out.stderr.decode(errors='replace').strip()}")
    data, at, blobs = out.stdout, 0, []
    for sha in shas:
        header_end = data.index(b"\n", at)
        name, kind, size = data[at:header_end].decode().split(" ")
        if name != sha or kind != "blob":
            raise InputError(f"git object {sha} is not a file")
        start = header_end + 1
        blobs.append(data[start:start + int(size)])
        at = start + int(size) + 1
    return blobs


def export(spec: str, dest: Path) -> Path:
    """Write ``REV:PATH`` under ``dest``; returns the local path standing for it.

    The tree is read object by object (``git ls-tree`` + ``git cat-file``), never through ``git archive``:
    archive applies the revision's own ``.gitattributes`` (``export-ignore`` would let the change under
    review hide a file from the diff). Symbolic links and submodules are left out, as in a manifests
    directory read from disk.
    """
    rev, _, rel = spec.partition(":")
    rel = rel.strip("/")
    top = _git(["rev-parse", "--show-toplevel"])
    if top.returncode != 0:
        raise InputError("not a file, and not in a git repository to read a revision from", file=spec)
    root = Path(top.stdout.decode().strip())
    commit = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], cwd=root)
    if commit.returncode != 0:
        raise InputError(f"unknown git revision {rev!r}", file=spec)
    sha = commit.stdout.decode().strip()
    listing = _git(["ls-tree", "-r", "-z", "--full-tree", sha, "--", rel or "."], cwd=root)
    if listing.returncode != 0:
        raise InputError(f"git ls-tree failed: {listing.stderr.decode(errors='replace').strip()}", file=spec)
    files: list[tuple[str, str]] = []
    for entry in filter(None, listing.stdout.split(b"\0")):
        meta, _, name = entry.partition(b"\t")
        mode, kind, obj = meta.decode().split(" ")
        path = name.decode("utf-8", errors="surrogateescape")
        if kind == "blob" and mode in ("100644", "100755") and ".." not in Path(path).parts:
            files.append((path, obj))
    if not files and _git(["cat-file", "-e", f"{sha}:{rel}"], cwd=root).returncode != 0:
        raise InputError(f"no path {rel or '.'!r} in revision {rev}", file=spec)
    for (path, _), content in zip(files, _blobs(root, [obj for _, obj in files]), strict=True):
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    local = dest / rel if rel else dest
    if rel and not local.exists():
        local.mkdir(parents=True)
    return local


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
