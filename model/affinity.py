"""Label selectors, pod (anti-)affinity terms, topology spread constraints and host ports — the parts of
a PodSpec that relate a pod to other pods rather than to node labels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from model.errors import InputError
from model.fields import RawObject
from model.labels import HOSTNAME
from model.requirements import Requirement, label_key_problem

if TYPE_CHECKING:
    from model.pod import Pod

_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


class LabelSelector(BaseModel):
    """metav1.LabelSelector: matchLabels AND matchExpressions. An empty selector matches every object."""

    model_config = ConfigDict(frozen=True)

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, raw: Any) -> LabelSelector:
        obj = RawObject(raw)
        expressions = tuple(obj.parse_each("matchExpressions",
                                           lambda r: Requirement.parse(r, allowed=_SELECTOR_OPERATORS)))
        match_labels = obj.string_map("matchLabels")
        for key in match_labels:
            problem = label_key_problem(key)
            if problem:
                raise InputError(problem, field=f"matchLabels.{key}")
        return cls(match_labels=tuple(sorted(match_labels.items())), match_expressions=expressions)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            req.matches(labels) for req in self.match_expressions)

    def describe(self) -> str:
        """``app=cache, tier In [a, b]``: how explanations name the pods a rule selects."""
        parts = [f"{k}={v}" for k, v in self.match_labels] + [r.describe() for r in self.match_expressions]
        return ", ".join(parts) or "every pod"


def _topology_key(obj: RawObject) -> str:
    key = obj.str("topologyKey")
    if not key:
        raise InputError("topologyKey is required", field="topologyKey")
    problem = label_key_problem(key)
    if problem:
        raise InputError(problem, field="topologyKey")
    return key


def _label_keys(obj: RawObject, field: str) -> tuple[str, ...]:
    raw = obj.data.get(field) or []
    if not isinstance(raw, list):
        raise InputError("expected a list of label keys", field=field)
    for i, key in enumerate(raw):
        problem = label_key_problem(str(key))
        if problem:
            raise InputError(problem, field=f"{field}[{i}]")
    return tuple(str(k) for k in raw)


class PodAffinityTerm(BaseModel):
    """One required (or, with a weight, preferred) pod (anti-)affinity term."""

    model_config = ConfigDict(frozen=True)

    selector: LabelSelector | None
    topology_key: str
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()
    weight: int = 0

    @classmethod
    def parse(cls, raw: Any, weight: int = 0) -> PodAffinityTerm:
        obj = RawObject(raw)
        topology_key = _topology_key(obj)
        selector = obj.parse("labelSelector", LabelSelector.parse) if obj.data.get("labelSelector") is not None \
            else None
        ns_selector = obj.parse("namespaceSelector", LabelSelector.parse) \
            if obj.data.get("namespaceSelector") is not None else None
        return cls(selector=selector, topology_key=topology_key,
                   namespaces=tuple(str(n) for n in obj.data.get("namespaces") or ()),
                   namespace_selector=ns_selector,
                   match_label_keys=_label_keys(obj, "matchLabelKeys"),
                   mismatch_label_keys=_label_keys(obj, "mismatchLabelKeys"),
                   weight=weight)

    def selects(self, owner_namespace: str, owner_labels: Mapping[str, str], namespace: str,
                labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None = None) -> bool:
        """Does this term (of a pod in ``owner_namespace``) select a pod with these labels?

        Kubernetes: a null labelSelector selects nothing; namespaces default to the owner's own unless
        ``namespaces`` or ``namespaceSelector`` say otherwise (an empty namespaceSelector means all);
        ``matchLabelKeys`` / ``mismatchLabelKeys`` add key In / NotIn the owner's value.
        """
        if self.selector is None or not self.selector.matches(labels):
            return False
        for key in self.match_label_keys:
            if key in owner_labels and labels.get(key) != owner_labels[key]:
                return False
        for key in self.mismatch_label_keys:
            if key in owner_labels and labels.get(key) == owner_labels[key]:
                return False
        if self.namespace_selector is not None:
            in_selector = self.namespace_selector.matches(namespace_labels or {})
            return namespace in self.namespaces or in_selector
        return namespace in (self.namespaces or (owner_namespace,))


class TopologySpreadConstraint(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_skew: int
    topology_key: str
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: Literal["Honor", "Ignore"] = "Honor"
    node_taints_policy: Literal["Honor", "Ignore"] = "Ignore"
    match_label_keys: tuple[str, ...] = ()

    def selector_for(self, labels: Mapping[str, str]) -> LabelSelector | None:
        """The selector counting pods for a pod with these labels: ``matchLabelKeys`` add key=value of the
        pod's own labels (keys it lacks are ignored), as Kubernetes merges them into the selector."""
        if self.selector is None or not self.match_label_keys:
            return self.selector
        extra = tuple((k, labels[k]) for k in self.match_label_keys if k in labels)
        return self.selector.model_copy(update={"match_labels": tuple(sorted(self.selector.match_labels + extra))})

    @classmethod
    def parse(cls, raw: Any) -> TopologySpreadConstraint:
        obj = RawObject(raw)
        max_skew = obj.int("maxSkew")
        if max_skew is None or max_skew < 1:
            raise InputError("maxSkew must be a positive integer", field="maxSkew")
        key = _topology_key(obj)
        when = obj.str("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise InputError(f"unknown whenUnsatisfiable {when!r}", field="whenUnsatisfiable")
        min_domains = obj.int("minDomains")
        if min_domains is not None and (min_domains < 1 or when != "DoNotSchedule"):
            raise InputError("minDomains must be positive and needs DoNotSchedule", field="minDomains")
        policies = {}
        for field in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            value = obj.str(field)
            if value and value not in ("Honor", "Ignore"):
                raise InputError(f"unknown {field} {value!r}", field=field)
            if value:
                policies["node_affinity_policy" if field == "nodeAffinityPolicy" else "node_taints_policy"] = value
        selector = obj.parse("labelSelector", LabelSelector.parse) if obj.data.get("labelSelector") is not None \
            else None
        label_keys = _label_keys(obj, "matchLabelKeys")
        return cls(max_skew=max_skew, topology_key=key, when_unsatisfiable=when, selector=selector,
                   min_domains=min_domains, match_label_keys=label_keys, **policies)


class HostPort(BaseModel):
    """A host port a container binds: two pods conflict on a node when protocol and port match and
    their host IPs overlap (an empty IP or 0.0.0.0 overlaps every IP)."""

    model_config = ConfigDict(frozen=True)

    port: int
    protocol: str = "TCP"
    host_ip: str = ""

    def conflicts(self, other: HostPort) -> bool:
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wildcard = ("", "0.0.0.0", "::")
        return self.host_ip in wildcard or other.host_ip in wildcard or self.host_ip == other.host_ip


def ports_clash(a: Iterable[HostPort], b: Iterable[HostPort]) -> bool:
    """Could pods binding ``a`` and ``b`` not share a node (any pair conflicts, ``HostPort.conflicts``)?"""
    others = tuple(b)
    return any(p.conflicts(q) for p in a for q in others)


def repels_on_host(owner: Pod, other: Pod, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
    """Does one of ``owner``'s required anti-affinity terms on kubernetes.io/hostname select ``other``?"""
    return any(term.topology_key == HOSTNAME and term.selects(owner.namespace, owner.labels, other.namespace,
                                                                other.labels, namespace_labels.get(other.namespace))
               for term in owner.pod_anti_affinity)


def repels(a: Pod, b: Pod, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
    """May ``a`` and ``b`` not share a node, by either one's required hostname anti-affinity? (Anti-affinity
    is symmetric: the pod already there repels a newcomer its term selects, and the newcomer's term keeps it
    from a node running a pod it selects.)"""
    return repels_on_host(a, b, namespace_labels) or repels_on_host(b, a, namespace_labels)


def parse_host_ports(spec: RawObject) -> tuple[HostPort, ...]:
    out = []
    for kind in ("initContainers", "containers"):
        for container in spec.items(kind):
            for port in container.items("ports"):
                number = port.int("hostPort")
                if number:
                    if not 0 < number < 65536:
                        raise InputError("hostPort must be between 1 and 65535", field=f"{port.path}.hostPort")
                    out.append(HostPort(port=number, protocol=port.str("protocol", "TCP"),
                                        host_ip=port.str("hostIP")))
    return tuple(sorted(set(out), key=lambda p: (p.port, p.protocol, p.host_ip)))
