"""Every PromQL expression of the vendored Karpenter dashboards and of nodeplan's own parses and evaluates in
Prometheus' engine against a scrape of a small in-memory controller (offline; the e2e test checks that each
returns series on a real cluster)."""

from __future__ import annotations

import json
import time

from controller.metrics import Metrics
from tests.e2e.test_dashboards import (
    DASHBOARDS,
    WITHOUT_KARPENTER,
    dashboard_queries,
    evaluate,
    promql_binary,
    variable_values,
)
from tests.unit.test_metrics import setup


def test_every_dashboard_expression_evaluates() -> None:
    binary = promql_binary()
    metrics, _ = setup()
    assert isinstance(metrics, Metrics)
    now = int(time.time() * 1000)
    metrics.reconciled("provisioner", 0.1)
    scrapes = [(now - 30_000, metrics.exposition().decode())]
    metrics.reconciled("provisioner", 0.2)
    metrics.batches.labels("OPTIMAL").inc()
    scrapes.append((now, metrics.exposition().decode()))
    names = {path.name for path in DASHBOARDS}
    assert "nodeplan.json" in names
    assert WITHOUT_KARPENTER or {"karpenter-capacity-dashboard.json", "karpenter-performance-dashboard.json"} <= names
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        queries = dashboard_queries(dashboard, variable_values(dashboard, binary, scrapes), "5m")
        answers = evaluate(binary, scrapes, [(q, now) for _, _, q in queries])["results"]
        errors = [f"{title}: {expanded}: {a['error']}" for (title, _, expanded), a in zip(queries, answers, strict=True)
                  if a.get("error")]
        assert not errors, f"{path.name}:\n" + "\n".join(errors)
