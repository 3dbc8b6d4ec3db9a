"""``nodeplan snapshot``: what is captured, what is scrubbed, and how failures read.

The e2e test needs a running test control plane (``hack/control-plane/cluster.sh up``) and ``kubectl``;
point ``NODEPLAN_E2E_KUBECONFIG`` at its kubeconfig (``$NODEPLAN_CLUSTER_DIR/kubeconfig``). Without it
that test is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from controller.capture import CapturedKind, capture, scrub
from controller.cli import app
from model.snapshot import load_snapshot

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


def test_scrub_drops_env_values_command_lines_and_bookkeeping() -> None:
    pod = scrub({"apiVersion": "v1", "kind": "Pod", **_pod("web-0")})
    text = json.dumps(pod)
    assert not any(s in text for s in SECRETS)
    container = pod["spec"]["containers"][0]
    assert container["env"] == [{"name": "API_KEY"}, {"name": "DB"}]  # names stay, values go
    assert "command" not in container and "args" not in container
    assert container["resources"] == {"requests": {"cpu": "1"}}  # what placement needs stays
    assert pod["metadata"]["annotations"] == {"team": "a"} and "managedFields" not in pod["metadata"]
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


E2E_KUBECONFIG = os.environ.get("NODEPLAN_E2E_KUBECONFIG")

OBJECTS = """\
apiVersion: v1
kind: Namespace
metadata: {name: NS}
---
apiVersion: v1
kind: Secret
metadata: {name: db-password, namespace: NS}
stringData: {password: hunter2}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: NS}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers:
      - {name: a, image: agent:1, env: [{name: K, value: template-secret}],
         resources: {requests: {cpu: 50m, memory: 64Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: NS, labels: {app: web}}
spec:
  containers:
  - name: web
    image: web:1
    command: [/bin/web, --password=cmdline-secret]
    env:
    - {name: DB_PASSWORD, valueFrom: {secretKeyRef: {name: db-password, key: password}}}
    - {name: API_KEY, value: env-secret-value}
    resources: {requests: {cpu: "1", memory: 2Gi}}
"""


@pytest.mark.e2e
@pytest.mark.skipif(not E2E_KUBECONFIG or not shutil.which("kubectl"),
                    reason="set NODEPLAN_E2E_KUBECONFIG to a running test control plane (and install kubectl)")
def test_capture_a_real_control_plane(tmp_path: Path) -> None:
    assert E2E_KUBECONFIG is not None
    namespace = f"capture-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "KUBECONFIG": E2E_KUBECONFIG}
    subprocess.run(["kubectl", "apply", "-f", "-"], input=OBJECTS.replace("NS", namespace), text=True,
                   env=env, check=True, capture_output=True, timeout=60)
    try:
        out = tmp_path / "snap.yaml"
        result = CliRunner().invoke(app, ["snapshot", "--kubeconfig", E2E_KUBECONFIG, "-o", str(out)])
        assert result.exit_code == 0, result.stderr
        text = out.read_text()
        assert not any(s in text for s in SECRETS)
        assert "kind: Secret" not in text and "last-applied-configuration" not in text
        snap = load_snapshot(out)  # the other commands read it
        assert f"{namespace}/web-0" in {p.key for p in snap.pending_pods()}
        assert f"{namespace}/agent" in {d.key for d in snap.daemonsets}
        assert namespace in {n.name for n in snap.namespaces}
        solved = CliRunner().invoke(app, ["solve", str(out), "--format", "json", "--time-limit", "5"])
        assert solved.exit_code == 0
    finally:
        subprocess.run(["kubectl", "delete", "namespace", namespace, "--wait=false"], env=env,
                       capture_output=True, timeout=60, check=False)
