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
bundles and counters); terms towards pending pods of other classes are handled in ``counters.py``
(hostname anti-affinity) or reported as not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from model.affinity import PodAffinityTerm
from model.labels import HOSTNAME
from model.node import Node
from model.pod import Pod, PreferredTerm
from model.requirements import Requirement, Requirements

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
