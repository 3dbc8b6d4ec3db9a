"""Pod (anti-)affinity towards pods already running, for any topology key, turned into node requirements.

A running pod sits in one domain per key: the value its node carries (its name for
kubernetes.io/hostname; a node without the key is in no domain). So a pending pod's relation to running
pods is a relation to node labels, which every later stage already enforces:

- required affinity term that running pods match: ``key In [their domains]`` (Kubernetes would also let
  the pod join a domain where a pending match lands; keeping to running ones is valid, at most dearer);
- required affinity term nothing matches — no running pod, no pending pod, not the pod itself: the pod
  cannot be scheduled (``rule_problem``), as the scheduler leaves it pending;
- required anti-affinity, the pod's own terms and running pods' terms that select it (anti-affinity is
  symmetric): ``key NotIn [their domains]``;
- preferred terms towards running pods: a preferred node term with the term's weight, ``key In`` for
  affinity, ``key NotIn`` for anti-affinity (kube-scheduler scores by the number of matching pods in the
  domain; here any match counts once), scored by ``rules.preferences``.

Terms that select the pod's own kind are grouped and pinned by ``rules.topology`` (and on the hostname by
bundles and counters); terms towards pending pods of other classes by ``rules.topology`` on other keys
(domain splits for anti-affinity, joins for affinity) and on the hostname by ``counters.py``
(anti-affinity) and ``rules.antiaffinity`` (affinity, as bundles).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from model.affinity import PodAffinityTerm
from model.labels import HOSTNAME, ZONE
from model.node import Node
from model.pod import Pod, PreferredTerm
from model.requirements import Requirement, Requirements
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule, Why

if TYPE_CHECKING:
    from solver.rules.counters import NodeCounter

Placed = Sequence[tuple[Pod, Mapping[str, str]]]


def running_pods(pods: Sequence[Pod], nodes: Sequence[Node]) -> list[tuple[Pod, dict[str, str]]]:
    """Every running pod with its node's labels (hostname included); nodes being deleted are left out."""
    labels = {n.name: {HOSTNAME: n.name, **n.labels} for n in nodes if not n.deleting}
    return [(p, labels[p.node_name]) for p in pods if p.node_name in labels and not p.terminal]


def _domains(pod: Pod, term: PodAffinityTerm, placed: Placed, namespaces: Mapping[str, dict[str, str]]) -> list[str]:
    return sorted({labels[term.topology_key] for other, labels in placed if term.topology_key in labels
                   and term.selects(pod.namespace, pod.labels, other.namespace, other.labels,
                                    namespaces.get(other.namespace))})


def _term(key: str, operator: Literal["In", "NotIn"], values: list[str]) -> Requirements:
    return Requirements.of([Requirement(key=key, operator=operator, values=tuple(values))])


def _describe(term: PodAffinityTerm) -> str:
    return term.selector.describe() if term.selector else "no pod (null labelSelector)"


class RunningPodRules:
    """Derives each pending pod's requirements from the running pods; memoised per pod signature (the
    replicas of a Deployment share one)."""

    def __init__(self, placed: Placed, pending: Sequence[Pod], namespaces: Mapping[str, dict[str, str]]) -> None:
        self.placed = placed
        self.pending = pending
        self.namespaces = namespaces
        self.repellers = [(p, labels) for p, labels in placed if p.pod_anti_affinity]
        self._memo: dict[object, dict[str, object]] = {}

    def _signature(self, pod: Pod) -> object:
        return (pod.namespace, tuple(sorted(pod.labels.items())), pod.pod_affinity, pod.pod_anti_affinity,
                pod.preferred_pod_affinity, pod.preferred_pod_anti_affinity)

    def constrain(self, pod: Pod) -> Pod:
        key = self._signature(pod)
        update = self._memo.get(key)
        if update is None:
            update = self._derive(pod)
            self._memo[key] = update
        if not update:
            return pod
        changes = dict(update)
        changes["rule_terms"] = pod.rule_terms + update.get("rule_terms", ())  # type: ignore[operator]
        changes["rule_reasons"] = pod.rule_reasons + update.get("rule_reasons", ())  # type: ignore[operator]
        changes["preferred_terms"] = pod.preferred_terms + update.get("preferred_terms", ())  # type: ignore[operator]
        return pod.model_copy(update=changes)

    def _derive(self, pod: Pod) -> dict[str, object]:
        own = (pod.namespace, pod.labels, pod.namespace, pod.labels)
        groups: list[tuple[Requirements, ...]] = []
        reasons: list[str] = []
        preferred: list[PreferredTerm] = []
        for term in pod.pod_affinity:
            domains = _domains(pod, term, self.placed, self.namespaces)
            if domains:
                groups.append((_term(term.topology_key, "In", domains),))
                reasons.append(f"required pod affinity with {_describe(term)} on {term.topology_key} "
                               "(where matching pods run)")
            elif not term.selects(*own) and not any(
                    term.selects(pod.namespace, pod.labels, other.namespace, other.labels,
                                 self.namespaces.get(other.namespace)) for other in self.pending):
                return {"rule_problem": f"required pod affinity with {_describe(term)} on {term.topology_key}: "
                                        "no pod matches it, running or pending"}
        excluded: dict[str, set[str]] = {}
        sources: dict[str, list[str]] = {}
        for term in pod.pod_anti_affinity:
            domains = _domains(pod, term, self.placed, self.namespaces)
            if domains:
                excluded.setdefault(term.topology_key, set()).update(domains)
                sources.setdefault(term.topology_key, []).append(_describe(term))
        for other, labels in self.repellers:
            for term in other.pod_anti_affinity:
                if term.topology_key in labels and term.selects(other.namespace, other.labels, pod.namespace,
                                                                pod.labels, self.namespaces.get(pod.namespace)):
                    excluded.setdefault(term.topology_key, set()).add(labels[term.topology_key])
                    sources.setdefault(term.topology_key, []).append(f"running pod {other.key}'s term")
        for topology_key, values in sorted(excluded.items()):
            groups.append((_term(topology_key, "NotIn", sorted(values)),))
            named = sorted(set(sources[topology_key]))
            shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
            reasons.append(f"pod anti-affinity with {shown} on {topology_key}")
        kinds: tuple[tuple[tuple[PodAffinityTerm, ...], Literal["In", "NotIn"]], ...] = (
            (pod.preferred_pod_affinity, "In"), (pod.preferred_pod_anti_affinity, "NotIn"))
        for terms, operator in kinds:
            for term in terms:
                domains = _domains(pod, term, self.placed, self.namespaces)
                if domains:
                    preferred.append(PreferredTerm(weight=term.weight,
                                                   requirements=_term(term.topology_key, operator, domains)))
        update: dict[str, object] = {}
        if groups:
            update["rule_terms"] = tuple(groups)
            update["rule_reasons"] = tuple(reasons)
        if preferred:
            update["preferred_terms"] = tuple(preferred)
        return update


def selects_own(pod: Pod, term: PodAffinityTerm) -> bool:
    """Does the term select the pod's own kind (a self-(anti-)affinity)?"""
    return term.selects(pod.namespace, pod.labels, pod.namespace, pod.labels)


def selects_other_class(pod: Pod, term: PodAffinityTerm, pod_class: PodClass, classes: Sequence[PodClass],
                        namespace_labels: Mapping[str, dict[str, str]]) -> bool:
    """Does the term select pending pods of another class?"""
    return any(o.index != pod_class.index and term.selects(pod.namespace, pod.labels, o.representative.namespace,
                                                           o.representative.labels,
                                                           namespace_labels.get(o.representative.namespace))
               for o in classes)


def confined(pod: Pod, key: str) -> bool:
    """Did a rule confine the pod on ``key`` (to running matches' domains, or beside pending ones)?"""
    return (key == ZONE and bool(pod.zone_pin)) or any(
        req.key == key and req.operator == "In" for group in pod.rule_terms for alt in group for req in alt.items)


def _noun(key: str) -> str:
    return {ZONE: "zones", HOSTNAME: "nodes"}.get(key, f"{key} domains")


def pinned_reason(why: Why) -> str:
    """A pod-to-pod rule turned into node requirements (``pod.rule_terms``, from this family or
    ``rules.topology``) that closes every node the pod's own selection leaves open: which rule, which
    pods, which domains."""
    pod, problem = why.pod, why.problem
    if not pod.rule_terms:
        return ""
    plain = pod.model_copy(update={"rule_terms": (), "rule_reasons": ()})
    new = [t.labels for t in problem.templates if plain.accepts_labels(t.labels)]
    old = [(e.name, e.node.labels) for e in problem.existing if plain.accepts_labels(e.node.labels)]
    for group, reason in zip(pod.rule_terms, pod.rule_reasons, strict=False):
        req = group[0].items[0]
        if any(alt.matches(labels) for alt in group for labels in new):
            continue
        noun = _noun(req.key)
        if req.operator == "NotIn":
            if any(alt.matches(labels) for alt in group for _, labels in old):
                continue
            open_domains = sorted({labels[req.key] for labels in new + [lb for _, lb in old] if req.key in labels})
            return (f"{reason}: matching pods already occupy all {len(open_domains)} {noun} it may use "
                    f"({', '.join(open_domains)})")
        hosts = [name for name, labels in old if any(alt.matches(labels) for alt in group)]
        if hosts:
            return f"{reason} confines it to {noun} {', '.join(req.values)}: none of those has room for it"
        return (f"{reason} confines it to {noun} {', '.join(req.values)}, where no node it may use "
                "can be launched")
    return ""


class RunningPodTerms(Rule):
    """Pod (anti-)affinity towards running pods, any key: node requirements on the pending pods' copies.
    Its ``explain`` also words the pins ``rules.topology`` derives (both leave ``rule_terms``)."""

    name = "pod (anti-)affinity to running pods"
    reads = ("Namespace",)
    relaxable = True

    def constrain(self, batch: BatchContext, pods: list[Pod]) -> list[Pod]:
        if not any(p.pod_affinity or p.pod_anti_affinity or p.preferred_pod_affinity
                   or p.preferred_pod_anti_affinity for p in pods) and not any(
                p.pod_anti_affinity for p in batch.running):
            return pods
        rules = RunningPodRules(batch.placed, pods, batch.namespaces)
        return [rules.constrain(p) for p in pods]

    def explain(self, why: Why) -> str:
        if why.pod.rule_problem:
            return why.pod.rule_problem
        if not why.problem.templates and not why.problem.existing:
            return ""  # nothing to launch at all: node selection says so first
        return pinned_reason(why)

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        """Affinity confined to running matches' domains, where a pending match could also serve."""
        return [f"{c.name}: required pod affinity on {term.topology_key} is kept to the domains where matching "
                "pods run (Kubernetes would also accept one where a pending match lands)"
                for c in classes if not c.representative.rule_problem
                for term in c.representative.pod_affinity
                if _domains(c.representative, term, batch.placed, batch.namespaces)
                and selects_other_class(c.representative, term, c, classes, batch.namespaces)]
