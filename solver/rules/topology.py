"""Domain-level pod rules on any topology key but the hostname, decided before packing by pinning pods.

A *domain* is a value of the topology key (a zone, a region, a rack label); Kubernetes checks spread and
self-(anti-)affinity against matching-pod counts per domain. Each group of pods a rule relates is dealt
to domains first, every pod pinned to its domain (a zone pin, or a ``key In [value]`` rule term) or kept
out of some (``key NotIn``), so every later stage keeps the rule without knowing it. The split is chosen,
not optimised: a cheaper one may exist when domain prices differ (the KWOK catalog's zones do not).

Which domains exist — the semantics followed, and where it differs from Karpenter:
- *Counted* (spread's global minimum and ``minDomains``): Kubernetes' rule, on the final state. A domain
  counts for a pod's constraint when a *node* in it passes the pod's own nodeSelector / required node
  affinity (``nodeAffinityPolicy: Honor``, the default; ``Ignore`` counts every node with the key) and,
  with ``nodeTaintsPolicy: Honor``, its taints are tolerated. Existing nodes count whether or not a pod
  may join them (cordoned, full, tainted); a template counts only once a node is launched from it, which
  happens when the group's pods are pinned there or another pending pod could open it (then it is
  counted at 0, conservatively). Karpenter instead counts every domain a NodePool offers that the pod's
  requirements allow, so a zone whose offerings are all too small for the pod would hold its spread at
  0 there; here such a zone is no domain (no node in it can hold the pod, none will be launched for it).
- *Usable* (where a pod may be pinned): nodes the pod (with what earlier rules derived) accepts,
  tolerates, and fits on — a template whose allocatable after DaemonSets holds its requests (any number
  launch), or an existing node with that much free room (only as much as is free: existing-only domains
  fill up, and their count then bounds the others).
A key no usable node carries gives the pod nowhere to go (Kubernetes: a node without the key fails a
DoNotSchedule constraint).

Hard (one pin per pod; the first rule that groups it, zone rules first). Each hard rule's group is every
pending pod its selector matches, planned once whether or not the pod carrying it is already pinned (a
constraint counts the pods it matches, not its carrier); matching pods an earlier group pinned on the same
key count in their domain. Pods that match but do not carry the rule keep their own selection:
- DoNotSchedule spread: matching pods without the constraint count where they land: each is pinned within
  its own reach (lowest domain first) on nodes the constraint counts, or left alone when it can only land
  where it is not counted. Carriers then go lowest-first, most constrained first, each only where its
  domain stays within maxSkew of the global minimum (0 while fewer than minDomains domains are sure to
  exist), so full existing-only domains and counted domains the carrier cannot use cap the others.
- Required anti-affinity to its own pods: one carrier per domain, none where a matching pod runs or is
  pinned, or where a rule-free matching pod can only land; rule-free matching pods get ``NotIn`` the
  carriers' domains (anti-affinity is symmetric) and may share a domain with each other. A carrier never
  takes a rule-free pod's last domain.
- Required affinity to its own pods: all carriers in one home that can hold them (most matching pods,
  then room for most of the group — capacity, NodePool zones, an instance type large enough — then
  name). Rule-free matching pods join it when they can; a lone carrier needs one beside it when any
  exists (Kubernetes lets the first pod go anywhere only while no other matching pod exists).
- Required affinity to pending pods of another workload, none running: the owners join the domain
  where most of those pods are pinned, or both are pinned to a domain both may use and that holds them
  (valid as long as the selected pods land; the verifier checks the final state).
Every pin assumes the pinned pods land; a pod left pending by capacity lowers its domain's count.

Soft (the same split, but each pod only *prefers* its domain: a preferred term of weight
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
from model.inflight import node_views
from model.labels import HOSTNAME, ZONE
from model.pod import Pod, PreferredTerm
from model.requirements import Requirement, Requirements
from model.resources import Resources
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
    #: pod key → (topology key, domains it must avoid, why): pods that carry no anti-affinity but are
    #: selected by pinned pods' terms
    excluded: dict[str, list[tuple[str, tuple[str, ...], str]]] = field(default_factory=dict)


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


@dataclass(frozen=True)
class DomainNode:
    """A node the plan could use, as domain planning sees it: a template (any number of them can launch)
    or an existing node (only what is free on it), or a node no pod may join that Kubernetes still counts
    (cordoned, not Ready)."""

    labels: Mapping[str, str]
    taints: Sequence[Taint] = ()
    #: what a pending pod may still use: a template's allocatable after DaemonSets, an existing node's free
    #: room; None: unknown (any pod fits)
    room: Resources | None = None
    existing: bool = False
    schedulable: bool = True
    name: str = ""


def domain_nodes(batch: BatchContext) -> list[DomainNode]:
    """Every node the batch's pods could land on (templates, then schedulable existing nodes) and the nodes
    they cannot join but Kubernetes counts as domains (every other Node not being deleted)."""
    nodes = [DomainNode(t.labels, tuple(t.pool.taints), t.allocatable) for t in batch.templates]
    nodes += [DomainNode(e.node.labels, tuple(e.node.taints), e.free, existing=True, name=e.name)
              for e in batch.existing]
    joinable = {e.name for e in batch.existing}
    nodes += [DomainNode(v.node.labels, tuple(v.node.taints), Resources(), existing=True, schedulable=False,
                         name=v.node.name)
              for v in node_views(batch.snapshot) if v.node.name not in joinable and not v.node.deleting]
    return nodes


NodeInput = DomainNode | tuple[Mapping[str, str], Sequence[Taint]]


@dataclass(frozen=True)
class _Reach:
    """Where one pod can land on one key: the domains of the nodes it may use and fits on, the domains where
    a node for it can be launched, the existing nodes it may use per domain, and whether a node without the
    key would take it."""

    domains: tuple[str, ...]
    launchable: frozenset[str]
    hosts: Mapping[str, tuple[int, ...]]
    keyless: bool


class _Planner:
    """The state one ``plan_domains`` call works on: the plan so far, which pods are settled, the room left
    on existing nodes, and memoised reach per pod shape."""

    def __init__(self, pending: Sequence[Pod], bound: Sequence[tuple[Pod, Mapping[str, str]]],
                 nodes: Sequence[NodeInput], blocked: frozenset[str] | set[str], landing: Sequence[Pod]) -> None:
        self.pending = pending
        self.bound = bound
        self.nodes = [n if isinstance(n, DomainNode) else DomainNode(n[0], tuple(n[1])) for n in nodes]
        self.blocked = set(blocked)
        self.landing = {p.key: p for p in landing}
        self.rules = {pod.key: domain_rules(pod) for pod in pending}
        self.carries = {key: set(rules) for key, rules in self.rules.items()}
        self.result = DomainPlan()
        #: pods no later group may pin (pinned, refused, or left to node selection)
        self.settled: set[str] = set()
        self.room = {i: n.room for i, n in enumerate(self.nodes) if n.existing and n.room is not None}
        self.taints_of = {n.name: n.taints for n in self.nodes if n.name}
        self._reach: dict[object, _Reach] = {}
        self._counted: dict[object, dict[str, bool]] = {}
        self._shapes: dict[str, tuple[object, ...]] = {}
        self._usable: dict[tuple[object, ...], list[int]] = {}
        self._views: dict[tuple[DomainRule, str], tuple[object, ...]] = {}
        self._reach_of: dict[str, dict[str, _Reach]] = {}

    # -- where pods can go ------------------------------------------------------------------------------

    def lands(self, pod: Pod) -> Pod:
        """The pod with what earlier rules derived (where it can actually go)."""
        return self.landing.get(pod.key, pod)

    def shape(self, pod: Pod) -> tuple[object, ...]:
        """What decides where the pod can land: node requirements, tolerations, requests (memoised)."""
        if pod.key not in self._shapes:
            landing = self.lands(pod)
            self._shapes[pod.key] = (landing.node_requirements(), landing.tolerations, landing.requests)
        return self._shapes[pod.key]

    def _usable_nodes(self, pod: Pod) -> list[int]:
        """The nodes (by index) the pod may land on and fits on, memoised per pod shape."""
        shape = self.shape(pod)
        if shape not in self._usable:
            requirements, tolerations, requests = shape
            assert isinstance(requirements, tuple) and isinstance(requests, Resources)
            fits: dict[Resources, bool] = {}
            out = []
            for i, node in enumerate(self.nodes):
                if not node.schedulable or not any(r.matches(node.labels) for r in requirements):
                    continue
                if node.room is not None:
                    if node.room not in fits:
                        fits[node.room] = requests.fits_in(node.room)
                    if not fits[node.room]:
                        continue
                if not untolerated(tolerations, node.taints):  # type: ignore[arg-type]
                    out.append(i)
            self._usable[shape] = out
        return self._usable[shape]

    def reach(self, pod: Pod, key: str) -> _Reach:
        """Where the pod can land on ``key`` (memoised per pod, and per pod shape)."""
        mine = self._reach_of.setdefault(pod.key, {})
        if key not in mine:
            mine[key] = self._shape_reach(pod, key)
        return mine[key]

    def _shape_reach(self, pod: Pod, key: str) -> _Reach:
        memo = (key, *self.shape(pod))
        pod = self.lands(pod)
        if memo not in self._reach:
            domains: set[str] = set()
            launchable: set[str] = set()
            hosts: dict[str, list[int]] = {}
            keyless = False
            for i in self._usable_nodes(pod):
                node = self.nodes[i]
                if key not in node.labels:
                    keyless = True
                    continue
                domain = node.labels[key]
                domains.add(domain)
                if node.existing and node.room is not None:
                    hosts.setdefault(domain, []).append(i)
                else:
                    launchable.add(domain)
            self._reach[memo] = _Reach(tuple(sorted(domains)), frozenset(launchable),
                                       {d: tuple(v) for d, v in hosts.items()}, keyless)
        return self._reach[memo]

    def _view(self, rule: DomainRule, viewer: Pod) -> tuple[object, ...]:
        """What decides which nodes ``viewer``'s constraint counts (memoised per rule and viewer)."""
        memo = (rule, viewer.key)
        if memo not in self._views:
            self._views[memo] = (rule.key, rule.affinity_honoured and viewer.node_requirements(),
                                 rule.taints_honoured and viewer.tolerations)
        return self._views[memo]

    @staticmethod
    def counts_node(rule: DomainRule, viewer: Pod, node: DomainNode, requirements: Sequence[Requirements]) -> bool:
        """Does Kubernetes count this node's domain for ``viewer``'s spread (nodeAffinityPolicy /
        nodeTaintsPolicy; ``viewer`` as submitted: ``requirements`` are its own node requirements)?"""
        return (rule.key in node.labels and (not rule.affinity_honoured or any(r.matches(node.labels)
                                                                               for r in requirements))
                and not (rule.taints_honoured and untolerated(viewer.tolerations, node.taints)))

    def counted(self, rule: DomainRule, viewer: Pod) -> dict[str, bool]:
        """Domain → does an existing node stand there, for every domain some node ``viewer`` counts."""
        memo = self._view(rule, viewer)
        if memo not in self._counted:
            out: dict[str, bool] = {}
            requirements = viewer.node_requirements()
            for node in self.nodes:
                if self.counts_node(rule, viewer, node, requirements):
                    domain = node.labels[rule.key]
                    out[domain] = out.get(domain, False) or node.existing
            self._counted[memo] = out
        return self._counted[memo]

    def counted_reach(self, pod: Pod, rule: DomainRule, viewer: Pod) -> dict[str, bool]:
        """Domains where ``pod`` may land on a node ``viewer`` counts → is every node it may use there
        counted (pinned there, it surely counts)?"""
        memo = (self._view(rule, viewer), *self.shape(pod))
        landing = self.lands(pod)
        if memo not in self._counted:
            counted: dict[str, bool] = {}
            loose: set[str] = set()
            requirements = viewer.node_requirements()
            for node in map(self.nodes.__getitem__, self._usable_nodes(landing)):
                if rule.key not in node.labels:
                    continue
                domain = node.labels[rule.key]
                if self.counts_node(rule, viewer, node, requirements):
                    counted[domain] = True
                else:
                    loose.add(domain)
            self._counted[memo] = {d: d not in loose for d in counted}
        return self._counted[memo]

    def has_room(self, pod: Pod, reach: _Reach, domain: str) -> bool:
        return domain in reach.launchable or any(
            pod.requests.fits_in(self.room[i]) for i in reach.hosts.get(domain, ()))

    def take(self, pod: Pod, reach: _Reach, domain: str) -> None:
        """Spend the pod's requests on an existing node of the domain when no node can be launched there."""
        if domain in reach.launchable:
            return
        host = next((i for i in reach.hosts.get(domain, ()) if pod.requests.fits_in(self.room[i])), None)
        if host is not None:
            self.room[host] = self.room[host] - pod.requests

    def holds(self, pods: Sequence[Pod], key: str, domain: str) -> int:
        """How many of ``pods`` (in order) the domain can take, without spending its room."""
        room = dict(self.room)
        held = 0
        for pod in pods:
            reach = self.reach(pod, key)
            if domain in reach.launchable:
                held += 1
                continue
            host = next((i for i in reach.hosts.get(domain, ()) if pod.requests.fits_in(room[i])), None)
            if host is None:
                continue
            room[host] = room[host] - pod.requests
            held += 1
        return held

    # -- what the plan says ---------------------------------------------------------------------------------

    def pin(self, pod: Pod, key: str, domain: str, reason: str) -> None:
        self.result.pins[pod.key] = (key, domain)
        self.result.pinned_by[pod.key] = reason
        self.take(pod, self.reach(pod, key), domain)
        self.settled.add(pod.key)

    def refuse(self, pod: Pod, reason: str) -> None:
        self.result.refused[pod.key] = reason
        self.settled.add(pod.key)

    def exclude(self, pod: Pod, key: str, domains: Sequence[str], reason: str) -> None:
        """Keep the pod out of ``domains`` (a ``key NotIn`` term); later groups see it (its reach shrinks)."""
        self.result.excluded.setdefault(pod.key, []).append((key, tuple(domains), reason))
        term = Requirements.of([Requirement(key=key, operator="NotIn", values=tuple(domains))])
        landing = self.lands(pod)
        self.landing[pod.key] = landing.model_copy(update={"rule_terms": (*landing.rule_terms, (term,))})
        self._shapes.pop(pod.key, None)
        self._reach_of.pop(pod.key, None)

    def pins_on(self, key: str, pods: Sequence[Pod]) -> list[str]:
        return [self.result.pins[p.key][1] for p in pods if p.key in self.result.pins
                and self.result.pins[p.key][0] == key]

    def _taints(self, labels: Mapping[str, str]) -> Sequence[Taint]:
        return self.taints_of.get(labels.get(HOSTNAME, ""), ())

    def running_counts(self, rule: DomainRule, viewer: Pod) -> dict[str, int]:
        """Matching running pods per domain (for spread only on the nodes ``viewer``'s constraint counts)."""
        counts: dict[str, int] = {}
        requirements = viewer.node_requirements()
        for other, labels in self.bound:
            if rule.key not in labels or other.namespace != viewer.namespace or not rule.selector.matches(other.labels):
                continue
            if rule.kind == "topology spread" and (
                    (rule.affinity_honoured and not any(r.matches(labels) for r in requirements))
                    or (rule.taints_honoured and untolerated(viewer.tolerations, self._taints(labels)))):
                continue
            counts[labels[rule.key]] = counts.get(labels[rule.key], 0) + 1
        return counts


def _noun(key: str) -> str:
    return "zones" if key == ZONE else f"{key} domains"


def _water_fill(total: int, existing: dict[str, int], domains: Sequence[str]) -> dict[str, int]:
    """Add ``total`` pods to domains lowest-first (ties by name)."""
    added = dict.fromkeys(domains, 0)
    for _ in range(total):
        if not domains:
            break
        target = min(domains, key=lambda d: (existing.get(d, 0) + added[d], d))
        added[target] += 1
    return added


def _plan_soft(pl: _Planner, pod: Pod, rule: DomainRule, done: set[tuple[str, DomainRule]]) -> None:
    """A preference: only the pods that carry it care where they land; each prefers its share (spread and
    anti-affinity water-filled, affinity one home domain)."""
    group = [p for p in pl.pending if (p.key, rule) not in done and p.namespace == pod.namespace
             and rule in pl.carries[p.key]]
    done.update((p.key, rule) for p in group)
    domains = pl.reach(pod, rule.key).domains
    if not domains:
        return
    existing = pl.running_counts(rule, pod)
    if rule.kind == "pod affinity":
        home = max((d for d in existing if d in domains), key=lambda d: (existing[d], d), default=None)
        quota = {home or _home(pl, group, rule.key, domains, existing): len(group)}
    else:
        quota = _water_fill(len(group), existing, domains)
    queue = sorted(group, key=lambda p: p.key)
    for domain in domains:
        for member in queue[:quota.get(domain, 0)]:
            pl.result.soft.setdefault(member.key, []).append((rule.key, domain))
        queue = queue[quota.get(domain, 0):]


def _home(pl: _Planner, pods: Sequence[Pod], key: str, domains: Sequence[str], counts: Mapping[str, int]) -> str:
    """The domain a group that must share one is homed in: the one holding most matching pods, then the
    one with room for most of the group (a node large enough can launch there, or existing nodes have room),
    then by name."""
    return min(domains, key=lambda d: (-counts.get(d, 0), -pl.holds(pods, key, d), d))


def _plan_hard(pl: _Planner, pod: Pod, rule: DomainRule) -> None:
    """A hard rule's group: every pending pod its selector matches, whether it carries the rule or not (a
    constraint counts the pods it matches); matching pods an earlier group pinned on the key count there."""
    matching = [p for p in pl.pending if p.namespace == pod.namespace and rule.selector.matches(p.labels)
                and p.key not in pl.blocked]
    counts = pl.running_counts(rule, pod)
    for domain in pl.pins_on(rule.key, [p for p in matching if p.key in pl.settled]):
        counts[domain] = counts.get(domain, 0) + 1
    free = [p for p in matching if p.key not in pl.settled]
    carriers = [p for p in free if rule in pl.carries[p.key]]
    others = [p for p in free if rule not in pl.carries[p.key]]
    for carrier in list(carriers):
        reach = pl.reach(carrier, rule.key)
        if reach.domains:
            continue
        carriers.remove(carrier)
        if rule.kind == "topology spread" and reach.keyless:  # Kubernetes: a node without the key fails it
            pl.refuse(carrier, f"{rule.describe()}: no node it may use carries the label {rule.key}")
        else:
            pl.settled.add(carrier.key)  # nothing can take it: node selection explains why
    if rule.kind == "topology spread":
        _plan_spread(pl, pod, rule, carriers, others, counts)
    elif rule.kind == "pod anti-affinity":
        elsewhere = [p for p in matching if p.key in pl.settled and p.key not in pl.result.refused
                     and not pl.pins_on(rule.key, [p])]
        _plan_anti(pl, rule, carriers, others + elsewhere, counts)
    else:
        _plan_affine(pl, rule, carriers, others, counts)


def _same_shape(pl: _Planner, pods: Sequence[Pod], key: str) -> None:
    """Re-deal the pins of pods with one reach so that pods sorted by key fill domains sorted by name (the
    plan reads the same whatever order the group was dealt in)."""
    shapes: dict[int, list[Pod]] = {}
    for pod in pods:
        if pod.key in pl.result.pins:
            shapes.setdefault(id(pl.reach(pod, key)), []).append(pod)
    for members in shapes.values():
        pins = sorted(pl.result.pins[p.key] for p in members)
        for member, pinned in zip(sorted(members, key=lambda p: p.key), pins, strict=True):
            pl.result.pins[member.key] = pinned


def _plan_spread(pl: _Planner, viewer: Pod, rule: DomainRule, carriers: list[Pod], others: list[Pod],
                 counts: dict[str, int]) -> None:
    """DoNotSchedule spread: every carrier's domain may hold at most maxSkew more matching pods than the
    global minimum over the domains Kubernetes counts (0 while fewer than minDomains are sure to exist).

    Matching pods that do not carry the rule count where they land: each is pinned within its own reach
    (the lowest domain it may use on a node the rule counts), or left alone when it can only land where the
    rule does not count it. Carriers then go lowest-first, the most constrained first, each only where the
    skew stays within maxSkew, so capacity-bound domains (existing nodes only) and closed ones cap the rest."""
    key = rule.key
    counted = pl.counted(rule, viewer)
    sure = {d for d, existing in counted.items() if existing} | {d for d, n in counts.items() if n}
    maybe: dict[str, int] = {}
    reason = f"{rule.describe()} of the pods it counts towards (its share of the domains)"
    for other in sorted(others, key=lambda p: (len(pl.counted_reach(p, rule, viewer)), p.key)):
        counted_here = pl.counted_reach(other, rule, viewer)
        reach = pl.reach(other, key)
        open_domains = [d for d in sorted(counted_here) if pl.has_room(other, reach, d)]
        if not open_domains:
            continue  # lands only where the rule does not count it (or nowhere)
        domain = min(open_domains, key=lambda d: (counts.get(d, 0), d))
        pl.pin(other, key, domain, reason)
        target = counts if counted_here[domain] else maybe
        target[domain] = target.get(domain, 0) + 1
        sure.add(domain)
    reaches = {p.key: pl.reach(p, key) for p in carriers}
    usable = {d for r in reaches.values() for d in r.domains}
    floor = _Floor(rule, counts, sure | usable | _openable(pl, rule, viewer, set(counted) - sure - usable), sure)
    reason = f"{rule.describe()} (its share of the domains)"
    for carrier in sorted(carriers, key=lambda p: (len(reaches[p.key].domains), p.key)):
        reach = reaches[carrier.key]
        options = [d for d in reach.domains if pl.has_room(carrier, reach, d)
                   and counts.get(d, 0) + maybe.get(d, 0) + 1 - floor.adding(d) <= rule.max_skew]
        if not options:
            pl.refuse(carrier, _spread_refusal(pl, rule, carrier, reach, floor))
            continue
        domain = min(options, key=lambda d: (counts.get(d, 0), d))
        pl.pin(carrier, key, domain, reason)
        floor.add(domain)
    _same_shape(pl, carriers, key)


def _openable(pl: _Planner, rule: DomainRule, viewer: Pod, domains: set[str]) -> set[str]:
    """Of domains no node stands in yet and the group cannot use, those another pending pod could open (a
    node there that ``viewer``'s constraint counts): Kubernetes counts them once that node exists."""
    if not domains:
        return set()
    shapes = {pl.shape(p): p for p in pl.pending if p.key not in pl.blocked and p.key not in pl.result.refused}
    return {d for p in shapes.values() for d in pl.counted_reach(p, rule, viewer) if d in domains}


class _Floor:
    """The global minimum of a spread group as its pods land: over every domain Kubernetes may count (sure
    ones, the carriers' own, and ones another pod could open), 0 while fewer than minDomains are sure."""

    def __init__(self, rule: DomainRule, counts: dict[str, int], domains: set[str], sure: set[str]) -> None:
        self.rule, self.counts, self.domains, self.sure = rule, counts, domains, sure
        self._settle()

    def _settle(self) -> None:
        values = [self.counts.get(d, 0) for d in self.domains]
        self.low = min(values, default=0)
        self.at_low = values.count(self.low)

    def adding(self, domain: str) -> int:
        """The global minimum once one more matching pod lands in ``domain``."""
        if self.rule.min_domains is not None and len(self.sure | {domain}) < self.rule.min_domains:
            return 0
        lifted = domain in self.domains and self.counts.get(domain, 0) == self.low and self.at_low == 1
        return self.low + lifted

    def add(self, domain: str) -> None:
        self.counts[domain] = self.counts.get(domain, 0) + 1
        self.sure.add(domain)
        self._settle()


def _spread_refusal(pl: _Planner, rule: DomainRule, carrier: Pod, reach: _Reach, floor: _Floor) -> str:
    noun, names = _noun(rule.key), ", ".join(reach.domains)
    if rule.min_domains is not None and len(floor.sure) < rule.min_domains:
        return (f"{rule.describe()}: only {len(floor.sure)} {noun} for minDomains {rule.min_domains}, "
                f"so each holds at most maxSkew {rule.max_skew} matching pods")
    closed = sorted(d for d in floor.domains if floor.counts.get(d, 0) == floor.low
                    and not pl.has_room(carrier, reach, d))
    if closed:
        full = [d for d in closed if d in reach.domains]
        why = "no room is left there" if len(full) == len(closed) else (
            "its node selection or taints keep it out" if not full else "it may not or cannot fit there")
        rest = ", ".join(d for d in reach.domains if d not in closed) or "no other"
        return (f"{rule.describe()}: {noun} {', '.join(closed)} count towards the skew but it cannot land there "
                f"({why}), which caps {rest} at maxSkew {rule.max_skew} above their count")
    return f"{rule.describe()}: no room left for it among {noun} {names} (matching pods already running counted)"


def _plan_anti(pl: _Planner, rule: DomainRule, carriers: list[Pod], others: list[Pod], counts: dict[str, int]) -> None:
    """Required anti-affinity to its own pods: one carrier per domain, none where a pod it selects runs or is
    pinned. Matching pods without the term are kept out of the carriers' domains only (anti-affinity is
    symmetric); they may share a domain with each other, and one that can only land in one domain
    keeps the carriers out of it."""
    key = rule.key
    occupied = {d for d, n in counts.items() if n}
    flexible: list[tuple[Pod, _Reach]] = []
    for other in others:
        reach = pl.reach(other, key)
        if len(reach.domains) == 1 and not reach.keyless:
            occupied.add(reach.domains[0])
        elif reach.domains:
            flexible.append((other, reach))
    taken: list[str] = []
    shapes = list({id(r): r for _, r in flexible}.values())
    for carrier in sorted(carriers, key=lambda p: (len(pl.reach(p, key).domains), p.key)):
        reach = pl.reach(carrier, key)
        options = [d for d in reach.domains if d not in occupied and d not in taken and pl.has_room(carrier, reach, d)]
        spare = [d for d in options if all(r.keyless or any(x != d and x not in taken and x not in occupied
                                                            for x in r.domains) for r in shapes)]
        if not spare:
            pl.refuse(carrier, f"{rule.describe()}: matching pods already occupy all {len(reach.domains)} {_noun(key)} "
                               f"it may use ({', '.join(reach.domains)}), counting running pods and the others of "
                               "its group")
            continue
        domain = min(spare, key=lambda d: (sum(d in r.domains for r in shapes), d))
        taken.append(domain)
        pl.pin(carrier, key, domain, f"{rule.describe()} (its share of the domains)")
    for other, reach in flexible:
        closed = [d for d in reach.domains if d in taken]
        if closed:
            pl.exclude(other, key, closed, f"{rule.describe()} of the pods pinned to {', '.join(closed)}, which "
                                           "repels it from there")
    _same_shape(pl, carriers, key)


def _plan_affine(pl: _Planner, rule: DomainRule, carriers: list[Pod], others: list[Pod], counts: dict[str, int]
                 ) -> None:
    """Required affinity to its own pods: the carriers share one home domain that can hold them, the one
    holding most matching pods first. Matching pods without the term go with them when they may (else they
    are free); a lone carrier needs one of them beside it when any exists."""
    if not carriers:
        return
    key = rule.key
    shared = set(pl.reach(carriers[0], key).domains)
    for carrier in carriers[1:]:
        shared &= set(pl.reach(carrier, key).domains)
    candidates = sorted(shared) or list(pl.reach(carriers[0], key).domains)
    reason = f"{rule.describe()} (its share of the domains)"
    partners = [o for o in others if pl.reach(o, key).domains or pl.reach(o, key).keyless]
    if len(carriers) == 1 and partners and not any(counts.values()):
        # the first pod of the group may go anywhere only while no other matching pod exists
        with_partner = [d for d in candidates if any(d in pl.reach(o, key).domains for o in partners)]
        if not with_partner:
            pl.refuse(carriers[0], f"{rule.describe()}: the other pods it selects cannot land in any "
                                   f"{_noun(key)} it may use ({', '.join(candidates)})")
            return
        candidates = with_partner
    home = _home(pl, carriers, key, candidates, counts)
    if len(carriers) == 1 and partners and not any(counts.values()) and not any(
            home in pl.reach(o, key).domains and pl.has_room(o, pl.reach(o, key), home) for o in partners):
        pl.refuse(carriers[0], f"{rule.describe()}: none of the other pods it selects has room beside it in {home}")
        return
    for carrier in sorted(carriers, key=lambda p: p.key):
        reach = pl.reach(carrier, key)
        if home in reach.domains and pl.has_room(carrier, reach, home):
            pl.pin(carrier, key, home, reason)
        else:
            pl.refuse(carrier, f"{rule.describe()}: the group's home {home} ({_noun(key)} {', '.join(candidates)} "
                               "considered) has no room for it")
    for other in sorted(others, key=lambda p: p.key):  # free to go elsewhere, but welcome beside the group
        reach = pl.reach(other, key)
        if home in reach.domains and pl.has_room(other, reach, home):
            pl.pin(other, key, home, f"{rule.describe()} of the pods it matches (its share of the domains)")


def plan_domains(pending: Sequence[Pod], bound: Sequence[tuple[Pod, Mapping[str, str]]],
                 nodes: Sequence[NodeInput], blocked: frozenset[str] | set[str] = frozenset(),
                 landing: Sequence[Pod] = ()) -> DomainPlan:
    """Pins, exclusions and soft pins for pending pods. ``bound`` pairs each running pod with its node's
    labels; ``nodes`` are every node the plan could use (``domain_nodes``; bare (labels, taints) pairs are
    read as nodes of unknown room); ``blocked`` pods are known to stay pending (another rule refused them),
    so no one may count on joining them; ``landing`` are the pods with what earlier rules derived
    (``rules.podaffinity``): where they can actually go."""
    pl = _Planner(pending, bound, nodes, blocked, landing)
    soft_done: set[tuple[str, DomainRule]] = set()
    hard_done: set[tuple[str, DomainRule]] = set()
    for pod in pending:
        for rule in pl.rules[pod.key]:
            if not rule.hard:
                if (pod.key, rule) not in soft_done:
                    _plan_soft(pl, pod, rule, soft_done)
            elif pod.key not in pl.blocked and (pod.namespace, rule) not in hard_done:
                # planned once per (namespace, rule), even when the carrier is already pinned by another
                # group: its constraint counts the pods its selector matches, not itself
                hard_done.add((pod.namespace, rule))
                _plan_hard(pl, pod, rule)
    _join_pending(pl)
    return pl.result


@dataclass
class _Join:
    """Required affinity (not on the hostname) of ``owners`` to pending pods of another workload
    (``targets``), none running."""

    term: PodAffinityTerm
    owners: list[Pod]
    targets: list[Pod]

    @property
    def key(self) -> str:
        return self.term.topology_key

    @property
    def rule(self) -> DomainRule:
        return DomainRule(self.key, "pod affinity", True, self.term.selector or LabelSelector())


def _join_pending(pl: _Planner) -> None:
    """Required affinity (not on the hostname) to pending pods of another workload, none running: the
    owners go where the pods they select are pinned, or both are pinned to one domain both can use and
    that can hold them. Owners whose targets all stay pending stay pending too (to a fixed point: chains of
    such terms). Owners already pinned by a rule of their own, or whose targets are pinned on another key,
    are left (``DomainRules.unmodelled`` reports them)."""
    pods = [pl.lands(p) for p in pl.pending]
    stuck = pl.blocked | set(pl.result.refused)
    joins = _find_joins(pl, pods)
    _refuse_stranded_owners(pl, joins, stuck)
    for join in joins:
        owners = [o for o in join.owners if o.key not in stuck]
        targets = [t for t in join.targets if t.key not in stuck and pl.reach(t, join.key).domains]
        if owners and targets:
            home = _home_of(pl, join, owners, targets)
            if home is not None:
                _pin_join(pl, join, owners, home)


def _find_joins(pl: _Planner, pods: Sequence[Pod]) -> list[_Join]:
    """One join per (namespace, term) whose owners no rule pinned yet and whose targets are pending pods."""
    joins: list[_Join] = []
    seen: set[tuple[str, PodAffinityTerm]] = set()
    for pod in pods:
        for term in pod.pod_affinity:
            if (term.topology_key == HOSTNAME or term.selector is None or (pod.namespace, term) in seen
                    or term.selects(pod.namespace, pod.labels, pod.namespace, pod.labels)):
                continue
            seen.add((pod.namespace, term))
            if any(term.topology_key in labels and term.selects(pod.namespace, pod.labels, o.namespace, o.labels)
                   for o, labels in pl.bound):
                continue  # running matches: ``rules.podaffinity`` confines it to their domains
            owners = [p for p in pods if p.namespace == pod.namespace and term in p.pod_affinity
                      and p.key not in pl.settled]
            owner_keys = {p.key for p in owners}
            targets = [p for p in pods if p.key not in owner_keys
                       and term.selects(pod.namespace, pod.labels, p.namespace, p.labels)]
            if owners and targets:
                joins.append(_Join(term, owners, targets))
    return joins


def _refuse_stranded_owners(pl: _Planner, joins: Sequence[_Join], stuck: set[str]) -> None:
    """Owners whose targets all stay pending (or land in no domain) stay pending, to a fixed point."""
    changed = True
    while changed:
        changed = False
        for join in joins:
            if any(o.key not in stuck for o in join.owners) and all(
                    t.key in stuck or not pl.reach(t, join.key).domains for t in join.targets):
                for owner in join.owners:
                    pl.refuse(owner, f"required pod affinity with {_selector(join.term)} on {join.key}: none of "
                                     f"the {len(join.targets)} pending pods it selects can be scheduled, and none runs")
                stuck.update(o.key for o in join.owners)
                changed = True


def _home_of(pl: _Planner, join: _Join, owners: list[Pod], targets: list[Pod]) -> str | None:
    """Where the join's owners go, pinning the targets no rule pinned yet there too; None when the join is
    left alone (either side pinned on another key, or both sides pinned apart: the verifier tells)."""
    key = join.key
    placed, joined = pl.pins_on(key, targets), pl.pins_on(key, owners)
    free = [t for t in targets if t.key not in pl.settled]
    if len(placed) + len(free) < len(targets) or len(joined) + sum(o.key not in pl.settled for o in owners) \
            < len(owners):
        return None  # pinned on another key by a rule of their own
    reason = f"{join.rule.describe()} (pods that require it join it there)"
    if joined:  # the owners are themselves the targets of another such term: the targets come to them
        home = max(sorted(set(joined)), key=joined.count)
        if (placed and home not in placed) or not all(home in pl.reach(t, key).domains for t in free):
            return None
    elif placed:
        return max(sorted(set(placed)), key=placed.count)
    else:
        common = [d for d in pl.reach(owners[0], key).domains if all(d in pl.reach(t, key).domains for t in free)]
        if not common:
            names = ", ".join(sorted({d for t in free for d in pl.reach(t, key).domains}))
            for owner in owners:
                pl.refuse(owner, f"{join.rule.describe()}: the pods it selects may only run in {names}, "
                                 "where it may not")
            return None
        home = _home(pl, [*free, *owners], key, common, {})
    for target in free:
        pl.pin(target, key, home, reason)
    return home


def _pin_join(pl: _Planner, join: _Join, owners: list[Pod], home: str) -> None:
    """Pin the owners no rule pinned yet to their targets' home, or leave them pending when they cannot run
    there."""
    key = join.key
    reason = f"required pod affinity with {_selector(join.term)} on {key} (where the pods it selects go)"
    open_domains = pl.reach(owners[0], key).domains
    for owner in owners:
        if owner.key in pl.result.pins:
            continue
        if home in open_domains:
            pl.pin(owner, key, home, reason)
        else:
            pl.refuse(owner, f"{reason}: they are placed in {home}, where it may not run")
    pl.settled.update(o.key for o in owners)


def _selector(term: PodAffinityTerm) -> str:
    return term.selector.describe() if term.selector else "no pod"


def apply(pods: Sequence[Pod], plan: DomainPlan) -> list[Pod]:
    """Copies of the pods carrying the plan: zone pins, other pins and exclusions as rule terms, soft pins
    as preferences."""
    out = []
    for pod in pods:
        update: dict[str, object] = {}
        terms, reasons = list(pod.rule_terms), list(pod.rule_reasons)
        if pod.key in plan.refused and pod.key not in plan.pins:
            update["rule_problem"] = plan.refused[pod.key]
        else:
            if pod.key in plan.pins:
                key, value = plan.pins[pod.key]
                if key == ZONE:
                    update["zone_pin"] = value
                else:
                    terms.append((Requirements.of([Requirement(key=key, operator="In", values=(value,))]),))
                    reasons.append(plan.pinned_by[pod.key])
            for key, values, reason in plan.excluded.get(pod.key, ()):
                terms.append((Requirements.of([Requirement(key=key, operator="NotIn", values=values)]),))
                reasons.append(reason)
        if len(terms) > len(pod.rule_terms):
            update["rule_terms"], update["rule_reasons"] = tuple(terms), tuple(reasons)
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
    relaxable = True

    def constrain(self, batch: BatchContext, pods: list[Pod]) -> list[Pod]:
        if not any(p.topology_spread or p.pod_affinity or p.pod_anti_affinity or p.preferred_pod_affinity
                   or p.preferred_pod_anti_affinity for p in pods):
            return pods
        submitted = [batch.submitted.get(p.key, p) for p in pods]
        blocked = {p.key for p in pods if p.rule_problem or p.volume_problem}
        return apply(pods, plan_domains(submitted, batch.placed, domain_nodes(batch), blocked, pods))

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

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        """Pins fix each pod's domain before packing: another split may be cheaper."""
        pinned = [c.name for c in classes if not c.representative.rule_problem and (
            c.representative.zone_pin or any(r.endswith(_PIN_REASONS) for r in c.representative.rule_reasons))]
        if not pinned:
            return []
        shown = ", ".join(pinned[:3]) + (f" and {len(pinned) - 3} more" if len(pinned) > 3 else "")
        return [f"domains chosen before packing for {shown} (zone spread / pod (anti-)affinity pins): "
                "a plan splitting them otherwise may be cheaper"]


#: the endings of the reasons this module's pins carry (``pinned_by``)
_PIN_REASONS = ("(its share of the domains)", "(pods that require it join it there)",
                "(where the pods it selects go)")
