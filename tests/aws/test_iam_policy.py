"""deploy/aws/iam-policy.json grants exactly the AWS API actions the code calls, no more.

The calls are found in the source (every ``<client>.<operation>(...)`` and ``get_paginator("<operation>")`` on an
EC2, SSM, IAM, SQS or Pricing client in providers/aws and controller/interruption.py), each turned into its IAM
action with botocore's own service model, so a call added later without its permission fails here. Three
actions are authorised as part of another call rather than called: ``ec2:RunInstances`` (CreateFleet launches
through it), ``ec2:CreateTags`` (tags given at launch), ``iam:PassRole`` and ``iam:TagInstanceProfile`` (an
instance profile created with the node role and tags).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import botocore.session

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "deploy" / "aws" / "iam-policy.json"
SOURCES = [*sorted((ROOT / "providers" / "aws").glob("*.py")), ROOT / "controller" / "interruption.py"]
SERVICES = ("ec2", "ssm", "iam", "sqs", "pricing")
IMPLIED = {"ec2:RunInstances", "ec2:CreateTags", "iam:PassRole", "iam:TagInstanceProfile"}
#: client methods that are no API operation
NOT_OPERATIONS = {"get_paginator", "can_paginate", "get_waiter", "close", "meta"}


def _service(receiver: ast.expr) -> str | None:
    name = receiver.attr if isinstance(receiver, ast.Attribute) else receiver.id if isinstance(
        receiver, ast.Name) else ""
    name = name.lstrip("_")
    return name if name in SERVICES else None


def called_actions() -> set[str]:
    session = botocore.session.get_session()
    operations = {s: {op: op for op in session.get_service_model(s).operation_names} for s in SERVICES}
    snake = {s: {botocore.xform_name(op): op for op in ops} for s, ops in operations.items()}
    found: set[str] = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            service = _service(node.func.value)
            if service is None:
                continue
            method = node.func.attr
            if method == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                method = str(node.args[0].value)
            if method in NOT_OPERATIONS:
                continue
            assert method in snake[service], f"{path.name}: {service}.{method} is no {service} API operation"
            found.add(f"{service}:{snake[service][method]}")
    return found


def granted_actions() -> set[str]:
    policy = json.loads(POLICY.read_text())
    out: set[str] = set()
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"]
        out.update([actions] if isinstance(actions, str) else actions)
    return out


def test_the_policy_grants_exactly_the_actions_the_code_calls() -> None:
    called = called_actions()
    # the scan sees the calls of every part: resolution, launch, termination, catalog, interruption
    assert {"ec2:CreateFleet", "ec2:DescribeSubnets", "ec2:TerminateInstances", "ec2:DescribeSpotPriceHistory",
            "ssm:GetParameter", "iam:CreateInstanceProfile", "pricing:GetProducts", "sqs:ReceiveMessage",
            "sqs:DeleteMessage", "sqs:GetQueueUrl"} <= called
    assert granted_actions() == called | IMPLIED


def test_no_statement_uses_wildcard_actions() -> None:
    assert not [a for a in granted_actions() if "*" in a]
