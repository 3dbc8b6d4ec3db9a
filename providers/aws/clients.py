"""The boto3 clients the AWS provider uses, built once with the retry behaviour a controller wants.

Throttling (``RequestLimitExceeded``, ``Throttling``) and 5xx answers are retried by botocore itself, in its
``adaptive`` mode by default: the ``standard`` mode's exponential back-off with jitter and retry quota, plus a
client-side token bucket that slows every call of the client down once the service throttles (botocore's
"retries" configuration; ``standard`` is the same without the rate limiter). What botocore retried is counted
(``on_retry(service, operation, attempts)``), so a controller being throttled shows in its metrics, not only
in latency.

The endpoint: ``endpoint_url`` when given, else boto3's own resolution — which honours ``AWS_ENDPOINT_URL``
and ``AWS_ENDPOINT_URL_<SERVICE>`` (botocore ≥ 1.31), so a test API needs no flag. The Pricing API answers in
us-east-1 (and a few other regions) only, whatever region is priced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import boto3
from botocore.config import Config

RetryMode = Literal["adaptive", "standard", "legacy"]
#: Karpenter's AWS SDK clients retry up to 3 times by default; a controller loop retries anyway, but a
#: throttled burst deserves more patience than that before a call is given up
DEFAULT_MAX_ATTEMPTS = 10
PRICING_REGION = "us-east-1"
#: on-demand prices have a fallback (the recorded price list): an unreachable Pricing API is not worth waiting on
PRICING_ATTEMPTS = 3


@dataclass(frozen=True)
class AWSClients:
    region: str
    ec2: Any
    ssm: Any
    iam: Any
    sqs: Any
    pricing: Any


def retry_config(mode: RetryMode = "adaptive", max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Config:
    return Config(retries={"mode": mode, "total_max_attempts": max_attempts}, user_agent_extra="nodeplan")


def count_retries(client: Any, on_retry: Callable[[str, str, int], None]) -> None:
    """Call ``on_retry(service, operation, retries)`` after every call botocore had to retry (``after-call`` is
    emitted for error answers too, with the attempts in their ``ResponseMetadata``)."""
    service = client.meta.service_model.service_name

    def after_call(parsed: Any = None, model: Any = None, **_: Any) -> None:
        attempts = int(((parsed or {}).get("ResponseMetadata") or {}).get("RetryAttempts") or 0)
        if attempts:
            on_retry(service, str(getattr(model, "name", "")), attempts)

    client.meta.events.register(f"after-call.{client.meta.service_model.service_id.hyphenize()}", after_call)


def make_clients(region: str, *, endpoint_url: str | None = None, retry_mode: RetryMode = "adaptive",
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 on_retry: Callable[[str, str, int], None] | None = None,
                 session: boto3.session.Session | None = None) -> AWSClients:
    """EC2, SSM, IAM, SQS and Pricing clients for ``region`` sharing one retry configuration."""
    session = session or boto3.session.Session(region_name=region)
    def make(service: str, service_region: str = region, attempts: int = max_attempts) -> Any:
        client = session.client(service, region_name=service_region, endpoint_url=endpoint_url,
                                config=retry_config(retry_mode, attempts))
        if on_retry is not None:
            count_retries(client, on_retry)
        return client

    return AWSClients(region, make("ec2"), make("ssm"), make("iam"), make("sqs"),
                      make("pricing", PRICING_REGION, PRICING_ATTEMPTS))
