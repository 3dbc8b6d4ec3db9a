"""The compiled batch: pod classes, node templates and existing free capacity as integer matrices.

Everything downstream (greedy, column generation, the CP-SAT master, explanations) reads this one
structure, so a rule's verdict on a (class, node) pair is computed once, here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from model.inflight import node_views
from model.node import Node
from model.pod import Pod
from model.resources import CPU, MEMORY, PODS, Resources
from model.snapshot import Snapshot
from solver.classes import PodClass, build_classes, selector_label_keys
from solver.rules.base import BatchContext, Rule
from solver.rules.counters import NodeCounter
from solver.rules.daemonsets import missing_daemon_overhead
from solver.rules.preferences import PreferencePolicy
from solver.rules.registry import RULES
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
    #: how many of ``axes`` are resources (the rest are per-node counters)
    resource_axes: int = 0
    #: node selection, memoised (``rules.selection``): explanations ask it again
    rule: SelectionRule = field(default_factory=SelectionRule)
    #: preferred node-affinity score of each class on each template / existing node, shapes (C, T), (C, E)
    template_pref: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    existing_pref: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    #: does the class's heaviest preferred term match (Karpenter's first try), shapes (C, T), (C, E)
    template_heaviest: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    existing_heaviest: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    #: constraints pods carry that this version does not model (reported with the plan)
    unmodelled: list[str] = field(default_factory=list)
    #: where an encoding is stricter than Kubernetes: a proof of optimality holds for that stricter model
    conservative: list[str] = field(default_factory=list)
    #: the same notes by family name: a lower bound drops exactly these families (``Rule.relaxable``)
    conservative_by: dict[str, list[str]] = field(default_factory=dict)
    #: why a family closed nodes to a class (family name → class index → reason), for ``explain``
    closed_because: dict[str, dict[int, str]] = field(default_factory=dict)
    #: ``class_of``'s table, made on first use (a copy made by ``dataclasses.replace`` makes its own)
    _class_index: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)

    def class_of(self) -> dict[str, int]:
        """Each pending pod's class index by pod key, built once: greedy, decoding, shrinking and scoring all
        read it (50,000 pod keys a stage otherwise). Read-only."""
        if self._class_index is None:
            self._class_index = {pod.key: c.index for c in self.classes for pod in c.pods}
        return self._class_index

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
    for view in node_views(snapshot):  # in-flight NodeClaims included: ``model.inflight``
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


def compile_problem(snapshot: Snapshot, pods: list[Pod] | None = None, rules: Sequence[Rule] = RULES,
                    preference_policy: PreferencePolicy | None = None, preference_price: float = 0.0) -> Problem:
    """Compile the batch by running every registered rule family (``solver.rules.registry.RULES``) phase by phase:
    constrain the pods, bundle them, build classes and counters, admit, score, then collect notes.
    ``preference_policy`` / ``preference_price``: the solve's (``BatchContext``), None when none is stated."""
    pending = snapshot.pending_pods() if pods is None else pods
    label_keys = selector_label_keys(snapshot.pods)
    templates = build_templates(snapshot, build_classes(pending, label_keys))
    batch = BatchContext(snapshot=snapshot, templates=templates, existing=existing_capacity(snapshot),
                         submitted={p.key: p for p in pending}, preference_policy=preference_policy,
                         preference_price=preference_price)
    for rule in rules:
        pending = rule.constrain(batch, pending)
    bundles: dict[str, Hashable] = {}
    for rule in rules:
        bundles.update(rule.bundles(batch, pending))
    classes = build_classes(pending, label_keys, lambda pod: bundles.get(pod.key))
    counters = [counter for rule in rules for counter in rule.counters(batch, classes)]
    problem = _matrices(batch, classes, counters)
    for rule in rules:
        rule.admit(batch, problem)
    for rule in rules:
        rule.score(batch, problem)
    problem.unmodelled = [note for rule in rules for note in rule.unmodelled(batch, classes, counters)]
    for rule in rules:
        notes = rule.conservative(batch, classes, counters)
        if notes:
            problem.conservative_by[rule.name] = notes
    problem.conservative = [note for notes in problem.conservative_by.values() for note in notes]
    return problem


def _matrices(batch: BatchContext, classes: list[PodClass], counters: list[NodeCounter]) -> Problem:
    """The problem's integer matrices: class sizes and node capacities over resources then counters, every
    (class, node) pair open until the families' ``admit`` closes it, no preferences yet."""
    snapshot, templates, existing = batch.snapshot, batch.templates, batch.existing
    base = resource_axes(classes)
    axes = base + tuple(counter.name for counter in counters)
    sizes = np.array([vector(c.unit_requests, base)
                      + [counter.uses.get(c.index, 0) * (1 if counter.per_unit else c.unit) for counter in counters]
                      for c in classes], dtype=np.int64).reshape(len(classes), len(axes))
    daemons_on = [[ds.pod for ds in snapshot.daemonsets if ds.runs_on(t.labels, t.pool.taints)] for t in templates]
    template_alloc = np.array([vector(t.allocatable, axes) for t in templates],
                              dtype=np.int64).reshape(len(templates), len(axes))
    existing_free = np.array([vector(e.free, axes) for e in existing],
                             dtype=np.int64).reshape(len(existing), len(axes))
    for j, counter in enumerate(counters):
        for t in range(len(templates)):
            template_alloc[t, len(base) + j] = (counter.template_capacity[t] if counter.template_capacity is not None
                                                else counter.capacity_with(daemons_on[t]))
        for e, cap in enumerate(existing):
            existing_free[e, len(base) + j] = (counter.existing_capacity[e] if counter.existing_capacity is not None
                                               else counter.capacity_with(batch.bound.get(cap.name, [])))
    # a class that requests a resource a node lacks (zero allocatable) fits nowhere there; sizes cover it
    return Problem(snapshot=snapshot, classes=classes, pools=pool_infos(snapshot), templates=templates,
                   existing=existing, axes=axes, sizes=sizes, template_alloc=template_alloc,
                   existing_free=existing_free, resource_axes=len(base),
                   template_ok=np.ones((len(classes), len(templates)), dtype=bool),
                   existing_ok=np.ones((len(classes), len(existing)), dtype=bool),
                   template_pref=np.zeros((len(classes), len(templates)), dtype=np.int64),
                   existing_pref=np.zeros((len(classes), len(existing)), dtype=np.int64),
                   template_heaviest=np.ones((len(classes), len(templates)), dtype=bool),
                   existing_heaviest=np.ones((len(classes), len(existing)), dtype=bool))
