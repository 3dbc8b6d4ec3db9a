"""In-flight NodeClaims as capacity: every node the cluster has, or is about to have, as pods will see it.

A NodeClaim that is launched (or about to be) but whose Node has not joined yet will be a node soon; Karpenter
counts it as capacity (its instance type's allocatable, its labels and taints) so a new batch never launches a
second node for pods it already covers. Pods bound to its node name in the snapshot are already placed there.
A Node that joined but whose NodeClaim is not initialized yet is the same in-flight capacity: its
``karpenter.sh/unregistered`` and startup taints are about to go and it may not report Ready yet.
The solver's existing capacity and the verifier both read nodes through ``node_views`` (Karpenter's reading of
in-flight capacity: a model predicate, so the verifier shares it without sharing solver code).
"""

from __future__ import annotations

from dataclasses import dataclass

from model.instancetype import InstanceType
from model.labels import CAPACITY_TYPE, HOSTNAME, INITIALIZED, INSTANCE_TYPE, UNREGISTERED_TAINT, ZONE
from model.node import Node
from model.nodepool import NodeClaim
from model.snapshot import Snapshot


@dataclass(frozen=True)
class NodeView:
    """A node as pending pods will find it; ``inflight`` when it comes from a NodeClaim not yet initialized."""

    node: Node
    initialized: bool
    inflight: bool = False


def _pinned(claim: NodeClaim, key: str) -> str:
    """The single value a claim's label or ``In`` requirement gives ``key`` ('' when none)."""
    if claim.metadata.labels.get(key):
        return claim.metadata.labels[key]
    for req in claim.spec.requirements:
        if req.key == key and req.operator == "In" and len(req.values) == 1:
            return req.values[0]
    return ""


def _live(claim: NodeClaim) -> bool:
    """Launched or about to be, and not being deleted."""
    failed = any(c.type == "Launched" and c.status == "False" for c in claim.status.conditions)
    return not claim.metadata.deletion_timestamp and not failed


def claim_node(claim: NodeClaim, catalog: dict[str, InstanceType]) -> Node | None:
    """The node a claim without a Node will become (None when its instance type is unknown)."""
    instance_type = catalog.get(_pinned(claim, INSTANCE_TYPE))
    allocatable = claim.status.allocatable or (instance_type.allocatable if instance_type else None)
    if not allocatable:
        return None
    name = claim.status.node_name or claim.name
    labels = dict(instance_type.labels) if instance_type else {}
    for req in claim.spec.requirements:
        if req.operator == "In" and len(req.values) == 1:
            labels.setdefault(req.key, req.values[0])
    labels.update(claim.metadata.labels)
    labels.update({HOSTNAME: name, INITIALIZED: "false"})
    for key in (ZONE, CAPACITY_TYPE):
        if _pinned(claim, key):
            labels[key] = _pinned(claim, key)
    capacity = claim.status.capacity or (instance_type.capacity if instance_type else allocatable)
    return Node(name=name, labels=labels, taints=tuple(claim.spec.taints), capacity=capacity,
                allocatable=allocatable, provider_id=claim.status.provider_id)


def node_views(snapshot: Snapshot) -> list[NodeView]:
    """Every Node in the snapshot (in-flight ones as they will be), then every live NodeClaim without a Node."""
    catalog = {it.name: it for it in snapshot.instance_types}
    live = [c for c in snapshot.nodeclaims if _live(c)]
    by_node = {c.status.node_name or c.name: c for c in live}
    by_provider_id = {c.status.provider_id: c for c in live if c.status.provider_id}
    out: list[NodeView] = []
    seen: set[str] = set()
    for node in snapshot.nodes:
        claim = by_provider_id.get(node.provider_id) if node.provider_id else None
        claim = claim or by_node.get(node.name)
        if claim is not None:
            seen.add(claim.name)
        if claim is None or claim.condition("Initialized") or node.labels.get(INITIALIZED) == "true" or node.deleting:
            out.append(NodeView(node, initialized=node.labels.get(INITIALIZED, "true") == "true"))
            continue
        startup = {(t.key, t.effect) for t in claim.spec.startup_taints}
        taints = tuple(t for t in node.taints if t.key != UNREGISTERED_TAINT and (t.key, t.effect) not in startup)
        out.append(NodeView(node.model_copy(update={"taints": taints, "ready": True}), initialized=False,
                            inflight=True))
    for claim in live:
        if claim.name in seen or claim.condition("Registered"):
            continue  # it has a Node, or had one that is gone (then it is no capacity)
        future = claim_node(claim, catalog)
        if future is not None:
            out.append(NodeView(future, initialized=False, inflight=True))
    return out
