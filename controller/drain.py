"""Draining a node through the Eviction API, Karpenter's way, one non-blocking step per call.

``Drainer.drain(node)`` looks at the node's pods in the cache, evicts what may be evicted now and returns a
``DrainStatus``; the caller (NodeClaim termination, later consolidation) calls it again on its next pass
until ``drained``. Nothing here waits: a pod whose eviction a PodDisruptionBudget refused (HTTP 429) is
retried after a per-pod exponential back-off, so one blocked pod never holds up other work.

Karpenter's rules: pods in a terminal phase are ignored; DaemonSet pods, mirror (static) pods and pods that
tolerate the ``karpenter.sh/disrupted:NoSchedule`` taint are not evicted (they would come straight back);
non-critical pods go first and critical ones (priority class ``system-cluster-critical`` /
``system-node-critical``) only once no non-critical pod is left. Past the caller's deadline (the
NodeClaim's ``terminationGracePeriod``) pods are deleted directly, PDBs or not.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from controller.batch import is_daemon_or_static, is_terminal, pod_key
from controller.cache import ClusterCache
from controller.logs import get_logger, pod_fields
from controller.rest import CoreApi
from model.labels import DISRUPTED_TAINT

log = get_logger(__name__)

CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

#: called with (pod key, outcome) for every eviction attempt: "evicted", "blocked" (429), "deleted", "gone"
EvictionHook = Callable[[str, str], None]


@dataclass
class DrainStatus:
    """Where a drain stands after one step."""

    node: str
    #: pods still on the node that must leave before it can be deleted (evicted ones still terminating included)
    remaining: list[str] = field(default_factory=list)
    #: pods whose eviction a PodDisruptionBudget refused; retried after their back-off
    blocked: list[str] = field(default_factory=list)
    #: evictions (or, past the deadline, deletions) this step issued
    evicted: list[str] = field(default_factory=list)

    @property
    def drained(self) -> bool:
        return not self.remaining


def is_critical(pod: Mapping[str, Any]) -> bool:
    return (pod.get("spec") or {}).get("priorityClassName") in CRITICAL_PRIORITY_CLASSES


def _tolerates_disrupted(pod: Mapping[str, Any]) -> bool:
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        effect_ok = tol.get("effect") in (None, "", "NoSchedule")
        if tol.get("operator") == "Exists" and not tol.get("key") and effect_ok:
            return True
        if tol.get("key") == DISRUPTED_TAINT and effect_ok:
            return True
    return False


def is_drainable(pod: Mapping[str, Any]) -> bool:
    """Must this pod leave before its node goes? (Not for DaemonSet, mirror, terminal or tolerating pods.)"""
    meta = pod.get("metadata") or {}
    if is_terminal(pod) or MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False
    return not is_daemon_or_static(pod) and not _tolerates_disrupted(pod)


@dataclass
class _Backoff:
    next_try: float = 0.0
    delay: float = 0.0


class Drainer:
    """Evicts a node's pods in tiers; idempotent, so it is called on every pass until the node is drained."""

    def __init__(self, api: client.ApiClient, cache: ClusterCache, *, clock: Callable[[], float] = time.monotonic,
                 initial_backoff: float = 1.0, max_backoff: float = 30.0, re_evict_after: float = 30.0,
                 on_eviction: EvictionHook | None = None) -> None:
        self._core = CoreApi(api)
        self._cache = cache
        self._clock = clock
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._re_evict_after = re_evict_after
        self.on_eviction = on_eviction
        self._backoff: dict[str, _Backoff] = {}
        #: pod uid → when we evicted it; not evicted again while it terminates (unless it lingers)
        self._evicted: dict[str, float] = {}

    def pods_to_drain(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self._cache.items("Pod")
                if (p.get("spec") or {}).get("nodeName") == node and is_drainable(p)]

    def drain(self, node: str, *, force_after: float | None = None) -> DrainStatus:
        """One step: evict the current tier's pods that are due. ``force_after`` (wall-clock seconds since the
        epoch): from then on pods are deleted instead of evicted (the terminationGracePeriod has run out)."""
        pods = self.pods_to_drain(node)
        status = DrainStatus(node=node, remaining=sorted(pod_key(p) for p in pods))
        if not pods:
            self._forget()
            return status
        force = force_after is not None and time.time() >= force_after
        non_critical = [p for p in pods if not is_critical(p)]
        tier = non_critical or pods  # critical pods only once every other pod has left
        now = self._clock()
        for pod in tier:
            meta = pod.get("metadata") or {}
            uid, key = str(meta.get("uid") or pod_key(pod)), pod_key(pod)
            if meta.get("deletionTimestamp") and not force:
                continue  # already terminating
            evicted_at = self._evicted.get(uid)
            if evicted_at is not None and now - evicted_at < self._re_evict_after and not force:
                continue
            backoff = self._backoff.get(uid)
            if backoff is not None and now < backoff.next_try and not force:
                status.blocked.append(key)
                continue
            outcome = self._delete(pod) if force else self.evict(pod)
            if self.on_eviction is not None:
                self.on_eviction(key, outcome)
            if outcome == "blocked":
                delay = min(self._max_backoff, (backoff.delay * 2) if backoff else self._initial_backoff)
                self._backoff[uid] = _Backoff(next_try=now + delay, delay=delay)
                status.blocked.append(key)
            elif outcome in ("evicted", "deleted"):
                self._backoff.pop(uid, None)
                self._evicted[uid] = now
                status.evicted.append(key)
        return status

    def evict(self, pod: Mapping[str, Any]) -> str:
        """One eviction through the Eviction API: "evicted", "gone" or "blocked" (a PDB refused)."""
        meta = pod.get("metadata") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            self._core.create_namespaced_pod_eviction(name, namespace, body)
        except client.ApiException as err:
            if err.status == 404:
                return "gone"
            if err.status == 429 or (err.status == 500 and "DisruptionBudget" in str(err.body or "")):
                log.info("eviction refused by a PodDisruptionBudget; retrying later", **pod_fields(pod))
                return "blocked"
            raise
        log.info("evicted pod", **pod_fields(pod))
        return "evicted"

    def _delete(self, pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        try:
            self._core.delete_namespaced_pod(name, namespace)
        except client.ApiException as err:
            if err.status == 404:
                return "gone"
            raise
        log.info("deleted pod: its node's termination grace period is over", **pod_fields(pod))
        return "deleted"

    def _forget(self) -> None:
        """Drop back-off state of pods no longer in the cache (bounded memory across many drains)."""
        live = {str((p.get("metadata") or {}).get("uid")) for p in self._cache.items("Pod")}
        self._backoff = {uid: b for uid, b in self._backoff.items() if uid in live}
        self._evicted = {uid: t for uid, t in self._evicted.items() if uid in live}


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go duration (``90s``, ``1h30m``, ``0s``); ``ValueError`` when malformed."""
    text = text.strip()
    if text in ("0", ""):
        if text == "":
            raise ValueError("empty duration")
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"invalid duration {text!r}")
    return total
