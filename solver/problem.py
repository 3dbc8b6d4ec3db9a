"""The compiled batch: pod classes, node templates and existing free capacity as integer matrices.

Everything downstream (greedy, column generation, the CP-SAT master, explanations) reads this one
structure, so a rule's verdict on a (class, node) pair is computed once, here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from model.labels import INITIALIZED, ZONE
from model.node import Node
from model.pod import Pod
from model.resources import CPU, MEMORY, PODS, Resources
from model.snapshot import Snapshot
from solver.classes import PodClass, build_classes, selector_label_keys
from solver.rules import antiaffinity, preferences, zones
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
    """Schedulable existing nodes with their free capacity, in Karpenter's order (initialized, name)."""
    bound: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.terminal:
            bound.setdefault(pod.node_name, []).append(pod)
    out = []
    for node in snapshot.nodes:
        if node.unschedulable or node.deleting or not node.ready:
            continue
        pods = bound.get(node.name, [])
        used = Resources()
        for pod in pods:
            used = used + pod.requests
        free = node.allocatable - used - missing_daemon_overhead(snapshot.daemonsets, node, pods)
        initialized = node.labels.get(INITIALIZED, "true") == "true"
        out.append(ExistingCapacity(node=node, free=free, initialized=initialized))
    out.sort(key=lambda e: (not e.initialized, e.name))
    return out


def pin_zones(snapshot: Snapshot, pending: list[Pod], templates: list[NodeTemplate],
              existing: list[ExistingCapacity]) -> list[Pod]:
    """Apply zone-level rules (``rules.zones``) as zone pins on copies of the pending pods."""
    if not any(p.topology_spread or p.pod_affinity or p.pod_anti_affinity for p in pending):
        return pending
    zone_of = {n.name: n.labels.get(ZONE, "") for n in snapshot.nodes}
    bound = [(p, zone_of.get(p.node_name, "")) for p in snapshot.pods if p.node_name and not p.terminal]
    nodes = [(t.labels, t.pool.taints) for t in templates] + [(e.node.labels, list(e.node.taints)) for e in existing]
    plan = zones.plan_zones(pending, bound, nodes)
    out = []
    for pod in pending:
        if pod.key in plan.pins:
            pod = pod.model_copy(update={"zone_pin": plan.pins[pod.key]})
        elif pod.key in plan.refused:
            pod = pod.model_copy(update={"zone_problem": plan.refused[pod.key]})
        out.append(pod)
    return out


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

    def bundle_key(pod: Pod) -> object | None:
        """Self-affine on hostname with no matching pod running yet: the whole group (every pending pod
        its term selects, whatever their shapes) shares one new node."""
        term = antiaffinity.host_self_affinity_term(pod, namespaces)
        if term is None or any(antiaffinity.affinity_matches(pod, other, namespaces) for other in running):
            return None
        return (pod.namespace, term)

    classes = build_classes(pending, label_keys, bundle_key)
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
    template_pref = np.zeros((len(classes), len(templates)), dtype=np.int64)
    existing_pref = np.zeros((len(classes), len(existing)), dtype=np.int64)
    template_heaviest = np.ones((len(classes), len(templates)), dtype=bool)
    existing_heaviest = np.ones((len(classes), len(existing)), dtype=bool)
    for c in classes:
        if not c.representative.preferred_terms:
            continue
        for t, tmpl in enumerate(templates):
            template_pref[c.index, t] = preferences.score(c, tmpl.labels)
            template_heaviest[c.index, t] = preferences.heaviest_term_matches(c, tmpl.labels)
        for e, cap in enumerate(existing):
            existing_pref[c.index, e] = preferences.score(c, cap.node.labels)
            existing_heaviest[c.index, e] = preferences.heaviest_term_matches(c, cap.node.labels)
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
