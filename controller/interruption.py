"""Interruption handling: EC2's warnings, read from an SQS queue of EventBridge messages (``nodeplan run
--interruption-queue``), turn into the NodeClaim being replaced before its instance is lost.

The messages and what each means are Karpenter's AWS provider's (``pkg/controllers/interruption``):

============================================  ===========================  ==============================
source / detail-type                          kind                         action
============================================  ===========================  ==============================
aws.ec2 / EC2 Spot Instance Interruption       ``spot_interrupted``         replace (2 minutes' warning);
Warning                                                                     the spot offering unavailable
aws.ec2 / EC2 Instance Rebalance               ``rebalance_recommendation`` an Event only
Recommendation
aws.health / AWS Health Event (service EC2,    ``scheduled_change``         replace
category scheduledChange)
aws.ec2 / EC2 Instance State-change            ``instance_stopped``         replace
Notification (stopping, stopped)
... (shutting-down, terminated)                ``instance_terminated``      replace
anything else, other states or services        ``no_op``                    none
============================================  ===========================  ==============================

Karpenter deletes the NodeClaim at once and lets its provisioner launch for the pods of the deleting node while
the drain runs. Here the replacement comes first, so no pod waits for a node that is not there yet: the node is
tainted ``karpenter.sh/disrupted:NoSchedule``; the node's pods are planned (as pending, without the node) and
the plan's NodeClaims created, annotated ``nodeplan.io/replaces``; once every replacement is Initialized — or
one failed, or the deadline came (the warning's time plus its 2 minutes, less ``drain_margin`` for the drain
itself) — the interrupted NodeClaim is deleted, and termination drains the node through the Eviction API and
terminates the instance. The state lives in the NodeClaim's ``nodeplan.io/interrupted`` annotation, so a
restarted controller carries on. A message is deleted from the queue once acted on (one that cannot be parsed
too, as Karpenter does); one whose handling failed is received again after its visibility timeout.

Metrics keep Karpenter's names: ``karpenter_interruption_received_messages_total{message_type}``,
``karpenter_interruption_deleted_messages_total``, ``karpenter_interruption_message_queue_duration_seconds``.
Events keep its reasons: ``SpotInterrupted``, ``SpotRebalanceRecommendation``, ``InstanceUnhealthy``,
``InstanceStopping``, ``InstanceTerminating`` on the NodeClaim and its Node, ``TerminatingOnInterruption`` when
the claim is deleted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Histogram

from controller.batch import is_daemon_or_static, is_terminal, pod_key
from controller.cache import ClusterCache
from controller.conditions import conditions_of, is_true
from controller.events import EventRecorder
from controller.offerings import UnavailableOfferings
from controller.provisioner import GROUP, VERSION, Provisioner, claim_node_name
from model import labels as wk
from model.durations import epoch

log = logging.getLogger(__name__)

INTERRUPTED_ANNOTATION = "nodeplan.io/interrupted"
#: on replacement NodeClaims: the nodes they replace (the annotation consolidation's replacements carry too)
REPLACES_ANNOTATION = "nodeplan.io/replaces"
#: how long a spot interruption warning comes before the instance is reclaimed
SPOT_WARNING = 120.0

SPOT_INTERRUPTED = "spot_interrupted"
REBALANCE = "rebalance_recommendation"
SCHEDULED_CHANGE = "scheduled_change"
STOPPED = "instance_stopped"
TERMINATED = "instance_terminated"
NO_OP = "no_op"
#: kinds that replace the node (Karpenter's CordonAndDrain); the others only record an Event
REPLACE = frozenset({SPOT_INTERRUPTED, SCHEDULED_CHANGE, STOPPED, TERMINATED})
#: kind → (Event reason, message), Karpenter's
EVENTS: Mapping[str, tuple[str, str]] = {
    SPOT_INTERRUPTED: ("SpotInterrupted", "Spot interruption warning was triggered"),
    REBALANCE: ("SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered"),
    SCHEDULED_CHANGE: ("InstanceUnhealthy", "An unhealthy warning was triggered for the instance"),
    STOPPED: ("InstanceStopping", "Instance is stopping"),
    TERMINATED: ("InstanceTerminating", "Instance is terminating"),
}


@dataclass(frozen=True)
class Message:
    """One EventBridge event: its kind, the instances it is about and when it happened (epoch seconds)."""

    kind: str
    instance_ids: tuple[str, ...]
    time: float
    id: str = ""
    #: a scheduled change's start (epoch seconds), when the event gives it
    starts: float | None = None



def parse(body: str) -> Message:
    """An SQS message body as a ``Message`` (``no_op`` for events nodeplan does not act on); ``ValueError``
    when it is not an EventBridge event at all."""
    try:
        event = json.loads(body)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(event, dict) or "detail-type" not in event or "source" not in event:
        raise ValueError("not an EventBridge event (no source / detail-type)")
    detail: dict[str, Any] = event["detail"] if isinstance(event.get("detail"), dict) else {}
    when = epoch(event.get("time")) or 0.0
    source, kind_of = event.get("source"), event.get("detail-type")
    iid = str(detail.get("instance-id") or "")
    ids: tuple[str, ...] = (iid,) if iid else ()
    kind, starts = NO_OP, None
    if source == "aws.ec2" and kind_of == "EC2 Spot Instance Interruption Warning":
        kind = SPOT_INTERRUPTED
    elif source == "aws.ec2" and kind_of == "EC2 Instance Rebalance Recommendation":
        kind = REBALANCE
    elif source == "aws.ec2" and kind_of == "EC2 Instance State-change Notification":
        state = str(detail.get("state") or "").lower()
        kind = STOPPED if state in ("stopping", "stopped") else TERMINATED if state in (
            "shutting-down", "terminated") else NO_OP
    elif (source == "aws.health" and kind_of == "AWS Health Event" and detail.get("service") == "EC2"
          and detail.get("eventTypeCategory") == "scheduledChange"):
        kind = SCHEDULED_CHANGE
        ids = tuple(str(e.get("entityValue")) for e in detail.get("affectedEntities") or []
                    if isinstance(e, dict) and e.get("entityValue"))
        starts = epoch(detail.get("startTime"))
    return Message(kind, ids if kind != NO_OP else (), when, str(event.get("id") or ""), starts)


class InterruptionQueue:
    """The SQS queue, by name (its URL looked up once) or URL; long polls as Karpenter's (10 messages, 20 s
    visibility timeout, ``wait`` seconds)."""

    def __init__(self, sqs: Any, queue: str, *, wait: int = 20) -> None:
        self._sqs = sqs
        self._queue = queue
        self._url = queue if queue.startswith(("http://", "https://")) else ""
        self.wait = wait

    @property
    def url(self) -> str:
        if not self._url:
            self._url = str(self._sqs.get_queue_url(QueueName=self._queue)["QueueUrl"])
        return self._url

    def receive(self) -> list[dict[str, Any]]:
        answer = self._sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10, VisibilityTimeout=20,
                                           WaitTimeSeconds=self.wait, AttributeNames=["SentTimestamp"])
        return list(answer.get("Messages") or [])

    def delete(self, message: Mapping[str, Any]) -> None:
        self._sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])


class InterruptionMetrics:
    """Karpenter's interruption metrics, in the controller's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.received = Counter("karpenter_interruption_received_messages", "Messages received from the SQS "
                                "queue, by message type", ["message_type"], registry=registry)
        self.deleted = Counter("karpenter_interruption_deleted_messages", "Messages deleted from the SQS queue",
                               registry=registry)
        self.queue_duration = Histogram("karpenter_interruption_message_queue_duration_seconds",
                                        "Time from the event to its handling", registry=registry,
                                        buckets=(0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600))


class Writer(Protocol):
    """The writes interruption makes (``controller.disruption.KubeWriter`` does them against the API server)."""

    def taint(self, node: str) -> None: ...

    def create_claim(self, body: dict[str, Any]) -> None: ...

    def delete_claim(self, name: str) -> None: ...

    def annotate_claim(self, name: str, annotations: Mapping[str, str]) -> None: ...


@dataclass
class Replacement:
    """One interrupted NodeClaim: what replaces it and when it was handed to termination (tests read it)."""

    claim: str
    kind: str
    event_time: float
    deadline: float
    replacements: list[str] = field(default_factory=list)
    #: when every replacement was first seen Initialized (the handler's clock), None until then
    ready_at: float | None = None
    deleted_at: float | None = None
    why: str = ""


def replacement_planner(provisioner: Provisioner) -> Callable[[Mapping[str, Any]], list[dict[str, Any]]]:
    """NodeClaim bodies for the pods of an interrupted claim's node: the provisioner's plan for them as pending
    pods, in a cluster without that node (room left on other nodes is used first, as for any batch)."""

    def plan(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
        node = claim_node_name(claim)
        name = str((claim.get("metadata") or {}).get("name"))
        objects: list[dict[str, Any]] = []
        batch: dict[str, dict[str, Any]] = {}
        for obj in provisioner.snapshot_objects({}):
            kind = obj.get("kind")
            meta = obj.get("metadata") or {}
            if (kind == "Node" and meta.get("name") == node) or (kind == "NodeClaim" and meta.get("name") == name):
                continue
            if kind == "Pod" and (obj.get("spec") or {}).get("nodeName") == node:
                if is_daemon_or_static(obj) or is_terminal(obj) or meta.get("deletionTimestamp"):
                    continue
                pending = {**obj, "spec": {k: v for k, v in (obj.get("spec") or {}).items() if k != "nodeName"},
                           "status": {"phase": "Pending"}}
                batch[pod_key(obj)] = pending
                objects.append(pending)
                continue
            objects.append(obj)
        if not batch:
            return []
        _, bodies = provisioner.plan(batch, objects)
        return bodies

    return plan


class Interruption:
    """The interruption controller: a periodic task (``step``), each step one long poll of the queue."""

    name = "interruption"
    interval = 0.0  # the receive call itself waits for messages

    def __init__(self, queue: InterruptionQueue, cache: ClusterCache, writer: Writer,
                 plan_replacement: Callable[[Mapping[str, Any]], list[dict[str, Any]]], *,
                 events: EventRecorder | None = None, metrics: InterruptionMetrics | None = None,
                 unavailable: UnavailableOfferings | None = None, clock: Callable[[], float] = time.time,
                 drain_margin: float = 30.0, replacement_timeout: float = 600.0,
                 on_created: Callable[[dict[str, Any]], None] = lambda body: None) -> None:
        self._queue = queue
        self._cache = cache
        self._writer = writer
        self._plan = plan_replacement
        self._events = events
        self.metrics = metrics
        self._unavailable = unavailable
        self._clock = clock
        self.drain_margin = drain_margin
        self.replacement_timeout = replacement_timeout
        self._on_created = on_created
        self.records: dict[str, Replacement] = {}

    # -- the queue ----------------------------------------------------------------------------------------
    def step(self) -> None:
        self.advance()
        for raw in self._queue.receive():
            self.handle(raw)
        self.advance()

    def handle(self, raw: Mapping[str, Any]) -> None:
        try:
            message = parse(str(raw.get("Body") or ""))
        except ValueError as err:
            log.warning("interruption queue: dropping a message that cannot be parsed: %s", err)
            self._delete(raw)
            return
        if self.metrics is not None:
            self.metrics.received.labels(message.kind).inc()
        if message.kind != NO_OP:
            self.act(message)
        if self.metrics is not None and message.time:
            self.metrics.queue_duration.observe(max(0.0, self._clock() - message.time))
        self._delete(raw)

    def _delete(self, raw: Mapping[str, Any]) -> None:
        self._queue.delete(raw)
        if self.metrics is not None:
            self.metrics.deleted.inc()

    # -- acting -------------------------------------------------------------------------------------------
    def claims_of(self, instance_id: str) -> list[dict[str, Any]]:
        """NodeClaims whose providerID names the instance (``aws:///zone/i-…``)."""
        return [c for c in self._cache.items("NodeClaim")
                if str((c.get("status") or {}).get("providerID") or "").rsplit("/", 1)[-1] == instance_id]

    def act(self, message: Message) -> None:
        nodes = {str((n.get("metadata") or {}).get("name")): n for n in self._cache.items("Node")}
        for iid in message.instance_ids:
            for claim in self.claims_of(iid):
                node = nodes.get(claim_node_name(claim))
                reason, text = EVENTS[message.kind]
                self._event(claim, node, reason, text)
                labels = (claim.get("metadata") or {}).get("labels") or {}
                if message.kind == SPOT_INTERRUPTED and self._unavailable is not None and labels.get(wk.ZONE):
                    self._unavailable.mark(labels.get(wk.INSTANCE_TYPE, ""), labels[wk.ZONE], "spot")
                if message.kind in REPLACE:
                    self.begin(claim, node, message)

    def deadline(self, message: Message) -> float:
        """When the claim is deleted at the latest, replacements ready or not."""
        now = self._clock()
        if message.kind == SPOT_INTERRUPTED:
            return (message.time or now) + SPOT_WARNING - self.drain_margin
        if message.kind == SCHEDULED_CHANGE:
            if message.starts is None:
                return now + self.replacement_timeout
            return min(message.starts - self.drain_margin, now + self.replacement_timeout)
        return now  # stopping or terminating already: nothing to wait for

    def begin(self, claim: Mapping[str, Any], node: Mapping[str, Any] | None, message: Message) -> None:
        meta = claim.get("metadata") or {}
        name = str(meta.get("name"))
        if meta.get("deletionTimestamp") or INTERRUPTED_ANNOTATION in (meta.get("annotations") or {}):
            return  # already going, or already being replaced (a repeated message)
        deadline = self.deadline(message)
        if node is not None:
            self._writer.taint(str(node["metadata"]["name"]))
        names = []
        for body in self._plan(claim):
            body["metadata"].setdefault("annotations", {})[REPLACES_ANNOTATION] = claim_node_name(claim)
            self._writer.create_claim(body)
            self._on_created(body)
            names.append(str(body["metadata"]["name"]))
        state = {"kind": message.kind, "time": _stamp(message.time or self._clock()), "deadline": _stamp(deadline),
                 "replacements": names}
        self._writer.annotate_claim(name, {INTERRUPTED_ANNOTATION: json.dumps(state, sort_keys=True)})
        self.records[name] = Replacement(name, message.kind, message.time, deadline, names)
        log.info("NodeClaim %s interrupted (%s): %d replacement(s) %s, deleted by %s at the latest", name,
                 message.kind, len(names), ", ".join(names) or "-", _stamp(deadline))

    def advance(self) -> None:
        """Delete every interrupted NodeClaim whose replacements are Initialized (or failed), or whose deadline
        came; termination then drains its node and terminates the instance."""
        claims = {str((c.get("metadata") or {}).get("name")): c for c in self._cache.items("NodeClaim")}
        for name, claim in claims.items():
            meta = claim.get("metadata") or {}
            raw_state = (meta.get("annotations") or {}).get(INTERRUPTED_ANNOTATION)
            if not raw_state or meta.get("deletionTimestamp"):
                continue
            record = self.records.get(name) or _record(name, raw_state)
            self.records[name] = record
            deadline, names = record.deadline, record.replacements
            states = [_claim_state(claims.get(n)) for n in names]
            now = self._clock()
            if all(s == "initialized" for s in states):
                if record.ready_at is None:
                    record.ready_at = now
                why = "replacements initialized" if names else "no replacement needed"
            elif any(s in ("failed", "gone") for s in states):
                why = "a replacement failed to launch"
            elif now >= deadline:
                why = "deadline reached before the replacements were initialized"
            else:
                continue
            self._writer.delete_claim(name)
            record.deleted_at, record.why = now, why
            nodes = {str((n.get("metadata") or {}).get("name")): n for n in self._cache.items("Node")}
            self._event(claim, nodes.get(claim_node_name(claim)), "TerminatingOnInterruption",
                        "Interruption triggered termination for the NodeClaim")
            log.info("NodeClaim %s deleted on interruption: %s", name, why)

    # -- Events -------------------------------------------------------------------------------------------
    def _event(self, claim: Mapping[str, Any], node: Mapping[str, Any] | None, reason: str, message: str) -> None:
        if self._events is None:
            return
        self._events.warning(_ref(claim, "NodeClaim", f"{GROUP}/{VERSION}"), reason, message)
        if node is not None:
            self._events.warning(_ref(node, "Node", "v1"), reason, message.replace("NodeClaim", "Node"))


class KubeInterruptionWriter:
    """``Writer`` against the API server (the disruption writer's taint and claim calls, plus the annotation
    that records an interruption on its NodeClaim)."""

    def __init__(self, api: client.ApiClient, cache: ClusterCache) -> None:
        from controller.disruption import KubeWriter

        self._inner = KubeWriter(api, cache)
        self._custom = client.CustomObjectsApi(api)
        self._cache = cache

    def taint(self, node: str) -> None:
        self._inner.taint(node)

    def create_claim(self, body: dict[str, Any]) -> None:
        self._inner.create_claim(body)

    def delete_claim(self, name: str) -> None:
        self._inner.delete_claim(name)

    def annotate_claim(self, name: str, annotations: Mapping[str, str]) -> None:
        try:
            updated = self._custom.patch_cluster_custom_object(GROUP, VERSION, "nodeclaims", name,
                                                               {"metadata": {"annotations": dict(annotations)}})
        except client.ApiException as err:
            if err.status != 404:
                raise
            return
        self._cache.upsert("NodeClaim", cast(dict[str, Any], updated))


def _record(name: str, annotation: str) -> Replacement:
    """The state an earlier run wrote on the claim (an unreadable one: delete now, nothing to wait for)."""
    try:
        state = json.loads(annotation)
        return Replacement(name, str(state.get("kind", "")), epoch(state.get("time")) or 0.0,
                           epoch(state.get("deadline")) or 0.0, [str(n) for n in state.get("replacements") or []])
    except (json.JSONDecodeError, AttributeError):
        return Replacement(name, "", 0.0, 0.0)


def _ref(obj: Mapping[str, Any], kind: str, api_version: str) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"kind": kind, "apiVersion": api_version, "metadata": {"name": meta.get("name"), "uid": meta.get("uid")}}


def _claim_state(raw: Mapping[str, Any] | None) -> str:
    if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
        return "gone"
    if (conditions_of(raw).get("Launched") or {}).get("status") == "False":
        return "failed"
    return "initialized" if is_true(raw, "Initialized") else "launching"


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


__all__: Sequence[str] = ("Interruption", "InterruptionMetrics", "InterruptionQueue", "KubeInterruptionWriter",
                          "Message", "Replacement", "parse", "replacement_planner")
