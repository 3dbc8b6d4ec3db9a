"""The provider-neutral cloud interface the controller and solver talk to (Karpenter's CloudProvider)."""

from __future__ import annotations

from typing import Protocol

from model.instancetype import InstanceType
from model.nodepool import NodeClaim, NodePool


class InsufficientCapacityError(Exception):
    """The chosen offering could not be launched; the controller marks it unavailable and re-plans."""


class CloudProvider(Protocol):
    def instance_types(self, nodepool: NodePool | None = None) -> list[InstanceType]:
        """Every instance type the pool may launch, with offerings and current prices."""
        ...

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Launch an instance for ``nodeclaim``; returns it with status (providerID, capacity) filled."""
        ...

    def delete(self, nodeclaim: NodeClaim) -> None: ...

    def get(self, provider_id: str) -> NodeClaim | None: ...

    def list(self) -> list[NodeClaim]: ...
