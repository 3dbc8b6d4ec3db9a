"""Bind-order replay: does a ProvisioningPlan survive the kube-scheduler binding its pods one at a time?

The verifier checks a plan's final state. The kube-scheduler never sees that state: it binds pending pods one
by one, and each bind passes its *filters* against the pods bound so far. Filters that only tighten as pods
bind (resources, host ports, anti-affinity, node selection) accept at every step what they accept finally;
two do not. Topology spread: final counts 2/2 are fine, yet once a pod binds in zone a, a second pod planned
in zone a is refused until zone b has one (skew 2 > maxSkew 1 at that moment). Required pod affinity: a
self-affine group split over two nodes is valid finally, but once its first pod binds, the other node has
no matching pod and never gets one.

``replay`` binds the plan's pods in the planned order (the plan's listing: claims, then existing nodes) and in
random orders. Each pod goes to its planned node when the filters accept it there, else to the first node by
name that accepts it (new claims and existing nodes alike: a deterministic stand-in for the scheduler's
scoring), else it is *stranded* at its turn. A stranded pod
is retried after the order's pass, until no retry binds (the scheduler requeues unschedulable pods when pods
bind); the ones still without a node are *never bound*. Filters, as kube-scheduler runs them:

- NodeUnschedulable / TaintToleration / NodeAffinity: cordoned or not-Ready nodes, untolerated
  NoSchedule / NoExecute taints, nodeSelector and required node affinity (``Pod.accepts_labels``).
- NodePorts: ``HostPort.conflicts`` against every pod on the node.
- NodeResourcesFit: requests against allocatable minus bound pods and DaemonSet pods.
- PodTopologySpread (DoNotSchedule): per constraint, pods matching the selector (``matchLabelKeys`` merged,
  same namespace, not terminating) counted on eligible nodes — nodes with every topology key of the pod's
  hard constraints, passing the pod's node affinity unless ``nodeAffinityPolicy: Ignore``, tolerated if
  ``nodeTaintsPolicy: Honor``; the global minimum is 0 while fewer than ``minDomains`` domains are eligible;
  a node is refused when it lacks the key or ``count(its domain) + (1 if the pod matches) - min > maxSkew``.
  A nil selector counts nothing and an empty one counts nothing but the pod itself, as Kubernetes does.
- InterPodAffinity: each required affinity term needs a pod matching *all* terms in the node's domain (the
  node must carry every key), except the first pod of a self-affine group, allowed anywhere while no pod
  matching all terms exists; required anti-affinity refuses a domain holding a pod its term selects, and a
  bound pod's term refuses the incoming pod it selects (both directions, any topology key).

Independent of the solver: it reads only ``model/``. Counters are per domain and incremental (one per
distinct selector, topology key and set of eligible nodes), so one order costs a pass over the pods.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model import labels as wk
from model.affinity import HostPort, LabelSelector, PodAffinityTerm, TopologySpreadConstraint
from model.allocator import DeviceResult
from model.inflight import node_views
from model.plan import ProvisioningPlan
from model.pod import Pod
from model.requirements import Requirements
from model.resources import Resources
from model.snapshot import Snapshot
from model.taints import Taint, Toleration, untolerated
from solver.verify.replaydevices import DEVICES, DeviceFilter, DeviceState

PLANNED = "planned"

#: kube-scheduler's filter order; the first that refuses a pod on its planned node is the rule reported
UNSCHEDULABLE, TAINTS, NODE_AFFINITY, PORTS, RESOURCES = (
    "NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit")
SPREAD, AFFINITY, ANTI_AFFINITY, EXISTING_ANTI_AFFINITY = (
    "PodTopologySpread", "InterPodAffinity/affinity", "InterPodAffinity/anti-affinity",
    "InterPodAffinity/existing-anti-affinity")
MISSING = "PlannedNodeMissing"


# --- the report --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OrderOutcome:
    """One bind order. ``stranded``: pods no node accepted at their turn, in bind order; ``never_bound``:
    those still without a node after retries; ``refused``: pods refused on their planned node at their turn,
    by the first filter refusing (bound elsewhere or stranded); ``stranded_by``: stranded pod → that rule."""

    name: str
    stranded: tuple[str, ...]
    never_bound: tuple[str, ...]
    moved: int
    refused: Mapping[str, int]
    stranded_by: Mapping[str, str]


@dataclass(frozen=True)
class ReplayReport:
    pods: int
    outcomes: tuple[OrderOutcome, ...]
    seed: int = 0
    seconds: float = 0.0

    @property
    def orders_tried(self) -> int:
        return len(self.outcomes)

    @property
    def orders_stranding(self) -> int:
        return sum(1 for o in self.outcomes if o.stranded)

    @property
    def max_stranded(self) -> int:
        return max((len(o.stranded) for o in self.outcomes), default=0)

    @property
    def orders_never_bound(self) -> int:
        return sum(1 for o in self.outcomes if o.never_bound)

    @property
    def max_never_bound(self) -> int:
        return max((len(o.never_bound) for o in self.outcomes), default=0)

    @property
    def planned(self) -> OrderOutcome | None:
        return next((o for o in self.outcomes if o.name == PLANNED), None)

    @property
    def stranded_pods(self) -> dict[str, int]:
        """Every pod stranded in some order → in how many orders."""
        out: Counter[str] = Counter()
        for o in self.outcomes:
            out.update(o.stranded)
        return dict(sorted(out.items()))

    @property
    def by_rule(self) -> dict[str, int]:
        """Distinct stranded pods by the rule that refused them on their planned node (first order seen)."""
        first: dict[str, str] = {}
        for o in self.outcomes:
            for pod, rule in o.stranded_by.items():
                first.setdefault(pod, rule)
        return dict(Counter(first.values()).most_common())

    @property
    def refusals(self) -> dict[str, int]:
        """Pods refused on their planned node at their turn, summed over orders, by the first filter refusing:
        the root causes (a pod moved off its node takes room planned for another, refused for resources)."""
        out: Counter[str] = Counter()
        for o in self.outcomes:
            out.update(o.refused)
        return dict(out.most_common())

    @property
    def ok(self) -> bool:
        return self.orders_stranding == 0

    def short(self) -> str:
        """The bench column: orders stranding a pod / orders tried, and the most pods one order strands."""
        text = f"{self.orders_stranding}/{self.orders_tried}"
        if self.orders_stranding:
            text += f" max {self.max_stranded}"
            if self.orders_never_bound:
                text += f" ({self.max_never_bound} never)"
        return text

    def summary(self, listed: int = 5) -> list[str]:
        planned = self.planned
        lines = [f"replay: {self.orders_tried} bind orders ({'planned + ' if planned else ''}"
                 f"{self.orders_tried - (1 if planned else 0)} random, seed {self.seed}) of {self.pods} pods "
                 f"in {self.seconds:.2f} s",
                 f"orders stranding a pod: {self.orders_stranding}/{self.orders_tried}"
                 + (f" (max {self.max_stranded} pod(s))" if self.orders_stranding else "")
                 + (f"; planned order strands {len(planned.stranded)}" if planned else "")]
        if self.orders_stranding:
            lines.append(f"after the scheduler's retries: {self.orders_never_bound}/{self.orders_tried} orders "
                         f"leave pods without a node (max {self.max_never_bound})")
            lines.append("stranded pods by the rule refusing them on their planned node: "
                         + ", ".join(f"{rule} {n}" for rule, n in self.by_rule.items()))
        moved = max((o.moved for o in self.outcomes), default=0)
        lines.append(f"pods bound off their planned node: max {moved} per order")
        if self.refusals:
            lines.append("refused on their planned node at their turn (all orders): "
                         + ", ".join(f"{rule} {n}" for rule, n in self.refusals.items()))
        for o in [o for o in self.outcomes if o.stranded][:listed]:
            shown = ", ".join(f"{p} ({o.stranded_by.get(p, '?')})" for p in o.stranded[:listed])
            more = f" and {len(o.stranded) - listed} more" if len(o.stranded) > listed else ""
            lines.append(f"  order {o.name}: stranded {shown}{more}")
        return lines

    def to_json_dict(self) -> dict[str, Any]:
        return {"pods": self.pods, "seed": self.seed, "ordersTried": self.orders_tried,
                "ordersStranding": self.orders_stranding, "maxStranded": self.max_stranded,
                "ordersNeverBound": self.orders_never_bound, "maxNeverBound": self.max_never_bound,
                "byRule": self.by_rule, "strandedPods": self.stranded_pods,
                "orders": [{"name": o.name, "stranded": list(o.stranded), "neverBound": list(o.never_bound),
                            "moved": o.moved, "refused": dict(o.refused), "strandedBy": dict(o.stranded_by)}
                           for o in self.outcomes]}


# --- the cluster after the plan ----------------------------------------------------------------------------

@dataclass
class _NodeSpec:
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: Resources
    bindable: bool
    residents: list[Pod] = field(default_factory=list)


def _final_nodes(snapshot: Snapshot, plan: ProvisioningPlan) -> list[_NodeSpec]:
    """Every node after the plan, sorted by name: existing ones with their bound pods and the DaemonSet pods
    not yet running there; each new claim with its offering's labels (instance type, NodePool, zone, capacity
    type, hostname = claim name), its NodePool's taints and the DaemonSet pods that will run on it."""
    catalog = {it.name: it for it in snapshot.instance_types}
    bound: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.terminal:
            bound.setdefault(pod.node_name, []).append(pod)
    nodes: dict[str, _NodeSpec] = {}
    for view in node_views(snapshot):  # in-flight NodeClaims are nodes too, as pods will find them
        node = view.node
        if node.deleting:
            continue
        residents = list(bound.get(node.name, []))
        running = {(p.namespace, p.owner_name) for p in residents if p.owner_kind == "DaemonSet"}
        residents += [ds.pod for ds in snapshot.daemonsets
                      if (ds.namespace, ds.name) not in running and ds.runs_on(node.labels, node.taints)]
        nodes[node.name] = _NodeSpec(node.name, {wk.HOSTNAME: node.name, **node.labels}, tuple(node.taints),
                                     node.allocatable, not (node.unschedulable or not node.ready), residents)
    for claim in plan.node_claims:
        pool = snapshot.nodepool(claim.node_pool)
        it = catalog.get(claim.instance_type)
        labels = {**claim.labels, **(it.labels if it else {}), **(pool.labels if pool else {}),
                  wk.ZONE: claim.zone, wk.CAPACITY_TYPE: claim.capacity_type, wk.NODEPOOL: claim.node_pool,
                  wk.HOSTNAME: claim.name}
        taints = tuple(pool.taints) if pool else ()
        allocatable = it.allocatable if it else Resources.parse(claim.allocatable)
        residents = [ds.pod for ds in snapshot.daemonsets if ds.runs_on(labels, taints)]
        nodes[claim.name] = _NodeSpec(claim.name, labels, taints, allocatable, True, residents)
    return [nodes[name] for name in sorted(nodes)]


# --- counters ----------------------------------------------------------------------------------------------

def _node_affinity(pod: Pod) -> tuple[Requirements, ...]:
    """nodeSelector AND (any required node-affinity term): what nodeAffinityPolicy Honor applies."""
    selector = Requirements.from_labels(pod.node_selector)
    return tuple(selector & term for term in pod.required_terms) or (selector,)


def _selector_counts(selector: LabelSelector | None) -> bool:
    """Kubernetes counts nothing for a nil selector (labels.Nothing) and for an empty one (Empty())."""
    return selector is not None and bool(selector.match_labels or selector.match_expressions)


@dataclass(frozen=True)
class _Layout:
    """The domains one tally counts in: ``slot[node]`` is the node's domain (``domains``, a cell that stays 0,
    when the node's value is no domain or it lacks the key); ``feed[node]`` the domain its pods add to (-1:
    they do not count: the node is not eligible)."""

    key: str
    domains: int
    slot: list[int]
    slots: np.ndarray
    feed: list[int]


class _Tally:
    """Pods per domain, their total, and (for topology spread) the minimum over domains, kept incrementally:
    counts only grow during a replay, so the minimum moves up when its last domain leaves it."""

    __slots__ = ("counts", "freq", "low", "total")

    def __init__(self, domains: int, track_min: bool) -> None:
        self.counts = np.zeros(domains + 1, dtype=np.int64)
        self.freq: dict[int, int] = {0: domains} if track_min and domains else {}
        self.low = 0
        self.total = 0

    def add(self, slot: int) -> None:
        old = int(self.counts[slot])
        self.counts[slot] = old + 1
        self.total += 1
        if self.freq:
            self.freq[old] -= 1
            self.freq[old + 1] = self.freq.get(old + 1, 0) + 1
            if old == self.low and not self.freq[old]:
                self.low = old + 1

    def copy(self) -> _Tally:
        out = _Tally.__new__(_Tally)
        out.counts, out.freq, out.low, out.total = self.counts.copy(), dict(self.freq), self.low, self.total
        return out


@dataclass(frozen=True)
class _SpreadCheck:
    tally: int
    key: str
    self_match: int
    max_skew: int
    min_domains: int


@dataclass
class _Shape:
    """What the filters read of a pod: pods sharing it are checked identically."""

    label_class: int
    request: tuple[tuple[int, int], ...]     # (resource row, amount) for every resource it requests
    static: np.ndarray                       # node → NodeUnschedulable, TaintToleration, NodeAffinity pass
    ports: tuple[HostPort, ...]
    spreads: tuple[_SpreadCheck, ...]
    affinity: tuple[int, ...]                # a tally per required affinity term: pods matching all terms
    affinity_keys: tuple[str, ...]
    self_affine: bool
    anti: tuple[int, ...]                    # a tally per required anti-affinity term: pods it selects
    owned: tuple[int, ...]                   # a tally per anti-affinity term: where its owners are bound
    tolerations: tuple[Toleration, ...]


@dataclass
class _State:
    free: np.ndarray
    ports: list[list[HostPort]]
    tallies: list[_Tally]
    devices: DeviceState | None = None

    def copy(self) -> _State:
        return _State(self.free.copy(), [list(p) for p in self.ports], [t.copy() for t in self.tallies],
                      self.devices.copy() if self.devices is not None else None)


def _labels_key(pod: Pod) -> tuple[str, tuple[tuple[str, str], ...]]:
    return pod.namespace, tuple(sorted(pod.labels.items()))


class _Replay:
    """The cluster after the plan, compiled once; ``run`` replays one order from its initial state."""

    def __init__(self, snapshot: Snapshot, plan: ProvisioningPlan) -> None:
        self.nodes = _final_nodes(snapshot, plan)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.labels = [n.labels for n in self.nodes]
        self.namespaces = {ns.name: ns.labels for ns in snapshot.namespaces}
        pods = {p.key: p for p in snapshot.pods}
        pending = {p.key for p in snapshot.pending_pods()}
        self.pods: list[Pod] = []
        self.planned: list[int] = []
        seen: set[str] = set()
        for name, keys in [(c.name, c.pods) for c in plan.node_claims] + [(e.name, e.pods)
                                                                          for e in plan.existing_nodes]:
            for key in keys:
                if key in pending and key not in seen:
                    seen.add(key)
                    self.pods.append(pods[key])
                    self.planned.append(self.index.get(name, -1))
        residents = [(i, pod) for i, n in enumerate(self.nodes) for pod in n.residents]
        everyone = [p for _, p in residents] + self.pods
        self.resources = sorted({r for n in self.nodes for r in n.allocatable} | {r for p in everyone
                                                                                   for r in p.requests})
        self.bindable = np.array([n.bindable for n in self.nodes], dtype=bool).reshape(len(self.nodes))
        self.label_classes: list[tuple[str, dict[str, str]]] = []
        self._label_index: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self._has_key: dict[str, np.ndarray] = {}
        self._layouts: dict[tuple[Any, ...], _Layout] = {}
        self._static: dict[tuple[Any, ...], np.ndarray] = {}
        self._tally_index: dict[tuple[Any, ...], int] = {}
        self.layouts: list[_Layout] = []
        self.tally_kinds: list[str] = []
        #: what adds to each tally: (namespace, selector) for spread, (owner namespace, labels, terms) for terms
        self.tally_members: list[tuple[Any, ...]] = []
        self._shape_index: dict[tuple[Any, ...], int] = {}
        self.shapes: list[_Shape] = []
        self.shape_of = [self._shape(p) for p in self.pods]
        resident_shapes = [self._shape(p) for _, p in residents]
        self._feeds()
        free = np.array([[n.allocatable[r] for n in self.nodes] for r in self.resources], dtype=np.int64)
        self.initial = _State(free.reshape(len(self.resources), len(self.nodes)), [[] for _ in self.nodes],
                              [_Tally(layout.domains, kind == "spread")
                               for layout, kind in zip(self.layouts, self.tally_kinds, strict=True)])
        for (node, pod), shape in zip(residents, resident_shapes, strict=True):
            self._bind(self.initial, shape, node, spread=not pod.deleting)  # terminating pods: no spread count
        self.devices: DeviceFilter | None = None
        if any(p.resource_claims for p in self.pods):
            catalog = {it.name: it for it in snapshot.instance_types}
            self.devices = DeviceFilter(snapshot, [n.name for n in self.nodes], self.labels,
                                        {c.name: catalog.get(c.instance_type) for c in plan.node_claims}, self.pods)
            self.initial.devices = self.devices.initial

    # compile ---------------------------------------------------------------------------------------------

    def _label_class(self, pod: Pod) -> int:
        key = _labels_key(pod)
        if key not in self._label_index:
            self._label_index[key] = len(self.label_classes)
            self.label_classes.append((pod.namespace, dict(pod.labels)))
        return self._label_index[key]

    def has_key(self, key: str) -> np.ndarray:
        if key not in self._has_key:
            self._has_key[key] = np.array([key in labels for labels in self.labels], dtype=bool).reshape(
                len(self.nodes))
        return self._has_key[key]

    def _static_mask(self, requirements: tuple[Requirements, ...], tolerations: tuple[Toleration, ...]
                     ) -> np.ndarray:
        key = (requirements, tolerations)
        if key not in self._static:
            self._static[key] = self.bindable & np.array(
                [any(r.matches(n.labels) for r in requirements) and not untolerated(tolerations, n.taints)
                 for n in self.nodes], dtype=bool).reshape(len(self.nodes))
        return self._static[key]

    def _layout(self, key: str, eligible: Sequence[bool] | None = None, ident: Any = None) -> _Layout:
        """Domains of ``key`` over the eligible nodes (None: every node carrying the key)."""
        cache = (key, ident)
        if cache not in self._layouts:
            counted = [key in labels and (eligible is None or bool(eligible[i]))
                       for i, labels in enumerate(self.labels)]
            values = sorted({labels[key] for labels, c in zip(self.labels, counted, strict=True) if c})
            index = {v: s for s, v in enumerate(values)}
            slot = [index.get(labels[key], len(values)) if key in labels else len(values) for labels in self.labels]
            feed = [s if c else -1 for s, c in zip(slot, counted, strict=True)]
            self._layouts[cache] = _Layout(key, len(values), slot, np.array(slot, dtype=np.int64), feed)
        return self._layouts[cache]

    def _tally(self, ident: tuple[Any, ...], kind: str, layout: _Layout, members: tuple[Any, ...]) -> int:
        if ident not in self._tally_index:
            self._tally_index[ident] = len(self.layouts)
            self.layouts.append(layout)
            self.tally_kinds.append(kind)
            self.tally_members.append(members)
        return self._tally_index[ident]

    def _spread_tally(self, pod: Pod, spread: TopologySpreadConstraint, selector: LabelSelector | None,
                      hard_keys: frozenset[str]) -> int:
        """Eligible nodes carry every key of the pod's hard constraints, pass its node affinity (policy
        Honor, the default) and tolerate its taints (policy Honor; Ignore is the default)."""
        affinity = None if spread.node_affinity_policy == "Ignore" else _node_affinity(pod)
        tolerations = pod.tolerations if spread.node_taints_policy == "Honor" else None
        counted = selector if _selector_counts(selector) else None
        eligibility = (hard_keys, affinity, tolerations)
        ident = ("spread", pod.namespace, counted, spread.topology_key, eligibility)
        if ident not in self._tally_index:
            eligible = [all(k in n.labels for k in hard_keys)
                        and (affinity is None or any(r.matches(n.labels) for r in affinity))
                        and (tolerations is None or not untolerated(tolerations, n.taints)) for n in self.nodes]
            layout = self._layout(spread.topology_key, eligible, eligibility)
            return self._tally(ident, "spread", layout, (pod.namespace, counted))
        return self._tally_index[ident]

    def _term_tally(self, kind: str, owner: Pod, terms: tuple[PodAffinityTerm, ...], key: str) -> int:
        """``affinity``: pods matching all the owner's terms; ``anti``: pods the term selects; ``owner``: the
        owners of the term themselves (a bound owner repels the pods its term selects)."""
        ident = (kind, owner.namespace, tuple(sorted(owner.labels.items())), terms, key)
        return self._tally(ident, kind, self._layout(key), (owner.namespace, dict(owner.labels), terms))

    def _shape(self, pod: Pod) -> int:
        hard = tuple(s for s in pod.topology_spread if s.when_unsatisfiable == "DoNotSchedule")
        requirements = pod.node_requirements()
        key = (_labels_key(pod), pod.requests, requirements, pod.tolerations, hard, pod.pod_affinity,
               pod.pod_anti_affinity, pod.host_ports, _node_affinity(pod) if hard else ())
        if key in self._shape_index:
            return self._shape_index[key]
        hard_keys = frozenset(s.topology_key for s in hard)
        spreads = []
        for s in hard:
            selector = s.selector_for(pod.labels)
            self_match = int(selector is not None and selector.matches(pod.labels))
            spreads.append(_SpreadCheck(self._spread_tally(pod, s, selector, hard_keys), s.topology_key,
                                        self_match, s.max_skew, s.min_domains or 1))
        terms = pod.pod_affinity
        affinity = tuple(self._term_tally("affinity", pod, terms, t.topology_key) for t in terms)
        self_affine = bool(terms) and all(t.selects(pod.namespace, pod.labels, pod.namespace, pod.labels,
                                                    self.namespaces.get(pod.namespace)) for t in terms)
        anti = tuple(self._term_tally("anti", pod, (t,), t.topology_key) for t in pod.pod_anti_affinity)
        owned = tuple(self._term_tally("owner", pod, (t,), t.topology_key) for t in pod.pod_anti_affinity)
        request = tuple((row, pod.requests[r]) for row, r in enumerate(self.resources) if pod.requests[r] > 0)
        shape = _Shape(self._label_class(pod), request, self._static_mask(requirements, pod.tolerations),
                       pod.host_ports, tuple(spreads), affinity, tuple(t.topology_key for t in terms), self_affine,
                       anti, owned, pod.tolerations)
        self._shape_index[key] = len(self.shapes)
        self.shapes.append(shape)
        return self._shape_index[key]

    def _feeds(self) -> None:
        """Which tallies a bound pod of each label class adds to, and which owners' terms repel it: selectors
        are matched once per (label class, tally), not per pod."""
        by_pair: dict[tuple[str, str], list[int]] = {}
        for c, (_, labels) in enumerate(self.label_classes):
            for pair in labels.items():
                by_pair.setdefault(pair, []).append(c)
        everyone = range(len(self.label_classes))

        def candidates(selector: LabelSelector | None) -> Iterable[int]:
            if selector is not None and selector.match_labels:
                return by_pair.get(selector.match_labels[0], [])
            return everyone

        self.spread_feeds: list[list[int]] = [[] for _ in self.label_classes]
        self.term_feeds: list[list[int]] = [[] for _ in self.label_classes]
        self.repelled_by: list[list[int]] = [[] for _ in self.label_classes]
        for t, (kind, members) in enumerate(zip(self.tally_kinds, self.tally_members, strict=True)):
            if kind == "spread":
                namespace, selector = members
                for c in candidates(selector) if selector is not None else ():
                    ns, labels = self.label_classes[c]
                    if ns == namespace and selector.matches(labels):
                        self.spread_feeds[c].append(t)
                continue
            owner_ns, owner_labels, terms = members
            for c in candidates(terms[0].selector):
                ns, labels = self.label_classes[c]
                if all(term.selects(owner_ns, owner_labels, ns, labels, self.namespaces.get(ns)) for term in terms):
                    (self.repelled_by if kind == "owner" else self.term_feeds)[c].append(t)

    # replay ----------------------------------------------------------------------------------------------

    def _bind(self, state: _State, shape_id: int, node: int, spread: bool = True) -> None:
        shape = self.shapes[shape_id]
        for row, amount in shape.request:
            state.free[row, node] -= amount
        state.ports[node].extend(shape.ports)
        tallies, layouts = state.tallies, self.layouts
        for t in (self.spread_feeds[shape.label_class] if spread else ()):
            slot = layouts[t].feed[node]
            if slot >= 0:
                tallies[t].add(slot)
        for t in (*self.term_feeds[shape.label_class], *shape.owned):
            slot = layouts[t].feed[node]
            if slot >= 0:
                tallies[t].add(slot)

    def _holds(self, state: _State, t: int, node: int) -> bool:
        return bool(state.tallies[t].counts[self.layouts[t].slot[node]] > 0)

    def _pod_rules(self, state: _State, shape: _Shape, node: int) -> str | None:
        """PodTopologySpread and InterPodAffinity on ``node`` given the pods bound so far."""
        labels = self.labels[node]
        for check in shape.spreads:
            if check.key not in labels:
                return f"{SPREAD}({check.key})"
            tally, layout = state.tallies[check.tally], self.layouts[check.tally]
            low = 0 if layout.domains < check.min_domains else tally.low
            if int(tally.counts[layout.slot[node]]) + check.self_match - low > check.max_skew:
                return f"{SPREAD}({check.key})"
        if shape.affinity:
            missing = next((k for k in shape.affinity_keys if k not in labels), None)
            if missing is not None:
                return f"{AFFINITY}({missing})"
            empty = [t for t in shape.affinity if not self._holds(state, t, node)]
            if empty and not (shape.self_affine and all(state.tallies[t].total == 0 for t in shape.affinity)):
                return f"{AFFINITY}({self.layouts[empty[0]].key})"
        for t in shape.anti:
            if self._holds(state, t, node):
                return f"{ANTI_AFFINITY}({self.layouts[t].key})"
        for t in self.repelled_by[shape.label_class]:
            if self._holds(state, t, node):
                return f"{EXISTING_ANTI_AFFINITY}({self.layouts[t].key})"
        return None

    def _refusal(self, state: _State, shape: _Shape, node: int) -> str | None:
        """The first filter refusing the pod on ``node``, in kube-scheduler's order (None: it binds)."""
        if not shape.static[node]:
            spec = self.nodes[node]
            if not spec.bindable:
                return UNSCHEDULABLE
            if untolerated(shape.tolerations, spec.taints):
                return TAINTS
            return NODE_AFFINITY
        if shape.ports and any(p.conflicts(q) for p in shape.ports for q in state.ports[node]):
            return PORTS
        if any(amount > state.free[row, node] for row, amount in shape.request):
            return RESOURCES
        return self._pod_rules(state, shape, node)

    def _accepting(self, state: _State, shape: _Shape) -> np.ndarray:
        """Every node whose filters accept the pod now, as a mask (host ports apart): ``_refusal`` over all
        nodes at once."""
        mask = shape.static.copy()
        for row, amount in shape.request:
            mask &= state.free[row] >= amount
        for check in shape.spreads:
            tally, layout = state.tallies[check.tally], self.layouts[check.tally]
            low = 0 if layout.domains < check.min_domains else tally.low
            mask &= self.has_key(check.key) & (tally.counts[layout.slots] + check.self_match - low <= check.max_skew)
        if shape.affinity:
            for key in shape.affinity_keys:
                mask &= self.has_key(key)
            if not (shape.self_affine and all(state.tallies[t].total == 0 for t in shape.affinity)):
                for t in shape.affinity:
                    mask &= state.tallies[t].counts[self.layouts[t].slots] > 0
        for t in (*shape.anti, *self.repelled_by[shape.label_class]):
            mask &= state.tallies[t].counts[self.layouts[t].slots] == 0
        return mask

    def _place(self, state: _State, p: int) -> tuple[int, str | None]:
        """The node pod ``p`` binds to (-1: none) and why its planned node refused it (None: it did not)."""
        shape, planned = self.shapes[self.shape_of[p]], self.planned[p]
        reason = self._refusal(state, shape, planned) if planned >= 0 else MISSING
        if reason is None:
            if self._devices(state, p, planned) is not None:
                return planned, None
            reason = DEVICES
        for node in np.flatnonzero(self._accepting(state, shape)):
            if (not shape.ports or not any(p.conflicts(q) for p in shape.ports for q in state.ports[node])) and \
                    self._devices(state, p, int(node)) is not None:
                return int(node), reason
        return -1, reason

    def _devices(self, state: _State, p: int, node: int) -> list[DeviceResult] | None:
        """DynamicResources: the devices the pod's claims get on ``node`` ([] without claims; None: refused)."""
        if self.devices is None or state.devices is None or not self.devices.involved(p):
            return []
        return self.devices.allocate(state.devices, p, node)

    def _bind_pod(self, state: _State, p: int, node: int) -> None:
        if self.devices is not None and state.devices is not None and self.devices.involved(p):
            results = self.devices.allocate(state.devices, p, node) or []
            self.devices.take(state.devices, p, node, results)
        self._bind(state, self.shape_of[p], node)

    def run(self, name: str, order: Sequence[int]) -> OrderOutcome:
        state = self.initial.copy()
        stranded: list[int] = []
        stranded_by: dict[str, str] = {}
        refused: Counter[str] = Counter()
        moved = 0
        for p in order:
            node, reason = self._place(state, p)
            if reason is not None:
                refused[reason] += 1
            if node < 0:
                stranded.append(p)
                stranded_by[self.pods[p].key] = reason or "?"
                continue
            moved += node != self.planned[p]
            self._bind_pod(state, p, node)
        waiting = list(stranded)  # the scheduler retries unschedulable pods as pods bind, until none can
        progress = True
        while waiting and progress:
            progress = False
            for p in list(waiting):
                node, _ = self._place(state, p)
                if node >= 0:
                    self._bind_pod(state, p, node)
                    waiting.remove(p)
                    progress = True
        return OrderOutcome(name, tuple(self.pods[p].key for p in stranded),
                            tuple(self.pods[p].key for p in waiting), moved, dict(refused), stranded_by)


def replay(snapshot: Snapshot, plan: ProvisioningPlan, orders: int = 20, seed: int = 0,
           planned_order: bool = True) -> ReplayReport:
    """Bind the plan's pods in its planned order and ``orders`` random orders (seeded), each pod onto the
    first node the kube-scheduler's filters accept (its planned node first); report the pods each order
    strands. Pods the plan marks unschedulable are not bound."""
    started = time.monotonic()
    engine = _Replay(snapshot, plan)
    count = len(engine.pods)
    outcomes = [engine.run(PLANNED, range(count))] if planned_order else []
    rng = random.Random(seed)
    for k in range(orders):
        order = list(range(count))
        rng.shuffle(order)
        outcomes.append(engine.run(f"random-{k + 1}", order))
    return ReplayReport(count, tuple(outcomes), seed, time.monotonic() - started)


def replay_order(snapshot: Snapshot, plan: ProvisioningPlan, order: Sequence[str]) -> OrderOutcome:
    """One given bind order (pod keys; planned pods not listed are left out)."""
    engine = _Replay(snapshot, plan)
    position = {p.key: i for i, p in enumerate(engine.pods)}
    return engine.run("given", [position[k] for k in order if k in position])
