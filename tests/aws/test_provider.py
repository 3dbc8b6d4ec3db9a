"""The AWS provider end to end against the offline EC2 API (moto server): EC2NodeClass resolution, CreateFleet
launches (tags, launch template, AL2023 user data, planned offering first, fallback on insufficient capacity),
get / list / delete, leaked-instance garbage collection and drift."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.cache import ClusterCache, Resource
from controller.garbage import GarbageCollector
from controller.provisioner import nodeclaim_body
from model.nodepool import NodeClaim, NodePool
from model.plan import PlannedNodeClaim
from providers.aws.instancetypes import Prices, describe, instance_type, spot_prices
from providers.aws.nodeclass import EC2NodeClass
from providers.aws.provider import AWSProvider, AWSSettings, instance_id
from providers.aws.userdata import ClusterInfo, parts
from providers.protocol import InsufficientCapacityError, NodeClaimNotFoundError, NodeClassNotReadyError
from tests.aws.conftest import CLUSTER, K8S, Aws

ON_DEMAND = {"m5.large": 0.096, "m5.xlarge": 0.192, "c5.large": 0.085, "c5.xlarge": 0.17, "m6g.large": 0.077}
NODECLASS = f"""
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole-{CLUSTER}
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {CLUSTER}}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {CLUSTER}}}}}]
  tags: {{team: platform}}
  metadataOptions: {{httpTokens: required, httpPutResponseHopLimit: 2}}
  blockDeviceMappings: [{{deviceName: /dev/xvda, ebs: {{volumeSize: 50Gi, volumeType: gp3, encrypted: true}}}}]
  userData: |
    #!/bin/bash
    echo hello
"""


class NodeClasses:
    def __init__(self, *items: EC2NodeClass) -> None:
        self.items = {nc.name: nc for nc in items}
        self.writes: list[EC2NodeClass] = []

    def get(self, name: str) -> EC2NodeClass | None:
        return self.items.get(name)

    def write_status(self, nodeclass: EC2NodeClass) -> None:
        self.writes.append(nodeclass)
        self.items[nodeclass.name] = nodeclass


def catalog(aws: Aws) -> list[Any]:
    infos, zones = describe(aws.ec2)
    wanted = [i for i in infos if i["InstanceType"] in ON_DEMAND]
    spot = spot_prices(aws.ec2, ON_DEMAND)
    out = [instance_type(i, zones[i["InstanceType"]] & {"us-east-1a", "us-east-1b", "us-east-1c"},
                         Prices(ON_DEMAND, spot)) for i in wanted]
    return [it for it in out if it is not None]


def provider(aws: Aws, text: str = NODECLASS) -> tuple[AWSProvider, NodeClasses]:
    source = NodeClasses(EC2NodeClass.model_validate(yaml.safe_load(text)))
    settings = AWSSettings(ClusterInfo(CLUSTER, "https://ABC.gr7.us-east-1.eks.amazonaws.com", "Q0EK", "10.100.0.0/16"),
                           K8S, cluster_dns=("10.100.0.10",))
    return AWSProvider(aws.ec2, aws.ssm, aws.iam, settings, catalog(aws), source), source


def claim(instance: str = "m5.large", zone: str = "us-east-1b", capacity: str = "on-demand",
          fallbacks: tuple[str, ...] = (), name: str = "default-abc") -> NodeClaim:
    pool = NodePool.model_validate({"metadata": {"name": "default", "uid": "np"}, "spec": {"template": {"spec": {
        "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}})
    planned = PlannedNodeClaim(name="x", node_pool="default", instance_type=instance, zone=zone,
                               capacity_type=capacity, price=0.1, pods=[], requests={"cpu": "1", "memory": "1Gi"},
                               labels={"node.kubernetes.io/instance-type": instance,
                                       "topology.kubernetes.io/zone": zone, "karpenter.sh/capacity-type": capacity})
    body = nodeclaim_body(planned, pool, name, ["u1"], list(fallbacks))
    body["metadata"]["uid"] = f"{name}-uid"
    return NodeClaim.model_validate(body)


def tags_of(aws: Aws, iid: str) -> dict[str, str]:
    instance = aws.ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def test_nodeclass_resolves_subnets_security_groups_alias_amis_and_instance_profile(aws: Aws) -> None:
    prov, source = provider(aws)
    nodeclass = prov.nodeclass("default")
    status = nodeclass.status
    assert {s.zone: s.id for s in status.subnets} == aws.subnets
    assert [g.id for g in status.security_groups] == [aws.security_group]
    assert {a.id: a.requirements[0].values for a in status.amis} == {
        aws.images["x86_64"]: ["amd64"], aws.images["arm64"]: ["arm64"]}
    assert status.instance_profile.startswith(f"{CLUSTER}_")
    profile = aws.iam.get_instance_profile(InstanceProfileName=status.instance_profile)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == [f"KarpenterNodeRole-{CLUSTER}"]
    assert {c.type: c.status for c in status.conditions} == {
        "SubnetsReady": "True", "SecurityGroupsReady": "True", "AMIsReady": "True", "InstanceProfileReady": "True",
        "Ready": "True"}
    assert source.writes and source.writes[-1].ready()


def test_selectors_that_match_nothing_make_the_nodeclass_not_ready_naming_the_selector(aws: Aws) -> None:
    text = NODECLASS.replace(f"subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {CLUSTER}}}}}]",
                             "subnetSelectorTerms: [{tags: {karpenter.sh/discovery: nowhere}}]")
    prov, source = provider(aws, text)
    with pytest.raises(NodeClassNotReadyError, match=r"SubnetSelector did not match any Subnets.*nowhere"):
        prov.create(claim())
    conditions = {c.type: c for c in source.items["default"].status.conditions}
    assert conditions["SubnetsReady"].status == "False" and conditions["Ready"].status == "False"
    assert conditions["AMIsReady"].status == "True"
    pool = NodePool.model_validate({"metadata": {"name": "p"}, "spec": {"template": {"spec": {"nodeClassRef": {
        "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}})
    with pytest.raises(NodeClassNotReadyError):
        prov.instance_types(pool)


def test_create_launches_the_planned_offering_tagged_with_launch_template_and_user_data(aws: Aws) -> None:
    prov, _ = provider(aws)
    launched = prov.create(claim(fallbacks=("c5.large",)))
    result = launched.claim
    assert launched.refused == ()
    iid = instance_id(result.status.provider_id)
    assert result.status.provider_id == f"aws:///us-east-1b/{iid}"
    assert result.metadata.labels["node.kubernetes.io/instance-type"] == "m5.large"  # planned, though dearer
    assert result.status.image_id == aws.images["x86_64"]
    assert result.status.allocatable["pods"] == 29
    tags = tags_of(aws, iid)
    assert {k: tags[k] for k in ("karpenter.sh/nodepool", "karpenter.sh/nodeclaim", "karpenter.k8s.aws/ec2nodeclass",
                                 f"kubernetes.io/cluster/{CLUSTER}", "eks:eks-cluster-name", "team")} == {
        "karpenter.sh/nodepool": "default", "karpenter.sh/nodeclaim": "default-abc",
        "karpenter.k8s.aws/ec2nodeclass": "default", f"kubernetes.io/cluster/{CLUSTER}": "owned",
        "eks:eks-cluster-name": CLUSTER, "team": "platform"}
    request = aws.fleet_requests[-1]
    assert request["Type"] == "instant" and request["OnDemandOptions"] == {"AllocationStrategy": "prioritized"}
    overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
    assert [(o["InstanceType"], o["AvailabilityZone"], o["Priority"]) for o in overrides] == [
        ("m5.large", "us-east-1b", 0.0), ("c5.large", "us-east-1b", 1.0)]
    assert overrides[0]["SubnetId"] == aws.subnets["us-east-1b"]
    name = request["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    version = aws.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0]
    data = version["LaunchTemplateData"]
    assert data["ImageId"] == aws.images["x86_64"]
    assert data["SecurityGroupIds"] == [aws.security_group]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 50
    user_data = base64.b64decode(data["UserData"]).decode()
    mime = parts(user_data)
    assert [p.get_content_type() for p in mime] == ["application/node.eks.aws", "text/x-shellscript"]
    config = yaml.safe_load(mime[0].get_payload())
    assert config["kind"] == "NodeConfig"
    assert config["spec"]["cluster"] == {"name": CLUSTER, "apiServerEndpoint":
                                         "https://ABC.gr7.us-east-1.eks.amazonaws.com",
                                         "certificateAuthority": "Q0EK", "cidr": "10.100.0.0/16"}
    kubelet = config["spec"]["kubelet"]
    assert kubelet["config"]["maxPods"] == 29 and kubelet["config"]["clusterDNS"] == ["10.100.0.10"]
    assert {"key": "dedicated", "value": "web", "effect": "NoSchedule"} in kubelet["config"]["registerWithTaints"]
    assert {"key": "karpenter.sh/unregistered", "effect": "NoExecute"} in kubelet["config"]["registerWithTaints"]
    assert "karpenter.sh/nodepool=default" in kubelet["flags"][0]
    assert "karpenter.sh/capacity-type=on-demand" in kubelet["flags"][0]
    assert "echo hello" in mime[1].get_payload()
    # the same instance read back, and listed for the cluster
    assert prov.get(result.status.provider_id).metadata.labels["karpenter.sh/nodepool"] == "default"
    assert [c.status.provider_id for c in prov.list()] == [result.status.provider_id]


def test_insufficient_capacity_falls_back_then_refuses_with_the_offerings(aws: Aws) -> None:
    prov, _ = provider(aws)
    aws.ice = {"m5.large"}
    launched = prov.create(claim(fallbacks=("c5.large",)))
    assert launched.claim.metadata.labels["node.kubernetes.io/instance-type"] == "c5.large"
    assert launched.refused == (("m5.large", "us-east-1b", "on-demand"),)
    aws.ice = {"m5.large", "c5.large"}
    with pytest.raises(InsufficientCapacityError) as err:
        prov.create(claim(fallbacks=("c5.large",), name="default-def"))
    assert set(err.value.offerings) == {("m5.large", "us-east-1b", "on-demand"), ("c5.large", "us-east-1b",
                                                                                  "on-demand")}


def test_spot_claims_launch_spot(aws: Aws) -> None:
    prov, _ = provider(aws)
    launched = prov.create(claim(capacity="spot"))
    assert launched.claim.metadata.labels["karpenter.sh/capacity-type"] == "spot"
    assert aws.fleet_requests[-1]["SpotOptions"] == {"AllocationStrategy": "capacity-optimized-prioritized"}


def test_delete_terminates_then_reports_not_found(aws: Aws) -> None:
    prov, _ = provider(aws)
    result = prov.create(claim()).claim
    prov.delete(result)
    state = aws.ec2.describe_instances(InstanceIds=[instance_id(result.status.provider_id)])[
        "Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")
    if state == "terminated":
        with pytest.raises(NodeClaimNotFoundError):
            prov.delete(result)
        with pytest.raises(NodeClaimNotFoundError):
            prov.get(result.status.provider_id)
    assert prov.list() == []


def test_leaked_instances_are_terminated_after_the_grace_period(aws: Aws) -> None:
    prov, _ = provider(aws)
    owned = prov.create(claim(name="owned")).claim
    leaked = prov.create(claim(name="leaked")).claim
    cache = ClusterCache({k: Resource(k, "v1", lambda **kw: None) for k in ("Pod", "Node", "NodeClaim")})
    cache.upsert("NodeClaim", {"metadata": {"name": "owned", "resourceVersion": "1"},
                               "status": {"providerID": owned.status.provider_id}})
    now = datetime.now(UTC)
    gc = GarbageCollector(client.ApiClient(), cache, prov, grace=30, clock=lambda: now.timestamp())
    assert gc.collect().terminated == []  # just launched: within the grace period
    later = now + timedelta(seconds=60)
    gc = GarbageCollector(client.ApiClient(), cache, prov, grace=30, clock=lambda: later.timestamp())
    assert gc.collect().terminated == [leaked.status.provider_id]
    assert [c.status.provider_id for c in prov.list()] == [owned.status.provider_id]


def test_drift_when_the_resolved_ami_subnets_or_security_groups_change(aws: Aws) -> None:
    prov, source = provider(aws)
    result = prov.create(claim()).claim
    # moto does not give fleet instances their launch template's SecurityGroupIds (EC2 does): set them as EC2 would
    aws.ec2.modify_instance_attribute(InstanceId=instance_id(result.status.provider_id), Groups=[aws.security_group])
    assert prov.is_drifted(result) == ""
    # a new AMI is published for the alias: the running instance's image is no longer the resolved one
    newer = next(i["ImageId"] for i in aws.ec2.describe_images(Owners=["amazon"])["Images"]
                 if i.get("Architecture") == "x86_64" and i["ImageId"] != aws.images["x86_64"])
    aws.put_public_parameter(f"/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023/x86_64/standard/recommended/"
                             "image_id", newer)
    prov.nodeclass("default", fresh=True)
    assert prov.is_drifted(result) == "AMIDrift"
    aws.put_public_parameter(f"/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023/x86_64/standard/recommended/"
                             "image_id", aws.images["x86_64"])
    aws.ec2.delete_tags(Resources=[aws.subnets["us-east-1b"]], Tags=[{"Key": "karpenter.sh/discovery"}])
    prov.nodeclass("default", fresh=True)
    assert prov.is_drifted(result) == "SubnetDrift"
    aws.ec2.create_tags(Resources=[aws.subnets["us-east-1b"]], Tags=[{"Key": "karpenter.sh/discovery",
                                                                      "Value": CLUSTER}])
    vpc = aws.ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    extra = aws.ec2.create_security_group(GroupName="more", Description="more", VpcId=vpc)["GroupId"]
    aws.ec2.create_tags(Resources=[extra], Tags=[{"Key": "karpenter.sh/discovery", "Value": CLUSTER}])
    prov.nodeclass("default", fresh=True)
    assert prov.is_drifted(result) == "SecurityGroupDrift"
    assert source.items["default"].ready()
