"""The provider-neutral cloud interface the controller talks to, modelled on Karpenter's ``CloudProvider``
(``sigs.k8s.io/karpenter/pkg/cloudprovider/types.go``).

The controller launches, finds, deletes and checks instances only through this interface: the NodeClaim
lifecycle calls ``create``, termination ``delete``, garbage collection ``list`` / ``delete``, the provisioner
``instance_types`` (after the controller's offering back-off is applied), drift ``is_drifted``, node repair
``repair_policies``. Errors are typed so each caller knows what to do: ``InsufficientCapacityError`` names the
offerings the cloud refused (the controller marks them unavailable and re-plans), ``NodeClaimNotFoundError``
means the instance is gone (deletion is then done), ``NodeClassNotReadyError`` that the claim's node class has
not resolved (the pool is skipped until it does).

Where nodeplan differs from Karpenter, on purpose: ``create`` returns the refused offerings alongside the
launched claim (``Launched.refused``), because the unavailable-offerings cache belongs to the controller here,
not to the provider; and the plan's offering (the claim's labels) is tried first, the claim's other allowed
offerings after it in price order, where Karpenter lets the cloud pick the cheapest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from model.instancetype import InstanceType
from model.nodepool import NodeClaim, NodePool

#: (instance type, zone, capacity type)
OfferingKey = tuple[str, str, str]


class CloudProviderError(Exception):
    """Any failure of a provider call that is not a bug: the caller logs it, counts it and retries later."""


class InsufficientCapacityError(CloudProviderError):
    """No offering the claim allows could be launched; ``offerings`` are those the cloud refused."""

    def __init__(self, message: str, offerings: Sequence[OfferingKey] = ()) -> None:
        super().__init__(message)
        self.offerings: tuple[OfferingKey, ...] = tuple(offerings)


class NodeClaimNotFoundError(CloudProviderError):
    """The claim's instance does not exist (never launched, or already terminated)."""


class NodeClassNotReadyError(CloudProviderError):
    """The claim's node class is missing or has not resolved (its ``Ready`` condition is not True)."""


@dataclass(frozen=True)
class RepairPolicy:
    """A Node condition that, held for ``toleration_seconds``, makes the node unhealthy (Karpenter's node repair)."""

    condition_type: str
    condition_status: str
    toleration_seconds: float


@dataclass(frozen=True)
class NodeClassKind:
    """A node class kind a provider supports (``spec.template.spec.nodeClassRef`` group and kind)."""

    group: str
    kind: str
    version: str
    plural: str


@dataclass(frozen=True)
class Launched:
    """What ``create`` returns: the claim with its status (providerID, capacity, allocatable, imageID and, when
    the provider knows it, nodeName) and labels set to the offering launched, plus the offerings the cloud
    refused on the way (insufficient capacity), for the controller's back-off."""

    claim: NodeClaim
    refused: tuple[OfferingKey, ...] = ()


class CloudProvider(Protocol):
    @property
    def name(self) -> str:
        """The provider's name (``kwok``, ``aws``): the ``provider`` label of its metrics."""
        ...

    def supported_node_classes(self) -> Sequence[NodeClassKind]:
        """The node class kinds NodePools of this provider refer to; the first is the default."""
        ...

    def instance_types(self, nodepool: NodePool | None = None) -> list[InstanceType]:
        """Every instance type the pool may launch, with offerings and current prices (all of them, even those
        with no available offering: availability is in each offering)."""
        ...

    def create(self, claim: NodeClaim) -> Launched:
        """Launch one instance for ``claim``: the offering its labels name first, then its other allowed
        offerings. Raises ``InsufficientCapacityError`` when none could be launched."""
        ...

    def delete(self, claim: NodeClaim) -> None:
        """Terminate the claim's instance; raises ``NodeClaimNotFoundError`` once it is gone."""
        ...

    def get(self, provider_id: str) -> NodeClaim:
        """The instance as a NodeClaim; raises ``NodeClaimNotFoundError`` when there is none."""
        ...

    def list(self) -> list[NodeClaim]:
        """Every instance this provider launched for this cluster (for garbage collection)."""
        ...

    def is_drifted(self, claim: NodeClaim) -> str:
        """The reason the claim's instance no longer matches its node class (``AMIDrift``, ...), '' when it does."""
        ...

    def repair_policies(self) -> Sequence[RepairPolicy]:
        """Node conditions that mark a node unhealthy, and for how long they are tolerated."""
        ...
