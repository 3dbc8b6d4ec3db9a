"""deploy/chart with helm (built from the Go module proxy by hack/helm/build.sh, only when missing): ``helm lint``,
and the objects ``helm template`` renders — CRDs identical to deploy/crds, RBAC equal to the permission table the
controller checks at start-up, a Deployment of two leader-electing replicas kept off the nodes it manages, its
PodDisruptionBudget, metrics Service and optional ServiceMonitor, and ``settings:`` turned into environment
variables that ``nodeplan run`` reads into the options it runs with."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import cli.run
from cli.app import app
from cli.settings import KARPENTER_NAMES, TOOLING
from controller import permissions
from controller.run import ControllerOptions
from solver.rules.preferences import PreferencePolicy

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart"
NAMESPACE = "nodeplan-system"


@pytest.fixture(scope="module")
def helm() -> str:
    build = subprocess.run([str(ROOT / "hack" / "helm" / "build.sh")], capture_output=True, text=True, check=False)
    if build.returncode != 0:
        pytest.fail(f"hack/helm/build.sh failed:\n{build.stderr[-4000:]}")
    return str(Path(build.stdout.strip().splitlines()[-1]) / "helm")


def render(helm: str, *values: str) -> list[dict[str, Any]]:
    args = [helm, "template", "nodeplan", str(CHART), "--namespace", NAMESPACE]
    for value in values:
        args += ["--set", value]
    out = subprocess.run(args, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objects]
    return found[0]


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    """The controller container's environment; ``fieldRef: metadata.namespace`` resolved as the kubelet would."""
    out = {}
    for item in deployment["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "valueFrom" in item:
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
            out[item["name"]] = NAMESPACE
        else:
            out[item["name"]] = item["value"]
    return out


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return set(selector) == {"matchLabels"} and all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_helm_lint(helm: str) -> None:
    for values in ([], ["--set", "serviceMonitor.enabled=true,settings.shadow=true"]):
        out = subprocess.run([helm, "lint", "--strict", str(CHART), *values], capture_output=True, text=True,
                             check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


def test_chart_crds_are_deploy_crds() -> None:
    """Helm installs crds/ as is; they must be the generated ones (``make crds`` writes both)."""
    generated = {p.name: p.read_text() for p in (ROOT / "deploy" / "crds").glob("*.yaml")}
    packaged = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert packaged == generated, "deploy/chart/crds differs from deploy/crds: run make crds"


def test_rbac_is_the_permission_table(helm: str) -> None:
    objects = render(helm)
    assert permissions.rbac_rules(objects) == permissions.required_rules()
    account = one(objects, "ServiceAccount")["metadata"]
    assert account["namespace"] == NAMESPACE
    role = one(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE  # the Lease only in the release namespace
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = one(objects, kind)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                                      "name": one(objects, role_kind)["metadata"]["name"]}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}]
    extra = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    widened = render(helm, "additionalClusterRoleRules[0].apiGroups[0]=",
                     "additionalClusterRoleRules[0].resources[0]=configmaps",
                     "additionalClusterRoleRules[0].verbs[0]=get")
    assert extra in one(widened, "ClusterRole")["rules"]


def test_deployment(helm: str) -> None:
    objects = render(helm)
    deployment = one(objects, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert matches(spec["selector"], labels)
    assert pod["serviceAccountName"] == one(objects, "ServiceAccount")["metadata"]["name"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    container = pod["containers"][0]
    assert container["image"] == "localhost/nodeplan:0.1.0"  # appVersion when no tag is given
    assert container["args"] == ["run"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]} and security["runAsNonRoot"] is True
    # never on a node it manages: every required term excludes nodes labelled karpenter.sh/nodepool
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms and all({"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"} in t["matchExpressions"]
                         for t in terms)
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["topologyKey"] for t in anti] == ["kubernetes.io/hostname"]
    assert matches(anti[0]["labelSelector"], labels)  # the chart's default selector: its own replicas
    spread = pod["topologySpreadConstraints"]
    assert [(s["topologyKey"], s["maxSkew"]) for s in spread] == [("topology.kubernetes.io/zone", 1)]
    assert matches(spread[0]["labelSelector"], labels)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http-metrics": 8080, "http": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = env_of(deployment)
    assert env["POD_NAMESPACE"] == NAMESPACE and env["NODEPLAN_LEADER_ELECT"] == "true"
    assert (env["METRICS_PORT"], env["HEALTH_PROBE_PORT"]) == ("8080", "8081")


def test_pdb_service_and_servicemonitor(helm: str) -> None:
    objects = render(helm)
    labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 1
    assert matches(pdb["spec"]["selector"], labels)
    service = one(objects, "Service")
    assert service["spec"]["ports"] == [{"name": "http-metrics", "port": 8080, "targetPort": "http-metrics",
                                         "protocol": "TCP"}]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    assert not [o for o in objects if o["kind"] == "ServiceMonitor"]  # needs the Prometheus Operator: opt-in
    monitored = render(helm, "serviceMonitor.enabled=true", "serviceMonitor.additionalLabels.release=prom",
                       "serviceMonitor.endpointConfig.interval=15s")
    monitor = one(monitored, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [{"port": "http-metrics", "path": "/metrics", "interval": "15s"}]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())


def test_image_values(helm: str) -> None:
    container = lambda *v: one(render(helm, *v), "Deployment")["spec"]["template"]["spec"]["containers"][0]  # noqa: E731
    assert container("controller.image.repository=registry.example.com/nodeplan",
                     "controller.image.tag=1.2.3")["image"] == "registry.example.com/nodeplan:1.2.3"
    digest = "sha256:" + "a" * 64
    assert container("controller.image.digest=" + digest)["image"] == f"localhost/nodeplan:0.1.0@{digest}"


# -- settings: rendered environment → what nodeplan run starts the controller with ---------------------------------
def start_with(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], clients: list[dict[str, Any]] | None = None
               ) -> tuple[Any, list[ControllerOptions]]:
    """``nodeplan run`` with exactly ``env`` (from the chart) on top of a clean environment, the controller replaced
    by a recorder of its options (and the API client by one of its rate limit, into ``clients``)."""
    for name in list(os.environ):
        if (name.startswith("NODEPLAN_") and name not in TOOLING) or name in KARPENTER_NAMES.values():
            monkeypatch.delenv(name)
    seen: list[ControllerOptions] = []

    class Recorder:
        lost_leadership = crashed = False

        def __init__(self, api: Any, options: ControllerOptions, instance_types: Any) -> None:
            seen.append(options)

        def run(self, stop: Any) -> None:
            return None

    made = clients if clients is not None else []
    monkeypatch.setattr(cli.run, "api_client", lambda kubeconfig=None, **limit: made.append(limit) or object())
    monkeypatch.setattr(cli.run, "preflight", lambda api, namespace, elect, **mode: None)
    monkeypatch.setattr(cli.run, "configure_logging", lambda level, **_: None)
    monkeypatch.setattr(cli.run, "Controller", Recorder)
    monkeypatch.setattr(signal, "signal", lambda signum, handler: None)
    result = CliRunner().invoke(app, ["run"], env=env)
    return result, seen


def test_default_settings_start_the_controller_with_its_defaults(helm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result, seen = start_with(monkeypatch, env_of(one(render(helm), "Deployment")))
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # no warning: every variable the chart sets is a setting nodeplan has
    o = seen[0]
    assert o.leader_elect is True and o.lease_namespace == NAMESPACE
    assert (o.batch_max, o.batch_idle, o.metrics_port, o.health_port) == (10.0, 1.0, 8080, 8081)
    assert (o.provisioner.solve_time_limit, o.provisioner.workers, o.provisioner.bind_grace) == (10.0, 2, 15.0)
    assert o.provisioner.preference_policy is PreferencePolicy.RESPECT
    d = o.disruption
    assert (d.enabled, d.interval, d.time_limit, d.validation_wait, d.spot_to_spot) == (True, 10.0, 15.0, 15.0, False)


def test_settings_values_reach_the_controller(helm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = one(render(helm, "settings.batchMaxDuration=1m30s", "settings.batchIdleDuration=500ms",
                            "settings.preferencePolicy=Price", "settings.preferencePrice=0.02",
                            "settings.solveTimeLimit=20s", "settings.solverWorkers=4", "settings.bindGrace=30s",
                            "settings.consolidation.enabled=false", "settings.consolidation.interval=1m",
                            "settings.consolidation.timeLimit=30s", "settings.consolidation.validationWait=5s",
                            "settings.featureGates.spotToSpotConsolidation=true", "controller.metrics.port=9000",
                            "controller.healthProbe.port=9001", "logLevel=debug"), "Deployment")
    env = env_of(deployment)
    assert (env["BATCH_MAX_DURATION"], env["FEATURE_GATES"], env["LOG_LEVEL"]) == (
        "1m30s", "SpotToSpotConsolidation=true", "debug")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http-metrics": 9000, "http": 9001}
    result, seen = start_with(monkeypatch, env)
    assert result.exit_code == 0, result.output
    o = seen[0]
    assert (o.batch_max, o.batch_idle, o.metrics_port, o.health_port) == (90.0, 0.5, 9000, 9001)
    p = o.provisioner
    assert (p.preference_policy, p.preference_price, p.solve_time_limit, p.workers, p.bind_grace) == (
        PreferencePolicy.PRICE, 0.02, 20.0, 4, 30.0)
    d = o.disruption
    assert (d.enabled, d.interval, d.time_limit, d.validation_wait, d.spot_to_spot, d.workers) == (
        False, 60.0, 30.0, 5.0, True, 4)


def test_kube_client_settings_reach_the_api_client(helm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """settings.kubeClientQPS / kubeClientBurst are Karpenter's KUBE_CLIENT_QPS / KUBE_CLIENT_BURST, 200 / 300 by
    default, and become the API client's token bucket."""
    env = env_of(one(render(helm), "Deployment"))
    assert (env["KUBE_CLIENT_QPS"], env["KUBE_CLIENT_BURST"]) == ("200", "300")
    clients: list[dict[str, Any]] = []
    result, _ = start_with(monkeypatch, env, clients)
    assert result.exit_code == 0, result.output
    assert clients == [{"qps": 200.0, "burst": 300}]
    env = env_of(one(render(helm, "settings.kubeClientQPS=12.5", "settings.kubeClientBurst=1000000"), "Deployment"))
    clients.clear()
    result, _ = start_with(monkeypatch, env, clients)
    assert result.exit_code == 0, result.output
    assert clients == [{"qps": 12.5, "burst": 1000000}]
    bad = env_of(one(render(helm, "settings.kubeClientQPS=0"), "Deployment"))
    result, seen = start_with(monkeypatch, bad)
    assert result.exit_code == 2 and not seen
    assert result.stderr.strip() == "error: KUBE_CLIENT_QPS='0': '0' must be a number above 0"


def test_controller_env_values_come_last_and_win(helm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes gives a container the last of duplicate variables; controller.env is rendered after settings."""
    deployment = one(render(helm, "controller.env[0].name=BATCH_MAX_DURATION", "controller.env[0].value=20s"),
                     "Deployment")
    names = [e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names[-1] == "BATCH_MAX_DURATION" and names.count("BATCH_MAX_DURATION") == 2
    result, seen = start_with(monkeypatch, env_of(deployment))
    assert result.exit_code == 0 and seen[0].batch_max == 20.0


def test_shadow_value(helm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "NODEPLAN_SHADOW" not in env_of(one(render(helm), "Deployment"))
    env = env_of(one(render(helm, "settings.shadow=true"), "Deployment"))
    assert env["NODEPLAN_SHADOW"] == "true"
    result, seen = start_with(monkeypatch, env)
    if "shadow" not in inspect.signature(cli.run.run_cmd).parameters:
        # no shadow mode in this nodeplan yet: it must refuse to start rather than provision for real
        assert result.exit_code == 2 and not seen
        assert "unknown setting in the environment: NODEPLAN_SHADOW" in result.stderr
    else:
        assert result.exit_code == 0, result.output
        assert seen[0].shadow is True and seen[0].leader_elect is False  # a Lease is a write
        assert str(seen[0].shadow_options.record) == env["NODEPLAN_SHADOW_RECORD"]


def test_shadow_rbac_is_the_read_only_permission_table(helm: str) -> None:
    """settings.shadow renders read-only RBAC: exactly the rows shadow mode checks, no Role (no Lease)."""
    objects = render(helm, "settings.shadow=true")
    assert permissions.rbac_rules(objects) == permissions.required_rules(permissions.required(shadow=True))
    assert all(verb in ("get", "list", "watch") for _, _, verb, _ in permissions.rbac_rules(objects))
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
    assert env_of(one(objects, "Deployment"))["NODEPLAN_LEADER_ELECT"] == "false"
