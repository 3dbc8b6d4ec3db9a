"""Instance types and their offerings: what a provider can launch, where, and at what price."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from model.dra import ResourceSlice, SliceTemplate, node_slices, parse_inventory
from model.errors import InputError
from model.fields import RawObject
from model.resources import Resources

MICRO = 1_000_000


def price_micros(price: float) -> int:
    """Hourly price in integer micro-units, the unit of every objective."""
    return round(price * MICRO)


class Offering(BaseModel):
    """Where and how an instance type can be bought: (zone, capacity type) at an hourly price."""

    model_config = ConfigDict(frozen=True)

    zone: str
    capacity_type: Literal["spot", "on-demand", "reserved"]
    price: float = Field(ge=0)
    available: bool = True

    @property
    def price_micros(self) -> int:
        return price_micros(self.price)


class Overhead(BaseModel):
    model_config = ConfigDict(frozen=True)

    kube_reserved: Resources = Resources()
    system_reserved: Resources = Resources()
    eviction_threshold: Resources = Resources()

    @property
    def total(self) -> Resources:
        return self.kube_reserved + self.system_reserved + self.eviction_threshold


class InstanceType(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str] = {}
    capacity: Resources
    overhead: Overhead = Overhead()
    offerings: tuple[Offering, ...] = ()
    #: the DRA devices a node of this type publishes (its ResourceSlices minus the node fields)
    resource_slices: tuple[SliceTemplate, ...] = ()

    def node_resource_slices(self, node_name: str) -> tuple[ResourceSlice, ...]:
        """The ResourceSlices a node of this type named ``node_name`` publishes (``model.dra.node_slices``)."""
        return node_slices(self.resource_slices, node_name)

    @property
    def allocatable(self) -> Resources:
        """Capacity minus kubeReserved, systemReserved and the eviction threshold (never negative)."""
        return (self.capacity - self.overhead.total).clamp_nonnegative()

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> InstanceType:
        obj = RawObject(raw)
        name = obj.str("name")
        if not name:
            raise InputError("instance type name is required", field="name")
        overhead = obj.obj("overhead")
        offerings = []
        for item in obj.items("offerings"):
            capacity_type = item.str("capacityType")
            if capacity_type not in ("spot", "on-demand", "reserved"):
                raise InputError(f"unknown capacityType {capacity_type!r}", field=f"{item.path}.capacityType")
            price = item.data.get("price")
            if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price < float("inf"):
                raise InputError(f"price must be a non-negative number, got {price!r}",
                                 field=f"{item.path}.price")
            zone = item.str("zone")
            if not zone:
                raise InputError("zone is required", field=f"{item.path}.zone")
            offerings.append(Offering(zone=zone, capacity_type=capacity_type, price=float(price),
                                      available=item.bool("available", True)))
        capacity = obj.parse("capacity", Resources.parse)
        if capacity["cpu"] <= 0 or capacity["memory"] <= 0:
            raise InputError("capacity needs positive cpu and memory", field="capacity")
        return cls(
            name=name, labels=obj.string_map("labels"), capacity=capacity,
            overhead=Overhead(kube_reserved=overhead.parse("kubeReserved", Resources.parse),
                              system_reserved=overhead.parse("systemReserved", Resources.parse),
                              eviction_threshold=overhead.parse("evictionThreshold", Resources.parse)),
            offerings=tuple(offerings),
            resource_slices=parse_inventory(obj.items("resourceSlices")),
        )
