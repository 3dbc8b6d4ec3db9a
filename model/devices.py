"""The devices a node offers and which of them a DRA request may take: the kube-scheduler's candidate rule.

Both the solver (``solver/rules/dra.py``, which counts candidates) and the verifier (``solver/verify/dra.py``,
which allocates them) read a node's devices and test them against requests through this module, so the two
agree on what a device *is* while deciding independently what to do with it.

A node's devices, in the structured allocator's order (pools by (driver, pool), slices by name, devices as
listed):
- a node that has published its slices (an initialized Node): the usable pools — complete, valid, at their
  highest generation — of the ResourceSlices whose ``nodeName`` is the node (``model.dra.gather_pools``);
- a node not published yet (a planned NodeClaim, an in-flight one, a Node not initialized): what its instance
  type's inventory publishes (``InstanceType.node_resource_slices``). Slices such a node has already
  published are ignored, as Karpenter ignores them, so nothing is counted twice.
Network-attached slices (``allNodes`` / ``nodeSelector``) are not node-local: ``network_devices`` lists what
a node reaches of them, one pool for every node (taking a device on one node takes it everywhere).

A device is a candidate for a request when the DeviceClass's selectors and then the request's all hold
(CEL, ``model.dracel``: a runtime error is ``SelectorEvalError``, on which the scheduler aborts the pod's
cycle) and every ``NoSchedule`` / ``NoExecute`` taint on it is tolerated by the request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from model.dra import Device, DeviceClass, DeviceID, ExactRequest, Pool, ResourceSlice, gather_pools
from model.dracel import DeviceInput, compile_selector
from model.instancetype import InstanceType

#: device taint effects that keep a request off a device it does not tolerate
_BLOCKING = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class NodeDevice:
    """A device as the allocator finds it on one node."""

    id: DeviceID
    device: Device


def published_devices(slices: Iterable[ResourceSlice], node_name: str, labels: Mapping[str, str]
                      ) -> tuple[NodeDevice, ...]:
    """Devices of the node-local usable pools a node has published, in the allocator's order."""
    return tuple(NodeDevice(pool.device_id(d), d) for pool in _local_pools(slices, node_name)
                 for d in pool.devices_for(node_name, labels))


def _local_pools(slices: Iterable[ResourceSlice], node_name: str) -> list[Pool]:
    slices = list(slices)
    pools = {s.pool_id for s in slices if s.node_name == node_name}
    # a partitionable pool's counter slices name no node: they belong to the pools the node's slices are in
    local = [s for s in slices if s.pool_id in pools and (s.node_name == node_name or not s.devices)]
    return [pool for pool in gather_pools(local) if pool.usable]


def counter_sets(slices: Iterable[ResourceSlice], node_name: str) -> dict[tuple[str, str], dict[str, Fraction]]:
    """(pool, counter set) → counter → amount, for the node-local usable pools (partitionable devices draw
    on them)."""
    return {(pool.name, name): counter_set.amounts() for pool in _local_pools(slices, node_name)
            for name, counter_set in pool.counter_sets().items()}


def inventory_slices(instance_type: InstanceType | None, node_name: str) -> tuple[ResourceSlice, ...]:
    """The slices a node of ``instance_type`` will publish under ``node_name``."""
    if instance_type is None or not instance_type.resource_slices:
        return ()
    return instance_type.node_resource_slices(node_name)


def inventory_devices(instance_type: InstanceType | None, node_name: str) -> tuple[NodeDevice, ...]:
    """Devices a node of ``instance_type`` will publish under ``node_name`` (none for an unknown type)."""
    return published_devices(inventory_slices(instance_type, node_name), node_name, {})


def offered_slices(published: Iterable[ResourceSlice], node_name: str, labels: Mapping[str, str],
                   instance_type: InstanceType | None, initialized: bool
                   ) -> tuple[tuple[ResourceSlice, ...], tuple[NodeDevice, ...]]:
    """The slices a node's devices come from and those devices: what it published once initialized, else what
    its instance type's inventory publishes (a planned, in-flight or uninitialized node's early slices are not
    counted twice, as Karpenter ignores them)."""
    if initialized:
        slices = tuple(published)
        return slices, published_devices(slices, node_name, labels)
    slices = inventory_slices(instance_type, node_name)
    return slices, published_devices(slices, node_name, {})


def network_attached(slices: Iterable[ResourceSlice]) -> tuple[ResourceSlice, ...]:
    """Slices not bound to one node (``allNodes``, ``nodeSelector``, per-device node selection), with the
    counter slices of their pools."""
    slices = list(slices)
    pools = {s.pool_id for s in slices if not s.node_name and (s.all_nodes or s.node_selector is not None
                                                                 or s.per_device_node_selection)}
    return tuple(s for s in slices if s.pool_id in pools and not s.node_name)


def network_pools(slices: Iterable[ResourceSlice]) -> tuple[Pool, ...]:
    """The usable pools of the network-attached slices: one pool for every node that reaches it."""
    return tuple(pool for pool in gather_pools(network_attached(slices)) if pool.usable)


def network_devices(slices: Iterable[ResourceSlice], node_name: str, labels: Mapping[str, str]
                    ) -> tuple[NodeDevice, ...]:
    """The network-attached devices a node reaches, in the allocator's order."""
    return tuple(NodeDevice(pool.device_id(d), d) for pool in network_pools(slices)
                 for d in pool.devices_for(node_name, labels))


def device_type(device: Device) -> str:
    """What CEL and taints can see of a device (everything but its name): devices of one type are
    interchangeable for every request."""
    api = device.api()
    api.pop("name", None)
    return json.dumps(api, sort_keys=True)


@lru_cache(maxsize=4096)
def _input(device_key: str, driver: str) -> DeviceInput:
    api = json.loads(device_key)
    return DeviceInput(driver=driver, attributes=api.get("attributes", {}), capacity=api.get("capacity", {}),
                       allow_multiple_allocations=bool(api.get("allowMultipleAllocations", False)))


def selectors_hold(expressions: Sequence[str], device: Device, key: str | None = None) -> bool:
    """Do all of these CEL selectors accept the device? Raises ``SelectorEvalError`` (and a compile error as
    ``SelectorCompileError``) as the scheduler would fail on them."""
    if not expressions:
        return True
    device_input = _input(key if key is not None else device_type(device), device.driver)
    return all(compile_selector(e).matches(device_input) for e in expressions)


def tolerated(request: ExactRequest, device: Device) -> bool:
    """Are the device's NoSchedule / NoExecute taints all tolerated by the request?"""
    return all(any(t.tolerates(taint) for t in request.tolerations)
               for taint in device.taints if taint.effect in _BLOCKING)


def has_capacity(request: ExactRequest, device: Device) -> bool:
    """``capacity.requests`` on a device that is not multi-allocatable is a filter: the device must have that
    much of each (a multi-allocatable device hands out shares instead: ``model.allocator.share``)."""
    if device.allow_multiple_allocations:
        return True
    for name, asked in request.capacity_requests:
        bare = name.rpartition("/")[2] if name.startswith(device.driver + "/") else name
        capacity = device.capacity.get(name) or device.capacity.get(bare)
        if capacity is None or capacity.amount < asked:
            return False
    return True


def candidate(request: ExactRequest, device_class: DeviceClass, device: Device, key: str | None = None) -> bool:
    """May ``request`` (of class ``device_class``) take ``device``? Taints and capacity first, then the
    class's selectors and the request's, as the allocator evaluates them; raises ``SelectorEvalError`` on a
    CEL runtime error."""
    return (tolerated(request, device) and has_capacity(request, device)
            and selectors_hold(device_class.selectors, device, key) and selectors_hold(request.selectors, device, key))
