"""Pods parsed once per shape: a Deployment's 10,000 replicas, or Karpenter's benchmark pods drawn from 30
request sizes, differ only in their identity, so ``Pod.parse`` (about a millisecond of validation and model
building) runs once per shape and every other pod is that pod's model with its identity replaced — the same
model, sharing its ``PodShape`` (100,000 benchmark pods load in seconds instead of a minute). A snapshot load
and the controller's watch cache (``controller.decode.PodParser``, bounded) both parse pods through
``PodShapes``.

The key is exactly what ``Pod.parse`` reads besides the identity: metadata's namespace, labels, annotations,
owner references and deletion timestamp; the whole spec but ``nodeName``; status' phase, nominated node and
claim statuses. What it does not read (managedFields, resourceVersion, conditions and their times) does not
split shapes. ``tests/unit/test_podshapes.py`` checks that the models equal ``Pod.parse``'s field by field.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import msgspec

from model.pod import Pod

#: metadata fields ``Pod.parse`` reads besides the identity (name, uid, creationTimestamp)
METADATA_READ = ("namespace", "labels", "annotations", "ownerReferences", "deletionTimestamp")
#: status fields ``Pod.parse`` reads besides the identity (startTime)
STATUS_READ = ("phase", "nominatedNodeName", "resourceClaimStatuses")
#: per-pod string fields: (section, field, the Pod field it becomes)
IDENTITY = (("metadata", "name", "name"), ("metadata", "uid", "uid"), ("metadata", "creationTimestamp", "created"),
            ("spec", "nodeName", "node_name"), ("status", "startTime", "started"))


class ShapeTable:
    """Parsed models by shape: the first object of a shape is parsed, every later one is that model copied with
    its own identity. ``limit`` bounds the shapes kept (a long-running watch cache sees shapes come and go): past
    it the table starts again, which only loses sharing for what is parsed next. A shape whose parse fails is not
    kept, so every object of it reports its own error."""

    def __init__(self, limit: int | None = None) -> None:
        self._models: dict[Hashable, Any] = {}
        self._limit = limit
        self._encode = msgspec.json.Encoder().encode

    def model(self, key: Hashable, raw: Mapping[str, Any], parse: Callable[[Any], Any],
              identity: Mapping[str, Any]) -> Any:
        shape = self._models.get(key)
        if shape is None:
            shape = parse(raw)
            if self._limit is not None and len(self._models) >= self._limit:
                self._models.clear()
            self._models[key] = shape
        copied = shape.model_copy(update=identity)
        # every copy names the same fields as set: share the first one's set instead of one per object
        object.__setattr__(copied, "__pydantic_fields_set__", shape.__pydantic_fields_set__)
        return copied

    def __len__(self) -> int:
        return len(self._models)


class PodShapes(ShapeTable):
    """``Pod.parse`` once per shape. Anything unusual (a section that is not an object, an identity field that is
    not a string, a value the key encoder refuses) goes to ``Pod.parse`` itself, which names the bad field."""

    def __call__(self, raw: Mapping[str, Any]) -> Pod:
        sections = (raw.get("metadata"), raw.get("spec"), raw.get("status"))
        if not all(type(part) is dict or part is None for part in sections):
            return Pod.parse(raw)
        meta, spec, status = (part or {} for part in sections)
        by_section = {"metadata": meta, "spec": spec, "status": status}
        update: dict[str, str] = {}
        for section, name, attr in IDENTITY:
            value = by_section[section].get(name)
            if value is not None and type(value) is not str:
                return Pod.parse(raw)
            update[attr] = value or ""
        try:
            key = self._encode((
                [meta.get(name) for name in METADATA_READ],
                {k: v for k, v in spec.items() if k != "nodeName"},
                [status.get(name) for name in STATUS_READ]))
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
            return Pod.parse(raw)
        model: Pod = self.model(key, raw, Pod.parse, update)
        return model
