"""Garbage collection between the cloud and the cluster, both directions (Karpenter's two GC controllers).

* A **leaked instance** — one the provider lists for this cluster (launched by a NodePool) that no NodeClaim's
  ``status.providerID`` names — is terminated once it is older than ``grace`` (launch and the status write that
  records its providerID are two calls; the grace covers the gap), and its Node, if it registered, is deleted.
* A **lost instance** — a launched NodeClaim not being deleted whose providerID the provider no longer lists,
  launched longer than ``grace`` ago — has its NodeClaim deleted, so termination cleans up and the pods are
  planned again.

The provider is asked first (``list``), the cache read after, so a claim created while the list was running is
seen (the order Karpenter uses). One pass per ``interval``; a failing provider call is logged and retried then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes import client

from controller.cache import ClusterCache
from controller.conditions import conditions_of
from controller.rest import CoreApi
from model.durations import epoch
from model.nodepool import NodeClaim
from providers.protocol import CloudProvider, NodeClaimNotFoundError

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "karpenter.sh", "v1", "nodeclaims"



@dataclass
class CollectionResult:
    """What one pass did (tests and metrics read it)."""

    terminated: list[str] = field(default_factory=list)
    nodes_deleted: list[str] = field(default_factory=list)
    claims_deleted: list[str] = field(default_factory=list)


class GarbageCollector:
    def __init__(self, api: client.ApiClient, cache: ClusterCache, provider: CloudProvider, *, grace: float = 30.0,
                 interval: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self._core = CoreApi(api)
        self._custom = client.CustomObjectsApi(api)
        self._cache = cache
        self._provider = provider
        self.grace = grace
        self.interval = interval
        self._clock = clock
        self._last: float | None = None

    def due(self) -> bool:
        return self._last is None or self._clock() - self._last >= self.interval

    def collect(self) -> CollectionResult:
        """One pass in both directions."""
        self._last = self._clock()
        now = self._clock()
        instances = self._provider.list()
        claims = self._cache.items("NodeClaim")
        known = {str((c.get("status") or {}).get("providerID")) for c in claims
                 if (c.get("status") or {}).get("providerID")}
        result = CollectionResult()
        for instance in instances:
            pid = instance.status.provider_id
            launched = epoch(instance.metadata.creation_timestamp)
            if pid in known or launched is None or now - launched < self.grace:
                continue
            self._terminate(instance, result)
        listed = {i.status.provider_id for i in instances}
        for raw in claims:
            self._forget_lost(raw, listed, now, result)
        return result

    def _terminate(self, instance: NodeClaim, result: CollectionResult) -> None:
        pid = instance.status.provider_id
        try:
            self._provider.delete(instance)
        except NodeClaimNotFoundError:
            return
        result.terminated.append(pid)
        log.info("garbage-collected leaked instance %s (no NodeClaim has it)", pid)
        for node in self._cache.items("Node"):
            if (node.get("spec") or {}).get("providerID") == pid:
                name = str(node["metadata"]["name"])
                try:
                    self._core.delete_node(name)
                except client.ApiException as err:
                    if err.status != 404:
                        raise
                result.nodes_deleted.append(name)

    def _forget_lost(self, raw: dict[str, object], listed: set[str], now: float, result: CollectionResult) -> None:
        meta = raw.get("metadata") or {}
        status = raw.get("status") or {}
        assert isinstance(meta, dict) and isinstance(status, dict)
        pid = str(status.get("providerID") or "")
        launched = conditions_of(raw).get("Launched") or {}
        since = epoch(launched.get("lastTransitionTime"))
        if (not pid or pid in listed or meta.get("deletionTimestamp") or launched.get("status") != "True"
                or since is None or now - since < self.grace):
            return
        name = str(meta.get("name"))
        try:
            self._custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except client.ApiException as err:
            if err.status != 404:
                raise
        result.claims_deleted.append(name)
        log.info("NodeClaim %s deleted: its instance %s no longer exists", name, pid)
