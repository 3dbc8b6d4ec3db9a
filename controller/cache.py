"""A list+watch cache of the objects the controller reads (Karpenter's cluster state, informer-style).

One ``Informer`` thread per resource: list in pages (``limit`` + ``continue``, 500 objects a page as client-go's
pager), remembering ``resourceVersion``, then watch from there with bookmarks; a ``410 Gone`` (expired
resourceVersion, or a continue token expired mid-list) lists again from the start; ``429 Too Many Requests``
(API Priority and Fairness) waits as long as its ``Retry-After`` says and repeats the same request, counted in
``on_throttled``; any other error backs off exponentially (0.2 s doubling to 10 s) and resumes, so a restarted
API server is survived without a restart of ours.

Objects are decoded slim (``controller.decode``: Pods and Nodes keep only the fields something reads, no kind
keeps managedFields) and kept as the dicts ``model.snapshot.parse_objects`` reads, in a ``Store`` by namespace and
name; after a list the freed pages go back to the system (``release_freed_memory``). Each object's model is parsed
once per version (``ClusterCache.parsed``, kept until the watch replaces the object): a batch's ``snapshot``
parses only what changed since the last one. A reader that keeps state per object takes the slots changed since
its last look from a ``ChangeLog`` instead of comparing every object.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client

from controller.decode import Decoder, NodeParser, PodParser, Shared
from controller.kinds import READ
from controller.podindex import PodIndex
from controller.throttle import caller_retries, retry_after
from model.snapshot import Snapshot, parse_object, parse_objects

log = logging.getLogger(__name__)

Lister = Callable[..., Any]
Object = dict[str, Any]
#: objects per list page (client-go's pager default)
PAGE_SIZE = 500


@dataclass(frozen=True)
class Resource:
    """One watched resource: its kind and the generated client call that lists (and with watch=True, watches)."""

    kind: str
    api_version: str
    lister: Lister


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _slot(obj: Mapping[str, Any]) -> tuple[str, str]:
    """Where ``Store`` keeps ``obj``: its namespace ("" when cluster-scoped) and name, the strings its dict holds."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", str(meta.get("name"))


def _split(key: str) -> tuple[str, str]:
    """An ``object_key`` as (namespace, name): neither can contain a slash."""
    namespace, _, name = key.rpartition("/")
    return namespace, name


#: slots a change log holds before it gives up on them and says "look at everything": past this many a reader's
#: visit of each changed object costs about what one pass over a 50,000-pod store does
CHANGE_LOG_LIMIT = 20_000


class ChangeLog:
    """The slots (namespace, name) of one informer's objects written or removed since its reader last took them,
    so that a reader that keeps state per object (``controller.cluster_metrics``) visits only those instead of
    every object. ``take`` answers None when the reader must look at every object: on its first take, after a
    re-list replaced the store, and when more than ``CHANGE_LOG_LIMIT`` slots piled up (bounded memory for a
    reader that stopped taking)."""

    def __init__(self, informer: Informer) -> None:
        self._informer = informer
        self._slots: set[tuple[str, str]] = set()
        self._everything = True

    def note(self, namespace: str, name: str) -> None:
        """Called by the store, under its owner's lock."""
        if self._everything:
            return
        self._slots.add((namespace, name))
        if len(self._slots) > CHANGE_LOG_LIMIT:
            self.lose()

    def lose(self) -> None:
        """Forget the slots: the next take looks at everything."""
        self._everything = True
        self._slots = set()

    def take(self) -> list[tuple[str, str, Object | None]] | None:
        """Each slot changed since the last take with its object now (None: removed), or None for "everything"."""
        return self._informer.take(self)


class Store:
    """An informer's objects by namespace and name, and the model parsed from each.

    Nested by namespace so that no "namespace/name" string is kept per object (~80 bytes a pod at 50,000 pods);
    read by ``object_key`` as a flat mapping would be. A model belongs to its slot's current object: it is dropped
    whenever that object is replaced or removed, so a model found is always the stored object's own. Every write
    and removal is noted in the change logs attached to the store. The owner holds its lock around every call."""

    def __init__(self, objects: Iterable[Object] = ()) -> None:
        self._objects: dict[str, dict[str, Object]] = {}
        self._models: dict[str, dict[str, Any]] = {}
        self.logs: list[ChangeLog] = []
        #: kept as objects are written and removed (the Pod store's, ``controller.podindex``)
        self.index: PodIndex | None = None
        for obj in objects:
            self.put(obj)

    def slot(self, namespace: str, name: str) -> Object | None:
        return self._objects.get(namespace, {}).get(name)

    def get(self, key: str) -> Object | None:
        namespace, name = _split(key)
        return self._objects.get(namespace, {}).get(name)

    def __setitem__(self, key: str, obj: Object) -> None:
        self._set(*_split(key), obj)

    def put(self, obj: Object) -> Object | None:
        """Store ``obj`` in its slot; the object it replaces, if any."""
        namespace, name = _slot(obj)
        return self._set(namespace, name, obj)

    def _set(self, namespace: str, name: str, obj: Object) -> Object | None:
        objects = self._objects.setdefault(namespace, {})
        old = objects.get(name)
        objects[name] = obj
        self._models.get(namespace, {}).pop(name, None)
        if self.index is not None:
            self.index.replace(old, obj)
        for log in self.logs:
            log.note(namespace, name)
        return old

    def pop(self, key: str, default: Object | None = None) -> Object | None:
        namespace, name = _split(key)
        self._models.get(namespace, {}).pop(name, None)
        objects = self._objects.get(namespace)
        if objects is None or name not in objects:
            return default
        obj = objects.pop(name)
        if self.index is not None:
            self.index.replace(obj, None)
        if not objects:
            del self._objects[namespace]
            self._models.pop(namespace, None)
        for log in self.logs:
            log.note(namespace, name)
        return obj

    def clear(self) -> None:
        self._objects.clear()
        self._models.clear()
        if self.index is not None:
            self.index.reset(())
        for log in self.logs:
            log.lose()

    def values(self) -> list[Object]:
        return [obj for objects in self._objects.values() for obj in objects.values()]

    def __len__(self) -> int:
        return sum(len(objects) for objects in self._objects.values())

    def holds(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` itself (not an equal copy) is the stored object of its slot."""
        namespace, name = _slot(obj)
        return self._objects.get(namespace, {}).get(name) is obj

    def model(self, obj: Mapping[str, Any]) -> Any:
        """The model kept for ``obj`` if it is the stored object and one was kept, else None."""
        namespace, name = _slot(obj)
        if self._objects.get(namespace, {}).get(name) is not obj:
            return None
        return self._models.get(namespace, {}).get(name)

    def keep(self, obj: Mapping[str, Any], model: Any) -> None:
        """Keep ``model`` as ``obj``'s while ``obj`` is the stored object (nothing when it no longer is)."""
        namespace, name = _slot(obj)
        if self._objects.get(namespace, {}).get(name) is obj:
            self._models.setdefault(namespace, {})[name] = model

    def carry_models(self, old: Store) -> None:
        """Models of ``old`` whose object has the same version here (uid and resourceVersion) carry over."""
        for namespace, models in old._models.items():
            objects = self._objects.get(namespace, {})
            previous = old._objects.get(namespace, {})
            for name, model in models.items():
                new = objects.get(name)
                if new is not None and _version(new) == _version(previous[name]):
                    self._models.setdefault(namespace, {})[name] = model


def _version(obj: Mapping[str, Any]) -> tuple[Any, Any]:
    meta = obj.get("metadata") or {}
    return meta.get("uid"), meta.get("resourceVersion")


class WatchExpired(Exception):
    """The API server answered 410 Gone: the resourceVersion is too old; list again."""


class Informer:
    def __init__(self, resource: Resource, on_change: Callable[[str], None], *, watch_timeout: int = 240,
                 max_backoff: float = 10.0, page_size: int = PAGE_SIZE,
                 on_throttled: Callable[[str], None] | None = None, shared: Shared | None = None) -> None:
        self.resource = resource
        self._on_change = on_change
        self._on_throttled = on_throttled
        self._watch_timeout = watch_timeout
        self._max_backoff = max_backoff
        self._page_size = page_size
        self._decoder = Decoder(resource.kind, resource.api_version, shared)
        parsers: dict[str, Callable[[Mapping[str, Any]], Any]] = {"Pod": PodParser(), "Node": NodeParser()}
        self._parse = parsers.get(resource.kind, parse_object)
        self._lock = threading.Lock()
        self._store = Store()
        if resource.kind == "Pod":
            self._store.index = PodIndex()
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource.kind}", daemon=True)
        self.synced = threading.Event()
        self.resource_version = ""
        self.relists = 0
        self.errors = 0
        #: requests answered 429 (each waited for its Retry-After and was repeated)
        self.throttled = 0
        #: list pages read
        self.pages = 0

    # -- reading --------------------------------------------------------------------------------------
    def items(self) -> list[Object]:
        with self._lock:
            return list(self._store.values())

    def get(self, key: str) -> Object | None:
        with self._lock:
            return self._store.get(key)

    def parsed(self, obj: Mapping[str, Any]) -> Any:
        """The model of ``obj``: parsed once while ``obj`` is the stored version of its object; any other dict
        (a copy a reader changed, an object of another source) is parsed afresh and not kept."""
        with self._lock:
            model = self._store.model(obj)
        if model is not None:
            return model
        model = self._parse(obj)
        with self._lock:
            self._store.keep(obj, model)
        return model

    @property
    def index(self) -> PodIndex | None:
        """The store's index (Pods only), kept across re-lists."""
        return self._store.index

    def changes(self) -> ChangeLog:
        """A change log of this informer's objects for one reader (``ChangeLog``)."""
        log = ChangeLog(self)
        with self._lock:
            self._store.logs.append(log)
        return log

    def take(self, log: ChangeLog) -> list[tuple[str, str, Object | None]] | None:
        with self._lock:
            if log._everything:
                log._everything = False
                return None
            slots, log._slots = log._slots, set()
            return [(namespace, name, self._store.slot(namespace, name)) for namespace, name in slots]

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Write-through after our own create/update, so the next decision sees it before the watch does."""
        slim = self._decoder.slim(obj)
        with self._lock:
            current = self._store.get(object_key(slim))
            if current is None or _rv(slim) >= _rv(current):
                self._store.put(slim)

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

    def _call(self, **kwargs: Any) -> Any:
        """One list or watch request; a 429 waits its Retry-After (else the back-off) and repeats it (here only:
        the API client's own 429 retries stand aside, ``controller.throttle``)."""
        backoff = 0.2
        while True:
            try:
                with caller_retries():
                    return self.resource.lister(**kwargs)
            except client.ApiException as err:
                if err.status != 429 or self._stop.is_set():
                    raise
                self.throttled += 1
                if self._on_throttled is not None:
                    self._on_throttled(self.resource.kind)
                wait = retry_after(err, backoff)
                log.info("%s request throttled (429); retrying in %.1fs", self.resource.kind, wait)
                if self._stop.wait(wait):
                    raise
                backoff = min(backoff * 2, self._max_backoff)

    def _list(self) -> None:
        """Every object, in pages; a continue token that expired (410) restarts the list for a consistent one."""
        items = Store()
        token = ""
        resource_version = ""
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size, "_preload_content": False, "_request_timeout": 60}
            if token:
                kwargs["_continue"] = token
            try:
                response = self._call(**kwargs)
            except client.ApiException as err:
                if err.status == 410 and token:
                    log.info("%s list's continue token expired (410 Gone); listing again", self.resource.kind)
                    self.relists += 1
                    items, token = Store(), ""
                    continue
                raise
            page, resource_version, token = self._decoder.decode_list(response.data)
            del response  # the page's body (megabytes) goes before the next one is read
            self.pages += 1
            for item in page:
                items.put(item)
            if not token:
                break
        self._replace(items)
        release_freed_memory()
        self.resource_version = resource_version
        self.synced.set()
        self._on_change(self.resource.kind)

    def _replace(self, items: Store | Mapping[str, Object]) -> None:
        """The store becomes ``items``; models parsed from an unchanged version (same uid and resourceVersion)
        carry over to the new copy, so a re-list parses only what changed."""
        store = items if isinstance(items, Store) else Store(items.values())
        with self._lock:
            store.carry_models(self._store)
            store.logs = self._store.logs
            store.index = self._store.index
            if store.index is not None:
                store.index.reset(store.values())
            for log in store.logs:
                log.lose()  # what the new list holds is compared with what each reader kept
            self._store = store

    def _watch(self) -> None:
        response = self._call(
            watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout, _preload_content=False,
            _request_timeout=(10, self._watch_timeout + 30))
        self._response = response
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    return
                self._apply(*self._decoder.decode_event(line))
        finally:
            self._response = None
            response.release_conn()

    def _apply(self, kind: str, obj: Object) -> None:
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired()
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = str(rv)
            return
        with self._lock:
            if kind == "DELETED":
                self._store.pop(object_key(obj))
            else:
                self._store.put(obj)
        if rv:
            self.resource_version = str(rv)
        self._on_change(self.resource.kind)


def release_freed_memory() -> None:
    """Give the memory a list freed back to the system (glibc's ``malloc_trim(0)``; nothing elsewhere).

    A list reads megabytes of JSON pages and decodes them on the informer's thread. glibc serves those buffers
    from the thread's heap once its dynamic mmap threshold has risen past a page's size, and keeps the freed
    pages there: at 50,000 pods ~5 MB (~100 bytes a pod) stayed resident after the list until trimmed
    (``bench.controller_scale --offline``'s resident figures). A list happens at start and on a re-list, so the
    trim (milliseconds) is rare."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return cast(Callable[[int], int], ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None


def _lines(response: Any) -> Iterator[bytes]:
    """Watch event lines (one JSON object each) from a streaming urllib3 response."""
    buffer = b""
    for chunk in response.stream(amt=65536, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _describe(err: Exception) -> str:
    if isinstance(err, client.ApiException):
        return f"HTTP {err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"


def resources(api: client.ApiClient, dra: bool = True) -> dict[str, Resource]:
    """The resources the controller reads, keyed by kind: every row of ``controller.kinds.READ`` (without the
    DRA kinds when DRA is disabled: their reads are not granted then, and nothing would use them)."""
    return {k.kind: Resource(k.kind, k.api_version, k.lister(api)) for k in READ
            if dra or k.group != "resource.k8s.io"}


#: the DRA kinds the cache watches, in the table's order
DRA_KINDS = tuple(k.kind for k in READ if k.group == "resource.k8s.io")


class ClusterCache:
    """Informers for every kind the controller reads, plus a condition that wakes waiters on any change."""

    def __init__(self, watched: dict[str, Resource], **informer_options: Any) -> None:
        self._changed = threading.Condition()
        self._generation = 0
        #: called with the kind on every throttled (429) list or watch request (a metric counts them)
        self.on_throttled: Callable[[str], None] | None = None
        shared = Shared()
        self.informers = {kind: Informer(res, self._notify, on_throttled=self._throttled, shared=shared,
                                         **informer_options) for kind, res in watched.items()}

    def _throttled(self, kind: str) -> None:
        if self.on_throttled is not None:
            self.on_throttled(kind)

    def _notify(self, kind: str) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    @property
    def generation(self) -> int:
        return self._generation

    def wake(self) -> None:
        """Wake every waiter as a change would: a state they wait on changed outside the cache (a decision
        the NodeClaim registration waits for ended)."""
        self._notify("")

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
        """The cached objects of ``kind``: slim, shared and read-only (copy one before changing it)."""
        return self.informers[kind].items()

    def upsert(self, kind: str, obj: Object) -> None:
        self.informers[kind].upsert(obj)
        self._notify(kind)

    def changes(self, kind: str) -> ChangeLog:
        """A change log of the objects of ``kind`` for one reader."""
        return self.informers[kind].changes()

    @property
    def pods(self) -> PodIndex:
        """The cached pods by what the controller's loops ask of them on every pass (``controller.podindex``)."""
        index = self.informers["Pod"].index
        assert index is not None
        return index

    def parsed(self, obj: Mapping[str, Any]) -> Any:
        """The model of one object (``model.snapshot.parse_object``), parsed once per cached version."""
        informer = self.informers.get(str(obj.get("kind")))
        return parse_object(obj) if informer is None else informer.parsed(obj)

    def snapshot(self, objects: Iterable[Mapping[str, Any]], source: str = "cluster") -> Snapshot:
        """``parse_objects(objects)`` with each cached object's model reused: the objects of a batch that did not
        change since the last one are not parsed again."""
        return parse_objects(objects, source=source, parse=self.parsed)


class FilteredCache(ClusterCache):
    """A view of ``cache`` without the objects ``keep(kind, obj)`` rejects: the parts of the controller that
    write (lifecycle, termination, garbage collection, consolidation) see only the NodeClaims of the NodePools
    they own (``--nodepool-selector``), so another provisioner's claims are never launched, drained or deleted.
    ``pods`` indexes every cached pod: ``keep`` filters NodeClaims, never Pods."""

    def __init__(self, cache: ClusterCache, keep: Callable[[str, Object], bool]) -> None:  # the inner cache informs
        self._inner = cache
        self._keep = keep
        self.informers = cache.informers

    @property
    def generation(self) -> int:
        return self._inner.generation

    def wait_for_change(self, generation: int, timeout: float) -> int:
        return self._inner.wait_for_change(generation, timeout)

    def wake(self) -> None:
        self._inner.wake()

    def start(self) -> None:
        self._inner.start()

    def wait_synced(self, timeout: float) -> bool:
        return self._inner.wait_synced(timeout)

    def stop(self) -> None:
        self._inner.stop()

    def items(self, kind: str) -> list[Object]:
        return [obj for obj in self._inner.items(kind) if self._keep(kind, obj)]

    def parsed(self, obj: Mapping[str, Any]) -> Any:
        return self._inner.parsed(obj)

    def snapshot(self, objects: Iterable[Mapping[str, Any]], source: str = "cluster") -> Snapshot:
        return self._inner.snapshot(objects, source)

    def upsert(self, kind: str, obj: Object) -> None:
        self._inner.upsert(kind, obj)

    def changes(self, kind: str) -> ChangeLog:  # of every object: a reader filters what it takes
        return self._inner.changes(kind)
