"""Domain-level pod rules on any topology key but the hostname, decided before packing by pinning pods.

A *domain* is a value of the topology key (a zone, a region, a rack label); Kubernetes checks spread and
self-(anti-)affinity against matching-pod counts per domain. Each such group of pods is turned into a
per-domain quota first, then every pod is pinned to its domain (a zone pin, or a ``key In [value]`` rule
term), so every later stage keeps the rule without knowing it. Domains are the values the nodes the
plan could use carry (templates and existing nodes the pod's node affinity accepts), so a key no template
or node carries gives no domain and the pod nowhere to go (Kubernetes: a node without the key fails a
DoNotSchedule constraint). The quota is chosen, not optimised: a cheaper split may exist when domain
prices differ (the KWOK catalog's zones do not).

Hard (one pin per pod; the first rule that groups it, zone rules first). Each hard rule's group is planned
once, whether or not the pod carrying it is already pinned (a constraint counts the pods its selector matches,
not its carrier); matching pods an earlier group pinned on the same key count in their domain:
- DoNotSchedule spread: the group (pending pods the selector matches, running ones counted) is
  water-filled across the domains, so final counts differ by at most one — within any maxSkew ≥ 1.
  With ``minDomains`` above the domains available each domain holds at most maxSkew (the global minimum
  then counts as 0).
- Required anti-affinity to its own pods: one pod per domain, none where a matching pod already runs.
- Required affinity to its own pods: all in the domain holding most matching pods, or for the first
  ones the first eligible domain (Kubernetes lets the first pod of the group go anywhere).
- Required affinity to pending pods of another workload, none running: the owners join the domain
  where most of those pods are pinned, or both are pinned to the first domain both may use
  (valid as long as the selected pods land; the verifier checks the final state).

Soft (the same quotas, but each pod only *prefers* its domain: a preferred term of weight
``SOFT_TOPOLOGY_WEIGHT`` scored by ``rules.preferences``, so ``Respect`` keeps it unless impossible):
- ScheduleAnyway spread, as if DoNotSchedule (water-fill);
- preferred anti-affinity to its own pods (water-fill: fewest matching pods per domain, the sum
  kube-scheduler's score minimises) and preferred affinity to its own pods (one home domain).
Karpenter differs: it treats ScheduleAnyway and preferred terms as required and relaxes them one by one,
per pod, in queue order; here the whole group is split at once and each pod's preference is dropped only
when the plan cannot keep it. Hostname rules need node identity and live in ``counters.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from model.affinity import LabelSelector, PodAffinityTerm
from model.labels import HOSTNAME, ZONE
from model.pod import Pod, PreferredTerm
from model.requirements import Requirement, Requirements
from model.taints import Taint, untolerated
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule
from solver.rules.counters import NodeCounter
from solver.rules.podaffinity import confined, selects_other_class, selects_own
from solver.rules.preferences import SOFT_TOPOLOGY_WEIGHT

Kind = Literal["topology spread", "pod anti-affinity", "pod affinity"]


@dataclass(frozen=True)
class DomainRule:
    """One spread constraint or self-(anti-)affinity term of a pod, on a non-hostname key."""

    key: str
    kind: Kind
    hard: bool
    selector: LabelSelector
    max_skew: int = 1
    min_domains: int | None = None
    taints_honoured: bool = False
    affinity_honoured: bool = True

    def describe(self) -> str:
        return f"{self.kind} with {self.selector.describe()} on {self.key}"


@dataclass
class DomainPlan:
    #: pod key → (topology key, domain) it must land in
    pins: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: pod key → (topology key, domain) it prefers
    soft: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    #: pod key → the rule behind its pin
    pinned_by: dict[str, str] = field(default_factory=dict)


def domain_rules(pod: Pod) -> list[DomainRule]:
    """The pod's rules this module models, hard zone rules first."""
    own = (pod.namespace, pod.labels, pod.namespace, pod.labels)
    rules = [DomainRule(s.topology_key, "topology spread", s.when_unsatisfiable == "DoNotSchedule", selector,
                        s.max_skew, s.min_domains, s.node_taints_policy == "Honor", s.node_affinity_policy == "Honor")
             for s in pod.topology_spread if s.topology_key != HOSTNAME
             and (selector := s.selector_for(pod.labels)) is not None]
    for terms, kind, hard in ((pod.pod_anti_affinity, "pod anti-affinity", True),
                              (pod.pod_affinity, "pod affinity", True),
                              (pod.preferred_pod_anti_affinity, "pod anti-affinity", False),
                              (pod.preferred_pod_affinity, "pod affinity", False)):
        for term in terms:
            if term.topology_key != HOSTNAME and term.selector is not None and term.selects(*own):
                rules.append(DomainRule(term.topology_key, kind, hard, term.selector))  # type: ignore[arg-type]
    return sorted(rules, key=lambda r: (not r.hard, r.key != ZONE))


def _domains(pod: Pod, rule: DomainRule, nodes: Sequence[tuple[Mapping[str, str], Sequence[Taint]]],
             landing: Pod | None = None) -> tuple[list[str], list[str]]:
    """(domains Kubernetes counts, domains the pod can land in). Counted: nodes the pod's own node
    affinity accepts (unless nodeAffinityPolicy Ignore) whose taints it tolerates (only if nodeTaintsPolicy
    Honor). Usable: nodes ``landing`` (the pod with what other rules derived) accepts and tolerates."""
    landing = landing or pod
    counted, usable = set(), set()
    for labels, taints in nodes:
        if rule.key not in labels:
            continue
        accepts = pod.accepts_labels(labels)
        if (accepts or not rule.affinity_honoured) and not (rule.taints_honoured and untolerated(pod.tolerations,
                                                                                                 taints)):
            counted.add(labels[rule.key])
        if (accepts if landing is pod else landing.accepts_labels(labels)) and not untolerated(pod.tolerations,
                                                                                               taints):
            usable.add(labels[rule.key])
    return sorted(counted | usable), sorted(usable)


def _water_fill(total: int, existing: dict[str, int], domains: list[str], cap: int | None) -> dict[str, int]:
    """Add ``total`` pods to domains lowest-first (ties by name); ``cap`` bounds a domain's final count."""
    added = dict.fromkeys(domains, 0)
    for _ in range(total):
        open_domains = [d for d in domains if cap is None or existing.get(d, 0) + added[d] < cap]
        if not open_domains:
            break
        target = min(open_domains, key=lambda d: (existing.get(d, 0) + added[d], d))
        added[target] += 1
    return added


def _quota(rule: DomainRule, group: int, existing: dict[str, int], counted: list[str], domains: list[str]
           ) -> dict[str, int]:
    """Pods per usable domain. A counted domain the pod cannot use keeps its count, so it bounds the others
    at its count + maxSkew; fewer counted domains than minDomains bound each at maxSkew."""
    if rule.kind == "topology spread" or (rule.kind == "pod anti-affinity" and not rule.hard):
        caps = [existing.get(d, 0) + rule.max_skew for d in counted if d not in domains]
        if rule.min_domains is not None and len(counted) < rule.min_domains:
            caps.append(rule.max_skew)
        return _water_fill(group, existing, domains, min(caps) if caps and rule.hard else None)
    if rule.kind == "pod anti-affinity":
        return {d: (0 if existing.get(d) else 1) for d in domains}
    home = max((d for d in existing if d in domains), key=lambda d: (existing[d], d), default=domains[0])
    return {home: group}


def _refusal(rule: DomainRule, counted: list[str], domains: list[str]) -> str:
    names = ", ".join(domains)
    noun = "zones" if rule.key == ZONE else f"{rule.key} domains"
    closed = [d for d in counted if d not in domains]
    if rule.kind == "topology spread" and closed:
        return (f"{rule.describe()}: {noun} {', '.join(closed)} count towards the skew but it cannot land there, "
                f"which caps {names} at maxSkew {rule.max_skew} above their count")
    if rule.kind == "pod anti-affinity":
        return (f"{rule.describe()}: matching pods already occupy all {len(domains)} {noun} it may use "
                f"({names}), counting running pods and the others of its group")
    if rule.min_domains is not None and len(domains) < rule.min_domains:
        return (f"{rule.describe()}: only {len(domains)} {noun} ({names}) for minDomains {rule.min_domains}, "
                f"so each holds at most maxSkew {rule.max_skew} matching pods")
    return f"{rule.describe()}: no room left for it among {noun} {names} (matching pods already running counted)"


def plan_domains(pending: Sequence[Pod], bound: Sequence[tuple[Pod, Mapping[str, str]]],
                 nodes: Sequence[tuple[Mapping[str, str], Sequence[Taint]]],
                 blocked: frozenset[str] | set[str] = frozenset(), landing: Sequence[Pod] = ()) -> DomainPlan:
    """Pins and soft pins for pending pods. ``bound`` pairs each running pod with its node's labels;
    ``nodes`` are the (labels, taints) of every node the plan could use; ``blocked`` pods are known to
    stay pending (another rule refused them), so no one may count on joining them; ``landing`` are the
    pods with what earlier rules derived (``rules.podaffinity``): where they can actually go."""
    result = DomainPlan()
    derived = {p.key: p for p in landing}
    rules = {pod.key: domain_rules(pod) for pod in pending}
    pinned: set[str] = set()
    soft_done: set[tuple[str, DomainRule]] = set()
    hard_done: set[tuple[str, DomainRule]] = set()
    for pod in pending:
        for rule in rules[pod.key]:
            if (pod.key in blocked or (pod.namespace, rule) in hard_done) if rule.hard \
                    else ((pod.key, rule) in soft_done):
                continue
            pinned_here: dict[str, int] = {}
            if rule.hard:  # every matching pod that can land counts, whether it carries the rule or not
                # A hard rule's group is planned once per (namespace, rule), even when the pod carrying it
                # is already pinned by another group: its constraint counts the pods its selector matches,
                # not itself (skipping it left a selector whose carriers were all pinned elsewhere unplanned).
                # Matching pods another group already pinned on this key count where they are pinned.
                hard_done.add((pod.namespace, rule))
                matching = [p for p in pending if p.key not in blocked and p.namespace == pod.namespace
                            and rule.selector.matches(p.labels)]
                group = [p for p in matching if p.key not in pinned]
                for p in matching:
                    if p.key in pinned and p.key in result.pins and result.pins[p.key][0] == rule.key:
                        pinned_here[result.pins[p.key][1]] = pinned_here.get(result.pins[p.key][1], 0) + 1
                pinned.update(p.key for p in group)
            else:  # only the pods that carry the preference care where they land
                group = [p for p in pending if (p.key, rule) not in soft_done and p.namespace == pod.namespace
                         and rule in rules[p.key]]
                soft_done.update((p.key, rule) for p in group)
            existing: dict[str, int] = {}
            for other, labels in bound:
                if (rule.key in labels and other.namespace == pod.namespace and rule.selector.matches(other.labels)
                        and (not rule.affinity_honoured or pod.accepts_labels(labels))):
                    existing[labels[rule.key]] = existing.get(labels[rule.key], 0) + 1
            for domain, count in pinned_here.items():
                existing[domain] = existing.get(domain, 0) + count
            counted, domains = _domains(pod, rule, nodes, derived.get(pod.key))
            if not domains:
                if rule.hard and rule.kind == "topology spread" and any(pod.accepts_labels(lb) for lb, _ in nodes):
                    # Kubernetes: a node without the key fails a DoNotSchedule constraint
                    result.refused.update((p.key, f"{rule.describe()}: no node it may use carries the label "
                                                  f"{rule.key}") for p in group if rule in rules[p.key])
                continue  # else nothing can take them: node selection explains why
            quota = _quota(rule, len(group), existing, counted, domains)
            queue = sorted(group, key=lambda p: p.key)
            for domain in domains:
                for _ in range(quota.get(domain, 0)):
                    if not queue:
                        break
                    member = queue.pop(0).key
                    if rule.hard:
                        result.pins[member] = (rule.key, domain)
                        result.pinned_by[member] = f"{rule.describe()} (its share of the domains)"
                    else:
                        result.soft.setdefault(member, []).append((rule.key, domain))
            if rule.hard:
                for left in queue:
                    result.refused[left.key] = _refusal(rule, counted, domains)
    _join_pending([derived.get(p.key, p) for p in pending], bound, nodes, result, pinned,
                  set(blocked) | set(result.refused))
    return result


def _join_pending(pending: Sequence[Pod], bound: Sequence[tuple[Pod, Mapping[str, str]]],
                  nodes: Sequence[tuple[Mapping[str, str], Sequence[Taint]]], result: DomainPlan,
                  pinned: set[str], blocked: set[str]) -> None:
    """Required affinity (not on the hostname) to pending pods of another workload, none running: the
    owners go where the pods they select are pinned, or both are pinned to the first domain both can use.
    Owners whose targets all stay pending stay pending too (to a fixed point: chains of such terms).
    Owners already pinned by a rule of their own, or whose targets are pinned on another key, are left
    (``antiaffinity.unmodelled`` reports them)."""
    joins: list[tuple[PodAffinityTerm, list[Pod], list[Pod]]] = []
    seen: set[tuple[str, PodAffinityTerm]] = set()
    for pod in pending:
        for term in pod.pod_affinity:
            key = term.topology_key
            if (key == HOSTNAME or term.selector is None or (pod.namespace, term) in seen
                    or term.selects(pod.namespace, pod.labels, pod.namespace, pod.labels)):
                continue
            seen.add((pod.namespace, term))
            if any(key in labels and term.selects(pod.namespace, pod.labels, o.namespace, o.labels)
                   for o, labels in bound):
                continue  # running matches: ``rules.podaffinity`` confines it to their domains
            owners = [p for p in pending if p.namespace == pod.namespace and term in p.pod_affinity
                      and p.key not in pinned]
            owner_keys = {p.key for p in owners}
            targets = [p for p in pending if p.key not in owner_keys
                       and term.selects(pod.namespace, pod.labels, p.namespace, p.labels)]
            if owners and targets:
                joins.append((term, owners, targets))
    reach: dict[tuple[object, ...], list[str]] = {}

    def usable(pod: Pod, key: str) -> list[str]:
        """Domains of ``key`` the pod can land in (memoised per node requirements and tolerations)."""
        kind = (key, pod.node_requirements(), pod.tolerations)
        if kind not in reach:
            reach[kind] = _domains(pod, DomainRule(key, "pod affinity", True, LabelSelector()), nodes)[1]
        return reach[kind]
    changed = True
    while changed:  # owners of terms whose targets all stay pending (or land in no domain) stay pending
        changed = False
        for term, owners, targets in joins:
            if all(t.key in blocked or not usable(t, term.topology_key) for t in targets) and any(
                    o.key not in blocked for o in owners):
                for owner in owners:
                    result.refused[owner.key] = (f"required pod affinity with {_selector(term)} on "
                                                 f"{term.topology_key}: none of the {len(targets)} pending pods "
                                                 "it selects can be scheduled, and none runs")
                blocked.update(o.key for o in owners)
                pinned.update(o.key for o in owners)
                changed = True
    for term, owners, all_targets in joins:
        owners = [o for o in owners if o.key not in blocked]
        targets = [t for t in all_targets if t.key not in blocked and usable(t, term.topology_key)]
        if not owners or not targets:
            continue
        key = term.topology_key
        rule = DomainRule(key, "pod affinity", True, term.selector or LabelSelector())

        def pins_on_key(pods: list[Pod], key: str = key) -> list[str]:
            return [result.pins[p.key][1] for p in pods if p.key in result.pins and result.pins[p.key][0] == key]
        placed, joined = pins_on_key(targets), pins_on_key(owners)
        free = [t for t in targets if t.key not in pinned]
        if len(placed) + len(free) < len(targets) or len(joined) + sum(o.key not in pinned for o in owners) \
                < len(owners):
            continue  # pinned on another key by a rule of their own
        open_domains = usable(owners[0], key)
        if joined:  # the owners are themselves the targets of another such term: the targets come to them
            home = max(sorted(set(joined)), key=joined.count)
            if placed and home not in placed:
                continue  # both sides pinned apart: the verifier tells
            if not all(home in usable(t, key) for t in free):
                continue
            for t in free:
                result.pins[t.key] = (key, home)
                result.pinned_by[t.key] = f"{rule.describe()} (pods that require it join it there)"
            pinned.update(t.key for t in free)
        elif placed:
            home = max(sorted(set(placed)), key=placed.count)
        else:
            common = [d for d in open_domains if all(d in usable(t, key) for t in free)]
            if not common:
                for owner in owners:
                    result.refused[owner.key] = (f"{rule.describe()}: the pods it selects may only run in "
                                                 f"{', '.join(sorted({d for t in free for d in usable(t, key)}))}, "
                                                 "where it may not")
                pinned.update(o.key for o in owners)
                continue
            home = common[0]
            for t in free:
                result.pins[t.key] = (key, home)
                result.pinned_by[t.key] = f"{rule.describe()} (pods that require it join it there)"
            pinned.update(t.key for t in free)
        reason = f"required pod affinity with {_selector(term)} on {key} (where the pods it selects go)"
        for owner in owners:
            if owner.key in result.pins:
                continue
            if home in open_domains:
                result.pins[owner.key] = (key, home)
                result.pinned_by[owner.key] = reason
            else:
                result.refused[owner.key] = f"{reason}: they are placed in {home}, where it may not run"
        pinned.update(o.key for o in owners)


def _selector(term: PodAffinityTerm) -> str:
    return term.selector.describe() if term.selector else "no pod"


def apply(pods: Sequence[Pod], plan: DomainPlan) -> list[Pod]:
    """Copies of the pods carrying the plan: zone pins, other pins as rule terms, soft pins as preferences."""
    out = []
    for pod in pods:
        update: dict[str, object] = {}
        if pod.key in plan.pins:
            key, value = plan.pins[pod.key]
            if key == ZONE:
                update["zone_pin"] = value
            else:
                term = Requirements.of([Requirement(key=key, operator="In", values=(value,))])
                update["rule_terms"] = (*pod.rule_terms, (term,))
                update["rule_reasons"] = (*pod.rule_reasons, plan.pinned_by[pod.key])
        elif pod.key in plan.refused:
            update["rule_problem"] = plan.refused[pod.key]
        if pod.key in plan.soft:
            update["preferred_terms"] = pod.preferred_terms + tuple(
                PreferredTerm(weight=SOFT_TOPOLOGY_WEIGHT,
                              requirements=Requirements.of([Requirement(key=key, operator="In", values=(value,))]))
                for key, value in plan.soft[pod.key])
        out.append(pod.model_copy(update=update) if update else pod)
    return out


class DomainRules(Rule):
    """Topology spread and pod (anti-)affinity on every key but the hostname, as domain pins (above)."""

    name = "topology spread and pod (anti-)affinity on zones and other domains"
    reads = ("Namespace",)

    def constrain(self, batch: BatchContext, pods: list[Pod]) -> list[Pod]:
        if not any(p.topology_spread or p.pod_affinity or p.pod_anti_affinity or p.preferred_pod_affinity
                   or p.preferred_pod_anti_affinity for p in pods):
            return pods
        submitted = [batch.submitted.get(p.key, p) for p in pods]
        blocked = {p.key for p in pods if p.rule_problem or p.volume_problem}
        return apply(pods, plan_domains(submitted, batch.placed, batch.nodes(), blocked, pods))

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        notes = []
        for c in classes:
            pod = c.representative
            if pod.rule_problem or pod.volume_problem:
                continue  # unschedulable with a reason: nothing of it lands
            for term in pod.pod_anti_affinity:
                if term.topology_key != HOSTNAME and not selects_own(pod, term) and selects_other_class(
                        pod, term, c, classes, batch.namespaces):
                    notes.append(f"{c.name}: required pod anti-affinity on {term.topology_key} towards pending "
                                 "pods of other workloads is not modelled")
            for term in pod.pod_affinity:
                if term.topology_key != HOSTNAME and not selects_own(pod, term) and not confined(
                        pod, term.topology_key):
                    notes.append(f"{c.name}: required pod affinity on {term.topology_key} to pending pods of other "
                                 "workloads (none running) is not modelled")
            hard = [r for r in domain_rules(pod) if r.hard]
            if len(hard) > 1:
                notes.append(f"{c.name}: only its first hard topology rule ({hard[0].describe()}) pins it; "
                             + "; ".join(r.describe() for r in hard[1:]) + " not modelled")
        return notes
