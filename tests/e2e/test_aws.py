"""The AWS provider end to end: the real control plane, the offline EC2 / SSM / IAM / SQS API (moto in server
mode), and the controller as ``nodeplan run --provider aws`` wires it (``providers.aws.operator``), in a thread.

Nothing in nodeplan registers a Node for an EC2 instance; a kubelet does. Here a stand-in plays the kubelet of
every running instance the provider launched: it reads the instance's launch template user data (the AL2023
``NodeConfig`` nodeadm would read), registers a Node with the labels and taints given there and the providerID
``aws:///zone/i-…``, and hands it to KWOK (``kwok.x-k8s.io/node: fake``), which keeps it Ready and runs its pods;
an instance that is no longer running stops its kubelet (the Node stays until termination deletes it, as on
EKS); an instance launched outside CreateFleet (the leaked one) has no NodeConfig and never joins.
One scenario, in order: a 100-pod Deployment pending → CreateFleet → Nodes → every pod Running, instances
= the plan's NodeClaims; a spot interruption warning → replacement Initialized before the 2-minute warning runs
out → drain → the old instance terminated, every pod Running again; insufficient capacity → another offering; a
leaked instance → terminated; the NodePool deleted → every instance terminated; none left afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from kubernetes import client

from bench.workloads import deployment
from controller.disruption import DisruptionOptions
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions
from providers.aws.clients import AWSClients
from providers.aws.operator import AWSOperator, AWSOptions
from providers.aws.userdata import parts
from tests.aws.conftest import CLUSTER, REGION, Aws, aws, moto_endpoint  # noqa: F401  (fixtures)
from tests.e2e.conftest import Cluster, apply, release_finalizers, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "aws"
TYPES = ("m5.large", "m5.xlarge", "c5.xlarge", "c5.2xlarge", "m5.2xlarge")
NODECLASS = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
             "spec": {"role": f"KarpenterNodeRole-{CLUSTER}", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                      "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
                      "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}]}}
NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                                 {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(TYPES)}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}
LIVE = ("pending", "running")


def running_instances(cloud: Aws) -> dict[str, dict[str, Any]]:
    """The cluster's live instances (pending or running), by id."""
    pages = cloud.ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": "tag:eks:eks-cluster-name", "Values": [CLUSTER]},
        {"Name": "instance-state-name", "Values": list(LIVE)}])
    return {i["InstanceId"]: i for page in pages for r in page["Reservations"] for i in r["Instances"]}


class Kubelets:
    """The stand-in kubelets: one Node per running instance, registered as nodeadm's NodeConfig says."""

    def __init__(self, api: client.ApiClient, cloud: Aws, catalog: dict[str, Any]) -> None:
        self._core = client.CoreV1Api(api)
        self._aws = cloud
        self._catalog = catalog
        self.registered: dict[str, str] = {}  # instance id → Node name
        self.stop = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="kubelets", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _user_data(self, instance: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """Labels and taints from the launch template CreateFleet launched the instance with."""
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
        for request in reversed(self._aws.fleet_requests):
            spec = next((s for s in request.get("TagSpecifications", []) if s["ResourceType"] == "instance"), None)
            if spec is None or {"Key": "karpenter.sh/nodeclaim", "Value": tags.get("karpenter.sh/nodeclaim")} \
                    not in spec["Tags"]:
                continue
            for config in request["LaunchTemplateConfigs"]:
                if any(o["InstanceType"] == instance["InstanceType"] for o in config["Overrides"]):
                    name = config["LaunchTemplateSpecification"]["LaunchTemplateName"]
                    data = self._aws.ec2.describe_launch_template_versions(LaunchTemplateName=name)[
                        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
                    mime = parts(base64.b64decode(data["UserData"]).decode())
                    node_config = yaml.safe_load(mime[0].get_payload())["spec"]["kubelet"]
                    flag = next(f for f in node_config["flags"] if f.startswith("--node-labels="))
                    labels = dict(kv.split("=", 1) for kv in flag.removeprefix("--node-labels=").split(","))
                    return labels, node_config["config"]["registerWithTaints"]
        raise LookupError(f"no CreateFleet request launched {instance['InstanceId']}")

    def register(self, instance: dict[str, Any]) -> None:
        iid, zone = instance["InstanceId"], instance["Placement"]["AvailabilityZone"]
        it = self._catalog[instance["InstanceType"]]
        labels, taints = self._user_data(instance)
        name = f"ip-{iid[2:]}.ec2.internal"
        labels = {**it.labels, **labels, "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone,
                  "topology.kubernetes.io/region": REGION, "node.kubernetes.io/instance-type": it.name,
                  "karpenter.sh/capacity-type": "spot" if instance.get("InstanceLifecycle") == "spot"
                  else "on-demand"}
        quantities = it.allocatable.to_quantities()
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "spec": {"providerID": f"aws:///{zone}/{iid}", "taints": taints},
                "status": {"capacity": it.capacity.to_quantities(), "allocatable": quantities}}
        try:
            self._core.create_node(body)
        except client.ApiException as err:
            if err.status != 409:
                raise
        self.registered[iid] = name

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for iid, instance in running_instances(self._aws).items():
                    tags = {t["Key"] for t in instance.get("Tags") or []}
                    # an instance launched outside CreateFleet (the leaked one below) has no NodeConfig to join with
                    if (iid not in self.registered and instance["State"]["Name"] == "running"
                            and "karpenter.sh/nodeclaim" in tags):
                        self.register(instance)
            except Exception as err:  # a test helper: keep going, report at the end
                self.errors.append(f"{type(err).__name__}: {err}")
            self.stop.wait(0.5)


def send_spot_warning(cloud: Aws, queue: str, iid: str, when: float) -> None:
    cloud.sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({
        "version": "0", "id": f"spot-{iid}", "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "account": "123456789012", "region": REGION,
        "time": datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "resources": [f"arn:aws:ec2:{REGION}:instance/{iid}"],
        "detail": {"instance-id": iid, "instance-action": "terminate"}}))


@pytest.fixture
def controlled(cluster: Cluster, crds: list[str], aws: Aws,  # noqa: F811  (the fixture imported above)
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    api = cluster.api()
    core = client.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    apply(api, NODECLASS)
    apply(api, NODEPOOL)
    queue = aws.sqs.create_queue(QueueName=CLUSTER)["QueueUrl"]
    pricing = aws.client("pricing")
    options = AWSOptions(region=REGION, cluster_name=CLUSTER, cluster_endpoint="https://127.0.0.1:6443",
                         interruption_queue=queue, only=set(TYPES), queue_wait=1)
    operator = AWSOperator(api, options, AWSClients(REGION, aws.ec2, aws.ssm, aws.iam, aws.sqs, pricing))
    provider, types = operator.build()
    controller = Controller(api, ControllerOptions(
        batch_idle=1.0, batch_max=5.0, resync=1.0, gc_interval=2.0, gc_grace=5.0,
        provisioner=ProvisionerOptions(solve_time_limit=5.0, workers=1),
        disruption=DisruptionOptions(enabled=False)), types, provider=provider)
    operator.attach(controller)
    kubelets = Kubelets(api, aws, {it.name: it for it in types})
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    kubelets.start()

    class Scenario:
        pass

    s = Scenario()
    s.__dict__.update(api=api, core=core, aws=aws, queue=queue, controller=controller, kubelets=kubelets,
                      custom=client.CustomObjectsApi(api), apps=client.AppsV1Api(api))
    try:
        yield s
    finally:
        stop.set()
        thread.join(60)
        kubelets.stop.set()
        with contextlib.suppress(client.ApiException):
            s.apps.delete_collection_namespaced_deployment(NAMESPACE)
        core.delete_namespace(NAMESPACE, grace_period_seconds=0)
        custom = client.CustomObjectsApi(api)
        with contextlib.suppress(client.ApiException):
            custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default")
        custom.delete_collection_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")
        release_finalizers(api)
        with contextlib.suppress(client.ApiException):
            custom.delete_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", "default")
        for node in core.list_node().items:
            with contextlib.suppress(client.ApiException):
                core.delete_node(node.metadata.name)


def pods(s: Any) -> list[Any]:
    return [p for p in s.core.list_namespaced_pod(NAMESPACE).items if not p.metadata.deletion_timestamp]


def all_running(s: Any, count: int) -> bool:
    current = pods(s)
    return len(current) == count and all(p.status.phase == "Running" for p in current)


def claims(s: Any) -> list[dict[str, Any]]:
    return s.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]


def test_aws_scale_out_interruption_capacity_leaks_and_teardown(controlled: Any) -> None:
    s = controlled
    # the controller resolved the EC2NodeClass and wrote its status
    nodeclass = wait_for(lambda: (s.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses",
                                                                     "default").get("status") or {}).get("subnets")
                         and s.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses",
                                                                "default"), 60, what="EC2NodeClass status")
    conditions = {c["type"]: c["status"] for c in nodeclass["status"]["conditions"]}
    assert conditions["Ready"] == "True" and nodeclass["status"]["amis"] and nodeclass["status"]["securityGroups"]

    # 1. 100 pending pods → CreateFleet → Nodes → Running
    started = time.monotonic()
    s.apps.create_namespaced_deployment(NAMESPACE, deployment("web", NAMESPACE, 100, cpu="250m", memory="256Mi"))
    wait_for(lambda: all_running(s, 100), 420, 1.0, "100 pods Running")
    scale_out = time.monotonic() - started
    instances = running_instances(s.aws)
    launched = {c["status"]["providerID"].rsplit("/", 1)[-1] for c in claims(s) if c.get("status", {}).get(
        "providerID")}
    assert set(instances) == launched and len(claims(s)) == len(instances)
    plans = [r for r in s.controller.provisioner.history if r.created]
    assert sum(len(r.created) for r in plans) == len(instances)  # instances = the plan's NodeClaims
    print(f"100-pod scale-out: {len(instances)} instances, all Running after {scale_out:.1f}s")

    # 2. a spot interruption warning: replacement first, then drain, then the instance goes
    spot = [c for c in claims(s) if c["metadata"]["labels"].get("karpenter.sh/capacity-type") == "spot"]
    victim = spot[0] if spot else claims(s)[0]
    iid = victim["status"]["providerID"].rsplit("/", 1)[-1]
    warned = time.time()
    send_spot_warning(s.aws, s.queue, iid, warned)
    interruption = next(t for t in s.controller.tasks if t.name == "interruption")
    wait_for(lambda: iid not in running_instances(s.aws), 240, 1.0, "interrupted instance terminated")
    record = interruption.records[victim["metadata"]["name"]]
    assert record.replacements, "the interrupted node's pods were planned onto a replacement"
    assert record.why == "replacements initialized"
    assert record.ready_at is not None and record.ready_at - warned < 120, record  # before the warning runs out
    wait_for(lambda: all_running(s, 100), 240, 1.0, "every pod Running after the interruption")
    wait_for(lambda: victim["metadata"]["name"] not in {c["metadata"]["name"] for c in claims(s)}, 60, 1.0,
             "the interrupted NodeClaim gone")
    assert not [n for n in s.core.list_node().items if n.spec.provider_id.endswith(iid)]  # its Node deleted too
    print(f"interruption: replacement Initialized {record.ready_at - warned:.1f}s after the warning")

    # 3. insufficient capacity: the cheap types are refused, the claims fall back or are re-planned elsewhere
    s.aws.ice = {"m5.large", "m5.xlarge", "c5.xlarge"}
    marked: list[tuple[str, str, str]] = []
    mark = s.controller.unavailable.mark

    def record_mark(*offering: str) -> None:
        marked.append(offering)  # type: ignore[arg-type]
        mark(*offering)

    s.controller.unavailable.mark = record_mark  # type: ignore[method-assign]
    before = set(running_instances(s.aws))
    s.apps.patch_namespaced_deployment_scale("web", NAMESPACE, {"spec": {"replicas": 130}})
    wait_for(lambda: all_running(s, 130), 300, 1.0, "130 pods Running despite the refused types")
    new = {i: inst for i, inst in running_instances(s.aws).items() if i not in before}
    assert new and all(inst["InstanceType"] not in s.aws.ice for inst in new.values())
    refused = {m[0] for m in marked}
    assert refused and refused <= s.aws.ice, marked  # the refused offerings were backed off
    s.aws.ice = set()

    # 4. a leaked instance (tagged for the cluster, no NodeClaim) is terminated after the grace period
    leaked = s.aws.ec2.run_instances(ImageId=s.aws.images["x86_64"], InstanceType="m5.large", MinCount=1,
                                     MaxCount=1, TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                         {"Key": "karpenter.sh/nodepool", "Value": "default"},
                                         {"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": "default"},
                                         {"Key": "eks:eks-cluster-name", "Value": CLUSTER},
                                         {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}]}]
                                     )["Instances"][0]["InstanceId"]
    wait_for(lambda: leaked not in running_instances(s.aws), 120, 1.0, "leaked instance terminated")

    # 5. the NodePool deleted: its NodeClaims go (owner references), every instance is terminated
    s.apps.delete_namespaced_deployment("web", NAMESPACE)
    s.custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default")
    wait_for(lambda: not running_instances(s.aws), 300, 1.0, "every instance terminated")
    wait_for(lambda: not claims(s), 120, 1.0, "every NodeClaim gone")
    assert not s.kubelets.errors, s.kubelets.errors[:3]
    assert not running_instances(s.aws)  # 0 leaked after teardown
