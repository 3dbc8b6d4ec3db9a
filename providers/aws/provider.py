"""The AWS EC2 cloud provider (Karpenter's ``pkg/cloudprovider`` and ``pkg/providers/instance`` for AWS).

``create`` launches one instance per NodeClaim with CreateFleet (type ``instant``, one unit of the claim's
capacity type): one launch template per AMI architecture (image, AL2023 ``nodeadm`` user data, instance
profile, security groups, IMDS options, block devices), and one override per allowed offering — the plan's
first, the claim's fallbacks after it — with fleet priorities (``prioritized`` on-demand,
``capacity-optimized-prioritized`` spot) so EC2 tries them in that order. Offerings CreateFleet reports as
capacity errors are returned as refused (the controller backs them off); none launched raises
``InsufficientCapacityError``. Instances, volumes and the fleet are tagged as Karpenter tags them
(``karpenter.sh/nodepool``, ``karpenter.sh/nodeclaim``, ``karpenter.k8s.aws/ec2nodeclass``,
``kubernetes.io/cluster/<name>: owned``, ``eks:eks-cluster-name``, plus the EC2NodeClass's ``tags``), and ``list``
finds them by those tags. The providerID is ``aws:///<zone>/<instance-id>``; the kubelet registers its Node with
it and the lifecycle links the two.

Drift: an instance whose image, subnet or security groups are no longer among those its EC2NodeClass resolves
to is drifted (``AMIDrift``, ``SubnetDrift``, ``SecurityGroupDrift``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError

from model import labels as wk
from model.instancetype import InstanceType
from model.nodepool import NodeClaim, NodeClaimStatus, NodePool
from model.quantity import parse_quantity
from providers.aws.errors import CAPACITY_ERRORS, NOT_FOUND, MissingPermissionError, code, translated
from providers.aws.nodeclass import GROUP, KIND, PLURAL, VERSION, EC2NodeClass
from providers.aws.resolve import NodeClassResolver
from providers.aws.userdata import ClusterInfo, KubeletSettings, al2023_user_data
from providers.fallbacks import planned_offering, ranked_offerings
from providers.protocol import (
    CloudProviderError,
    InsufficientCapacityError,
    Launched,
    NodeClaimNotFoundError,
    NodeClassKind,
    NodeClassNotReadyError,
    OfferingKey,
    RepairPolicy,
)

log = logging.getLogger(__name__)

NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
EKS_CLUSTER_TAG = "eks:eks-cluster-name"
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
#: Karpenter sends at most 60 instance types to one CreateFleet call
MAX_OVERRIDES = 60
#: Karpenter's AWS repair policies: kubelet Ready, and the EKS node monitoring agent's conditions
REPAIR_POLICIES = (
    RepairPolicy("Ready", "False", 1800.0), RepairPolicy("Ready", "Unknown", 1800.0),
    RepairPolicy("AcceleratedHardwareReady", "False", 600.0), RepairPolicy("StorageReady", "False", 1800.0),
    RepairPolicy("NetworkingReady", "False", 1800.0), RepairPolicy("KernelReady", "False", 1800.0),
    RepairPolicy("ContainerRuntimeReady", "False", 1800.0),
)


def provider_id(zone: str, instance_id: str) -> str:
    return f"aws:///{zone}/{instance_id}"


def instance_id(pid: str) -> str:
    """``aws:///us-east-1a/i-0abc`` → ``i-0abc`` ('' when it is not an AWS providerID)."""
    if not pid.startswith("aws://"):
        return ""
    tail = pid.rsplit("/", 1)[-1]
    return tail if tail.startswith("i-") else ""


class NodeClassSource(Protocol):
    """Where EC2NodeClasses are read and their resolved status written (the API server, or a dict in tests)."""

    def get(self, name: str) -> EC2NodeClass | None: ...

    def write_status(self, nodeclass: EC2NodeClass) -> None: ...


@dataclass
class AWSSettings:
    cluster: ClusterInfo
    kubernetes_version: str
    cluster_dns: Sequence[str] = ()
    #: how long a resolved EC2NodeClass is reused before its selectors are resolved again
    nodeclass_ttl: float = 60.0
    extra_tags: Mapping[str, str] = field(default_factory=dict)


class AWSProvider:
    name = "aws"

    def __init__(self, ec2: Any, ssm: Any, iam: Any, settings: AWSSettings, catalog: Sequence[InstanceType],
                 nodeclasses: NodeClassSource, clock: Callable[[], float] = time.monotonic) -> None:
        self._ec2 = ec2
        self.settings = settings
        self._types = {it.name: it for it in catalog}
        self._nodeclasses = nodeclasses
        self.resolver = NodeClassResolver(ec2, ssm, iam, cluster_name=settings.cluster.name,
                                          kubernetes_version=settings.kubernetes_version)
        self._resolved: dict[str, tuple[float, EC2NodeClass]] = {}
        #: node class → the IAM action the last launch through it was refused (cleared by the next launch)
        self._denied: dict[str, str] = {}
        self._resolving = threading.Lock()
        self._clock = clock

    def update_catalog(self, catalog: Sequence[InstanceType]) -> None:
        """Replace the instance types and prices (the controller's periodic catalog refresh)."""
        self._types = {it.name: it for it in catalog}

    # -- node classes -------------------------------------------------------------------------------------
    def supported_node_classes(self) -> Sequence[NodeClassKind]:
        return (NodeClassKind(GROUP, KIND, VERSION, PLURAL),)

    def nodeclass(self, name: str, *, fresh: bool = False) -> EC2NodeClass:
        """The named EC2NodeClass, resolved (at most ``nodeclass_ttl`` old) and Ready, else NodeClassNotReady."""
        with self._resolving:  # one resolution at a time: the status task, the provisioner and launches ask
            cached = self._resolve(name, fresh)
        nodeclass = cached[1]
        if not nodeclass.ready():
            message = next((c.message for c in nodeclass.status.conditions if c.type == "Ready"), "")
            raise NodeClassNotReadyError(f"EC2NodeClass {name} is not ready: {message}")
        return nodeclass

    def _resolve(self, name: str, fresh: bool) -> tuple[float, EC2NodeClass]:
        cached = self._resolved.get(name)
        if fresh or cached is None or self._clock() - cached[0] > self.settings.nodeclass_ttl:
            current = self._nodeclasses.get(name)
            if current is None:
                self._resolved.pop(name, None)
                raise NodeClassNotReadyError(f"EC2NodeClass {name} not found")
            resolved = self.resolver.resolve(current)
            if resolved.status != current.status:
                self._nodeclasses.write_status(resolved)
            cached = (self._clock(), resolved)
            self._resolved[name] = cached
        return cached

    def nodeclass_problem(self, name: str) -> str:
        """Why NodePools of this node class cannot launch now ('' when they can): a selector that resolves
        nothing, a missing or malformed EC2NodeClass, an IAM action the last launch was refused."""
        try:
            self.nodeclass(name)
        except NodeClassNotReadyError as err:
            return str(err)
        except CloudProviderError as err:
            return f"EC2NodeClass {name}: {err}"
        return self._denied.get(name, "")

    def _nodeclass_of(self, ref_name: str | None) -> EC2NodeClass:
        if not ref_name:
            raise NodeClassNotReadyError("the NodeClaim has no nodeClassRef")
        return self.nodeclass(ref_name)

    # -- instance types -----------------------------------------------------------------------------------
    def instance_types(self, nodepool: NodePool | None = None) -> list[InstanceType]:
        """The catalog; for a NodePool, offerings outside its EC2NodeClass's subnet zones marked unavailable."""
        if nodepool is None or nodepool.spec.template.spec.node_class_ref is None:
            return list(self._types.values())
        zones = {s.zone for s in self._nodeclass_of(nodepool.spec.template.spec.node_class_ref.name).status.subnets}
        out = []
        for it in self._types.values():
            offerings = tuple(o if o.zone in zones else o.model_copy(update={"available": False})
                              for o in it.offerings)
            out.append(it.model_copy(update={"offerings": offerings}))
        return out

    # -- create -------------------------------------------------------------------------------------------
    def tags(self, nodeclass: EC2NodeClass, claim: NodeClaim) -> dict[str, str]:
        cluster = self.settings.cluster.name
        return {**nodeclass.spec.tags, **self.settings.extra_tags, NODEPOOL_TAG: claim.nodepool,
                NODECLAIM_TAG: claim.name, NODECLASS_TAG: nodeclass.name, f"kubernetes.io/cluster/{cluster}": "owned",
                EKS_CLUSTER_TAG: cluster}

    def user_data(self, nodeclass: EC2NodeClass, claim: NodeClaim, max_pods: int | None) -> str:
        """The AL2023 user data for the claim (labels the kubelet can know at boot, its taints)."""
        kubelet = nodeclass.spec.kubelet
        settings = KubeletSettings(
            max_pods=(kubelet.max_pods if kubelet and kubelet.max_pods is not None else max_pods),
            cluster_dns=(kubelet.cluster_dns if kubelet and kubelet.cluster_dns else self.settings.cluster_dns),
            kube_reserved=kubelet.kube_reserved if kubelet else {},
            system_reserved=kubelet.system_reserved if kubelet else {},
            eviction_hard=kubelet.eviction_hard if kubelet else {})
        # instance type and zone are the cloud's to label (a fallback may be launched); the rest is the claim's
        labels = {k: v for k, v in claim.metadata.labels.items() if k not in (wk.INSTANCE_TYPE, wk.ZONE, wk.HOSTNAME)}
        return al2023_user_data(self.settings.cluster, settings, labels,
                                [*claim.spec.taints, *claim.spec.startup_taints], nodeclass.spec.user_data)

    def launch_template_data(self, nodeclass: EC2NodeClass, image_id: str, user_data: str,
                             tags: Mapping[str, str]) -> dict[str, Any]:
        options = nodeclass.spec.metadata_options
        data: dict[str, Any] = {
            "ImageId": image_id,
            "UserData": base64.b64encode(user_data.encode()).decode(),
            "IamInstanceProfile": {"Name": nodeclass.status.instance_profile},
            "SecurityGroupIds": [g.id for g in nodeclass.status.security_groups],
            "MetadataOptions": {
                "HttpEndpoint": options.http_endpoint if options else "enabled",
                "HttpProtocolIpv6": options.http_protocol_ipv6 if options else "disabled",
                "HttpPutResponseHopLimit": options.http_put_response_hop_limit if options else 1,
                "HttpTokens": options.http_tokens if options else "required"},
            "Monitoring": {"Enabled": bool(nodeclass.spec.detailed_monitoring)},
            "TagSpecifications": [{"ResourceType": "network-interface",
                                   "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}],
        }
        mappings = []
        for mapping in nodeclass.spec.block_device_mappings:
            ebs: dict[str, Any] = {}
            if mapping.ebs is not None:
                e = mapping.ebs
                for key, value in (("DeleteOnTermination", e.delete_on_termination), ("Encrypted", e.encrypted),
                                   ("Iops", e.iops), ("KmsKeyId", e.kms_key_id or None),
                                   ("SnapshotId", e.snapshot_id or None), ("Throughput", e.throughput),
                                   ("VolumeType", e.volume_type)):
                    if value is not None:
                        ebs[key] = value
                if e.volume_size:
                    ebs["VolumeSize"] = max(1, int(parse_quantity(e.volume_size) // 2**30))
            mappings.append({"DeviceName": mapping.device_name, "Ebs": ebs})
        if mappings:
            data["BlockDeviceMappings"] = mappings
        return data

    def _ensure_launch_template(self, data: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """A launch template named after a hash of its data (so the same settings reuse one)."""
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]
        name = f"nodeplan/{self.settings.cluster.name}/{digest}"
        try:
            self._ec2.create_launch_template(
                LaunchTemplateName=name, LaunchTemplateData=dict(data),
                TagSpecifications=[{"ResourceType": "launch-template", "Tags": [
                    {"Key": k, "Value": v} for k, v in sorted(tags.items()) if k != NODECLAIM_TAG]}])
        except ClientError as err:
            if "AlreadyExists" not in code(err):
                raise translated(err, "ec2") from None
        return name

    def create(self, claim: NodeClaim) -> Launched:
        nodeclass = self._nodeclass_of(claim.spec.node_class_ref.name if claim.spec.node_class_ref else None)
        try:
            launched = self._create(claim, nodeclass)
        except MissingPermissionError as err:
            self._denied[nodeclass.name] = str(err)  # its NodePools wait (NodeClassReady=False) until granted
            raise
        self._denied.pop(nodeclass.name, None)
        return launched

    def _create(self, claim: NodeClaim, nodeclass: EC2NodeClass) -> Launched:
        zones = {s.zone: s for s in reversed(nodeclass.status.subnets)}  # most free addresses wins per zone
        ranked = [(it, o) for it, o in ranked_offerings(claim, self._types.values()) if o.zone in zones]
        if not ranked:
            raise InsufficientCapacityError(f"no available offering for NodeClaim {claim.name} "
                                            f"({' '.join(planned_offering(claim))}) in the subnets' zones",
                                            [planned_offering(claim)])
        capacity_type = ranked[0][1].capacity_type
        ranked = [(it, o) for it, o in ranked if o.capacity_type == capacity_type][:MAX_OVERRIDES]
        images: dict[str, str] = {}
        for ami in nodeclass.status.amis:  # newest first; one per architecture
            if ami.deprecated:
                continue
            for req in ami.requirements:
                if req.key == wk.ARCH:
                    for value in req.values:
                        images.setdefault(value, ami.id)
        tags = self.tags(nodeclass, claim)
        configs: dict[str, dict[str, Any]] = {}
        for priority, (it, offering) in enumerate(ranked):
            image = images.get(it.labels.get(wk.ARCH, "amd64"))
            if image is None:
                continue
            if image not in configs:
                data = self.launch_template_data(nodeclass, image, self.user_data(nodeclass, claim,
                                                                                  it.capacity.get("pods")), tags)
                configs[image] = {"LaunchTemplateSpecification": {
                    "LaunchTemplateName": self._ensure_launch_template(data, tags), "Version": "$Latest"},
                    "Overrides": []}
            configs[image]["Overrides"].append({"InstanceType": it.name, "SubnetId": zones[offering.zone].id,
                                                "AvailabilityZone": offering.zone, "ImageId": image,
                                                "Priority": float(priority)})
        if not configs:
            raise NodeClassNotReadyError(f"EC2NodeClass {nodeclass.name} has no AMI for the NodeClaim's architecture")
        request: dict[str, Any] = {
            "Type": "instant",
            "LaunchTemplateConfigs": list(configs.values()),
            "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": capacity_type},
            "TagSpecifications": [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in
                                                                   sorted(tags.items())]}
                                  for kind in ("instance", "volume", "fleet")],
        }
        if capacity_type == "spot":
            request["SpotOptions"] = {"AllocationStrategy": "capacity-optimized-prioritized"}
        else:
            request["OnDemandOptions"] = {"AllocationStrategy": "prioritized"}
        if nodeclass.spec.context:
            request["Context"] = nodeclass.spec.context
        try:
            response = self._ec2.create_fleet(**request)
        except ClientError as err:
            raise translated(err, "ec2") from None
        refused, other = self._fleet_errors(response.get("Errors") or [], zones, capacity_type)
        ids = [i for item in response.get("Instances") or [] for i in item.get("InstanceIds") or []]
        if not ids:
            if refused and not other:
                raise InsufficientCapacityError(
                    f"CreateFleet launched nothing: {', '.join('/'.join(o) for o in refused)} refused for capacity",
                    refused)
            raise CloudProviderError(f"CreateFleet launched nothing: {'; '.join(other) or 'no instances returned'}")
        instance = self._describe(ids[0])
        if instance is None:  # eventual consistency: the id is known, describe will catch up
            offering = next(o for it, o in ranked if it.name == (response["Instances"][0].get("InstanceType")))
            instance = {"InstanceId": ids[0], "InstanceType": response["Instances"][0].get("InstanceType"),
                        "Placement": {"AvailabilityZone": offering.zone}, "Tags": [
                            {"Key": k, "Value": v} for k, v in tags.items()]}
        log.info("launched %s for NodeClaim %s", instance["InstanceId"], claim.name)
        return Launched(self._claim_of(instance, claim), tuple(refused))

    def _fleet_errors(self, errors: Sequence[Mapping[str, Any]], zones: Mapping[str, Any], capacity_type: str
                      ) -> tuple[list[OfferingKey], list[str]]:
        """CreateFleet errors split into capacity refusals (as offerings) and anything else (as messages)."""
        subnet_zone = {s.id: z for z, s in zones.items()}
        refused: list[OfferingKey] = []
        other: list[str] = []
        for error in errors:
            overrides = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            if error.get("ErrorCode") in CAPACITY_ERRORS and overrides.get("InstanceType"):
                zone = overrides.get("AvailabilityZone") or subnet_zone.get(overrides.get("SubnetId", ""), "")
                key = (str(overrides["InstanceType"]), str(zone), capacity_type)
                if key not in refused:
                    refused.append(key)
            else:
                other.append(f"{error.get('ErrorCode')}: {error.get('ErrorMessage', '')}")
        return refused, other

    # -- get / list / delete --------------------------------------------------------------------------------
    def _describe(self, iid: str) -> dict[str, Any] | None:
        try:
            reservations = self._ec2.describe_instances(
                InstanceIds=[iid], Filters=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
            )["Reservations"]
        except ClientError as err:
            if code(err) in NOT_FOUND:
                return None
            raise translated(err, "ec2") from None
        instances = [i for r in reservations for i in r["Instances"]]
        return instances[0] if instances else None

    def get(self, provider_id: str) -> NodeClaim:
        iid = instance_id(provider_id)
        instance = self._describe(iid) if iid else None
        if instance is None:
            raise NodeClaimNotFoundError(f"instance {provider_id or '(none)'} not found")
        return self._claim_of(instance)

    def list(self) -> list[NodeClaim]:
        filters = [{"Name": "tag-key", "Values": [NODEPOOL_TAG]}, {"Name": "tag-key", "Values": [NODECLASS_TAG]},
                   {"Name": f"tag:{EKS_CLUSTER_TAG}", "Values": [self.settings.cluster.name]},
                   {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
        out = []
        try:
            for page in self._ec2.get_paginator("describe_instances").paginate(Filters=filters):
                out += [self._claim_of(i) for r in page["Reservations"] for i in r["Instances"]]
        except ClientError as err:
            raise translated(err, "ec2") from None
        return out

    def delete(self, claim: NodeClaim) -> None:
        iid = instance_id(claim.status.provider_id)
        instance = self._describe(iid) if iid else None
        if instance is None:
            raise NodeClaimNotFoundError(f"instance {claim.status.provider_id or '(none)'} not found")
        if (instance.get("State") or {}).get("Name") == "shutting-down":
            return
        try:
            self._ec2.terminate_instances(InstanceIds=[iid])
        except ClientError as err:
            if code(err) in NOT_FOUND:
                raise NodeClaimNotFoundError(f"instance {iid} not found") from None
            raise translated(err, "ec2") from None
        log.info("terminating %s (NodeClaim %s)", iid, claim.name)

    # -- drift and repair ---------------------------------------------------------------------------------
    def is_drifted(self, claim: NodeClaim) -> str:
        nodeclass = self._nodeclass_of(claim.spec.node_class_ref.name if claim.spec.node_class_ref else None)
        iid = instance_id(claim.status.provider_id)
        instance = self._describe(iid) if iid else None
        if instance is None:
            return ""
        if instance.get("ImageId") not in {a.id for a in nodeclass.status.amis}:
            return "AMIDrift"
        if instance.get("SubnetId") not in {s.id for s in nodeclass.status.subnets}:
            return "SubnetDrift"
        groups = {g["GroupId"] for g in instance.get("SecurityGroups") or []}
        if groups != {g.id for g in nodeclass.status.security_groups}:
            return "SecurityGroupDrift"
        return ""

    def repair_policies(self) -> Sequence[RepairPolicy]:
        return REPAIR_POLICIES

    # -- instances as NodeClaims ----------------------------------------------------------------------------
    def _claim_of(self, instance: Mapping[str, Any], claim: NodeClaim | None = None) -> NodeClaim:
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
        zone = str((instance.get("Placement") or {}).get("AvailabilityZone", ""))
        type_name = str(instance.get("InstanceType", ""))
        capacity_type = "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand"
        it = self._types.get(type_name)
        status = NodeClaimStatus.model_validate({
            "providerID": provider_id(zone, str(instance["InstanceId"])), "imageID": instance.get("ImageId", ""),
            "capacity": it.capacity.to_quantities() if it else {},
            "allocatable": it.allocatable.to_quantities() if it else {}})
        launched = {wk.INSTANCE_TYPE: type_name, wk.ZONE: zone, wk.CAPACITY_TYPE: capacity_type}
        if claim is None:
            stamp = instance.get("LaunchTime")
            claim = NodeClaim.model_validate({"metadata": {
                "name": tags.get(NODECLAIM_TAG, ""), "labels": {NODEPOOL_TAG: tags.get(NODEPOOL_TAG, "")},
                "creationTimestamp": _stamp(stamp)}})
        metadata = claim.metadata.model_copy(update={"labels": {**claim.metadata.labels, **launched}})
        return claim.model_copy(update={"metadata": metadata, "status": status})


def _stamp(value: Any) -> str | None:
    """EC2's LaunchTime (a datetime from boto3) as an RFC 3339 timestamp."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value) if value else None
