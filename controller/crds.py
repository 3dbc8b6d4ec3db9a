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


#: Label keys and values as Kubernetes validates them (qualified name; a value of at most 63 characters).
LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?"
                     r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: Go durations as Karpenter accepts them (``Never`` where a duration may be switched off).
DURATION_OR_NEVER_PATTERN = r"^(([0-9]+(s|m|h))+|Never)$"
DURATION_PATTERN = r"^([0-9]+(s|m|h))+$"
CONDITION_TYPE_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                          r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
DATE_TIME: dict[str, Any] = {"type": "string", "format": "date-time"}


def _cel(rule: str, message: str) -> dict[str, str]:
    return {"message": message, "rule": rule}


def _not_empty(what: str) -> dict[str, Any]:
    return {"x-kubernetes-validations": [_cel("self != ''", f"{what} may not be empty")]}


#: Karpenter's validation of the ``karpenter.sh/v1`` API, keyed by schema path (``[]`` = array items,
#: ``{}`` = map values): the CEL rules (``x-kubernetes-validations``), patterns, bounds, list/map types and
#: defaults that sigs.k8s.io/karpenter v1.15.0 publishes in ``pkg/apis/crds``. They are layered onto the
#: model-derived schema so the API server rejects exactly what Karpenter's CRDs reject, and a cluster can
#: swap one set of CRDs for the other (tests/e2e/test_karpenter_compat.py checks both directions).
_RESTRICTED_DOMAIN = ('self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
                      '!self.find("^([^/]+)").endsWith("karpenter.sh")')
_OPERATOR_RULES = [
    _cel("self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
         "requirements with operator 'In' must have a value defined"),
    _cel("self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? "
         "(x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
         "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    _cel("self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
         "requirements with 'minValues' must have at least that many values specified in the 'values' field"),
]
_TAINTS: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}
_TAINT_KEY: dict[str, Any] = {"minLength": 1, "pattern": LABEL_KEY_PATTERN}
_TAINT_VALUE: dict[str, Any] = {"pattern": LABEL_KEY_PATTERN}


def _claim_spec_rules(prefix: str, *, in_nodepool: bool) -> dict[str, dict[str, Any]]:
    """Rules shared by ``NodePool.spec.template.spec`` and ``NodeClaim.spec`` (a NodeClaim may carry the
    ``karpenter.sh/nodepool`` requirement; its whole spec is immutable instead of just the class reference)."""
    key_rules = [_cel(_RESTRICTED_DOMAIN, 'label domain "karpenter.sh" is restricted')]
    if in_nodepool:
        key_rules.append(_cel('self != "karpenter.sh/nodepool"', 'label "karpenter.sh/nodepool" is restricted'))
    key_rules.append(_cel('self != "kubernetes.io/hostname"', 'label "kubernetes.io/hostname" is restricted'))
    return {
        prefix: {"required": ["nodeClassRef", "requirements"], **({} if in_nodepool else {
            "x-kubernetes-validations": [_cel("self == oldSelf", "spec is immutable")]})},
        f"{prefix}.expireAfter": {"pattern": DURATION_OR_NEVER_PATTERN},
        f"{prefix}.terminationGracePeriod": {"pattern": DURATION_PATTERN},
        f"{prefix}.nodeClassRef": {"required": ["group", "kind", "name"], **({"x-kubernetes-validations": [
            _cel("self.group == oldSelf.group", "nodeClassRef.group is immutable"),
            _cel("self.kind == oldSelf.kind", "nodeClassRef.kind is immutable")]} if in_nodepool else {})},
        f"{prefix}.nodeClassRef.group": {"pattern": r"^[^/]*$", **_not_empty("group")},
        f"{prefix}.nodeClassRef.kind": _not_empty("kind"),
        f"{prefix}.nodeClassRef.name": _not_empty("name"),
        f"{prefix}.requirements": {"maxItems": 100, "x-kubernetes-list-type": "atomic",
                                   "x-kubernetes-validations": _OPERATOR_RULES},
        f"{prefix}.requirements[]": {"required": ["key", "operator"]},
        f"{prefix}.requirements[].key": {"maxLength": 316, "pattern": LABEL_KEY_PATTERN,
                                         "x-kubernetes-validations": key_rules},
        f"{prefix}.requirements[].minValues": {"minimum": 1, "maximum": 50},
        # Karpenter puts the label-value bounds on the array itself (where the API server ignores them).
        f"{prefix}.requirements[].values": {"x-kubernetes-list-type": "atomic", "maxLength": 63,
                                            "pattern": LABEL_VALUE_PATTERN},
        f"{prefix}.taints": _TAINTS,
        f"{prefix}.taints[]": {"required": ["effect", "key"]},
        f"{prefix}.taints[].key": _TAINT_KEY,
        f"{prefix}.taints[].value": _TAINT_VALUE,
        f"{prefix}.startupTaints": _TAINTS,
        f"{prefix}.startupTaints[]": {"required": ["effect", "key"]},
        f"{prefix}.startupTaints[].key": _TAINT_KEY,
        f"{prefix}.startupTaints[].value": _TAINT_VALUE,
    }


def _condition_rules(prefix: str, *, required: list[str], reason_pattern: str,
                     reason_min: int | None) -> dict[str, dict[str, Any]]:
    """metav1.Condition as Karpenter's status types validate it (a list-map keyed by ``type``)."""
    reason: dict[str, Any] = {"maxLength": 1024, "pattern": reason_pattern}
    if reason_min is not None:
        reason["minLength"] = reason_min
    return {
        prefix: {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        f"{prefix}[]": {"required": required},
        f"{prefix}[].lastTransitionTime": {"format": "date-time"},
        f"{prefix}[].message": {"maxLength": 32768},
        f"{prefix}[].reason": reason,
        f"{prefix}[].status": {"enum": ["True", "False", "Unknown"], "default": None},
        f"{prefix}[].type": {"maxLength": 316, "pattern": CONDITION_TYPE_PATTERN},
    }


#: Fields of Karpenter's API that nodeplan carries but does not interpret: kept in the schema so the API server
#: stores (rather than prunes) what Karpenter writes, and so the CEL rules that name them compile.
_TIME_ADDED = {"timeAdded": DATE_TIME}
_OBSERVED_GENERATION = {"observedGeneration": {"type": "integer", "format": "int64", "minimum": 0}}
NODEPOOL_EXTRA_PROPERTIES: dict[str, dict[str, Any]] = {
    "spec": {"replicas": {"type": "integer", "format": "int64", "minimum": 0}},
    "spec.template.spec.taints[]": _TIME_ADDED,
    "spec.template.spec.startupTaints[]": _TIME_ADDED,
    "status": {"nodeClassObservedGeneration": {"type": "integer", "format": "int64"}},
    "status.conditions[]": _OBSERVED_GENERATION,
}
NODECLAIM_EXTRA_PROPERTIES: dict[str, dict[str, Any]] = {
    "spec.taints[]": _TIME_ADDED,
    "spec.startupTaints[]": _TIME_ADDED,
    "status": {"lastPodEventTime": DATE_TIME},
    "status.conditions[]": _OBSERVED_GENERATION,
}
NODEPOOL_RULES: dict[str, dict[str, Any]] = {
    "": {"required": ["spec"]},
    "spec": {"required": ["template"], "x-kubernetes-validations": [
        _cel("has(self.replicas) == has(oldSelf.replicas)",
             "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) "
             "provisioning modes"),
        _cel("!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || "
             "(size(self.limits) == 1 && 'nodes' in self.limits))",
             "only 'limits.nodes' is supported on static NodePools"),
        _cel("!has(self.replicas) || !has(self.weight)", "'weight' is not supported on static NodePools"),
    ]},
    "spec.weight": {"format": "int32"},
    "spec.disruption": {"default": {"consolidateAfter": "0s"}},
    "spec.disruption.consolidateAfter": {"pattern": DURATION_OR_NEVER_PATTERN},
    "spec.disruption.budgets": {"maxItems": 50, "x-kubernetes-list-type": "atomic", "x-kubernetes-validations": [
        _cel("self.all(x, has(x.schedule) == has(x.duration))", "'schedule' must be set with 'duration'")]},
    "spec.disruption.budgets[]": {"required": ["nodes"]},
    "spec.disruption.budgets[].nodes": {"pattern": r"^((100|[0-9]{1,2})%|[0-9]+)$"},
    "spec.disruption.budgets[].duration": {"pattern": r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"},
    "spec.disruption.budgets[].schedule": {
        "pattern": r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"},
    "spec.disruption.budgets[].reasons": {"maxItems": 50, "x-kubernetes-list-type": "set"},
    # Karpenter also lets a budget name Unhealthy (node repair), which nodeplan does not perform.
    "spec.disruption.budgets[].reasons[]": {"enum": ["Underutilized", "Empty", "Drifted", "Unhealthy"]},
    "spec.template": {"required": ["spec"]},
    "spec.template.metadata.annotations": {"x-kubernetes-map-type": "granular"},
    "spec.template.metadata.labels": {"maxProperties": 100, "x-kubernetes-map-type": "atomic",
                                      "x-kubernetes-validations": [
        _cel(f"self.all(x, {_RESTRICTED_DOMAIN.replace('self', 'x')})", 'label domain "karpenter.sh" is restricted'),
        _cel('self.all(x, x != "karpenter.sh/nodepool")', 'label "karpenter.sh/nodepool" is restricted'),
        _cel('self.all(x, x != "kubernetes.io/hostname")', 'label "kubernetes.io/hostname" is restricted')]},
    "spec.template.metadata.labels{}": {"maxLength": 63, "pattern": LABEL_VALUE_PATTERN},
    **_claim_spec_rules("spec.template.spec", in_nodepool=True),
    "status.nodes": {"default": 0, "format": "int64"},
    **_condition_rules("status.conditions", required=["lastTransitionTime", "message", "reason", "status", "type"],
                       reason_pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", reason_min=1),
}
NODECLAIM_RULES: dict[str, dict[str, Any]] = {
    "": {"required": ["spec"]},
    **_claim_spec_rules("spec", in_nodepool=False),
    **_condition_rules("status.conditions", required=["lastTransitionTime", "status", "type"],
                       reason_pattern=r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$", reason_min=None),
}


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The sub-schema at a rule path; a path the model does not have is a bug in the tables above."""
    node = schema
    for part in filter(None, path.replace("[]", ".[]").replace("{}", ".{}").split(".")):
        if part == "[]":
            node = node["items"]
        elif part == "{}":
            node = node["additionalProperties"]
        else:
            node = node["properties"][part]
    return node


def overlay(schema: dict[str, Any], rules: dict[str, dict[str, Any]],
            extra_properties: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Layer Karpenter's validation (and the fields only it interprets) onto a model-derived schema."""
    for path, properties in extra_properties.items():
        _node(schema, path).setdefault("properties", {}).update(copy.deepcopy(properties))
    for path, keywords in rules.items():
        node = _node(schema, path)
        for key, value in keywords.items():
            if key == "required":
                node["required"] = sorted(set(node.get("required", [])) | set(value))
            elif value is None:  # a model default Karpenter does not have (its field is required instead)
                node.pop(key, None)
            else:
                node[key] = copy.deepcopy(value)
    return schema


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
    #: API-server validation beyond what the model's types express (see ``overlay``).
    rules: tuple[tuple[str, dict[str, Any]], ...] = ()
    extra_properties: tuple[tuple[str, dict[str, Any]], ...] = ()
    #: The ``scale`` subresource (Karpenter's static NodePools scale through ``spec.replicas``).
    scale: tuple[tuple[str, str], ...] = ()

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
                     _column("Age", ".metadata.creationTimestamp", "date")),
            rules=tuple(NODEPOOL_RULES.items()), extra_properties=tuple(NODEPOOL_EXTRA_PROPERTIES.items()),
            scale=(("specReplicasPath", ".spec.replicas"), ("statusReplicasPath", ".status.nodes"))),
    CrdSpec(NodeClaim, "karpenter.sh", "NodeClaim", "nodeclaims", "nodeclaim", "Cluster", categories=("karpenter",),
            columns=(_column("Type", ".metadata.labels.node\\.kubernetes\\.io/instance-type"),
                     _column("Capacity", ".metadata.labels.karpenter\\.sh/capacity-type"),
                     _column("Zone", ".metadata.labels.topology\\.kubernetes\\.io/zone"),
                     _column("Node", ".status.nodeName"),
                     _column("Ready", ".status.conditions[?(@.type==\"Initialized\")].status"),
                     _column("Age", ".metadata.creationTimestamp", "date"),
                     _column("ID", ".status.providerID", priority=1),
                     _column("NodePool", ".metadata.labels.karpenter\\.sh/nodepool", priority=1)),
            rules=tuple(NODECLAIM_RULES.items()), extra_properties=tuple(NODECLAIM_EXTRA_PROPERTIES.items())),
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
    schema = overlay(object_schema(spec.model, root=True), dict(spec.rules), dict(spec.extra_properties))
    version: dict[str, Any] = {"name": spec.version, "served": True, "storage": True, "schema": {
        "openAPIV3Schema": schema}}
    if spec.columns:
        version["additionalPrinterColumns"] = list(spec.columns)
    if "status" in schema["properties"]:
        version["subresources"] = {"status": {}}
    if spec.scale:
        version.setdefault("subresources", {})["scale"] = dict(spec.scale)
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
