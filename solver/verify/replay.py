"""Bind-order replay: does a ProvisioningPlan survive the kube-scheduler binding its pods one at a time?

The verifier checks a plan's final state. The kube-scheduler never sees that state: it binds pending pods one
by one, and each bind passes its *filters* against the pods bound so far. Zone topology spread is the rule
where this differs: final counts 2/2 are fine, yet once the first pod binds in zone a, a second pod planned
in zone a is refused until zone b has one (skew 2 > maxSkew 1 at that moment).

``replay`` binds the plan's pods in the planned order (the plan's listing: claims, then existing nodes) and in
random orders. Each pod goes to its planned node when the filters accept it there, else to the first node by
name that accepts it (new claims and existing nodes alike), else it is *stranded* at its turn. A stranded pod
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
from model.inflight import node_views
from model.plan import ProvisioningPlan
from model.pod import Pod
from model.requirements import Requirements
from model.resources import Resources
from model.snapshot import Snapshot
from model.taints import Taint, Toleration, untolerated

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
                 + (f" (max {self.max_stranded} pods)" if self.orders_stranding else "")
                 + (f"; planned order strands {len(planned.stranded)}" if planned else "")]
        if self.orders_stranding:
            lines.append(f"after the scheduler's retries: {self.orders_never_bound}/{self.orders_tried} orders "
                         f"leave pods without a node (max {self.max_never_bound})")
            lines.append("stranded pods by the rule refusing them on their planned node: "
                         + ", ".join(f"{rule} {n}" for rule, n in self.by_rule.items()))
        moved = max((o.moved for o in self.outcomes), default=0)
        lines.append(f"pods bound off their planned node: max {moved} per order")
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


class _Spread:
    """Matching pods per domain of one (namespace, selector, topology key, eligible nodes) and the minimum."""

    __slots__ = ("counts", "feed_slot", "freq", "lookup_slot", "low")

    def __init__(self, lookup_slot: list[int], feed_slot: list[int], domains: int) -> None:
        self.lookup_slot = lookup_slot      # node → its domain's slot (-1: its value is no eligible domain)
        self.feed_slot = feed_slot          # node → slot its pods count in (-1: the node is not eligible)
        self.counts = [0] * domains
        self.freq: dict[int, int] = {0: domains} if domains else {}
        self.low = 0

    def add(self, node: int) -> None:
        slot = self.feed_slot[node]
        if slot < 0:
            return
        old = self.counts[slot]
        self.counts[slot] = old + 1
        self.freq[old] -= 1
        self.freq[old + 1] = self.freq.get(old + 1, 0) + 1
        if old == self.low and not self.freq[old]:
            self.low = old + 1

    def copy(self) -> _Spread:
        out = _Spread.__new__(_Spread)
        out.lookup_slot, out.feed_slot = self.lookup_slot, self.feed_slot
        out.counts, out.freq, out.low = list(self.counts), dict(self.freq), self.low
        return out


@dataclass(frozen=True)
class _SpreadCheck:
    counter: int
    key: str
    self_match: int
    max_skew: int
    min_domains: int


class _Domains:
    """Pods per value of one topology key (for affinity and anti-affinity terms)."""

    __slots__ = ("counts", "key", "total")

    def __init__(self, key: str) -> None:
        self.key = key
        self.counts: dict[str, int] = {}
        self.total = 0

    def add(self, labels: Mapping[str, str]) -> None:
        value = labels.get(self.key)
        if value is not None:
            self.counts[value] = self.counts.get(value, 0) + 1
            self.total += 1

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        return value is not None and self.counts.get(value, 0) > 0

    def copy(self) -> _Domains:
        out = _Domains(self.key)
        out.counts, out.total = dict(self.counts), self.total
        return out


@dataclass
class _Shape:
    """What the filters read of a pod: pods sharing it are checked identically."""

    label_class: int
    request: np.ndarray
    static: np.ndarray                       # node → NodeUnschedulable, TaintToleration, NodeAffinity pass
    ports: tuple[HostPort, ...]
    spreads: tuple[_SpreadCheck, ...]
    affinity: tuple[int, ...]                # one _Domains per required affinity term (pods matching all)
    affinity_keys: tuple[str, ...]
    self_affine: bool
    anti: tuple[int, ...]                    # one _Domains per required anti-affinity term (pods it selects)
    owned_anti: tuple[int, ...]              # _Domains of this pod's terms as an owner (existing direction)
    requirements: tuple[Requirements, ...]
    tolerations: tuple[Toleration, ...]


@dataclass
class _State:
    free: np.ndarray
    ports: list[list[HostPort]]
    spreads: list[_Spread]
    domains: list[_Domains]

    def copy(self) -> _State:
        return _State(self.free.copy(), [list(p) for p in self.ports], [s.copy() for s in self.spreads],
                      [d.copy() for d in self.domains])


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
        self.label_classes: list[tuple[str, dict[str, str]]] = []
        self._label_index: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        for pod in everyone:
            self._label_class(pod)
        self.spread_keys: dict[tuple[Any, ...], int] = {}
        self.spread_members: list[tuple[str, LabelSelector]] = []
        self.domain_keys: dict[tuple[Any, ...], int] = {}
        self.domain_members: list[tuple[str, dict[str, str], tuple[PodAffinityTerm, ...]]] = []
        self.domain_kinds: list[str] = []
        self.domain_key_names: list[str] = []
        self._spreads: list[_Spread] = []
        self._spread_counted: list[bool] = []
        self._eligible: dict[tuple[Any, ...], np.ndarray] = {}
        self._static: dict[tuple[Any, ...], np.ndarray] = {}
        self.bindable = np.array([n.bindable for n in self.nodes], dtype=bool)
        self._shape_index: dict[tuple[Any, ...], int] = {}
        self.shapes: list[_Shape] = []
        self.shape_of = [self._shape(p) for p in self.pods]
        resident_shapes = [self._shape(p) for _, p in residents]
        self._feeds()
        free = np.array([[n.allocatable[r] for r in self.resources] for n in self.nodes], dtype=np.int64)
        free = free.reshape(len(self.nodes), len(self.resources))
        self.initial = _State(free, [[] for _ in self.nodes], self._spreads,
                              [_Domains(k) for k in self.domain_key_names])
        for (node, pod), shape in zip(residents, resident_shapes, strict=True):
            self._bind(self.initial, shape, node, counted=not pod.deleting)

    # compile ---------------------------------------------------------------------------------------------

    def _label_class(self, pod: Pod) -> int:
        key = _labels_key(pod)
        if key not in self._label_index:
            self._label_index[key] = len(self.label_classes)
            self.label_classes.append((pod.namespace, dict(pod.labels)))
        return self._label_index[key]

    def _static_mask(self, requirements: tuple[Requirements, ...], tolerations: tuple[Toleration, ...]
                     ) -> np.ndarray:
        key = (requirements, tolerations)
        if key not in self._static:
            self._static[key] = self.bindable & np.array(
                [any(r.matches(n.labels) for r in requirements) and not untolerated(tolerations, n.taints)
                 for n in self.nodes], dtype=bool).reshape(len(self.nodes))
        return self._static[key]

    def _eligible_mask(self, keys: frozenset[str], affinity: tuple[Requirements, ...] | None,
                       tolerations: tuple[Toleration, ...] | None) -> np.ndarray:
        key = (keys, affinity, tolerations)
        if key not in self._eligible:
            self._eligible[key] = np.array(
                [all(k in n.labels for k in keys)
                 and (affinity is None or any(r.matches(n.labels) for r in affinity))
                 and (tolerations is None or not untolerated(tolerations, n.taints)) for n in self.nodes],
                dtype=bool).reshape(len(self.nodes))
        return self._eligible[key]

    def _spread_counter(self, pod: Pod, spread: TopologySpreadConstraint, selector: LabelSelector | None,
                        hard_keys: frozenset[str]) -> int:
        affinity = None if spread.node_affinity_policy == "Ignore" else _node_affinity(pod)
        tolerations = pod.tolerations if spread.node_taints_policy == "Honor" else None
        counted = selector if _selector_counts(selector) else None
        key = (pod.namespace, counted, spread.topology_key, hard_keys, affinity, tolerations)
        if key not in self.spread_keys:
            eligible = self._eligible_mask(hard_keys, affinity, tolerations)
            values = sorted({self.labels[i][spread.topology_key] for i in np.flatnonzero(eligible)})
            slot = {v: s for s, v in enumerate(values)}
            tk = spread.topology_key
            lookup = [slot.get(labels[tk], -1) if tk in labels else -1 for labels in self.labels]
            feed = [lookup[i] if eligible[i] else -1 for i in range(len(self.nodes))]
            self.spread_keys[key] = len(self._spreads)
            self._spreads.append(_Spread(lookup, feed, len(values)))
            self.spread_members.append((pod.namespace, counted) if counted is not None
                                       else ("", LabelSelector()))
            self._spread_counted.append(counted is not None)
        return self.spread_keys[key]

    def _domain_counter(self, kind: str, owner: Pod, terms: tuple[PodAffinityTerm, ...], key: str) -> int:
        """A _Domains over ``key``: for ``affinity`` pods matching all of the owner's terms, for ``anti`` pods
        one term selects, for ``owner`` the owner pods themselves."""
        ident = (kind, owner.namespace, tuple(sorted(owner.labels.items())), terms, key)
        if ident not in self.domain_keys:
            self.domain_keys[ident] = len(self.domain_members)
            self.domain_members.append((owner.namespace, dict(owner.labels), terms))
            self.domain_kinds.append(kind)
            self.domain_key_names.append(key)
        return self.domain_keys[ident]

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
            spreads.append(_SpreadCheck(self._spread_counter(pod, s, selector, hard_keys), s.topology_key,
                                        self_match, s.max_skew, s.min_domains or 1))
        terms = pod.pod_affinity
        affinity = tuple(self._domain_counter("affinity", pod, terms, t.topology_key) for t in terms)
        self_affine = bool(terms) and all(t.selects(pod.namespace, pod.labels, pod.namespace, pod.labels,
                                                    self.namespaces.get(pod.namespace)) for t in terms)
        anti = tuple(self._domain_counter("anti", pod, (t,), t.topology_key) for t in pod.pod_anti_affinity)
        owned = tuple(self._domain_counter("owner", pod, (t,), t.topology_key) for t in pod.pod_anti_affinity)
        shape = _Shape(self._label_class(pod), np.array([pod.requests[r] for r in self.resources], dtype=np.int64),
                       self._static_mask(requirements, pod.tolerations), pod.host_ports, tuple(spreads), affinity,
                       tuple(t.topology_key for t in terms), self_affine, anti, owned, requirements,
                       pod.tolerations)
        self._shape_index[key] = len(self.shapes)
        self.shapes.append(shape)
        return self._shape_index[key]

    def _feeds(self) -> None:
        """Which counters a pod of each label class adds to when it binds, and which bound owners' terms
        repel it: selector matching once per (label class, counter), not per pod."""
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
        for s, (namespace, selector) in enumerate(self.spread_members):
            if not self._spread_counted[s]:
                continue
            for c in candidates(selector):
                ns, labels = self.label_classes[c]
                if ns == namespace and selector.matches(labels):
                    self.spread_feeds[c].append(s)
        self.domain_feeds: list[list[int]] = [[] for _ in self.label_classes]
        self.repelled_by: list[list[int]] = [[] for _ in self.label_classes]
        for d, (owner_ns, owner_labels, terms) in enumerate(self.domain_members):
            kind = self.domain_kinds[d]
            for c in candidates(terms[0].selector):
                ns, labels = self.label_classes[c]
                if all(t.selects(owner_ns, owner_labels, ns, labels, self.namespaces.get(ns)) for t in terms):
                    (self.repelled_by if kind == "owner" else self.domain_feeds)[c].append(d)

    # replay ----------------------------------------------------------------------------------------------

    def _bind(self, state: _State, shape_id: int, node: int, counted: bool = True) -> None:
        shape = self.shapes[shape_id]
        state.free[node] -= shape.request
        state.ports[node].extend(shape.ports)
        labels = self.labels[node]
        if counted:
            for s in self.spread_feeds[shape.label_class]:
                state.spreads[s].add(node)
        for d in self.domain_feeds[shape.label_class]:
            state.domains[d].add(labels)
        for d in shape.owned_anti:
            state.domains[d].add(labels)

    def _dynamic(self, state: _State, shape: _Shape, node: int) -> str | None:
        """NodePorts, PodTopologySpread, InterPodAffinity: the filters bound pods change, resources apart."""
        if shape.ports and any(p.conflicts(q) for p in shape.ports for q in state.ports[node]):
            return PORTS
        return self._pod_rules(state, shape, node)

    def _pod_rules(self, state: _State, shape: _Shape, node: int) -> str | None:
        """PodTopologySpread and InterPodAffinity on ``node`` given the pods bound so far."""
        labels = self.labels[node]
        for check in shape.spreads:
            if check.key not in labels:
                return f"{SPREAD}({check.key})"
            counter = state.spreads[check.counter]
            slot = counter.lookup_slot[node]
            count = counter.counts[slot] if slot >= 0 else 0
            low = 0 if len(counter.counts) < check.min_domains else counter.low
            if count + check.self_match - low > check.max_skew:
                return f"{SPREAD}({check.key})"
        if shape.affinity:
            if any(k not in labels for k in shape.affinity_keys):
                return f"{AFFINITY}({shape.affinity_keys[0]})"
            missing = [d for d in shape.affinity if not state.domains[d].holds(labels)]
            if missing and not (shape.self_affine and all(state.domains[d].total == 0 for d in shape.affinity)):
                return f"{AFFINITY}({state.domains[missing[0]].key})"
        for d in shape.anti:
            if state.domains[d].holds(labels):
                return f"{ANTI_AFFINITY}({state.domains[d].key})"
        for d in self.repelled_by[shape.label_class]:
            if state.domains[d].holds(labels):
                return f"{EXISTING_ANTI_AFFINITY}({state.domains[d].key})"
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
        if (shape.request > state.free[node]).any():
            return RESOURCES
        return self._pod_rules(state, shape, node)

    def _place(self, state: _State, shape_id: int, planned: int) -> tuple[int, str | None]:
        """The node the pod binds to (-1: none) and why its planned node refused it (None: it did not)."""
        shape = self.shapes[shape_id]
        reason = self._refusal(state, shape, planned) if planned >= 0 else MISSING
        if reason is None:
            return planned, None
        fits = shape.static & (state.free >= shape.request).all(axis=1)
        for node in np.flatnonzero(fits):
            if node != planned and self._dynamic(state, shape, int(node)) is None:
                return int(node), reason
        return -1, reason

    def run(self, name: str, order: Sequence[int]) -> OrderOutcome:
        state = self.initial.copy()
        stranded: list[int] = []
        stranded_by: dict[str, str] = {}
        refused: Counter[str] = Counter()
        moved = 0
        for p in order:
            node, reason = self._place(state, self.shape_of[p], self.planned[p])
            if reason is not None:
                refused[reason] += 1
            if node < 0:
                stranded.append(p)
                stranded_by[self.pods[p].key] = reason or "?"
                continue
            moved += node != self.planned[p]
            self._bind(state, self.shape_of[p], node)
        waiting = list(stranded)
        progress = True
        while waiting and progress:
            progress = False
            for p in list(waiting):
                node, _ = self._place(state, self.shape_of[p], self.planned[p])
                if node >= 0:
                    self._bind(state, self.shape_of[p], node)
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
