"""Pods of one file parsed once per shape: a Deployment's 10,000 replicas, or Karpenter's benchmark pods drawn
from 30 request sizes, differ only in their identity, so ``Pod.parse`` (about a millisecond of validation and
model building) runs once per shape and every other pod is that pod's model with its identity replaced — the
same model, sharing its ``PodShape`` (100,000 benchmark pods load in seconds instead of a minute).

The key is exactly what ``Pod.parse`` reads besides the identity: metadata's namespace, labels, annotations,
owner references and deletion timestamp; the whole spec but ``nodeName``; status' phase, nominated node and
claim statuses. What it does not read (managedFields, resourceVersion, conditions and their times) does not
split shapes. ``tests/unit/test_podshapes.py`` checks that the models equal ``Pod.parse``'s field by field.
"""

from __future__ import annotations

from collections.abc import Mapping
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


class PodShapes:
    """``Pod.parse`` once per shape, for one load. Anything unusual (a section that is not an object, an identity
    field that is not a string, a value the key encoder refuses) goes to ``Pod.parse`` itself, which names the
    bad field; a shape whose parse fails is not kept, so every pod of it reports its own error."""

    def __init__(self) -> None:
        self._models: dict[bytes, Pod] = {}
        self._encode = msgspec.json.Encoder().encode

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
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = Pod.parse(raw)
        copied = model.model_copy(update=update)
        # every copy names the same fields as set: share the first one's set instead of one per pod
        object.__setattr__(copied, "__pydantic_fields_set__", model.__pydantic_fields_set__)
        return copied
