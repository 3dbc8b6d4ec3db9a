"""Why a consolidation pass decided nothing, as the operator reads it: one INFO line per distinct reason (no
candidate and what blocks the nodes, budgets at 0, PDBs, no saving with the solver's status and bound), not a
line every pass; the memo's skip of an unchanged cluster stays at DEBUG."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from controller.cache import ClusterCache
from model import labels as wk
from tests.disruption.helpers import keeper_and_target, on_demand_pool, pdb
from tests.unit.test_disruption_controller import FakeWriter, _initialized, cluster, disruption

LOGGER = "controller.disruption"


def _nothing_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    out = []
    for r in caplog.records:
        if r.name != LOGGER:
            continue
        text = str(r.msg.get("event")) if isinstance(r.msg, dict) else r.getMessage()
        if text.startswith("consolidation pass: nothing"):
            out.append((r.levelno, text))
    return out


def _annotate_target(cache: ClusterCache, value: str | None) -> None:
    node = copy.deepcopy(cache.informers["Node"].get("target"))
    assert node is not None
    annotations = node["metadata"].setdefault("annotations", {})
    if value is None:
        annotations.pop(wk.DO_NOT_DISRUPT, None)
    else:
        annotations[wk.DO_NOT_DISRUPT] = value
    cache.upsert("Node", node)


def test_no_candidate_is_said_once_with_what_blocks_the_nodes(caplog: pytest.LogCaptureFixture) -> None:
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    _annotate_target(cache, "true")
    d, _ = disruption(cache, FakeWriter(cache, _initialized))
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        first = d.step()
        d.step()  # the memo: nothing changed
    assert first.outcome == "nothing"
    assert "do-not-disrupt: 1" in first.detail, first.detail
    lines = _nothing_lines(caplog)
    assert [level for level, _ in lines] == [logging.INFO, logging.DEBUG], lines
    assert "do-not-disrupt: 1" in lines[0][1]


def _budget(cache: ClusterCache, nodes: str) -> None:
    pool = copy.deepcopy(cache.items("NodePool")[0])
    pool["spec"]["disruption"]["budgets"] = [{"nodes": nodes}]
    cache.upsert("NodePool", pool)


def test_each_distinct_reason_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """Budgets at 0, then the same reason on a changed cluster (not repeated), then a PDB with no allowance,
    then no move that saves: each new reason is one INFO line naming it."""
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    d, _ = disruption(cache, FakeWriter(cache, _initialized))
    records: list[Any] = []
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        _budget(cache, "0")
        records.append(d.step())
        _budget(cache, "0%")  # the pool changed (the memo resolves), the reason did not
        records.append(d.step())
        _budget(cache, "100%")
        cache.upsert("PodDisruptionBudget", pdb("t", {"app": "t-pod"}, disruptions_allowed=0))
        records.append(d.step())
    assert [r.outcome for r in records] == ["nothing"] * 3, [r.detail for r in records]
    assert records[0].detail.startswith("disruption budgets allow no removal now"), records[0].detail
    assert records[1].detail.startswith("disruption budgets allow no removal now"), records[1].detail
    assert "PDB: 1" in records[2].detail, records[2].detail
    lines = _nothing_lines(caplog)
    assert [level for level, _ in lines] == [logging.INFO, logging.DEBUG, logging.INFO], lines


def test_no_saving_names_the_solver_status_and_bound() -> None:
    """Two nodes each holding what the other cannot take: a candidate exists, no move saves."""
    from tests.disruption.helpers import node, running
    objects = [on_demand_pool(), node("a", "c-2x"), running("a-pod", "a", "1500m"),
               node("b", "c-2x"), running("b-pod", "b", "1500m")]
    cache = cluster(objects)
    d, _ = disruption(cache, FakeWriter(cache, _initialized))
    record = d.step()
    assert record.outcome == "nothing"
    assert record.detail.startswith("no move saves: 2 candidate(s), budgets allow 2 node(s); solver "), record.detail
    assert "lower bound" in record.detail and "$/h now" in record.detail


def test_a_decision_resets_what_was_said(caplog: pytest.LogCaptureFixture) -> None:
    """After a pass that acted, the first pass to find nothing says why again (the cluster is a new one)."""
    cache = cluster([on_demand_pool(), *keeper_and_target()])
    d, _ = disruption(cache, FakeWriter(cache, _initialized))
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        _annotate_target(cache, "true")
        d.step()
        _annotate_target(cache, None)
        assert d.step().outcome == "disrupted"
        _annotate_target(cache, "true")
        d.step()
    assert [level for level, _ in _nothing_lines(caplog)] == [logging.INFO, logging.INFO]
