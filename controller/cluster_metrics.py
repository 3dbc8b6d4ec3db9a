"""Karpenter's cluster-state metrics (``karpenter_nodes_*``, ``karpenter_pods_*``, ``karpenter_nodepools_*``,
``karpenter_cluster_*``), read from the watch cache, with Karpenter's names and label sets.

A cluster of 50,000 pods is 50,000 ``karpenter_pods_state`` series; prometheus_client formats a 13-label sample
in ~17 µs, so formatting them afresh on each scrape alone takes longer than the scrape budget (0.5 s). Here
everything derived from one object — what a pod requests, where it runs, its rendered series — is computed once
per (uid, resourceVersion) and kept; a refresh only looks at the objects the cache's change logs name (and
works only for those whose resourceVersion moved), and the exposition splices the kept lines. Lines are written
exactly as prometheus_client writes them (labels sorted, values escaped, Go float formatting:
``tests/unit/test_metrics.py`` compares the bytes).

Transitions are observed here too, because this is where a pod's change is noticed: a pod seen Pending that
turns Ready records ``karpenter_pods_startup_duration_seconds`` (Ready's lastTransitionTime minus
creationTimestamp, as Karpenter's pod metrics controller does), one seen unbound that is scheduled records
``karpenter_pods_bound_duration_seconds``. ``refresh`` runs on every scrape and every lifecycle pass, so a
transition is seen even when nobody scrapes.

A scrape is served from a published ``Exposition``: the families as of one refresh, their text compressed once
(``controller.metrics_gzip``). ``exposition`` refreshes and publishes on a thread of its own and waits for it at
most ``wait`` seconds: on a quiet machine every scrape is fresh; on a starved one (another process on every
core, the solve's threads in this one) the scrape is answered with the previous publication, at most one scrape
interval old, and the refresh finishes for the next one — Karpenter's own node metrics are a singleton that
re-sets its gauges every 5 seconds, not at the scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from prometheus_client.utils import floatToGoString

from controller import metrics_gzip
from controller.batch import is_terminal
from controller.cache import ChangeLog, ClusterCache
from model import labels as wk
from model.durations import epoch
from model.errors import InputError
from model.fields import RawObject
from model.pod import effective_requests
from model.resources import Resources

log = logging.getLogger(__name__)

PREFIX = "karpenter_"

#: Karpenter's ``v1.WellKnownLabels`` as metric labels (the key after the slash, snake_case)
WELL_KNOWN = (("nodepool", wk.NODEPOOL), ("zone", wk.ZONE), ("region", wk.REGION),
              ("instance_type", wk.INSTANCE_TYPE), ("arch", wk.ARCH), ("os", wk.OS),
              ("capacity_type", wk.CAPACITY_TYPE), ("windows_build", "node.kubernetes.io/windows-build"))


def resource_label(resource: str) -> str:
    """Karpenter's ``resource_type`` value: lower case, ``-`` as ``_`` (``ephemeral_storage``)."""
    return resource.lower().replace("-", "_")


def metric_value(resource: str, amount: int) -> float:
    """Base units → Karpenter's units: cpu in cores (nodeplan counts millicores), everything else as is."""
    return amount / 1000 if resource == "cpu" else float(amount)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def series(name: str, labels: Mapping[str, str]) -> str:
    """``name{a="x",b="y"}`` as prometheus_client renders it (labels sorted by name)."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items())) + "}"


def line(prefix: str, value: float) -> bytes:
    """One sample line, encoded once: the scrape joins kept bytes."""
    return f"{prefix} {floatToGoString(value)}\n".encode()  # type: ignore[no-untyped-call]



def _resources(raw: Any) -> Resources:
    try:
        return Resources.parse(raw if isinstance(raw, Mapping) else None)
    except InputError:
        return Resources()


def _add(into: dict[str, int], amounts: Iterable[tuple[str, int]], sign: int) -> None:
    """Add (``sign`` 1) or take back (-1) ``amounts`` in ``into``, dropping what comes back to zero."""
    for resource, amount in amounts:
        left = into.get(resource, 0) + sign * amount
        if left:
            into[resource] = left
        else:
            into.pop(resource, None)


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cast(Mapping[str, Any], cond)
    return {}


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the metrics read of one pod at one resourceVersion."""

    version: str
    uid: str
    key: str
    name: str
    namespace: str
    node: str
    #: Karpenter's owner label: the first owner's self link
    owner: str
    phase: str
    ready: bool
    scheduled: bool
    terminal: bool
    daemon: bool
    requests: tuple[tuple[str, int], ...]
    created: float | None
    ready_since: float | None
    scheduled_since: float | None


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    owners = meta.get("ownerReferences") or []
    owner = ""
    if owners:
        first = owners[0]
        owner = (f"/apis/{first.get('apiVersion', '')}/namespaces/{meta.get('namespace', '')}/"
                 f"{str(first.get('kind', '')).lower()}s/{first.get('name', '')}")
    try:
        requests = effective_requests(RawObject(spec, "spec"))
    except InputError:
        requests = Resources()
    ready, scheduled = _condition(pod, "Ready"), _condition(pod, "PodScheduled")
    return PodFacts(
        version=meta.get("resourceVersion") or "", uid=meta.get("uid") or "", key=_pod_key(pod),
        name=str(meta.get("name") or ""), namespace=str(meta.get("namespace") or ""),
        node=str(spec.get("nodeName") or ""), owner=owner, phase=str(status.get("phase") or ""),
        ready=ready.get("status") == "True", scheduled=scheduled.get("status") == "True",
        terminal=is_terminal(pod), daemon=any(o.get("kind") == "DaemonSet" for o in owners),
        requests=tuple((*requests.items(), ("pods", 1))) if "pods" not in requests else tuple(requests.items()),
        created=epoch(meta.get("creationTimestamp")), ready_since=epoch(ready.get("lastTransitionTime")),
        scheduled_since=epoch(scheduled.get("lastTransitionTime")))


@dataclass(frozen=True, slots=True)
class NodeFacts:
    version: str
    name: str
    #: the well-known labels, as (metric label, value)
    labels: tuple[tuple[str, str], ...]
    phase: str
    allocatable: tuple[tuple[str, int], ...]
    overhead: tuple[tuple[str, int], ...]
    created: float | None

    @property
    def where(self) -> dict[str, str]:
        return dict(self.labels)


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = node.get("status") or {}
    allocatable = _resources(status.get("allocatable"))
    capacity = _resources(status.get("capacity"))
    overhead = (capacity - allocatable).clamp_nonnegative() if capacity else Resources()
    return NodeFacts(version=str(meta.get("resourceVersion") or ""), name=str(meta.get("name") or ""),
                     labels=tuple((label, str(labels.get(key, ""))) for label, key in WELL_KNOWN),
                     phase=str(status.get("phase") or ""), allocatable=tuple(allocatable.items()),
                     overhead=tuple(overhead.items()), created=epoch(meta.get("creationTimestamp")))


@dataclass(frozen=True)
class Family:
    name: str
    documentation: str


POD_STATE = Family(f"{PREFIX}pods_state", "Pod state is the current state of pods. This metric can be used several "
                   "ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, "
                   "capacity type, instance type, pod phase, and pod readiness.")
ALLOCATABLE = Family(f"{PREFIX}nodes_allocatable", "Node allocatable are the resources allocatable by nodes.")
POD_REQUESTS = Family(f"{PREFIX}nodes_total_pod_requests", "Node total pod requests are the resources requested by "
                      "pods bound to nodes, including the DaemonSet pods.")
DAEMON_REQUESTS = Family(f"{PREFIX}nodes_total_daemon_requests", "Node total daemon requests are the resource "
                         "requested by DaemonSet pods bound to nodes.")
OVERHEAD = Family(f"{PREFIX}nodes_system_overhead", "Node system daemon overhead are the resources reserved for "
                  "system overhead, the difference between the node's capacity and allocatable values are "
                  "reported by the status.")
LIFETIME = Family(f"{PREFIX}nodes_current_lifetime_seconds", "Node age in seconds")
UTILIZATION = Family(f"{PREFIX}cluster_utilization_percent", "Utilization of allocatable resources by pod requests")
NODE_COUNT = Family(f"{PREFIX}cluster_state_node_count", "Current count of nodes in cluster state")
SYNCED = Family(f"{PREFIX}cluster_state_synced", "Returns 1 if cluster state is synced and 0 otherwise. Synced "
                "checks that nodeclaims and nodes that are stored in the APIServer have the same representation as "
                "Karpenter's cluster state")
POOL_USAGE = Family(f"{PREFIX}nodepools_usage", "The amount of resources that have been provisioned for a nodepool. "
                    "Labeled by nodepool name and resource type.")
POOL_LIMIT = Family(f"{PREFIX}nodepools_limit", "Limits specified on the nodepool that restrict the quantity of "
                    "resources provisioned. Labeled by nodepool name and resource type.")
#: every family this module writes, in exposition order
FAMILIES = (SYNCED, NODE_COUNT, ALLOCATABLE, POD_REQUESTS, DAEMON_REQUESTS, OVERHEAD, LIFETIME, UTILIZATION,
            POOL_USAGE, POOL_LIMIT, POD_STATE)

#: called with (seconds) when a pod seen Pending turns Ready / a pod seen unbound is scheduled
Observer = Callable[[float], None]


def _header(family: Family, openmetrics: bool) -> bytes:
    help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    if openmetrics:
        help_text = help_text.replace('"', r"\"")
    return f"# HELP {family.name} {help_text}\n# TYPE {family.name} gauge\n".encode()


#: each family's HELP and TYPE lines: in the text format, and OpenMetrics'
HEADERS = {openmetrics: {f.name: _header(f, openmetrics) for f in FAMILIES} for openmetrics in (False, True)}
#: ... compressed once
HEADER_PIECES = {openmetrics: {name: metrics_gzip.deflate(text) for name, text in headers.items()}
                 for openmetrics, headers in HEADERS.items()}
#: ``karpenter_pods_state`` is kept and compressed in parts of this many pods (in the order the pods were first
#: seen): a publication compresses again only the parts with a changed pod, not 50,000 lines for one
POD_PART = 1024


@dataclass(frozen=True, slots=True)
class Exposition:
    """The families as one refresh left them (``at``: its ``time.monotonic``), and their text compressed — in
    the text format, and in OpenMetrics' (the two differ only in the HELP lines' quoting)."""

    at: float
    families: Mapping[str, Sequence[bytes]]
    bodies: Mapping[bool, metrics_gzip.Body]

    def text(self, openmetrics: bool = False) -> bytes:
        return self.bodies[openmetrics].text()


@dataclass(eq=False, slots=True)
class _Part:
    """Up to ``POD_PART`` pods' ``karpenter_pods_state`` lines by pod key, in the order the pods joined it. A pod
    keeps its part until it is gone, so a change elsewhere (a pod added, one deleted) moves no other line into
    another part; ``text`` is the lines joined, None once one of them changed."""

    lines: dict[str, bytes]
    text: bytes | None = None


#: the kinds the refresh takes change logs of
WATCHED = ("Node", "Pod", "NodeClaim", "NodePool")
#: node families kept per node: (family, the node's values it shows)
NODE_FAMILIES = (ALLOCATABLE, POD_REQUESTS, DAEMON_REQUESTS, OVERHEAD)


class ClusterStateMetrics:
    """The cluster-state families, kept up to date from the cache by ``refresh`` and written by ``render``.

    A refresh visits only the objects the cache's change logs (``controller.cache.ChangeLog``) name since the
    last one, and the nodes those changes touch (their request totals, their labels in their pods' lines): under
    a scale-out's churn at 50,000 pods it looks at hundreds of objects, not 55,000. When a log cannot say (the
    first refresh, after a re-list, a cache without logs) every object is compared, as before the logs."""

    def __init__(self, cache: ClusterCache, synced: Callable[[], bool], *, on_started: Observer | None = None,
                 on_bound: Observer | None = None, clock: Callable[[], float] = time.time) -> None:
        self._cache = cache
        self._synced = synced
        self._on_started = on_started
        self._on_bound = on_bound
        self._clock = clock
        self._lock = threading.Lock()
        #: kind → its change log (taken at the first synced refresh; empty for a cache that keeps none)
        self._logs: dict[str, ChangeLog] | None = None
        #: pod key ("namespace/name") → facts at the last refresh
        self._pods: dict[str, PodFacts] = {}
        #: pod key → the part holding its line
        self._pod_part: dict[str, _Part] = {}
        #: the pod lines in parts of ``POD_PART`` (a part with no changed pod keeps its text, the same object, so
        #: its compressed piece is kept too)
        self._pod_parts: list[_Part] = []
        #: pods whose line is to be rendered again (changed, or their node's labels did), in the order seen: new
        #: pods join the parts in the cache's order, replicas of one namespace side by side (a third smaller gzip)
        self._render: dict[str, None] = {}
        #: node name → keys of the pods whose ``spec.nodeName`` it is
        self._on_node: dict[str, set[str]] = {}
        self._nodes: dict[str, NodeFacts] = {}
        #: node names sorted (the node families' order); None once a node came or went
        self._node_order: list[str] | None = None
        #: nodes whose lines are to be rendered again (facts, request totals or managed flag moved; or gone)
        self._dirty: set[str] = set()
        #: node name → label prefixes per (family, resource) rendered for its facts and managed flag
        self._node_prefixes: dict[str, tuple[NodeFacts, bool, dict[tuple[str, str], str]]] = {}
        self._pending: set[str] = set()
        self._unbound: set[str] = set()
        #: pods created after this (wall clock, seconds) were seen from their start
        self._since = clock()
        #: node → summed requests of its bound, non-terminal pods (and of its DaemonSet pods), kept as pods change
        self._requested: dict[str, dict[str, int]] = {}
        self._daemon: dict[str, dict[str, int]] = {}
        #: node → (facts, managed, request totals, its rendered allocatable / requests / daemon / overhead lines,
        #: its lifetime series prefix)
        self._node_lines: dict[str, tuple[NodeFacts, bool, tuple[Any, Any], dict[str, bytes], str | None]] = {}
        #: allocatable of every node, and requests of the pods bound to one (the utilization), kept as they move
        self._allocatable: dict[str, int] = {}
        self._used: dict[str, int] = {}
        #: names of the nodes a NodeClaim names
        self._managed: set[str] = set()
        #: NodeClaim name → (resourceVersion, nodepool, capacity)
        self._claims: dict[str, tuple[str, str, Resources]] = {}
        #: the NodePool families' lines (None: to compute again)
        self._pool_lines: dict[str, list[bytes]] | None = None
        self._families: dict[str, list[bytes]] = {f.name: [] for f in FAMILIES}
        self._refreshed = float("-inf")
        #: the cache's generation at the last full refresh (None: none yet), and each node's lifetime series
        #: prefix with its creation time, the one family that moves with the clock alone
        self._generation: int | None = None
        self._lifetimes: list[tuple[str, float]] = []
        #: the last published exposition, and the publication under way (set when it is done)
        self._published: Exposition | None = None
        #: family → its parts' compressed pieces in the last publication
        self._pieces: dict[str, list[metrics_gzip.Piece]] = {}
        self._publishing: threading.Event | None = None
        self._publish_lock = threading.Lock()

    # -- keeping up ---------------------------------------------------------------------------------------
    def refresh(self, *, at_most_every: float = 0.0) -> None:
        """Bring every family up to date with the cache (only changed objects are looked at again); skipped when
        the last refresh is less than ``at_most_every`` seconds old (the lifecycle loop's call, which may come
        many times a second while the cluster changes)."""
        with self._lock:
            if at_most_every and time.monotonic() - self._refreshed < at_most_every:
                return
            self._refresh()

    def _refresh(self) -> None:
        self._refreshed = time.monotonic()
        generation = getattr(self._cache, "generation", None)  # read before the cache: a change meanwhile counts
        if generation is not None and generation == self._generation:
            # nothing in the cache changed: only the node lifetimes moved
            self._families = {**self._families, LIFETIME.name: self._lifetime_lines()}
            return
        synced = self._synced()
        if not synced:
            families: dict[str, list[bytes]] = {f.name: [] for f in FAMILIES}
            families[SYNCED.name].append(line(SYNCED.name, 0.0))
            self._families = families
            return
        self._generation = generation
        if self._logs is None:
            changes = getattr(self._cache, "changes", None)
            self._logs = {kind: changes(kind) for kind in WATCHED} if changes is not None else {}
        self._refresh_nodes()
        self._refresh_pods()
        self._refresh_claims()
        self._render_pods()
        self._render_nodes()
        families = {f.name: [] for f in FAMILIES}
        families[SYNCED.name].append(line(SYNCED.name, 1.0))
        families[NODE_COUNT.name].append(line(NODE_COUNT.name, float(len(self._nodes))))
        order = self._node_order or []
        for family in NODE_FAMILIES:
            families[family.name] = [self._node_lines[name][3][family.name] for name in order]
        families[LIFETIME.name] = self._lifetime_lines()
        for resource, amount in sorted(self._allocatable.items()):
            if amount:
                families[UTILIZATION.name].append(line(series(UTILIZATION.name, {
                    "resource_type": resource_label(resource)}), 100 * self._used.get(resource, 0) / amount))
        assert self._pool_lines is not None
        families.update(self._pool_lines)
        for part in self._pod_parts:
            if part.text is None:
                part.text = b"".join(part.lines.values())
        families[POD_STATE.name] = [cast(bytes, part.text) for part in self._pod_parts]
        self._families = families

    def _take(self, kind: str) -> list[tuple[str, str, dict[str, Any] | None]] | None:
        """The objects of ``kind`` changed since the last refresh (None: look at every one)."""
        log = (self._logs or {}).get(kind)
        return None if log is None else log.take()

    def _everything(self, kind: str, key: Callable[[Mapping[str, Any]], str],
                    kept: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any] | None]]:
        """Every object of ``kind`` by ``key``, and None for each key ``kept`` holds that is no longer there."""
        present = {key(obj): obj for obj in self._cache.items(kind)}
        return [*present.items(), *((gone, None) for gone in kept.keys() - present.keys())]

    def _refresh_nodes(self) -> None:
        taken = self._take("Node")
        changed = (self._everything("Node", lambda n: str((n.get("metadata") or {}).get("name") or ""), self._nodes)
                   if taken is None else [(name, obj) for _, name, obj in taken])
        for name, obj in changed:
            known = self._nodes.get(name)
            if obj is None:
                if known is not None:
                    del self._nodes[name]
                    self._node_prefixes.pop(name, None)
                    self._node_order = None
                    self._dirty.add(name)
                    self._render.update(dict.fromkeys(self._on_node.get(name, ())))
                continue
            if known is not None and known.version == str((obj.get("metadata") or {}).get("resourceVersion") or ""):
                continue
            fresh = node_facts(obj)
            if known is None:
                self._node_order = None
            if known is None or known.labels != fresh.labels:
                # a pod's line shows its node's well-known labels: only a relabelled (or new) node's pods change
                self._render.update(dict.fromkeys(self._on_node.get(name, ())))
            self._nodes[name] = fresh
            self._dirty.add(name)

    def _refresh_pods(self) -> None:
        taken = self._take("Pod")
        changed = (self._everything("Pod", _pod_key, self._pods) if taken is None
                   else [(f"{namespace}/{name}", obj) for namespace, name, obj in taken])
        now = self._clock()
        for key, pod in changed:
            if pod is None:
                self._drop_pod(key)
                continue
            meta = pod.get("metadata") or {}
            known = self._pods.get(key)
            if known is not None and known.uid != (meta.get("uid") or ""):
                self._drop_pod(key)  # another pod of the same name: the one kept is gone
                known = None
            if known is not None and known.version == (meta.get("resourceVersion") or ""):
                continue
            facts = pod_facts(pod)
            if known is not None:
                self._count(known, -1)
                if known.node != facts.node:
                    self._unplace(key, known.node)
            elif facts.created is not None and facts.created >= self._since:
                # created while this controller watched: it was Pending and unbound at first, even if a
                # refresh only sees it now (Karpenter sees every event; refreshes come every few seconds)
                self._pending.add(key)
                self._unbound.add(key)
            if facts.node:
                self._on_node.setdefault(facts.node, set()).add(key)
            self._count(facts, 1)
            self._transitions(key, facts, now)
            self._pods[key] = facts
            self._render[key] = None

    def _drop_pod(self, key: str) -> None:
        facts = self._pods.pop(key, None)
        if facts is None:
            return
        self._count(facts, -1)
        self._unplace(key, facts.node)
        self._pending.discard(key)
        self._unbound.discard(key)
        self._render.pop(key, None)
        part = self._pod_part.pop(key, None)
        if part is not None:
            del part.lines[key]
            part.text = None
            if not part.lines:
                self._pod_parts.remove(part)

    def _unplace(self, key: str, node: str) -> None:
        on = self._on_node.get(node)
        if on is not None:
            on.discard(key)
            if not on:
                del self._on_node[node]

    def _refresh_claims(self) -> None:
        """The managed flag of each node (a NodeClaim names it) and the NodePool families, again only when a
        NodeClaim or a NodePool changed."""
        claims_changed, pools_changed = self._take("NodeClaim"), self._take("NodePool")
        if self._pool_lines is not None and claims_changed == [] and pools_changed == []:
            return
        claims = self._cache.items("NodeClaim")
        managed = {str((c.get("status") or {}).get("nodeName") or "") for c in claims}
        self._dirty.update(managed ^ self._managed)
        self._managed = managed
        self._pool_lines = {POOL_USAGE.name: [], POOL_LIMIT.name: []}
        self._pool_families(self._pool_lines, claims)

    def _render_pods(self) -> None:
        for key in self._render:
            facts = self._pods[key]
            text = line(series(POD_STATE.name, self._pod_labels(facts, self._nodes.get(facts.node))), 1.0)
            part = self._pod_part.get(key)
            if part is None:
                part = self._pod_parts[-1] if self._pod_parts else None
                if part is None or len(part.lines) >= POD_PART:
                    part = _Part({})
                    self._pod_parts.append(part)
                self._pod_part[key] = part
            part.lines[key] = text
            part.text = None
        self._render.clear()

    def _render_nodes(self) -> None:
        """Render again the lines of the nodes whose facts, request totals or managed flag moved, keeping the
        cluster's totals (``_allocatable``, ``_used``: sums over the nodes there are) in step."""
        for name in self._dirty:
            old = self._node_lines.pop(name, None)
            if old is not None:
                _add(self._allocatable, old[0].allocatable, -1)
                _add(self._used, old[2][0], -1)
            node = self._nodes.get(name)
            if node is None:
                continue
            managed = name in self._managed
            prefixes = self._prefixes(node, managed)
            signature = (tuple(sorted(self._requested.get(name, {}).items())),
                         tuple(sorted(self._daemon.get(name, {}).items())))
            rendered = {family.name: b"".join(line(self._prefix(prefixes, node, managed, family, resource),
                                                   metric_value(resource, amount)) for resource, amount in values)
                        for family, values in ((ALLOCATABLE, node.allocatable), (POD_REQUESTS, signature[0]),
                                               (DAEMON_REQUESTS, signature[1]), (OVERHEAD, node.overhead))}
            lifetime = self._prefix(prefixes, node, managed, LIFETIME, "") if node.created is not None else None
            self._node_lines[name] = (node, managed, signature, rendered, lifetime)
            _add(self._allocatable, node.allocatable, 1)
            _add(self._used, signature[0], 1)
        if self._dirty or self._node_order is None:
            self._node_order = sorted(self._nodes)
            self._lifetimes = [(kept[4], kept[0].created) for kept in map(self._node_lines.__getitem__,
                                                                         self._node_order)
                               if kept[4] is not None and kept[0].created is not None]
        self._dirty.clear()

    def _count(self, facts: PodFacts, sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) a pod's requests in its node's totals (and its DaemonSet totals)."""
        if facts.terminal or not facts.node:
            return
        self._dirty.add(facts.node)
        targets = [self._requested.setdefault(facts.node, {})]
        if facts.daemon:
            targets.append(self._daemon.setdefault(facts.node, {}))
        for into in targets:
            _add(into, facts.requests, sign)

    def _lifetime_lines(self, now: float | None = None) -> list[bytes]:
        now = self._clock() if now is None else now
        return [line(prefix, max(0.0, now - created)) for prefix, created in self._lifetimes]

    def _transitions(self, key: str, facts: PodFacts, now: float) -> None:
        """Karpenter's pod metrics: startup is observed for pods once seen Pending, bound for pods seen unbound."""
        if facts.phase == "Pending":
            self._pending.add(key)
        elif key in self._pending and (facts.ready or facts.terminal):
            self._pending.discard(key)
            if facts.ready and facts.created is not None and self._on_started is not None:
                self._on_started(max(0.0, (facts.ready_since or now) - facts.created))
        if facts.phase == "Pending" and not facts.scheduled:
            self._unbound.add(key)
        elif key in self._unbound and facts.scheduled:
            self._unbound.discard(key)
            if facts.created is not None and self._on_bound is not None:
                self._on_bound(max(0.0, (facts.scheduled_since or now) - facts.created))

    def _prefixes(self, node: NodeFacts, managed: bool) -> dict[tuple[str, str], str]:
        kept = self._node_prefixes.get(node.name)
        if kept is None or kept[0] is not node or kept[1] != managed:
            kept = (node, managed, {})
            self._node_prefixes[node.name] = kept
        return kept[2]

    @staticmethod
    def _prefix(prefixes: dict[tuple[str, str], str], node: NodeFacts, managed: bool, family: Family,
                resource: str) -> str:
        """The rendered ``name{labels}`` of one node's series, kept while the node's facts are unchanged."""
        key = (family.name, resource)
        found = prefixes.get(key)
        if found is None:
            labels = {**node.where, "node_name": node.name, "phase": node.phase, "managed": str(managed).lower()}
            if resource:
                labels["resource_type"] = resource_label(resource)
            found = prefixes[key] = series(family.name, labels)
        return found

    @staticmethod
    def _pod_labels(facts: PodFacts, node: NodeFacts | None) -> dict[str, str]:
        where = node.where if node is not None else {}
        return {"name": facts.name, "namespace": facts.namespace, "owner": facts.owner, "node": facts.node,
                "scheduled": str(bool(facts.node)).lower(), "nodepool": where.get("nodepool", ""),
                "zone": where.get("zone", ""), "arch": where.get("arch", ""),
                "capacity_type": where.get("capacity_type", ""), "instance_type": where.get("instance_type", ""),
                "phase": facts.phase, "ready": str(facts.ready).lower(),
                "managed": str(bool(where.get("nodepool"))).lower()}

    def _pool_families(self, families: dict[str, list[bytes]], claims: list[dict[str, Any]]) -> None:
        """NodePool usage (``status.resources``, else the sum of its NodeClaims' capacity) and spec limits."""
        counts: dict[str, int] = {}
        seen: dict[str, tuple[str, str, Resources]] = {}
        for claim in claims:
            meta = claim.get("metadata") or {}
            name, version = str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
            kept = self._claims.get(name)
            if kept is None or kept[0] != version:
                kept = (version, str((meta.get("labels") or {}).get(wk.NODEPOOL, "")),
                        _resources((claim.get("status") or {}).get("capacity")))
            seen[name] = kept
        self._claims = seen
        totals: dict[str, dict[str, int]] = {}
        for _, owner, capacity in seen.values():
            into = totals.setdefault(owner, {})
            for resource, amount in capacity.items():
                into[resource] = into.get(resource, 0) + amount
            counts[owner] = counts.get(owner, 0) + 1
        used = {owner: Resources(values) for owner, values in totals.items()}
        for pool in sorted(self._cache.items("NodePool"), key=lambda p: str((p.get("metadata") or {}).get("name"))):
            name = str((pool.get("metadata") or {}).get("name"))
            status = _resources((pool.get("status") or {}).get("resources"))
            usage = dict(status.items()) if status else {**used.get(name, Resources()), "nodes": counts.get(name, 0)}
            for resource, amount in sorted(usage.items()):
                families[POOL_USAGE.name].append(line(series(POOL_USAGE.name, {
                    "nodepool": name, "resource_type": resource_label(resource)}), metric_value(resource, amount)))
            for resource, amount in sorted(_resources((pool.get("spec") or {}).get("limits")).items()):
                families[POOL_LIMIT.name].append(line(series(POOL_LIMIT.name, {
                    "nodepool": name, "resource_type": resource_label(resource)}), metric_value(resource, amount)))

    # -- writing ------------------------------------------------------------------------------------------
    def render(self, names: frozenset[str] | None = None, *, openmetrics: bool = False) -> bytes:
        """Refresh, then the families (only ``names``, when given) in the text format, or OpenMetrics'."""
        with self._lock:
            self._refresh()
            out = []
            for family in FAMILIES:
                if names is not None and family.name not in names:
                    continue
                out.append(HEADERS[openmetrics][family.name])
                out.extend(self._families[family.name])
            return b"".join(out)

    def exposition(self, *, fresh_within: float = 0.0, wait: float | None = None) -> Exposition:
        """The published families: refreshed and published first when the publication is older than
        ``fresh_within`` seconds, on a thread of its own; when that takes longer than ``wait`` seconds (None:
        however long it takes) the publication before it is returned, and the next call finds the new one."""
        current = self._published
        if current is not None and time.monotonic() - current.at <= fresh_within:
            return current
        with self._publish_lock:
            done = self._publishing
            if done is None or done.is_set():
                done = self._publishing = threading.Event()
                threading.Thread(target=self._publish, args=(done, fresh_within), name="metrics-publish",
                                 daemon=True).start()
        done.wait(None if current is None else wait)
        published = self._published
        if published is None:  # the publication failed (logged): the caller gets the error itself
            self._publish(threading.Event(), fresh_within, reraise=True)
            published = self._published
        assert published is not None
        return published

    def _publish(self, done: threading.Event, fresh_within: float, *, reraise: bool = False) -> None:
        """Refresh (unless the last refresh, e.g. the lifecycle loop's, is recent enough), then compress the
        families outside the lock (the lifecycle loop's refresh need not wait for it) and publish them."""
        try:
            with self._lock:
                if time.monotonic() - self._refreshed > fresh_within:
                    self._refresh()
                families, at = self._families, self._refreshed
            published = self._published
            if published is not None and published.families is families:
                self._published = Exposition(at, families, published.bodies)  # nothing changed: newer, same
                return
            kept, pieces = self._pieces, {}
            for family in FAMILIES:
                parts = families[family.name]
                # the pod family is kept in parts; the others are small, one piece each
                texts = parts if family is POD_STATE else [b"".join(parts)]
                before = kept.get(family.name, [])
                # a part kept is found by its text (the same object) wherever it moved, else by its place
                by_text = {id(piece.text): piece for piece in before}
                pieces[family.name] = [metrics_gzip.reuse(text, by_text.get(id(text)) or
                                                          (before[index] if index < len(before) else None))
                                       for index, text in enumerate(texts)]
            bodies = {openmetrics: metrics_gzip.Body.of([
                piece for family in FAMILIES for piece in (HEADER_PIECES[openmetrics][family.name],
                                                          *pieces[family.name])])
                for openmetrics in (False, True)}
            self._pieces = pieces
            self._published = Exposition(at, families, bodies)
        except Exception:
            if reraise:
                raise
            log.exception("publishing the cluster-state metrics failed")
        finally:
            done.set()

    def samples(self, name: str) -> Iterator[tuple[dict[str, str], float]]:
        """The current samples of family ``name`` as (labels, value), parsed back from the kept lines (tests)."""
        with self._lock:
            self._refresh()
            lines = b"".join(self._families.get(name, [])).decode().splitlines(keepends=True)
        for text in lines:
            head, _, value = text.rstrip("\n").rpartition(" ")
            labels: dict[str, str] = {}
            if "{" in head:
                for part in _split_labels(head[head.index("{") + 1:-1]):
                    key, _, quoted = part.partition("=")
                    labels[key] = quoted[1:-1].replace(r"\"", '"').replace(r"\n", "\n").replace(r"\\", "\\")
            yield labels, float(value)


def _split_labels(text: str) -> Iterator[str]:
    """``a="x",b="y,z"`` → ``a="x"``, ``b="y,z"`` (commas inside quoted values kept)."""
    start, quoted, escaped = 0, False, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            yield text[start:i]
            start = i + 1
    if text[start:]:
        yield text[start:]
