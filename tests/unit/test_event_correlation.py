"""The Event writer behaves as Karpenter's recorder on top of client-go's correlator.

Karpenter (sigs.k8s.io/karpenter ``pkg/events/recorder.go``): an Event whose reason and dedupe values were
published less than its dedupe timeout ago is dropped; a rate-limited reason then needs a token of its bucket
(the dedupe key is kept even when the bucket refuses). ``NominatePodEvent`` dedupes by the pod's UID with the
default 2-minute timeout and shares ``PodNominationRateLimiter`` (5 a second, burst 10) across pods;
``PodFailedToScheduleEvent`` dedupes by the pod's UID for 5 minutes (its message is no part of the key).

client-go (``tools/record/events_cache.go``): ``EventAggregate`` turns the 10th distinct message about one object
with one type and reason within 600 s into "(combined from similar events): <message>", keyed by the group so
later ones count on it; ``eventObserve`` PATCHes the count of an Event seen before; the spam filter lets a source
burst 25 Events about an object, refilling one every 300 s.
"""

from __future__ import annotations

from typing import Any

from controller.events import AGGREGATE_PREFIX, EventRecorder


class Clock:
    def __init__(self) -> None:
        self.now = 1_767_225_600.0

    def __call__(self) -> float:
        return self.now


class FakeEvents:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.created.append(body)

    def patch_namespaced_event(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.patched.append((name, body))


def recorder(queue_size: int = 100_000) -> tuple[EventRecorder, FakeEvents, Clock]:
    clock = Clock()
    events = EventRecorder(None, clock=clock, queue_size=queue_size)
    fake = FakeEvents()
    events._core = fake  # type: ignore[assignment]
    return events, fake, clock


def pod(i: int) -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": f"web-{i}", "namespace": "shop", "uid": f"u{i}"}}


NODE = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "kwok-1", "uid": "n1"}}
#: the correlator's tests use a reason without a Karpenter policy, so every distinct message reaches client-go
CLAIM = {"kind": "NodeClaim", "apiVersion": "karpenter.sh/v1", "metadata": {"name": "default-x7k2p", "uid": "c1"}}


def test_a_pods_nomination_is_deduplicated_by_its_uid_for_two_minutes() -> None:
    events, fake, clock = recorder()
    events.normal(pod(1), "Nominated", "Pod should schedule on: nodeclaim/default-a")
    clock.now += 30  # the next batch plans it onto another claim: the same news within the timeout
    events.normal(pod(1), "Nominated", "Pod should schedule on: nodeclaim/default-b")
    events.normal(pod(2), "Nominated", "Pod should schedule on: nodeclaim/default-b")  # another pod is not held
    clock.now += 91  # 121 s after the first: the key has expired
    events.normal(pod(1), "Nominated", "Pod should schedule on: nodeclaim/default-c")
    events.drain()
    assert [(e["involvedObject"]["name"], e["message"]) for e in fake.created] == [
        ("web-1", "Pod should schedule on: nodeclaim/default-a"),
        ("web-2", "Pod should schedule on: nodeclaim/default-b"),
        ("web-1", "Pod should schedule on: nodeclaim/default-c")]
    assert events.suppressed == 1 and all(e["count"] == 1 for e in fake.created)


def test_a_pods_changed_failure_within_five_minutes_is_no_new_event() -> None:
    events, fake, clock = recorder()
    events.warning(pod(1), "FailedScheduling", "Failed to schedule pod: NodePool default limit cpu=64 reached")
    clock.now += 60  # the next batches fail it for other reasons: the same news to Karpenter's recorder
    events.warning(pod(1), "FailedScheduling", "Failed to schedule pod: no instance type has 96 cpu")
    clock.now += 239
    events.warning(pod(1), "FailedScheduling", "Failed to schedule pod: no NodePool tolerates it")
    events.warning(pod(2), "FailedScheduling", "Failed to schedule pod: no NodePool tolerates it")  # another pod
    clock.now += 2  # 301 s after the first: the key has expired, and the new message is a new Event
    events.warning(pod(1), "FailedScheduling", "Failed to schedule pod: no NodePool tolerates it")
    events.drain()
    assert [(e["involvedObject"]["name"], e["message"]) for e in fake.created] == [
        ("web-1", "Failed to schedule pod: NodePool default limit cpu=64 reached"),
        ("web-2", "Failed to schedule pod: no NodePool tolerates it"),
        ("web-1", "Failed to schedule pod: no NodePool tolerates it")]
    assert events.suppressed == 2 and fake.patched == [] and all(e["count"] == 1 for e in fake.created)


def test_nominations_share_one_bucket_of_five_a_second_burst_ten() -> None:
    events, fake, clock = recorder()
    for i in range(1_000):  # one batch nominates a 1,000-pod scale-out
        events.normal(pod(i), "Nominated", "Pod should schedule on: nodeclaim/default-a")
    events.drain()
    assert len(fake.created) == 10 and events.rate_limited == 990
    clock.now += 1.0
    for i in range(1_000, 1_010):
        events.normal(pod(i), "Nominated", "Pod should schedule on: nodeclaim/default-a")
    events.drain()
    assert len(fake.created) == 15  # one second refilled five tokens
    # a refused pod's key is kept for its timeout (Karpenter dedupes before it asks the bucket)
    clock.now += 60
    events.normal(pod(500), "Nominated", "Pod should schedule on: nodeclaim/default-a")
    events.drain()
    assert len(fake.created) == 15 and events.suppressed == 1
    # other reasons have no bucket
    for i in range(50):
        events.warning(pod(i), "FailedScheduling", "Failed to schedule pod: NodePool default limit cpu=64 reached")
    events.drain()
    assert len(fake.created) == 65


def test_a_scale_out_nominates_at_the_buckets_pace_and_fills_no_queue() -> None:
    """The live run's shape (1,000 pods, 25 batches over 333 s, every pod still pending nominated again in each
    batch): 5,697 Events were offered and 1,723 dropped by a full queue at ~12 sent a second. With Karpenter's
    policy at most burst + 5/s get past the recorder, below the writer's pace, so a 2,048 queue cannot fill."""
    events, _, clock = recorder(queue_size=2_048)
    pending = list(range(1_000))
    offered = 0
    for batch in range(25):
        for i in pending:
            events.normal(pod(i), "Nominated", f"Pod should schedule on: nodeclaim/default-{batch}")
            offered += 1
        pending = pending[40:]  # pods start running as their nodes come up
        clock.now += 333 / 25
    queued = events._queue.qsize()
    assert offered > 10_000
    assert queued <= 10 + 5 * 333 and events.dropped == 0
    assert queued + events.rate_limited + events.suppressed == offered


def test_the_tenth_distinct_message_in_ten_minutes_becomes_one_aggregate_event() -> None:
    events, fake, clock = recorder()
    for i in range(9):
        events.warning(CLAIM, "LaunchFailed", f"Failed to launch: reason {i}")
        clock.now += 1
    events.warning(CLAIM, "LaunchFailed", "Failed to launch: reason 9")
    events.warning(CLAIM, "LaunchFailed", "Failed to launch: reason 10")
    events.drain()
    assert [e["message"] for e in fake.created] == [*(f"Failed to launch: reason {i}" for i in range(9)),
                                                    f"{AGGREGATE_PREFIX}Failed to launch: reason 9"]
    # the 11th distinct message counts on the aggregate (keyed by the group, not the message)
    [(name, patch)] = fake.patched
    assert name == fake.created[-1]["metadata"]["name"]
    assert patch["count"] == 2 and patch["message"] == f"{AGGREGATE_PREFIX}Failed to launch: reason 10"
    assert events.aggregated == 2
    # another reason about the same object is another group
    events.normal(CLAIM, "Launched", "Status condition has been set to True")
    events.drain()
    assert fake.created[-1]["reason"] == "Launched" and fake.created[-1]["message"].startswith("Status")


def test_similar_events_start_afresh_after_ten_minutes_of_silence() -> None:
    events, fake, clock = recorder()
    for i in range(9):
        events.warning(CLAIM, "LaunchFailed", f"Failed to launch: reason {i}")
    clock.now += 601
    events.warning(CLAIM, "LaunchFailed", "Failed to launch: reason 9")
    events.drain()
    assert fake.created[-1]["message"] == "Failed to launch: reason 9" and events.aggregated == 0


def test_a_source_may_burst_25_events_about_an_object_then_one_per_five_minutes() -> None:
    events, fake, clock = recorder()
    for i in range(30):
        clock.now += 200  # past every dedupe timeout and aggregation interval
        events.warning(NODE, f"Reason{i}", "something happened")
    events.drain()
    # 30 × 200 s refilled 20 tokens on top of the burst of 25, one per 300 s
    assert len(fake.created) == 30
    events, fake, clock = recorder()
    for i in range(30):
        events.warning(NODE, f"Reason{i}", "something happened")
    events.drain()
    assert len(fake.created) == 25 and events.spam_filtered == 5
    clock.now += 300
    events.warning(NODE, "Reason31", "something happened")
    events.warning(NODE, "Reason32", "something happened")
    events.drain()
    assert len(fake.created) == 26 and events.spam_filtered == 6
    events.warning(pod(1), "Reason0", "something happened")  # another object has its own bucket
    events.drain()
    assert len(fake.created) == 27


def test_disruption_blocked_is_deduplicated_by_the_nodes_uid() -> None:
    events, fake, clock = recorder()
    events.normal(NODE, "DisruptionBlocked", "Cannot disrupt Node: pdb shop/web prevents pod evictions")
    clock.now += 60
    events.normal(NODE, "DisruptionBlocked", "Cannot disrupt Node: pod shop/db has do-not-disrupt")
    clock.now += 61
    events.normal(NODE, "DisruptionBlocked", "Cannot disrupt Node: pod shop/db has do-not-disrupt")
    events.drain()
    assert [e["message"] for e in fake.created] == ["Cannot disrupt Node: pdb shop/web prevents pod evictions",
                                                    "Cannot disrupt Node: pod shop/db has do-not-disrupt"]
