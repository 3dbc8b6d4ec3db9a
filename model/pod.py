"""Pods: what they request and which nodes they accept, computed exactly as Kubernetes does."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, model_validator

from model.affinity import HostPort, PodAffinityTerm, TopologySpreadConstraint, parse_host_ports
from model.errors import InputError
from model.fields import RawObject
from model.quantity import quantity_int
from model.requirements import NODE_AFFINITY_OPERATORS, Requirement, Requirements
from model.resources import PODS, Resources, quantities
from model.taints import Toleration

TERMINAL_PHASES = ("Succeeded", "Failed")


def container_requests(container: RawObject) -> Resources:
    """A container's requests; a resource with only a limit requests its limit (API-server defaulting)."""
    resources = container.obj("resources")
    return Resources({**resources.parse("limits", quantities), **resources.parse("requests", quantities)})


def effective_requests(spec: RawObject) -> Resources:
    """What the scheduler charges a node for this pod (Kubernetes' ``PodRequests``).

    App containers and sidecars (init containers with ``restartPolicy: Always``) run together; each regular
    init container runs alone beside the sidecars started before it. The pod needs the larger of the two
    phases, plus ``spec.overhead``. Pod-level ``spec.resources.requests`` replace the container sum for the
    resources they name (a pod-level limit without a request defaults the request, as the API server
    does). Every pod also takes one ``pods`` slot.
    """
    data = spec.data
    if not (data.get("initContainers") or data.get("resources") or data.get("overhead")):
        plain = _containers_only(data.get("containers"))
        if plain is not None:
            return plain
    total = Resources()
    for container in spec.items("containers"):
        total = total + container_requests(container)
    sidecars = Resources()
    init_peak = Resources()
    for container in spec.items("initContainers"):
        request = container_requests(container)
        if container.str("restartPolicy") == "Always":
            sidecars = sidecars + request
            init_peak = Resources.max_of([init_peak, sidecars])
        else:
            init_peak = Resources.max_of([init_peak, request + sidecars])
    pod = Resources.max_of([total + sidecars, init_peak])
    pod_resources = spec.obj("resources")
    pod_level = {**pod_resources.parse("limits", quantities), **pod_resources.parse("requests", quantities)}
    if pod_level:
        pod = Resources({**dict(pod), **pod_level})
    pod = pod + spec.parse("overhead", Resources.parse)
    return pod + {PODS: 1}


def _containers_only(containers: Any) -> Resources | None:
    """``effective_requests`` of a pod with app containers only (almost every pod), without the
    intermediate vectors; None when anything is unusual (the general path then says what is wrong)."""
    if not isinstance(containers, list):
        return None
    total: dict[str, int] = {PODS: 1}
    try:
        for container in containers:
            if not isinstance(container, dict):
                return None
            resources = container.get("resources")
            if resources is None:
                continue
            if not isinstance(resources, dict):
                return None
            merged: dict[str, int] = {}
            for part in ("limits", "requests"):
                raw = resources.get(part)
                if raw is None:
                    continue
                if not isinstance(raw, dict):
                    return None
                for name, text in raw.items():
                    merged[str(name)] = quantity_int(str(name), text)
            for name, amount in merged.items():
                total[name] = total.get(name, 0) + amount
    except InputError:
        return None
    return Resources(total)


def selector_term(raw: Any) -> Requirements:
    term = RawObject(raw)
    reqs = term.parse_each("matchExpressions",
                           lambda r: Requirement.parse(r, allowed=NODE_AFFINITY_OPERATORS))
    for field in term.items("matchFields"):
        if field.str("key") != "metadata.name":
            raise InputError("matchFields supports only metadata.name", field=f"{field.path}.key")
        reqs.append(Requirement.parse({**field.data, "key": "kubernetes.io/hostname"},
                                      allowed=NODE_AFFINITY_OPERATORS))
    if not reqs:
        return Requirements.never()
    return Requirements.of(reqs)


def _required_terms(section: RawObject) -> tuple[PodAffinityTerm, ...]:
    return tuple(section.parse_each("requiredDuringSchedulingIgnoredDuringExecution", PodAffinityTerm.parse))


def _preferred_terms(section: RawObject) -> tuple[PodAffinityTerm, ...]:
    out = []
    for item in section.items("preferredDuringSchedulingIgnoredDuringExecution"):
        weight = item.int("weight", 0) or 0
        if not 1 <= weight <= 100:
            raise InputError("weight must be between 1 and 100", field=f"{item.path}.weight")
        out.append(item.parse("podAffinityTerm", functools.partial(PodAffinityTerm.parse, weight=weight)))
    return tuple(out)


class PodClaimRef(BaseModel):
    """One ``spec.resourceClaims`` entry: a named ResourceClaim shared by every pod naming it, or a template
    the claim controller stamps one claim per pod from (exactly one of the two is set)."""

    model_config = ConfigDict(frozen=True)

    name: str
    claim_name: str = ""
    template_name: str = ""


class ContainerClaim(BaseModel):
    """A container's ``resources.claims`` entry: which pod claim (and optionally which request) it uses."""

    model_config = ConfigDict(frozen=True)

    container: str
    name: str
    request: str = ""


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _claim_refs(spec: RawObject) -> tuple[PodClaimRef, ...]:
    """``spec.resourceClaims`` checked as the API server does: DNS-label names, unique, exactly one source."""
    out: list[PodClaimRef] = []
    for item in spec.items("resourceClaims"):
        name = item.str("name")
        if not name or len(name) > 63 or not _DNS_LABEL.match(name):
            raise InputError(f"claim name {name!r} must be a DNS label", field=f"{item.path}.name")
        if any(ref.name == name for ref in out):
            raise InputError(f"duplicate claim name {name!r}", field=f"{item.path}.name")
        claim, template = item.str("resourceClaimName"), item.str("resourceClaimTemplateName")
        if bool(claim) == bool(template):
            raise InputError("exactly one of resourceClaimName or resourceClaimTemplateName is required",
                             field=item.path)
        key = "resourceClaimName" if claim else "resourceClaimTemplateName"
        value = claim or template
        if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
            raise InputError(f"{value!r} must be a DNS subdomain", field=f"{item.path}.{key}")
        out.append(PodClaimRef(name=name, claim_name=claim, template_name=template))
    return tuple(out)


def _container_claims(spec: RawObject, refs: tuple[PodClaimRef, ...]) -> tuple[ContainerClaim, ...]:
    """Containers' ``resources.claims``: each must name one of the pod's claims, at most once per container."""
    names = {ref.name for ref in refs}
    out = []
    for key in ("initContainers", "containers"):
        for container in spec.items(key):
            used: set[str] = set()
            for item in container.obj("resources").items("claims"):
                name, request = item.str("name"), item.str("request")
                if name not in names:
                    raise InputError(f"claim {name!r} must be one of the pod's spec.resourceClaims",
                                     field=f"{item.path}.name")
                key = f"{name}/{request}" if request else name
                if name in used or key in used or (not request and any(u.startswith(f"{name}/") for u in used)):
                    raise InputError(f"claim {key!r} is referenced twice in this container", field=item.path)
                used.add(key)
                out.append(ContainerClaim(container=container.str("name"), name=name, request=request))
    return tuple(out)


class PreferredTerm(BaseModel):
    model_config = ConfigDict(frozen=True)
    weight: int
    requirements: Requirements


#: what tells one replica from another: a ``Pod`` holds these itself and everything else in its ``PodShape``
IDENTITY_FIELDS = frozenset({"name", "uid", "node_name", "created", "started"})


class PodShape(BaseModel):
    """Everything about a pod but its identity: what the replicas of one workload have in common. Immutable,
    so one instance is shared by every pod of that shape (``controller.decode.PodParser``); ``Pod`` reads it
    through. Field meanings are ``Pod``'s."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    phase: str = "Pending"
    requests: Resources = Resources()
    node_selector: dict[str, str] = {}
    required_terms: tuple[Requirements, ...] = ()
    preferred_terms: tuple[PreferredTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    owner_kind: str = ""
    owner_name: str = ""
    priority: int = 0
    scheduling_gated: bool = False
    deleting: bool = False
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    volume_claims: tuple[str, ...] = ()
    #: ``spec.resourceClaims`` (DRA); ``model.dra.ClaimIndex`` resolves them against the snapshot
    resource_claims: tuple[PodClaimRef, ...] = ()
    #: ``status.resourceClaimStatuses``: (pod claim name, generated ResourceClaim name, "" if none was needed)
    claim_statuses: tuple[tuple[str, str], ...] = ()
    container_claims: tuple[ContainerClaim, ...] = ()
    #: volume topology: each group's alternatives are ORed, groups are ANDed (``model.volumes``)
    volume_terms: tuple[tuple[Requirements, ...], ...] = ()
    #: why the pod's volumes keep it from any node (an unbound Immediate claim, a missing claim)
    volume_problem: str = ""
    #: set by the solver, never by parsing: the zone a zone-level rule assigned it
    zone_pin: str = ""
    #: set by the solver: node requirements pod-to-pod rules derive (affinity to running pods, domain pins
    #: on other topology keys); each group's alternatives are ORed, groups are ANDed, like ``volume_terms``
    rule_terms: tuple[tuple[Requirements, ...], ...] = ()
    #: set by the solver: the rule behind each of ``rule_terms``, for explanations
    rule_reasons: tuple[str, ...] = ()
    #: set by the solver: why a pod-to-pod rule leaves the pod no node at all
    rule_problem: str = ""
    #: consolidation reads it: status.nominatedNodeName
    nominated_node: str = ""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> PodShape:
        """As ``BaseModel.model_copy``, without what was worked out from the fields (a copy with other pins or
        rule terms has other node requirements)."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("node_requirements", None)
        return copied

    @functools.cached_property
    def node_requirements(self) -> tuple[Requirements, ...]:
        """Alternatives the node's labels must satisfy: nodeSelector AND (term1 OR term2 OR ...), AND each
        volume's topology (its own ORed terms). Worked out once per shape (it is immutable), not per call:
        the solver asks it of every pod against every node kind."""
        if self.volume_problem or self.rule_problem:
            return (Requirements.never(),)
        selector = Requirements.from_labels(self.node_selector)
        if self.zone_pin:
            selector = selector & Requirements.from_labels({"topology.kubernetes.io/zone": self.zone_pin})
        alternatives = [selector & term for term in self.required_terms] or [selector]
        for group in self.volume_terms + self.rule_terms:
            alternatives = [alt & term for alt in alternatives for term in group]
        return tuple(alternatives)


class Pod(BaseModel):
    """A pod as far as placement is concerned. ``requests`` already includes the ``pods`` slot.

    Built and read flat (``Pod(namespace=..., name=..., requests=...)``, ``pod.requests``,
    ``pod.model_copy(update={"zone_pin": ...})``) but stored as its identity plus a ``PodShape`` shared with its
    replicas: a controller watching 50,000 bound pods keeps one small object per pod, not 36 fields each."""

    model_config = ConfigDict(frozen=True)

    name: str
    uid: str = ""
    node_name: str = ""
    #: consolidation reads these: metadata.creationTimestamp, status.startTime
    created: str = ""
    started: str = ""
    shape: PodShape

    def __init__(self, **data: Any) -> None:
        """The identity fields and every ``PodShape`` field by name (or ``shape=`` itself)."""
        super().__init__(**data)

    @model_validator(mode="before")
    @classmethod
    def _split_shape(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "shape" not in data:
            own = {k: v for k, v in data.items() if k in IDENTITY_FIELDS}
            own["shape"] = {k: v for k, v in data.items() if k not in IDENTITY_FIELDS}
            return own
        return data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Pod:
        """As ``BaseModel.model_copy``, with each updated ``PodShape`` field set on a copy of the shape (the
        shared one is never changed)."""
        if not update:
            return super().model_copy(deep=deep)
        own = {k: v for k, v in update.items() if k in IDENTITY_FIELDS or k == "shape"}
        shaped = {k: v for k, v in update.items() if k not in own}
        if shaped:
            own["shape"] = own.get("shape", self.shape).model_copy(update=shaped)
        copied = super().model_copy(update=own, deep=deep)
        copied.__dict__.pop("key", None)  # a new name or namespace is a new key
        return copied

    if TYPE_CHECKING:  # read through to ``shape`` (the properties are made below the class)
        @property
        def namespace(self) -> str: ...
        @property
        def labels(self) -> dict[str, str]: ...
        @property
        def annotations(self) -> dict[str, str]: ...
        @property
        def phase(self) -> str: ...
        @property
        def requests(self) -> Resources: ...
        @property
        def node_selector(self) -> dict[str, str]: ...
        @property
        def required_terms(self) -> tuple[Requirements, ...]: ...
        @property
        def preferred_terms(self) -> tuple[PreferredTerm, ...]: ...
        @property
        def tolerations(self) -> tuple[Toleration, ...]: ...
        @property
        def owner_kind(self) -> str: ...
        @property
        def owner_name(self) -> str: ...
        @property
        def priority(self) -> int: ...
        @property
        def scheduling_gated(self) -> bool: ...
        @property
        def deleting(self) -> bool: ...
        @property
        def pod_affinity(self) -> tuple[PodAffinityTerm, ...]: ...
        @property
        def pod_anti_affinity(self) -> tuple[PodAffinityTerm, ...]: ...
        @property
        def preferred_pod_affinity(self) -> tuple[PodAffinityTerm, ...]: ...
        @property
        def preferred_pod_anti_affinity(self) -> tuple[PodAffinityTerm, ...]: ...
        @property
        def topology_spread(self) -> tuple[TopologySpreadConstraint, ...]: ...
        @property
        def host_ports(self) -> tuple[HostPort, ...]: ...
        @property
        def volume_claims(self) -> tuple[str, ...]: ...
        @property
        def resource_claims(self) -> tuple[PodClaimRef, ...]: ...
        @property
        def claim_statuses(self) -> tuple[tuple[str, str], ...]: ...
        @property
        def container_claims(self) -> tuple[ContainerClaim, ...]: ...
        @property
        def volume_terms(self) -> tuple[tuple[Requirements, ...], ...]: ...
        @property
        def volume_problem(self) -> str: ...
        @property
        def zone_pin(self) -> str: ...
        @property
        def rule_terms(self) -> tuple[tuple[Requirements, ...], ...]: ...
        @property
        def rule_reasons(self) -> tuple[str, ...]: ...
        @property
        def rule_problem(self) -> str: ...
        @property
        def nominated_node(self) -> str: ...

    @functools.cached_property
    def key(self) -> str:
        """``namespace/name``, made once per pod: the solver looks pods up by key millions of times at 50,000
        pods (``model_copy`` forgets it, as a copy may have another identity)."""
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def pending(self) -> bool:
        """Waiting for a node: unbound and not finished (the snapshot contract's definition)."""
        return not self.node_name and not self.terminal and not self.deleting

    @property
    def daemon(self) -> bool:
        return self.owner_kind in ("DaemonSet", "Node")

    def node_requirements(self) -> tuple[Requirements, ...]:
        """Alternatives the node's labels must satisfy (``PodShape.node_requirements``)."""
        return self.shape.node_requirements

    def accepts_labels(self, labels: Mapping[str, str]) -> bool:
        return any(reqs.matches(labels) for reqs in self.node_requirements())

    @classmethod
    def parse_spec(cls, spec: RawObject) -> dict[str, Any]:
        """Placement-relevant fields of a PodSpec (shared by Pods and workload pod templates)."""
        affinity = spec.obj("affinity").obj("nodeAffinity")
        required = affinity.obj("requiredDuringSchedulingIgnoredDuringExecution")
        terms = tuple(required.parse_each("nodeSelectorTerms", selector_term))
        if required.data and not terms:
            raise InputError("requiredDuringScheduling needs at least one nodeSelectorTerm",
                             field=f"{required.path}.nodeSelectorTerms")
        preferred = []
        for item in affinity.items("preferredDuringSchedulingIgnoredDuringExecution"):
            weight = item.int("weight", 0) or 0
            if not 1 <= weight <= 100:
                raise InputError("weight must be between 1 and 100", field=f"{item.path}.weight")
            preferred.append(PreferredTerm(weight=weight, requirements=item.parse("preference", selector_term)))
        pod_affinity = spec.obj("affinity").obj("podAffinity")
        anti = spec.obj("affinity").obj("podAntiAffinity")
        claims = _claim_refs(spec)
        return {
            "pod_affinity": _required_terms(pod_affinity),
            "pod_anti_affinity": _required_terms(anti),
            "preferred_pod_affinity": _preferred_terms(pod_affinity),
            "preferred_pod_anti_affinity": _preferred_terms(anti),
            "topology_spread": tuple(spec.parse_each("topologySpreadConstraints", TopologySpreadConstraint.parse)),
            "host_ports": parse_host_ports(spec),
            "volume_claims": tuple(v.obj("persistentVolumeClaim").str("claimName")
                                   for v in spec.items("volumes") if v.data.get("persistentVolumeClaim")),
            "resource_claims": claims,
            "container_claims": _container_claims(spec, claims),
            "requests": effective_requests(spec),
            "node_selector": spec.string_map("nodeSelector"),
            "required_terms": terms,
            "preferred_terms": tuple(preferred),
            "tolerations": tuple(spec.parse_each("tolerations", Toleration.parse)),
            "priority": spec.int("priority", 0) or 0,
            "scheduling_gated": bool(spec.items("schedulingGates")),
        }

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Pod:
        obj = RawObject(raw)
        meta = obj.obj("metadata")
        spec = obj.obj("spec")
        owners = meta.items("ownerReferences")
        controller = next((o for o in owners if o.bool("controller")), owners[0] if owners else None)
        return cls(
            namespace=meta.str("namespace", "default"),
            name=meta.str("name"),
            uid=meta.str("uid"),
            labels=meta.string_map("labels"),
            annotations=meta.string_map("annotations"),
            node_name=spec.str("nodeName"),
            phase=obj.obj("status").str("phase", "Pending"),
            owner_kind=controller.str("kind") if controller else "",
            owner_name=controller.str("name") if controller else "",
            deleting=bool(meta.str("deletionTimestamp")),
            created=meta.str("creationTimestamp"),
            started=obj.obj("status").str("startTime"),
            nominated_node=obj.obj("status").str("nominatedNodeName"),
            claim_statuses=tuple((c.str("name"), c.str("resourceClaimName"))
                                 for c in obj.obj("status").items("resourceClaimStatuses")),
            **cls.parse_spec(spec),
        )


for _field in PodShape.model_fields:
    setattr(Pod, _field, property(operator.attrgetter(f"shape.{_field}"), doc=f"``shape.{_field}``"))
del _field
