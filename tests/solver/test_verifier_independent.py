"""The verifier is an independent oracle: it may share ``model/`` predicates with the solver, never ``solver/``
code (``architecture.md``). Every module under ``solver/verify/`` imports nothing from ``solver.`` but
``solver.verify`` itself — at module level, inside functions and under ``TYPE_CHECKING`` alike."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERIFY = ROOT / "solver" / "verify"
MODULES = sorted(VERIFY.rglob("*.py"))


def imported(source: str, module: str, *, package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute name) of everything ``source`` (the code of ``module``) imports: ``import a.b`` gives
    ``a.b``; ``from a import b`` gives ``a.b`` (a submodule or a name of ``a``); relative imports resolved."""
    here = module.split(".") if package else module.split(".")[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            origin = ".".join(base + ([node.module] if node.module else []))
            out.extend((node.lineno, f"{origin}.{alias.name}") for alias in node.names)
    return out


def forbidden(name: str) -> bool:
    """Solver code: anything under ``solver`` but ``solver.verify``."""
    inside = name == "solver" or name.startswith("solver.")
    return inside and not (name == "solver.verify" or name.startswith("solver.verify."))


def _module(path: Path) -> tuple[str, bool]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return (".".join(parts[:-1]), True) if parts[-1] == "__init__" else (".".join(parts), False)


def test_the_verifier_is_a_package_of_checks() -> None:
    assert VERIFY / "__init__.py" in MODULES and len(MODULES) > 5


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(VERIFY)))
def test_verifier_module_imports_no_solver_code(path: Path) -> None:
    module, package = _module(path)
    bad = [f"line {line}: {name}" for line, name in imported(path.read_text(encoding="utf-8"), module,
                                                              package=package) if forbidden(name)]
    assert not bad, f"{path.relative_to(ROOT)} imports solver code: {bad}"


@pytest.mark.parametrize("line", ["import solver.greedy", "import solver", "from solver.rules import ports",
                                  "from solver import inflight", "from solver.rules.limits import NODES",
                                  "from ..rules import limits", "from .. import greedy",
                                  "def f():\n    from solver.templates import node_labels"])
def test_the_detector_catches(line: str) -> None:
    assert any(forbidden(n) for _, n in imported(line, "solver.verify.probe")), line


@pytest.mark.parametrize("line", ["from solver.verify.context import Context", "from solver.verify import topology",
                                  "from solver import verify", "from . import topology", "from .context import Context",
                                  "from model.pod import Pod", "import numpy as np"])
def test_the_detector_allows(line: str) -> None:
    assert not any(forbidden(n) for _, n in imported(line, "solver.verify.probe")), line
