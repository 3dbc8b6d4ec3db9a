"""A list+watch cache of the objects the controller reads (Karpenter's cluster state, informer-style).

One ``Informer`` thread per resource: list (remembering ``resourceVersion``), then watch from there with
bookmarks; a ``410 Gone`` (expired resourceVersion) re-lists; any other error backs off exponentially
(0.2 s doubling to 10 s) and resumes, so a restarted API server is survived without a restart of ours.
Objects are kept as the raw JSON dicts the API returns, which is what ``model.snapshot.parse_objects`` reads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from controller.kinds import READ

log = logging.getLogger(__name__)

Lister = Callable[..., Any]
Object = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """One watched resource: its kind and the generated client call that lists (and with watch=True, watches)."""

    kind: str
    api_version: str
    lister: Lister


def object_key(obj: Object) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _rv(obj: Object) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class WatchExpired(Exception):
    """The API server answered 410 Gone: the resourceVersion is too old; list again."""


class Informer:
    def __init__(self, resource: Resource, on_change: Callable[[str], None], *, watch_timeout: int = 240,
                 max_backoff: float = 10.0) -> None:
        self.resource = resource
        self._on_change = on_change
        self._watch_timeout = watch_timeout
        self._max_backoff = max_backoff
        self._lock = threading.Lock()
        self._store: dict[str, Object] = {}
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource.kind}", daemon=True)
        self.synced = threading.Event()
        self.resource_version = ""
        self.relists = 0
        self.errors = 0

    # -- reading --------------------------------------------------------------------------------------
    def items(self) -> list[Object]:
        with self._lock:
            return list(self._store.values())

    def get(self, key: str) -> Object | None:
        with self._lock:
            return self._store.get(key)

    def upsert(self, obj: Object) -> None:
        """Write-through after our own create/update, so the next decision sees it before the watch does."""
        obj = {"kind": self.resource.kind, "apiVersion": self.resource.api_version, **obj}
        key = object_key(obj)
        with self._lock:
            current = self._store.get(key)
            if current is None or _rv(obj) >= _rv(current):
                self._store[key] = obj

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # close() would wait for the blocked read; shutting the socket down ends it at once
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.2
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                backoff = 0.2
            except WatchExpired:
                log.info("watch of %s expired (410 Gone); re-listing", self.resource.kind)
                self.relists += 1
                need_list = True
            except Exception as err:
                if self._stop.is_set():
                    break
                self.errors += 1
                if isinstance(err, client.ApiException) and err.status == 410:
                    self.relists += 1
                    need_list = True
                    continue
                log.warning("%s list/watch failed (%s); retrying in %.1fs", self.resource.kind,
                            _describe(err), backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    def _list(self) -> None:
        response = self.resource.lister(_preload_content=False, _request_timeout=60)
        data = json.loads(response.data)
        items = {}
        for item in data.get("items") or []:
            item.setdefault("kind", self.resource.kind)
            item.setdefault("apiVersion", self.resource.api_version)
            items[object_key(item)] = item
        with self._lock:
            self._store = items
        self.resource_version = str((data.get("metadata") or {}).get("resourceVersion") or "")
        self.synced.set()
        self._on_change(self.resource.kind)

    def _watch(self) -> None:
        response = self.resource.lister(
            watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout, _preload_content=False,
            _request_timeout=(10, self._watch_timeout + 30))
        self._response = response
        try:
            for event in _events(response):
                if self._stop.is_set():
                    return
                self._apply(event)
        finally:
            self._response = None
            response.release_conn()

    def _apply(self, event: Object) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired()
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = str(rv)
            return
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        key = object_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._store.pop(key, None)
            else:
                self._store[key] = obj
        if rv:
            self.resource_version = str(rv)
        self._on_change(self.resource.kind)


def _events(response: Any) -> Iterator[Object]:
    """JSON watch events, one per line, from a streaming urllib3 response."""
    buffer = b""
    for chunk in response.stream(amt=65536, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)


def _describe(err: Exception) -> str:
    if isinstance(err, client.ApiException):
        return f"HTTP {err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"


def resources(api: client.ApiClient) -> dict[str, Resource]:
    """The resources the controller reads, keyed by kind: every row of ``controller.kinds.READ``."""
    return {k.kind: Resource(k.kind, k.api_version, k.lister(api)) for k in READ}


#: the DRA kinds the cache watches, in the table's order
DRA_KINDS = tuple(k.kind for k in READ if k.group == "resource.k8s.io")


class ClusterCache:
    """Informers for every kind the controller reads, plus a condition that wakes waiters on any change."""

    def __init__(self, watched: dict[str, Resource], **informer_options: Any) -> None:
        self._changed = threading.Condition()
        self._generation = 0
        self.informers = {kind: Informer(res, self._notify, **informer_options) for kind, res in watched.items()}

    def _notify(self, kind: str) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    @property
    def generation(self) -> int:
        return self._generation

    def wait_for_change(self, generation: int, timeout: float) -> int:
        """Block until something changed after ``generation`` (or ``timeout``); returns the new generation."""
        with self._changed:
            self._changed.wait_for(lambda: self._generation != generation, timeout)
            return self._generation

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(inf.synced.wait(max(0.0, deadline - time.monotonic())) for inf in self.informers.values())

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()
        for informer in self.informers.values():
            informer.join(2.0)

    def items(self, kind: str) -> list[Object]:
        return self.informers[kind].items()

    def upsert(self, kind: str, obj: Object) -> None:
        self.informers[kind].upsert(obj)
        self._notify(kind)


class FilteredCache(ClusterCache):
    """A view of ``cache`` without the objects ``keep(kind, obj)`` rejects: the parts of the controller that
    write (lifecycle, termination, garbage collection, consolidation) see only the NodeClaims of the NodePools
    they own (``--nodepool-selector``), so another provisioner's claims are never launched, drained or deleted."""

    def __init__(self, cache: ClusterCache, keep: Callable[[str, Object], bool]) -> None:  # the inner cache informs
        self._inner = cache
        self._keep = keep
        self.informers = cache.informers

    @property
    def generation(self) -> int:
        return self._inner.generation

    def wait_for_change(self, generation: int, timeout: float) -> int:
        return self._inner.wait_for_change(generation, timeout)

    def start(self) -> None:
        self._inner.start()

    def wait_synced(self, timeout: float) -> bool:
        return self._inner.wait_synced(timeout)

    def stop(self) -> None:
        self._inner.stop()

    def items(self, kind: str) -> list[Object]:
        return [obj for obj in self._inner.items(kind) if self._keep(kind, obj)]

    def upsert(self, kind: str, obj: Object) -> None:
        self._inner.upsert(kind, obj)
