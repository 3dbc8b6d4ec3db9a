"""AWS faults against moto: throttling and 5xx answers retried by botocore (adaptive mode) and counted; a missing
IAM permission as one line naming the action, the NodePool's NodeClassReady condition and a claim that waits
(no retry storm, no crash); insufficient capacity backing the offering off through the controller's lifecycle.

Faults moto cannot produce are injected at the HTTP boundary (botocore's ``before-send``): the answer EC2 gives,
parsed and retried by botocore's own code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from kubernetes import client

from controller.lifecycle import Lifecycle
from controller.nodepool_status import Ownership, desired_status
from providers.aws.clients import make_clients
from providers.aws.errors import MissingPermissionError
from providers.aws.nodeclass import EC2NodeClass
from providers.aws.provider import AWSProvider, AWSSettings
from providers.aws.userdata import ClusterInfo
from providers.protocol import NodeClassKind, NodeClassNotReadyError
from tests.aws.conftest import CLUSTER, K8S, REGION, Aws
from tests.aws.test_provider import NODECLASS, NodeClasses, catalog, claim
from tests.unit.test_cloudprovider import Api, _cache


class Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def ec2_error(status: int, code: str, message: str) -> AWSResponse:
    body = (f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            f"<RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>").encode()
    return AWSResponse("https://ec2.us-east-1.amazonaws.com/", status, {}, Raw(body))


def fail(ec2: Any, operation: str, answers: list[AWSResponse]) -> list[str]:
    """EC2 answers ``operation`` with ``answers`` first, then really; returns the operations sent."""
    sent: list[str] = []

    def before_send(event_name: str, **_: Any) -> AWSResponse | None:
        action = event_name.rsplit(".", 1)[-1]
        sent.append(action)
        return answers.pop(0) if action == operation and answers else None

    ec2.meta.events.register("before-send.ec2", before_send)
    return sent


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def test_throttling_and_5xx_are_retried_with_back_off_and_counted(aws: Aws) -> None:
    retries: list[tuple[str, str, int]] = []
    clients = make_clients(REGION, endpoint_url=aws.endpoint, on_retry=lambda *a: retries.append(a))
    assert clients.ec2.meta.config.retries["mode"] == "adaptive"
    sent = fail(clients.ec2, "DescribeSubnets", [ec2_error(503, "RequestLimitExceeded", "Request limit exceeded."),
                                                 ec2_error(500, "InternalError", "An internal error occurred.")])
    subnets = clients.ec2.describe_subnets()["Subnets"]
    assert subnets  # the third attempt reached moto
    assert sent.count("DescribeSubnets") == 3
    assert retries == [("ec2", "DescribeSubnets", 2)]


def test_a_call_still_throttled_after_every_attempt_raises_with_its_code(aws: Aws) -> None:
    clients = make_clients(REGION, endpoint_url=aws.endpoint, max_attempts=2)
    fail(clients.ec2, "DescribeImages", [ec2_error(503, "RequestLimitExceeded", "slow down")] * 2)
    with pytest.raises(ClientError, match="RequestLimitExceeded"):
        clients.ec2.describe_images(Owners=["amazon"])


def aws_provider(aws: Aws) -> tuple[AWSProvider, NodeClasses]:
    source = NodeClasses(EC2NodeClass.model_validate(yaml.safe_load(NODECLASS)))
    settings = AWSSettings(ClusterInfo(CLUSTER, "https://example", "Q0EK", "10.100.0.0/16"), K8S)
    return AWSProvider(aws.ec2, aws.ssm, aws.iam, settings, catalog(aws), source), source


POOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default", "uid": "np"},
        "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {
            "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}


def test_missing_iam_permission_names_the_action_and_holds_the_nodepool(aws: Aws) -> None:
    prov, _ = aws_provider(aws)
    denied = [ec2_error(403, "UnauthorizedOperation", "You are not authorized to perform this operation.")]
    fail(aws.ec2, "CreateFleet", denied)
    with pytest.raises(MissingPermissionError) as err:
        prov.create(claim())
    assert str(err.value) == "missing IAM permission: ec2:CreateFleet (grant it to the controller's role)"
    assert isinstance(err.value, NodeClassNotReadyError)  # the lifecycle waits instead of failing its pass
    ownership = Ownership(None, (NodeClassKind("karpenter.k8s.aws", "EC2NodeClass", "v1", "ec2nodeclasses"),),
                          prov.nodeclass_problem)
    assert not ownership.provisions(POOL) and ownership.owns(POOL)
    conditions = {c["type"]: c for c in desired_status(POOL, [], ownership)["conditions"]}
    assert conditions["NodeClassReady"]["status"] == "False"
    assert conditions["NodeClassReady"]["reason"] == "NodeClassNotReady"
    assert "ec2:CreateFleet" in conditions["NodeClassReady"]["message"]
    assert conditions["Ready"]["status"] == "False"
    # granted: the next launch works and the pool is provisioned again
    assert prov.create(claim(name="default-def")).claim.status.provider_id.startswith("aws:///us-east-1b/i-")
    assert ownership.provisions(POOL)
    assert desired_status(POOL, [], ownership)["conditions"][-1]["status"] == "True"


def test_missing_permission_to_resolve_makes_the_nodeclass_not_ready_naming_it(aws: Aws) -> None:
    prov, source = aws_provider(aws)
    fail(aws.ec2, "DescribeSecurityGroups", [ec2_error(403, "UnauthorizedOperation", "not authorized")])
    problem = prov.nodeclass_problem("default")
    assert "missing IAM permission: ec2:DescribeSecurityGroups" in problem
    conditions = {c.type: c for c in source.items["default"].status.conditions}
    assert conditions["SecurityGroupsReady"].status == "False" and conditions["SubnetsReady"].status == "True"


def test_lifecycle_waits_on_a_missing_permission_and_backs_off_refused_offerings(aws: Aws) -> None:
    prov, _ = aws_provider(aws)
    cache = _cache()
    lifecycle = Lifecycle(client.ApiClient(), cache, prov)

    class Merging(Api):
        """Answers a status patch with the whole object, as the API server does."""

        def patch_cluster_custom_object_status(self, group: str, version: str, plural: str, name: str, body: Any
                                               ) -> dict[str, Any]:
            super().patch_cluster_custom_object_status(group, version, plural, name, body)
            current = cache.items("NodeClaim")[0]
            rv = str(int(current["metadata"]["resourceVersion"]) + 1)
            return {**current, "metadata": {**current["metadata"], "resourceVersion": rv},
                    "status": {**(current.get("status") or {}), **body["status"]}}

        def patch_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any,
                                        **kw: Any) -> dict[str, Any]:
            super().patch_cluster_custom_object(group, version, plural, name, body)
            current = cache.items("NodeClaim")[0]
            meta = current["metadata"]
            return {**current, "metadata": {**meta, "resourceVersion": str(int(meta["resourceVersion"]) + 1),
                                            "labels": {**meta.get("labels", {}), **body["metadata"]["labels"]}}}

    api = Merging()
    lifecycle._core = lifecycle._custom = api  # type: ignore[assignment]
    body = claim(fallbacks=("c5.large",)).model_dump(mode="json", by_alias=True, exclude_none=True)
    body["metadata"]["resourceVersion"] = "1"
    cache.upsert("NodeClaim", body)
    fail(aws.ec2, "CreateFleet", [ec2_error(403, "UnauthorizedOperation", "not authorized")])
    assert lifecycle.reconcile_all() == 1
    launched = next(c for c in cache.items("NodeClaim")[0]["status"]["conditions"] if c["type"] == "Launched")
    assert (launched["status"], launched["reason"]) == ("Unknown", "NodeClassNotReady")
    assert "ec2:CreateFleet" in launched["message"]
    # granted now; m5.large has no capacity: the fallback launches and the refused offering is backed off
    aws.ice = {"m5.large"}
    assert lifecycle.reconcile_all() == 1
    raw = cache.items("NodeClaim")[0]
    assert raw["status"]["providerID"].startswith("aws:///us-east-1b/i-")
    assert lifecycle.unavailable.active() == {("m5.large", "us-east-1b", "on-demand")}
    assert ("patch_claim", {"metadata": {"labels": {"node.kubernetes.io/instance-type": "c5.large"}}}) in api.calls
    assert json.loads(raw["metadata"]["annotations"]["nodeplan.io/pods"]) == ["u1"]


def test_selectors_that_match_nothing_skip_the_nodepool_with_a_condition_naming_the_selector(aws: Aws) -> None:
    source = NodeClasses(EC2NodeClass.model_validate(yaml.safe_load(NODECLASS.replace(
        f"securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {CLUSTER}}}}}]",
        "securityGroupSelectorTerms: [{name: no-such-group}]"))))
    settings = AWSSettings(ClusterInfo(CLUSTER, "https://example", "Q0EK", "10.100.0.0/16"), K8S)
    prov = AWSProvider(aws.ec2, aws.ssm, aws.iam, settings, catalog(aws), source)
    ownership = Ownership(None, (NodeClassKind("karpenter.k8s.aws", "EC2NodeClass", "v1", "ec2nodeclasses"),),
                          prov.nodeclass_problem)
    assert not ownership.provisions(POOL)
    conditions = {c["type"]: c for c in desired_status(POOL, [], ownership)["conditions"]}
    assert conditions["NodeClassReady"]["status"] == "False"
    assert 'SecurityGroupSelector did not match any SecurityGroups: [{"name": "no-such-group"}]' in \
        conditions["NodeClassReady"]["message"]
    written = {c.type: c.status for c in source.items["default"].status.conditions}
    assert written["SecurityGroupsReady"] == "False" and written["Ready"] == "False"
