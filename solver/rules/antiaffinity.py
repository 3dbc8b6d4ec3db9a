"""Required pod anti-affinity on ``kubernetes.io/hostname``: a node already running a pod a class repels (or
that repels the class — anti-affinity is symmetric) is closed to that class; pending pods that repel
each other are kept apart by per-node counters (``counters.py``), on other keys by pins
(``topology.py``, ``podaffinity.py``). What no rule models ``unmodelled`` names, so the plan says so."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING

from model.affinity import PodAffinityTerm, repels
from model.labels import HOSTNAME
from model.pod import Pod
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule, Why
from solver.rules.counters import NodeCounter, anti_affinity_counters, conservative, separates
from solver.rules.podaffinity import confined, selects_own

if TYPE_CHECKING:
    from solver.problem import Problem


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


def unmodelled_pairs(classes: Sequence[PodClass], namespace_labels: Mapping[str, dict[str, str]],
                     counters: Sequence[NodeCounter]) -> list[str]:
    """Pending classes that repel each other on the hostname and that no counter keeps apart."""
    notes = []
    repelling = [c for c in classes if c.representative.pod_anti_affinity]
    for c in repelling:  # a pair repels only if one of them has a term: O(repelling × classes)
        for other in classes:
            if other.index == c.index or (other.representative.pod_anti_affinity and other.index < c.index):
                continue
            if repels(c.representative, other.representative, namespace_labels) and not any(
                    separates(counter, c.index, other.index) for counter in counters):
                notes.append(f"{c.name} and {other.name} repel each other on {HOSTNAME}: not modelled")
    return notes


def _settled(pod_class: PodClass) -> bool:
    """Is the class already left pending with a reason (nothing of it lands, so nothing to model)?"""
    return bool(pod_class.representative.rule_problem or pod_class.representative.volume_problem)


class HostnameAffinity(Rule):
    """Required pod affinity on the hostname to the pod's own kind: a group with no match running is one
    bundle on one new node; a group with matches running may only join their nodes."""

    name = f"pod affinity on {HOSTNAME}"
    reads = ("Namespace",)
    relaxable = True

    def bundles(self, batch: BatchContext, pods: Sequence[Pod]) -> Mapping[str, Hashable]:
        return host_affinity_bundles(pods, batch.running, batch.namespaces)

    def admit(self, batch: BatchContext, problem: Problem) -> None:
        for c in problem.classes:
            if c.bundle or not self_affine_on_host(c.representative, batch.namespaces):
                continue
            problem.template_ok[c.index] = False
            for e, cap in enumerate(problem.existing):
                if problem.existing_ok[c.index, e]:
                    problem.existing_ok[c.index, e] = any(affinity_matches(c.representative, other, batch.namespaces)
                                                          for other in batch.bound.get(cap.name, []))

    def explain(self, why: Why) -> str:
        if not why.admitted and why.pod.pod_affinity:
            return ("required pod affinity on kubernetes.io/hostname: it must join a node already running its "
                    "group, and none of those has room")
        if why.admitted and not why.fits and why.pod_class.bundle:
            return (f"required pod affinity on kubernetes.io/hostname puts all {why.pod_class.unit} pods of its "
                    "group on one node, and no instance type the NodePools allow holds them all")
        return ""

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        bundled = [c.name for c in classes if c.bundle]
        return [f"{name}: its self-affine group shares one new node (Kubernetes needs only a matching pod on "
                "each pod's node)" for name in bundled]

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        return [f"{c.name}: required pod affinity on {HOSTNAME} to pending pods of other workloads (none running) "
                "is not modelled" for c in classes if not _settled(c)
                for term in c.representative.pod_affinity if term.topology_key == HOSTNAME
                and not selects_own(c.representative, term) and not confined(c.representative, HOSTNAME)]


class HostnameAntiAffinity(Rule):
    """Required pod anti-affinity on the hostname: nodes running a repelled (or repelling) pod are closed;
    pending pods that repel each other are kept apart by counters (``counters.anti_affinity_counters``)."""

    name = f"pod anti-affinity on {HOSTNAME}"
    reads = ("Namespace",)
    relaxable = True
    counter_names = {"repel": f"required pod anti-affinity on {HOSTNAME}",
                     "repel-other": f"required pod anti-affinity between workloads on {HOSTNAME}"}

    def admit(self, batch: BatchContext, problem: Problem) -> None:
        if not any(p.pod_anti_affinity for p in batch.running) and not any(
                c.representative.pod_anti_affinity for c in problem.classes):
            return
        for c in problem.classes:
            for e, cap in enumerate(problem.existing):
                if problem.existing_ok[c.index, e] and blocked_by_bound_pods(c, batch.bound.get(cap.name, []),
                                                                             batch.namespaces):
                    problem.existing_ok[c.index, e] = False

    def counters(self, batch: BatchContext, classes: Sequence[PodClass]) -> Sequence[NodeCounter]:
        return anti_affinity_counters(classes, batch.namespaces)

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        return unmodelled_pairs([c for c in classes if not _settled(c)], batch.namespaces, counters)

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        """Counters that also keep apart pods Kubernetes lets share a node (``counters.conservative``): a
        cross-class counter keeps the smaller side's pods apart from each other too; self-matching terms'
        counters are exact."""
        return conservative(classes, [c for c in counters if c.name.split(":", 1)[0] in ("repel", "repel-other")])
