"""NodePool and NodeClaim, ``karpenter.sh/v1``: API-shaped models (the CRDs' single source of truth)
plus the derived views the solver uses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from model.api import ApiModel
from model.errors import InputError
from model.labels import CAPACITY_TYPE, NODEPOOL, ZONE
from model.requirements import NODEPOOL_OPERATORS, Requirement, Requirements
from model.resources import Resources
from model.taints import Taint

if TYPE_CHECKING:
    from model.instancetype import InstanceType
    from model.snapshot import Snapshot

#: The pseudo-resource ``spec.limits`` caps the node count with (Karpenter's ``nodes`` limit).
NODES = "nodes"

def _requirement(raw: Any) -> Requirement:
    if isinstance(raw, Requirement):
        return raw
    return Requirement.parse(raw, allowed=NODEPOOL_OPERATORS)


def _taint(raw: Any) -> Taint:
    return raw if isinstance(raw, Taint) else Taint.parse(raw)


RequirementField = Annotated[Requirement, BeforeValidator(_requirement)]
TaintField = Annotated[Taint, BeforeValidator(_taint)]


class ObjectMeta(ApiModel):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    deletion_timestamp: str | None = None
    creation_timestamp: str | None = None
    resource_version: str | None = None


class TemplateMeta(ApiModel):
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class NodeClassRef(ApiModel):
    group: str = ""
    kind: str = ""
    name: str = ""


class NodeClaimTemplateSpec(ApiModel):
    requirements: list[RequirementField] = []
    taints: list[TaintField] = []
    startup_taints: list[TaintField] = []
    node_class_ref: NodeClassRef | None = None
    expire_after: str | None = "720h"
    termination_grace_period: str | None = None


class NodeClaimTemplate(ApiModel):
    metadata: TemplateMeta = TemplateMeta()
    spec: NodeClaimTemplateSpec = NodeClaimTemplateSpec()


class Budget(ApiModel):
    nodes: str = "10%"
    schedule: str | None = None
    duration: str | None = None
    reasons: list[Literal["Empty", "Underutilized", "Drifted", "Unhealthy"]] | None = None

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, value: Any) -> str:
        text = str(value)
        digits = text[:-1] if text.endswith("%") else text
        if not digits.isdigit():
            raise ValueError(f"nodes must be a count or a percentage, got {value!r}")
        return text


class Disruption(ApiModel):
    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"] = (
        "WhenEmptyOrUnderutilized")
    consolidate_after: str = "0s"
    budgets: list[Budget] = [Budget()]


def _limits(raw: Any) -> Resources:
    return raw if isinstance(raw, Resources) else Resources.parse(raw)


def _caps(raw: Any) -> Resources:
    """``spec.limits``: a limit past what the solver's integers hold (10000000Gi of memory is a common way to
    say "no limit") is that maximum, which no batch can reach."""
    return raw if isinstance(raw, Resources) else Resources.parse(raw, saturate=True)


class NodePoolSpec(ApiModel):
    template: NodeClaimTemplate = NodeClaimTemplate()
    disruption: Disruption = Disruption()
    limits: Annotated[Resources, BeforeValidator(_caps)] = Resources()
    weight: int | None = Field(default=None, ge=1, le=100)


class NodePool(ApiModel):
    """A ``karpenter.sh/v1`` NodePool."""

    api_version: str = "karpenter.sh/v1"
    kind: Literal["NodePool"] = "NodePool"
    metadata: ObjectMeta
    spec: NodePoolSpec = NodePoolSpec()
    status: NodePoolStatus = Field(default_factory=lambda: NodePoolStatus())

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def weight(self) -> int:
        return self.spec.weight or 0

    @property
    def requirements(self) -> Requirements:
        return Requirements.of(self.spec.template.spec.requirements)

    @property
    def labels(self) -> dict[str, str]:
        return self.spec.template.metadata.labels

    @property
    def taints(self) -> list[Taint]:
        """Taints a launched node keeps; startupTaints are ignored for placement, as Karpenter does."""
        return self.spec.template.spec.taints

    @property
    def limits(self) -> Resources:
        return self.spec.limits

    @model_validator(mode="after")
    def _cross_field_rules(self) -> NodePool:
        self.check()
        return self

    def check(self) -> None:
        """Cross-field rules the API server's CEL validation enforces."""
        for i, req in enumerate(self.spec.template.spec.requirements):
            where = f"spec.template.spec.requirements[{i}]"
            if req.min_values is not None and req.operator == "In" and req.min_values > len(req.values):
                raise InputError(f"minValues {req.min_values} is more than the {len(req.values)} value(s) listed",
                                 field=f"{where}.minValues")
            if req.operator in ("Gt", "Lt", "Gte", "Lte") and int(req.values[0]) < 0:
                raise InputError(f"operator {req.operator} needs a non-negative integer", field=f"{where}.values")
            label = self.labels.get(req.key)
            if label is not None and not req.allows_value(label):
                raise InputError(f"template label {req.key}={label} contradicts requirement "
                                 f"{req.describe()}", field=where)


class NodeClaimResources(ApiModel):
    requests: Annotated[Resources, BeforeValidator(_limits)] = Resources()


class NodeClaimSpec(NodeClaimTemplateSpec):
    resources: NodeClaimResources = NodeClaimResources()


class Condition(ApiModel):
    type: str
    status: str = "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


class NodePoolStatus(ApiModel):
    """What the pool holds (summed node capacity, node count) and its conditions."""

    resources: Annotated[Resources, BeforeValidator(_limits)] = Resources()
    nodes: int | None = None
    conditions: list[Condition] = []


NodePool.model_rebuild()


class NodeClaimStatus(ApiModel):
    node_name: str = ""
    provider_id: str = Field(default="", alias="providerID")
    image_id: str = Field(default="", alias="imageID")
    capacity: Annotated[Resources, BeforeValidator(_limits)] = Resources()
    allocatable: Annotated[Resources, BeforeValidator(_limits)] = Resources()
    conditions: list[Condition] = []


class NodeClaim(ApiModel):
    """A ``karpenter.sh/v1`` NodeClaim: a request for one node, launched through the provider."""

    api_version: str = "karpenter.sh/v1"
    kind: Literal["NodeClaim"] = "NodeClaim"
    metadata: ObjectMeta
    spec: NodeClaimSpec = NodeClaimSpec()
    status: NodeClaimStatus = NodeClaimStatus()

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def nodepool(self) -> str:
        return self.metadata.labels.get("karpenter.sh/nodepool", "")

    def condition(self, kind: str) -> bool:
        return any(c.type == kind and c.status == "True" for c in self.status.conditions)


def pool_usage(snapshot: Snapshot, nodepool: NodePool) -> Resources:
    """What counts against a NodePool's ``spec.limits`` already, as Karpenter counts it: the capacity (not
    allocatable) of every node the pool owns plus one ``nodes`` each, and of every NodeClaim of the pool whose
    node has not joined yet (its reported capacity, else its requests)."""
    usage = Resources()
    node_names = set()
    for node in snapshot.nodes:
        if node.labels.get(NODEPOOL) == nodepool.name:
            usage = usage + node.capacity + {NODES: 1}
            node_names.add(node.name)
    for claim in snapshot.nodeclaims:
        if claim.nodepool == nodepool.name and claim.status.node_name not in node_names:
            capacity = claim.status.capacity or claim.spec.resources.requests
            usage = usage + capacity + {NODES: 1}
    return usage


def launched_labels(nodepool: NodePool, instance_type: InstanceType, zone: str, capacity_type: str) -> dict[str, str]:
    """The labels a node the pool launches on this offering carries (before values chosen for the pool's
    other requirement keys): the instance type's, the template's, then zone, capacity type and NodePool."""
    return {**instance_type.labels, **nodepool.labels, ZONE: zone, CAPACITY_TYPE: capacity_type,
            NODEPOOL: nodepool.name}
