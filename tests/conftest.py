"""Shared fixtures: catalogs, snapshot builders, and the solve-and-verify helper every solver test uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from model.snapshot import Snapshot, load_snapshot, parse_objects
from providers.kwok import kwok_catalog
from solver.provision import SolveOptions, SolveResult, solve
from solver.verify import verify

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "fixtures" / "snapshots" / "example.yaml"


def snapshot_of(objects: list[dict[str, Any]], catalog: Any = None) -> Snapshot:
    return parse_objects(objects, source="test").with_catalog(catalog if catalog is not None else kwok_catalog())


def solve_verified(snapshot: Snapshot, **options: Any) -> SolveResult:
    """Solve, then insist the independent verifier accepts the plan and its bound is below its cost."""
    options.setdefault("time_limit", 5.0)
    result = solve(snapshot, SolveOptions(**options))
    violations = verify(snapshot, result.plan)
    assert violations == [], violations
    assert result.plan.cost.lower_bound <= result.plan.cost.total + 1e-6
    return result


@pytest.fixture(scope="session")
def example_snapshot() -> Snapshot:
    return load_snapshot(EXAMPLE).with_catalog(kwok_catalog())
