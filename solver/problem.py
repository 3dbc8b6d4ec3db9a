"""The compiled batch: pod classes, node templates and existing free capacity as integer matrices.

Everything downstream (greedy, column generation, the CP-SAT master, explanations) reads this one
structure, so a rule's verdict on a (class, node) pair is computed once, here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from model.node import Node
from model.pod import Pod
from model.resources import CPU, MEMORY, PODS, Resources
from model.snapshot import Snapshot
from solver.classes import PodClass, build_classes, selector_label_keys
from solver.inflight import node_views
from solver.rules import antiaffinity, minvalues, podaffinity, preferences, topology
from solver.rules.counters import build_counters
from solver.rules.daemonsets import missing_daemon_overhead
from solver.rules.selection import SelectionRule
from solver.templates import NodeTemplate, PoolInfo, build_templates, pool_infos


@dataclass(frozen=True)
class ExistingCapacity:
    """An existing node (or a launched NodeClaim) and what is still free on it for pending pods."""

    node: Node
    free: Resources
    initialized: bool

    @property
    def name(self) -> str:
        return self.node.name


@dataclass
class Problem:
    snapshot: Snapshot
    classes: list[PodClass]
    pools: list[PoolInfo]
    templates: list[NodeTemplate]
    existing: list[ExistingCapacity]
    axes: tuple[str, ...]
    #: class requests, shape (C, R)
    sizes: np.ndarray
    #: template allocatable after daemon overhead, shape (T, R)
    template_alloc: np.ndarray
    #: existing free capacity, shape (E, R)
    existing_free: np.ndarray
    #: may class c use template t / existing node e (selection + taints), shapes (C, T), (C, E)
    template_ok: np.ndarray
    existing_ok: np.ndarray
    rule: SelectionRule
    #: preferred node-affinity score of each class on each template / existing node, shapes (C, T), (C, E)
    template_pref: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    existing_pref: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    #: does the class's heaviest preferred term match (Karpenter's first try), shapes (C, T), (C, E)
    template_heaviest: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    existing_heaviest: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    #: constraints pods carry that this version does not model (reported with the plan)
    unmodelled: list[str] = field(default_factory=list)

    def selection_labels_ok(self, c: int, t: int) -> bool:
        """Labels only (no taints): used to tell a person which rule refused a pod."""
        return self.rule.accepts_labels(self.classes[c], self.templates[t].labels)

    @property
    def demand(self) -> np.ndarray:
        return np.array([c.demand for c in self.classes], dtype=np.int64)


def resource_axes(classes: list[PodClass]) -> tuple[str, ...]:
    """Resources any pending pod asks for, cpu/memory/pods first (these are the knapsack dimensions)."""
    names = {name for c in classes for name in c.requests}
    head = [CPU, MEMORY, PODS]
    return tuple(head + sorted(names - set(head)))


def vector(resources: Resources, axes: tuple[str, ...]) -> list[int]:
    return [resources[a] for a in axes]


def existing_capacity(snapshot: Snapshot) -> list[ExistingCapacity]:
    """Schedulable existing nodes and in-flight NodeClaims with their free capacity, in Karpenter's order
    (initialized first, then by name)."""
    bound: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.terminal:
            bound.setdefault(pod.node_name, []).append(pod)
    out = []
    for view in node_views(snapshot):  # in-flight NodeClaims included: ``solver.inflight``
        node = view.node
        if node.unschedulable or node.deleting or not node.ready:
            continue
        pods = bound.get(node.name, [])
        used = Resources()
        for pod in pods:
            used = used + pod.requests
        free = node.allocatable - used - missing_daemon_overhead(snapshot.daemonsets, node, pods)
        out.append(ExistingCapacity(node=node, free=free, initialized=view.initialized))
    out.sort(key=lambda e: (not e.initialized, e.name))
    return out


def pin_zones(snapshot: Snapshot, pending: list[Pod], templates: list[NodeTemplate],
              existing: list[ExistingCapacity]) -> list[Pod]:
    """Apply pod-to-pod rules as node requirements on copies of the pending pods: towards running pods
    (``rules.podaffinity``), then domain pins and soft pins per topology key (``rules.topology``)."""
    if not any(p.topology_spread or p.pod_affinity or p.pod_anti_affinity or p.preferred_pod_affinity
               or p.preferred_pod_anti_affinity for p in pending) and not any(
            p.pod_anti_affinity for p in snapshot.pods if p.node_name):
        return pending
    namespaces = {ns.name: ns.labels for ns in snapshot.namespaces}
    bound = podaffinity.running_pods(snapshot.pods, [v.node for v in node_views(snapshot)])
    rules = podaffinity.RunningPodRules(bound, pending, namespaces)
    nodes = [(t.labels, t.pool.taints) for t in templates] + [(e.node.labels, list(e.node.taints)) for e in existing]
    constrained = [rules.constrain(p) for p in pending]
    blocked = {p.key for p in constrained if p.rule_problem or p.volume_problem}
    return topology.apply(constrained, topology.plan_domains(pending, bound, nodes, blocked, constrained))


def compile_problem(snapshot: Snapshot, pods: list[Pod] | None = None) -> Problem:
    pending = snapshot.pending_pods() if pods is None else pods
    label_keys = selector_label_keys(snapshot.pods)
    namespaces = {ns.name: ns.labels for ns in snapshot.namespaces}
    templates = build_templates(snapshot, build_classes(pending, label_keys))
    existing = existing_capacity(snapshot)
    pending = pin_zones(snapshot, pending, templates, existing)
    bound: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.terminal:
            bound.setdefault(pod.node_name, []).append(pod)
    running = [p for pods_on_node in bound.values() for p in pods_on_node]

    # self-affine on hostname with no matching pod running yet: the group (the pods carrying the term,
    # whatever their shapes, plus a partner for a lone one: ``antiaffinity.host_affinity_bundles``) shares
    # one new node
    bundles = antiaffinity.host_affinity_bundles(pending, running, namespaces)
    classes = build_classes(pending, label_keys, lambda pod: bundles.get(pod.key))
    axes = resource_axes(classes)
    rule = SelectionRule()
    template_ok = np.zeros((len(classes), len(templates)), dtype=bool)
    existing_ok = np.zeros((len(classes), len(existing)), dtype=bool)
    for c in classes:
        # self-affine on hostname with matching pods running: only the nodes that run them will do
        joins_running = antiaffinity.self_affine_on_host(c.representative, namespaces) and not c.bundle
        if not joins_running:
            template_ok[c.index] = rule.admits_all(c, templates)
        for e, cap in enumerate(existing):
            on_node = bound.get(cap.name, [])
            existing_ok[c.index, e] = (rule.admits(c, cap.node.labels, cap.node.taints)
                                       and not antiaffinity.blocked_by_bound_pods(c, on_node, namespaces)
                                       and (not joins_running or any(antiaffinity.affinity_matches(
                                           c.representative, other, namespaces) for other in on_node)))
    minvalues.restrict(template_ok, templates, np.array([vector(t.allocatable, axes) for t in templates],
                                                        dtype=np.int64).reshape(len(templates), len(axes)))
    # soft preferences (preferred node affinity, soft pod rules, PreferNoSchedule taints): ``rules.preferences``
    scorer = preferences.PreferenceScorer(classes, [t.pool.taints for t in templates]
                                          + [list(e.node.taints) for e in existing])
    template_pref, template_heaviest = preferences.score_matrices(
        classes, [(t.labels, t.pool.taints) for t in templates], scorer)
    existing_pref, existing_heaviest = preferences.score_matrices(
        classes, [(e.node.labels, e.node.taints) for e in existing], scorer)
    counters = build_counters(classes, namespaces)
    base = len(axes)
    axes = axes + tuple(counter.name for counter in counters)
    sizes = np.array([vector(c.unit_requests, axes[:base])
                      + [counter.uses.get(c.index, 0) * c.unit for counter in counters]
                      for c in classes], dtype=np.int64).reshape(len(classes), len(axes))
    daemons_on = [[ds.pod for ds in snapshot.daemonsets if ds.runs_on(t.labels, t.pool.taints)] for t in templates]
    template_alloc = np.array([vector(t.allocatable, axes) for t in templates],
                              dtype=np.int64).reshape(len(templates), len(axes))
    existing_free = np.array([vector(e.free, axes) for e in existing],
                             dtype=np.int64).reshape(len(existing), len(axes))
    for j, counter in enumerate(counters):
        for t in range(len(templates)):
            template_alloc[t, base + j] = counter.capacity_with(daemons_on[t])
        for e, cap in enumerate(existing):
            existing_free[e, base + j] = counter.capacity_with(bound.get(cap.name, []))
    # a class that requests a resource a node lacks (zero allocatable) fits nowhere there; sizes cover it
    return Problem(snapshot=snapshot, classes=classes, pools=pool_infos(snapshot), templates=templates,
                   existing=existing, axes=axes, sizes=sizes, template_alloc=template_alloc,
                   existing_free=existing_free, template_ok=template_ok, existing_ok=existing_ok,
                   rule=rule, template_pref=template_pref, existing_pref=existing_pref,
                   template_heaviest=template_heaviest, existing_heaviest=existing_heaviest,
                   unmodelled=antiaffinity.unmodelled(classes, namespaces, counters))
