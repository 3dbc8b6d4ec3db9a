"""Karpenter's published Grafana dashboards, and nodeplan's own, work against nodeplan's ``/metrics`` (issue #13,
item 4): every panel's PromQL, evaluated by Prometheus' own engine (``hack/promql``), returns series.

The controller runs on the test control plane with a NodePool (limits on cpu and memory, consolidation on), a
DaemonSet on its nodes and a Deployment of 12 pods; once they run, the Deployment is scaled to 2 and
consolidation removes nodes (drains, terminations, disruption decisions). ``/metrics`` is scraped over HTTP every
few seconds throughout, as Prometheus would, with the target label ``job="karpenter"`` the dashboards filter on
(a scrape config's job name). Each panel is then evaluated at the last scrape, with Grafana's variables expanded
as Grafana does: a query variable's values from ``label_values`` ("All" is every value), a custom variable
for each of its values, ``$__rate_interval`` / ``$__interval`` as the length of the run.

The performance dashboard's min and max quantile panels select ``quantile="0"`` / ``"1"``, which Prometheus 3
stores as ``"0.0"`` / ``"1.0"`` (``PROMETHEUS_3``): they are checked in that form. Panels left out, each because
no Karpenter exports its series either: the "Node Summary" uptime column reads node-exporter's
``node_time_seconds`` / ``node_boot_time_seconds``, and the "Controllers / Allocation" dashboard reads
``karpenter_allocation_controller_*``, which Karpenter no longer has (absent from sigs.k8s.io/karpenter's source
at the dashboards' commit). Karpenter's dashboards are not kept in the repository (``hack/dashboards/README.md``).
"""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Karpenter's published dashboards are not kept in the repository (``hack/dashboards/README.md``): read from
#: ``NODEPLAN_KARPENTER_DASHBOARDS`` or where ``hack/dashboards/fetch.sh`` puts them
KARPENTER_DASHBOARDS = Path(os.environ.get("NODEPLAN_KARPENTER_DASHBOARDS") or Path(
    os.environ.get("NODEPLAN_CACHE") or Path.home() / ".cache" / "nodeplan")
    / "karpenter-dashboards" / "1d927085dd81a9df9301e613f371dac5b4d16bfe")
NODEPLAN_DASHBOARD = ROOT / "deploy" / "dashboards" / "nodeplan.json"
DASHBOARDS = [*sorted(KARPENTER_DASHBOARDS.glob("*.json")), NODEPLAN_DASHBOARD]
#: why Karpenter's dashboards are not checked here ("" when they are)
WITHOUT_KARPENTER = "" if len(DASHBOARDS) > 1 else (
    f"Karpenter's dashboards are not in {KARPENTER_DASHBOARDS} (hack/dashboards/fetch.sh): only nodeplan's is checked")
BUILD = ROOT / "hack" / "promql" / "build.sh"
#: series no Karpenter exports: an expression reading one of these is not checked (see the module docstring)
NOT_KARPENTER = ("node_time_seconds", "node_boot_time_seconds", "karpenter_allocation_controller_")
#: what Prometheus' job label is in the dashboards' filters
JOB = "karpenter"


def promql_binary() -> Path:
    """The PromQL oracle, built by ``make promql`` (a prerequisite of ``make test``) or here."""
    if shutil.which("go"):
        done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800)
        if done.returncode == 0 and done.stdout.strip():
            return Path(done.stdout.strip().splitlines()[-1]) / "promql"
    cache = Path(os.environ.get("NODEPLAN_CACHE", Path.home() / ".cache" / "nodeplan"))
    found = sorted(cache.glob("promql/*/bin/promql"))
    if not found:
        pytest.fail("the PromQL oracle is not built (make promql)")
    return found[-1]


def evaluate(binary: Path, scrapes: list[tuple[int, str]], queries: list[tuple[str, int]],
             label_values: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    request = {"scrapes": [{"timeMs": t, "text": text} for t, text in scrapes], "labels": {"job": JOB},
               "queries": [{"expr": e, "timeMs": t} for e, t in queries],
               "labelValues": [{"metric": m, "label": lb} for m, lb in label_values]}
    done = subprocess.run([str(binary)], input=json.dumps(request), capture_output=True, text=True, timeout=300,
                          check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack = list(dashboard.get("panels") or [])
    while stack:
        panel = stack.pop(0)
        yield panel
        stack[0:0] = panel.get("panels") or []


def targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expression) of every PromQL target."""
    return [(str(p.get("title")), t["expr"]) for p in panels(dashboard) for t in p.get("targets") or []
            if t.get("expr")]


_LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s*,\s*(\w+)\s*\)")


def variable_values(dashboard: dict[str, Any], binary: Path, scrapes: list[tuple[int, str]]
                    ) -> dict[str, list[str]]:
    """Each template variable's values as Grafana offers them: a query variable's ``label_values`` over the
    scraped series ("All" is the regex of every value, Grafana's expansion with no ``allValue``), a custom
    variable's options one by one."""
    out: dict[str, list[str]] = {}
    queries: list[tuple[str, str, str, bool]] = []
    for var in (dashboard.get("templating") or {}).get("list") or []:
        name, kind = var.get("name"), var.get("type")
        if kind == "custom":
            out[name] = [v.strip() for v in str(var.get("query") or "").split(",") if v.strip()]
        elif kind == "query":
            text = var["query"]["query"] if isinstance(var.get("query"), dict) else str(var.get("query"))
            match = _LABEL_VALUES.search(text)
            assert match, f"unsupported variable query {text!r}"
            if not checked(match.group(1)):
                continue  # only the left-out panels use it
            queries.append((name, match.group(1), match.group(3), bool(var.get("includeAll"))))
    if queries:
        answer = evaluate(binary, scrapes, [], [(metric, label) for _, metric, label, _ in queries])
        for (name, _, _, include_all), values in zip(queries, answer["labelValues"], strict=True):
            assert values, f"variable ${name} has no values"
            out[name] = ["(" + "|".join(grafana_escape(v) for v in values) + ")"] if include_all else values
    return out


def grafana_escape(value: str) -> str:
    """A value inside a multi-value regex, escaped as Grafana's Prometheus data source does
    (``prometheusRegularEscape``: regex metacharacters with a backslash that is itself escaped in the string)."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


#: Prometheus 3 writes the ``quantile`` of a summary as an OpenMetrics float when it parses a scrape
#: (``textparse.normalizeFloatsInLabelValues``: Go's ``0`` and ``1`` become ``0.0`` and ``1.0``), so the performance
#: dashboard's ``quantile="0"`` / ``quantile="1"`` selectors, written for Prometheus 2, match nothing on Prometheus 3
#: whoever exports the summary. They are checked in the form Prometheus 3 stores.
PROMETHEUS_3 = {'quantile="0"': 'quantile="0.0"', 'quantile="1"': 'quantile="1.0"'}


def expand(expr: str, choice: dict[str, str], window: str) -> str:
    for written, stored in PROMETHEUS_3.items():
        expr = expr.replace(written, stored)
    expr = expr.replace("$__rate_interval", window).replace("$__interval", window)
    for name in sorted(choice, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", choice[name]).replace("$" + name, choice[name])
    return expr


def checked(expr: str) -> bool:
    return not any(name in expr for name in NOT_KARPENTER)


def dashboard_queries(dashboard: dict[str, Any], variables: dict[str, list[str]], window: str
                      ) -> list[tuple[str, str, str]]:
    """(panel, the expression as written, the expression expanded) for every variable choice it uses."""
    out = []
    for title, expr in targets(dashboard):
        if not checked(expr):
            continue
        used = sorted(n for n in variables if f"${n}" in expr or "${" + n + "}" in expr or f"${n}" in title)
        used = [n for n in used if f"${n}" in expr or "${" + n + "}" in expr]
        for values in itertools.product(*(variables[n] for n in used)):
            out.append((title, expr, expand(expr, dict(zip(used, values, strict=True)), window)))
    return out


# -- the e2e run -------------------------------------------------------------------------------------------
NAMESPACE = "dashboards"
POOL = "dashboards"


def _nodepool() -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": POOL},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                                 {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["5"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}},
                "limits": {"cpu": "1000", "memory": "4000Gi"},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                               "budgets": [{"nodes": "100%"}]}}}


def _daemonset() -> dict[str, Any]:
    labels = {"app": "agent"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": NAMESPACE},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "nodeSelector": {"karpenter.sh/nodepool": POOL}, "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "agent", "image": "registry.example.com/agent:1",
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}


class Scraper:
    """GETs ``/metrics`` every ``interval`` seconds, as Prometheus would (the text format, gzip accepted)."""

    def __init__(self, url: str, interval: float = 3.0) -> None:
        self.url, self.interval = url, interval
        self.scrapes: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def scrape(self) -> None:
        request = urllib.request.Request(self.url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
        self.scrapes.append((int(time.time() * 1000), body.decode()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.scrape()

    def __enter__(self) -> Scraper:
        self.scrape()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.e2e
def test_every_dashboard_panel_has_series(cluster: Any, crds: list[str]) -> None:
    from kubernetes import client

    from bench.workloads import KWOK_NODECLASS, deployment
    from controller.disruption import DisruptionOptions
    from controller.provisioner import ProvisionerOptions
    from controller.run import Controller, ControllerOptions
    from tests.e2e.conftest import apply, tear_down, wait_for

    binary = promql_binary()
    api = cluster.api()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    apply(api, KWOK_NODECLASS)
    apply(api, _nodepool())
    controller = Controller(api, ControllerOptions(
        batch_idle=1.0, batch_max=5.0, metrics_port=0, health_port=None, bind_address="127.0.0.1",
        provisioner=ProvisionerOptions(solve_time_limit=5.0),
        disruption=DisruptionOptions(interval=1.0, time_limit=5.0, validation_wait=1.0)))
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
    thread.start()

    def running(count: int) -> bool:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector="app=web").items
        return len(pods) == count and all(p.status.phase == "Running" for p in pods)

    def pool_nodes() -> list[Any]:
        return [n for n in core.list_node().items if (n.metadata.labels or {}).get("karpenter.sh/nodepool") == POOL]

    started = time.time()
    try:
        assert controller.serving.wait(60), "the metrics endpoint did not start"
        with Scraper(f"http://127.0.0.1:{controller.ports['/metrics']}/metrics") as scraper:
            apply(api, _daemonset())
            apply(api, copy.deepcopy(deployment("web", NAMESPACE, 12, cpu="900m", memory="1Gi")))
            wait_for(lambda: running(12), 180, interval=1.0, what="12 pods Running")
            most = len(pool_nodes())
            apps.patch_namespaced_deployment_scale("web", NAMESPACE, {"spec": {"replicas": 2}})
            wait_for(lambda: running(2), 60, interval=1.0, what="the scale-down to 2 pods")
            wait_for(lambda: len(pool_nodes()) < most and (controller.metrics.value(
                "karpenter_nodes_terminated_total", {"nodepool": POOL, "zone": _any_zone(controller)}) or 0) > 0,
                180, interval=1.0, what="consolidation to terminate a node")
            wait_for(lambda: any(s.name == "karpenter_nodeclaims_terminated_total" and s.value > 0
                                 for m in controller.metrics.registry.collect() for s in m.samples),
                     60, interval=1.0, what="the terminated NodeClaims to be counted")
            time.sleep(3 * scraper.interval)  # scrapes after the last change: a counter's increase needs two
        scrapes = scraper.scrapes
    finally:
        stop.set()
        thread.join(60)
        tear_down(api, NAMESPACE, POOL)  # returns once the pool's Nodes are gone: later tests count every Node
    window = f"{int(time.time() - started) + 60}s"
    at = scrapes[-1][0]
    empty, failed, count = [], [], 0
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        variables = variable_values(dashboard, binary, scrapes)
        queries = dashboard_queries(dashboard, variables, window)
        answers = evaluate(binary, scrapes, [(q, at) for _, _, q in queries])["results"]
        for (title, written, expanded), answer in zip(queries, answers, strict=True):
            count += 1
            if answer.get("error"):
                failed.append(f"{path.name}: {title}: {expanded}: {answer['error']}")
            elif not answer["series"]:
                empty.append(f"{path.name}: {title}: {written}")
    assert not failed, "\n".join(failed)
    assert not empty, f"{len(empty)} of {count} panel expressions have no series:\n" + "\n".join(empty)
    if WITHOUT_KARPENTER:
        assert count > 5  # nodeplan's dashboard was read
        pytest.skip(WITHOUT_KARPENTER)
    assert count > 60  # every dashboard was read (four Karpenter dashboards and nodeplan's)


def _any_zone(controller: Any) -> str:
    """The zone label of a terminated node of the pool (the counter is labelled by nodepool and zone)."""
    for sample in controller.metrics.registry.collect():
        if sample.name == "karpenter_nodes_terminated":
            for s in sample.samples:
                if s.labels.get("nodepool") == POOL and s.value > 0:
                    return str(s.labels["zone"])
    return ""
