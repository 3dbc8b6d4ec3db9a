"""A pod's device claims allocated on one node, as the kube-scheduler's structured allocator does it.

The allocator (``k8s.io/dynamic-resource-allocation/structured``, the incubating one 1.36 runs) searches
depth first: the pod's unallocated claims in ``spec.resourceClaims`` order, each claim's requests in order,
one device slot at a time, devices tried in pool / slice / device order (``model.devices``), skipping devices
in use, devices that are not candidates (``model.devices.candidate``), capacity a multi-allocatable device no
longer has, counters a partition's counter set no longer has, and devices breaking a ``matchAttribute`` /
``distinctAttribute`` constraint. ``firstAvailable`` sub-requests are tried in order. Within a request the
slots take devices in increasing position (the allocator's ``startLocation``: no permutations). The first
complete solution is the allocation; nothing is optimised. Across pods it is first fit: each pod's result
is frozen before the next pod is tried, which ``NodeDevices`` records.

Semantics followed where the allocator has them:
- ``All``: every candidate device of the node, at least one, none in use;
- ``adminAccess``: any candidate, in use or not, and it takes nothing;
- a multi-allocatable device (``allowMultipleAllocations``) is shared: each allocation consumes, per
  capacity, the request's ``capacity.requests`` rounded up by the device's ``requestPolicy`` (the smallest
  valid value at least as large, or min plus whole steps within max), else the policy's default, else the
  whole capacity; a request over what a policy allows cannot use the device. On a device that is not
  multi-allocatable a capacity request is a filter (the device must have that much). Within one request a
  device is taken once (a stricter reading, where the allocator could reuse a shared device);
- ``consumesCounters``: the counters a partition takes from its pool's counter sets must be left.
The search is bounded (``budget`` device attempts, the analogue of the scheduler's 10 s filter timeout).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from model.devices import NodeDevice, candidate, device_type
from model.dra import ClaimSpec, Device, DeviceClass, DeviceConstraint, DeviceID, DeviceRequest, ExactRequest, Pool
from model.quantity import parse_quantity

#: device attempts per pod before the search gives up (the scheduler's filter stops at 10 s)
BUDGET = 100_000


@dataclass(frozen=True)
class DeviceResult:
    """One allocated device: for which claim and request (``req`` or ``req/sub``)."""

    claim: str
    request: str
    device: DeviceID
    admin_access: bool = False
    #: capacity a shared device gives this allocation
    consumed: tuple[tuple[str, Fraction], ...] = ()


class AllocationError(Exception):
    """The claims cannot be allocated on the node; ``reason`` says which request failed and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class NodeDevices:
    """What a node offers and what is taken, as allocations accumulate in binding order."""

    devices: Sequence[NodeDevice]
    #: counter sets of the node's pools: (driver, pool, counter set) → counter → amount
    counter_sets: dict[tuple[str, str, str], dict[str, Fraction]] = field(default_factory=dict)
    in_use: set[DeviceID] = field(default_factory=set)
    consumed: dict[DeviceID, dict[str, Fraction]] = field(default_factory=dict)
    counters_used: dict[tuple[str, str, str], dict[str, Fraction]] = field(default_factory=dict)
    #: (driver, pool) of the network-attached pools among ``devices``
    network: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of(cls, devices: Sequence[NodeDevice], pools: Iterable[Pool], in_use: Iterable[DeviceID] = (),
           consumed: Mapping[DeviceID, Mapping[str, Fraction]] | None = None) -> NodeDevices:
        """A node's devices with what allocated claims already hold (dedicated devices, shared capacity,
        and the counters devices in use draw)."""
        node = cls(devices=devices)
        for pool in pools:
            for name, counter_set in pool.counter_sets().items():
                node.counter_sets[(pool.driver, pool.name, name)] = counter_set.amounts()
        node.in_use = set(in_use)
        for device_id, amounts in (consumed or {}).items():
            node.consumed[device_id] = dict(amounts)
        for item in devices:
            if item.id in node.in_use or item.id in node.consumed:
                node._draw_counters(item, +1)
        return node

    def _draw_counters(self, item: NodeDevice, sign: int) -> None:
        for use in item.device.consumes_counters:
            used = self.counters_used.setdefault((item.id.driver, item.id.pool, use.counter_set), {})
            for name, amount in use.amounts().items():
                used[name] = used.get(name, Fraction(0)) + sign * amount

    def take(self, results: Sequence[DeviceResult]) -> None:
        """Record an allocation (the allocator's Reserve)."""
        by_id = {d.id: d for d in self.devices}
        for result in results:
            if result.admin_access:
                continue
            item = by_id.get(result.device)
            if item is not None and item.device.allow_multiple_allocations:
                consumed = self.consumed.setdefault(result.device, {})
                first = not consumed
                for name, amount in result.consumed:
                    consumed[name] = consumed.get(name, Fraction(0)) + amount
                if first:
                    self._draw_counters(item, +1)
            else:
                self.in_use.add(result.device)
                if item is not None:
                    self._draw_counters(item, +1)


def one_state(nodes: Sequence[NodeDevices]) -> None:
    """Make the nodes' taken devices, shares and counters one state: a network-attached device is reachable
    from several nodes, so taking it on one takes it on all (device ids and counter sets are keyed by pool,
    and a node-local pool belongs to one node, so nothing else is merged). What allocated claims held was
    recorded by each node that sees the device: it is counted once."""
    in_use: set[DeviceID] = set()
    consumed: dict[DeviceID, dict[str, Fraction]] = {}
    counter_sets: dict[tuple[str, str, str], dict[str, Fraction]] = {}
    counters_used: dict[tuple[str, str, str], dict[str, Fraction]] = {}
    for node in nodes:
        in_use |= node.in_use
        for key, value in node.consumed.items():
            consumed.setdefault(key, value)
        for ckey, values in node.counter_sets.items():
            counter_sets.setdefault(ckey, values)
        for ckey, used in node.counters_used.items():
            counters_used.setdefault(ckey, used)
    for node in nodes:
        node.in_use, node.consumed, node.counter_sets, node.counters_used = in_use, consumed, counter_sets, \
            counters_used


def share(request: ExactRequest, device: Device, already: Mapping[str, Fraction]
          ) -> tuple[tuple[str, Fraction], ...] | None:
    """Capacity one allocation of ``request`` takes on a multi-allocatable device, or None when it does not
    fit (over a policy's bounds, or more than is left)."""
    out = []
    for name, capacity in device.capacity.items():
        total = capacity.amount
        asked = request.capacity_request(name) if request.capacity_request(name) is not None else \
            request.capacity_request(f"{device.driver}/{name}")
        policy = capacity.request_policy
        if asked is None:
            amount = parse_quantity(policy.default) if policy is not None and policy.default is not None else total
        elif policy is None:
            amount = asked
        elif policy.valid_values:
            fitting = [v for v in (parse_quantity(v) for v in policy.valid_values) if v >= asked]
            if not fitting:
                return None
            amount = min(fitting)
        elif policy.valid_range is not None:
            low, high, step = policy.valid_range
            amount = max(asked, parse_quantity(low))
            if step is not None:
                st, lo = parse_quantity(step), parse_quantity(low)
                steps = -((lo - amount) // st)  # ceil((amount - lo) / st)
                amount = lo + steps * st
            if high is not None and amount > parse_quantity(high):
                return None
        else:
            amount = asked
        if already.get(name, Fraction(0)) + amount > total:
            return None
        out.append((name, amount))
    return tuple(out)


class _Search:
    """One pod's depth-first search over its claims' device slots."""

    def __init__(self, claims: Sequence[tuple[str, ClaimSpec]], node: NodeDevices,
                 classes: Mapping[str, DeviceClass], budget: int) -> None:
        self.claims = claims
        self.node = node
        self.classes = classes
        self.budget = budget
        self.keys = [device_type(d.device) for d in node.devices]
        self._candidates: dict[tuple[int, ExactRequest], bool] = {}
        self.chosen: list[DeviceResult] = []
        self.taken: set[DeviceID] = set()
        self.shared: dict[DeviceID, dict[str, Fraction]] = {}
        self.counters: dict[tuple[str, str, str], dict[str, Fraction]] = {}

    def is_candidate(self, i: int, request: ExactRequest) -> bool:
        key = (i, request)
        if key not in self._candidates:
            device_class = self.classes.get(request.device_class_name)
            if device_class is None:
                raise AllocationError(f"device class {request.device_class_name} not found")
            self._candidates[key] = candidate(request, device_class, self.node.devices[i].device, self.keys[i])
        return self._candidates[key]

    # --- per request ---------------------------------------------------------------------------------------

    def run(self) -> list[DeviceResult]:
        if self._claim(0):
            return list(self.chosen)
        raise AllocationError(self.failure or "no allocation found")

    failure = ""

    def _claim(self, c: int) -> bool:
        if c == len(self.claims):
            return True
        return self._request(c, 0)

    def _request(self, c: int, r: int) -> bool:
        key, spec = self.claims[c]
        if r == len(spec.requests):
            return self._claim(c + 1)
        request = spec.requests[r]
        for ref, exact in request.alternatives():
            mark = len(self.chosen)
            if exact.allocation_mode == "All":
                ok = self._all(key, spec, ref, exact) and self._request(c, r + 1)
            else:
                ok = self._slots(c, r, key, spec, ref, exact, exact.count, 0)
            if ok:
                return True
            self._undo(mark)
        if not self.failure:
            self.failure = f"claim {key} request {request.name}: no {self._wanted(request)} on the node"
        return False

    def _wanted(self, request: DeviceRequest) -> str:
        _, exact = request.alternatives()[0]
        what = "every" if exact.allocation_mode == "All" else str(exact.count)
        return f"{what} device(s) of class {exact.device_class_name} that match and are free"

    def _slots(self, c: int, r: int, key: str, spec: ClaimSpec, ref: str, exact: ExactRequest, left: int,
               start: int) -> bool:
        if left == 0:
            return self._request(c, r + 1)
        for i in range(start, len(self.node.devices)):
            self.budget -= 1
            if self.budget < 0:
                self.failure = "allocation search budget exceeded"
                return False
            result = self._fits(i, key, spec, ref, exact)
            if result is None:
                continue
            self._push(i, result)
            if self._slots(c, r, key, spec, ref, exact, left - 1, i + 1):
                return True
            self._undo(len(self.chosen) - 1)
            if self.failure == "allocation search budget exceeded":
                return False
        return False

    def _all(self, key: str, spec: ClaimSpec, ref: str, exact: ExactRequest) -> bool:
        wanted = [i for i in range(len(self.node.devices)) if self.is_candidate(i, exact)]
        if not wanted:
            return False
        for i in wanted:
            result = self._fits(i, key, spec, ref, exact)
            if result is None:
                return False
            self._push(i, result)
        return True

    # --- one device ----------------------------------------------------------------------------------------

    def _fits(self, i: int, key: str, spec: ClaimSpec, ref: str, exact: ExactRequest) -> DeviceResult | None:
        item = self.node.devices[i]
        device = item.device
        if any(r.device == item.id and r.claim == key and r.request == ref for r in self.chosen):
            return None
        if not self.is_candidate(i, exact):
            return None
        if exact.admin_access:
            return DeviceResult(key, ref, item.id, admin_access=True) if self._constraints(spec, key, ref, device) \
                else None
        consumed: tuple[tuple[str, Fraction], ...] = ()
        if device.allow_multiple_allocations:
            already = dict(self.node.consumed.get(item.id, {}))
            for name, amount in self.shared.get(item.id, {}).items():
                already[name] = already.get(name, Fraction(0)) + amount
            got = share(exact, device, already)
            if got is None:
                return None
            consumed = got
            fresh = item.id not in self.node.consumed and item.id not in self.shared
        else:
            if item.id in self.node.in_use or item.id in self.taken or item.id in self.node.consumed \
                    or item.id in self.shared:
                return None
            fresh = True
        if fresh and not self._counters_left(item):
            return None
        if not self._constraints(spec, key, ref, device):
            return None
        return DeviceResult(key, ref, item.id, consumed=consumed)

    def _counters_left(self, item: NodeDevice) -> bool:
        for use in item.device.consumes_counters:
            ckey = (item.id.driver, item.id.pool, use.counter_set)
            have = self.node.counter_sets.get(ckey, {})
            used, mine = self.node.counters_used.get(ckey, {}), self.counters.get(ckey, {})
            for name, amount in use.amounts().items():
                if name not in have or have[name] - used.get(name, Fraction(0)) - mine.get(name, Fraction(0)) < amount:
                    return False
        return True

    def _constraints(self, spec: ClaimSpec, key: str, ref: str, device: Device) -> bool:
        base = ref.split("/")[0]
        by_id = {d.id: d.device for d in self.node.devices}
        for constraint in spec.constraints:
            if not _covers(constraint, ref, base):
                continue
            name = constraint.match_attribute or constraint.distinct_attribute
            value = device.attribute(name)
            if value is None:
                return False
            others = [by_id[r.device].attribute(name) for r in self.chosen
                      if r.claim == key and _covers(constraint, r.request, r.request.split("/")[0])]
            if constraint.match_attribute and any(v != value for v in others):
                return False
            if constraint.distinct_attribute and value in others:
                return False
        return True

    def _push(self, i: int, result: DeviceResult) -> None:
        item = self.node.devices[i]
        fresh = not result.admin_access and (
            not item.device.allow_multiple_allocations
            or (item.id not in self.node.consumed and item.id not in self.shared))
        self.chosen.append(result)
        if result.admin_access:
            return
        if item.device.allow_multiple_allocations:
            totals = self.shared.setdefault(item.id, {})
            for name, amount in result.consumed:
                totals[name] = totals.get(name, Fraction(0)) + amount
        else:
            self.taken.add(item.id)
        if fresh:
            for use in item.device.consumes_counters:
                mine = self.counters.setdefault((item.id.driver, item.id.pool, use.counter_set), {})
                for name, amount in use.amounts().items():
                    mine[name] = mine.get(name, Fraction(0)) + amount

    def _undo(self, mark: int) -> None:
        while len(self.chosen) > mark:
            result = self.chosen.pop()
            if result.admin_access:
                continue
            item = next(d for d in self.node.devices if d.id == result.device)
            if item.device.allow_multiple_allocations:
                totals = self.shared[item.id]
                for name, amount in result.consumed:
                    totals[name] -= amount
                release = False
                if not any(r.device == item.id and not r.admin_access for r in self.chosen):
                    del self.shared[item.id]
                    release = item.id not in self.node.consumed
            else:
                self.taken.discard(item.id)
                release = True
            if release:
                for use in item.device.consumes_counters:
                    mine = self.counters[(item.id.driver, item.id.pool, use.counter_set)]
                    for name, amount in use.amounts().items():
                        mine[name] -= amount


def _covers(constraint: DeviceConstraint, ref: str, base: str) -> bool:
    return not constraint.requests or ref in constraint.requests or base in constraint.requests


def allocate(claims: Sequence[tuple[str, ClaimSpec]], node: NodeDevices, classes: Mapping[str, DeviceClass],
             budget: int = BUDGET) -> list[DeviceResult]:
    """Allocate a pod's unallocated claims (``(claim key, spec)`` in the pod's order) on the node, or raise
    ``AllocationError``; a CEL runtime error surfaces as ``SelectorEvalError`` (the scheduler aborts then).
    The node is not changed: ``node.take(results)`` records the allocation."""
    return _Search(claims, node, classes, budget).run()
