"""Resolving an EC2NodeClass's selectors against EC2, SSM and IAM into its status (Karpenter's subnet, security
group, AMI and instance-profile providers, and its status conditions).

* subnets: each term by ``id`` or by ``tags`` (``*`` any value); the union, most free addresses first.
* security groups: each term by ``id``, ``name`` or ``tags``.
* AMIs: an ``alias`` reads the EKS-optimized image ids from the public SSM parameters Karpenter reads
  (``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/standard/recommended/image_id`` for
  ``al2023@latest``, the versioned ``amazon-eks-node-al2023-<arch>-standard-<k8s>-<version>`` for
  ``al2023@vYYYYMMDD``; AL2 and Bottlerocket likewise) for x86_64 and arm64; ``id``, ``name`` (+ ``owner``),
  ``tags`` or ``ssmParameter`` terms go to DescribeImages. Each image gets a ``kubernetes.io/arch``
  requirement; newest first.
* instance profile: ``instanceProfile`` as given, else one for ``role`` created (and kept) by the provider.

A part that resolves nothing sets its condition False naming the selector, and ``Ready`` False with it; the
NodeClass's NodePools are then skipped (``NodeClassNotReadyError``) until it resolves.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from model.nodepool import Condition
from providers.aws.errors import translated
from providers.aws.nodeclass import (
    AMI,
    AMIRequirement,
    AMISelectorTerm,
    EC2NodeClass,
    EC2NodeClassStatus,
    SecurityGroup,
    Subnet,
)

ARCHES = {"x86_64": "amd64", "arm64": "arm64"}


def _tag_filters(tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"Name": "tag-key", "Values": [k]} if v == "*" else {"Name": f"tag:{k}", "Values": [v]}
            for k, v in tags.items()]


def _term(term: Any) -> str:
    return json.dumps(term.model_dump(by_alias=True, exclude_defaults=True), sort_keys=True)


def alias_parameters(family: str, version: str, kubernetes_version: str) -> dict[str, str]:
    """SSM parameter name → architecture for an AMI alias (``al2023``, ``al2``, ``bottlerocket``)."""
    base = f"/aws/service/eks/optimized-ami/{kubernetes_version}"
    if family == "al2023":
        if version == "latest":
            return {f"{base}/amazon-linux-2023/{arch}/standard/recommended/image_id": arch for arch in ARCHES}
        return {f"{base}/amazon-linux-2023/{arch}/standard/amazon-eks-node-al2023-{arch}-standard-"
                f"{kubernetes_version}-{version}/image_id": arch for arch in ARCHES}
    if family == "al2":
        suffix = "recommended" if version == "latest" else f"amazon-eks-node-{kubernetes_version}-{version}"
        return {f"{base}/amazon-linux-2/{suffix}/image_id": "x86_64",
                f"{base}/amazon-linux-2-arm64/{suffix}/image_id": "arm64"}
    if family == "bottlerocket":
        tag = "latest" if version == "latest" else version.lstrip("v")
        return {f"/aws/service/bottlerocket/aws-k8s-{kubernetes_version}/{arch}/{tag}/image_id": arch
                for arch in ARCHES}
    raise ValueError(f"unsupported AMI alias family {family!r}")


class NodeClassResolver:
    """Resolves EC2NodeClasses with the given clients (boto3 EC2, SSM and IAM)."""

    def __init__(self, ec2: Any, ssm: Any, iam: Any, *, cluster_name: str, kubernetes_version: str,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._ec2, self._ssm, self._iam = ec2, ssm, iam
        self.cluster_name = cluster_name
        self.kubernetes_version = kubernetes_version
        self._clock = clock

    def resolve(self, nodeclass: EC2NodeClass) -> EC2NodeClass:
        """The node class with its status resolved (conditions included); API errors become False conditions."""
        status: dict[str, Any] = {}
        conditions: list[Condition] = []
        previous = {c.type: c for c in nodeclass.status.conditions}
        for kind, step in (("SubnetsReady", self._subnets), ("SecurityGroupsReady", self._security_groups),
                           ("AMIsReady", self._amis), ("InstanceProfileReady", self._instance_profile)):
            try:
                field_name, value, problem = step(nodeclass)
            except ClientError as err:
                field_name, value, problem = "", None, str(translated(err, _service(err)))
            if field_name:
                status[field_name] = value
            conditions.append(self._condition(previous, kind, problem))
        failing = [c for c in conditions if c.status != "True"]
        ready = self._condition(previous, "Ready", "; ".join(c.message for c in failing))
        return nodeclass.model_copy(update={"status": EC2NodeClassStatus.model_validate(
            {**status, "conditions": [*conditions, ready]})})

    def _condition(self, previous: dict[str, Condition], kind: str, problem: str) -> Condition:
        status = "False" if problem else "True"
        old = previous.get(kind)
        stamp = old.last_transition_time if old is not None and old.status == status else \
            self._clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        return Condition(type=kind, status=status, reason=f"{kind[:-5]}NotFound" if problem else kind,
                         message=problem, last_transition_time=stamp)

    # -- one part each: (status field, value, problem or '') ----------------------------------------------
    def _subnets(self, nodeclass: EC2NodeClass) -> tuple[str, Any, str]:
        found: dict[str, dict[str, Any]] = {}
        for term in nodeclass.spec.subnet_selector_terms:
            filters = [{"Name": "subnet-id", "Values": [term.id]}] if term.id else _tag_filters(term.tags)
            for page in self._ec2.get_paginator("describe_subnets").paginate(Filters=filters):
                for subnet in page["Subnets"]:
                    found[subnet["SubnetId"]] = subnet
        ordered = sorted(found.values(), key=lambda s: (-int(s.get("AvailableIpAddressCount", 0)), s["SubnetId"]))
        subnets = [Subnet(id=s["SubnetId"], zone=s["AvailabilityZone"], zone_id=s.get("AvailabilityZoneId", ""))
                   for s in ordered]
        problem = "" if subnets else (f"SubnetSelector did not match any Subnets: "
                                      f"[{', '.join(_term(t) for t in nodeclass.spec.subnet_selector_terms)}]")
        return "subnets", [s.model_dump(by_alias=True) for s in subnets], problem

    def _security_groups(self, nodeclass: EC2NodeClass) -> tuple[str, Any, str]:
        found: dict[str, dict[str, Any]] = {}
        for term in nodeclass.spec.security_group_selector_terms:
            if term.id:
                filters = [{"Name": "group-id", "Values": [term.id]}]
            elif term.name:
                filters = [{"Name": "group-name", "Values": [term.name]}]
            else:
                filters = _tag_filters(term.tags)
            for page in self._ec2.get_paginator("describe_security_groups").paginate(Filters=filters):
                for group in page["SecurityGroups"]:
                    found[group["GroupId"]] = group
        groups = [SecurityGroup(id=g["GroupId"], name=g.get("GroupName", "")) for g in
                  sorted(found.values(), key=lambda g: g["GroupId"])]
        problem = "" if groups else (
            f"SecurityGroupSelector did not match any SecurityGroups: "
            f"[{', '.join(_term(t) for t in nodeclass.spec.security_group_selector_terms)}]")
        return "securityGroups", [g.model_dump(by_alias=True) for g in groups], problem

    def _amis(self, nodeclass: EC2NodeClass) -> tuple[str, Any, str]:
        images: dict[str, dict[str, Any]] = {}
        for term in nodeclass.spec.ami_selector_terms:
            for image in self._images(term):
                images[image["ImageId"]] = image
        ordered = sorted(images.values(), key=lambda i: (str(i.get("CreationDate", "")), i["ImageId"]), reverse=True)
        amis = [AMI(id=i["ImageId"], name=i.get("Name", ""), deprecated=bool(i.get("DeprecationTime"))
                    and str(i.get("DeprecationTime")) < self._clock().strftime("%Y-%m-%dT%H:%M:%S"),
                    requirements=[AMIRequirement(key="kubernetes.io/arch", operator="In",
                                                 values=[ARCHES.get(str(i.get("Architecture")), "amd64")])])
                for i in ordered]
        problem = "" if amis else (f"AMISelector did not match any AMIs: "
                                   f"[{', '.join(_term(t) for t in nodeclass.spec.ami_selector_terms)}]")
        return "amis", [a.model_dump(by_alias=True) for a in amis], problem

    def _images(self, term: AMISelectorTerm) -> Sequence[dict[str, Any]]:
        ids: list[str] = []
        if term.alias:
            family, _, version = term.alias.partition("@")
            for name in alias_parameters(family.lower(), version or "latest", self.kubernetes_version):
                try:
                    ids.append(self._ssm.get_parameter(Name=name)["Parameter"]["Value"])
                except ClientError as err:
                    if "ParameterNotFound" not in str(err):
                        raise
        elif term.ssm_parameter:
            ids.append(self._ssm.get_parameter(Name=term.ssm_parameter)["Parameter"]["Value"])
        elif term.id:
            ids.append(term.id)
        if ids:
            return list(self._ec2.describe_images(ImageIds=ids)["Images"]) if ids else []
        filters = _tag_filters(term.tags)
        if term.name:
            filters.append({"Name": "name", "Values": [term.name]})
        owners = [term.owner] if term.owner else (["self", "amazon"] if term.name else [])
        kwargs: dict[str, Any] = {"Filters": filters}
        if owners:
            kwargs["Owners"] = owners
        return list(self._ec2.describe_images(**kwargs)["Images"])

    def _instance_profile(self, nodeclass: EC2NodeClass) -> tuple[str, Any, str]:
        if nodeclass.spec.instance_profile:
            return "instanceProfile", nodeclass.spec.instance_profile, ""
        role = nodeclass.spec.role
        if not role:
            return "", None, "neither role nor instanceProfile is set"
        name = instance_profile_name(self.cluster_name, nodeclass.name)
        try:
            profile = self._iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except ClientError as err:
            if "NoSuchEntity" not in str(err):
                raise
            try:
                profile = self._iam.create_instance_profile(
                    InstanceProfileName=name, Path="/",
                    Tags=[{"Key": f"kubernetes.io/cluster/{self.cluster_name}", "Value": "owned"},
                          {"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": nodeclass.name}])["InstanceProfile"]
            except ClientError as created:
                if "EntityAlreadyExists" not in str(created):
                    raise
                # another replica (or an earlier pass that failed later) made it meanwhile
                profile = self._iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        roles = [r["RoleName"] for r in profile.get("Roles", [])]
        if role.split("/")[-1] not in roles:
            for old in roles:
                self._iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=old)
            self._iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role.split("/")[-1])
        return "instanceProfile", name, ""


def instance_profile_name(cluster: str, nodeclass: str) -> str:
    """The instance profile the provider keeps for a node class's role: cluster name and a stable hash."""
    digest = hashlib.sha256(f"{cluster}/{nodeclass}".encode()).hexdigest()[:16]
    return f"{cluster}_{digest}"[:128]


def _service(err: ClientError) -> str:
    model = getattr(err, "operation_name", "")
    if model in ("GetParameter",):
        return "ssm"
    if model in ("GetInstanceProfile", "CreateInstanceProfile", "AddRoleToInstanceProfile",
                 "RemoveRoleFromInstanceProfile"):
        return "iam"
    return "ec2"
