"""The runtime part of requirements.lock: what the image installs (``--require-hashes --no-deps``).

requirements.lock pins runtime and dev packages together (uv's ``--extra dev``). A package is a runtime one when
pyproject.toml's ``[project] dependencies`` name it, or when one of the packages its ``# via`` annotation names is
a runtime one; everything else (pytest, mypy, ruff, hypothesis, syrupy and what only they pull in) stays out.
Standard library only: it runs in the image's builder stage before anything is installed.

Usage: python3 runtime_requirements.py requirements.lock pyproject.toml > runtime.lock
(the excluded packages are listed on stderr)
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, tuple[list[str], set[str]]]:
    """Package → (its lines in the lock, the packages its ``# via`` names; ``nodeplan`` for pyproject.toml)."""
    blocks: dict[str, tuple[list[str], set[str]]] = {}
    current: str | None = None
    in_via = False
    for line in text.splitlines():
        match = _NAME.match(line)
        if match:
            current = canonical(match.group(1))
            blocks[current] = ([line], set())
            in_via = False
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("--hash") or stripped.endswith("\\"):
            blocks[current][0].append(line)
        elif stripped.startswith("# via"):
            in_via = True
            rest = stripped.removeprefix("# via").strip()
            if rest:
                blocks[current][1].add(canonical(rest.split(" ")[0]))
        elif in_via and stripped.startswith("#   "):
            blocks[current][1].add(canonical(stripped.removeprefix("#").strip().split(" ")[0]))
    return blocks


#: runtime requirements of a dependency that only a part nodeplan never imports needs, and that part is pruned
#: from the image (Containerfile): kubernetes' asyncio client ``kubernetes/aio`` is all that uses aiohttp
UNUSED = {"aiohttp": "kubernetes.aio", "aiohttp-retry": "kubernetes.aio"}


def runtime(blocks: dict[str, tuple[list[str], set[str]]], direct: set[str]) -> set[str]:
    """The closure: direct dependencies, then every package required by a package already in (``UNUSED`` and
    what only they need stay out)."""
    keep = {name for name in blocks if name in direct}
    changed = True
    while changed:
        changed = False
        for name, (_, via) in blocks.items():
            if name not in keep and name not in UNUSED and via & keep:
                keep.add(name)
                changed = True
    return keep


def main(lock: Path, pyproject: Path) -> None:
    blocks = parse_lock(lock.read_text())
    project = tomllib.loads(pyproject.read_text())["project"]
    direct = {canonical(m.group(1)) for dep in project["dependencies"] if (m := _REQUIREMENT.match(dep))}
    missing = direct - set(blocks)
    if missing:
        sys.exit(f"error: {lock}: no pin for the runtime dependencies {', '.join(sorted(missing))}")
    keep = runtime(blocks, direct)
    for name in sorted(keep):
        print("\n".join(blocks[name][0]))
    print(f"runtime: {len(keep)} packages; left out (dev only): {', '.join(sorted(set(blocks) - keep))}",
          file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
