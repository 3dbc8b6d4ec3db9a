"""The DynamicResources filter during a bind-order replay (``solver.verify.replay``).

As the kube-scheduler binds a pod it allocates the pod's unallocated claims on the chosen node
(``model.allocator``: first fit in the scheduler's device order) and keeps the result (Reserve); a claim shared by
several pods is allocated with whichever of them binds first, and the others may then only bind where its
devices are reachable; an allocated claim admits only the nodes its ``nodeSelector`` reaches. A pod whose claims
cannot be allocated on a node is refused there. Replaying many orders shows whether a plan's device packing
holds whatever order pods bind in — what the solver's order-proof dimensions promise.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from model import labels as wk
from model.allocator import AllocationError, DeviceResult, NodeDevices, allocate, one_state
from model.dra import ClaimSpec, allocated_state
from model.dracel import SelectorEvalError
from model.inflight import node_views
from model.instancetype import InstanceType
from model.pod import Pod
from model.requirements import Requirements
from model.snapshot import Snapshot
from solver.verify.dra import Placed, node_devices

#: the filter's name in replay reports
DEVICES = "DynamicResources"


@dataclass
class _PodClaims:
    """One pod's claims, resolved once: what to allocate, shared claims it follows, allocations it is pinned by."""

    wanted: list[tuple[str, ClaimSpec]] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)
    #: allocated claims: the node name they are local to ("" = label terms, checked per node)
    pinned: list[tuple[str, tuple[Requirements, ...]]] = field(default_factory=list)
    problem: str = ""


@dataclass
class DeviceState:
    """Devices left per node and where each shared claim was allocated, in one order's replay."""

    nodes: list[NodeDevices]
    placed: dict[str, Placed] = field(default_factory=dict)

    def copy(self) -> DeviceState:
        return DeviceState(copy.deepcopy(self.nodes), dict(self.placed))


class DeviceFilter:
    """Claims of the replayed pods and the devices of every node after the plan."""

    def __init__(self, snapshot: Snapshot, names: Sequence[str], labels: Sequence[Mapping[str, str]],
                 claim_types: Mapping[str, InstanceType | None], pods: Sequence[Pod]) -> None:
        index = snapshot.claim_index()
        self.classes = index.classes
        held = allocated_state(snapshot.resource_claims)
        views = {v.node.name: v for v in node_views(snapshot)}
        catalog = {it.name: it for it in snapshot.instance_types}
        nodes = []
        for name, node_labels in zip(names, labels, strict=True):
            view = views.get(name)
            published = name not in claim_types and view is not None and view.initialized and not view.inflight
            it = claim_types[name] if name in claim_types else catalog.get(node_labels.get(wk.INSTANCE_TYPE, ""))
            nodes.append(node_devices(snapshot, name, node_labels, it, published, held))
        one_state(nodes)
        self.initial = DeviceState(nodes)
        self.names = list(names)
        self.labels = list(labels)
        self.claims: list[_PodClaims | None] = []
        for pod in pods:
            if not pod.resource_claims:
                self.claims.append(None)
                continue
            entry = _PodClaims()
            for claim in index.resolve(pod):
                if claim.problem or claim.spec is None:
                    entry.problem = claim.problem or "nothing to allocate"
                elif claim.claim is not None and claim.claim.allocation is not None:
                    allocation = claim.claim.allocation
                    entry.pinned.append((allocation.node_name, allocation.node_terms()))
                elif claim.shared:
                    entry.shared.append(claim.claim_key)
                    entry.wanted.append((claim.claim_key, claim.spec))
                else:
                    entry.wanted.append((claim.claim_key or f"{pod.key}/{claim.ref.name}", claim.spec))
            self.claims.append(entry)

    def allocate(self, state: DeviceState, pod: int, node: int) -> list[DeviceResult] | None:
        """The devices ``pod`` gets on ``node`` now ([] when it needs none), or None when it is refused."""
        entry = self.claims[pod]
        if entry is None:
            return []
        if entry.problem:
            return None
        for node_name, terms in entry.pinned:
            if node_name and node_name != self.names[node]:
                return None
            if not node_name and terms and not any(t.matches(self.labels[node]) for t in terms):
                return None
        wanted = []
        for key, spec in entry.wanted:
            if key in state.placed:
                if not state.placed[key].reaches(self.names[node], state.nodes[node]):
                    return None
                continue
            wanted.append((key, spec))
        try:
            return allocate(wanted, state.nodes[node], self.classes)
        except (AllocationError, SelectorEvalError):
            return None

    def take(self, state: DeviceState, pod: int, node: int, results: list[DeviceResult]) -> None:
        entry = self.claims[pod]
        if entry is None:
            return
        state.nodes[node].take(results)
        for key in entry.shared:
            if key not in state.placed:
                state.placed[key] = Placed.of(self.names[node], state.nodes[node],
                                              [r.device for r in results if r.claim == key])

    def involved(self, pod: int) -> bool:
        return self.claims[pod] is not None
