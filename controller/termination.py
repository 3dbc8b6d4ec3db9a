"""NodeClaim termination: what happens between a NodeClaim's deletionTimestamp and its disappearance.

Every NodeClaim the provisioner creates (and every Node the provider launches) carries the finalizer
``karpenter.sh/termination``, so deleting either only marks it. Then, one idempotent step per lifecycle
pass: taint the Node ``karpenter.sh/disrupted:NoSchedule`` (nothing new lands there), drain it through the
Eviction API (``controller.drain``), mark the claim ``Drained``, delete the instance through the provider
and, once the Node is gone, remove the claim's finalizer. A Node deleted directly (by a person, or
``kubectl drain`` tooling) takes its NodeClaim with it: the claim is deleted and goes through the same steps,
so its pods are still evicted politely. ``terminationGracePeriod`` bounds the drain: past it, pods are
deleted without asking PodDisruptionBudgets.

The instance goes through ``CloudProvider.delete``, called each pass until it raises ``NodeClaimNotFoundError``
(a cloud instance takes a while to terminate). A provider that removes the Node itself (KWOK) is then done; for
one that does not (a real cloud, where the kubelet registered the Node), the Node is deleted here once its
instance is gone, and its ``karpenter.sh/termination`` finalizer released.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from kubernetes import client

from controller.cache import ClusterCache
from controller.conditions import conditions_of, with_condition
from controller.drain import Drainer, DrainStatus, parse_duration
from controller.logs import claim_fields, get_logger
from controller.metrics import Metrics
from controller.provisioner import TERMINATION_FINALIZER
from controller.rest import CoreApi
from model import labels as wk
from model.nodepool import NodeClaim
from providers.protocol import CloudProvider, NodeClaimNotFoundError

log = get_logger(__name__)

FINALIZER = TERMINATION_FINALIZER
GROUP, VERSION, PLURAL = "karpenter.sh", "v1", "nodeclaims"


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def drain_deadline(raw: Mapping[str, Any]) -> float | None:
    """When the claim's drain stops respecting PDBs: deletionTimestamp + spec.terminationGracePeriod."""
    deleted = _epoch((raw.get("metadata") or {}).get("deletionTimestamp"))
    grace = (raw.get("spec") or {}).get("terminationGracePeriod")
    if deleted is None or not grace:
        return None
    try:
        return deleted + parse_duration(str(grace))
    except ValueError:
        log.warning(f"ignoring invalid terminationGracePeriod {grace!r}", **claim_fields(raw))
        return None


def disruption_reason(raw: Mapping[str, Any]) -> str:
    """Karpenter's ``reason`` of a drain: the claim's DisruptionReason condition, else a forceful termination."""
    cond = conditions_of(raw).get("DisruptionReason") or {}
    return str(cond.get("reason") or "") if cond.get("status") == "True" else "Forceful Termination"


def claim_node_name(raw: Mapping[str, Any]) -> str:
    return str((raw.get("status") or {}).get("nodeName") or (raw.get("metadata") or {}).get("name"))


def has_disrupted_taint(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == wk.DISRUPTED_TAINT and t.get("effect") == "NoSchedule"
               for t in (node.get("spec") or {}).get("taints") or [])


class Terminator:
    """Moves deleting NodeClaims towards removal, one idempotent write (or drain step) per pass."""

    def __init__(self, api: client.ApiClient, cache: ClusterCache, provider: CloudProvider,
                 drainer: Drainer | None = None, *, metrics: Metrics | None = None) -> None:
        self._core = CoreApi(api)
        self._custom = client.CustomObjectsApi(api)
        self._cache = cache
        self._provider = provider
        self._metrics = metrics
        self.drainer = drainer or Drainer(api, cache, on_eviction=metrics.evicted if metrics is not None else None)
        #: the Node each terminating claim had when last seen (its termination is counted once it is gone)
        self._nodes_seen: dict[str, Mapping[str, Any]] = {}
        #: claims whose Node had pods drained (``karpenter_nodes_drained_total`` counts their Nodes once gone)
        self._drained: set[str] = set()
        #: the last drain step per claim (tests and, later, events / metrics read it)
        self.last_status: dict[str, DrainStatus] = {}

    def reconcile(self, raw: dict[str, Any], nodes: Mapping[str, dict[str, Any]]) -> int:
        """One step for a NodeClaim that has a deletionTimestamp; returns how many writes it made."""
        meta = raw.get("metadata") or {}
        name = str(meta.get("name"))
        if FINALIZER not in (meta.get("finalizers") or []):
            return 0
        node = nodes.get(claim_node_name(raw))
        writes = 0
        if node is not None:
            self._nodes_seen[name] = node
            if not has_disrupted_taint(node):
                self._taint(node)
                writes += 1
            status = self.drainer.drain(claim_node_name(raw), force_after=drain_deadline(raw))
            self.last_status[name] = status
            writes += len(status.evicted)
            if status.evicted:
                self._drained.add(name)
                if self._metrics is not None:
                    self._metrics.node_drained(raw, len(status.evicted), disruption_reason(raw))
            if not status.drained:
                message = f"{len(status.remaining)} pod(s) left, {len(status.blocked)} refused by a PDB"
                writes += self._set_condition(raw, "False", "Draining", message)
                return writes
        writes += self._set_condition(raw, "True", "Drained", "")
        try:
            self._provider.delete(NodeClaim.model_validate(raw))
        except NodeClaimNotFoundError:
            if node is not None:  # the instance is gone but its Node is not: remove it (the next pass sees it gone)
                self._delete_node(node)
                return writes + 1
        else:
            if node is not None:
                return writes + 1  # the instance goes; the next pass (after the watch shows the Node gone) goes on
        self._remove_finalizer(raw)
        self.last_status.pop(name, None)
        if self._metrics is not None:
            self._metrics.claim_terminated(raw, self._nodes_seen.pop(name, None), name in self._drained)
        self._drained.discard(name)
        log.info("terminated nodeclaim", **claim_fields(raw))
        return writes + 1

    def delete_claim_of_deleted_node(self, raw: Mapping[str, Any], node: Mapping[str, Any] | None) -> int:
        """A registered claim whose Node is being deleted or is gone is deleted too (Karpenter's rule)."""
        if node is not None and not (node.get("metadata") or {}).get("deletionTimestamp"):
            return 0
        name = str((raw.get("metadata") or {}).get("name"))
        try:
            self._custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except client.ApiException as err:
            if err.status != 404:
                raise
        log.info("deleted nodeclaim: its node " + ("is being deleted" if node is not None else "is gone"),
                 **claim_fields(raw), node=claim_node_name(raw))
        return 1

    def _taint(self, node: Mapping[str, Any]) -> None:
        taints = list((node.get("spec") or {}).get("taints") or [])
        patch = [{"op": "replace" if (node.get("spec") or {}).get("taints") is not None else "add",
                  "path": "/spec/taints", "value": [*taints, {"key": wk.DISRUPTED_TAINT, "effect": "NoSchedule"}]}]
        self._core.patch_node(node["metadata"]["name"], patch)
        log.info(f"tainted node {wk.DISRUPTED_TAINT}:NoSchedule", node=node["metadata"]["name"])

    def _set_condition(self, raw: dict[str, Any], status: str, reason: str, message: str) -> int:
        current = conditions_of(raw).get("Drained") or {}
        if current.get("status") == status and current.get("message", "") == message:
            return 0
        conditions = with_condition(raw, "Drained", status, reason, message)
        updated = self._custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, raw["metadata"]["name"], {"status": {"conditions": conditions}})
        self._cache.upsert("NodeClaim", cast(dict[str, Any], updated))
        raw["status"] = {**(raw.get("status") or {}), "conditions": conditions}
        return 1

    def _delete_node(self, node: Mapping[str, Any]) -> None:
        """Delete the Node of a terminated instance and release its termination finalizer (idempotent)."""
        name = node["metadata"]["name"]
        try:
            self._core.delete_node(name)
        except client.ApiException as err:
            if err.status != 404:
                raise
            return
        finalizers = list((node.get("metadata") or {}).get("finalizers") or [])
        if FINALIZER in finalizers:
            patch = [{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                     {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in finalizers
                                                                                  if f != FINALIZER]}]
            try:
                self._core.patch_node(name, patch)
            except client.ApiException as err:
                if err.status not in (404, 409, 422):
                    raise
        log.info("deleted node: its instance is gone", node=name)

    def _remove_finalizer(self, raw: Mapping[str, Any]) -> None:
        finalizers = list((raw.get("metadata") or {}).get("finalizers") or [])
        patch = [{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                 {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in finalizers if f != FINALIZER]}]
        try:
            self._custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, raw["metadata"]["name"], patch,
                                                     _content_type="application/json-patch+json")
        except client.ApiException as err:
            if err.status != 404:
                raise
