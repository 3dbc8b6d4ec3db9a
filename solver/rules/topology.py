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

Hard. First, required anti-affinity between workloads (A's term selects B's pending pods, not A's own)
splits each key's domains between the sides (``_split_apart``). Then every hard rule's group, anti-affinity
groups first, then affinity, then spread (``_KIND_ORDER``): each group is every pending pod its selector
matches, planned once whether or not the pod carrying it is already pinned (a constraint counts the pods it
matches, not its carrier). A pod keeps one pin per key and carries every rule's at once: pins and
exclusions narrow its reach, so a pod an earlier group pinned is a member of every later group with its
pinned domain as its only choice (counted there; a carrier there only if the rule allows it, else it stays
pending naming both rules), and a rule on another key adds a second pin (a ``rule_terms`` term). Pods that
match but do not carry the rule keep their own selection:
- Anti-affinity between workloads: per key, sides (pods alike in namespace, labels, terms and reach) most
  constrained first each take one domain no neighbour holds (the one that starves no neighbour, then the
  cheapest, then the one fewest neighbours still need); the rest go round to the side holding fewest, sides
  spread on the key first. Each side is kept out of the domains it does not hold (``NotIn``: nodes without
  the key stay open, as Kubernetes leaves them). A side left with no domain stays pending when it carries
  the term; a side that is only selected takes its domain back from the owners, which stay pending.
- DoNotSchedule spread: matching pods without the constraint count where they land: each is pinned within
  its own reach (lowest domain first) on nodes the constraint counts, or left alone when it can only land
  where it is not counted. Carriers then go lowest-first, most constrained first, each only where its
  domain stays within maxSkew of the global minimum (0 while fewer than minDomains domains are sure to
  exist), so full existing-only domains and counted domains the carrier cannot use cap the others.
  Carriers the selector does not match add nothing but are kept out of domains above maxSkew.
- Required anti-affinity to its own pods: one carrier per domain, none where a matching pod runs or is
  pinned, or where a rule-free matching pod can only land; rule-free matching pods get ``NotIn`` the
  carriers' domains (anti-affinity is symmetric) and may share a domain with each other. A carrier never
  takes a rule-free pod's last domain.
- Required affinity to its own pods: all carriers in one home that can hold them (most matching pods,
  then room for most of the group — capacity, NodePool zones, an instance type large enough — then
  name). Rule-free matching pods join it when they can (the layout that holds in any bind order); a lone
  carrier needs one beside it when any exists (Kubernetes lets the first pod go anywhere only while no
  other matching pod exists).
- Required affinity to pending pods of another workload, none running: owners an earlier rule pinned need
  a selected pod in their own domain; the others are served domain by domain (most owners first, then a
  domain already holding a selected pod); a domain none is pinned to yet gets one (the freest: no
  hostname affinity of its own, else with the pods that share its node). Owners no domain serves, or
  whose selected pods all stay pending (to a fixed point), stay pending.
Every pin assumes the pinned pods land: when a later rule leaves one pending, joins pin another selected
pod or leave their owners pending, and spread groups are recounted, their carriers now above maxSkew left
pending (``_repair_spread``); a pod left pending by capacity still lowers its domain's count.

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
from model.pod import Pod, PodShape, PreferredTerm
from model.requirements import Requirement, Requirements
from model.resources import Resources
from model.taints import Taint, untolerated
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule
from solver.rules.counters import NodeCounter
from solver.rules.podaffinity import confined, selects_own
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
    #: pod key → topology key → the domain it must land in (one pin per key: every hard rule of the pod on
    #: that key agreed to it; a rule on another key adds a second pin)
    pins: dict[str, dict[str, str]] = field(default_factory=dict)
    #: pod key → (topology key, domain) it prefers
    soft: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    #: pod key → topology key → the rule behind its pin
    pinned_by: dict[str, dict[str, str]] = field(default_factory=dict)
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
    #: $/h of a node launched from this template (0 for an existing node: its room is free)
    price: float = 0.0


def domain_nodes(batch: BatchContext) -> list[DomainNode]:
    """Every node the batch's pods could land on (templates, then schedulable existing nodes) and the nodes
    they cannot join but Kubernetes counts as domains (every other Node not being deleted)."""
    nodes = [DomainNode(t.labels, tuple(t.pool.taints), t.allocatable, price=t.offering.price) for t in batch.templates]
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
    key: str = ""


class _Planner:
    """The state one ``plan_domains`` call works on: the plan so far, which pods are settled, the room left
    on existing nodes, and memoised reach per pod shape."""

    def __init__(self, pending: Sequence[Pod], bound: Sequence[tuple[Pod, Mapping[str, str]]],
                 nodes: Sequence[NodeInput], blocked: frozenset[str] | set[str], landing: Sequence[Pod],
                 namespaces: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.pending = pending
        self.namespaces = namespaces or {}
        self.bound = bound
        self.nodes = [n if isinstance(n, DomainNode) else DomainNode(n[0], tuple(n[1])) for n in nodes]
        self.blocked = set(blocked)
        self.landing = {p.key: p for p in landing}
        # a pod's rules read only what its replicas share (``PodShape``): worked out once per shape, the
        # lists and sets shared (read only) by the replicas
        by_shape: dict[int, tuple[list[DomainRule], set[DomainRule]]] = {}
        for pod in pending:
            if id(pod.shape) not in by_shape:
                rules = domain_rules(pod)
                by_shape[id(pod.shape)] = (rules, set(rules))
        self.rules = {pod.key: by_shape[id(pod.shape)][0] for pod in pending}
        self.carries = {pod.key: by_shape[id(pod.shape)][1] for pod in pending}
        #: rule → the pending pods carrying it
        self.carriers_of: dict[DomainRule, list[Pod]] = {}
        for pod in pending:
            for rule in self.carries[pod.key]:
                self.carriers_of.setdefault(rule, []).append(pod)
        self.result = DomainPlan()
        #: pods no later group may plan (refused, or left to node selection: no node takes them); pinned
        #: pods stay in every later group that reads them, their pins narrowing where they can go
        self.settled: set[str] = set()
        self.room = {i: n.room for i, n in enumerate(self.nodes) if n.existing and n.room is not None}
        self.taints_of = {n.name: n.taints for n in self.nodes if n.name}
        self._reach: dict[object, _Reach] = {}
        self._counted: dict[object, dict[str, bool]] = {}
        self._shapes: dict[str, tuple[object, ...]] = {}
        #: pinned pods: (the shape without its pins, the pins)
        self._bases: dict[str, tuple[tuple[object, ...], tuple[tuple[str, str], ...]]] = {}
        self._usable: dict[tuple[object, ...], list[int]] = {}
        #: (requirements, tolerations) → the schedulable nodes they admit: shapes differ mostly in requests
        self._admitted: dict[tuple[object, object], list[int]] = {}
        self._views: dict[tuple[DomainRule, str], int] = {}
        #: shapes and views as small numbers (``shape_id``, ``_view``): memo keys hashed once, not per lookup
        self._interned: dict[tuple[object, ...], int] = {}
        self._shape_ids: dict[str, int] = {}
        self._reach_of: dict[str, dict[str, _Reach]] = {}
        #: the spread groups planned: (viewer, rule, the domains its global minimum is taken over)
        self.spreads: list[tuple[Pod, DomainRule, frozenset[str]]] = []
        #: each pending pod's (namespace, labels) group, in ``pending``'s order, and one pod of each group:
        #: a selector is matched once per group, not once per pod (50,000 pods are a few dozen groups)
        groups: dict[tuple[str, frozenset[tuple[str, str]]], int] = {}
        self._group_of = [groups.setdefault((p.namespace, frozenset(p.labels.items())), len(groups))
                          for p in pending]
        first: dict[int, Pod] = {}
        for pod, group in zip(pending, self._group_of, strict=True):
            first.setdefault(group, pod)
        self._group_pods = list(first.values())  # groups are numbered in the order first met
        self._selected: dict[tuple[str, object], list[bool]] = {}

    def selected(self, namespace: str, selector: LabelSelector) -> list[Pod]:
        """The pending pods of ``namespace`` that ``selector`` matches, in ``pending``'s order."""
        memo = (namespace, selector)
        if memo not in self._selected:
            self._selected[memo] = [p.namespace == namespace and selector.matches(p.labels) for p in self._group_pods]
        hits = self._selected[memo]
        return [p for p, g in zip(self.pending, self._group_of, strict=True) if hits[g]]

    # -- where pods can go ------------------------------------------------------------------------------

    def lands(self, pod: Pod) -> Pod:
        """The pod with what earlier rules derived (where it can actually go)."""
        return self.landing.get(pod.key, pod)

    def shape(self, pod: Pod) -> tuple[object, ...]:
        """What decides where the pod can land: node requirements (its pins so far included), tolerations,
        requests (memoised)."""
        if pod.key not in self._shapes:
            landing = self.lands(pod)
            requirements = landing.node_requirements()
            base = (requirements, landing.tolerations, landing.requests)
            pins = self.result.pins.get(pod.key)
            if pins:
                pinned = Requirements.of([Requirement(key=k, operator="In", values=(d,))
                                          for k, d in sorted(pins.items())])
                requirements = tuple(alt & pinned for alt in requirements)
                self._bases[pod.key] = (base, tuple(sorted(pins.items())))
            else:
                self._bases.pop(pod.key, None)
            self._shapes[pod.key] = (requirements, landing.tolerations, landing.requests)
        return self._shapes[pod.key]

    def shape_id(self, pod: Pod) -> int:
        """``shape(pod)`` as a number: equal shapes, equal numbers."""
        if pod.key not in self._shape_ids:
            self._shape_ids[pod.key] = self._intern(("shape", *self.shape(pod)))
        return self._shape_ids[pod.key]

    def _intern(self, value: tuple[object, ...]) -> int:
        return self._interned.setdefault(value, len(self._interned))

    def _touch(self, key: str) -> None:
        """Forget what was worked out for the pod (a pin or an exclusion changed where it can go)."""
        self._shapes.pop(key, None)
        self._shape_ids.pop(key, None)
        self._reach_of.pop(key, None)

    def pinned(self, pod: Pod, key: str) -> str | None:
        """The domain an earlier rule pinned the pod to on ``key``, if any."""
        return self.result.pins.get(pod.key, {}).get(key)

    def _usable_nodes(self, pod: Pod) -> list[int]:
        """The nodes (by index) the pod may land on and fits on, memoised per pod shape."""
        shape = self.shape(pod)
        if shape not in self._usable and pod.key in self._bases:
            # pinned: the unpinned shape's nodes that carry its pins (no need to match every node again)
            base, pins = self._bases[pod.key]
            if base not in self._usable:
                self._usable[base] = self._match_nodes(base)
            self._usable[shape] = [i for i in self._usable[base]
                                   if all(self.nodes[i].labels.get(k) == d for k, d in pins)]
        if shape not in self._usable:
            self._usable[shape] = self._match_nodes(shape)
        return self._usable[shape]

    def _match_nodes(self, shape: tuple[object, ...]) -> list[int]:
        """The nodes (by index) a pod of this shape may land on and fits on."""
        requirements, tolerations, requests = shape
        assert isinstance(requirements, tuple) and isinstance(requests, Resources)
        admitted = self._admitted.get((requirements, tolerations))
        if admitted is None:
            admitted = self._admitted[(requirements, tolerations)] = [
                i for i, node in enumerate(self.nodes)
                if node.schedulable and any(r.matches(node.labels) for r in requirements)
                and not untolerated(tolerations, node.taints)]  # type: ignore[arg-type]
        fits: dict[Resources, bool] = {}
        out = []
        for i in admitted:
            room = self.nodes[i].room
            if room is not None:
                if room not in fits:
                    fits[room] = requests.fits_in(room)
                if not fits[room]:
                    continue
            out.append(i)
        return out

    def reach(self, pod: Pod, key: str) -> _Reach:
        """Where the pod can land on ``key`` (memoised per pod, and per pod shape)."""
        mine = self._reach_of.setdefault(pod.key, {})
        if key not in mine:
            mine[key] = self._shape_reach(pod, key)
        return mine[key]

    def _shape_reach(self, pod: Pod, key: str) -> _Reach:
        memo = (key, self.shape_id(pod))
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
                                       {d: tuple(v) for d, v in hosts.items()}, keyless, key)
        return self._reach[memo]

    def _view(self, rule: DomainRule, viewer: Pod) -> int:
        """What decides which nodes ``viewer``'s constraint counts, as a number (memoised per rule and viewer)."""
        memo = (rule, viewer.key)
        if memo not in self._views:
            self._views[memo] = self._intern(("view", rule.key, rule.affinity_honoured and viewer.node_requirements(),
                                              rule.taints_honoured and viewer.tolerations))
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
        memo = (self._view(rule, viewer), self.shape_id(pod))
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
        """Can the pod still land in the domain? (A pod already pinned there has its room.)"""
        return domain in reach.launchable or self.pinned(pod, reach.key) == domain or any(
            pod.requests.fits_in(self.room[i]) for i in reach.hosts.get(domain, ()))

    def cost(self, pod: Pod, reach: _Reach, domain: str) -> float:
        """$/h of the cheapest node the pod may use in the domain (0: an existing node has room for it)."""
        if any(pod.requests.fits_in(self.room[i]) for i in reach.hosts.get(domain, ())):
            return 0.0
        prices = [self.nodes[i].price for i in self._usable_nodes(pod) if not self.nodes[i].existing
                  and self.nodes[i].labels.get(reach.key) == domain]
        return min(prices, default=float("inf"))

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
            if domain in reach.launchable or self.pinned(pod, key) == domain:
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
        """Pin the pod to the domain on ``key``; a pod an earlier rule pinned there already stays as it is
        (every rule that groups it has to agree with the first pin: its reach is that one domain)."""
        earlier = self.pinned(pod, key)
        if earlier == domain:
            return
        assert earlier is None, (pod.key, key, earlier, domain)
        self.take(pod, self.reach(pod, key), domain)
        self.result.pins.setdefault(pod.key, {})[key] = domain
        self.result.pinned_by.setdefault(pod.key, {})[key] = reason
        self._touch(pod.key)

    def refuse(self, pod: Pod, reason: str) -> None:
        """Leave the pod pending; the reason names the rules that narrowed it before, if any."""
        if pod.key in self.result.refused:
            return
        earlier = [f"{self.result.pinned_by[pod.key][k]} pins it to {k}={d}"
                   for k, d in sorted(self.result.pins.get(pod.key, {}).items())]
        earlier += [why for _, _, why in self.result.excluded.get(pod.key, ())]
        if earlier:
            reason = f"{reason}, together with: " + "; ".join(earlier)
        self.result.refused[pod.key] = reason
        self.settled.add(pod.key)

    def exclude(self, pod: Pod, key: str, domains: Sequence[str], reason: str) -> None:
        """Keep the pod out of ``domains`` (a ``key NotIn`` term); later groups see it (its reach shrinks)."""
        self.result.excluded.setdefault(pod.key, []).append((key, tuple(domains), reason))
        term = Requirements.of([Requirement(key=key, operator="NotIn", values=tuple(domains))])
        landing = self.lands(pod)
        self.landing[pod.key] = landing.model_copy(update={"rule_terms": (*landing.rule_terms, (term,))})
        self._touch(pod.key)

    def pins_on(self, key: str, pods: Sequence[Pod]) -> list[str]:
        return [d for p in pods if (d := self.pinned(p, key)) is not None]

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
    matching = [p for p in pl.selected(pod.namespace, rule.selector)
                if p.key not in pl.blocked and p.key not in pl.settled]
    counts = pl.running_counts(rule, pod)
    # pods an earlier group pinned on the key are members too: their reach is their pinned domain, so the
    # rule counts them there and a carrier among them keeps its pin only if this rule allows it
    carriers = [p for p in matching if rule in pl.carries[p.key]]
    others = [p for p in matching if rule not in pl.carries[p.key]]
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
        _plan_anti(pl, rule, carriers, others, counts)
    else:
        _plan_affine(pl, rule, carriers, others, counts)


def _same_shape(pl: _Planner, pods: Sequence[Pod], key: str, reaches: Mapping[str, _Reach]) -> None:
    """Re-deal the pins of pods with one reach (``reaches``: before this group pinned them) so that pods
    sorted by key fill domains sorted by name (the plan reads the same whatever order the group was dealt
    in)."""
    shapes: dict[int, list[Pod]] = {}
    for pod in pods:
        if pl.pinned(pod, key) is not None and pod.key in reaches:
            shapes.setdefault(id(reaches[pod.key]), []).append(pod)
    for members in shapes.values():
        pins = sorted((pl.result.pins[p.key][key], pl.result.pinned_by[p.key][key]) for p in members)
        for member, (domain, reason) in zip(sorted(members, key=lambda p: p.key), pins, strict=True):
            if pl.result.pins[member.key][key] != domain:
                pl.result.pins[member.key][key], pl.result.pinned_by[member.key][key] = domain, reason
                pl._touch(member.key)


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
    pl.spreads.append((viewer, rule, frozenset(floor.domains)))
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
    _same_shape(pl, carriers, key, reaches)
    _place_outsiders(pl, viewer, rule, counts, maybe, floor)


def _place_outsiders(pl: _Planner, viewer: Pod, rule: DomainRule, counts: Mapping[str, int],
                     maybe: Mapping[str, int], floor: _Floor) -> None:
    """Carriers the selector does not match (a spread on other pods' label): they add nothing to the counts,
    but Kubernetes still holds their own domain to at most maxSkew above the global minimum. Each keeps out
    of the domains where that fails (all of them: it stays pending); one that could land on a node without
    the key is pinned to the emptiest domain instead (such a node fails the constraint)."""
    outsiders = [p for p in pl.carriers_of.get(rule, ()) if p.namespace == viewer.namespace
                 and not rule.selector.matches(p.labels) and p.key not in pl.blocked and p.key not in pl.settled]
    low = 0 if rule.min_domains is not None and len(floor.sure) < rule.min_domains else floor.low
    for pod in sorted(outsiders, key=lambda p: p.key):
        _hold_outsider(pl, pod, rule, {d: counts.get(d, 0) + maybe.get(d, 0) for d in set(counts) | set(maybe)}, low)


def _hold_outsider(pl: _Planner, pod: Pod, rule: DomainRule, counts: Mapping[str, int], low: int) -> bool:
    """Keep one carrier the selector does not match within maxSkew (``_place_outsiders``); False when it
    had to be left pending."""
    key = rule.key
    fixed = pl.pinned(pod, key)
    if fixed is not None and counts.get(fixed, 0) - low <= rule.max_skew:
        return True  # pinned (by a group it is counted in) where its own constraint holds
    reach = pl.reach(pod, key)
    if not reach.domains:
        if reach.keyless:
            pl.refuse(pod, f"{rule.describe()}: no node it may use carries the label {key}")
            return False
        return True
    allowed = [d for d in reach.domains if counts.get(d, 0) - low <= rule.max_skew]
    if not allowed or (fixed is not None and fixed not in allowed):
        where = (f"{key}={fixed}" if fixed is not None
                 else f"every {_noun(key)[:-1]} it may use ({', '.join(reach.domains)})")
        pl.refuse(pod, f"{rule.describe()}: {where} holds more than maxSkew {rule.max_skew} matching pods above "
                       f"the global minimum {low}")
        return False
    if reach.keyless:
        roomy = [d for d in allowed if pl.has_room(pod, reach, d)] or allowed
        pl.pin(pod, key, min(roomy, key=lambda d: (counts.get(d, 0), d)),
               f"{rule.describe()}, which does not count it (its share of the domains)")
    elif len(allowed) < len(reach.domains):
        closed = [d for d in reach.domains if d not in allowed]
        pl.exclude(pod, key, closed, f"{rule.describe()}, which does not count it: {', '.join(closed)} hold too many "
                                     "matching pods (its share of the domains)")
    return True


def _repair_spread(pl: _Planner) -> None:
    """Every spread group was dealt assuming the pods it counted land; a later rule may have left some of
    them pending, lowering their domain's count. Recount each group over the pods still pinned and leave
    pending the carriers whose domain now sits more than maxSkew above the global minimum, to a fixed point
    (what remains holds on the final state; each such pod names the rule)."""
    if not pl.result.refused or not pl.spreads:
        return
    changed = True
    while changed:
        changed = False
        for viewer, rule, domains in pl.spreads:
            key = rule.key
            counted = pl.counted(rule, viewer)
            high = pl.running_counts(rule, viewer)  # every pod that may count there
            low_counts = dict(high)  # only the pods that surely count there
            members = [p for p in pl.pending if p.namespace == viewer.namespace and p.key not in pl.blocked
                       and p.key not in pl.result.refused and rule.selector.matches(p.labels)]
            for pod in members:
                domain = pl.pinned(pod, key)
                if domain is None or domain not in counted:
                    continue
                high[domain] = high.get(domain, 0) + 1
                if pl.counted_reach(pod, rule, viewer).get(domain, False):
                    low_counts[domain] = low_counts.get(domain, 0) + 1
            sure = {d for d, existing in counted.items() if existing} | {d for d, n in low_counts.items() if n}
            low = 0 if rule.min_domains is not None and len(sure) < rule.min_domains else min(
                (low_counts.get(d, 0) for d in domains), default=0)
            carriers = [p for p in pl.carriers_of.get(rule, ()) if p.namespace == viewer.namespace
                        and p.key not in pl.result.refused and p.key not in pl.blocked]
            for carrier in sorted(carriers, key=lambda p: p.key):
                domain = pl.pinned(carrier, key)
                if not rule.selector.matches(carrier.labels):
                    changed |= not _hold_outsider(pl, carrier, rule, high, low)
                    continue
                if domain is not None and high.get(domain, 0) - low > rule.max_skew:
                    pl.refuse(carrier, f"{rule.describe()}: pods it counted on elsewhere stay pending, which leaves "
                                       f"{key}={domain} {high.get(domain, 0) - low} above the global minimum "
                                       f"{low} (maxSkew {rule.max_skew})")
                    if rule.selector.matches(carrier.labels):
                        high[domain] -= 1
                    changed = True


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
    reaches = {p.key: pl.reach(p, key) for p in carriers}
    for carrier in sorted(carriers, key=lambda p: (len(reaches[p.key].domains), p.key)):
        reach = reaches[carrier.key]
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
    _same_shape(pl, carriers, key, reaches)


def _plan_affine(pl: _Planner, rule: DomainRule, carriers: list[Pod], others: list[Pod], counts: dict[str, int]
                 ) -> None:
    """Required affinity to its own pods: the carriers share one home domain that can hold them, the one
    holding most matching pods first. Matching pods without the term go with them when they may (else they
    are free); a lone carrier needs one of them beside it when any exists."""
    if not carriers:
        return
    key = rule.key
    shared = set(pl.reach(carriers[0], key).domains)
    every: set[str] = set()
    for carrier in carriers:
        shared &= set(pl.reach(carrier, key).domains)
        every |= set(pl.reach(carrier, key).domains)
    # no domain every carrier may use (earlier pins or node selection differ): the one holding most of them
    candidates = sorted(shared) or sorted(every)
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
        elif pl.pinned(carrier, key) is not None:
            pl.refuse(carrier, f"{rule.describe()}: the group's home is {key}={home}")
        else:
            pl.refuse(carrier, f"{rule.describe()}: the group's home {home} ({_noun(key)} {', '.join(candidates)} "
                               "considered) has no room for it")
    for other in sorted(others, key=lambda p: p.key):  # free to go elsewhere, but welcome beside the group
        reach = pl.reach(other, key)
        if home in reach.domains and pl.has_room(other, reach, home):
            pl.pin(other, key, home, f"{rule.describe()} of the pods it matches (its share of the domains)")


#: the order hard rule groups are planned in: the ones that can only refuse pods first, spread last (a pod
#: a later rule leaves pending lowers its domain's count, which only spread reads)
_KIND_ORDER = {"pod anti-affinity": 0, "pod affinity": 1, "topology spread": 2}


def plan_domains(pending: Sequence[Pod], bound: Sequence[tuple[Pod, Mapping[str, str]]],
                 nodes: Sequence[NodeInput], blocked: frozenset[str] | set[str] = frozenset(),
                 landing: Sequence[Pod] = (), namespaces: Mapping[str, Mapping[str, str]] | None = None
                 ) -> DomainPlan:
    """Pins, exclusions and soft pins for pending pods. ``bound`` pairs each running pod with its node's
    labels; ``nodes`` are every node the plan could use (``domain_nodes``; bare (labels, taints) pairs are
    read as nodes of unknown room); ``blocked`` pods are known to stay pending (another rule refused them),
    so no one may count on joining them; ``landing`` are the pods with what earlier rules derived
    (``rules.podaffinity``): where they can actually go; ``namespaces`` their labels (namespaceSelector).

    Order: anti-affinity between workloads splits the domains first (``_split_apart``), then every hard
    rule's group in ``_KIND_ORDER`` (each group sees the pins and exclusions before it: a pod's second rule
    pins it within the first one's domain, or on its own key as a second pin, or leaves it pending naming
    both), then affinity to other workloads' pending pods, then the soft rules."""
    pl = _Planner(pending, bound, nodes, blocked, landing, namespaces)
    _split_apart(pl)
    hard: list[tuple[Pod, DomainRule]] = []
    hard_done: set[tuple[str, DomainRule]] = set()
    for pod in pending:
        for rule in pl.rules[pod.key]:
            if rule.hard and pod.key not in pl.blocked and (pod.namespace, rule) not in hard_done:
                # planned once per (namespace, rule), even when the carrier is already pinned by another
                # group: its constraint counts the pods its selector matches, not itself
                hard_done.add((pod.namespace, rule))
                hard.append((pod, rule))
    for pod, rule in sorted(hard, key=lambda item: _KIND_ORDER[item[1].kind]):
        _plan_hard(pl, pod, rule)
    _join_pending(pl)
    _repair_spread(pl)
    soft_done: set[tuple[str, DomainRule]] = set()
    for pod in pending:
        for rule in pl.rules[pod.key]:
            if not rule.hard and (pod.key, rule) not in soft_done:
                _plan_soft(pl, pod, rule, soft_done)
    return pl.result


# -- required anti-affinity between workloads on a domain key -------------------------------------------------

@dataclass
class _Side:
    """Pending pods that one split treats alike: one namespace, labels, anti-affinity terms and shape, so
    the same pods repel them and they may use the same domains."""

    pods: list[Pod]
    reach: _Reach
    #: the side's own terms that select a neighbour (empty: it is only selected by theirs)
    terms: list[PodAffinityTerm] = field(default_factory=list)
    near: set[int] = field(default_factory=set)
    held: list[str] = field(default_factory=list)
    dead: bool = False

    @property
    def name(self) -> str:
        pod = self.pods[0]
        return f"{pod.namespace}/{pod.owner_name or pod.name}"


def _cross_terms(pod: Pod, namespaces: Mapping[str, Mapping[str, str]]) -> list[PodAffinityTerm]:
    """The pod's required anti-affinity terms on a domain key that do not select its own pods."""
    return [t for t in pod.pod_anti_affinity if t.topology_key != HOSTNAME and t.selector is not None
            and not t.selects(pod.namespace, pod.labels, pod.namespace, pod.labels, namespaces.get(pod.namespace))]


def _split_apart(pl: _Planner) -> None:
    """Required anti-affinity on a domain key from pending pods to pending pods of other workloads (A's term
    selects B's pods, not A's own). Kubernetes keeps an A pod out of a domain holding a B pod, and (the
    term is symmetric) a B pod out of one holding an A pod: the domains are split between the sides, each
    side kept out of the others' (``key NotIn``; nodes without the key stay open to both, as Kubernetes
    leaves them). Per key, sides most constrained first each take one domain none of their neighbours
    holds — the cheapest, then the one fewest neighbours still need — then the remaining domains go round,
    to the side holding fewest, so both sides of an edge keep room to spread. A side left with no domain
    stays pending when it carries the term; a side that only is selected takes its domain back from the
    owners holding it, and those stay pending (the rule is theirs)."""
    namespaces = pl.namespaces
    live = [p for p in pl.pending if p.key not in pl.blocked and p.key not in pl.settled]
    owned = [(p, t) for p in live for t in _cross_terms(p, namespaces)]
    if not owned:
        return
    by_labels: dict[tuple[str, frozenset[tuple[str, str]]], list[Pod]] = {}
    for pod in live:
        by_labels.setdefault((pod.namespace, frozenset(pod.labels.items())), []).append(pod)
    edges: dict[str, set[tuple[str, str]]] = {}  # key → {(owner pod key, selected pod key)}
    seen: dict[tuple[str, frozenset[tuple[str, str]], PodAffinityTerm], list[Pod]] = {}
    for owner, term in owned:
        memo = (owner.namespace, frozenset(owner.labels.items()), term)
        if memo not in seen:
            seen[memo] = [p for (ns, labels), members in by_labels.items()
                          if term.selects(owner.namespace, owner.labels, ns, dict(labels), namespaces.get(ns))
                          for p in members]
        edges.setdefault(term.topology_key, set()).update((owner.key, p.key) for p in seen[memo])
    pods = {p.key: p for p in live}
    for key in sorted(edges):
        _split_key(pl, key, edges[key], pods, namespaces)


def _split_key(pl: _Planner, key: str, edges: set[tuple[str, str]], pods: Mapping[str, Pod],
               namespaces: Mapping[str, Mapping[str, str]]) -> None:
    index: dict[tuple[object, ...], int] = {}
    sides: list[_Side] = []
    side_of: dict[str, int] = {}

    def side(pod_key: str) -> int:
        if pod_key not in side_of:
            pod = pods[pod_key]
            memo = (pod.namespace, frozenset(pod.labels.items()), pod.pod_anti_affinity, pl.shape(pod))
            if memo not in index:
                index[memo] = len(sides)
                sides.append(_Side([], pl.reach(pod, key)))
            side_of[pod_key] = index[memo]
            sides[index[memo]].pods.append(pod)
        return side_of[pod_key]

    for owner, target in sorted(edges):
        a, b = side(owner), side(target)
        if a != b:
            sides[a].near.add(b)
            sides[b].near.add(a)
    for s in sides:
        s.terms = [t for t in _cross_terms(s.pods[0], namespaces) if t.topology_key == key]
    noun = _noun(key)

    def holders(d: str, s: _Side) -> list[int]:
        return [v for v in s.near if d in sides[v].held]

    def options(s: _Side) -> list[str]:
        return [d for d in s.reach.domains if not holders(d, s) and pl.has_room(s.pods[0], s.reach, d)]

    def kill(s: _Side, reason: str) -> None:
        s.dead, s.held = True, []
        for pod in s.pods:
            pl.refuse(pod, reason)

    def describe(s: _Side) -> str:
        return ", ".join(sorted({_selector(t) for t in s.terms})) or "no pod"

    order = sorted(range(len(sides)), key=lambda i: (len(sides[i].reach.domains), -len(sides[i].pods),
                                                     sides[i].name, i))
    for i in order:
        s = sides[i]
        if not s.reach.domains:
            continue  # lands on nodes without the key only (or nowhere): it holds no domain
        open_domains = options(s)
        if not open_domains:
            near = sorted({sides[v].name for v in s.near})
            if s.terms:
                kill(s, f"required pod anti-affinity with {describe(s)} on {key}: the pods it repels "
                        f"({', '.join(near)}) take every {noun[:-1] if noun.endswith('s') else noun} it may use "
                        f"({', '.join(s.reach.domains)})")
                continue
            for v in sorted({v for d in s.reach.domains for v in holders(d, s)}):
                kill(sides[v], f"required pod anti-affinity with {describe(sides[v])} on {key}: the pods it "
                               f"repels ({s.name}) may only run in {noun} {', '.join(s.reach.domains)}, which it "
                               "would have to share with them")
            open_domains = options(s)
            if not open_domains:
                continue

        def score(d: str, s: _Side = s) -> tuple[object, ...]:
            waiting = [sides[v] for v in s.near if not sides[v].held and not sides[v].dead and sides[v].reach.domains]
            starved = sum(set(options(w)) <= {d} for w in waiting)
            return (starved, pl.cost(s.pods[0], s.reach, d), sum(d in w.reach.domains for w in waiting), d)

        s.held = [min(open_domains, key=score)]
    # the rest of the domains go round, to the side holding fewest: first the sides spread on the key (every
    # domain they hold lifts the cap the emptiest domain sets), then the others (a self-affine side needs one)
    domains = sorted({d for s in sides for d in s.reach.domains})
    for spread in (True, False):
        for d in domains:
            for s in sorted((s for s in sides if s.held and not s.dead and d in s.reach.domains and d not in s.held
                             and _spread_on(pl, s.pods[0], key) == spread and not _self_affine(pl, s.pods[0], key)),
                            key=lambda s: (len(s.held), -len(s.pods), s.name)):
                if not holders(d, s) and pl.has_room(s.pods[0], s.reach, d):
                    s.held.append(d)
    for s in sides:
        if s.dead or not s.held:
            continue
        closed = [d for d in s.reach.domains if d not in s.held]
        if not closed:
            continue
        near = sorted({sides[v].name for v in s.near})
        shown = ", ".join(near[:3]) + (f" and {len(near) - 3} more" if len(near) > 3 else "")
        reason = (f"pod anti-affinity on {key} between {s.name} and {shown} keeps it to {noun} "
                  f"{', '.join(sorted(s.held))} (its side of the domains)")
        for pod in s.pods:
            pl.exclude(pod, key, closed, reason)


def _spread_on(pl: _Planner, pod: Pod, key: str) -> bool:
    """Does the pod carry a hard spread constraint on ``key``?"""
    return any(r.hard and r.kind == "topology spread" and r.key == key for r in pl.rules.get(pod.key, ()))


def _self_affine(pl: _Planner, pod: Pod, key: str) -> bool:
    """Does the pod carry a hard affinity to its own pods on ``key`` (one domain is all it uses)?"""
    return any(r.hard and r.kind == "pod affinity" and r.key == key for r in pl.rules.get(pod.key, ()))


# -- required affinity to pending pods of other workloads on a domain key --------------------------------------

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
    that can hold them; an owner an earlier rule pinned needs a selected pod in its own domain (one is
    pinned there when none is), else it stays pending naming both rules. Owners whose targets all stay
    pending stay pending too (to a fixed point: chains of such terms)."""
    pods = [pl.lands(p) for p in pl.pending]
    stuck = pl.blocked | set(pl.result.refused)
    joins = _find_joins(pl, pods)
    _refuse_stranded_owners(pl, joins, stuck)
    for join in joins:
        owners = [o for o in join.owners if o.key not in stuck and o.key not in pl.result.refused]
        targets = [t for t in join.targets if t.key not in stuck and t.key not in pl.result.refused
                   and pl.reach(t, join.key).domains]
        if owners and targets:
            _place_join(pl, join, owners, targets)
    _recheck_joins(pl, joins)


def _recheck_joins(pl: _Planner, joins: Sequence[_Join]) -> None:
    """A target a later join (or rule) left pending leaves its owners' domain without one: pin another
    free target there, or leave those owners pending too, to a fixed point."""
    changed = True
    while changed:
        changed = False
        for join in joins:
            key = join.key
            gone = [t for t in join.targets if t.key in pl.result.refused]
            if not gone:
                continue
            alive = [t for t in join.targets if t.key not in pl.result.refused and t.key not in pl.blocked]
            for owner in join.owners:
                domain = pl.pinned(owner, key)
                if owner.key in pl.result.refused or domain is None or domain in pl.pins_on(key, alive):
                    continue
                spare = [t for t in alive if pl.pinned(t, key) is None and domain in pl.reach(t, key).domains
                         and pl.has_room(t, pl.reach(t, key), domain)]
                ranked = sorted(spare, key=lambda t: (_host_affinity_rank(t), sorted(t.requests.items()), t.key))
                units = [u for u in (_host_group(t, alive) for t in ranked) if all(m in spare for m in u)]
                if units:
                    for member in units[0]:
                        pl.pin(member, key, domain, f"{join.rule.describe()} (pods that require it join it there)")
                    _pin_host_partner(pl, units[0][0], key, domain)
                else:
                    pl.refuse(owner, f"required pod affinity with {_selector(join.term)} on {key}: the pods it "
                                     f"selects in {key}={domain} stay pending ({gone[0].key}: "
                                     f"{pl.result.refused[gone[0].key]})")
                changed = True


def _find_joins(pl: _Planner, pods: Sequence[Pod]) -> list[_Join]:
    """One join per (namespace, term) whose targets are pending pods."""
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
                      and p.key not in pl.settled and not selects_own(p, term)]  # self-affine ones: a group
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


def _place_join(pl: _Planner, join: _Join, owners: list[Pod], targets: list[Pod]) -> None:
    """Pin the join's owners to domains holding a target. An owner pinned on the key already needs a target
    in its own domain; the others are served domain by domain, the one most of them may use first (then
    one a target is pinned to already, then room for them, then name). A domain no target is pinned to yet
    gets one (the freest): each owner needs only one selected pod in its domain, and the other targets
    keep their own choice. Owners no domain serves stay pending."""
    key = join.key
    reason = f"{join.rule.describe()} (pods that require it join it there)"
    free = [t for t in targets if pl.pinned(t, key) is None]

    def has_target(domain: str) -> bool:
        return domain in pl.pins_on(key, targets)

    def take_target(domain: str) -> bool:
        """Pin the freest target (with the pods that share its node) to the domain."""
        takers = sorted((t for t in free if domain in pl.reach(t, key).domains
                         and pl.has_room(t, pl.reach(t, key), domain)),
                        key=lambda t: (_host_affinity_rank(t), sorted(t.requests.items()), t.key))
        units = (_host_group(t, free) for t in takers)
        unit = next((u for u in units if all(domain in pl.reach(m, key).domains
                                             and pl.has_room(m, pl.reach(m, key), domain) for m in u)), None)
        if not unit:
            return False
        for member in unit:
            pl.pin(member, key, domain, reason)
            free.remove(member)
        _pin_host_partner(pl, unit[0], key, domain)
        return True

    fixed: dict[str, list[Pod]] = {}
    for owner in owners:
        if (domain := pl.pinned(owner, key)) is not None:
            fixed.setdefault(domain, []).append(owner)
    for domain, pinned in sorted(fixed.items()):
        if not has_target(domain) and not take_target(domain):
            for owner in pinned:
                pl.refuse(owner, f"required pod affinity with {_selector(join.term)} on {key}: none of the pods it "
                                 f"selects can land in {key}={domain}")
    pin_reason = f"required pod affinity with {_selector(join.term)} on {key} (where the pods it selects go)"
    unserved = [o for o in owners if pl.pinned(o, key) is None]
    while unserved:
        def fits(owner: Pod, domain: str) -> bool:
            reach = pl.reach(owner, key)
            return domain in reach.domains and pl.has_room(owner, reach, domain)
        options = sorted({d for o in unserved for d in pl.reach(o, key).domains},
                         key=lambda d: (-sum(fits(o, d) for o in unserved), not has_target(d),
                                        -pl.holds(unserved, key, d), d))
        chosen = next((d for d in options if any(fits(o, d) for o in unserved)
                       and (has_target(d) or take_target(d))), None)
        if chosen is None:
            names = ", ".join(sorted({d for t in targets for d in pl.reach(t, key).domains}))
            for owner in unserved:
                pl.refuse(owner, f"{join.rule.describe()}: the pods it selects may only run in {names}, "
                                 "where it may not")
            return
        for owner in [o for o in unserved if fits(o, chosen)]:
            pl.pin(owner, key, chosen, pin_reason)
        unserved = [o for o in unserved if pl.pinned(o, key) is None]


def _host_affinity_rank(pod: Pod) -> int:
    """0: no required hostname affinity; 1: to its own pods (its group shares a node); 2: to other pods
    (a later rule may leave it pending)."""
    terms = [t for t in pod.pod_affinity if t.topology_key == HOSTNAME]
    if not terms:
        return 0
    return 1 if all(selects_own(pod, t) for t in terms) else 2


def _pin_host_partner(pl: _Planner, pod: Pod, key: str, domain: str) -> None:
    """A target pinned to ``domain`` whose required hostname affinity is to other pods needs one of those on
    its node (``rules.antiaffinity`` bundles it with one): pin the smallest rule-free one there too, unless
    one is pinned there already."""
    terms = [t for t in pod.pod_affinity if t.topology_key == HOSTNAME and not selects_own(pod, t)]
    if len(terms) != 1:
        return
    term = terms[0]
    selected = [p for p in pl.pending if p.key != pod.key and p.key not in pl.blocked and p.key not in pl.settled
                and term.selects(pod.namespace, pod.labels, p.namespace, p.labels, pl.namespaces.get(p.namespace))]
    if any(pl.pinned(p, key) == domain and _host_affinity_rank(p) == 0 for p in selected):
        return
    spare = [p for p in selected if pl.pinned(p, key) is None and _host_affinity_rank(p) == 0
             and domain in pl.reach(p, key).domains and pl.has_room(p, pl.reach(p, key), domain)]
    if spare:
        partner = min(spare, key=lambda p: (sorted(p.requests.items()), p.key))
        pl.pin(partner, key, domain, f"required pod affinity with {_selector(term)} on {HOSTNAME} of {pod.key}, "
                                     f"pinned to {key}={domain} (its share of the domains)")


def _host_group(pod: Pod, pods: Sequence[Pod]) -> list[Pod]:
    """The pod and the ``pods`` that carry the same required hostname affinity terms (they share a node, so
    a domain pin takes them all alike)."""
    terms = tuple(t for t in pod.pod_affinity if t.topology_key == HOSTNAME)
    if not terms:
        return [pod]
    return [p for p in pods if p.namespace == pod.namespace
            and tuple(t for t in p.pod_affinity if t.topology_key == HOSTNAME) == terms]


def _selector(term: PodAffinityTerm) -> str:
    return term.selector.describe() if term.selector else "no pod"


def apply(pods: Sequence[Pod], plan: DomainPlan) -> list[Pod]:
    """Copies of the pods carrying the plan: zone pins, other pins and exclusions as rule terms, soft pins
    as preferences."""
    out = []
    #: (the pod's shape, its update) → the updated shape: replicas planned alike share one copy
    copies: dict[tuple[int, tuple[tuple[str, object], ...]], PodShape] = {}
    for pod in pods:
        update: dict[str, object] = {}
        terms, reasons = list(pod.rule_terms), list(pod.rule_reasons)
        if pod.key in plan.refused:
            update["rule_problem"] = plan.refused[pod.key]
        else:
            for key, value in sorted(plan.pins.get(pod.key, {}).items()):
                if key == ZONE:
                    update["zone_pin"] = value
                else:
                    terms.append((Requirements.of([Requirement(key=key, operator="In", values=(value,))]),))
                    reasons.append(plan.pinned_by[pod.key][key])
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
        if not update:
            out.append(pod)
            continue
        memo = (id(pod.shape), tuple(sorted(update.items())))
        if memo not in copies:
            copies[memo] = pod.shape.model_copy(update=update)
        out.append(pod.model_copy(update={"shape": copies[memo]}))
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
        return apply(pods, plan_domains(submitted, batch.placed, domain_nodes(batch), blocked, pods,
                                        batch.namespaces))

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        notes = []
        for c in classes:
            pod = c.representative
            if pod.rule_problem or pod.volume_problem:
                continue  # unschedulable with a reason: nothing of it lands
            for term in pod.pod_affinity:
                if term.topology_key != HOSTNAME and not selects_own(pod, term) and not confined(
                        pod, term.topology_key):
                    notes.append(f"{c.name}: required pod affinity on {term.topology_key} to pending pods of other "
                                 "workloads (none running) is not modelled")
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
                "(where the pods it selects go)", "(its side of the domains)")
