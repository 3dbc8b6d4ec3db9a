"""``nodeplan run --provider aws`` (or NODEPLAN_PROVIDER=aws) up to the controller's start, against moto: the
settings (Karpenter's CLUSTER_NAME, CLUSTER_ENDPOINT, INTERRUPTION_QUEUE; AWS_REGION), boto3 honouring
AWS_ENDPOINT_URL by itself, the catalog from the EC2 API, the periodic tasks, and one-line exit-2 errors."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

import cli.run
from cli.app import app
from cli.settings import KARPENTER_NAMES, TOOLING
from controller import permissions
from controller.offerings import UnavailableOfferings
from providers.aws import operator
from providers.aws.provider import AWSProvider
from tests.aws.conftest import Aws

ENV = {"NODEPLAN_PROVIDER": "aws", "CLUSTER_NAME": "test-cluster",
       "CLUSTER_ENDPOINT": "https://ABC.gr7.us-east-1.eks.amazonaws.com", "AWS_REGION": "us-east-1",
       "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class Recorder:
    """The controller, replaced: what it was built with and what was attached to it."""

    started: list[Recorder] = []

    def __init__(self, api: Any, options: Any, instance_types: Any, provider: Any = None) -> None:
        self.instance_types, self.provider, self.tasks, self.catalogs = list(instance_types), provider, [], []
        self.cache = self.provisioner = self.events = None
        self.unavailable = UnavailableOfferings()
        self.metrics = type("M", (), {"registry": CollectorRegistry()})()
        self.lost_leadership = self.crashed = False
        Recorder.started.append(self)

    def add_task(self, task: Any) -> None:
        self.tasks.append(task)

    def use_catalog(self, types: Any) -> None:
        self.catalogs.append(types)

    def run(self, stop: Any) -> None:
        return None


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Recorder]:
    import os

    for name in list(os.environ):
        if (name.startswith("NODEPLAN_") and name not in TOOLING) or name in KARPENTER_NAMES.values():
            monkeypatch.delenv(name)
    Recorder.started = []
    monkeypatch.setattr(cli.run, "api_client",
                        lambda kubeconfig=None, **limit: type("Api", (), {"configuration": None})())
    monkeypatch.setattr(cli.run, "preflight", lambda *a, **kw: None)
    monkeypatch.setattr(cli.run, "configure_logging", lambda *a, **kw: None)
    monkeypatch.setattr(cli.run, "Controller", Recorder)
    monkeypatch.setattr(permissions, "check", lambda *a, **kw: [])
    monkeypatch.setattr(operator, "kubernetes_version", lambda api: "1.31")
    monkeypatch.setattr(operator, "ClusterNodeClasses", lambda api: None)
    monkeypatch.setattr(signal, "signal", lambda signum, handler: None)
    return Recorder.started


def run(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, ["run", "--kubeconfig", "/dev/null", *args], env=env)


def test_provider_aws_from_the_environment_builds_the_catalog_and_tasks(aws: Aws, started: list[Recorder]) -> None:
    aws.sqs.create_queue(QueueName="test-cluster")
    env = {**ENV, "AWS_ENDPOINT_URL": aws.endpoint, "INTERRUPTION_QUEUE": "test-cluster"}
    result = run(env)
    assert result.exit_code == 0, result.output
    controller = started[-1]
    assert isinstance(controller.provider, AWSProvider)
    # no --aws-endpoint-url: boto3 took AWS_ENDPOINT_URL from the environment by itself
    assert controller.provider._ec2.meta.endpoint_url == aws.endpoint
    assert controller.provider._ec2.meta.config.retries["mode"] == "adaptive"
    types = {it.name: it for it in controller.instance_types}
    assert "m5.large" in types and {o.capacity_type for o in types["m5.large"].offerings} == {"on-demand", "spot"}
    assert controller.provider.settings.cluster.name == "test-cluster"
    assert controller.provider.settings.kubernetes_version == "1.31"
    tasks = {t.name: t for t in controller.tasks}
    assert set(tasks) == {"ec2nodeclass-status", "catalog-refresh", "interruption"}
    assert tasks["catalog-refresh"].interval == 12 * 3600  # Karpenter's AWS provider: prices every 12 h
    assert tasks["interruption"]._queue.url.endswith("/test-cluster")


def test_catalog_refresh_interval_and_restricted_catalog(aws: Aws, started: list[Recorder], tmp_path: Any) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("""apiVersion: nodeplan.io/v1alpha1
kind: InstanceCatalog
instanceTypes:
- name: m5.large
  capacity: {cpu: "2", memory: 8Gi, pods: "29"}
  offerings: [{zone: us-east-1a, capacityType: on-demand, price: 0.096}]
- name: c5.large
  capacity: {cpu: "2", memory: 4Gi, pods: "29"}
  offerings: [{zone: us-east-1a, capacityType: on-demand, price: 0.085}]
""")
    result = run({**ENV, "AWS_ENDPOINT_URL": aws.endpoint}, "--catalog", str(catalog), "--catalog-refresh", "1h")
    assert result.exit_code == 0, result.output
    controller = started[-1]
    assert sorted(it.name for it in controller.instance_types) == ["c5.large", "m5.large"]
    tasks = {t.name: t for t in controller.tasks}
    assert "interruption" not in tasks  # no queue, no interruption handling
    assert tasks["catalog-refresh"].interval == 3600
    tasks["catalog-refresh"].step()  # the refresh goes to the provider and the planners alike
    assert [sorted(it.name for it in c) for c in controller.catalogs] == [["c5.large", "m5.large"]]


@pytest.mark.parametrize(("env", "args", "expected"), [
    ({k: v for k, v in ENV.items() if k != "CLUSTER_NAME"}, (),
     "error: --provider aws needs --cluster-name (CLUSTER_NAME)"),
    ({k: v for k, v in ENV.items() if k != "AWS_REGION"}, (), "error: --provider aws needs --aws-region (AWS_REGION)"),
    (ENV, ("--shadow",), "error: --shadow writes nothing, and --provider aws writes EC2NodeClass status: drop one "
                         "of them"),
    ({**ENV, "NODEPLAN_PROVIDER": "gcp"}, (), "error: NODEPLAN_PROVIDER='gcp': 'gcp' is not one of 'kwok', 'aws'."),
    ({**ENV, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, (), "error: --provider aws: cannot reach the EC2 API: "),
])
def test_bad_aws_settings_are_one_line_and_exit_2(started: list[Recorder], env: dict[str, str],
                                                  args: tuple[str, ...], expected: str) -> None:
    result = run({**env, "AWS_MAX_ATTEMPTS": "1"}, *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(expected), result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not started
