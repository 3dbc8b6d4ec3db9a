"""Slim decoding of watched objects: what the cache keeps of each list item and watch event.

The API server sends a Pod as ~5-18 KB of JSON (managedFields, container images, env, probes, volume mounts,
status of every container) of which the rules and the controller read a few fields. Pods and Nodes are decoded
by msgspec into Structs that name only those fields (msgspec skips the rest while scanning, without building
it), then kept as plain dicts, the shape every reader of the cache (``model.snapshot``, ``controller.*``)
already uses. Every other kind is decoded whole, less ``metadata.managedFields`` and kubectl's
last-applied-configuration annotation.

Replicas of one workload share most of what is left (labels, owner, containers' resources, tolerations,
affinity): ``Shared`` hands out one object per distinct value, so 50,000 pods of 500 Deployments hold 500
copies of each. Cached objects are therefore read-only: a reader that changes one copies it first (as
``controller.provisioner`` does).

What is kept of a Pod is what ``model.pod.Pod.parse`` reads plus what the controller reads itself (PodScheduled
reason, priorityClassName, tolerations for drains, deletionTimestamp); ``tests/unit/test_decode.py`` checks the
parsed Pod and Node are the same either way. ``PodParser`` (``model.podshapes.PodShapes``, bounded) and
``NodeParser`` parse once per shape, so the models of replicas (one ``model.pod.PodShape``) and of Nodes of one
type share everything but their identity.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import msgspec

from model.podshapes import PodShapes, ShapeTable

Object = dict[str, Any]
#: kubectl apply's copy of the whole object: no rule reads it, and it is as large as the object
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class DecodeError(Exception):
    """A watched object or response that is not the JSON the API server sends (names kind, object, field)."""


class _Slim(msgspec.Struct, omit_defaults=True):
    """Fields not named are skipped by the decoder; unset ones are left out of the dict."""


class OwnerReference(_Slim):
    apiVersion: Any = None
    kind: Any = None
    name: Any = None
    uid: Any = None
    controller: Any = None


class ObjectMeta(_Slim):
    name: Any = None
    namespace: Any = None
    uid: Any = None
    resourceVersion: Any = None
    generation: Any = None
    creationTimestamp: Any = None
    deletionTimestamp: Any = None
    labels: Any = None
    annotations: Any = None
    ownerReferences: list[OwnerReference] | None = None
    finalizers: Any = None


class Container(_Slim):
    name: Any = None
    resources: Any = None  # requests, limits, claims
    ports: Any = None  # hostPort
    restartPolicy: Any = None  # sidecar init containers


class Volume(_Slim):
    name: Any = None
    persistentVolumeClaim: Any = None
    ephemeral: Any = None


class PodSpec(_Slim):
    nodeName: Any = None
    containers: list[Container] | None = None
    initContainers: list[Container] | None = None
    overhead: Any = None
    resources: Any = None
    affinity: Any = None
    nodeSelector: Any = None
    tolerations: Any = None
    topologySpreadConstraints: Any = None
    volumes: list[Volume] | None = None
    priority: Any = None
    priorityClassName: Any = None
    schedulingGates: Any = None
    resourceClaims: Any = None


class PodCondition(_Slim):
    type: Any = None
    status: Any = None
    reason: Any = None


class PodStatus(_Slim):
    phase: Any = None
    startTime: Any = None
    nominatedNodeName: Any = None
    resourceClaimStatuses: Any = None
    conditions: list[PodCondition] | None = None


class Pod(_Slim):
    apiVersion: Any = None
    kind: Any = None
    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None
    status: PodStatus | None = None


class NodeCondition(_Slim):
    type: Any = None
    status: Any = None
    reason: Any = None
    lastTransitionTime: Any = None


class NodeSpec(_Slim):
    taints: Any = None
    unschedulable: Any = None
    providerID: Any = None


class NodeStatus(_Slim):
    capacity: Any = None
    allocatable: Any = None
    conditions: list[NodeCondition] | None = None


class Node(_Slim):
    apiVersion: Any = None
    kind: Any = None
    metadata: ObjectMeta | None = None
    spec: NodeSpec | None = None
    status: NodeStatus | None = None


#: kinds decoded into a slim Struct; the others are decoded whole (less managedFields)
SLIM: dict[str, type[_Slim]] = {"Pod": Pod, "Node": Node}
#: per kind, the (section, field) values that replicas usually share
_SHARED_FIELDS = {
    "Pod": (("metadata", "labels"), ("metadata", "annotations"), ("metadata", "ownerReferences"),
            ("spec", "containers"), ("spec", "initContainers"), ("spec", "tolerations"), ("spec", "affinity"),
            ("spec", "nodeSelector"), ("spec", "topologySpreadConstraints"), ("spec", "volumes"),
            ("status", "conditions")),
    "Node": (("spec", "taints"), ("status", "capacity"), ("status", "allocatable")),
}
#: per kind, strings many objects repeat, kept once (``sys.intern``: freed with their last user): namespace, phase,
#: priority class, and the node a pod is bound to, the same object as that Node's name (~10 pods a node)
_INTERNED = {
    "Pod": (("metadata", "namespace"), ("status", "phase"), ("spec", "priorityClassName"), ("spec", "nodeName")),
    "Node": (("metadata", "name"),),
}


#: per kind, per-object strings that many objects still repeat, kept once through ``Shared.text``: timestamps
#: have a resolution of a second, so the pods of one scale-out share a few, and a pod started in the second it
#: was created holds one string for both
_REPEATED = {
    "Pod": (("metadata", "creationTimestamp"), ("status", "startTime")),
    "Node": (("metadata", "creationTimestamp"),),
}


class Shared:
    """One object per distinct JSON value, so identical sub-objects of many objects are stored once; likewise
    one string per distinct text (``text``). Bounded: past ``limit`` distinct values (or texts) it starts again
    (sharing is only lost for what is decoded next)."""

    def __init__(self, limit: int = 50_000) -> None:
        self._values: dict[bytes, Any] = {}
        self._texts: dict[str, str] = {}
        self._limit = limit
        self._encode = msgspec.json.Encoder().encode

    def text(self, value: str) -> str:
        """The string equal to ``value`` handed out first (unlike ``sys.intern``, freed with the table)."""
        return str(self._first(self._texts, value, value))

    def __call__(self, value: Any) -> Any:
        if not value:
            return value
        return self._first(self._values, self._encode(value), value)

    def _first(self, table: dict[Any, Any], key: Any, value: Any) -> Any:
        """The value first kept under ``key`` in ``table`` (``value`` when none is; a full table starts again)."""
        found = table.get(key)
        if found is not None:
            return found
        if len(table) >= self._limit:
            table.clear()
        table[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)


class Decoder:
    """Decodes list responses, watch events and API responses of one kind into the cache's slim dicts."""

    def __init__(self, kind: str, api_version: str, shared: Shared | None = None) -> None:
        self.kind = kind
        self.api_version = api_version
        self._shared = shared or Shared()
        slim = SLIM.get(kind)
        self._slim = slim
        item: Any = slim if slim is not None else dict[str, Any]
        self._list = msgspec.json.Decoder(_list_type(item))
        self._event = msgspec.json.Decoder(_event_type(item))
        self._whole_list = msgspec.json.Decoder(_list_type(dict[str, Any]))
        self._whole_event = msgspec.json.Decoder(_event_type(dict[str, Any]))

    # -- entry points -------------------------------------------------------------------------------------
    def decode_list(self, data: bytes) -> tuple[list[Object], str, str]:
        """A list response (one page): its items, ``metadata.resourceVersion`` and ``metadata.continue``."""
        try:
            page = self._list.decode(data)
        except msgspec.ValidationError:
            page = self._decode_whole(self._whole_list, data, "list response")
        except msgspec.DecodeError as err:
            raise DecodeError(f"{self.kind} list response: malformed JSON: {err}") from None
        meta = page.metadata
        return ([self._finish(item) for item in page.items or ()], str(meta.resourceVersion or ""),
                str(meta.continue_ or ""))

    def decode_event(self, line: bytes) -> tuple[str, Object]:
        """One watch event line: its type and object (an ERROR event's object is the Status, kept whole)."""
        try:
            event = self._event.decode(line)
        except msgspec.ValidationError:
            event = self._decode_whole(self._whole_event, line, "watch event")
        except msgspec.DecodeError as err:
            raise DecodeError(f"{self.kind} watch event: malformed JSON: {err}") from None
        if event.type == "ERROR":
            status = msgspec.json.decode(line).get("object")
            return "ERROR", status if isinstance(status, dict) else {}
        return str(event.type or ""), self._finish(event.object) if event.object is not None else {}

    def slim(self, obj: Mapping[str, Any]) -> Object:
        """An object the API returned to one of our writes, as the watch would have delivered it."""
        if self._slim is not None:
            try:
                return self._finish(msgspec.convert(obj, self._slim, from_attributes=False))
            except msgspec.ValidationError:
                pass  # not the API server's shape: keep it whole, the model's parser names the field
        whole = dict(obj)  # the caller's object stays as it is
        if isinstance(whole.get("metadata"), Mapping):
            whole["metadata"] = dict(whole["metadata"])
        return self._finish(whole)

    # -- internals ----------------------------------------------------------------------------------------
    def _decode_whole(self, decoder: msgspec.json.Decoder[Any], data: bytes, what: str) -> Any:
        """An item the slim Struct refuses (a field of an unexpected type) is kept whole, so the model's parser
        reports it with its field path, as it does for a snapshot file."""
        try:
            return decoder.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as err:
            raise DecodeError(f"{self.kind} {what}: {err}") from None

    def _finish(self, item: Any) -> Object:
        obj: Object = msgspec.to_builtins(item) if isinstance(item, msgspec.Struct) else item
        if not isinstance(obj, dict):
            raise DecodeError(f"{self.kind}: expected an object, got {type(obj).__name__}")
        obj.setdefault("kind", self.kind)
        obj.setdefault("apiVersion", self.api_version)
        obj["kind"], obj["apiVersion"] = sys.intern(str(obj["kind"])), sys.intern(str(obj["apiVersion"]))
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
            annotations = meta.get("annotations")
            if isinstance(annotations, dict) and LAST_APPLIED in annotations:
                meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        if self._slim is not None:
            self._share(obj)
        return obj

    def _share(self, obj: Object) -> None:
        for fields, keep in ((_INTERNED, sys.intern), (_REPEATED, self._shared.text)):
            for section, field in fields.get(self.kind, ()):
                part = obj.get(section)
                if isinstance(part, dict) and isinstance(part.get(field), str):
                    part[field] = keep(part[field])
        spec = obj.get("spec")
        if self.kind == "Pod" and isinstance(spec, dict) and isinstance(spec.get("volumes"), list):
            # only claims matter (volume topology); the projected service-account token and the like do not
            spec["volumes"] = [v for v in spec["volumes"] if len(v) > 1] or None
            if spec["volumes"] is None:
                del spec["volumes"]
        for section, field in _SHARED_FIELDS.get(self.kind, ()):
            part = obj.get(section)
            if isinstance(part, dict) and field in part:
                part[field] = self._shared(part[field])


class _ListMeta(msgspec.Struct):
    resourceVersion: Any = None
    continue_: Any = msgspec.field(default=None, name="continue")


def _list_type(item: Any) -> Any:
    return msgspec.defstruct("Page", [("metadata", _ListMeta, msgspec.field(default_factory=_ListMeta)),
                                      ("items", list[item] | None, None)])


def _event_type(item: Any) -> Any:
    return msgspec.defstruct("Event", [("type", Any, None), ("object", item | None, None)])


class PodParser(PodShapes):
    """``model.podshapes.PodShapes`` for the watch cache: replicas share one parsed model (one ``PodShape``),
    each copied with its own identity; bounded like ``Shared``, since a long-running cache sees shapes come and
    go."""

    def __init__(self, limit: int = 20_000) -> None:
        super().__init__(limit)


class NodeParser(ShapeTable):
    """``model.node.Node.parse`` once per node shape: Nodes of one instance type differ in name, labels,
    providerID and creation time, so a Node whose other fields match an earlier one's is that Node's model with
    those four replaced — the same model (``tests/unit/test_decode.py``), sharing its taints, annotations and
    resource vectors. Bounded like ``Shared``."""

    def __init__(self, limit: int = 5_000) -> None:
        super().__init__(limit)

    def __call__(self, raw: Mapping[str, Any]) -> Any:
        from model.node import Node

        sections = [raw.get(name) for name in ("metadata", "spec", "status")]
        if not all(isinstance(part, dict) or part is None for part in sections):
            return Node.parse(raw)  # not an API object: the parser names the bad field
        meta, spec, status = (part or {} for part in sections)
        labels = meta.get("labels") or {}
        identity = (meta.get("name"), meta.get("creationTimestamp"), spec.get("providerID"))
        if (not isinstance(labels, dict) or not all(isinstance(v, str) for v in (*labels, *labels.values()))
                or not all(v is None or isinstance(v, str) for v in identity)):
            return Node.parse(raw)
        # everything else ``Node.parse`` reads (owner references, finalizers and times it does not)
        key = (self._encode([meta.get("annotations"), meta.get("deletionTimestamp")]),
               self._encode([spec.get("taints"), spec.get("unschedulable")]),
               self._encode([status.get("capacity"), status.get("allocatable"), _condition_states(status)]))
        name, created, provider = identity
        return self.model(key, raw, Node.parse, {"name": name or "", "labels": dict(labels),
                                                   "provider_id": provider or "", "created": created or ""})


def _condition_states(status: Mapping[str, Any]) -> Any:
    """What ``Node.parse`` reads of ``status.conditions``: each condition's type and status (not its times)."""
    conditions = status.get("conditions")
    if isinstance(conditions, list) and all(isinstance(c, dict) for c in conditions):
        return [(c.get("type"), c.get("status")) for c in conditions]
    return conditions
