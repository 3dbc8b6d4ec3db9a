"""Plans on bundled fixtures, pinned with syrupy: a change in what nodeplan decides shows up in review.

Timing fields are dropped; the solves end on their own (proof, bound or CP-SAT optimality) long before
their time limit, so the plan is the same on any machine.
"""

from __future__ import annotations

from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from bench.workloads import linux_pool, nodepool, pod
from model.snapshot import Snapshot
from providers.catalog_file import load_catalog
from solver.provision import SolveOptions, solve
from solver.verify import verify
from tests.conftest import ROOT, snapshot_of

#: timings, and sizes of the model that tuning changes without changing the plan
TIMING = ("wallSeconds", "stages", "greedySeconds", "notes", "patterns", "templates")


@pytest.fixture
def snapshot_json(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(JSONSnapshotExtension)


def _stable(snap: Snapshot) -> dict[str, Any]:
    result = solve(snap, SolveOptions(time_limit=60.0))
    assert verify(snap, result.plan) == []
    # deterministic only if the search ended on its own: by proof, bound, or CP-SAT optimality over patterns
    assert result.plan.solver.wall_seconds < 30.0, result.plan.solver.notes
    plan = result.plan.to_json_dict()
    for key in TIMING:
        plan["solver"].pop(key)
    return plan


def test_example_plan(example_snapshot: Snapshot, snapshot_json: SnapshotAssertion) -> None:
    assert _stable(example_snapshot) == snapshot_json


def test_mixed_pools_plan(snapshot_json: SnapshotAssertion) -> None:
    objects = [
        linux_pool("general", weight=10),
        nodepool("arm-spot", weight=20, requirements=[
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]),
    ]
    objects += [pod(f"api-{i}", cpu="500m", memory="1Gi", owner="api") for i in range(8)]
    objects += [pod(f"x86-{i}", cpu="2", memory="4Gi", owner="x86",
                    spec_extra={"nodeSelector": {"kubernetes.io/arch": "amd64"}}) for i in range(3)]
    assert _stable(snapshot_of(objects)) == snapshot_json


def test_realistic_catalog_plan(snapshot_json: SnapshotAssertion) -> None:
    catalog = load_catalog(ROOT / "fixtures" / "catalogs" / "aws-like.yaml")
    objects = [linux_pool("general", requirements=[
        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}])]
    objects += [pod(f"web-{i}", cpu="1", memory="2Gi", owner="web") for i in range(10)]
    objects += [pod(f"cache-{i}", cpu="500m", memory="6Gi", owner="cache") for i in range(4)]
    assert _stable(snapshot_of(objects, catalog)) == snapshot_json
