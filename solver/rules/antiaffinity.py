"""Required pod (anti-)affinity on ``kubernetes.io/hostname``.

Anti-affinity: a node already running a pod a class repels (or that repels the class — anti-affinity is
symmetric) is closed to that class; pending pods that repel each other are kept apart by per-node counters
(``counters.py``), on other keys by pins (``topology.py``, ``podaffinity.py``).

Affinity, when no pod the term selects runs yet, as *bundles* (pods that land whole on one new node):
- to its own pods: the carriers of one term are one bundle, together with every other pending pod the term
  selects when those agree with them on every per-class rule and all fit one node — the one layout that
  holds whatever order the kube-scheduler binds them in (the first pod may go anywhere only while no pod
  its term selects is bound, so a selected pod binding on another node first would strand the group);
  otherwise a lone carrier takes the smallest such pod as its partner, as Kubernetes needs one beside it;
- to pending pods of another workload (X's term selects Y's pods, not X's): X's pods are cut into as few
  bundles as fit one node, each holding one Y pod, so every node with an X pod holds a Y pod. X pods beyond
  what the Y pods can host, or whose Y pods cannot share a bundle with them, stay pending with a reason.
What no rule models ``unmodelled`` names, so the plan says so."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from model.affinity import LabelSelector, PodAffinityTerm, repels
from model.labels import HOSTNAME, ZONE
from model.pod import Pod
from model.resources import Resources
from model.taints import untolerated
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


def _class_rules(pod: Pod) -> tuple[object, ...]:
    """What per-class rules read of a pod beyond its labels, node requirements and hostname affinity."""
    return (pod.pod_anti_affinity, pod.preferred_pod_affinity, pod.preferred_pod_anti_affinity, pod.topology_spread,
            pod.host_ports, pod.volume_problem, pod.rule_problem, pod.resource_claims, pod.preferred_terms)


def _host_rules(pod: Pod) -> tuple[object, ...]:
    """What per-class rules read of a pod once domain rules are pins: its hostname anti-affinity and spread
    (counters), preferred pod terms, host ports, resource claims and preferences."""
    return (tuple(t for t in pod.pod_anti_affinity if t.topology_key == HOSTNAME), pod.preferred_pod_affinity,
            pod.preferred_pod_anti_affinity, tuple(s for s in pod.topology_spread if s.topology_key == HOSTNAME),
            pod.host_ports, pod.volume_problem, pod.rule_problem, pod.resource_claims, pod.preferred_terms)


def _same_rules(a: Pod, b: Pod) -> bool:
    """Could ``b`` share ``a``'s bundle class without changing what any per-class rule reads? Same labels,
    node requirements, tolerations and pod rules; only requests and non-hostname pod affinity (already
    turned into pins, so into node requirements) may differ."""
    return (a.namespace == b.namespace and a.labels == b.labels and a.node_requirements() == b.node_requirements()
            and frozenset(a.tolerations) == frozenset(b.tolerations)
            and not any(t.topology_key == HOSTNAME for t in b.pod_affinity)
            and a.volume_terms == b.volume_terms and _class_rules(a) == _class_rules(b))


def _blocked(pod: Pod) -> bool:
    """Does an earlier rule leave the pod pending (it binds nowhere, so no term may count on it)?"""
    return bool(pod.rule_problem or pod.volume_problem)


class _Rooms:
    """What one node can hold, per (node requirements, tolerations): the allocatable of every template (after
    DaemonSets) and the free room of every existing node the pods may use (memoised)."""

    def __init__(self, batch: BatchContext | None) -> None:
        self.batch = batch
        self._memo: dict[object, list[Resources]] = {}

    def of(self, pod: Pod) -> list[Resources]:
        memo = (pod.node_requirements(), frozenset(pod.tolerations))
        if memo not in self._memo:
            out: list[Resources] = []
            if self.batch is not None:
                out += [t.allocatable for t in self.batch.templates if pod.accepts_labels(t.labels)
                        and not untolerated(pod.tolerations, t.pool.taints)]
                out += [e.free for e in self.batch.existing if pod.accepts_labels(e.node.labels)
                        and not untolerated(pod.tolerations, e.node.taints)]
            self._memo[memo] = out
        return self._memo[memo]

    def holds(self, pods: Sequence[Pod]) -> bool:
        """Do the pods fit one node together (no batch known: assume they do)?"""
        if self.batch is None:
            return True
        total = Resources()
        for pod in pods:
            total = total + pod.requests
        return any(total.fits_in(room) for room in self.of(pods[0]))


def host_affinity_bundles(pending: Sequence[Pod], running: Sequence[Pod],
                          namespace_labels: Mapping[str, dict[str, str]], batch: BatchContext | None = None,
                          rooms: _Rooms | None = None) -> dict[str, tuple[str, PodAffinityTerm]]:
    """Pod key → bundle key for required pod affinity to its own pods on kubernetes.io/hostname when no
    matching pod runs yet: the pods carrying one term share one new node (a bundle).

    Kubernetes lets the first pod of such a group go anywhere, but only while no other pod its term selects
    exists (is bound): each carrier needs *another* matching pod on its node, and once any selected pod
    binds, only its node is left to the group. So every other pending pod the term selects (the diverse mix:
    zone self-affinity pods share the hostname ones' label) joins the bundle when each agrees with the
    carriers on every per-class rule and all of them fit one node (``batch`` tells what a node holds; none
    given: assumed to fit): that layout holds in any bind order. Otherwise a lone carrier takes the smallest
    such pod as its partner, or it breaks its term wherever those land (without one it stays alone)."""
    rooms = rooms or _Rooms(batch)
    carriers: dict[tuple[str, PodAffinityTerm], list[Pod]] = {}
    for pod in pending:
        term = host_self_affinity_term(pod, namespace_labels)
        if term is None or _blocked(pod) or any(affinity_matches(pod, other, namespace_labels) for other in running):
            continue
        carriers.setdefault((pod.namespace, term), []).append(pod)
    out = {pod.key: key for key, members in carriers.items() for pod in members}
    by_labels = _label_classes(pending) if carriers else {}
    for key, members in carriers.items():
        lone, term = members[0], key[1]
        chosen = _selected(term, lone, by_labels, namespace_labels)
        selected = [p for p in chosen if p.key not in out and not _blocked(p)]
        taken = [p for p in chosen if out.get(p.key) not in (None, key)]
        partners = [p for p in selected if _same_rules(lone, p)]
        if selected and not taken and len(partners) == len(selected) and rooms.holds([*members, *partners]):
            out.update((p.key, key) for p in partners)
        elif len(members) == 1 and partners:
            out[min(partners, key=lambda p: (sorted(p.requests.items()), p.key)).key] = key
    return out


def _label_classes(pods: Sequence[Pod]) -> dict[tuple[str, frozenset[tuple[str, str]]], list[Pod]]:
    """Pods by (namespace, labels): a selector is matched once per class, not once per pod."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], list[Pod]] = {}
    for pod in pods:
        out.setdefault((pod.namespace, frozenset(pod.labels.items())), []).append(pod)
    return out


def _selected(term: PodAffinityTerm, owner: Pod, by_labels: Mapping[tuple[str, frozenset[tuple[str, str]]], list[Pod]],
              namespace_labels: Mapping[str, dict[str, str]]) -> list[Pod]:
    """The pods (in ``by_labels``) the owner's term selects, label class by label class."""
    return [p for (namespace, labels), members in by_labels.items()
            if term.selects(owner.namespace, owner.labels, namespace, dict(labels), namespace_labels.get(namespace))
            for p in members]


# -- required affinity on the hostname to pending pods of another workload ----------------------------------------

@dataclass
class CrossPlan:
    """Bundles for required hostname affinity to other workloads' pending pods (``cross_host_plan``)."""

    #: pod key → bundle key (the self-affine bundles too: one pod, one bundle)
    bundles: dict[str, Hashable] = field(default_factory=dict)
    #: pod key → its copy for the bundle (an owner taking its partner's node requirements) or a refusal
    copies: dict[str, Pod] = field(default_factory=dict)
    #: owner workload → how its pods were bundled, for ``conservative``
    notes: dict[str, str] = field(default_factory=dict)


def _host_terms(pod: Pod) -> list[PodAffinityTerm]:
    return [t for t in pod.pod_affinity if t.topology_key == HOSTNAME]


def _workload(pod: Pod) -> str:
    return f"{pod.namespace}/{pod.owner_name or pod.name}"


def _label_readers(pods: Sequence[Pod]) -> list[tuple[str, Mapping[str, str], PodAffinityTerm | LabelSelector]]:
    """Every hostname selector a per-class rule matches against a class's labels (its representative's):
    required anti-affinity and preferred (anti-)affinity terms, and spread constraints, on the hostname."""
    out: dict[object, tuple[str, Mapping[str, str], PodAffinityTerm | LabelSelector]] = {}
    for pod in pods:
        for term in (*pod.pod_anti_affinity, *pod.preferred_pod_affinity, *pod.preferred_pod_anti_affinity):
            if term.topology_key == HOSTNAME:
                projection = tuple(pod.labels.get(k) for k in term.match_label_keys + term.mismatch_label_keys)
                out.setdefault((pod.namespace, projection, term), (pod.namespace, pod.labels, term))
        for spread in pod.topology_spread:
            selector = spread.selector_for(pod.labels)
            if spread.topology_key == HOSTNAME and selector is not None:
                out.setdefault((pod.namespace, selector), (pod.namespace, pod.labels, selector))
    return list(out.values())


def _reads_apart(readers: Sequence[tuple[str, Mapping[str, str], PodAffinityTerm | LabelSelector]], a: Pod, b: Pod,
                 namespace_labels: Mapping[str, dict[str, str]]) -> bool:
    """Does some per-class rule select one of the two pods but not the other (then a bundle class holding
    both would be read by its representative's labels alone)?"""
    for namespace, labels, rule in readers:
        if isinstance(rule, LabelSelector):
            one = a.namespace == namespace and rule.matches(a.labels)
            other = b.namespace == namespace and rule.matches(b.labels)
        else:
            one = rule.selects(namespace, labels, a.namespace, a.labels, namespace_labels.get(a.namespace))
            other = rule.selects(namespace, labels, b.namespace, b.labels, namespace_labels.get(b.namespace))
        if one != other:
            return True
    return False


def _partner_problem(owner: Pod, partner: Pod, readers: Sequence[tuple[str, Mapping[str, str],
                                                                     PodAffinityTerm | LabelSelector]],
                     namespace_labels: Mapping[str, dict[str, str]], joining: bool = False) -> str:
    """Why ``partner`` cannot share a bundle with ``owner`` ("" when it can; the owner takes the partner's node
    requirements when it has none of its own). ``joining``: the partner is in a bundle already, whose own
    hostname affinity that bundle meets."""
    if partner.namespace != owner.namespace:
        return "they run in another namespace"
    if _host_terms(partner) and not joining:
        return "they carry required pod affinity on the hostname of their own"
    if _host_rules(partner) != _host_rules(owner):
        return "they carry other per-node pod rules (hostname anti-affinity or spread, host ports, preferences)"
    if frozenset(partner.tolerations) != frozenset(owner.tolerations):
        return "they tolerate other taints"
    if not _implied(owner, partner):
        return "they may run on other nodes (node selection or domain pins)"
    if _reads_apart(readers, owner, partner, namespace_labels):
        return "a hostname anti-affinity or spread rule selects one of them but not the other"
    return ""


def _implied(owner: Pod, partner: Pod) -> bool:
    """Does every node requirement of the owner appear among the partner's (then the partner's node is one
    the owner may use, and the owner may take the partner's requirements as they are)?"""
    if owner.node_requirements() == partner.node_requirements():
        return True
    return (all(partner.node_selector.get(k) == v for k, v in owner.node_selector.items())
            and owner.required_terms in ((), partner.required_terms)
            and owner.zone_pin in ("", partner.zone_pin)
            and set(owner.volume_terms + owner.rule_terms) <= set(partner.volume_terms + partner.rule_terms))


def _adopt(owner: Pod, partner: Pod) -> Pod:
    """The owner with its partner's node requirements (which imply its own: ``_implied``; the bundle's node
    is the partner's), so both read the same to node selection."""
    if owner.node_requirements() == partner.node_requirements():
        return owner
    return owner.model_copy(update={
        "node_selector": partner.node_selector, "required_terms": partner.required_terms,
        "zone_pin": partner.zone_pin, "volume_terms": (),
        "rule_terms": partner.volume_terms + partner.rule_terms,
        "rule_reasons": tuple(f"volume topology of {partner.key}, beside which it runs" for _ in partner.volume_terms)
        + partner.rule_reasons})


def _chunks(owners: list[Pod], base: Sequence[Pod], rooms: _Rooms) -> list[list[Pod]] | None:
    """The owners cut into as few groups as fit one node beside ``base`` (one partner, or a bundle they
    join) each, as even as possible (None: not even one owner fits beside it)."""
    if not rooms.holds([*base, owners[0]]):
        return None
    low, high = 1, len(owners)  # the most owners (in order) that fit beside it: binary search
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if rooms.holds([*base, *owners[:mid]]) else (low, mid - 1)
    for count in range(-(-len(owners) // low), len(owners) + 1):
        groups = [owners[i::count] for i in range(count)]
        if all(rooms.holds([*base, *g]) for g in groups):
            return groups
    return [[owner] for owner in owners]


def cross_host_plan(pending: Sequence[Pod], batch: BatchContext) -> CrossPlan:
    """The bundles of ``HostnameAffinity``: self-affine groups (``host_affinity_bundles``) first, then
    required hostname affinity to pending pods of another workload (X's term selects Y's pods, not X's
    own, and no pod it selects runs): X's pods go in as few bundles as fit one node, each beside one Y pod
    the self-affine bundles did not take (the smallest first), so every node holding an X pod holds a Y
    pod, which is all Kubernetes asks. X pods left over — the Y pods run out, none fits beside one, or none
    may share a bundle with it — stay pending with the reason. A lone self-affine pod that found no partner
    of its own kind while its term selects other workloads' pending pods is planned the same way (it needs
    one of them on its node). Pods a later step leaves pending take their bundle-mates that needed them
    along (``_propagate``)."""
    namespaces = batch.namespaces
    rooms = _Rooms(batch)
    plan = CrossPlan()
    keyed = [(p.key, p) for p in pending]  # a pod's key is built on each read: once here, not per bundle
    plan.bundles.update(host_affinity_bundles(pending, batch.running, namespaces, batch, rooms))
    _unify(pending, plan)
    sizes: dict[Hashable, int] = {}
    for bundle in plan.bundles.values():
        sizes[bundle] = sizes.get(bundle, 0) + 1
    groups: dict[tuple[object, ...], list[Pod]] = {}
    for pod in pending:
        terms = _host_terms(pod)
        if _blocked(pod) or len(terms) != 1 or terms[0].selector is None:
            continue
        term = terms[0]
        if selects_own(pod, term):
            if pod.key not in plan.bundles or sizes[plan.bundles[pod.key]] > 1 or not any(
                    p.key != pod.key and not _blocked(p) and term.selects(
                        pod.namespace, pod.labels, p.namespace, p.labels, namespaces.get(p.namespace))
                    for p in pending):
                continue
            del plan.bundles[pod.key]  # alone, while its term selects other pending pods: it needs one of them
        if any(term.selects(pod.namespace, pod.labels, o.namespace, o.labels, namespaces.get(o.namespace))
               for o in batch.running):
            continue  # running matches: ``rules.podaffinity`` confines it to their nodes
        groups.setdefault((pod.namespace, term, frozenset(pod.labels.items()), pod.node_requirements(),
                           frozenset(pod.tolerations)), []).append(pod)
    if not groups:
        return plan
    readers = _label_readers([*pending, *batch.running])
    by_labels = _label_classes(pending)
    owner_keys = {p.key for members in groups.values() for p in members}
    used: set[str] = set(plan.bundles)
    for owners in sorted(groups.values(), key=lambda members: (_workload(members[0]), members[0].key)):
        owner = owners[0]
        namespace, term = owner.namespace, _host_terms(owner)[0]
        selector = term.selector.describe() if term.selector else "no pod"
        why = f"required pod affinity with {selector} on {HOSTNAME}"
        targets = [p for p in _selected(term, owner, by_labels, namespaces)
                   if p.key not in owner_keys and not _blocked(p)]
        problems = {p.key: _partner_problem(owner, p, readers, namespaces) for p in targets if p.key not in used}
        partners = sorted((p for p in targets if p.key in problems and not problems[p.key]),
                          key=lambda p: (sorted(p.requests.items()), p.key))
        left = sorted(owners, key=lambda p: p.key)
        bundled = 0
        for partner in partners:
            if not left:
                break
            chunks = _chunks(left, [partner], rooms)
            if chunks is None:
                continue
            chunk = chunks[0]  # one partner, one group: the next partner takes the next group
            key = ("cross", namespace, term, partner.key)
            for member in chunk:
                plan.bundles[member.key] = key
                plan.copies[member.key] = _adopt(member, partner)
            plan.bundles[partner.key] = key
            used.add(partner.key)
            bundled += 1
            chosen = {p.key for p in chunk}
            left = [p for p in left if p.key not in chosen]
        # the pods it selects that are bundled already (their own self-affine group, another workload's
        # bundle): the rest of its pods may join such a bundle, on its node
        joinable = sorted({plan.bundles[p.key] for p in targets if p.key in plan.bundles}, key=repr)
        for bundle in joinable:
            if not left:
                break
            members = [p for key, p in keyed if plan.bundles.get(key) == bundle]
            members = [plan.copies.get(p.key, p) for p in members]
            if len({(m.node_requirements(), frozenset(m.tolerations)) for m in members}) > 1:
                continue  # not one bundle after all (its pods may run on different nodes): nothing to join
            problem = next((trouble for m in members
                            if (trouble := _partner_problem(owner, m, readers, namespaces, True))), "")
            if problem:
                problems.update((p.key, problem) for p in targets if plan.bundles.get(p.key) == bundle)
                continue
            chunks = _chunks(left, members, rooms)
            if chunks is None:
                problems.update((p.key, "their bundle has no room for it") for p in targets
                                if plan.bundles.get(p.key) == bundle)
                continue
            for member in chunks[0]:
                plan.bundles[member.key] = bundle
                plan.copies[member.key] = _adopt(member, members[0])
            bundled += 1
            chosen = {p.key for p in chunks[0]}
            left = [p for p in left if p.key not in chosen]
        if bundled:
            plan.notes[_workload(owner)] = (
                f"{_workload(owner)}: required pod affinity on {HOSTNAME} to other workloads' pending pods puts its "
                f"pods in {bundled} bundle(s), each on one node beside one pod it selects (Kubernetes also lets "
                "them spread over any nodes holding such a pod)")
        if not left:
            continue
        if not targets:
            reason = f"{why}: none of the pending pods it selects can be scheduled, and none runs"
        elif not bundled:
            shown = sorted({f"{_workload(p)} ({problems[p.key]})" for p in targets if problems.get(p.key)})
            reason = (f"{why}: none of the {len(targets)} pending pods it selects can share a node plan with it"
                      + (f": {', '.join(shown[:3])}" if shown else " (all of them are bundled with their own group)"))
            plan.notes.setdefault(_workload(owner), f"{_workload(owner)}: left pending: {reason} (Kubernetes "
                                                    "might still find such a node)")
        else:
            reason = (f"{why}: each node holding it needs one of the pods it selects, and those that may share one "
                      f"with it host only {len(owners) - len(left)} of its {len(owners)} pods")
        for pod in left:
            plan.copies[pod.key] = pod.model_copy(update={"rule_problem": reason})
    _propagate(pending, plan, batch)
    return plan


def _unify(pending: Sequence[Pod], plan: CrossPlan) -> None:
    """A bundle lands on one node, so its pods must read alike to node selection: when they differ (one
    replica with node affinity of its own) and one member's requirements include every other's, the others
    take that member's (the node the whole bundle needs anyway); otherwise the bundle stays as it is and
    ``build_classes`` keeps its pods apart (they then stay pending)."""
    members: dict[Hashable, list[Pod]] = {}
    for pod in pending:
        if pod.key in plan.bundles:
            members.setdefault(plan.bundles[pod.key], []).append(plan.copies.get(pod.key, pod))
    for mates in members.values():
        if len({(m.node_requirements(), frozenset(m.tolerations)) for m in mates}) == 1:
            continue
        strictest = next((m for m in mates if all(frozenset(x.tolerations) == frozenset(m.tolerations)
                                                  and _implied(x, m) for x in mates)), None)
        if strictest is not None:
            for mate in mates:
                plan.copies[mate.key] = _adopt(mate, strictest)


def _pinned_domain(pod: Pod, key: str) -> str | None:
    """The one domain a domain pin (``rules.topology``) holds the pod to on ``key``, if any."""
    if key == ZONE and pod.zone_pin:
        return pod.zone_pin
    for group in pod.rule_terms:
        if len(group) == 1 and len(group[0].items) == 1:
            req = group[0].items[0]
            if req.key == key and req.operator == "In" and len(req.values) == 1:
                return req.values[0]
    return None


def _propagate(pending: Sequence[Pod], plan: CrossPlan, batch: BatchContext) -> None:
    """Pods left pending here may be what others counted on, so to a fixed point: a pod leaves its bundle,
    and a bundle-mate whose hostname affinity no other pod of the bundle meets stays pending too; an owner of
    required affinity to other workloads on a domain key (``rules.topology`` pinned it beside one of the
    pods it selects) whose domain now holds no pinned pod it selects stays pending too."""
    refused = {k for k, p in plan.copies.items() if p.rule_problem}
    if not refused:
        return
    namespaces = batch.namespaces
    current = {p.key: plan.copies.get(p.key, p) for p in pending}
    owners = [p for p in current.values() if not _blocked(p) and any(
        t.topology_key != HOSTNAME and t.selector is not None and not selects_own(p, t) for t in p.pod_affinity)]

    def leave(pod: Pod, reason: str) -> None:
        plan.copies[pod.key] = current[pod.key] = current[pod.key].model_copy(update={"rule_problem": reason})
        refused.add(pod.key)

    # what an owner's term selects never changes here (leaving changes a pod's problem, not its labels): worked
    # out once per term and namespace, over the pods grouped by their label set (replicas share one)
    by_labels: dict[tuple[str, frozenset[tuple[str, str]]], tuple[str, Mapping[str, str], list[str]]] = {}
    for p in current.values():
        by_labels.setdefault((p.namespace, frozenset(p.labels.items())), (p.namespace, p.labels, []))[2].append(p.key)
    selections: dict[tuple[int, str, int], list[str]] = {}

    def selected_by(owner: Pod, term: PodAffinityTerm) -> list[Pod]:
        memo = (id(term), owner.namespace, id(owner.labels))
        if memo not in selections:
            selections[memo] = [k for namespace, labels, keys in by_labels.values()
                                if term.selects(owner.namespace, owner.labels, namespace, labels,
                                                namespaces.get(namespace)) for k in keys]
        return [current[k] for k in selections[memo] if k != owner.key]

    changed = True
    while changed:
        changed = False
        members: dict[Hashable, list[Pod]] = {}
        for key in [k for k in plan.bundles if k in refused]:
            del plan.bundles[key]
        for key, bundle in plan.bundles.items():
            members.setdefault(bundle, []).append(current[key])
        for mates in members.values():
            for pod in mates:
                for term in _host_terms(pod):
                    if any(m.key != pod.key and term.selects(pod.namespace, pod.labels, m.namespace, m.labels,
                                                             namespaces.get(m.namespace)) for m in mates):
                        continue
                    if selects_own(pod, term) and not any(
                            p.key != pod.key and not _blocked(p) and term.selects(
                                pod.namespace, pod.labels, p.namespace, p.labels, namespaces.get(p.namespace))
                            for p in current.values()):
                        continue  # nothing else it selects will exist: the first of its group goes anywhere
                    gone = next((current[k] for k in sorted(refused) if k != pod.key and term.selects(
                        pod.namespace, pod.labels, current[k].namespace, current[k].labels,
                        namespaces.get(current[k].namespace))), None)
                    if gone is None:
                        continue  # nothing it selects was left pending here: the bundle is as it was planned
                    leave(pod, f"required pod affinity with {term.selector.describe() if term.selector else 'no pod'}"
                               f" on {HOSTNAME}: the pod it was to share a node with stays pending "
                               f"({gone.key}: {gone.rule_problem})")
                    changed = True
                    break
        for owner in owners:
            if owner.key in refused:
                continue
            for term in owner.pod_affinity:
                domain = _pinned_domain(owner, term.topology_key)
                if term.topology_key == HOSTNAME or domain is None or selects_own(owner, term):
                    continue
                selected = selected_by(owner, term)
                if not any(p.key in refused for p in selected) or any(
                        p.key not in refused and not _blocked(p) and _pinned_domain(p, term.topology_key) == domain
                        for p in selected):
                    continue
                gone = next(p for p in selected if p.key in refused)
                leave(owner, f"required pod affinity with {term.selector.describe() if term.selector else 'no pod'} "
                             f"on {term.topology_key}: the pods it selects in {term.topology_key}={domain} stay "
                             f"pending ({gone.key}: {plan.copies[gone.key].rule_problem})")
                changed = True
                break


_STASH = "_hostname_affinity_plan"


def _stashed(batch: BatchContext) -> CrossPlan | None:
    """The plan ``HostnameAffinity.constrain`` made for this batch (the bundles phase reads it back)."""
    plan = batch.__dict__.get(_STASH)
    return plan if isinstance(plan, CrossPlan) else None


def unmodelled_pairs(classes: Sequence[PodClass], namespace_labels: Mapping[str, dict[str, str]],
                     counters: Sequence[NodeCounter]) -> list[str]:
    """Pending classes that repel each other on the hostname and that no counter keeps apart."""
    notes: list[str] = []
    repelling = [c for c in classes if c.representative.pod_anti_affinity]
    if not repelling:
        return notes
    # whether two pods repel reads their namespaces, labels and anti-affinity terms only: once per pair of
    # such groups (thousands of classes split by requests and pins are a few dozen groups)
    groups: dict[Hashable, list[int]] = {}
    for position, other in enumerate(classes):
        groups.setdefault(_repel_key(other.representative), []).append(position)
    for c in repelling:  # a pair repels only if one of them has a term: O(repelling × groups)
        hits = sorted(position for members in groups.values()
                      if repels(c.representative, classes[members[0]].representative, namespace_labels)
                      for position in members)
        for other in map(classes.__getitem__, hits):
            if other.index == c.index or (other.representative.pod_anti_affinity and other.index < c.index):
                continue
            if not any(separates(counter, c.index, other.index) for counter in counters):
                notes.append(f"{c.name} and {other.name} repel each other on {HOSTNAME}: not modelled")
    return notes


def _repel_key(pod: Pod) -> Hashable:
    """What ``repels`` reads of a pod."""
    return pod.namespace, frozenset(pod.labels.items()), pod.pod_anti_affinity


def _settled(pod_class: PodClass) -> bool:
    """Is the class already left pending with a reason (nothing of it lands, so nothing to model)?"""
    return bool(pod_class.representative.rule_problem or pod_class.representative.volume_problem)


class HostnameAffinity(Rule):
    """Required pod affinity on the hostname to the pod's own kind: a group with no match running is one
    bundle on one new node; a group with matches running may only join their nodes."""

    name = f"pod affinity on {HOSTNAME}"
    reads = ("Namespace",)
    relaxable = True

    def constrain(self, batch: BatchContext, pods: list[Pod]) -> list[Pod]:
        """Decide the bundles (``cross_host_plan``): owners of affinity to other workloads take their
        partners' node requirements, or stay pending."""
        if not any(_host_terms(p) for p in pods):
            batch.__dict__[_STASH] = CrossPlan()
            return pods
        plan = cross_host_plan(pods, batch)
        batch.__dict__[_STASH] = plan
        return [plan.copies.get(p.key, p) for p in pods]

    def bundles(self, batch: BatchContext, pods: Sequence[Pod]) -> Mapping[str, Hashable]:
        plan = _stashed(batch)
        if plan is None:
            return host_affinity_bundles(pods, batch.running, batch.namespaces, batch)
        return plan.bundles

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
        plan = _stashed(batch)
        cross = plan.notes if plan is not None else {}
        bundled = sorted({c.name for c in classes if c.bundle and any(
            host_self_affinity_term(p, batch.namespaces) for p in c.pods)})
        return [f"{name}: its self-affine group shares one new node (with the other pending pods its term selects "
                "when they fit: the layout that holds in any bind order; Kubernetes needs only a matching pod on "
                "each pod's node)" for name in bundled] + [cross[name] for name in sorted(cross)]

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        return [f"{c.name}: required pod affinity on {HOSTNAME} to pending pods of other workloads (none running) "
                "is not modelled" for c in classes if not _settled(c) and not c.bundle
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
