"""A Snapshot: everything one solve needs, loaded from ``kubectl get -o yaml|json`` output."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from model import kyaml, volumes
from model.api import validate_api
from model.dra import ClaimIndex, DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from model.errors import InputError
from model.instancetype import InstanceType
from model.node import Node
from model.nodepool import NodeClaim, NodePool
from model.pod import Pod
from model.podshapes import PodShapes
from model.workload import DaemonSet, Namespace, PodDisruptionBudget

#: the longest integer literal a JSON file may hold (Python's own limit for decimal text is 4,300 digits)
MAX_JSON_INT_DIGITS = 100


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise InputError(f"integer with {len(text)} digits (at most {MAX_JSON_INT_DIGITS})")
    return int(text)


def _json_constant(name: str) -> float:
    raise InputError(f"{name} is not a JSON number")


def _load_json(text: str) -> Any:
    """JSON as Kubernetes accepts it: no NaN/Infinity, integers of sane length, bounded nesting."""
    try:
        return json.loads(text, parse_int=_json_int, parse_constant=_json_constant)
    except RecursionError:
        raise InputError("JSON nested too deeply") from None

#: Kinds kept as raw objects for rules that read them directly (volumes).
RAW_KINDS = frozenset({"PersistentVolumeClaim", "PersistentVolume", "StorageClass", "CSINode"})


class Snapshot(BaseModel):
    """An immutable cluster state plus the instance catalog it will be solved against."""

    model_config = ConfigDict(frozen=True)

    pods: tuple[Pod, ...] = ()
    nodes: tuple[Node, ...] = ()
    nodepools: tuple[NodePool, ...] = ()
    nodeclaims: tuple[NodeClaim, ...] = ()
    daemonsets: tuple[DaemonSet, ...] = ()
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    device_classes: tuple[DeviceClass, ...] = ()
    resource_claims: tuple[ResourceClaim, ...] = ()
    resource_claim_templates: tuple[ResourceClaimTemplate, ...] = ()
    resource_slices: tuple[ResourceSlice, ...] = ()
    raw_objects: tuple[dict[str, Any], ...] = ()
    instance_types: tuple[InstanceType, ...] = ()
    source: str = ""
    warnings: tuple[str, ...] = ()

    def pending_pods(self) -> list[Pod]:
        """Pods that need a node: unbound, not terminal, not daemon pods, not held by scheduling gates."""
        return [p for p in self.pods if p.pending and not p.daemon and not p.scheduling_gated]

    def pods_on(self, node_name: str) -> list[Pod]:
        return [p for p in self.pods if p.node_name == node_name and not p.terminal]

    def nodepool(self, name: str) -> NodePool | None:
        return next((np for np in self.nodepools if np.name == name), None)

    def claim_index(self) -> ClaimIndex:
        """Claims, templates and classes by key with each claim's pending consumers; ``.resolve(pod)`` gives
        a pod's claims. Built fresh on every call (the snapshot is copied with other pods as it is solved):
        build it once per state and keep it."""
        return ClaimIndex(self.pods, self.resource_claims, self.resource_claim_templates, self.device_classes)

    def with_catalog(self, instance_types: Iterable[InstanceType]) -> Snapshot:
        return self.model_copy(update={"instance_types": tuple(instance_types)})


def _object_name(obj: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` for messages, whatever the object holds (never raises)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    kind, name, namespace = obj.get("kind"), meta.get("name"), meta.get("namespace")
    kind = kind if isinstance(kind, str) and kind else "?"
    name = name if isinstance(name, str) and name else "<unnamed>"
    return f"{kind} {namespace + '/' if isinstance(namespace, str) and namespace else ''}{name}"


def check_identity(obj: Any, *, file: str, origin: str) -> str:
    """Check what every object needs before anything reads it (an object, a string kind, a string name and,
    if set, namespace); returns its display name. Errors name the file and the object."""
    if not isinstance(obj, Mapping):
        raise InputError(f"not a Kubernetes object (got {type(obj).__name__})", file=file, obj=origin)
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        problem = "object has no kind" if kind in (None, "") else f"kind must be a string, got {type(kind).__name__}"
        raise InputError(problem, file=file, obj=origin, field="kind")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise InputError("object has no name", file=file, obj=f"{_object_name(obj)} in {origin}",
                         field="metadata.name")
    for field in ("name", "namespace"):
        value = meta.get(field)
        if value is not None and not isinstance(value, str):
            raise InputError(f"expected a string, got {type(value).__name__}", file=file,
                             obj=f"{kind} in {origin}", field=f"metadata.{field}")
    return _object_name(obj)


def _plain_identity(obj: Any) -> bool:
    """``check_identity``'s conditions for a plain dict, without building its display name: a controller's
    batch checks every object of the cluster, and almost all of them are this."""
    if type(obj) is not dict:
        return False
    kind, meta = obj.get("kind"), obj.get("metadata")
    if type(kind) is not str or not kind or type(meta) is not dict:
        return False
    name, namespace = meta.get("name"), meta.get("namespace")
    return type(name) is str and bool(name) and (namespace is None or type(namespace) is str)


class Documents(list[Any]):
    """A file's objects, ``List`` items flattened, with where each one came from (``origins[i]``: "document 2",
    "document 1, item 5"), so an error about two objects can name both."""

    def __init__(self, items: Sequence[Any] = (), origins: Sequence[str] = ()) -> None:
        super().__init__(items)
        self.origins = list(origins)


def _origin(objects: Iterable[Any], index: int) -> str:
    origins = getattr(objects, "origins", None)
    return origins[index] if origins is not None and index < len(origins) else f"document {index + 1}"


#: kinds nodeplan reads that are cluster-scoped (their identity is the name alone)
CLUSTER_SCOPED = frozenset({"Node", "NodePool", "NodeClaim", "Namespace", "PersistentVolume", "StorageClass",
                            "CSINode", "DeviceClass", "ResourceSlice"})


def _identity(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) as the API server keys objects (a namespaced object without a namespace is
    in ``default``, as ``kubectl apply`` puts it)."""
    meta = obj["metadata"]
    namespace = "" if kind in CLUSTER_SCOPED else str(meta.get("namespace") or "default")
    return kind, namespace, str(meta["name"])


def read_documents(path: Path) -> list[Any]:
    """Every top-level document of a YAML stream or JSON file (``List`` objects are flattened); the result
    is ``Documents``, which remembers each object's document (and List item)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read file: {err}", file=str(path)) from None
    try:
        docs: list[Any] = [_load_json(text)] if path.suffix == ".json" else kyaml.load_all(text)
    except json.JSONDecodeError as err:
        raise InputError(f"malformed JSON at line {err.lineno} column {err.colno}: {err.msg}",
                         file=str(path)) from None
    except InputError as err:
        raise err.located(file=str(path)) from None
    out: list[Any] = []
    origins: list[str] = []
    for number, doc in enumerate(docs, start=1):
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            out.extend(doc["items"])
            origins.extend(f"document {number}, item {i}" for i in range(1, len(doc["items"]) + 1))
        else:
            out.append(doc)
            origins.append(f"document {number}")
    return Documents(out, origins)


def _parse_nodepool(raw: Mapping[str, Any]) -> NodePool:
    nodepool = validate_api(NodePool, raw)
    nodepool.check()
    return nodepool


_PARSERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "Pod": Pod.parse,
    "Node": Node.parse,
    "NodePool": _parse_nodepool,
    "NodeClaim": lambda raw: validate_api(NodeClaim, raw),
    "DaemonSet": DaemonSet.parse,
    "PodDisruptionBudget": PodDisruptionBudget.parse,
    "Namespace": Namespace.parse,
    "DeviceClass": DeviceClass.parse,
    "ResourceClaim": ResourceClaim.parse,
    "ResourceClaimTemplate": ResourceClaimTemplate.parse,
    "ResourceSlice": ResourceSlice.parse,
}


def parse_object(obj: Mapping[str, Any]) -> Any:
    """The model of one object of a kind the snapshot parses (Pod, Node, NodePool, ...), unlocated errors."""
    return _PARSERS[obj["kind"]](obj)


def _resolve_volumes(pod: Pod, raw: list[dict[str, Any]], source: str) -> Pod:
    """A pending pod with its volumes' topology; a malformed claim, volume or class it reads is named."""
    try:
        return volumes.resolve(pod, raw)
    except InputError as err:
        raise err.located(file=source, obj=f"a PersistentVolumeClaim, PersistentVolume or StorageClass "
                                           f"of Pod {pod.key}") from None


def shape_parser() -> Callable[[Mapping[str, Any]], Any]:
    """``parse_object`` with Pods parsed once per shape (``model.podshapes``) for one load."""
    pods = PodShapes()

    def parse(obj: Mapping[str, Any]) -> Any:
        return pods(obj) if obj["kind"] == "Pod" else parse_object(obj)
    return parse


def parse_objects(objects: Iterable[Any], *, source: str,
                  parse: Callable[[Mapping[str, Any]], Any] | None = None) -> Snapshot:
    """Build a Snapshot from Kubernetes objects; unknown kinds are skipped with a warning. Two objects of
    one kind it reads with one namespace/name are an input error naming both (the API server holds one).
    ``parse``: what turns one object into its model (default ``shape_parser()``; the controller's cache
    passes one that reuses models it parsed before)."""
    parse = parse or shape_parser()
    buckets: dict[str, list[Any]] = {kind: [] for kind in _PARSERS}
    raw: list[dict[str, Any]] = []
    warnings: list[str] = []
    skipped: dict[str, int] = {}
    seen: dict[tuple[str, str, str], int] = {}
    for index, obj in enumerate(objects):
        if not _plain_identity(obj):
            check_identity(obj, file=source, origin=_origin(objects, index))
        kind = obj["kind"]
        identity = _identity(kind, obj)
        if identity in seen and (kind in _PARSERS or kind in RAW_KINDS):  # kinds it skips may repeat
            first, namespace = _origin(objects, seen[identity]), f"{identity[1]}/" if identity[1] else ""
            raise InputError(f"defined twice, in {first} and {_origin(objects, index)} (one object per kind and "
                             "namespace/name)", file=source, obj=f"{kind} {namespace}{identity[2]}")
        seen[identity] = index
        if kind in _PARSERS:
            try:
                buckets[kind].append(parse(obj))
            except InputError as err:
                raise err.located(file=source, obj=_object_name(obj)) from None
        elif kind in RAW_KINDS:
            raw.append(dict(obj))
        else:
            skipped[kind] = skipped.get(kind, 0) + 1
    for kind, count in sorted(skipped.items()):
        warnings.append(f"{source}: skipped {count} object(s) of unsupported kind {kind}")
    pods = [_resolve_volumes(pod, raw, source) if pod.pending else pod for pod in buckets["Pod"]]
    return Snapshot(
        pods=tuple(pods), nodes=tuple(buckets["Node"]), nodepools=tuple(buckets["NodePool"]),
        nodeclaims=tuple(buckets["NodeClaim"]), daemonsets=tuple(buckets["DaemonSet"]),
        pdbs=tuple(buckets["PodDisruptionBudget"]), namespaces=tuple(buckets["Namespace"]),
        device_classes=tuple(buckets["DeviceClass"]), resource_claims=tuple(buckets["ResourceClaim"]),
        resource_claim_templates=tuple(buckets["ResourceClaimTemplate"]),
        resource_slices=tuple(buckets["ResourceSlice"]),
        raw_objects=tuple(raw), source=source, warnings=tuple(warnings),
    )


def load_snapshot(path: str | Path) -> Snapshot:
    """Load a snapshot file (YAML stream, YAML/JSON ``List``); errors name file, object and field."""
    path = Path(path)
    return parse_objects(read_documents(path), source=str(path))
