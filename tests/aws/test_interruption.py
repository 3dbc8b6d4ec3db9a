"""Interruption handling against moto's SQS: the EventBridge shapes Karpenter's AWS provider parses
(``pkg/controllers/interruption/messages``), what each leads to (replace: taint, launch the replacement, delete
once it is Initialized or the warning runs out; rebalance: an Event only), Karpenter's metric names and Event
reasons, and a simulated clock for the 2-minute spot warning."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controller.cache import ClusterCache, Resource
from controller.interruption import (
    INTERRUPTED_ANNOTATION,
    NO_OP,
    REBALANCE,
    REPLACES_ANNOTATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    STOPPED,
    TERMINATED,
    Interruption,
    InterruptionMetrics,
    InterruptionQueue,
    parse,
)
from controller.offerings import UnavailableOfferings
from tests.aws.conftest import Aws

NOW = 1_800_000_000.0
IID = "i-0123456789abcdef0"


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(detail_type: str, detail: dict[str, Any], source: str = "aws.ec2", when: float = NOW) -> dict[str, Any]:
    """An EventBridge event as EC2 / AWS Health put it on the queue."""
    return {"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "detail-type": detail_type,
            "source": source, "account": "123456789012", "time": stamp(when), "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1b:instance/{IID}"], "detail": detail}


SPOT = event("EC2 Spot Instance Interruption Warning", {"instance-id": IID, "instance-action": "terminate"})
REBALANCE_EVENT = event("EC2 Instance Rebalance Recommendation", {"instance-id": IID})
HEALTH = event("AWS Health Event", {
    "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x", "service": "EC2",
    "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", "eventTypeCategory": "scheduledChange",
    "startTime": "Sat, 05 Jun 2027 15:10:09 GMT", "affectedEntities": [{"entityValue": IID}]}, source="aws.health")


def state_change(state: str) -> dict[str, Any]:
    return event("EC2 Instance State-change Notification", {"instance-id": IID, "state": state})


@pytest.mark.parametrize(("body", "kind", "ids"), [
    (SPOT, SPOT_INTERRUPTED, (IID,)),
    (REBALANCE_EVENT, REBALANCE, (IID,)),
    (HEALTH, SCHEDULED_CHANGE, (IID,)),
    (state_change("stopping"), STOPPED, (IID,)),
    (state_change("stopped"), STOPPED, (IID,)),
    (state_change("shutting-down"), TERMINATED, (IID,)),
    (state_change("terminated"), TERMINATED, (IID,)),
    (state_change("running"), NO_OP, ()),  # Karpenter accepts only the four states above
    (state_change("pending"), NO_OP, ()),
    ({**HEALTH, "detail": {**HEALTH["detail"], "eventTypeCategory": "issue"}}, NO_OP, ()),
    ({**HEALTH, "detail": {**HEALTH["detail"], "service": "EBS"}}, NO_OP, ()),
    (event("EC2 Instance Launch Successful", {}, source="aws.autoscaling"), NO_OP, ()),
])
def test_messages_parse_as_karpenter_parses_them(body: dict[str, Any], kind: str, ids: tuple[str, ...]) -> None:
    message = parse(json.dumps(body))
    assert (message.kind, message.instance_ids, message.time) == (kind, ids, NOW)


@pytest.mark.parametrize("body", ["not json", "[]", json.dumps({"detail": {}})])
def test_a_body_that_is_no_eventbridge_event_is_an_error(body: str) -> None:
    with pytest.raises(ValueError):
        parse(body)


class Writer:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.log: list[tuple[str, str]] = []

    def taint(self, node: str) -> None:
        self.log.append(("taint", node))

    def create_claim(self, body: dict[str, Any]) -> None:
        self.log.append(("create", body["metadata"]["name"]))
        self.cache.upsert("NodeClaim", {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}})

    def delete_claim(self, name: str) -> None:
        self.log.append(("delete", name))
        raw = next(c for c in self.cache.items("NodeClaim") if c["metadata"]["name"] == name)
        self.cache.upsert("NodeClaim", {**raw, "metadata": {**raw["metadata"], "deletionTimestamp": stamp(NOW),
                                                            "resourceVersion": "9"}})

    def annotate_claim(self, name: str, annotations: Mapping[str, str]) -> None:
        raw = next(c for c in self.cache.items("NodeClaim") if c["metadata"]["name"] == name)
        meta = raw["metadata"]
        merged = {**(meta.get("annotations") or {}), **annotations}
        version = str(int(meta["resourceVersion"]) + 1)
        self.cache.upsert("NodeClaim", {**raw, "metadata": {**meta, "annotations": merged, "resourceVersion": version}})


class Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def warning(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.sent.append((obj["kind"], obj["metadata"]["name"], reason))

    normal = warning


def claim(name: str = "spot-abc", iid: str = IID, **status: Any) -> dict[str, Any]:
    return {"kind": "NodeClaim", "apiVersion": "karpenter.sh/v1",
            "metadata": {"name": name, "uid": f"{name}-uid", "resourceVersion": "1",
                         "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot",
                                    "node.kubernetes.io/instance-type": "m5.large",
                                    "topology.kubernetes.io/zone": "us-east-1b"}},
            "status": {"providerID": f"aws:///us-east-1b/{iid}", "nodeName": f"ip-{name}", **status}}


def initialized(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {**raw, "metadata": {**raw["metadata"], "resourceVersion": "5"},
            "status": {**(raw.get("status") or {}), "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": stamp(NOW)}
                for t in ("Launched", "Registered", "Initialized", "Ready")]}}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(aws: Aws) -> Any:
    cache = ClusterCache({k: Resource(k, "v1", lambda **kw: None) for k in ("Pod", "Node", "NodeClaim")})
    cache.upsert("NodeClaim", claim())
    cache.upsert("NodeClaim", claim("other", "i-0fffffffffffffff0"))
    cache.upsert("Node", {"kind": "Node", "metadata": {"name": "ip-spot-abc", "uid": "n1", "resourceVersion": "1"}})
    url = aws.sqs.create_queue(QueueName="test-cluster")["QueueUrl"]
    writer, events, clock = Writer(cache), Events(), Clock(NOW + 5)
    registry = CollectorRegistry()
    planned: list[str] = []

    def plan(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
        planned.append(raw["metadata"]["name"])
        return [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                 "metadata": {"name": "default-repl", "labels": {"karpenter.sh/nodepool": "default"}}}]

    unavailable = UnavailableOfferings(clock=clock)
    handler = Interruption(InterruptionQueue(aws.sqs, "test-cluster", wait=0), cache, writer, plan, events=events,
                           metrics=InterruptionMetrics(registry), unavailable=unavailable, clock=clock)

    class World:
        pass

    w = World()
    w.__dict__.update(cache=cache, url=url, writer=writer, events=events, clock=clock, registry=registry,
                      planned=planned, handler=handler, unavailable=unavailable, sqs=aws.sqs)
    return w


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def queued(world: Any) -> int:
    attributes = world.sqs.get_queue_attributes(QueueUrl=world.url, AttributeNames=["ApproximateNumberOfMessages",
                                                                                      "ApproximateNumberOfMessagesNotVisible"])
    return sum(int(v) for v in attributes["Attributes"].values())


def test_spot_interruption_taints_replaces_then_deletes_once_the_replacement_is_initialized(world: Any) -> None:
    world.sqs.send_message(QueueUrl=world.url, MessageBody=json.dumps(SPOT))
    world.handler.step()
    assert world.writer.log == [("taint", "ip-spot-abc"), ("create", "default-repl")]
    assert world.planned == ["spot-abc"]
    claims = {c["metadata"]["name"]: c for c in world.cache.items("NodeClaim")}
    assert claims["default-repl"]["metadata"]["annotations"][REPLACES_ANNOTATION] == "ip-spot-abc"
    state = json.loads(claims["spot-abc"]["metadata"]["annotations"][INTERRUPTED_ANNOTATION])
    assert state["kind"] == SPOT_INTERRUPTED and state["replacements"] == ["default-repl"]
    # deleted at the latest 2 minutes after the warning, less the drain margin
    assert world.handler.records["spot-abc"].deadline == NOW + 120 - 30
    # the spot offering the warning came for is unavailable for a while (Karpenter's unavailable-offerings cache)
    assert ("m5.large", "us-east-1b", "spot") in world.unavailable.active()
    assert ("NodeClaim", "spot-abc", "SpotInterrupted") in world.events.sent
    assert ("Node", "ip-spot-abc", "SpotInterrupted") in world.events.sent
    assert queued(world) == 0  # acted on: deleted from the queue
    assert metric(world.registry, "karpenter_interruption_received_messages_total",
                  message_type="spot_interrupted") == 1
    assert metric(world.registry, "karpenter_interruption_deleted_messages_total") == 1
    assert metric(world.registry, "karpenter_interruption_message_queue_duration_seconds_sum") == 5.0
    # the replacement is still launching: the interrupted claim stays
    world.clock.now = NOW + 40
    world.handler.step()
    assert ("delete", "spot-abc") not in world.writer.log
    world.cache.upsert("NodeClaim", initialized(claims["default-repl"]))
    world.clock.now = NOW + 55
    world.handler.step()
    assert world.writer.log[-1] == ("delete", "spot-abc")
    record = world.handler.records["spot-abc"]
    assert record.ready_at == NOW + 55 and record.ready_at - NOW < 120  # ready before the warning runs out
    assert ("NodeClaim", "spot-abc", "TerminatingOnInterruption") in world.events.sent
    # a repeated warning for a claim already being deleted does nothing
    world.sqs.send_message(QueueUrl=world.url, MessageBody=json.dumps(SPOT))
    world.handler.step()
    assert world.writer.log.count(("create", "default-repl")) == 1


def test_the_claim_is_deleted_when_the_warning_runs_out_before_the_replacement_is_ready(world: Any) -> None:
    world.sqs.send_message(QueueUrl=world.url, MessageBody=json.dumps(SPOT))
    world.handler.step()
    world.clock.now = NOW + 89
    world.handler.step()
    assert ("delete", "spot-abc") not in world.writer.log
    world.clock.now = NOW + 90  # 120 s warning less the 30 s left for the drain
    world.handler.step()
    assert world.writer.log[-1] == ("delete", "spot-abc")
    assert "deadline" in world.handler.records["spot-abc"].why


def test_a_restarted_handler_carries_on_from_the_claims_annotation(world: Any) -> None:
    world.sqs.send_message(QueueUrl=world.url, MessageBody=json.dumps(SPOT))
    world.handler.step()
    fresh = Interruption(InterruptionQueue(world.sqs, world.url, wait=0), world.cache, world.writer, lambda c: [],
                         clock=world.clock)
    world.clock.now = NOW + 95
    fresh.step()
    assert world.writer.log[-1] == ("delete", "spot-abc")


def test_rebalance_recommendation_only_records_an_event(world: Any) -> None:
    world.sqs.send_message(QueueUrl=world.url, MessageBody=json.dumps(REBALANCE_EVENT))
    world.handler.step()
    assert world.writer.log == [] and world.planned == []
    assert ("NodeClaim", "spot-abc", "SpotRebalanceRecommendation") in world.events.sent
    assert metric(world.registry, "karpenter_interruption_received_messages_total",
                  message_type="rebalance_recommendation") == 1
    assert queued(world) == 0


@pytest.mark.parametrize(("body", "reason"), [(state_change("stopping"), "InstanceStopping"),
                                              (state_change("terminated"), "InstanceTerminating"),
                                              (HEALTH, "InstanceUnhealthy")])
def test_state_changes_and_scheduled_changes_replace_the_node(world: Any, body: dict[str, Any], reason: str
                                                              ) -> None:
    world.sqs.send_message(QueueUrl=world.url, MessageBody=json.dumps(body))
    world.handler.step()
    assert ("create", "default-repl") in world.writer.log
    assert ("NodeClaim", "spot-abc", reason) in world.events.sent
    if body is not HEALTH:  # the instance is going already: its claim goes at once, the replacement launches
        assert world.writer.log[-1] == ("delete", "spot-abc")
    else:  # retirement is scheduled far ahead: wait for the replacement (bounded by the replacement timeout)
        assert ("delete", "spot-abc") not in world.writer.log
        assert world.handler.records["spot-abc"].deadline == world.clock.now + 600
    assert ("m5.large", "us-east-1b", "spot") not in world.unavailable.active()


def test_unparseable_messages_and_unknown_instances_are_dropped(world: Any) -> None:
    world.sqs.send_message(QueueUrl=world.url, MessageBody="garbage")
    world.sqs.send_message(QueueUrl=world.url, MessageBody=json.dumps(
        {**SPOT, "detail": {"instance-id": "i-0000000000000000f", "instance-action": "terminate"}}))
    for _ in range(3):
        world.handler.step()
    assert world.writer.log == []
    assert queued(world) == 0
    assert metric(world.registry, "karpenter_interruption_deleted_messages_total") == 2
    assert metric(world.registry, "karpenter_interruption_received_messages_total",
                  message_type="spot_interrupted") == 1  # the garbage is not a message of any type
