"""CustomResourceDefinitions generated from the pydantic API models (the single source of truth).

``python -m controller.crds [DIR]`` (or ``nodeplan crds``) writes one YAML file per CRD into ``deploy/crds``.
The schemas are *structural* as the API server requires: every node has a ``type``, there is no ``$ref``,
and resource quantities are ``int-or-string`` with Kubernetes' quantity pattern. Field names are the wire
names (the model's alias, else camelCase), enums come from ``Literal`` types, bounds from ``Field(ge/le)``,
required fields from fields without a default, defaults from scalar / list defaults.
"""

from __future__ import annotations

import copy
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from model.nodepool import NodeClaim, NodePool
from model.resources import Resources
from providers.aws.nodeclass import EC2NodeClass
from providers.kwok_nodeclass import KWOKNodeClass

#: Kubernetes' resource.Quantity pattern (as published in its OpenAPI).
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
                    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
QUANTITY: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY_PATTERN,
    "x-kubernetes-int-or-string": True,
}
#: Fields the generator leaves to the API server (root ``metadata`` must be a bare object in a CRD).
ROOT_FIELDS = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True)
class CrdSpec:
    model: type[BaseModel]
    group: str
    kind: str
    plural: str
    singular: str
    scope: Literal["Cluster", "Namespaced"]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    columns: tuple[dict[str, Any], ...] = ()
    version: str = "v1"

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def filename(self) -> str:
        return f"{self.group}_{self.plural}.yaml"


def _column(name: str, path: str, kind: str = "string", priority: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        out["priority"] = priority
    return out


CRDS: tuple[CrdSpec, ...] = (
    CrdSpec(NodePool, "karpenter.sh", "NodePool", "nodepools", "nodepool", "Cluster", categories=("karpenter",),
            columns=(_column("NodeClass", ".spec.template.spec.nodeClassRef.name"),
                     _column("Nodes", ".status.nodes"),
                     _column("Weight", ".spec.weight", "integer", priority=1),
                     _column("Age", ".metadata.creationTimestamp", "date"))),
    CrdSpec(NodeClaim, "karpenter.sh", "NodeClaim", "nodeclaims", "nodeclaim", "Cluster", categories=("karpenter",),
            columns=(_column("Type", ".metadata.labels.node\\.kubernetes\\.io/instance-type"),
                     _column("Capacity", ".metadata.labels.karpenter\\.sh/capacity-type"),
                     _column("Zone", ".metadata.labels.topology\\.kubernetes\\.io/zone"),
                     _column("Node", ".status.nodeName"),
                     _column("Ready", ".status.conditions[?(@.type==\"Initialized\")].status"),
                     _column("Age", ".metadata.creationTimestamp", "date"),
                     _column("ID", ".status.providerID", priority=1),
                     _column("NodePool", ".metadata.labels.karpenter\\.sh/nodepool", priority=1))),
    CrdSpec(KWOKNodeClass, "karpenter.kwok.sh", "KWOKNodeClass", "kwoknodeclasses", "kwoknodeclass", "Cluster",
            categories=("karpenter",), version="v1alpha1"),
    CrdSpec(EC2NodeClass, "karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclasses", "ec2nodeclass", "Cluster",
            short_names=("ec2nc", "ec2ncs"), categories=("karpenter",),
            columns=(_column("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
                     _column("Age", ".metadata.creationTimestamp", "date"),
                     _column("Role", ".spec.role", priority=1))),
)


def _wire_name(name: str, info: FieldInfo) -> str:
    return info.alias or to_camel(name)


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated[...]`` (validators) down to the type the wire format carries."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, (list, tuple)):
        return [_json_default(v) for v in value]
    return value


def schema_of(annotation: Any) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a Python type as it appears in the models."""
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"unions other than Optional cannot be expressed structurally: {annotation}")
        return schema_of(members[0])
    if origin is Literal:
        values = list(typing.get_args(annotation))
        kinds = {type(v) for v in values}
        if kinds != {str}:
            raise TypeError(f"only string literals are supported: {annotation}")
        return {"type": "string", "enum": values}
    if origin in (list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        if len(args) != 1:
            raise TypeError(f"only homogeneous sequences are supported: {annotation}")
        return {"type": "array", "items": schema_of(args[0])}
    if origin is dict:
        key, value = typing.get_args(annotation)
        if key is not str:
            raise TypeError(f"map keys must be strings: {annotation}")
        return {"type": "object", "additionalProperties": schema_of(value)}
    if annotation is Resources:
        return {"type": "object", "additionalProperties": copy.deepcopy(QUANTITY)}
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return object_schema(annotation)
    raise TypeError(f"no OpenAPI schema for {annotation!r}")


def _field_schema(info: FieldInfo) -> dict[str, Any]:
    schema = schema_of(info.annotation)
    for meta in info.metadata:
        if isinstance(meta, annotated_types.Ge):
            schema["minimum"] = meta.ge
        elif isinstance(meta, annotated_types.Le):
            schema["maximum"] = meta.le
        elif isinstance(meta, annotated_types.Gt):
            schema["minimum"], schema["exclusiveMinimum"] = meta.gt, True
        elif isinstance(meta, annotated_types.Lt):
            schema["maximum"], schema["exclusiveMaximum"] = meta.lt, True
    if info.description:
        schema["description"] = info.description
    if not info.is_required():
        default = _json_default(info.get_default(call_default_factory=True))
        # scalars and non-empty lists become API defaults; empty values and objects mean "absent"
        if (isinstance(default, (str, int, float, bool)) and default != "") or (
                isinstance(default, list) and default):
            schema["default"] = default
    return schema


def object_schema(model: type[BaseModel], *, root: bool = False) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        wire = _wire_name(name, info)
        if root and wire in ROOT_FIELDS:
            properties[wire] = {"type": "object"} if wire == "metadata" else {"type": "string"}
            continue
        properties[wire] = _field_schema(info)
        if info.is_required():
            required.append(wire)
    schema: dict[str, Any] = {"type": "object"}
    doc = (model.__doc__ or "").strip()
    if doc and not doc.startswith(("A base class", "Usage docs")):
        schema["description"] = " ".join(doc.split())
    schema["properties"] = properties
    if required:
        schema["required"] = required
    return schema


def crd(spec: CrdSpec) -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition for one API model."""
    schema = object_schema(spec.model, root=True)
    version: dict[str, Any] = {"name": spec.version, "served": True, "storage": True, "schema": {
        "openAPIV3Schema": schema}}
    if spec.columns:
        version["additionalPrinterColumns"] = list(spec.columns)
    if "status" in schema["properties"]:
        version["subresources"] = {"status": {}}
    names: dict[str, Any] = {"kind": spec.kind, "listKind": f"{spec.kind}List", "plural": spec.plural,
                             "singular": spec.singular}
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    if spec.categories:
        names["categories"] = list(spec.categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": spec.name, "labels": {"app.kubernetes.io/part-of": "nodeplan"}},
        "spec": {"group": spec.group, "names": names, "scope": spec.scope, "versions": [version]},
    }


HEADER = "# Generated by `python -m controller.crds` from the pydantic models in model/; do not edit.\n"


class _NoAliasDumper(yaml.SafeDumper):
    """Writes repeated sub-schemas out in full: anchors are legal YAML but unreadable in a CRD."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(spec: CrdSpec) -> str:
    return HEADER + yaml.dump(crd(spec), Dumper=_NoAliasDumper, sort_keys=False, width=120)


def generate() -> dict[str, str]:
    """File name → content for every CRD."""
    return {spec.filename: render(spec) for spec in CRDS}


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for filename, text in generate().items():
        path = directory / filename
        path.write_text(text)
        out.append(path)
    return out


DEFAULT_DIR = Path(__file__).resolve().parent.parent / "deploy" / "crds"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else DEFAULT_DIR
    for path in write(directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
