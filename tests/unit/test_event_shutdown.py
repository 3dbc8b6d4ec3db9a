"""The Event writer ends with the controller: ``EventRecorder.stop`` sends the backlog for at most its timeout and
gives up on the rest, so no Event is written after the controller has stopped (found by the 2,000-node bench:
after a 1,000-pod scale-out the writer still sent hundreds of queued Events once the API server was gone)."""

from __future__ import annotations

import threading
import time
from typing import Any

from controller.events import EventRecorder


class SlowEvents:
    """An API server that takes ``seconds`` for each Event create."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.created: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        time.sleep(self.seconds)
        with self.lock:
            self.created.append(body)


def pod(i: int) -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": f"web-{i}", "namespace": "shop", "uid": f"u{i}"}}


def test_stop_gives_up_the_backlog_after_its_timeout() -> None:
    events = EventRecorder(None)
    slow = SlowEvents(0.02)
    events._core = slow  # type: ignore[assignment]
    events.start()
    for i in range(200):  # 4 s of writes queued
        # a reason without a token bucket (Nominated's lets 10 through, then 5 a second)
        events.warning(pod(i), "FailedScheduling", "Failed to schedule pod: NodePool default limit cpu=64 reached")
    started = time.monotonic()
    events.stop(timeout=0.3)
    assert time.monotonic() - started < 1.0
    sent_at_stop = len(slow.created)
    assert 0 < sent_at_stop < 200
    time.sleep(0.3)
    assert len(slow.created) <= sent_at_stop + 1  # at most the request in flight when stop returned
    assert events.sent + events.dropped == 200  # nothing is left to send: the rest is counted as dropped


def test_stop_sends_a_short_backlog_in_full() -> None:
    events = EventRecorder(None)
    slow = SlowEvents(0.001)
    events._core = slow  # type: ignore[assignment]
    events.start()
    for i in range(20):
        # a reason without a token bucket (Nominated's lets 10 through, then 5 a second)
        events.warning(pod(i), "FailedScheduling", "Failed to schedule pod: NodePool default limit cpu=64 reached")
    events.stop(timeout=5.0)
    assert len(slow.created) == 20 and events.sent == 20 and events.dropped == 0
