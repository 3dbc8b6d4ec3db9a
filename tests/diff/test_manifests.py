"""Manifests as input: workloads become the pods their controllers would create, errors name file/object/field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from model.errors import InputError
from model.manifests import expand_workload, load_input, load_manifests, looks_like_manifests, parse_manifests
from model.resources import CPU, MEMORY
from tests.conftest import EXAMPLE, ROOT

MANIFESTS = ROOT / "fixtures" / "manifests"
GI = 1024**3


def workload(kind: str, name: str = "app", spec: dict[str, Any] | None = None, *, namespace: str | None = None,
             container: dict[str, Any] | None = None) -> dict[str, Any]:
    pod_spec = {"containers": [container or {"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
    template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
    body: dict[str, Any] = {**(spec or {}), "template": template}
    if kind == "CronJob":
        body = {"schedule": "* * * * *", **(spec or {}), "jobTemplate": {"spec": {"template": template}}}
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": body}


def names(obj: dict[str, Any]) -> list[str]:
    return [p.name for p in expand_workload(obj)]


@pytest.mark.parametrize(("kind", "spec", "expected"), [
    ("Deployment", {}, ["app-0"]),                                     # replicas default 1
    ("Deployment", {"replicas": 3}, ["app-0", "app-1", "app-2"]),
    ("Deployment", {"replicas": 0}, []),
    ("ReplicaSet", {"replicas": 2}, ["app-0", "app-1"]),
    ("StatefulSet", {"replicas": 2}, ["app-0", "app-1"]),               # StatefulSet ordinals
    ("Job", {}, ["app-0"]),                                            # parallelism default 1
    ("Job", {"parallelism": 4, "completions": 2}, ["app-0", "app-1"]),  # never more pods than completions
    ("Job", {"parallelism": 3}, ["app-0", "app-1", "app-2"]),          # completions default parallelism
    ("Job", {"parallelism": 3, "suspend": True}, []),
    ("CronJob", {}, ["app-0"]),                                        # one run of the job template
    ("CronJob", {"suspend": True}, []),
])
def test_workload_pod_counts_and_names(kind: str, spec: dict[str, Any], expected: list[str]) -> None:
    obj = workload(kind, spec=spec)
    if kind == "CronJob" and "suspend" not in spec:
        obj["spec"]["jobTemplate"]["spec"]["parallelism"] = 1
    assert names(obj) == expected


def test_kubernetes_defaults_namespace_labels_owner_and_requests_from_limits() -> None:
    obj = workload("Deployment", spec={"replicas": 2},
                   container={"name": "c", "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}})
    pods = expand_workload(obj)
    assert {p.namespace for p in pods} == {"default"}
    assert pods[0].labels == {"app": "app"} and pods[0].owner_kind == "Deployment" and pods[0].owner_name == "app"
    assert pods[0].requests[CPU] == 1000 and pods[0].requests[MEMORY] == 2 * GI  # limits default requests
    assert all(p.pending and not p.daemon for p in pods)


def test_fixture_directory_expands_every_kind() -> None:
    snap = load_manifests(MANIFESTS / "base")
    keys = sorted(p.key for p in snap.pods)
    assert keys == ["analytics/nightly-report-0", "analytics/nightly-report-1",  # CronJob: parallelism 2
                    "default/cache-0", "default/cache-1",                       # helm output, no namespace
                    "default/debug",                                            # a plain Pod
                    "shop/db-0", "shop/db-1", "shop/db-2",                      # StatefulSet
                    "shop/migrate-0",                                           # Job
                    "shop/web-0", "shop/web-1", "shop/web-2", "shop/web-3"]
    assert [np.name for np in snap.nodepools] == ["general", "batch"]
    assert [d.name for d in snap.daemonsets] == ["node-exporter"] and len(snap.pdbs) == 1
    cache = next(p for p in snap.pods if p.name == "cache-0")
    assert cache.requests[CPU] == 1000  # the init container's 1 cpu outweighs the app's 250m
    assert any("Service" in w for w in snap.warnings) and any("ConfigMap" in w for w in snap.warnings)


def test_helm_template_output_file_is_manifests(tmp_path: Path) -> None:
    text = (MANIFESTS / "base" / "apps" / "cache-helm.yaml").read_text()
    path = tmp_path / "rendered.yaml"
    path.write_text(text + "\n---\n# Source: empty.yaml\n---\n")
    snap, kind = load_input(path)
    assert kind == "manifests" and sorted(p.name for p in snap.pods) == ["cache-0", "cache-1"]


def test_kubectl_snapshot_is_not_mistaken_for_manifests() -> None:
    snap, kind = load_input(EXAMPLE)
    assert kind == "snapshot"
    docs = yaml.safe_load_all(EXAMPLE.read_text())
    assert not looks_like_manifests(list(docs))
    # a live capture lists Deployments beside the pods they own: nothing is expanded twice
    owned = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-abc", "ownerReferences": [
        {"kind": "ReplicaSet", "name": "web-5d", "controller": True}]}, "spec": {"containers": [{"name": "c"}]}}
    assert not looks_like_manifests([workload("Deployment", "web"), owned])
    assert snap.pods


def test_controlled_objects_are_left_to_their_owner() -> None:
    rs = workload("ReplicaSet", "web-5d", {"replicas": 3})
    rs["metadata"]["ownerReferences"] = [{"kind": "Deployment", "name": "web", "controller": True}]
    snap = parse_manifests([("f.yaml", workload("Deployment", "web", {"replicas": 2})), ("f.yaml", rs)],
                           source="f.yaml")
    assert sorted(p.name for p in snap.pods) == ["web-0", "web-1"]


def test_documents_without_kind_are_skipped_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text("replicaCount: 3\nimage: {tag: latest}\n")
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(workload("Deployment", "web")))
    snap = load_manifests(tmp_path)
    assert [p.name for p in snap.pods] == ["web-0"]
    assert any("values.yaml" in w for w in snap.warnings)


BAD = {
    "negative replicas": (workload("Deployment", "web", {"replicas": -1}, namespace="shop"),
                          "Deployment shop/web: field spec.replicas: must be non-negative, got -1"),
    "replicas not a number": (workload("StatefulSet", "db", {"replicas": "many"}),
                              "StatefulSet db: field spec.replicas: expected an integer, got 'many'"),
    "bad quantity in template": (
        workload("Deployment", "web", namespace="shop",
                 container={"name": "c", "resources": {"requests": {"cpu": "lots"}}}),
        "Deployment shop/web: field spec.template.spec.containers[0].resources.requests.cpu: invalid quantity 'lots'"),
    "cronjob template": (
        workload("CronJob", "nightly", container={"name": "c", "resources": {"limits": {"memory": "1Qi"}}}),
        "CronJob nightly: field spec.jobTemplate.spec.template.spec.containers[0].resources.limits.memory"),
    "no template": ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {}},
                    "Deployment web: field spec.template: a workload needs a pod template"),
    "negative parallelism": (workload("Job", "j", {"parallelism": -2}),
                             "Job j: field spec.parallelism: must be non-negative, got -2"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_workloads_name_file_object_and_field(case: str, tmp_path: Path) -> None:
    obj, expected = BAD[case]
    path = tmp_path / "apps" / "bad.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(obj))
    with pytest.raises(InputError) as err:
        load_manifests(tmp_path)
    assert str(err.value).startswith(f"{path}: ")
    assert expected in str(err.value)


def test_an_error_in_a_passthrough_object_names_its_own_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(workload("Deployment", "web")))
    (tmp_path / "pools.yaml").write_text(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template:\n    spec:\n"
        "      requirements: [{key: a, operator: Near, values: [b]}]\n")
    with pytest.raises(InputError, match=r"pools\.yaml: NodePool np: field spec\.template\.spec\.requirements\[0\]"):
        load_manifests(tmp_path)


def test_empty_directory_and_duplicate_pods(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no \*\.yaml"):
        load_manifests(tmp_path)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0"}, "spec": {"containers": [{"name": "c"}]}}
    with pytest.raises(InputError, match="pod default/web-0 would exist twice"):
        parse_manifests([("a.yaml", pod), ("b.yaml", workload("Deployment", "web"))], source="dir")


def test_a_pod_finds_its_claim_in_another_file(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"containers": [{"name": "c"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}))
    (tmp_path / "storage.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "shop"},
         "spec": {"storageClassName": "local"}},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local"},
         "volumeBindingMode": "WaitForFirstConsumer"},
        workload("Deployment", "web")]))
    snap = load_manifests(tmp_path)
    pod = next(p for p in snap.pods if p.name == "p")
    assert pod.volume_claims == ("data",) and pod.volume_problem == ""


def test_solve_and_verify_read_manifests(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from cli.app import app

    runner = CliRunner()
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", str(MANIFESTS / "base"), "-o", "json", "--output-file", str(out)])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(out.read_text())
    placed = [p for c in plan["nodeClaims"] for p in c["pods"]]
    assert len(placed) == 13 and not plan["unschedulable"]
    assert "skipped 1 object(s) of kind Service" in result.stderr
    result = runner.invoke(app, ["verify", str(MANIFESTS / "base"), str(out)])
    assert result.exit_code == 0 and "plan is valid" in result.stderr
    result = runner.invoke(app, ["solve", str(MANIFESTS / "base"), "-o", "json", "--quiet"])
    assert result.exit_code == 0 and result.stderr == "" and json.loads(result.stdout)["nodeClaims"]


KUSTOMIZE_OUTPUT = """\
apiVersion: v1
kind: Namespace
metadata:
  name: prod
---
apiVersion: apps/v1
kind: Deployment
metadata:
  labels:
    env: prod
  name: prod-api
  namespace: prod
spec:
  replicas: 3
  selector:
    matchLabels:
      app: api
      env: prod
  template:
    metadata:
      labels:
        app: api
        env: prod
    spec:
      containers:
      - image: api:2.0
        name: api
        resources:
          limits:
            cpu: 750m
            memory: 1536Mi
"""


def test_kustomize_build_output(tmp_path: Path) -> None:
    path = tmp_path / "kustomize.yaml"
    path.write_text(KUSTOMIZE_OUTPUT)
    snap, kind = load_input(path)
    assert kind == "manifests" and [n.name for n in snap.namespaces] == ["prod"]
    assert [p.key for p in snap.pods] == ["prod/prod-api-0", "prod/prod-api-1", "prod/prod-api-2"]
    assert snap.pods[0].labels == {"app": "api", "env": "prod"} and snap.pods[0].requests[CPU] == 750
