"""The final state a plan leads to, built once and read by every check.

Every node after the plan is a ``NodeState``: the snapshot's nodes and in-flight NodeClaims as pods will find
them (``model.inflight.node_views``) and every planned NodeClaim, each with its labels (hostname included),
taints, allocatable, the pods already bound there, the daemon pods that will run there and are not running
yet, and the pods the plan puts there in plan order. Checks read the state order-independently: every pair
of pods on a node, whichever came first.

Pods are grouped by label class (namespace and labels) so that a label selector is matched once per distinct
label set, and each topology key's domains are indexed once (``domains``), not per pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from model import labels as wk
from model.affinity import LabelSelector, PodAffinityTerm
from model.inflight import node_views
from model.instancetype import InstanceType, Offering
from model.node import Node
from model.nodepool import NodePool, launched_labels
from model.plan import PlannedNodeClaim, ProvisioningPlan
from model.pod import Pod
from model.resources import Resources
from model.snapshot import Snapshot
from model.taints import Taint
from model.workload import daemon_pods


@dataclass(eq=False)
class NodeState:
    """One node after the plan: an existing node (or in-flight NodeClaim), or a planned NodeClaim."""

    name: str
    #: how messages name it: ``nodeClaim NAME`` or ``existing node NAME``
    where: str
    labels: dict[str, str]
    taints: Sequence[Taint]
    allocatable: Resources
    #: non-terminal pods the snapshot binds to it
    bound: list[Pod] = field(default_factory=list)
    #: daemon pods that will run on it and are not running yet (DaemonSets whose pod would land here)
    daemons: list[Pod] = field(default_factory=list)
    #: pods the plan puts on it, in plan order (keys the snapshot does not know are left out)
    placed: list[Pod] = field(default_factory=list)
    #: their keys
    keys: list[str] = field(default_factory=list)
    claim: PlannedNodeClaim | None = None
    pool: NodePool | None = None
    instance_type: InstanceType | None = None
    offering: Offering | None = None
    node: Node | None = None

    @property
    def usable(self) -> bool:
        """A node the plan may put pods on, as far as its own checks go: an existing node, or a claim of a
        known NodePool and instance type on an available offering (``claims`` reports the others, and the
        per-node checks skip them)."""
        return self.claim is None or (self.pool is not None and self.instance_type is not None
                                      and self.offering is not None)

    @property
    def resident(self) -> list[Pod]:
        """Pods on the node before the plan's: bound pods, then daemon pods that will start."""
        return self.bound + self.daemons

    @property
    def members(self) -> list[Pod]:
        """Pods topology rules count on the node: bound pods and the plan's."""
        return self.bound + self.placed


class LabelClasses:
    """Pods by (namespace, labels), and label selectors / pod affinity terms matched once per class."""

    def __init__(self, namespaces: Mapping[str, Mapping[str, str]]) -> None:
        self._namespaces = namespaces
        self._ids: dict[tuple[str, frozenset[tuple[str, str]]], int] = {}
        self._of: dict[int, int] = {}
        self.namespace: list[str] = []
        self.labels: list[Mapping[str, str]] = []
        self._terms: dict[PodAffinityTerm, int] = {}
        self._term_list: list[PodAffinityTerm] = []
        self._selectors: dict[LabelSelector, int] = {}
        self._selector_list: list[LabelSelector] = []
        self._selects: dict[tuple[int, int, int], bool] = {}
        self._matches: dict[tuple[int, str, int], bool] = {}

    def of(self, pod: Pod) -> int:
        """The class id of a pod (its namespace and labels)."""
        cid = self._of.get(id(pod))
        if cid is None:
            key = (pod.namespace, frozenset(pod.labels.items()))
            cid = self._ids.get(key)
            if cid is None:
                cid = self._ids[key] = len(self.namespace)
                self.namespace.append(pod.namespace)
                self.labels.append(pod.labels)
            self._of[id(pod)] = cid
        return cid

    def term(self, term: PodAffinityTerm) -> int:
        tid = self._terms.get(term)
        if tid is None:
            tid = self._terms[term] = len(self._term_list)
            self._term_list.append(term)
        return tid

    def selects(self, term: int, owner: int, other: int) -> bool:
        """Does term ``term`` of a pod of class ``owner`` select the pods of class ``other``?"""
        key = (term, owner, other)
        hit = self._selects.get(key)
        if hit is None:
            namespace = self.namespace[other]
            hit = self._selects[key] = self._term_list[term].selects(
                self.namespace[owner], self.labels[owner], namespace, self.labels[other],
                self._namespaces.get(namespace))
        return hit

    def selector(self, selector: LabelSelector) -> int:
        sid = self._selectors.get(selector)
        if sid is None:
            sid = self._selectors[selector] = len(self._selector_list)
            self._selector_list.append(selector)
        return sid

    def matches(self, selector: int, namespace: str, cid: int) -> bool:
        """Is a pod of class ``cid`` in ``namespace`` and selected by label selector ``selector``?"""
        key = (selector, namespace, cid)
        hit = self._matches.get(key)
        if hit is None:
            hit = self._matches[key] = (self.namespace[cid] == namespace
                                        and self._selector_list[selector].matches(self.labels[cid]))
        return hit


@dataclass(eq=False)
class Context:
    """The snapshot, the plan and the final state, shared by every check."""

    snapshot: Snapshot
    plan: ProvisioningPlan
    #: every pod of the snapshot by ``ns/name``
    pods: dict[str, Pod]
    #: keys of the pods waiting for a node (``Snapshot.pending_pods``)
    pending: set[str]
    namespaces: dict[str, dict[str, str]]
    #: one state per planned NodeClaim, in plan order
    claims: list[NodeState]
    #: existing nodes (Nodes and in-flight NodeClaims, ``node_views``) by name, deleting ones included
    existing: dict[str, NodeState]
    #: plan position of each placed pod: claims in plan order, then existing nodes
    order: dict[str, int]
    #: the nodes topology rules count: every planned NodeClaim and every existing node not being deleted
    final: dict[str, NodeState]
    #: where each placed pod lands among ``final``
    where: dict[str, NodeState]
    classes: LabelClasses
    _domains: dict[str, dict[str | None, dict[int, list[Pod]]]] = field(default_factory=dict)
    _groups: dict[int, dict[int, list[Pod]]] = field(default_factory=dict)
    _counts: dict[int, int] | None = None
    _matrix: np.ndarray | None = None

    @cached_property
    def rows(self) -> list[NodeState]:
        """The final nodes in a fixed order (``class_matrix`` rows)."""
        return list(self.final.values())

    @classmethod
    def build(cls, snapshot: Snapshot, plan: ProvisioningPlan) -> Context:
        keys = [p.key for p in snapshot.pods]
        pods = dict(zip(keys, snapshot.pods, strict=True))
        waiting = {id(p) for p in snapshot.pending_pods()}
        pending = {k for k, p in zip(keys, snapshot.pods, strict=True) if id(p) in waiting}
        namespaces = {ns.name: ns.labels for ns in snapshot.namespaces}
        existing = _existing_nodes(snapshot)
        claims = _claim_nodes(snapshot, plan)
        order: dict[str, int] = {}
        for state, listed in [(s, s.claim.pods) for s in claims if s.claim is not None] + [
                (existing.get(a.name), a.pods) for a in plan.existing_nodes]:
            known = [k for k in listed if k in pods]
            if state is not None:
                state.keys.extend(known)
                state.placed.extend(pods[k] for k in known)
            base = len(order)
            order.update((k, base + i) for i, k in enumerate(known))
        for state in existing.values():
            if state.placed and state.node is not None:
                running = {(p.namespace, p.owner_name) for p in state.bound if p.owner_kind == "DaemonSet"}
                state.daemons = [ds.pod for ds in snapshot.daemonsets if (ds.namespace, ds.name) not in running
                                 and ds.runs_on(state.node.labels, state.node.taints)]
        final = {name: s for name, s in existing.items() if s.node is not None and not s.node.deleting}
        final.update((s.name, s) for s in claims)
        where = {k: s for s in final.values() for k in s.keys}
        return cls(snapshot=snapshot, plan=plan, pods=pods, pending=pending, namespaces=namespaces, claims=claims,
                   existing=existing, order=order, final=final, where=where, classes=LabelClasses(namespaces))

    def pending_keys(self, pods: Sequence[Pod]) -> tuple[str, ...]:
        """The keys of those of ``pods`` that are pending (what a violation may ask the plan to give up)."""
        return tuple(k for k in (p.key for p in pods) if k in self.pending)

    def pending_only(self, key: str) -> tuple[str, ...]:
        return (key,) if key in self.pending else ()

    def later(self, a: str, b: str) -> str:
        """The one of two placed pods the plan lists later."""
        return a if self.order.get(a, -1) >= self.order.get(b, -1) else b

    def domains(self, key: str) -> dict[str | None, dict[int, list[Pod]]]:
        """Pods (bound and placed) per value of topology key ``key`` (None: nodes without it) and label class,
        over the final nodes; indexed once per key."""
        index = self._domains.get(key)
        if index is None:
            index = self._domains[key] = {}
            for state in self.final.values():
                by_class = index.setdefault(state.labels.get(key), {})
                for cid, members in self.groups(state).items():
                    by_class.setdefault(cid, []).extend(members)
        return index

    def class_counts(self) -> dict[int, int]:
        """How many pods of each label class the final nodes hold (bound and placed)."""
        if self._counts is None:
            self._counts = {}
            for state in self.final.values():
                for cid, members in self.groups(state).items():
                    self._counts[cid] = self._counts.get(cid, 0) + len(members)
        return self._counts

    def class_matrix(self) -> np.ndarray:
        """Pods per (final node, label class): row i is ``self.rows[i]``, column ``cid`` a label class (every
        class of a final node's pods has a column)."""
        if self._matrix is None:
            groups = [self.groups(state) for state in self.rows]
            matrix = np.zeros((len(self.rows), len(self.classes.namespace)), dtype=np.int64)
            for i, by_class in enumerate(groups):
                for cid, members in by_class.items():
                    matrix[i, cid] = len(members)
            self._matrix = matrix
        return self._matrix

    def groups(self, state: NodeState) -> dict[int, list[Pod]]:
        """A final node's pods (bound and placed) by label class."""
        out = self._groups.get(id(state))
        if out is None:
            out = self._groups[id(state)] = {}
            of = self.classes.of
            for pod in state.members:
                out.setdefault(of(pod), []).append(pod)
        return out


def _existing_nodes(snapshot: Snapshot) -> dict[str, NodeState]:
    views = node_views(snapshot)
    if not views:
        return {}
    bound: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.terminal:
            bound.setdefault(pod.node_name, []).append(pod)
    out = {}
    for view in views:
        node = view.node
        out[node.name] = NodeState(name=node.name, where=f"existing node {node.name}",
                                   labels={wk.HOSTNAME: node.name, **node.labels}, taints=node.taints,
                                   allocatable=node.allocatable, bound=bound.get(node.name, []), node=node)
    return out


def _claim_nodes(snapshot: Snapshot, plan: ProvisioningPlan) -> list[NodeState]:
    """A state per planned NodeClaim. Its labels: the claim's own, overridden by what the offering sets
    (``launched_labels``); its daemons: every DaemonSet whose pod would run there."""
    pools = {np.name: np for np in snapshot.nodepools}
    catalog = {it.name: it for it in snapshot.instance_types}
    allocatable: dict[str, Resources] = {}
    offerings: dict[tuple[str, str, str], Offering | None] = {}
    daemons: dict[tuple[str, str, str, str, frozenset[tuple[str, str]]], list[Pod]] = {}
    out = []
    for claim in plan.node_claims:
        pool, it = pools.get(claim.node_pool), catalog.get(claim.instance_type)
        offering = None
        if it is not None:
            at = (it.name, claim.zone, claim.capacity_type)
            if at not in offerings:
                offerings[at] = next((o for o in it.offerings if o.zone == claim.zone
                                      and o.capacity_type == claim.capacity_type and o.available), None)
                allocatable[it.name] = it.allocatable
            offering = offerings[at]
        if pool is not None and it is not None:
            labels = {**claim.labels, **launched_labels(pool, it, claim.zone, claim.capacity_type)}
        else:
            labels = {**claim.labels, **(it.labels if it else {}), wk.ZONE: claim.zone,
                      wk.CAPACITY_TYPE: claim.capacity_type, wk.NODEPOOL: claim.node_pool}
        state = NodeState(name=claim.name, where=f"nodeClaim {claim.name}", labels={wk.HOSTNAME: claim.name, **labels},
                          taints=pool.taints if pool else [],
                          allocatable=allocatable[it.name] if it is not None else Resources(),
                          claim=claim, pool=pool, instance_type=it, offering=offering)
        if state.usable and pool is not None and snapshot.daemonsets:
            at_labels = (claim.node_pool, claim.instance_type, claim.zone, claim.capacity_type,
                         frozenset(claim.labels.items()))
            if at_labels not in daemons:  # the hostname aside, claims on one offering share their labels
                daemons[at_labels] = daemon_pods(snapshot.daemonsets, labels, pool.taints)
            state.daemons = daemons[at_labels]
        out.append(state)
    return out
