"""Kubernetes Events (core/v1) for what the controller decides, so ``kubectl describe pod`` shows it.

Recorded as Karpenter records them, in two layers:

1. Karpenter's recorder (sigs.k8s.io/karpenter ``pkg/events``): an Event whose reason and dedupe values were
   seen less than its dedupe timeout ago is dropped; some reasons also pass a token bucket shared by every Event
   of the reason. ``POLICIES`` holds Karpenter's values for the reasons nodeplan emits as Karpenter does: a pod's
   ``Nominated`` is keyed by the pod's uid alone (another target within the timeout is the same news) and limited
   to 5 a second, burst 10, across all pods — one per pod per batch was the bulk of the Events nodeplan wrote;
   a pod's ``FailedScheduling`` is keyed by its uid for 5 minutes (a changed reason within them is no new Event).
   Every other reason is keyed by object, type, reason and message with ``dedup_window`` as its timeout, and a
   repeat held back is counted into the Event's next ``count``.
2. client-go's ``EventCorrelator`` (``tools/record/events_cache.go``): the 10th distinct message of one object,
   type and reason within 10 minutes becomes one aggregate Event, "(combined from similar events): ...", whose
   ``count`` grows from then on; an Event seen before is a PATCH of its ``count`` and ``lastTimestamp``; a source
   may send 25 Events about one object, then one every 5 minutes (the spam filter). Caches hold 4,096 keys.

Events are best-effort: a writer thread sends them from a bounded queue (full → dropped and counted), so a slow
API server never stalls a batch; failures are logged. Cluster-scoped objects (NodeClaims, NodePools) get their
Events in namespace ``default``, as kubectl expects.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client

from controller.rest import CoreApi
from controller.throttle import TokenBucket

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"
MAX_MESSAGE = 1024
#: client-go's correlator: similar Events (one object, type and reason) aggregate from the 10th distinct message
#: within 10 minutes; a source may send 25 Events about an object, then one per 5 minutes; LRU caches of 4,096 keys
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
AGGREGATE_PREFIX = "(combined from similar events): "
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
CORRELATOR_KEYS = 4096


@dataclass(frozen=True)
class Policy:
    """How Karpenter's recorder treats the Events of one reason: those with equal ``dedupe`` values (each of
    "uid" — the involved object —, "type", "message") within ``timeout`` seconds (None: the recorder's
    ``dedup_window``) are one; ``rate``/``burst``, when set, a token bucket every Event of the reason shares."""

    dedupe: tuple[str, ...] = ("uid", "type", "message")
    timeout: float | None = None
    rate: float = 0.0
    burst: int = 0


#: Karpenter's policies (v1.15 ``pkg/controllers/provisioning/scheduling/events.go``,
#: ``pkg/controllers/disruption/events/events.go``) for the reasons nodeplan emits the way Karpenter does;
#: the rest keep the default (object, type, reason and message within ``dedup_window``)
POLICIES: dict[str, Policy] = {
    # NominatePodEvent: DedupeValues pod UID, the default 2-minute timeout, PodNominationRateLimiter (5/s, 10)
    "Nominated": Policy(dedupe=("uid",), timeout=120.0, rate=5.0, burst=10),
    # PodFailedToScheduleEvent: DedupeValues pod UID, DedupeTimeout 5 minutes, no rate limiter
    "FailedScheduling": Policy(dedupe=("uid",), timeout=300.0),
    # Blocked: DedupeValues node UID, the default timeout
    "DisruptionBlocked": Policy(dedupe=("uid",), timeout=120.0),
}


@dataclass
class _Entry:
    """An Event written (client-go's eventLog): its body as last sent and how often it happened."""

    body: dict[str, Any]
    count: int


@dataclass
class _Held:
    """A dedupe key of Karpenter's layer: until when repeats are dropped, and how many were (counted into the
    next ``count`` when the key names one Event)."""

    until: float
    held: int = 0


@dataclass
class _Similar:
    """client-go's aggregateRecord: the distinct messages of one object, type and reason, and when last seen."""

    messages: set[str]
    last: float


@dataclass(frozen=True)
class _Send:
    create: bool
    body: dict[str, Any]
    #: the whole Event as it should now read: re-created from this when a PATCH finds it expired
    full: dict[str, Any]


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _lru_get(cache: OrderedDict[Any, Any], key: Any) -> Any:
    found = cache.get(key)
    if found is not None:
        cache.move_to_end(key)
    return found


def _lru_put(cache: OrderedDict[Any, Any], key: Any, value: Any, limit: int = CORRELATOR_KEYS) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


def reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """The ``involvedObject`` of an Event about ``obj`` (a raw API object with kind and apiVersion)."""
    meta = obj.get("metadata") or {}
    ref = {"kind": str(obj.get("kind", "")), "apiVersion": str(obj.get("apiVersion", "")),
           "name": str(meta.get("name", "")), "uid": str(meta.get("uid", ""))}
    if meta.get("namespace"):
        ref["namespace"] = str(meta["namespace"])
    return {k: v for k, v in ref.items() if v}


class EventRecorder:
    def __init__(self, api: client.ApiClient | None, *, component: str = "nodeplan", instance: str = "",
                 clock: Callable[[], float] = time.time, dedup_window: float = 120.0, max_keys: int = 8192,
                 queue_size: int = 2048) -> None:
        self._core = CoreApi(api) if api is not None else None
        self.component = component
        self.instance = instance or component
        self._clock = clock
        self.dedup_window = dedup_window
        self._max_keys = max_keys
        self._lock = threading.Lock()
        #: Karpenter's dedupe cache: (reason, dedupe values) → until when repeats are held back
        self._held: OrderedDict[tuple[str, ...], _Held] = OrderedDict()
        #: client-go's correlator caches: Events written, similar Events, per-object spam buckets
        self._seen: OrderedDict[tuple[str, ...], _Entry] = OrderedDict()
        self._similar: OrderedDict[tuple[str, ...], _Similar] = OrderedDict()
        self._spam: OrderedDict[tuple[str, ...], TokenBucket] = OrderedDict()
        self._buckets: dict[str, TokenBucket] = {}
        self._queue: queue.Queue[_Send | None] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        #: set by ``stop`` once its timeout has passed: the writer sends nothing more (the rest is dropped)
        self._abandon = threading.Event()
        self.sent = 0
        #: held back by the dedupe timeout (Karpenter's layer)
        self.suppressed = 0
        #: refused by a reason's token bucket (Karpenter's layer)
        self.rate_limited = 0
        #: written as part of an aggregate Event (client-go's layer)
        self.aggregated = 0
        #: refused by the per-object spam filter (client-go's layer)
        self.spam_filtered = 0
        self.dropped = 0
        self.failed = 0
        #: called with (event type, reason) for every event recorded (sent or suppressed): the metrics hook
        self.on_record: Callable[[str, str], None] | None = None

    # -- recording ---------------------------------------------------------------------------------------
    def normal(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.record(obj, NORMAL, reason, message)

    def warning(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.record(obj, WARNING, reason, message)

    def record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Queue an Event about ``obj`` unless Karpenter's recorder or client-go's correlator would not send it."""
        ref = reference(obj)
        message = message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."
        identity = (ref.get("uid") or f"{ref.get('namespace', '')}/{ref.get('name', '')}", ref.get("kind", ""))
        now = self._clock()
        if self.on_record is not None:
            self.on_record(type_, reason)
        policy = POLICIES.get(reason, Policy())
        with self._lock:
            held = self._hold(policy, identity, type_, reason, message, now)
            if held is None:
                return
            send = self._correlate(ref, identity, type_, reason, message, now, 1 + held)
        if send is None:
            return
        try:
            self._queue.put_nowait(send)
        except queue.Full:
            self.dropped += 1

    def _hold(self, policy: Policy, identity: tuple[str, str], type_: str, reason: str, message: str,
              now: float) -> int | None:
        """Karpenter's layer: None when the Event is dropped (a repeat within its dedupe timeout, or refused by
        its reason's bucket), else how many repeats were held back since (counted only when the key names one
        Event: it includes the message). The caller holds the lock."""
        values = {"uid": identity, "type": (type_,), "message": (message,)}
        key = (reason.lower(), *(v for name in policy.dedupe for v in values[name]))
        entry = self._held.get(key)
        if entry is not None and now < entry.until:
            self._held.move_to_end(key)
            entry.held += 1
            self.suppressed += 1
            return None
        timeout = self.dedup_window if policy.timeout is None else policy.timeout
        _lru_put(self._held, key, _Held(now + timeout), self._max_keys)
        if policy.rate > 0:  # after the dedupe, as Karpenter's publishEvent: a refused Event's key stays held
            bucket = self._buckets.get(reason)
            if bucket is None:
                bucket = self._buckets[reason] = TokenBucket(policy.rate, policy.burst, clock=self._clock)
            if not bucket.try_accept():
                self.rate_limited += 1
                return None
        return entry.held if entry is not None and "message" in policy.dedupe else 0

    def _correlate(self, ref: dict[str, str], identity: tuple[str, str], type_: str, reason: str, message: str,
                   now: float, occurrences: int) -> _Send | None:
        """client-go's EventCorrelate: aggregate, then count (a PATCH of an Event seen before), then the spam
        filter. The caller holds the lock."""
        similar_key = (*identity, type_, reason)
        similar = _lru_get(self._similar, similar_key)
        if similar is None or now - similar.last > AGGREGATE_INTERVAL:
            similar = _Similar(set(), now)
        similar.messages.add(message)
        similar.last = now
        _lru_put(self._similar, similar_key, similar)
        key: tuple[str, ...] = (*similar_key, message)
        if len(similar.messages) >= AGGREGATE_MAX_EVENTS:
            similar.messages.pop()  # the set grows no larger than the maximum
            message, key = AGGREGATE_PREFIX + message, similar_key
            self.aggregated += 1
        entry = _lru_get(self._seen, key)
        if entry is not None:
            entry.count += occurrences
            entry.body = {**entry.body, "count": entry.count, "lastTimestamp": _stamp(now), "message": message}
            send = _Send(False, {"metadata": entry.body["metadata"], "count": entry.count,
                                 "lastTimestamp": _stamp(now), "message": message}, entry.body)
        else:
            namespace = ref.get("namespace") or "default"
            name = f"{ref.get('name', 'object')[:200]}.{uuid.uuid4().hex[:16]}"
            body = {
                "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": namespace},
                "involvedObject": ref, "type": type_, "reason": reason, "message": message,
                "source": {"component": self.component}, "reportingComponent": self.component,
                "reportingInstance": self.instance, "firstTimestamp": _stamp(now), "lastTimestamp": _stamp(now),
                "count": occurrences}
            entry = _Entry(body, occurrences)
            send = _Send(True, body, body)
        _lru_put(self._seen, key, entry)
        spam = _lru_get(self._spam, identity)
        if spam is None:
            spam = TokenBucket(SPAM_QPS, SPAM_BURST, clock=self._clock)
        _lru_put(self._spam, identity, spam)
        if not spam.try_accept():
            self.spam_filtered += 1
            return None
        return send

    # -- sending -----------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._abandon.clear()
            self._thread = threading.Thread(target=self._run, name="events", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued for up to ``timeout`` seconds, then give up on the rest (counted as dropped): the
        writer must not outlive the controller, writing after it stopped (or to an API server gone since)."""
        if self._thread is None:
            self.drain()
            return
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:  # the API server is not taking Events: nothing more is sent
            pass
        else:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._abandon.set()  # the request in flight ends on its own timeout; nothing is sent after it
        self._thread = None

    def drain(self) -> None:
        """Send everything queued, in this thread (tests, and shutdown without a writer thread)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._send(item)
            self._queue.task_done()
            if self._abandon.is_set():
                self._give_up()
                return

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the writer thread has sent everything queued so far; True if it did in time."""
        if self._thread is None:
            self.drain()
            return True
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._queue.unfinished_tasks

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    self.drain()
                    return
                self._send(item)
            finally:
                self._queue.task_done()
            if self._abandon.is_set():
                self._give_up()
                return

    def _give_up(self) -> None:
        """Drop what is still queued (``stop``'s timeout has passed)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self.dropped += 1
            self._queue.task_done()

    def _send(self, item: _Send) -> None:
        if self._core is None:
            return
        meta = item.body["metadata"]
        try:
            if item.create:
                self._core.create_namespaced_event(meta["namespace"], cast(Any, item.body), _request_timeout=10)
            else:
                self._core.patch_namespaced_event(meta["name"], meta["namespace"],
                                                  {k: v for k, v in item.body.items() if k != "metadata"},
                                                  _request_timeout=10)
            self.sent += 1
        except client.ApiException as err:
            if err.status == 409 and item.create:
                return  # a retried create that already went through
            if err.status == 404 and not item.create:  # expired (the API server keeps Events ~1 h): write it anew
                self._send(_Send(True, item.full, item.full))
                return
            self.failed += 1
            log.warning("could not write Event %s/%s: HTTP %s %s", meta["namespace"], meta["name"], err.status,
                        err.reason)
        except Exception as err:  # best-effort: an unreachable API server must not kill the writer
            self.failed += 1
            log.warning("could not write Event %s/%s: %s", meta["namespace"], meta["name"], err)
