"""``nodeplan snapshot`` against the real control plane: captures what the other commands read, never a
secret, an environment value or a command line."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from typer.testing import CliRunner

from cli.app import app
from model.snapshot import load_snapshot
from tests.e2e.conftest import Cluster, apply

pytestmark = pytest.mark.e2e

SECRETS = ("hunter2", "env-secret-value", "cmdline-secret", "template-secret")

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



def test_capture_a_real_control_plane(cluster: Cluster, crds: list[str], tmp_path: Path) -> None:
    namespace = f"capture-{uuid.uuid4().hex[:8]}"
    api = cluster.api()
    for obj in yaml.safe_load_all(OBJECTS.replace("NS", namespace)):
        apply(api, obj)
    try:
        out = tmp_path / "snap.yaml"
        result = CliRunner().invoke(app, ["snapshot", "--kubeconfig", str(cluster.kubeconfig),
                                          "--output-file", str(out)])
        assert result.exit_code == 0, result.stderr
        text = out.read_text()
        assert not any(s in text for s in SECRETS)
        assert "kind: Secret" not in text and "last-applied-configuration" not in text
        snap = load_snapshot(out)  # the other commands read it
        assert f"{namespace}/web-0" in {p.key for p in snap.pending_pods()}
        assert f"{namespace}/agent" in {d.key for d in snap.daemonsets}
        assert namespace in {n.name for n in snap.namespaces}
        solved = CliRunner().invoke(app, ["solve", str(out), "-o", "json", "--time-limit", "5"])
        assert solved.exit_code == 0
    finally:
        client.CoreV1Api(api).delete_namespace(namespace)
