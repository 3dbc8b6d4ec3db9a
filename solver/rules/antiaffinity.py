"""Required pod anti-affinity on ``kubernetes.io/hostname``: a node already running a pod a class repels (or
that repels the class — anti-affinity is symmetric) is closed to that class; pods that repel their own
kind are kept apart by per-node counters (``counters.py``), on zones by zone pins (``zones.py``). What no
rule models (two classes repelling each other with terms that select neither itself, other topology keys)
``unmodelled`` names, so the plan says so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from model.affinity import PodAffinityTerm
from model.labels import HOSTNAME, ZONE
from model.pod import Pod
from solver.classes import PodClass
from solver.rules.counters import NodeCounter, modelled_spread


def _repels(owner: Pod, other: Pod, namespace_labels: Mapping[str, dict[str, str]]) -> bool:
    return any(term.topology_key == HOSTNAME and term.selects(owner.namespace, owner.labels, other.namespace,
                                                                other.labels, namespace_labels.get(other.namespace))
               for term in owner.pod_anti_affinity)


def repels(a: Pod, b: Pod, namespace_labels: Mapping[str, dict[str, str]]) -> bool:
    """May ``a`` and ``b`` not share a node, by either one's required hostname anti-affinity?"""
    return _repels(a, b, namespace_labels) or _repels(b, a, namespace_labels)


def blocked_by_bound_pods(pod_class: PodClass, bound: Sequence[Pod], namespace_labels: Mapping[str, dict[str, str]]
                          ) -> bool:
    """Does any pod already on a node repel this class there (either direction)?"""
    pod = pod_class.representative
    return any(repels(pod, other, namespace_labels) for other in bound)


def affinity_matches(pod: Pod, other: Pod, namespace_labels: Mapping[str, dict[str, str]]) -> bool:
    """Does a running pod satisfy one of ``pod``'s required hostname affinity terms?"""
    return any(term.topology_key == HOSTNAME and term.selects(pod.namespace, pod.labels, other.namespace,
                                                              other.labels, namespace_labels.get(other.namespace))
               for term in pod.pod_affinity)


def host_self_affinity_term(pod: Pod, namespace_labels: Mapping[str, dict[str, str]]) -> PodAffinityTerm | None:
    """The required pod affinity term to its own pods on kubernetes.io/hostname, if any."""
    return next((term for term in pod.pod_affinity if term.topology_key == HOSTNAME and term.selects(
        pod.namespace, pod.labels, pod.namespace, pod.labels, namespace_labels.get(pod.namespace))), None)


def self_affine_on_host(pod: Pod, namespace_labels: Mapping[str, dict[str, str]]) -> bool:
    """Required pod affinity to its own pods on kubernetes.io/hostname: the group shares one node."""
    return host_self_affinity_term(pod, namespace_labels) is not None


def unmodelled(classes: Sequence[PodClass], namespace_labels: Mapping[str, dict[str, str]],
               counters: Sequence[NodeCounter] = ()) -> list[str]:
    """Constraints pods carry that no rule models; pairs a capacity-1 counter keeps apart are modelled."""
    apart = [set(c.uses) for c in counters if c.new_capacity == 1 and c.port is None and c.selector is None]
    notes = []
    for c in classes:
        pod = c.representative
        own = (pod.namespace, pod.labels)
        other_keys = {t.topology_key for t in pod.pod_anti_affinity if t.topology_key != HOSTNAME
                      and not (t.topology_key == ZONE and t.selects(*own, *own))}
        if other_keys:
            notes.append(f"{c.name}: required pod anti-affinity on {', '.join(sorted(other_keys))} is not modelled")
        if any(not (t.topology_key in (ZONE, HOSTNAME) and t.selects(*own, *own)) for t in pod.pod_affinity):
            notes.append(f"{c.name}: required pod affinity other than to its own pods is not modelled")
        unmodelled_spread = [s for i, s in enumerate(pod.topology_spread) if not modelled_spread(pod)[i]]
        if unmodelled_spread:
            keys = ", ".join(sorted({f"{s.topology_key} ({s.when_unsatisfiable})" for s in unmodelled_spread}))
            notes.append(f"{c.name}: topology spread on {keys} is not modelled")
        if pod.preferred_pod_affinity or pod.preferred_pod_anti_affinity:
            notes.append(f"{c.name}: preferred pod (anti-)affinity is not modelled")
        if pod.resource_claims:
            notes.append(f"{c.name}: DRA resource claims are not modelled")
    repelling = [c for c in classes if c.representative.pod_anti_affinity]
    for c in repelling:  # a pair repels only if one of them has a term: O(repelling × classes)
        for other in classes:
            if other.index == c.index or (other.representative.pod_anti_affinity and other.index < c.index):
                continue
            if repels(c.representative, other.representative, namespace_labels) and not any(
                    {c.index, other.index} <= group for group in apart):
                notes.append(f"{c.name} and {other.name} repel each other on {HOSTNAME}: not modelled")
    return notes
