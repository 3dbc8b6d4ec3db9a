"""deploy/chart on the real control plane: every object ``helm template`` renders (CRDs included) passes a
server-side dry-run apply; then the chart's CRDs, ServiceAccount and RBAC are installed for real and the
controller runs as a process with the chart's environment and a token of the chart's ServiceAccount (the test
cluster runs no images, so the Deployment itself only goes through the dry run): it passes its start-up permission
check, takes the Lease in the release namespace and provisions a pending pod."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from bench.workloads import KWOK_NODECLASS
from tests.e2e.conftest import ROOT, Cluster, apply, wait_for
from tests.e2e.test_operations import claims, nodepool, pod, purge

pytestmark = pytest.mark.e2e

CHART = ROOT / "deploy" / "chart"
RELEASE = "chart-e2e"  # objects are named chart-e2e-nodeplan: never the names deploy/controller.yaml uses
NAMESPACE = "nodeplan-chart"


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    build = subprocess.run([str(ROOT / "hack" / "helm" / "build.sh")], capture_output=True, text=True, check=False)
    if build.returncode != 0:
        pytest.fail(f"hack/helm/build.sh failed:\n{build.stderr[-4000:]}")
    helm = Path(build.stdout.strip().splitlines()[-1]) / "helm"
    out = subprocess.run([str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture
def release_namespace(cluster: Cluster) -> Iterator[str]:
    """The release namespace (helm install --create-namespace would make it); cluster-scoped objects of the release
    are removed afterwards, with every NodeClaim, Node and NodePool the controller left."""
    api = cluster.api()
    core = client.CoreV1Api(api)
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    yield NAMESPACE
    rbac = client.RbacAuthorizationV1Api(api)
    with contextlib.suppress(client.ApiException):
        rbac.delete_cluster_role_binding(f"{RELEASE}-nodeplan")
    with contextlib.suppress(client.ApiException):
        rbac.delete_cluster_role(f"{RELEASE}-nodeplan")
    core.delete_namespace(NAMESPACE, grace_period_seconds=0)
    purge(api)
    wait_for(lambda: NAMESPACE not in [n.metadata.name for n in core.list_namespace().items], 120, interval=1.0,
             what=f"namespace {NAMESPACE} deleted")


def _kubeconfig(cluster: Cluster, api: client.ApiClient, account: str, path: Path) -> Path:
    """The test cluster's kubeconfig with the admin replaced by a TokenRequest token of ``account``."""
    token = client.CoreV1Api(api).create_namespaced_service_account_token(
        account, NAMESPACE, {"spec": {"expirationSeconds": 3600}}).status.token
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = account
    path.write_text(yaml.safe_dump(config))
    return path


def _container_env(deployment: dict[str, Any]) -> dict[str, str]:
    out = {}
    for item in deployment["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "valueFrom" in item:  # POD_NAMESPACE from the downward API
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
            out[item["name"]] = NAMESPACE
        else:
            out[item["name"]] = item["value"]
    return out


def test_chart_dry_run_then_controller_runs_as_its_service_account(cluster: Cluster, release_namespace: str,
                                                                     rendered: list[dict[str, Any]],
                                                                     tmp_path: Path) -> None:
    api = cluster.api()
    kinds = sorted(o["kind"] for o in rendered)
    assert kinds == sorted(["CustomResourceDefinition"] * len(list((CHART / "crds").glob("*.yaml"))) + [
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        "Role", "RoleBinding", "Service", "Deployment", "PodDisruptionBudget"])
    crds = [o for o in rendered if o["kind"] == "CustomResourceDefinition"]
    for obj in crds:  # namespaced custom objects need their CRD, even in a dry run
        apply(api, obj)
    for obj in rendered:
        if obj["kind"] != "CustomResourceDefinition":
            admitted = apply(api, obj, dry_run=True)
            assert admitted["metadata"]["name"] == obj["metadata"]["name"]
            if obj["kind"] == "Deployment":  # defaulted and validated by the API server, nothing pruned
                spec = admitted["spec"]["template"]["spec"]
                assert admitted["spec"]["replicas"] == 2
                assert spec["affinity"] == obj["spec"]["template"]["spec"]["affinity"]
                assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert not client.AppsV1Api(api).list_namespaced_deployment(NAMESPACE).items  # a dry run stores nothing

    # install what a process needs: the ServiceAccount and its RBAC, exactly as rendered
    for obj in rendered:
        if obj["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            apply(api, obj)
    apply(api, KWOK_NODECLASS)
    apply(api, nodepool("chart"))
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = _kubeconfig(cluster, api, account, tmp_path / "kubeconfig")
    # the chart's environment; only the ports move (NODEPLAN_ wins over the chart's METRICS_PORT) so that
    # nothing else on this machine collides with 8080
    env = {**cluster.env, **_container_env(deployment), "NODEPLAN_METRICS_PORT": "0", "NODEPLAN_HEALTH_PORT": "0",
           "NODEPLAN_BIND_ADDRESS": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "import sys; from cli.app import app; sys.argv[0] = 'nodeplan'; app()",
               "run", "--kubeconfig", str(kubeconfig)]
    core = client.CoreV1Api(api)
    log = tmp_path / "controller.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out, env=env, cwd=tmp_path)
        try:
            # RBAC bindings reach the authorizer within a moment; before that the permission check may exit 2
            wait_for(lambda: "controller running" in log.read_text() or process.poll() is not None, 90,
                     what="the controller to pass its permission check")
            assert process.poll() is None, log.read_text()[-3000:]
            core.create_namespaced_pod(NAMESPACE, pod("web", NAMESPACE))

            def running() -> bool:
                status = core.read_namespaced_pod("web", NAMESPACE).status
                return status.phase == "Running"

            wait_for(running, 120, interval=1.0, what="the pending pod provisioned and Running")
            lease = client.CoordinationV1Api(api).read_namespaced_lease("nodeplan-leader-election", NAMESPACE)
            assert lease.spec.holder_identity
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    # no permission is missing; an Event refused in another test's namespace being deleted (403: the namespace is
    # terminating) is not the chart's RBAC
    refused = [line for line in text.splitlines() if "HTTP 403" in line
               and not ("could not write Event" in line and f" {NAMESPACE}/" not in line)]
    assert "Traceback" not in text and not refused, text[-3000:]
    node = core.read_namespaced_pod("web", NAMESPACE).spec.node_name
    mine = [c for c in claims(api) if c["metadata"].get("labels", {}).get("karpenter.sh/nodepool") == "chart"]
    assert node in {c.get("status", {}).get("nodeName") for c in mine}, (node, mine)
