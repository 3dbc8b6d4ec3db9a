"""An offline EC2 / SSM / IAM / SQS API for the AWS provider's tests: moto in server mode on 127.0.0.1
(``ThreadedMotoServer``), boto3 clients pointed at it with ``endpoint_url``, state reset between tests.

moto serves CreateFleet (instant), launch templates, DescribeInstances/Subnets/SecurityGroups/Images,
DescribeInstanceTypes/Offerings and spot price history; two things it cannot do are provided here:
* the EKS-optimized AMI parameters live under ``/aws/service/...``, which SSM (and moto) refuse to let anyone
  write: the fixture puts them into moto's in-process SSM backend directly;
* moto never runs out of capacity: ``ice`` makes CreateFleet refuse chosen instance types with
  ``InsufficientInstanceCapacity`` at the boto3 client boundary (botocore event hooks): the refused overrides
  are taken out of the request and reported in the response's ``Errors`` as EC2 reports them.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
ACCOUNT = "123456789012"
CLUSTER = "test-cluster"
K8S = "1.31"


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@dataclass
class Aws:
    endpoint: str
    ec2: Any
    ssm: Any
    iam: Any
    sqs: Any
    subnets: dict[str, str] = field(default_factory=dict)
    security_group: str = ""
    images: dict[str, str] = field(default_factory=dict)
    #: instance types CreateFleet refuses for capacity
    ice: set[str] = field(default_factory=set)
    fleet_requests: list[dict[str, Any]] = field(default_factory=list)

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing")

    def put_public_parameter(self, name: str, value: str) -> None:
        """Write an ``/aws/service/...`` parameter the way AWS publishes it (moto's backend, in process)."""
        from moto.ssm.models import ssm_backends

        backend = ssm_backends[ACCOUNT][REGION]
        scratch = "/nodeplan-test" + name.replace("/aws", "", 1)
        backend.put_parameter(scratch, "", value, "String", "", "", False, [], "text", None, None)
        params = backend._parameters.pop(scratch)
        for param in params:
            param.name = name
        backend._parameters[name] = params


def _inject_ice(aws: Aws) -> None:
    refused: list[dict[str, Any]] = []

    def strip(params: dict[str, Any], **_: Any) -> None:
        refused.clear()
        aws.fleet_requests.append(params)
        for config in params.get("LaunchTemplateConfigs", []):
            keep = []
            for override in config.get("Overrides", []):
                (refused if override.get("InstanceType") in aws.ice else keep).append(override)
            config["Overrides"] = keep
            refused_spec = config["LaunchTemplateSpecification"]
            for item in refused:
                item.setdefault("_spec", refused_spec)
        params["LaunchTemplateConfigs"] = [c for c in params.get("LaunchTemplateConfigs", []) if c["Overrides"]]

    def errors() -> list[dict[str, Any]]:
        return [{"LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": o.pop("_spec"), "Overrides": o},
                 "Lifecycle": "on-demand", "ErrorCode": "InsufficientInstanceCapacity",
                 "ErrorMessage": "We currently do not have sufficient capacity in the Availability Zone you "
                                 "requested."} for o in list(refused)]

    def short_circuit(params: dict[str, Any], **_: Any) -> Any:
        body = params.get("body") or ""
        if refused and "LaunchTemplateConfigs" not in str(body):  # every override refused: EC2 launches nothing
            return AWSResponse("", 200, {}, None), {"FleetId": "fleet-refused", "Errors": errors(), "Instances": []}
        return None

    def add_errors(parsed: dict[str, Any], **_: Any) -> None:
        if refused and parsed.get("FleetId") != "fleet-refused":
            parsed["Errors"] = [*parsed.get("Errors", []), *errors()]

    events = aws.ec2.meta.events
    events.register("provide-client-params.ec2.CreateFleet", strip)
    events.register("before-call.ec2.CreateFleet", short_circuit)
    events.register("after-call.ec2.CreateFleet", add_errors)


@pytest.fixture
def aws(moto_endpoint: str) -> Iterator[Aws]:
    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST"))
    make = Aws(moto_endpoint, None, None, None, None)
    make.ec2, make.ssm, make.iam, make.sqs = (make.client(s) for s in ("ec2", "ssm", "iam", "sqs"))
    _inject_ice(make)
    ec2 = make.ec2
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    for subnet in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]:
        if subnet["AvailabilityZone"] in ("us-east-1a", "us-east-1b", "us-east-1c"):
            ec2.create_tags(Resources=[subnet["SubnetId"]], Tags=[{"Key": "karpenter.sh/discovery", "Value": CLUSTER}])
            make.subnets[subnet["AvailabilityZone"]] = subnet["SubnetId"]
    group = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
    ec2.create_tags(Resources=[group], Tags=[{"Key": "karpenter.sh/discovery", "Value": CLUSTER}])
    make.security_group = group
    images = ec2.describe_images(Owners=["amazon"])["Images"]
    for arch in ("x86_64", "arm64"):
        image = next(i for i in images if i.get("Architecture") == arch and "Windows" not in i.get("Name", ""))
        make.images[arch] = image["ImageId"]
        make.put_public_parameter(
            f"/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023/{arch}/standard/recommended/image_id",
            image["ImageId"])
    make.iam.create_role(RoleName=f"KarpenterNodeRole-{CLUSTER}", AssumeRolePolicyDocument="{}")
    yield make
