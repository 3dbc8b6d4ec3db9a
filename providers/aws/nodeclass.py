"""``karpenter.k8s.aws/v1`` EC2NodeClass: the node class NodePools of the AWS provider refer to.

Field for field the shape Karpenter's AWS provider serves (``pkg/apis/v1/ec2nodeclass.go``), so an EC2NodeClass
written for Karpenter applies unchanged: selector terms for AMIs (``alias`` such as ``al2023@latest``, ``id``,
``name``/``owner``, ``tags``, ``ssmParameter``), subnets and security groups; ``role`` or ``instanceProfile``;
``userData`` merged into the generated one; ``blockDeviceMappings``; ``metadataOptions``; ``tags``;
``kubelet``; ``amiFamily`` (implied by an alias). The status records what the selectors resolved to and one
condition per part plus ``Ready``, which the provider needs True before it launches.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model.api import ApiModel
from model.nodepool import Condition, ObjectMeta

GROUP = "karpenter.k8s.aws"
VERSION = "v1"
KIND = "EC2NodeClass"
PLURAL = "ec2nodeclasses"

AMIFamily = Literal["AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022", "Custom"]


class SubnetSelectorTerm(ApiModel):
    """Subnets with all these tags (``*`` matches any value), or the one with this id."""

    tags: dict[str, str] = {}
    id: str = ""


class SecurityGroupSelectorTerm(ApiModel):
    """Security groups with all these tags, this id, or this group name."""

    tags: dict[str, str] = {}
    id: str = ""
    name: str = ""


class CapacityReservationSelectorTerm(ApiModel):
    tags: dict[str, str] = {}
    id: str = ""
    owner_id: str = Field(default="", alias="ownerID")
    instance_match_criteria: Literal["open", "targeted"] | None = None


class AMISelectorTerm(ApiModel):
    """An AMI family alias (``al2023@latest``, ``al2023@v20240807``), or images by id, name (+ owner), tags or
    the SSM parameter that holds an image id."""

    alias: str = ""
    tags: dict[str, str] = {}
    id: str = ""
    name: str = ""
    owner: str = ""
    ssm_parameter: str = ""


class KubeletConfiguration(ApiModel):
    cluster_dns: list[str] = Field(default=[], alias="clusterDNS")
    max_pods: int | None = Field(default=None, ge=0)
    pods_per_core: int | None = Field(default=None, ge=0)
    system_reserved: dict[str, str] = {}
    kube_reserved: dict[str, str] = {}
    eviction_hard: dict[str, str] = {}
    eviction_soft: dict[str, str] = {}
    eviction_soft_grace_period: dict[str, str] = {}
    eviction_max_pod_grace_period: int | None = None
    image_gc_high_threshold_percent: int | None = Field(default=None, alias="imageGCHighThresholdPercent", ge=0,
                                                        le=100)
    image_gc_low_threshold_percent: int | None = Field(default=None, alias="imageGCLowThresholdPercent", ge=0,
                                                       le=100)
    cpu_cfs_quota: bool | None = Field(default=None, alias="cpuCFSQuota")


class BlockDevice(ApiModel):
    delete_on_termination: bool | None = None
    encrypted: bool | None = None
    iops: int | None = None
    kms_key_id: str = Field(default="", alias="kmsKeyID")
    snapshot_id: str = Field(default="", alias="snapshotID")
    throughput: int | None = None
    volume_initialization_rate: int | None = None
    #: a resource.Quantity (``100Gi``)
    volume_size: str = ""
    volume_type: Literal["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"] | None = None


class BlockDeviceMapping(ApiModel):
    device_name: str = ""
    ebs: BlockDevice | None = None
    root_volume: bool = False


class MetadataOptions(ApiModel):
    """IMDS settings; the defaults are Karpenter's (IMDSv2 required, one hop)."""

    http_endpoint: Literal["enabled", "disabled"] = "enabled"
    http_protocol_ipv6: Literal["enabled", "disabled"] = Field(default="disabled", alias="httpProtocolIPv6")
    http_put_response_hop_limit: int = Field(default=1, ge=1, le=64)
    http_tokens: Literal["required", "optional"] = "required"


class EC2NodeClassSpec(ApiModel):
    subnet_selector_terms: list[SubnetSelectorTerm]
    security_group_selector_terms: list[SecurityGroupSelectorTerm]
    capacity_reservation_selector_terms: list[CapacityReservationSelectorTerm] = []
    associate_public_ip_address: bool | None = Field(default=None, alias="associatePublicIPAddress")
    ami_selector_terms: list[AMISelectorTerm]
    ami_family: AMIFamily | None = None
    user_data: str | None = None
    role: str = ""
    instance_profile: str | None = None
    tags: dict[str, str] = {}
    kubelet: KubeletConfiguration | None = None
    block_device_mappings: list[BlockDeviceMapping] = []
    instance_store_policy: Literal["RAID0"] | None = None
    detailed_monitoring: bool | None = None
    metadata_options: MetadataOptions | None = None
    context: str | None = None


class Subnet(ApiModel):
    id: str
    zone: str
    zone_id: str = Field(default="", alias="zoneID")


class SecurityGroup(ApiModel):
    id: str
    name: str = ""


class AMIRequirement(ApiModel):
    key: str
    operator: str
    values: list[str] = []


class AMI(ApiModel):
    id: str
    name: str = ""
    deprecated: bool = False
    requirements: list[AMIRequirement] = []


class EC2NodeClassStatus(ApiModel):
    subnets: list[Subnet] = []
    security_groups: list[SecurityGroup] = []
    amis: list[AMI] = []
    instance_profile: str = ""
    conditions: list[Condition] = []


class EC2NodeClass(ApiModel):
    """A ``karpenter.k8s.aws/v1`` EC2NodeClass."""

    api_version: str = f"{GROUP}/{VERSION}"
    kind: Literal["EC2NodeClass"] = "EC2NodeClass"
    metadata: ObjectMeta
    spec: EC2NodeClassSpec
    status: EC2NodeClassStatus = EC2NodeClassStatus()

    @property
    def name(self) -> str:
        return self.metadata.name

    def ready(self) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)

    def alias(self) -> tuple[str, str] | None:
        """The ``(family, version)`` of an alias term (``al2023@latest`` → ``("al2023", "latest")``)."""
        for term in self.spec.ami_selector_terms:
            if term.alias:
                family, _, version = term.alias.partition("@")
                return family.lower(), version or "latest"
        return None

    def family(self) -> str:
        """The AMI family: the alias's, else ``amiFamily``, else ``Custom`` (user data then used as given)."""
        alias = self.alias()
        if alias is not None:
            return {"al2": "AL2", "al2023": "AL2023", "bottlerocket": "Bottlerocket", "windows2019": "Windows2019",
                    "windows2022": "Windows2022"}.get(alias[0], "Custom")
        return self.spec.ami_family or "Custom"
