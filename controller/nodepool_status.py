"""NodePool status: ``ValidationSucceeded`` and ``Ready`` conditions, ``resources`` and ``nodes``.

The CRD schema rejects most bad NodePools (unknown operator, bad quantity) at admission, but not the rules
Karpenter enforces with CEL (``In`` without values, ``minValues`` above the values listed, a template label
that contradicts a requirement). The provisioner skips such a pool and keeps serving the others; the
condition tells its owner why (``kubectl get nodepool -o yaml``) instead of a warning only in our logs.
``resources`` sums the capacity of the pool's NodeClaims (launched ones report it), ``nodes`` counts them,
as Karpenter's status does. The status subresource is patched only when something changed.

Ownership (``nodeplan run --nodepool-selector``): nodeplan provisions, consolidates and writes the status of the
NodePools ``Ownership`` selects only; the others (Karpenter's, beside it) are never written and their nodes are
existing capacity. A selected NodePool whose ``nodeClassRef`` no configured provider serves (an
``EC2NodeClass`` under the KWOK provider) is skipped too, with ``NodeClassReady=False`` naming the class —
launching a node of the wrong cloud for it would be worse than launching none.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client

from controller.cache import ClusterCache
from controller.events import EventRecorder
from model import labels as wk
from model.affinity import LabelSelector
from model.errors import InputError
from model.quantity import format_quantity
from model.requirements import Requirement
from model.resources import Resources
from model.snapshot import parse_objects
from providers.protocol import NodeClassKind

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "karpenter.sh", "v1", "nodepools"
VALIDATION = "ValidationSucceeded"
NODECLASS_READY = "NodeClassReady"
OWNED = (VALIDATION, NODECLASS_READY, "Ready")


def parse_nodepool_selector(text: str) -> LabelSelector:
    """A label selector string as ``kubectl get -l`` takes it (``a=b,c!=d,e in (x,y),f notin (z),g,!h``)."""
    expressions: list[Requirement] = []
    for term in _split_terms(text):
        match = _SET_TERM.fullmatch(term)
        if match:
            key, op, values = match["key"], match["op"].lower(), [v.strip() for v in match["values"].split(",")]
            raw = {"key": key, "operator": "In" if op == "in" else "NotIn", "values": [v for v in values if v]}
        elif term.startswith("!"):
            raw = {"key": term[1:].strip(), "operator": "DoesNotExist"}
        elif "!=" in term:
            key, _, value = term.partition("!=")
            raw = {"key": key.strip(), "operator": "NotIn", "values": [value.strip()]}
        elif "=" in term:
            key, _, value = term.replace("==", "=", 1).partition("=")
            raw = {"key": key.strip(), "operator": "In", "values": [value.strip()]}
        else:
            raw = {"key": term, "operator": "Exists"}
        try:
            expressions.append(Requirement.parse(raw, allowed=frozenset({"In", "NotIn", "Exists", "DoesNotExist"})))
        except InputError as err:
            raise InputError(f"{term!r}: {err.message}", field="--nodepool-selector") from None
    return LabelSelector(match_expressions=tuple(expressions))


_SET_TERM = re.compile(r"(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)", re.IGNORECASE)


def _split_terms(text: str) -> list[str]:
    """Commas separate terms except inside ``( )``."""
    terms, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    terms.append(current.strip())
    return [t for t in terms if t]


def node_class_ref(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return (((raw.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}


@dataclass(frozen=True)
class Ownership:
    """Which NodePools this nodeplan manages: those ``selector`` selects (None: every one) whose node class one
    of ``node_classes`` (the providers' ``supported_node_classes()``; None: any) is."""

    selector: LabelSelector | None = None
    node_classes: tuple[NodeClassKind, ...] | None = None
    #: why a served node class (by name) cannot launch now ('' when it can: the provider's
    #: ``nodeclass_problem``, e.g. an EC2NodeClass whose selectors match nothing); its pools are not provisioned
    class_problem: Callable[[str], str] | None = None

    def selects(self, raw: Mapping[str, Any]) -> bool:
        labels = (raw.get("metadata") or {}).get("labels") or {}
        return self.selector is None or self.selector.matches(labels)

    def unserved_class(self, raw: Mapping[str, Any]) -> str | None:
        """``EC2NodeClass.karpenter.k8s.aws/default`` when no configured provider serves the pool's class."""
        ref = node_class_ref(raw)
        if self.node_classes is None or not ref:
            return None
        if any(c.group == ref.get("group") and c.kind == ref.get("kind") for c in self.node_classes):
            return None
        return f"{ref.get('kind')}.{ref.get('group')}/{ref.get('name')}"

    def owns(self, raw: Mapping[str, Any]) -> bool:
        return self.selects(raw) and self.unserved_class(raw) is None

    def not_ready(self, raw: Mapping[str, Any]) -> str:
        """Why the pool's (served) node class cannot launch now, '' when it can."""
        ref = node_class_ref(raw)
        if self.class_problem is None or not ref or self.unserved_class(raw) is not None:
            return ""
        return self.class_problem(str(ref.get("name") or ""))

    def provisions(self, raw: Mapping[str, Any]) -> bool:
        """Owned, and its node class ready: new NodeClaims may be planned for it (its existing ones are still
        managed — terminated, collected — whatever its class's state)."""
        return self.owns(raw) and not self.not_ready(raw)

    def owned_pools(self, pools: Iterable[Mapping[str, Any]]) -> set[str]:
        return {str((p.get("metadata") or {}).get("name")) for p in pools if self.owns(p)}

    def served(self) -> str:
        return ", ".join(f"{c.kind}.{c.group}" for c in self.node_classes or ()) or "none"


EVERY_NODEPOOL = Ownership()


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


def desired_status(raw: Mapping[str, Any], claims: Iterable[Mapping[str, Any]],
                   ownership: Ownership = EVERY_NODEPOOL) -> dict[str, Any]:
    """The status this controller owns for one NodePool; other writers' conditions are kept."""
    meta = raw.get("metadata") or {}
    current = raw.get("status") or {}
    error = validation_error(raw)
    unserved = ownership.unserved_class(raw)
    nodeclass = (("False", "NodeClassNotSupported", f"nodeClassRef {unserved} is served by no configured provider "
                  f"(served: {ownership.served()}); no node is launched for this NodePool")
                 if unserved else ("True", NODECLASS_READY, ""))
    problem = ownership.not_ready(raw) if not unserved else ""
    if problem:
        nodeclass = ("False", "NodeClassNotReady", f"{problem}; no node is launched for this NodePool")
    ready = (("False", "NodePoolValidationFailed", error) if error is not None
             else (nodeclass if unserved or problem else ("True", "Ready", "")))
    ours = {VALIDATION: ("True", VALIDATION, "") if error is None else ("False", "NodePoolValidationFailed", error),
            NODECLASS_READY: nodeclass, "Ready": ready}
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
    def __init__(self, api: client.ApiClient, cache: ClusterCache, events: EventRecorder | None = None,
                 ownership: Ownership = EVERY_NODEPOOL) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._cache = cache
        self._events = events
        self._ownership = ownership
        self.invalid: dict[str, str] = {}
        #: selected NodePools skipped because no provider serves their node class (name → the class), or because
        #: their node class is not ready (name → why)
        self.unserved: dict[str, str] = {}

    def reconcile(self) -> int:
        """Bring every NodePool's status up to date; returns how many were patched."""
        claims = [c for c in self._cache.items("NodeClaim") if not (c.get("metadata") or {}).get("deletionTimestamp")]
        writes = 0
        invalid: dict[str, str] = {}
        unserved: dict[str, str] = {}
        for raw in self._cache.items("NodePool"):
            if not self._ownership.selects(raw):
                continue  # another provisioner's NodePool: not ours to write
            name = str((raw.get("metadata") or {}).get("name"))
            desired = desired_status(raw, claims, self._ownership)
            node_class = self._ownership.unserved_class(raw)
            if node_class is not None:
                unserved[name] = node_class
                if self.unserved.get(name) != node_class:
                    log.warning("NodePool %s skipped: no configured provider serves its nodeClassRef %s", name,
                                node_class)
            ready = next(c for c in desired["conditions"] if c["type"] == NODECLASS_READY)
            if ready["reason"] == "NodeClassNotReady":
                unserved[name] = ready["message"]
                if self.unserved.get(name) != ready["message"]:
                    log.warning("NodePool %s skipped: %s", name, ready["message"])  # once per new reason
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
        self.unserved = unserved
        return writes
