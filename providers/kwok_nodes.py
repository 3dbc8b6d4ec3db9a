"""The KWOK cloud provider: a launched NodeClaim becomes a Node object that KWOK simulates.

``create`` writes a Node named after the NodeClaim with the chosen instance type's capacity and allocatable,
the plan's labels (instance type, zone, capacity type, NodePool, arch, os, hostname …), the NodePool's taints
and startup taints, the ``karpenter.sh/unregistered:NoExecute`` taint (removed at registration), a
``kwok://`` providerID and the ``kwok.x-k8s.io/node: fake`` annotation that makes KWOK keep it Ready. The
Node is owned by its NodeClaim and carries the ``karpenter.sh/termination`` finalizer, so a Node deleted by
anyone stays until the controller has drained it; ``delete`` (the instance going away) deletes the Node and
releases that finalizer. The "instances" this provider lists are those Nodes.

For DRA it is also the driver: a node whose instance type has a device inventory gets the ResourceSlices that
inventory gives it (``InstanceType.node_resource_slices``), owned by the Node, so the kube-scheduler can
allocate claims on it as soon as it exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from kubernetes import client

from controller.rest import CoreApi, ResourceApi
from model import labels as wk
from model.instancetype import InstanceType, Offering
from model.nodepool import NodeClaim, NodeClaimStatus, NodePool
from model.quantity import format_quantity
from model.resources import Resources
from providers.fallbacks import planned_offering, ranked_offerings
from providers.kwok_nodeclass import GROUP, KIND, VERSION
from providers.protocol import InsufficientCapacityError, Launched, NodeClaimNotFoundError, NodeClassKind, RepairPolicy

PROVIDER_ID_PREFIX = "kwok://"
TERMINATION_FINALIZER = "karpenter.sh/termination"
#: Karpenter's KWOK provider: a Node NotReady (or Unknown) for 10 minutes is repaired
REPAIR_POLICIES = (RepairPolicy("Ready", "False", 600.0), RepairPolicy("Ready", "Unknown", 600.0))


def quantities(resources: Resources) -> dict[str, str]:
    return {name: format_quantity(name, value) for name, value in resources.items()}


class KwokProvider:
    """Launches NodeClaims as KWOK Nodes through the API server."""

    name = "kwok"

    def __init__(self, api: client.ApiClient, catalog: Sequence[InstanceType]) -> None:
        self._core = CoreApi(api)
        self._resources = ResourceApi(api)
        self._types = {it.name: it for it in catalog}

    def supported_node_classes(self) -> Sequence[NodeClassKind]:
        return (NodeClassKind(GROUP, KIND, VERSION, "kwoknodeclasses"),)

    def instance_types(self, nodepool: NodePool | None = None) -> list[InstanceType]:
        return list(self._types.values())

    def choose(self, claim: NodeClaim) -> tuple[InstanceType, Offering]:
        """The offering a launch uses: the plan's, else the claim's cheapest other allowed offering."""
        ranked = ranked_offerings(claim, self._types.values())
        if not ranked:
            type_name, zone, capacity_type = planned_offering(claim)
            raise InsufficientCapacityError(f"no available offering {type_name} {zone} {capacity_type}",
                                            [planned_offering(claim)])
        return ranked[0]

    def node_for(self, claim: NodeClaim) -> dict[str, Any]:
        """The Node object a launch creates (pure, for tests)."""
        instance_type, offering = self.choose(claim)
        labels = {**instance_type.labels, **claim.metadata.labels, wk.HOSTNAME: claim.name, wk.ZONE: offering.zone,
                  wk.CAPACITY_TYPE: offering.capacity_type, wk.INSTANCE_TYPE: instance_type.name}
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

    def create(self, claim: NodeClaim) -> Launched:
        """Create the Node (an existing one of the same name is this claim's: launch is idempotent), then
        publish its devices."""
        body = self.node_for(claim)
        try:
            uid = self._core.create_node(body).json()["metadata"]["uid"]
        except client.ApiException as err:
            if err.status != 409:
                raise
            uid = str((self._core.read_node(claim.name).json().get("metadata") or {}).get("uid") or "")
        self.publish_devices(claim.name, body["metadata"]["labels"][wk.INSTANCE_TYPE], uid)
        return Launched(_claim_of_node(body, claim))

    def publish_devices(self, node_name: str, instance_type: str, node_uid: str) -> None:
        """Play the DRA driver: the ResourceSlices the instance type's inventory gives the node, owned by the
        Node (the garbage collector removes them with it). Slices that already exist are kept."""
        it = self._types.get(instance_type)
        if it is None or not it.resource_slices:
            return
        owner = {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
        for resource_slice in it.node_resource_slices(node_name):
            try:
                self._resources.create_resource_slice(resource_slice.api(owner=owner))
            except client.ApiException as err:
                if err.status != 409:
                    raise

    def delete(self, claim: NodeClaim) -> None:
        """Delete the claim's Node and release its finalizer; ``NodeClaimNotFoundError`` once it is gone."""
        name = claim.status.node_name or _node_name(claim.status.provider_id) or claim.name
        try:
            self._core.delete_node(name)
            node = self._core.read_node(name).json()
        except client.ApiException as err:
            if err.status != 404:
                raise
            raise NodeClaimNotFoundError(f"node {name} does not exist") from None
        finalizers = list((node.get("metadata") or {}).get("finalizers") or [])
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

    def get(self, provider_id: str) -> NodeClaim:
        name = _node_name(provider_id)
        if not name:
            raise NodeClaimNotFoundError(f"not a KWOK providerID: {provider_id!r}")
        try:
            node = self._core.read_node(name).json()
        except client.ApiException as err:
            if err.status != 404:
                raise
            raise NodeClaimNotFoundError(f"node {name} does not exist") from None
        return _claim_of_node(cast(dict[str, Any], node))

    def list(self) -> list[NodeClaim]:
        """Every KWOK Node a NodePool launched (labelled ``karpenter.sh/nodepool``, ``kwok://`` providerID)."""
        # read as JSON, not into the client's models and back (the garbage collector lists every pass)
        raw = self._core.list_node(label_selector=wk.NODEPOOL).json()
        return [_claim_of_node(node) for node in cast(dict[str, Any], raw).get("items") or []
                if str((node.get("spec") or {}).get("providerID") or "").startswith(PROVIDER_ID_PREFIX)]

    def is_drifted(self, claim: NodeClaim) -> str:
        return ""  # a KWOK node has no settings that could drift from its node class

    def repair_policies(self) -> Sequence[RepairPolicy]:
        return REPAIR_POLICIES


def _node_name(provider_id: str) -> str:
    return provider_id[len(PROVIDER_ID_PREFIX):] if provider_id.startswith(PROVIDER_ID_PREFIX) else ""


def _claim_of_node(node: dict[str, Any], claim: NodeClaim | None = None) -> NodeClaim:
    """A Node as the NodeClaim the lifecycle records (``claim`` given: that claim, launched as this Node)."""
    meta = node.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    status = NodeClaimStatus.model_validate({
        "nodeName": meta.get("name", ""), "providerID": (node.get("spec") or {}).get("providerID", ""),
        "capacity": (node.get("status") or {}).get("capacity") or {},
        "allocatable": (node.get("status") or {}).get("allocatable") or {}})
    if claim is None:
        claim = NodeClaim.model_validate({"metadata": {
            "name": labels.get("karpenter.sh/nodeclaim", meta.get("name", "")),
            "creationTimestamp": meta.get("creationTimestamp")}})
    launched = {k: labels[k] for k in (wk.INSTANCE_TYPE, wk.ZONE, wk.CAPACITY_TYPE, wk.NODEPOOL) if k in labels}
    metadata = claim.metadata.model_copy(update={"labels": {**claim.metadata.labels, **launched}})
    return claim.model_copy(update={"metadata": metadata, "status": status})
