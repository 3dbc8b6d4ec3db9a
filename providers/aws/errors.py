"""EC2 API errors in the provider's terms: the error codes that mean "no capacity for this offering", and one
line naming the missing IAM action for an authorization failure (never a traceback)."""

from __future__ import annotations

from botocore.exceptions import ClientError

from providers.protocol import CloudProviderError, NodeClassNotReadyError

#: CreateFleet error codes that mean the offering cannot be had now (Karpenter's unfulfillable-capacity set)
CAPACITY_ERRORS = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity", "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow", "UnfulfillableCapacity", "Unsupported", "VcpuLimitExceeded",
    "InsufficientFreeAddressesInSubnet", "ReservationCapacityExceeded",
})
NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
UNAUTHORIZED = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})


def code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


class MissingPermissionError(NodeClassNotReadyError):
    """The controller's AWS identity may not call ``action``. A node class is not ready for launches until it
    may: the controller waits (one line, the NodePool's ``NodeClassReady`` condition) instead of retrying hot."""

    def __init__(self, action: str) -> None:
        super().__init__(f"missing IAM permission: {action} (grant it to the controller's role)")
        self.action = action


def translated(err: ClientError, service: str) -> CloudProviderError:
    """A ClientError as the provider's error: missing permission naming ``service:Operation``, else its message."""
    operation = str(err.operation_name)
    if code(err) in UNAUTHORIZED:
        return MissingPermissionError(f"{service}:{operation}")
    return CloudProviderError(f"{service}:{operation}: {code(err)}: {err.response.get('Error', {}).get('Message', '')}")
