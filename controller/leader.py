"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection package does it.

Only the holder of the Lease provisions, so two replicas never plan the same pods twice. Timings are
client-go's (and Karpenter's) defaults: a Lease is good for 15 s (``lease_duration``), the leader renews it
every 2 s (``retry_period``) and steps down when it could not renew for 10 s (``renew_deadline``) or sees
someone else holding it; a candidate retries every 2 s. Expiry is judged by *our* clock from when we last saw
the record change (client-go's ``observedTime``), never by comparing the holder's timestamps with ours, so
clock skew between replicas does not matter. On a clean shutdown the leader releases the Lease (empty
holder), so a successor takes over at once instead of waiting out the 15 s.

The state machine (``tick``) is separate from the loop (``run``) and takes its clock and store as arguments,
so tests drive it step by step with a fake clock and an in-memory store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from kubernetes import client

log = logging.getLogger(__name__)

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 15.0, 10.0, 2.0
DEFAULT_LEASE_NAME = "nodeplan-leader-election"


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    lease_duration: int
    acquire_time: float | None = None
    renew_time: float | None = None
    transitions: int = 0
    resource_version: str = ""


class Conflict(Exception):
    """The Lease changed (or appeared) since it was read: someone else wrote first."""


class LeaseStore(Protocol):
    def get(self) -> LeaseRecord | None: ...

    def create(self, record: LeaseRecord) -> LeaseRecord: ...

    def update(self, record: LeaseRecord) -> LeaseRecord:
        """Write ``record`` if the stored one still has ``record.resource_version``; else raise Conflict."""
        ...


def _time(stamp: datetime | None) -> float | None:
    return stamp.timestamp() if stamp is not None else None


def _stamp(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds is not None else None


class KubeLeaseStore:
    """The Lease ``namespace/name`` in the API server (get, create, update with optimistic concurrency)."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str = DEFAULT_LEASE_NAME) -> None:
        self._api = client.CoordinationV1Api(api)
        self.namespace, self.name = namespace, name

    def _record(self, lease: client.V1Lease) -> LeaseRecord:
        spec = lease.spec or client.V1LeaseSpec()
        return LeaseRecord(holder=spec.holder_identity or "", lease_duration=spec.lease_duration_seconds or 0,
                           acquire_time=_time(spec.acquire_time), renew_time=_time(spec.renew_time),
                           transitions=spec.lease_transitions or 0,
                           resource_version=str(lease.metadata.resource_version if lease.metadata else ""))

    def _body(self, record: LeaseRecord) -> client.V1Lease:
        return client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace,
                                         resource_version=record.resource_version or None),
            spec=client.V1LeaseSpec(holder_identity=record.holder, lease_duration_seconds=record.lease_duration,
                                    acquire_time=_stamp(record.acquire_time), renew_time=_stamp(record.renew_time),
                                    lease_transitions=record.transitions))

    def get(self) -> LeaseRecord | None:
        try:
            return self._record(self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5))
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def create(self, record: LeaseRecord) -> LeaseRecord:
        try:
            body = self._body(replace(record, resource_version=""))
            created = self._api.create_namespaced_lease(self.namespace, body, _request_timeout=5)
        except client.ApiException as err:
            if err.status == 409:
                raise Conflict() from err
            raise
        return self._record(created)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        try:
            updated = self._api.replace_namespaced_lease(self.name, self.namespace, self._body(record),
                                                         _request_timeout=5)
        except client.ApiException as err:
            if err.status == 409:
                raise Conflict() from err
            raise
        return self._record(updated)


class LeaderElector:
    def __init__(self, store: LeaseStore, identity: str, *, lease_duration: float = LEASE_DURATION,
                 renew_deadline: float = RENEW_DEADLINE, retry_period: float = RETRY_PERIOD,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 on_started: Callable[[], None] | None = None, on_stopped: Callable[[], None] | None = None) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.store = store
        self.identity = identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self._clock, self._wall = clock, wall
        self.on_started, self.on_stopped = on_started, on_stopped
        self.observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.leading = False
        #: set when leadership was held and then lost (not on a clean release)
        self.lost = threading.Event()

    # -- one attempt ------------------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """Take the Lease if free or expired, renew it if ours; True if we hold it afterwards."""
        now, wall = self._clock(), self._wall()
        try:
            old = self.store.get()
        except Exception as err:
            log.warning("leader election: could not read the Lease: %s", _describe(err))
            return False
        mine = LeaseRecord(self.identity, int(self.lease_duration), acquire_time=wall, renew_time=wall)
        if old is None:
            return self._write(self.store.create, mine, now)
        if self.observed is None or (old.holder, old.renew_time, old.resource_version) != (
                self.observed.holder, self.observed.renew_time, self.observed.resource_version):
            self.observed, self._observed_at = old, now
        if old.holder and old.holder != self.identity and now < self._observed_at + old.lease_duration:
            return False  # someone else's, and not expired by our clock
        if old.holder == self.identity:
            mine = replace(mine, acquire_time=old.acquire_time, transitions=old.transitions)
        else:
            mine = replace(mine, transitions=old.transitions + 1)
        return self._write(self.store.update, replace(mine, resource_version=old.resource_version), now)

    def _write(self, write: Callable[[LeaseRecord], LeaseRecord], record: LeaseRecord, now: float) -> bool:
        try:
            self.observed = write(record)
        except Conflict:
            return False
        except Exception as err:
            log.warning("leader election: could not write the Lease: %s", _describe(err))
            return False
        self._observed_at = now
        return True

    # -- the state machine ------------------------------------------------------------------------------
    def tick(self) -> float:
        """One step: try to acquire or renew, start or stop leading; returns seconds until the next step."""
        now = self._clock()
        if self.try_acquire_or_renew():
            self._last_renew = now
            if not self.leading:
                self.leading = True
                log.info("leader election: %s acquired the Lease", self.identity)
                if self.on_started is not None:
                    self.on_started()
        elif self.leading:
            taken = self.observed is not None and self.observed.holder not in ("", self.identity)
            if taken or now - self._last_renew >= self.renew_deadline:
                self.leading = False
                self.lost.set()
                log.error("leader election: lost the Lease (%s)", f"now held by {self.observed.holder}"
                          if taken and self.observed else f"not renewed for {self.renew_deadline:.0f}s")
                if self.on_stopped is not None:
                    self.on_stopped()
        return self.retry_period

    def run(self, stop: threading.Event) -> None:
        """Campaign and renew until ``stop`` is set or leadership is lost. It does not release the Lease: the
        owner calls ``release`` once its own work has stopped, so no successor starts while it still writes."""
        while not stop.is_set() and not self.lost.is_set():
            stop.wait(self.tick())

    def release(self) -> bool:
        """Give the Lease up (empty holder, 1 s duration) so a successor need not wait for it to expire."""
        if not self.leading or self.observed is None:
            return False
        self.leading = False
        wall = self._wall()
        record = LeaseRecord("", 1, acquire_time=wall, renew_time=wall, transitions=self.observed.transitions,
                             resource_version=self.observed.resource_version)
        ok = self._write(self.store.update, record, self._clock())
        log.info("leader election: %s the Lease", "released" if ok else "could not release")
        return ok


def _describe(err: Exception) -> str:
    if isinstance(err, client.ApiException):
        return f"HTTP {err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"
