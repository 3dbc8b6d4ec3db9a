"""NodePool status: ``ValidationSucceeded`` and ``Ready`` conditions, ``resources`` and ``nodes``.

The CRD schema rejects most bad NodePools (unknown operator, bad quantity) at admission, but not the rules
Karpenter enforces with CEL (``In`` without values, ``minValues`` above the values listed, a template label
that contradicts a requirement). The provisioner skips such a pool and keeps serving the others; the
condition tells its owner why (``kubectl get nodepool -o yaml``) instead of a warning only in our logs.
``resources`` sums the capacity of the pool's NodeClaims (launched ones report it), ``nodes`` counts them,
as Karpenter's status does. The status subresource is patched only when something changed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client

from controller.cache import ClusterCache
from controller.events import EventRecorder
from model import labels as wk
from model.errors import InputError
from model.quantity import format_quantity
from model.resources import Resources
from model.snapshot import parse_objects

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "karpenter.sh", "v1", "nodepools"
VALIDATION = "ValidationSucceeded"
OWNED = (VALIDATION, "Ready")


def validation_error(raw: Mapping[str, Any]) -> str | None:
    """Why the provisioner cannot use this NodePool (None: it can), as one line naming the field."""
    try:
        parse_objects([dict(raw)], source="cluster")
    except InputError as err:
        return str(err).removeprefix("cluster: ")
    return None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _capacity(claims: Iterable[Mapping[str, Any]], pool: str) -> tuple[Resources, int]:
    total, count = Resources(), 0
    for claim in claims:
        meta = claim.get("metadata") or {}
        if (meta.get("labels") or {}).get(wk.NODEPOOL) != pool:
            continue
        count += 1
        try:
            total = total + Resources.parse((claim.get("status") or {}).get("capacity") or {})
        except InputError:
            continue
    return total, count


def desired_status(raw: Mapping[str, Any], claims: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The status this controller owns for one NodePool; other writers' conditions are kept."""
    meta = raw.get("metadata") or {}
    current = raw.get("status") or {}
    error = validation_error(raw)
    ours = {VALIDATION: ("True", VALIDATION, "") if error is None else ("False", "NodePoolValidationFailed", error),
            "Ready": ("True", "Ready", "") if error is None else ("False", "NodePoolValidationFailed", error)}
    conditions = []
    for cond in current.get("conditions") or []:
        if cond.get("type") not in OWNED:
            conditions.append(cond)
    previous = {c.get("type"): c for c in current.get("conditions") or []}
    for kind, (status, reason, message) in ours.items():
        before = previous.get(kind) or {}
        stamp = before.get("lastTransitionTime") if before.get("status") == status else None
        conditions.append({"type": kind, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": stamp or _now()})
    capacity, nodes = _capacity(claims, str(meta.get("name")))
    return {"conditions": conditions, "resources": {k: format_quantity(k, v) for k, v in sorted(capacity.items())},
            "nodes": nodes}


def _same(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    def key(conditions: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message") or "") for c in conditions)

    def quantities(resources: Mapping[str, Any]) -> dict[str, Resources]:
        try:
            return {"": Resources.parse(resources)}
        except InputError:
            return {"invalid": Resources()}

    return (key(current.get("conditions") or []) == key(desired["conditions"])
            and quantities(current.get("resources") or {}) == quantities(desired["resources"])
            and current.get("nodes") == desired["nodes"])


class NodePoolStatusWriter:
    def __init__(self, api: client.ApiClient, cache: ClusterCache, events: EventRecorder | None = None) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._cache = cache
        self._events = events
        self.invalid: dict[str, str] = {}

    def reconcile(self) -> int:
        """Bring every NodePool's status up to date; returns how many were patched."""
        claims = [c for c in self._cache.items("NodeClaim") if not (c.get("metadata") or {}).get("deletionTimestamp")]
        writes = 0
        invalid: dict[str, str] = {}
        for raw in self._cache.items("NodePool"):
            name = str((raw.get("metadata") or {}).get("name"))
            desired = desired_status(raw, claims)
            validation = next(c for c in desired["conditions"] if c["type"] == VALIDATION)
            if validation["status"] == "False":
                invalid[name] = validation["message"]
                if self._events is not None and self.invalid.get(name) != validation["message"]:
                    self._events.warning(raw, "FailedValidation", validation["message"])  # once per new reason
            current = raw.get("status") or {}
            if _same(current, desired):
                continue
            patch = dict(desired)
            # a merge patch merges maps: resources that went away must be removed explicitly
            patch["resources"] = {**{k: None for k in current.get("resources") or {}}, **desired["resources"]}
            try:
                updated = self._custom.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, name,
                                                                          {"status": patch})
            except client.ApiException as err:
                if err.status != 404:
                    log.warning("could not update the status of NodePool %s: HTTP %s %s", name, err.status,
                                err.reason)
                continue
            self._cache.upsert("NodePool", cast(dict[str, Any], updated))
            writes += 1
        for name, message in invalid.items():
            if self.invalid.get(name) != message:
                log.warning("NodePool %s is invalid and ignored: %s", name, message)
        self.invalid = invalid
        return writes
