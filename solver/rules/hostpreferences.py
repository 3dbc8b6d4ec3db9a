"""Soft pod-to-pod rules that no per-node score can express, kept under the preference policy.

Kubernetes only *scores* these (kube-scheduler's PodTopologySpread and InterPodAffinity score plugins:
ScheduleAnyway "gives higher precedence to topologies that would help reduce the skew"; for preferred
terms the node with the greatest sum of the weights of the terms its pods satisfy wins), so no plan
breaks them. Karpenter first treats each as required and relaxes it only when a pod cannot be placed;
nodeplan's objective order is pods scheduled ≫ NodePool weight ≫ preferences (``Respect``) ≫ cost, so
keeping one may cost money, never a scheduled pod or a NodePool rank.

Under ``Respect`` (``Price``: below):

- ScheduleAnyway topology spread on kubernetes.io/hostname: the per-node counters DoNotSchedule gets
  (``counters.spread_counters``): maxSkew 1 — carriers take M + 1, the M rule-free matching pods 1,
  capacity M + 1, a node already running a match loses 1 (a carrier's node holds no other match);
  maxSkew s ≥ 2 — every match takes 1, capacity s less the matches running there. That is Karpenter's
  reading (each new node a domain counted at 0) and the most-spread placement, which more nodes always
  reach; it is stricter than kube-scheduler's skew when every node ends up holding a match.
- Preferred anti-affinity on the hostname to its own pods: one counter per term of capacity H (H the
  pending pods it selects that do not carry it, at least 1): carriers take H, those pods 1, so no
  carrier shares a node with a pod its term selects (exact). Running matches: ``rules.podaffinity``
  scores ``hostname NotIn`` their nodes.
- Preferred affinity on the hostname to its own pods, no match running: the carriers (two or more) are
  one bundle on one node. With matches running the term is scored towards their nodes
  (``rules.podaffinity``); a lone carrier with no other pending match has nothing to prefer.
- Preferred (anti-)affinity towards pending pods of other workloads, any key: ``constrain`` runs after
  ``DomainRules`` has pinned pods. The targets whose domain is then decided — every node they may use
  lies in one domain (a zone pin, a ``key In [value]`` rule term, their own node selection; on the
  hostname only a target confined to one existing node, since every new node is a domain of its own) —
  give the owner one preferred term with the term's weight, scored by ``rules.preferences``: affinity
  ``key In [their domains]`` (sufficient; targets still free are not counted, so it may cost more than
  needed; a term that also selects running pods is met beside them, ``rules.podaffinity`` scoring their
  domains), anti-affinity ``key NotIn [their domains]`` (exact when every target is decided, otherwise
  the note names what is not modelled).

Never a scheduled pod: counters are built for every rule instance and, once every family's admission is
known (``score`` runs after every ``admit``), switched off — their sizes and capacities zeroed, with a
note — unless every class that would have to move for it (the carriers; with maxSkew ≥ 2 every match)
has a new node it may use and fits on, and either every pending unit alone on a node of its
highest-weight NodePool stays within every NodePool limit, or no NodePool those classes fit in has
limits. Then any plan can keep the preference with as many pods at the same ranks: each offending pod
moves to a new node of its own. Bundles are formed before admission, so they ask more: no NodePool the
group may use has limits or minValues, each of them has an instance type that holds the whole group,
and no per-node rule (host ports, anti-affinity or spread on the hostname, the group's own or another
pod's that counts it, or another pod's required hostname affinity that wants one of it beside it)
touches the group.

``Ignore``: cost only — nothing is encoded and nothing noted. ``Price``: a per-node encoding cannot be
priced per pod, so each is kept whole (as under Respect) when one pod's weight × price is at least the
dearest node the pods it moves may launch — a kept preference then never costs more than it is worth,
one node per pod at most — and dropped otherwise, with a note; the terms towards other workloads are
priced exactly by the objective. Weights: the term's; ``SOFT_TOPOLOGY_WEIGHT`` for spread. With no policy
(``compile_problem`` called without one: consolidation, relaxed bounds) nothing is encoded and the notes
say so.

The phases share their findings through a ``_State`` kept on the batch: ``score`` switches counters off,
and ``unmodelled`` / ``conservative`` report what was decided.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from model.affinity import LabelSelector, PodAffinityTerm
from model.labels import HOSTNAME, ZONE
from model.minvalues import strict_keys
from model.pod import Pod, PreferredTerm
from model.requirements import Requirement, Requirements
from model.resources import Resources
from model.taints import untolerated
from solver.classes import PodClass, selector_label_keys
from solver.rules.base import BatchContext, Rule
from solver.rules.counters import NodeCounter, apart_groups, conservative
from solver.rules.podaffinity import selects_other_class, selects_own
from solver.rules.preferences import SOFT_TOPOLOGY_WEIGHT, PreferencePolicy

if TYPE_CHECKING:
    from solver.problem import Problem

SPREAD = "prefer-spread"
APART = "prefer-apart"
#: first element of this family's bundle keys (``HostnameAffinity``'s are (namespace, term) pairs)
TOGETHER = "prefer-together"

SPREAD_RULE = f"topology spread on {HOSTNAME} (ScheduleAnyway)"
APART_RULE = f"preferred pod anti-affinity on {HOSTNAME} to its own pods"
TOGETHER_RULE = f"preferred pod affinity on {HOSTNAME} to its own pods"


@dataclass
class SoftCounter(NodeCounter):
    """A per-node counter that keeps a preference (``counters.NodeCounter`` plus what notes need)."""

    #: the rule as notes name it
    rule: str = ""
    #: weight of one pod's preference (``Price`` compares weight × price with a node's price)
    weight: int = 0
    #: the classes carrying the rule
    carriers: tuple[int, ...] = ()
    #: the classes that move to new nodes of their own where the preference is kept: the carriers, or
    #: with maxSkew ≥ 2 every match (rule-free matches are capped too)
    movers: tuple[int, ...] = ()
    #: why it was switched off ("" while it holds)
    dropped: str = ""


@dataclass
class _State:
    """What one batch's phases found, for the later phases."""

    counters: list[SoftCounter] = field(default_factory=list)
    #: bundle group → why it is not one bundle ("" when it needs none, None when it is one)
    together: dict[Hashable, str | None] = field(default_factory=dict)
    #: (pod key, term, anti?) → what of a preference towards other pending pods is not modelled ("" none)
    towards: dict[tuple[str, PodAffinityTerm, bool], str] = field(default_factory=dict)


_STASH = "_host_preferences"


def _state(batch: BatchContext) -> _State:
    """This batch's findings, kept on the batch itself (so they go with it)."""
    state = batch.__dict__.get(_STASH)
    if not isinstance(state, _State):
        state = batch.__dict__[_STASH] = _State()
    return state


def _encodes(batch: BatchContext) -> bool:
    return batch.preference_policy in (PreferencePolicy.RESPECT, PreferencePolicy.PRICE)


def _settled(pod: Pod) -> bool:
    """Left pending with a reason already: nothing of it lands."""
    return bool(pod.rule_problem or pod.volume_problem)


def _pods(classes: Sequence[PodClass], indices: Sequence[int]) -> int:
    return sum(len(classes[k].pods) for k in indices)


def _noun(key: str) -> str:
    return {ZONE: "zone", HOSTNAME: "node"}.get(key, f"{key} domain")


# -- (a) ScheduleAnyway spread and (b) preferred self anti-affinity on the hostname: counters ----------------


def soft_spread_counters(classes: Sequence[PodClass]) -> list[SoftCounter]:
    """ScheduleAnyway spread on the hostname: one counter per (namespace, selector, maxSkew), shaped as
    DoNotSchedule's (``counters.spread_counters``)."""
    carriers_of: dict[tuple[str, LabelSelector, int], list[int]] = {}
    for c in classes:
        pod = c.representative
        if _settled(pod):
            continue
        for spread in pod.topology_spread:
            selector = spread.selector_for(pod.labels)
            if spread.topology_key != HOSTNAME or spread.when_unsatisfiable != "ScheduleAnyway" or selector is None:
                continue
            carriers = carriers_of.setdefault((pod.namespace, selector, spread.max_skew), [])
            if c.index not in carriers:
                carriers.append(c.index)
    out: list[SoftCounter] = []
    for (namespace, selector, skew), carriers in carriers_of.items():
        matched = [o.index for o in classes if o.representative.namespace == namespace
                   and selector.matches(o.representative.labels) and not _settled(o.representative)]
        rule_free = [k for k in matched if k not in carriers]
        strict = (f"ScheduleAnyway kept as at most maxSkew {skew} matching pods per node beside a carrier "
                  "(Kubernetes only scores it; Karpenter's reading, stricter than the skew when every eligible "
                  "node ends up holding a match)")
        if skew == 1:
            free = _pods(classes, rule_free)
            uses = dict.fromkeys(rule_free, 1) | dict.fromkeys(carriers, free + 1)
            capacity, movers = free + 1, tuple(carriers)
        else:
            if rule_free:
                strict += "; the matching pods that do not carry it are capped at maxSkew per node too"
            uses, capacity, movers = dict.fromkeys(matched, 1), skew, tuple(dict.fromkeys([*carriers, *matched]))
        out.append(SoftCounter(name=f"{SPREAD}:{namespace}/{len(out)}", uses=uses, new_capacity=capacity,
                               selector=(namespace, selector), star=skew == 1, strict=strict, rule=SPREAD_RULE,
                               weight=SOFT_TOPOLOGY_WEIGHT, carriers=tuple(carriers), movers=movers))
    return out


def soft_apart_counters(classes: Sequence[PodClass], namespace_labels: Mapping[str, dict[str, str]]
                        ) -> list[SoftCounter]:
    """Preferred anti-affinity on the hostname to its own pods: one counter per term (and the owner's
    values of its label keys), carriers taking the whole capacity H, the other pods it selects 1."""
    out: list[SoftCounter] = []
    for namespace, term, owners, selected in apart_groups(classes, lambda pod: pod.preferred_pod_anti_affinity,
                                                          namespace_labels, _settled):
        heavy = max(_pods(classes, selected), 1)
        out.append(SoftCounter(
            name=f"{APART}:{namespace}/{len(out)}", uses={k: heavy for k in owners} | dict.fromkeys(selected, 1),
            new_capacity=heavy, rule=APART_RULE, weight=term.weight, carriers=tuple(owners), movers=tuple(owners),
            strict="preferred anti-affinity kept as one carrier per node apart from the pods its term selects "
                   "(Kubernetes only scores it)"))
    return out


def _fits(problem: Problem, c: int, axes: np.ndarray, launchable: np.ndarray) -> np.ndarray:
    """Templates the class is admitted to, that launch within limits and hold one unit (on ``axes``)."""
    out: np.ndarray = (problem.template_ok[c] & launchable
                       & np.all(problem.template_alloc[:, axes] >= problem.sizes[c, axes], axis=1))
    return out


def _alone_within_limits(problem: Problem, fits: Mapping[int, np.ndarray]) -> bool:
    """Does every pending unit alone on a node of its highest-weight NodePool (the one that uses least of
    the limits) stay within every NodePool limit? Such a plan places every pod a new node can take, at
    the best ranks, and keeps every per-node preference."""
    used: dict[tuple[str, str], int] = {}
    for c in problem.classes:
        members = np.flatnonzero(fits[c.index])
        if not len(members):
            continue  # existing nodes only (or nowhere): no limit involved
        best = min(problem.templates[t].pool.rank for t in members)
        options = [problem.templates[t] for t in members if problem.templates[t].pool.rank == best]
        if any(not t.pool.limits_remaining for t in options):
            continue
        pick = min(options, key=lambda t: (max(use / max(t.pool.limits_remaining[n], 1)
                                               for n, use in t.limit_use.items()), t.sort_key))
        for name, use in pick.limit_use.items():
            used[(pick.pool.name, name)] = used.get((pick.pool.name, name), 0) + use * c.demand
    remaining = {(p.name, n): v for p in problem.pools for n, v in p.limits_remaining.items()}
    return all(v <= remaining[key] for key, v in used.items())


def _switch(batch: BatchContext, problem: Problem, counters: Sequence[SoftCounter]) -> None:
    """Switch off (in place) every counter that could cost a scheduled pod or a NodePool rank, or that
    ``Price`` values below a node (module docstring)."""
    axis = {name: i for i, name in enumerate(problem.axes)}
    others = np.ones(len(problem.axes), dtype=bool)
    others[[axis[c.name] for c in counters]] = False
    launchable = np.array([all(use <= t.pool.limits_remaining.get(n, use) for n, use in t.limit_use.items())
                           for t in problem.templates], dtype=bool)
    fits = {c.index: _fits(problem, c.index, others, launchable) for c in problem.classes}
    alone = _alone_within_limits(problem, fits)
    for counter in counters:
        j = axis[counter.name]
        own = {k: fits[k] & (problem.template_alloc[:, j] >= problem.sizes[k, j]) for k in counter.movers}
        nodes = sorted({int(t) for k in counter.movers for t in np.flatnonzero(own[k])})
        reason = ""
        if any(not own[k].any() for k in counter.movers):
            reason = ("a pod it would move has no new node it may use and fits on, so keeping it could leave "
                      "pods pending")
        elif not alone and any(problem.templates[t].pool.limits_remaining for t in nodes):
            reason = "NodePool limits could bind, and keeping it must never cost a scheduled pod"
        elif batch.preference_policy is PreferencePolicy.PRICE:
            dearest = max(problem.templates[t].offering.price for t in nodes)
            if counter.weight * batch.preference_price < dearest:
                reason = (f"under Price its weight {counter.weight} × ${batch.preference_price:g}/h is worth less "
                          f"than the dearest node its pods may launch (${dearest:g}/h), so cost decides; a partial "
                          "trade-off is not modelled")
        if reason:
            problem.sizes[:, j] = 0
            problem.template_alloc[:, j] = 0
            problem.existing_free[:, j] = 0
            counter.uses, counter.dropped = {}, reason


# -- (b) preferred self affinity on the hostname: bundles -----------------------------------------------------


def _together_term(pod: Pod) -> PodAffinityTerm | None:
    return next((t for t in pod.preferred_pod_affinity if t.topology_key == HOSTNAME and selects_own(pod, t)), None)


def _signature(pod: Pod, label_keys: frozenset[str]) -> Hashable:
    """What a bundle's members must share (everything a class key reads but the requests)."""
    return (pod.namespace, tuple(sorted((k, v) for k, v in pod.labels.items() if k in label_keys)),
            pod.node_requirements(), frozenset(pod.tolerations), pod.pod_affinity, pod.pod_anti_affinity,
            pod.preferred_pod_affinity, pod.preferred_pod_anti_affinity, pod.topology_spread, pod.host_ports,
            pod.volume_terms, pod.resource_claims, pod.preferred_terms)


def _host_rules_touch(members: Sequence[Pod], pods: Sequence[Pod], namespace_labels: Mapping[str, dict[str, str]]
                      ) -> bool:
    """Could a per-node rule keep the group off one node, or pair one of it elsewhere: its own host ports
    or hostname anti-affinity or spread, or another pending pod's hostname (anti-)affinity or spread that
    counts it?"""
    first = members[0]
    keys = {m.key for m in members}
    if first.host_ports or any(t.topology_key == HOSTNAME for t in first.pod_anti_affinity
                               + first.preferred_pod_anti_affinity) or any(
            s.topology_key == HOSTNAME for s in first.topology_spread):
        return True
    for pod in pods:
        # another pod's required hostname affinity may want them beside it (``HostnameAffinity``'s partners)
        terms = pod.pod_anti_affinity + pod.preferred_pod_anti_affinity + (
            () if pod.key in keys else pod.pod_affinity)
        for term in terms:
            if term.topology_key == HOSTNAME and term.selects(pod.namespace, pod.labels, first.namespace,
                                                              first.labels, namespace_labels.get(first.namespace)):
                return True
        for spread in pod.topology_spread:
            selector = spread.selector_for(pod.labels)
            if (spread.topology_key == HOSTNAME and selector is not None and pod.namespace == first.namespace
                    and selector.matches(first.labels)):
                return True
    return False


def together_key(pod: Pod) -> Hashable | None:
    """The group of a pod carrying a preferred affinity on the hostname to its own pods: (namespace, term,
    the pod's values of the term's label keys). Pods with a required hostname affinity are
    ``HostnameAffinity``'s."""
    term = _together_term(pod)
    if term is None or _settled(pod) or any(t.topology_key == HOSTNAME for t in pod.pod_affinity):
        return None
    return (TOGETHER, pod.namespace, term,
            tuple(pod.labels.get(k) for k in term.match_label_keys + term.mismatch_label_keys))


def together_groups(pods: Sequence[Pod]) -> dict[Hashable, list[Pod]]:
    groups: dict[Hashable, list[Pod]] = {}
    for pod in pods:
        key = together_key(pod)
        if key is not None:
            groups.setdefault(key, []).append(pod)
    return groups


def _together_refusal(batch: BatchContext, members: Sequence[Pod], pods: Sequence[Pod]) -> str | None:
    """None when the group becomes one bundle, "" when it needs none, else why it is not one."""
    first = members[0]
    term = _together_term(first)
    assert term is not None
    namespaces = batch.namespaces
    if any(term.selects(first.namespace, first.labels, o.namespace, o.labels, namespaces.get(o.namespace))
           for o, _ in batch.placed):
        return ""  # matches run: ``rules.podaffinity`` scores their nodes
    if len(members) == 1:
        keys = {m.key for m in members}
        others = [p for p in pods if p.key not in keys and not _settled(p) and term.selects(
            first.namespace, first.labels, p.namespace, p.labels, namespaces.get(p.namespace))]
        return "a single pod whose term selects pending pods of other workloads only" if others else ""
    label_keys = selector_label_keys(batch.snapshot.pods)
    if len({_signature(m, label_keys) for m in members}) > 1:
        return "its pods differ in node selection or other rules, so they cannot be one bundle"
    if _host_rules_touch(members, pods, namespaces):
        return ("host ports, pod (anti-)affinity or spread on the hostname touch the group, so one node may not "
                "take it")
    accepted = [t for t in batch.templates
                if not untolerated(first.tolerations, t.pool.taints) and first.accepts_labels(t.labels)]
    if not accepted:
        return "no NodePool can launch a node for it"
    pools = sorted({t.pool.name for t in accepted})
    bound = sorted({t.pool.name for t in accepted if t.pool.limits_remaining or strict_keys(t.pool.nodepool)})
    if bound:
        return (f"NodePool {', '.join(bound)} has limits or minValues, where one node for the whole group could "
                "cost a scheduled pod")
    total = Resources()
    for member in members:
        total = total + member.requests
    short = [p for p in pools if not any(total.fits_in(t.allocatable) for t in accepted if t.pool.name == p)]
    if short:
        return f"no instance type of NodePool {', '.join(short)} holds the whole group"
    if batch.preference_policy is PreferencePolicy.PRICE:
        dearest = max(t.offering.price for t in accepted)
        if term.weight * batch.preference_price < dearest:
            return (f"under Price its weight {term.weight} × ${batch.preference_price:g}/h is worth less than the "
                    f"dearest node it may launch (${dearest:g}/h), so cost decides")
    return None


# -- (c) preferences towards pending pods of other workloads: soft terms ----------------------------------------


class _Towards:
    """Where pending targets can land, decided before packing, and the soft term each owner gets."""

    def __init__(self, batch: BatchContext, pods: Sequence[Pod]) -> None:
        self.batch = batch
        self.pods = [p for p in pods if not _settled(p)]
        self._domains: dict[Hashable, frozenset[str] | None] = {}
        self._terms: dict[Hashable, tuple[PreferredTerm | None, str]] = {}

    def domains(self, pod: Pod, key: str) -> frozenset[str] | None:
        """The values of ``key`` on the nodes the pod may use; None when it may land where the value is not
        known before packing (a new node on the hostname, a node without the key)."""
        memo = (key, pod.node_requirements(), frozenset(pod.tolerations))
        if memo not in self._domains:
            values: set[str] = set()
            nodes = [(t.labels, t.pool.taints) for t in self.batch.templates]
            nodes += [({HOSTNAME: e.name, **e.node.labels}, list(e.node.taints)) for e in self.batch.existing]
            loose = False
            for n, (labels, taints) in enumerate(nodes):
                if untolerated(pod.tolerations, taints) or not pod.accepts_labels(labels):
                    continue
                if key not in labels or (key == HOSTNAME and n < len(self.batch.templates)):
                    loose = True
                    break
                values.add(labels[key])
            self._domains[memo] = None if loose else frozenset(values)
        return self._domains[memo]

    def term(self, pod: Pod, term: PodAffinityTerm, anti: bool) -> tuple[PreferredTerm | None, str]:
        """The owner's soft term towards the targets whose domain is decided, and what is not modelled."""
        memo = (pod.namespace, tuple(sorted(pod.labels.items())), term, anti)
        if memo not in self._terms:
            self._terms[memo] = self._derive(pod, term, anti)
        return self._terms[memo]

    def _derive(self, pod: Pod, term: PodAffinityTerm, anti: bool) -> tuple[PreferredTerm | None, str]:
        namespaces = self.batch.namespaces
        targets = [o for o in self.pods if o.key != pod.key and term.selects(
            pod.namespace, pod.labels, o.namespace, o.labels, namespaces.get(o.namespace))]
        if not targets:
            return None, ""  # only running pods, if any: ``rules.podaffinity`` scores them
        key = term.topology_key
        decided: set[str] = set()
        loose = 0
        for target in targets:
            domains = self.domains(target, key)
            if domains is None or len(domains) > 1:
                loose += 1
            else:
                decided |= domains  # none: it lands nowhere, so it counts nowhere
        operator: Literal["In", "NotIn"] = "NotIn" if anti else "In"
        soft = PreferredTerm(weight=term.weight, requirements=Requirements.of(
            [Requirement(key=key, operator=operator, values=tuple(sorted(decided)))])) if decided else None
        running = any(key in labels and term.selects(pod.namespace, pod.labels, o.namespace, o.labels,
                                                     namespaces.get(o.namespace)) for o, labels in self.batch.placed)
        noun = _noun(key)
        if anti:
            why = f"{loose} of the {len(targets)} pending pods it selects may land in more than one {noun}" \
                if loose else ""
        else:  # met beside the decided targets or the running matches (scored by ``rules.podaffinity``)
            why = "" if decided or running else (f"none of the {len(targets)} pending pods it selects is confined "
                                                 f"to one {noun} before packing")
        return soft, why


# -- the family --------------------------------------------------------------------------------------------------


def _legacy_notes(batch: BatchContext, classes: Sequence[PodClass]) -> list[str]:
    """No policy stated: nothing is encoded (the notes ``Preferences`` and ``HostnameSpread`` used to give)."""
    notes: list[str] = []
    for c in classes:
        pod = c.representative
        if _settled(pod):
            continue
        notes.extend(f"{c.name}: topology spread on {HOSTNAME} (ScheduleAnyway) is not modelled"
                     for s in pod.topology_spread if s.topology_key == HOSTNAME
                     and s.when_unsatisfiable == "ScheduleAnyway" and s.selector is not None)
        for term in pod.preferred_pod_affinity + pod.preferred_pod_anti_affinity:
            if term.topology_key == HOSTNAME and selects_own(pod, term):
                notes.append(f"{c.name}: preferred pod (anti-)affinity on {HOSTNAME} to its own pods is not modelled")
            elif not selects_own(pod, term) and selects_other_class(pod, term, c, classes, batch.namespaces):
                notes.append(f"{c.name}: preferred pod (anti-)affinity on {term.topology_key} towards pending pods "
                             "of other workloads is not modelled")
    return notes


class HostPreferences(Rule):
    """Soft pod-to-pod rules the node scores cannot hold: hostname spread and self-anti-affinity as
    per-node counters, hostname self-affinity as bundles, preferences towards pending pods of other
    workloads as soft terms after domain pins (module docstring)."""

    name = "soft pod-to-pod rules on the hostname and towards pending workloads"
    reads = ("Namespace",)
    relaxable = True
    counter_names = {SPREAD: f"topology spread on {HOSTNAME} (ScheduleAnyway, kept)",
                     APART: f"preferred pod anti-affinity on {HOSTNAME} (kept)"}

    def constrain(self, batch: BatchContext, pods: list[Pod]) -> list[Pod]:
        if not _encodes(batch) or not any(p.preferred_pod_affinity or p.preferred_pod_anti_affinity for p in pods):
            return pods
        towards = _Towards(batch, pods)
        state = _state(batch)
        out = []
        for pod in pods:
            extra: list[PreferredTerm] = []
            kinds = ((pod.preferred_pod_affinity, False), (pod.preferred_pod_anti_affinity, True))
            for terms, anti in kinds:
                for term in terms:
                    if _settled(pod) or selects_own(pod, term):
                        continue
                    soft, why = towards.term(pod, term, anti)
                    state.towards[(pod.key, term, anti)] = why
                    if soft is not None:
                        extra.append(soft)
            out.append(pod.model_copy(update={"preferred_terms": pod.preferred_terms + tuple(extra)}) if extra
                       else pod)
        return out

    def bundles(self, batch: BatchContext, pods: Sequence[Pod]) -> Mapping[str, Hashable]:
        if not _encodes(batch):
            return {}
        groups = together_groups(pods)
        if not groups:
            return {}
        state = _state(batch)
        out: dict[str, Hashable] = {}
        for key, members in groups.items():
            state.together[key] = _together_refusal(batch, members, pods)
            if state.together[key] is None:
                out.update(dict.fromkeys((m.key for m in members), key))
        return out

    def counters(self, batch: BatchContext, classes: Sequence[PodClass]) -> Sequence[NodeCounter]:
        if not _encodes(batch):
            return ()
        made = soft_spread_counters(classes) + soft_apart_counters(classes, batch.namespaces)
        if made:
            _state(batch).counters = made
        return made

    def score(self, batch: BatchContext, problem: Problem) -> None:
        state = _state(batch)
        if state.counters:
            _switch(batch, problem, state.counters)

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        if batch.preference_policy is None:
            return _legacy_notes(batch, classes)
        if not _encodes(batch):
            return []  # Ignore: cost alone decides, as asked
        state = _state(batch)
        notes = [f"{classes[k].name}: {counter.rule} is not modelled ({counter.dropped})"
                 for counter in state.counters if counter.dropped for k in counter.carriers]
        for c in classes:
            pod = c.representative
            if _settled(pod):
                continue
            why_not = state.together.get(together_key(pod))
            if why_not:
                notes.append(f"{c.name}: {TOGETHER_RULE} is not modelled ({why_not})")
            if _together_term(pod) is not None and any(t.topology_key == HOSTNAME and not selects_own(pod, t)
                                                       for t in pod.pod_affinity):
                notes.append(f"{c.name}: {TOGETHER_RULE} is not modelled (it also requires pod affinity on "
                             f"{HOSTNAME} to other pods)")
            for terms, anti in ((pod.preferred_pod_affinity, False), (pod.preferred_pod_anti_affinity, True)):
                for term in terms:
                    why = state.towards.get((pod.key, term, anti), "")
                    if why:
                        kind = "anti-affinity" if anti else "affinity"
                        notes.append(f"{c.name}: preferred pod {kind} on {term.topology_key} towards pending pods "
                                     f"of other workloads is not modelled where {why}")
        return notes

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        """A kept preference is a cap or a bundle Kubernetes does not impose (it only scores them)."""
        together = _state(batch).together
        bundled = sorted({c.name for c in classes if c.bundle and (key := together_key(c.representative)) in together
                          and together[key] is None})
        return conservative(classes, [c for c in counters if isinstance(c, SoftCounter) and not c.dropped]) + [
            f"{name}: {TOGETHER_RULE} kept as one bundle on one new node (Kubernetes only scores it, and a "
            "matching pod beside each would do)" for name in bundled]
