"""``nodeplan snapshot``: what is captured, what is scrubbed, and how failures read (the capture of a
real control plane is in ``tests/e2e/test_capture.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from cli.app import app
from cli.capture import CapturedKind, capture, scrub

SECRETS = ("hunter2", "env-secret-value", "cmdline-secret", "template-secret")


def _pod(name: str, namespace: str = "shop") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "managedFields": [{"manager": "kubectl"}],
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{... hunter2 ...}",
                                         "team": "a"}},
            "spec": {"containers": [{"name": "c", "image": "x", "command": ["/bin/x", "--password=cmdline-secret"],
                                     "args": ["-v"], "env": [{"name": "API_KEY", "value": "env-secret-value"},
                                                             {"name": "DB", "valueFrom": {"secretKeyRef": {
                                                                 "name": "db", "key": "password"}}}],
                                     "resources": {"requests": {"cpu": "1"}}}],
                     "initContainers": [{"name": "i", "env": [{"name": "T", "value": "env-secret-value"}]}]}}


class FakeResponse:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.data = json.dumps({"items": items}).encode()


def _lister(items: list[dict[str, Any]] | None = None, status: int | None = None) -> Any:
    def lister(**kwargs: Any) -> FakeResponse:
        assert kwargs["_preload_content"] is False
        if status is not None:
            raise ApiException(status=status, reason="Not Found" if status == 404 else "Forbidden")
        return FakeResponse(items or [])
    return lister


def test_scrub_drops_env_command_lines_and_bookkeeping() -> None:
    pod = scrub({"apiVersion": "v1", "kind": "Pod", **_pod("web-0")})
    text = json.dumps(pod)
    assert not any(s in text for s in SECRETS)
    container = pod["spec"]["containers"][0]
    assert "env" not in container and "command" not in container and "args" not in container
    assert container["resources"] == {"requests": {"cpu": "1"}}  # what placement needs stays
    assert "annotations" not in pod["metadata"] and "managedFields" not in pod["metadata"]  # none a rule reads
    ds = scrub({"kind": "DaemonSet", "metadata": {"name": "d"},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [
                    {"name": "K", "value": "template-secret"}]}]}}}})
    assert "template-secret" not in json.dumps(ds)
    node = scrub({"kind": "Node", "metadata": {"name": "n"}, "status": {"images": [{"names": ["a"]}],
                                                                       "allocatable": {"cpu": "2"}}})
    assert node["status"] == {"allocatable": {"cpu": "2"}}


def test_capture_lists_every_kind_sorted_with_kind_and_api_version() -> None:
    objects, warnings = capture([
        CapturedKind("NodePool", "karpenter.sh/v1", _lister(status=404)),
        CapturedKind("Pod", "v1", _lister([_pod("web-1"), _pod("web-0"), _pod("a", "alpha")])),
    ])
    assert [(o["kind"], o["apiVersion"], o["metadata"]["name"]) for o in objects] == [
        ("Pod", "v1", "a"), ("Pod", "v1", "web-0"), ("Pod", "v1", "web-1")]
    assert list(objects[0])[:2] == ["apiVersion", "kind"]
    assert warnings == ["skipped NodePool: the API server does not serve karpenter.sh/v1 NodePool "
                        "(CRD not installed?)"]
    with pytest.raises(ApiException):
        capture([CapturedKind("Pod", "v1", _lister(status=403))])


def test_unusable_kubeconfig_is_one_line_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["snapshot", "--kubeconfig", str(tmp_path / "missing")])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: ")
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
              "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
              "users": [{"name": "u", "user": {"token": "t"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    result = runner.invoke(app, ["snapshot", "--kubeconfig", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: http://127.0.0.1:9: cannot reach the API server (MaxRetryError)"
