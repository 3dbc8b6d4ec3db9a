"""Required pod anti-affinity on ``kubernetes.io/hostname``: a node already running a pod a class repels (or
that repels the class — anti-affinity is symmetric) is closed to that class; pending pods that repel
each other are kept apart by per-node counters (``counters.py``), on other keys by pins
(``topology.py``, ``podaffinity.py``). What no rule models ``unmodelled`` names, so the plan says so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from model.affinity import PodAffinityTerm
from model.labels import HOSTNAME, ZONE
from model.pod import Pod
from solver.classes import PodClass
from solver.rules.counters import NodeCounter, modelled_spread, separates
from solver.rules.topology import domain_rules


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


def _same_rules(a: Pod, b: Pod) -> bool:
    """Could ``b`` share ``a``'s bundle class without changing what any per-class rule reads? Same labels,
    node requirements, tolerations and pod rules; only requests and non-hostname pod affinity (already
    turned into pins, so into node requirements) may differ."""
    return (a.namespace == b.namespace and a.labels == b.labels and a.node_requirements() == b.node_requirements()
            and frozenset(a.tolerations) == frozenset(b.tolerations)
            and not any(t.topology_key == HOSTNAME for t in b.pod_affinity)
            and (a.pod_anti_affinity, a.preferred_pod_affinity, a.preferred_pod_anti_affinity, a.topology_spread,
                 a.host_ports, a.volume_terms, a.volume_problem, a.rule_problem, a.resource_claims,
                 a.preferred_terms)
            == (b.pod_anti_affinity, b.preferred_pod_affinity, b.preferred_pod_anti_affinity, b.topology_spread,
                b.host_ports, b.volume_terms, b.volume_problem, b.rule_problem, b.resource_claims,
                b.preferred_terms))


def host_affinity_bundles(pending: Sequence[Pod], running: Sequence[Pod],
                          namespace_labels: Mapping[str, dict[str, str]]) -> dict[str, tuple[str, PodAffinityTerm]]:
    """Pod key → bundle key for required pod affinity to its own pods on kubernetes.io/hostname when no
    matching pod runs yet: the pods carrying one term share one new node (a bundle).

    Kubernetes lets the first pod of such a group go anywhere, but only while no other pod its term selects
    exists: each carrier needs *another* matching pod on its node. Two or more carriers together satisfy
    each other. A lone carrier whose term also selects pending pods that do not carry it (the diverse mix:
    zone self-affinity pods share the hostname ones' label) must therefore sit beside one of them, or it
    breaks its term wherever those land: the smallest such pod that agrees with it on every per-class rule
    joins its bundle. (Without such a partner it stays alone, as before.)"""
    carriers: dict[tuple[str, PodAffinityTerm], list[Pod]] = {}
    for pod in pending:
        term = host_self_affinity_term(pod, namespace_labels)
        if term is None or any(affinity_matches(pod, other, namespace_labels) for other in running):
            continue
        carriers.setdefault((pod.namespace, term), []).append(pod)
    out = {pod.key: key for key, members in carriers.items() for pod in members}
    for key, members in carriers.items():
        if len(members) != 1:
            continue
        lone, term = members[0], key[1]
        partners = [p for p in pending if p.key not in out and term.selects(
            lone.namespace, lone.labels, p.namespace, p.labels, namespace_labels.get(p.namespace))
            and _same_rules(lone, p)]
        if partners:
            out[min(partners, key=lambda p: (sorted(p.requests.items()), p.key)).key] = key
    return out


def _selects_other_class(pod: Pod, term: PodAffinityTerm, pod_class: PodClass, classes: Sequence[PodClass],
                         namespace_labels: Mapping[str, dict[str, str]]) -> bool:
    return any(o.index != pod_class.index and term.selects(pod.namespace, pod.labels, o.representative.namespace,
                                                           o.representative.labels,
                                                           namespace_labels.get(o.representative.namespace))
               for o in classes)


def _confined(pod: Pod, key: str) -> bool:
    """Did a rule confine the pod on ``key`` (to running matches' domains, or beside pending ones)?"""
    return (key == ZONE and bool(pod.zone_pin)) or any(
        req.key == key and req.operator == "In" for group in pod.rule_terms for alt in group for req in alt.items)


def unmodelled(classes: Sequence[PodClass], namespace_labels: Mapping[str, dict[str, str]],
               counters: Sequence[NodeCounter] = ()) -> list[str]:
    """Constraints pods carry that no rule models, one precise note each (the plan reports them)."""
    notes = []
    for c in classes:
        pod = c.representative
        own = (pod.namespace, pod.labels, pod.namespace, pod.labels)
        if pod.rule_problem or pod.volume_problem:
            continue  # unschedulable with a reason: nothing of it lands
        for term in pod.pod_anti_affinity:
            if term.topology_key != HOSTNAME and not term.selects(*own) and _selects_other_class(
                    pod, term, c, classes, namespace_labels):
                notes.append(f"{c.name}: required pod anti-affinity on {term.topology_key} towards pending pods "
                             "of other workloads is not modelled")
        for term in pod.pod_affinity:
            if not term.selects(*own) and not _confined(pod, term.topology_key):
                notes.append(f"{c.name}: required pod affinity on {term.topology_key} to pending pods of other "
                             "workloads (none running) is not modelled")
        for i, spread in enumerate(pod.topology_spread):
            if not modelled_spread(pod)[i]:
                notes.append(f"{c.name}: topology spread on {spread.topology_key} ({spread.when_unsatisfiable}) "
                             "is not modelled")
        for term in pod.preferred_pod_affinity + pod.preferred_pod_anti_affinity:
            if term.topology_key == HOSTNAME and term.selects(*own):
                notes.append(f"{c.name}: preferred pod (anti-)affinity on {HOSTNAME} to its own pods is not modelled")
            elif not term.selects(*own) and _selects_other_class(pod, term, c, classes, namespace_labels):
                notes.append(f"{c.name}: preferred pod (anti-)affinity on {term.topology_key} towards pending pods "
                             "of other workloads is not modelled")
        hard = [r for r in domain_rules(pod) if r.hard]
        if len(hard) > 1:
            notes.append(f"{c.name}: only its first hard topology rule ({hard[0].describe()}) pins it; "
                         + "; ".join(r.describe() for r in hard[1:]) + " not modelled")
        if pod.resource_claims:
            notes.append(f"{c.name}: DRA resource claims are not modelled")
    repelling = [c for c in classes if c.representative.pod_anti_affinity]
    for c in repelling:  # a pair repels only if one of them has a term: O(repelling × classes)
        for other in classes:
            if other.index == c.index or (other.representative.pod_anti_affinity and other.index < c.index):
                continue
            if repels(c.representative, other.representative, namespace_labels) and not any(
                    separates(counter, c.index, other.index) for counter in counters):
                notes.append(f"{c.name} and {other.name} repel each other on {HOSTNAME}: not modelled")
    return notes
