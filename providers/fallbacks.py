"""Which offerings a NodeClaim may launch on, in the order a provider tries them.

A claim's requirements allow a set of offerings (instance type × zone × capacity type, as Karpenter's
NodeClaim requirements do); its labels name the one the plan chose. The plan's offering goes first, the other
allowed offerings follow cheapest first, so an offering the cloud refuses falls back to the next one in the same
launch call (CreateFleet overrides) instead of waiting for a re-plan. An offering is allowed when it is
available, every claim requirement on a label the offering has is met, and the instance type's allocatable
holds the claim's requests.
"""

from __future__ import annotations

from collections.abc import Iterable

from model import labels as wk
from model.instancetype import InstanceType, Offering
from model.nodepool import NodeClaim


def offering_labels(instance_type: InstanceType, offering: Offering) -> dict[str, str]:
    """The labels a node launched on this offering has (as far as the provider knows them)."""
    return {**instance_type.labels, wk.INSTANCE_TYPE: instance_type.name, wk.ZONE: offering.zone,
            wk.CAPACITY_TYPE: offering.capacity_type}


def allows(claim: NodeClaim, instance_type: InstanceType, offering: Offering) -> bool:
    """Does the claim allow this offering? Requirements on labels the offering lacks (the NodePool's own labels,
    hostname) say nothing about the offering and are skipped."""
    labels = offering_labels(instance_type, offering)
    if not offering.available:
        return False
    if not all(req.matches(labels) for req in claim.spec.requirements if req.key in labels):
        return False
    return claim.spec.resources.requests.fits_in(instance_type.allocatable)


def planned_offering(claim: NodeClaim) -> tuple[str, str, str]:
    """The offering the plan chose: the claim's instance-type, zone and capacity-type labels ('' when unset)."""
    labels = claim.metadata.labels
    return labels.get(wk.INSTANCE_TYPE, ""), labels.get(wk.ZONE, ""), labels.get(wk.CAPACITY_TYPE, "")


def ranked_offerings(claim: NodeClaim, instance_types: Iterable[InstanceType]
                     ) -> list[tuple[InstanceType, Offering]]:
    """Every offering the claim allows: the planned one first, then by price (name, zone for ties)."""
    planned = planned_offering(claim)
    allowed = [(it, o) for it in instance_types for o in it.offerings if allows(claim, it, o)]
    return sorted(allowed, key=lambda pair: ((pair[0].name, pair[1].zone, pair[1].capacity_type) != planned,
                                             pair[1].price, pair[0].name, pair[1].zone, pair[1].capacity_type))
