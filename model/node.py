"""Existing cluster nodes and the pods the scheduler already bound to them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from model.fields import RawObject
from model.labels import NODEPOOL
from model.resources import Resources
from model.taints import Taint


class Node(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    capacity: Resources = Resources()
    allocatable: Resources = Resources()
    unschedulable: bool = False
    ready: bool = True
    deleting: bool = False
    provider_id: str = ""
    created: str = ""

    @property
    def nodepool(self) -> str:
        return self.labels.get(NODEPOOL, "")

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Node:
        obj = RawObject(raw)
        meta, spec, status = obj.obj("metadata"), obj.obj("spec"), obj.obj("status")
        conditions = {c.str("type"): c.str("status") for c in status.items("conditions")}
        allocatable = status.parse("allocatable", Resources.parse)
        return cls(
            name=meta.str("name"),
            labels=meta.string_map("labels"),
            annotations=meta.string_map("annotations"),
            taints=tuple(spec.parse_each("taints", Taint.parse)),
            capacity=status.parse("capacity", Resources.parse) or allocatable,
            allocatable=allocatable,
            unschedulable=spec.bool("unschedulable"),
            ready=conditions.get("Ready", "True") == "True",
            deleting=bool(meta.str("deletionTimestamp")),
            provider_id=spec.str("providerID"),
            created=meta.str("creationTimestamp"),
        )
