"""Controller logs: one JSON object per line with Karpenter's keys (level, time, logger, message), RFC 3339
timestamps with milliseconds and a zone, the objects a line is about as fields, the standard library's lines
rendered the same way, and the ``--log-format`` / ``--log-level`` settings."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from cli.app import app
from controller.cache import ClusterCache, Resource
from controller.drain import Drainer
from controller.logs import LogFormat, configure, get_logger
from controller.termination import Terminator

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure("info", LogFormat.json, out)
    yield out
    logging.getLogger().handlers[:] = []


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_every_line_is_json_with_karpenters_keys_and_an_rfc3339_time(stream: io.StringIO) -> None:
    get_logger("controller.lifecycle").info("launched nodeclaim", nodeclaim="general-abc", nodepool="general")
    logging.getLogger("controller.cache").warning("%s list/watch failed (%s)", "Pod", "HTTP 500")
    get_logger("controller.provisioner").debug("not shown at info")
    first, second = lines(stream)
    assert first["message"] == "launched nodeclaim" and first["level"] == "INFO"
    assert first["logger"] == "controller.lifecycle"
    assert (first["nodeclaim"], first["nodepool"]) == ("general-abc", "general")
    assert second == {"level": "WARNING", "logger": "controller.cache", "time": second["time"],
                      "message": "Pod list/watch failed (HTTP 500)"}
    for line in (first, second):
        assert RFC3339_MS.match(line["time"]), line["time"]
        assert datetime.fromisoformat(line["time"].replace("Z", "+00:00")).tzinfo is not None


def test_an_exception_is_one_json_line(stream: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        get_logger("controller.run").exception("worker loop crashed; stopping")
    (line,) = lines(stream)
    assert line["level"] == "ERROR" and "ValueError: boom" in line["exception"]


def test_drain_lines_name_the_pod_and_node(stream: io.StringIO) -> None:
    class Core:
        def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any) -> None:
            if name == "guarded":
                raise client.ApiException(status=429, reason="Too Many Requests")

    cache = ClusterCache({"Pod": Resource("Pod", "v1", lambda **kw: None)})
    for name in ("free", "guarded"):
        cache.upsert("Pod", {"metadata": {"name": name, "namespace": "shop", "uid": name, "resourceVersion": "1"},
                             "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    drainer = Drainer(client.ApiClient(), cache)
    drainer._core = Core()  # type: ignore[assignment]
    drainer.drain("n1")
    by_pod = {line["pod"]: line for line in lines(stream)}
    assert by_pod["shop/free"]["message"] == "evicted pod" and by_pod["shop/free"]["node"] == "n1"
    assert "PodDisruptionBudget" in by_pod["shop/guarded"]["message"]


def test_termination_lines_name_the_nodeclaim_and_nodepool(stream: io.StringIO) -> None:
    class Custom:
        def delete_cluster_custom_object(self, *args: Any) -> None:
            return None

    cache = ClusterCache({"Pod": Resource("Pod", "v1", lambda **kw: None)})
    terminator = Terminator(client.ApiClient(), cache, provider=None)  # type: ignore[arg-type]
    terminator._custom = Custom()  # type: ignore[assignment]
    claim = {"metadata": {"name": "general-abc", "labels": {"karpenter.sh/nodepool": "general"}},
             "status": {"nodeName": "n1"}}
    terminator.delete_claim_of_deleted_node(claim, None)
    (line,) = lines(stream)
    assert (line["nodeclaim"], line["nodepool"], line["node"]) == ("general-abc", "general", "n1")


def test_console_format_is_for_people() -> None:
    out = io.StringIO()
    configure("debug", "console", out)
    try:
        get_logger("controller.drain").debug("evicted pod", pod="shop/a")
    finally:
        logging.getLogger().handlers[:] = []
    text = out.getvalue()
    assert "evicted pod" in text and "pod=shop/a" in text and not text.startswith("{")


def test_a_bad_log_format_is_one_line_exit_2() -> None:
    result = CliRunner().invoke(app, ["run", "--kubeconfig", "/dev/null", "--log-format", "xml"], env={})
    assert result.exit_code == 2
    assert "--log-format" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    result = CliRunner().invoke(app, ["run", "--kubeconfig", "/dev/null"], env={"NODEPLAN_LOG_FORMAT": "yaml"})
    assert result.exit_code == 2 and "NODEPLAN_LOG_FORMAT" in result.stderr, result.stderr
