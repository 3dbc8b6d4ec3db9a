"""Kubernetes Events (core/v1) for what the controller decides, so ``kubectl describe pod`` shows it.

Deduplicated the way client-go's correlator does it, in spirit: one Event per (object, type, reason, message);
the same one again within ``dedup_window`` seconds only counts, after that it bumps the stored Event's
``count`` and ``lastTimestamp`` with one PATCH. Events are best-effort: a writer thread sends them from a
bounded queue (full → dropped and counted), so a slow API server never stalls a batch; failures are logged.
Cluster-scoped objects (NodeClaims, NodePools) get their Events in namespace ``default``, as kubectl expects.
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

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"
MAX_MESSAGE = 1024


@dataclass
class _Entry:
    body: dict[str, Any]
    count: int
    last_sent: float


@dataclass(frozen=True)
class _Send:
    create: bool
    body: dict[str, Any]
    #: the whole Event as it should now read: re-created from this when a PATCH finds it expired
    full: dict[str, Any]


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        self._core = client.CoreV1Api(api) if api is not None else None
        self.component = component
        self.instance = instance or component
        self._clock = clock
        self.dedup_window = dedup_window
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, ...], _Entry] = OrderedDict()
        self._queue: queue.Queue[_Send | None] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        #: set by ``stop`` once its timeout has passed: the writer sends nothing more (the rest is dropped)
        self._abandon = threading.Event()
        self.sent = 0
        self.suppressed = 0
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
        """Queue an Event about ``obj`` unless the same one was sent less than ``dedup_window`` ago."""
        ref = reference(obj)
        message = message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."
        key = (ref.get("uid") or f"{ref.get('namespace', '')}/{ref.get('name', '')}", ref.get("kind", ""), type_,
               reason, message)
        now = self._clock()
        if self.on_record is not None:
            self.on_record(type_, reason)
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None:
                self._seen.move_to_end(key)
                entry.count += 1
                if now - entry.last_sent < self.dedup_window:
                    self.suppressed += 1
                    return
                entry.last_sent = now
                entry.body = {**entry.body, "count": entry.count, "lastTimestamp": _stamp(now)}
                send = _Send(False, {"metadata": entry.body["metadata"], "count": entry.count,
                                     "lastTimestamp": _stamp(now)}, entry.body)
            else:
                namespace = ref.get("namespace") or "default"
                name = f"{ref.get('name', 'object')[:200]}.{uuid.uuid4().hex[:16]}"
                body = {
                    "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": namespace},
                    "involvedObject": ref, "type": type_, "reason": reason, "message": message,
                    "source": {"component": self.component}, "reportingComponent": self.component,
                    "reportingInstance": self.instance, "firstTimestamp": _stamp(now), "lastTimestamp": _stamp(now),
                    "count": 1}
                self._seen[key] = _Entry(body, 1, now)
                while len(self._seen) > self._max_keys:
                    self._seen.popitem(last=False)
                send = _Send(True, body, body)
        try:
            self._queue.put_nowait(send)
        except queue.Full:
            self.dropped += 1

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
