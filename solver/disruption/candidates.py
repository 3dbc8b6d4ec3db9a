"""Which nodes consolidation may remove, and why the others may not.

Rules follow Karpenter's candidate filter (``karpenter-reference.md``): managed and initialized, not
cordoned / deleting / NotReady, no ``karpenter.sh/do-not-disrupt`` on the node or its pods (``"true"``, or a
duration still running), not nominated for a pending pod, ``consolidateAfter`` elapsed since the last pod
event, the pool's ``consolidationPolicy`` admits the move. A node whose evictions alone exceed a PDB's
allowance is not a candidate; PDB sums across nodes are the model's constraint. Drifted and expired nodes
are candidates whatever their pods (expiration is forceful and outside budgets, as in Karpenter).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from model import labels as wk
from model.disruption import RemovalReason
from model.durations import parse_duration, parse_time
from model.errors import InputError
from model.instancetype import InstanceType
from model.node import Node
from model.nodepool import NodePool
from model.pod import Pod
from model.snapshot import Snapshot
from model.workload import PodDisruptionBudget
from solver.disruption.budgets import BudgetLimit, budget_limits, frozen

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
#: the reasons that make a removal consolidation (Karpenter's spot-to-spot rule is consolidation's only: drift
#: and expiration replacements are provisioned as any pending pod is)
CONSOLIDATION_REASONS = frozenset({"Empty", "Underutilized"})


def eviction_cost(pod: Pod) -> float:
    """Karpenter's eviction cost: 1 + deletion-cost/2^27 + priority/2^25, clamped to [-10, 10]."""
    cost = 1.0
    with contextlib.suppress(ValueError):
        cost += float(pod.annotations.get(DELETION_COST, "0")) / 2**27
    cost += pod.priority / 2**25
    return min(max(cost, -10.0), 10.0)


def node_price(node: Node, catalog: dict[str, InstanceType]) -> float | None:
    """Hourly price of the offering the node runs on; ``None`` when the catalog no longer has it."""
    it = catalog.get(node.labels.get(wk.INSTANCE_TYPE, ""))
    if it is None:
        return None
    zone, capacity = node.labels.get(wk.ZONE), node.labels.get(wk.CAPACITY_TYPE, "on-demand")
    offering = next((o for o in it.offerings if o.zone == zone and o.capacity_type == capacity), None)
    return offering.price if offering else None


@dataclass
class NodeState:
    """One node as consolidation sees it."""

    node: Node
    pool: NodePool | None
    price: float
    priced: bool
    #: pods an eviction would move (not daemon, not terminal)
    pods: list[Pod]
    reason: RemovalReason | None = None
    blocked: str = ""
    #: deleting or NotReady: already counts against its pool's budgets
    disrupting: bool = False
    eviction_cost: float = 0.0
    #: eviction cost scaled by the node's remaining lifetime: Karpenter's candidate order
    disruption_cost: float = 0.0
    detail: str = ""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def candidate(self) -> bool:
        return self.reason is not None and not self.blocked

    @property
    def capacity_type(self) -> str:
        return self.node.labels.get(wk.CAPACITY_TYPE, "on-demand")


@dataclass
class ClusterState:
    nodes: list[NodeState]
    budgets: dict[str, list[BudgetLimit]]
    #: each PDB that selects pods, with the evictions it allows now
    pdbs: list[tuple[PodDisruptionBudget, int]]
    now: datetime
    warnings: list[str] = field(default_factory=list)
    #: unreadable budgets: their pools are frozen (fail closed); the CLI reports them as bad input
    errors: list[InputError] = field(default_factory=list)
    _by_name: dict[str, NodeState] = field(default_factory=dict, repr=False, compare=False)
    _indexed: int = field(default=-1, repr=False, compare=False)

    @property
    def candidates(self) -> list[NodeState]:
        return [n for n in self.nodes if n.candidate]

    def state(self, name: str) -> NodeState | None:
        if self._indexed != len(self.nodes):  # built on first use (the verifier asks once per removal)
            self._by_name = {}
            for n in self.nodes:
                self._by_name.setdefault(n.name, n)
            self._indexed = len(self.nodes)
        return self._by_name.get(name)

    def excesses(self, removed: list[NodeState]) -> list[Excess]:
        """Every active budget and PDB allowance ``removed`` would exceed, together. One rule for the model's
        heuristics, the verifier and the controller's re-check (each words it its own way). Expired nodes
        are forceful: outside PDB allowances, as in Karpenter; budgets count them only if they cover the
        reason."""
        out = []
        for pool, limits in self.budgets.items():
            for limit in limits:
                used = sum(1 for s in removed if s.pool is not None and s.pool.name == pool
                           and s.reason is not None and limit.covers(s.reason))
                if used > limit.allowed:
                    out.append(Excess(pool, used, limit.allowed, limit=limit))
        for pdb, allowed in self.pdbs:
            evicted = sum(1 for s in removed if s.reason != "Expired" for p in s.pods if pdb.selects(p))
            if evicted > allowed:
                out.append(Excess(pdb.key, evicted, allowed))
        return out


@dataclass(frozen=True)
class Excess:
    """A budget (``limit`` set: ``name`` is the NodePool) or a PDB (``name`` is namespace/name) that a set of
    removals exceeds: ``used`` removals or evictions where ``allowed`` are allowed."""

    name: str
    used: int
    allowed: int
    limit: BudgetLimit | None = None


def _protected(value: str | None, since: datetime | None, now: datetime) -> bool:
    """``karpenter.sh/do-not-disrupt``: "true" protects; a duration protects that long after ``since``."""
    if value is None:
        return False
    if value.strip().lower() == "true":
        return True
    try:
        seconds = parse_duration(value)
    except ValueError:
        return value.strip().lower() != "false"  # unreadable: fail safe
    if seconds is None:
        return True
    return since is None or now < since + timedelta(seconds=seconds)


def _drift(node: Node, pool: NodePool, catalog: dict[str, InstanceType]) -> str:
    node_hash, pool_hash = node.annotations.get(NODEPOOL_HASH), pool.metadata.annotations.get(NODEPOOL_HASH)
    if node_hash and pool_hash and node_hash != pool_hash:
        return f"NodePool {pool.name} template changed (hash {node_hash} → {pool_hash})"
    failing = pool.requirements.failing(node.labels)
    if failing:
        return f"no longer meets NodePool {pool.name} requirement {failing[0].describe()}"
    itype = node.labels.get(wk.INSTANCE_TYPE)
    if itype and itype not in catalog:
        return f"instance type {itype} is no longer offered"
    return ""


#: pods of one rollout share their timestamps: each distinct one is parsed once per process
_time = functools.lru_cache(maxsize=65536)(parse_time)


def _last_pod_event(node: Node, pods: list[Pod]) -> datetime | None:
    times = [_time(node.created)] + [_time(p.started) or _time(p.created) for p in pods]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _lifetime_left(node: Node, pool: NodePool, now: datetime) -> float:
    try:
        expire = parse_duration(pool.spec.template.spec.expire_after or "Never")
    except ValueError:
        return 1.0
    created = parse_time(node.created)
    if expire is None or not expire or created is None:
        return 1.0
    return min(max(1.0 - (now - created).total_seconds() / expire, 0.0), 1.0)


def _classify(state: NodeState, pool: NodePool, catalog: dict[str, InstanceType], now: datetime,
              nominated: dict[str, str]) -> None:
    node = state.node
    created = parse_time(node.created)
    try:
        expire = parse_duration(pool.spec.template.spec.expire_after or "Never")
    except ValueError:
        expire = None
    if expire is not None and created is not None and now >= created + timedelta(seconds=expire):
        state.reason, state.detail = "Expired", f"older than expireAfter {pool.spec.template.spec.expire_after}"
        return  # forceful: nothing below stops it
    if _protected(node.annotations.get(wk.DO_NOT_DISRUPT), created, now):
        state.blocked = f"node has {wk.DO_NOT_DISRUPT}"
        return
    for pod in state.pods:
        marked = pod.annotations.get(wk.DO_NOT_DISRUPT)
        if marked is not None and _protected(marked, _time(pod.started) or _time(pod.created), now):
            state.blocked = f"pod {pod.key} has {wk.DO_NOT_DISRUPT}"
            return
        if any(term.topology_key == wk.HOSTNAME for term in pod.pod_affinity):
            state.blocked = f"pod {pod.key} requires pod affinity on {wk.HOSTNAME} (its moves are not modelled)"
            return
    if node.name in nominated:
        state.blocked = f"nominated for pending pod {nominated[node.name]}"
        return
    drift = _drift(node, pool, catalog)
    if drift:
        state.reason, state.detail = "Drifted", drift
        return
    policy = pool.spec.disruption.consolidation_policy
    state.reason = "Empty" if not state.pods else "Underutilized"
    if state.reason == "Underutilized" and policy == "WhenEmpty":
        state.blocked = f"NodePool {pool.name} consolidationPolicy WhenEmpty and the node runs {len(state.pods)} pod(s)"
        return
    try:
        after = parse_duration(pool.spec.disruption.consolidate_after)
    except ValueError:
        after = None
    if after is None:
        state.blocked = f"NodePool {pool.name} consolidateAfter is {pool.spec.disruption.consolidate_after}"
        return
    last = _last_pod_event(node, state.pods)
    if last is not None and now < last + timedelta(seconds=after):
        state.blocked = f"consolidateAfter {pool.spec.disruption.consolidate_after} not elapsed since {last:%H:%M:%S}"


def analyse(snapshot: Snapshot, now: datetime) -> ClusterState:
    """Every node's consolidation standing, the budgets active at ``now`` and the PDB allowances."""
    catalog = {it.name: it for it in snapshot.instance_types}
    pools = {p.name: p for p in snapshot.nodepools}
    on_node: dict[str, list[Pod]] = {}
    nominated: dict[str, str] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.terminal and not pod.daemon and not pod.deleting:  # terminating: leaving anyway
            on_node.setdefault(pod.node_name, []).append(pod)
        elif pod.pending and pod.nominated_node:
            nominated.setdefault(pod.nominated_node, pod.key)
    warnings: list[str] = []
    nodes = []
    for node in snapshot.nodes:
        price = node_price(node, catalog)
        pool = pools.get(node.nodepool)
        state = NodeState(node=node, pool=pool, price=price or 0.0, priced=price is not None,
                          pods=sorted(on_node.get(node.name, []), key=lambda p: p.key))
        state.eviction_cost = sum(eviction_cost(p) for p in state.pods)
        # a disrupted taint: a disruption (ours or Karpenter's) is already under way on the node
        disrupted = any(t.key == wk.DISRUPTED_TAINT and t.effect == "NoSchedule" for t in node.taints)
        state.disrupting = node.deleting or not node.ready or disrupted
        if pool is None:
            state.blocked = "not managed by a NodePool in the snapshot"
        elif node.labels.get(wk.INITIALIZED) != "true":
            state.blocked = "not initialized"
        elif node.deleting or not node.ready or disrupted or node.unschedulable:
            state.blocked = ("being deleted" if node.deleting else "NotReady" if not node.ready
                             else f"being disrupted ({wk.DISRUPTED_TAINT} taint)" if disrupted else "cordoned")
        else:
            _classify(state, pool, catalog, now, nominated)
            state.disruption_cost = state.eviction_cost * _lifetime_left(node, pool, now)
        if price is None and pool is not None:
            warnings.append(f"node {node.name}: no catalog offering for its instance type/zone/capacity type; "
                            "priced at 0 $/h")
        nodes.append(state)
    pdbs = []
    for pdb in snapshot.pdbs:
        if not any(pdb.selects(p) for p in snapshot.pods):
            warnings.append(f"PodDisruptionBudget {pdb.key} selects no pods; ignored")
            continue
        allowed = pdb.allowed(snapshot.pods)
        pdbs.append((pdb, allowed))
        for state in nodes:
            hits = sum(1 for p in state.pods if pdb.selects(p))
            if state.candidate and state.reason != "Expired" and hits > allowed:
                state.blocked = f"PodDisruptionBudget {pdb.key} allows {allowed} eviction(s); the node runs {hits}"
    budgets: dict[str, list[BudgetLimit]] = {}
    errors: list[InputError] = []
    for pool in snapshot.nodepools:
        members = [n for n in nodes if n.pool is pool]
        try:
            budgets[pool.name] = budget_limits(pool, len(members), sum(n.disrupting for n in members), now)
        except InputError as err:
            errors.append(err)
            budgets[pool.name] = [frozen(pool.name)]
    return ClusterState(nodes=nodes, budgets=budgets, pdbs=pdbs, now=now, warnings=warnings, errors=errors)
