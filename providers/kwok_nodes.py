"""The KWOK cloud provider: a launched NodeClaim becomes a Node object that KWOK simulates.

``create`` writes a Node named after the NodeClaim with the chosen instance type's capacity and allocatable,
the plan's labels (instance type, zone, capacity type, NodePool, arch, os, hostname …), the NodePool's taints
and startup taints, the ``karpenter.sh/unregistered:NoExecute`` taint (removed at registration), a
``kwok://`` providerID and the ``kwok.x-k8s.io/node: fake`` annotation that makes KWOK keep it Ready. The
Node is owned by its NodeClaim and carries the ``karpenter.sh/termination`` finalizer, so a Node deleted by
anyone stays until the controller has drained it; ``delete`` (the instance going away) deletes the Node and
releases that finalizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from kubernetes import client

from model import labels as wk
from model.instancetype import InstanceType
from model.nodepool import NodeClaim
from model.quantity import format_quantity
from model.resources import Resources
from providers.protocol import InsufficientCapacityError

PROVIDER_ID_PREFIX = "kwok://"
TERMINATION_FINALIZER = "karpenter.sh/termination"


def _single(claim: NodeClaim, key: str) -> str:
    """The one value a launched claim's requirement (or label) pins ``key`` to."""
    label = claim.metadata.labels.get(key)
    if label:
        return label
    for req in claim.spec.requirements:
        if req.key == key and req.operator == "In" and len(req.values) == 1:
            return req.values[0]
    raise InsufficientCapacityError(f"NodeClaim {claim.name} does not pin {key} to one value")


def quantities(resources: Resources) -> dict[str, str]:
    return {name: format_quantity(name, value) for name, value in resources.items()}


class KwokProvider:
    """Launches NodeClaims as KWOK Nodes through the API server."""

    def __init__(self, api: client.ApiClient, catalog: Sequence[InstanceType]) -> None:
        self._core = client.CoreV1Api(api)
        self._types = {it.name: it for it in catalog}

    def instance_types(self, nodepool: Any = None) -> list[InstanceType]:
        return list(self._types.values())

    def node_for(self, claim: NodeClaim) -> dict[str, Any]:
        """The Node object a launch creates (pure, for tests)."""
        type_name = _single(claim, wk.INSTANCE_TYPE)
        instance_type = self._types.get(type_name)
        if instance_type is None:
            raise InsufficientCapacityError(f"unknown instance type {type_name}")
        zone, capacity_type = _single(claim, wk.ZONE), _single(claim, wk.CAPACITY_TYPE)
        if not any(o.zone == zone and o.capacity_type == capacity_type and o.available
                   for o in instance_type.offerings):
            raise InsufficientCapacityError(f"no available offering {type_name} {zone} {capacity_type}")
        labels = {**instance_type.labels, **claim.metadata.labels, wk.HOSTNAME: claim.name, wk.ZONE: zone,
                  wk.CAPACITY_TYPE: capacity_type, wk.INSTANCE_TYPE: type_name}
        taints = [*claim.spec.taints, *claim.spec.startup_taints]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": claim.name,
                "labels": labels,
                "annotations": {wk.KWOK_NODE_ANNOTATION: "fake"},
                "finalizers": [TERMINATION_FINALIZER],
                "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim.name,
                                     "uid": claim.metadata.uid}],
            },
            "spec": {
                "providerID": PROVIDER_ID_PREFIX + claim.name,
                "taints": [*({"key": t.key, "value": t.value, "effect": t.effect} for t in taints),
                           {"key": wk.UNREGISTERED_TAINT, "effect": "NoExecute"}],
            },
            "status": {
                "capacity": quantities(instance_type.capacity),
                "allocatable": quantities(instance_type.allocatable),
            },
        }

    def create(self, claim: NodeClaim) -> dict[str, Any]:
        """Create the Node (an existing one of the same name is this claim's: launch is idempotent)."""
        body = self.node_for(claim)
        try:
            self._core.create_node(cast(Any, body), _preload_content=False)
        except client.ApiException as err:
            if err.status != 409:
                raise
        return body

    def delete(self, claim: NodeClaim) -> None:
        """Delete the claim's Node and release its finalizer (idempotent: a Node already gone is fine)."""
        name = claim.status.node_name or claim.name
        try:
            self._core.delete_node(name)
            node = self._core.read_node(name)
        except client.ApiException as err:
            if err.status != 404:
                raise
            return
        finalizers = list((node.metadata.finalizers if node.metadata else None) or [])
        if TERMINATION_FINALIZER not in finalizers:
            return
        patch = [{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                 {"op": "replace", "path": "/metadata/finalizers",
                  "value": [f for f in finalizers if f != TERMINATION_FINALIZER]}]
        try:
            self._core.patch_node(name, patch)
        except client.ApiException as err:
            if err.status not in (404, 409, 422):  # gone, or changed meanwhile (the next pass retries)
                raise
