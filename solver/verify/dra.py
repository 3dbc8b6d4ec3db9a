"""DRA resource claims: every placed pod's claims can be allocated on its node, pod after pod, as the
kube-scheduler's allocator would (``model.allocator``), from the devices the node offers (``model.devices``:
published slices of an initialized node, the instance type's inventory for a planned or in-flight one) minus
what allocated claims already hold.

Per node, pods are allocated in plan order and each allocation is kept before the next pod is tried (the
scheduler freezes each pod's allocation in Reserve). A claim several pods share is allocated once, with its
first consumer; every later consumer must land on a node the allocation reaches. A claim already allocated
must reach the pod's node (``status.allocation.nodeSelector``). ``allocations`` gives the concrete devices,
which the plan reports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from model import labels as wk
from model.allocator import AllocationError, DeviceResult, NodeDevices, allocate, one_state
from model.devices import network_devices, network_pools, offered_slices
from model.dra import (
    MAX_RESERVED_FOR,
    AllocatedState,
    ClaimIndex,
    ClaimSpec,
    DeviceID,
    allocated_state,
    gather_pools,
)
from model.dracel import SelectorEvalError
from model.inflight import node_views
from model.instancetype import InstanceType
from model.plan import DeviceAllocation, ProvisioningPlan
from model.pod import Pod
from model.snapshot import Snapshot
from solver.verify.context import Context, NodeState
from solver.verify.violation import Violation

RULE = "DRA resource claims"


@dataclass
class Allocations:
    """The devices the plan's pods get, node by node, and what could not be allocated."""

    by_node: dict[str, list[tuple[str, DeviceResult]]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)


@dataclass(frozen=True)
class Placed:
    """Where a shared claim was allocated: on ``node`` when one of its devices is node-local there (the
    allocator's nodeSelector names the node), else wherever its network-attached devices all are reachable."""

    node: str
    local: bool
    devices: frozenset[DeviceID]

    @classmethod
    def of(cls, node: str, devices: NodeDevices, taken: Sequence[DeviceID]) -> Placed:
        local = {d.id for d in devices.devices if (d.id.driver, d.id.pool) not in devices.network}
        return cls(node, any(t in local for t in taken) or not taken, frozenset(taken))

    def reaches(self, node: str, devices: NodeDevices) -> bool:
        """May a pod on ``node`` (offering ``devices``) use the claim?"""
        if self.local:
            return node == self.node
        return self.devices <= {d.id for d in devices.devices}


def check(ctx: Context) -> Iterator[Violation]:
    yield from allocations(ctx).violations


def allocations(ctx: Context) -> Allocations:
    """Allocate every placed pod's claims node by node (claims first, then existing nodes, each in plan order)."""
    out = Allocations()
    nodes = [s for s in (*ctx.claims, *ctx.existing.values()) if s.usable
             and any(p.resource_claims for p in s.placed)]
    if not nodes:
        return out
    snapshot = ctx.snapshot
    index = snapshot.claim_index()
    held = allocated_state(snapshot.resource_claims)
    views = {v.node.name: v for v in node_views(snapshot)}
    catalog = {it.name: it for it in snapshot.instance_types}
    allocated_here: dict[str, Placed] = {}  # shared claim → where the plan allocates it
    consumers: dict[str, int] = {}
    devices = []
    for state in nodes:
        published = state.claim is None and (view := views.get(state.name)) is not None and view.initialized \
            and not view.inflight
        it = state.instance_type if state.claim is not None else catalog.get(state.labels.get(wk.INSTANCE_TYPE, ""))
        devices.append(node_devices(snapshot, state.name, state.labels, it, published, held))
    one_state(devices)
    for state, node in zip(nodes, devices, strict=True):
        for pod in state.placed:
            if pod.resource_claims:
                _pod(ctx, state, pod, index, node, allocated_here, consumers, out)
    return out


def node_devices(snapshot: Snapshot, name: str, labels: Mapping[str, str], instance_type: InstanceType | None,
                 published: bool, held: AllocatedState) -> NodeDevices:
    """A node's devices as the allocator finds them, less what allocated claims hold: the slices an
    initialized node published, else what its instance type's inventory publishes (a planned or in-flight
    node; its own early slices are not counted twice)."""
    slices, devices = offered_slices(snapshot.resource_slices, name, labels, instance_type, published)
    network = network_devices(snapshot.resource_slices, name, labels)
    if network:  # one device order: pools by (driver, pool), node-local and network-attached alike
        devices = tuple(sorted((*devices, *network), key=lambda d: (d.id.driver, d.id.pool)))
    shared = network_pools(snapshot.resource_slices)
    node = NodeDevices.of(devices, [*(p for p in gather_pools(slices) if p.usable), *shared], held.devices,
                          held.consumed)
    node.network = frozenset((p.driver, p.name) for p in shared)
    return node


def _pod(ctx: Context, state: NodeState, pod: Pod, index: ClaimIndex, node: NodeDevices,
         allocated_here: dict[str, Placed], consumers: dict[str, int], out: Allocations) -> None:
    def refuse(message: str) -> None:
        out.violations.append(Violation(RULE, f"{state.where}: pod {pod.key}: {message}", pods=ctx.pending_keys([pod])))

    wanted: list[tuple[str, ClaimSpec]] = []
    for claim in index.resolve(pod):
        if claim.problem:
            return refuse(claim.problem)
        if claim.claim is not None and claim.claim.allocation is not None:
            allocation = claim.claim.allocation
            terms = allocation.node_terms()
            reaches = (allocation.node_name == state.name if allocation.node_name
                       else not terms or any(t.matches(state.labels) for t in terms))
            if not reaches:
                return refuse(f"resourceclaim {claim.claim_key} is allocated on devices this node cannot reach")
            if len(claim.claim.reserved_for) >= MAX_RESERVED_FOR and not claim.claim.reserved_for_pod(pod):
                return refuse(f"resourceclaim {claim.claim_key} is reserved for {MAX_RESERVED_FOR} consumers already")
            continue
        if claim.spec is None:
            return refuse(f"claim {claim.ref.name} has nothing to allocate")
        missing = index.missing_classes(claim.spec)
        if missing:
            return refuse(f"device class {missing[0]} not found")
        if claim.claim_key and claim.claim_key in allocated_here:
            consumers[claim.claim_key] = consumers.get(claim.claim_key, 0) + 1
            placed = allocated_here[claim.claim_key]
            if not placed.reaches(state.name, node):
                return refuse(f"resourceclaim {claim.claim_key} is allocated on node {placed.node} "
                              "by an earlier pod of the plan")
            if consumers[claim.claim_key] > MAX_RESERVED_FOR:
                return refuse(f"resourceclaim {claim.claim_key} has more than {MAX_RESERVED_FOR} consumers")
            continue
        wanted.append((claim.claim_key or f"{pod.key}/{claim.ref.name}", claim.spec))
    try:
        results = allocate(wanted, node, index.classes)
    except AllocationError as err:
        return refuse(err.reason)
    except SelectorEvalError as err:
        return refuse(f"CEL selector {err.expression!r} fails on a device of driver {err.driver}: {err.cel_message} "
                      "(the kube-scheduler aborts this pod's scheduling)")
    node.take(results)
    for key, _ in wanted:
        if key in index.claims:
            allocated_here[key] = Placed.of(state.name, node, [r.device for r in results if r.claim == key])
            consumers[key] = 1
    out.by_node.setdefault(state.name, []).extend((pod.key, r) for r in results)


def with_devices(snapshot: Snapshot, plan: ProvisioningPlan) -> ProvisioningPlan:
    """The plan with the devices each placed pod's claims get (``devices`` per NodeClaim and existing node)."""
    if not any(p.resource_claims for p in snapshot.pods):
        return plan
    found = allocations(Context.build(snapshot, plan)).by_node

    def listed(node: str) -> list[DeviceAllocation]:
        return [DeviceAllocation(pod=pod, claim=r.claim, request=r.request, driver=r.device.driver,
                                 pool=r.device.pool, device=r.device.device) for pod, r in found.get(node, [])]

    return plan.model_copy(update={
        "node_claims": [c.model_copy(update={"devices": listed(c.name)}) for c in plan.node_claims],
        "existing_nodes": [e.model_copy(update={"devices": listed(e.name)}) for e in plan.existing_nodes]})
