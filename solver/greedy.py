"""Karpenter's provisioning scheduler, re-implemented faithfully as the yardstick and the warm start.

First-fit-decreasing: pods in queue order (cpu, then memory, descending); each pod goes to the first
existing node that fits (initialized first, then by name), else the in-flight new NodeClaim with the
fewest pods that can still take it, else a new NodeClaim from the first NodePool (weight descending,
name descending) with an instance type that fits. A NodeClaim keeps every offering that can still hold
all its pods and launches on the cheapest at the end (ties: instance-type name, then offering order).

Pods with DRA claims go through Karpenter's device allocator (``pkg/scheduling/dynamicresources``,
``allocator.go``) as well: for every node the pod is tried on, one depth-first search of its unallocated claims
→ requests → device slots over that node's devices (an initialized node's published slices, else the instance
type's inventory), and on a NodeClaim not launched yet one search per instance type it may still become; types
whose search fails leave the claim, and the pod's devices are committed when it is added, per type
(``DeviceTracker``). Karpenter's search is the kube-scheduler's order (claims in ``spec.resourceClaims`` order,
requests in order, ``firstAvailable`` alternatives in order, devices in pool / slice / device order, first
solution wins), so the per-node check is ``model.allocator``'s; Karpenter only lacks the scheduler's
``startLocation`` (a failing search revisits permutations, the same answer found slower) and lists in-cluster pools
in map order. Its 5 s ``allocateTimeout`` per pod and node is ``KARPENTER_BUDGET`` device attempts per search (a
count, so the yardstick stays deterministic; Karpenter's 5 s cover all the instance types of one NodeClaim): a
search cut short counts as "does not fit" there, as Karpenter's does.

Deliberate deviations, all for validity: the NodePool ``nodes`` limit is decremented by new NodeClaims
within one batch (Karpenter only checks it against existing nodes), and capacity limits are charged the
largest candidate type's capacity at creation, exactly as Karpenter does. Pods with claims must also fit the
DRA family's order-proof device dimensions (``solver/rules/dra.py``): where candidate sets overlap partially
Karpenter's search packs a node the kube-scheduler can strand in another binding order, and the yardstick does
not (there it is costlier than Karpenter would be; the plan's ``conservative`` list says when).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from model import labels as wk
from model.allocator import BUDGET, AllocationError, DeviceResult, NodeDevices, allocate
from model.devices import inventory_devices, inventory_slices, offered_slices
from model.dra import ClaimSpec, allocated_state, gather_pools
from model.dracel import SelectorEvalError
from model.inflight import node_views
from model.instancetype import InstanceType
from model.nodepool import NODES
from model.pod import Pod
from solver.classes import karpenter_sorted
from solver.placement import NewNode, Placement
from solver.problem import Problem

#: Karpenter's ``allocateTimeout`` (5 s per pod and node) as device attempts: ``model.allocator.BUDGET`` stands
#: for the kube-scheduler's 10 s filter timeout, so half of it
KARPENTER_BUDGET = BUDGET // 2
#: what ``model.allocator`` says when the budget ran out
_BUDGET_EXCEEDED = "allocation search budget exceeded"

Claims = list[tuple[str, ClaimSpec]]


@dataclass
class _Claim:
    pool_index: int
    candidates: np.ndarray
    requests: np.ndarray
    pods: list[Pod] = field(default_factory=list)
    order: int = 0
    #: instance type → its devices with what this claim's pods took, for every type it may still become
    #: (Karpenter's AllocationTracker per NodeClaim and instance type); filled when a pod with claims comes
    devices: dict[str, NodeDevices] = field(default_factory=dict)
    #: the least allocatable of its candidates, per axis: requests within it fit every candidate
    floor: np.ndarray | None = None
    #: the largest allocatable of its candidates, per axis: requests beyond it fit none
    ceiling: np.ndarray | None = None
    #: the zone every candidate is in, else -1
    zone: int = -1
    #: classes every remaining candidate admits (candidates only ever narrow, so this only grows)
    admits: set[int] = field(default_factory=set)


@dataclass
class _Opening:
    """A new NodeClaim's candidates for one (NodePool, class, attempt) before limits and devices, with their
    ceiling, floor, zone and the NodePool-limit charge (``GreedyScheduler._opening``)."""

    mask: np.ndarray
    candidates: np.ndarray
    ceiling: np.ndarray | None = None
    floor: np.ndarray | None = None
    zone: int = -1
    charged: list[int] = field(default_factory=list)


class DeviceTracker:
    """Karpenter's Allocator for one scheduling loop: which devices the pods placed so far took, on existing nodes
    and per instance type of each new NodeClaim, and the per-pod search that places a pod's claims."""

    def __init__(self, problem: Problem) -> None:
        snapshot = problem.snapshot
        self.problem = problem
        self.index = snapshot.claim_index()
        self.held = allocated_state(snapshot.resource_claims)
        self.views = {v.node.name: v for v in node_views(snapshot)}
        self.catalog = {it.name: it for it in snapshot.instance_types}
        self.existing: dict[int, NodeDevices] = {}
        #: claims allocated in this loop (a shared claim is allocated once, with its first consumer)
        self.allocated: set[str] = set()
        #: searches cut short by ``KARPENTER_BUDGET`` (Karpenter's timeouts)
        self.timeouts = 0

    def wanted(self, pods: Sequence[Pod]) -> Claims:
        """The pods' claims still to allocate, in the pods' and their ``spec.resourceClaims`` order, each once
        (allocated ones pin their pods through the NodePool's admission instead, as Karpenter's ClassifyClaims)."""
        out: Claims = []
        for pod in pods:
            for claim in self.index.resolve(pod) if pod.resource_claims else ():
                key = claim.claim_key or f"{pod.key}/{claim.ref.name}"
                if claim.problem or claim.allocated or claim.spec is None or key in self.allocated \
                        or any(k == key for k, _ in out):
                    continue
                out.append((key, claim.spec))
        return out

    def search(self, claims: Claims, node: NodeDevices) -> list[DeviceResult] | None:
        """One depth-first search on one node: the devices, or None when the claims do not fit (or the search
        ran out of time). A selector that errors on a device fails the node, as admission already says."""
        try:
            return allocate(claims, node, self.index.classes, KARPENTER_BUDGET)
        except AllocationError as err:
            self.timeouts += err.reason == _BUDGET_EXCEEDED
            return None
        except SelectorEvalError:
            return None

    def existing_node(self, e: int) -> NodeDevices:
        """An existing node's devices as the scheduler finds them, less what allocated claims hold."""
        if e not in self.existing:
            node = self.problem.existing[e].node
            view = self.views.get(node.name)
            slices, devices = offered_slices(self.problem.snapshot.resource_slices, node.name, node.labels,
                                             self.catalog.get(node.labels.get(wk.INSTANCE_TYPE, "")),
                                             view is not None and view.initialized and not view.inflight)
            self.existing[e] = NodeDevices.of(devices, [p for p in gather_pools(slices) if p.usable],
                                              self.held.devices, self.held.consumed)
        return self.existing[e]

    def add_to_existing(self, e: int, claims: Claims) -> bool:
        """Search existing node ``e`` for the claims and, when they fit, take their devices there."""
        node = self.existing_node(e)
        results = self.search(claims, node)
        if results is None:
            return False
        node.take(results)
        self.allocated.update(key for key, _ in claims if key in self.index.claims)
        return True

    def on_types(self, claims: Claims, candidates: np.ndarray, state: dict[str, NodeDevices], name: str
                 ) -> tuple[np.ndarray, dict[str, list[DeviceResult]]]:
        """One search per instance type among ``candidates`` (templates), on that type's devices as the claim's
        pods left them (``state``, filled in for types not seen yet): the templates whose type can take the
        claims, and the devices each type would give."""
        templates = self.problem.templates
        found: dict[str, list[DeviceResult] | None] = {}
        for t in candidates.tolist():
            it = templates[t].instance_type
            if it.name not in found:
                if it.name not in state:
                    state[it.name] = fresh_devices(it, name)
                found[it.name] = self.search(claims, state[it.name])
        keep = np.array([found[templates[t].instance_type.name] is not None for t in candidates.tolist()],
                        dtype=bool)
        return candidates[keep], {k: v for k, v in found.items() if v is not None}

    def commit(self, claims: Claims, taken: dict[str, list[DeviceResult]], state: dict[str, NodeDevices]) -> None:
        """The pod is added: its devices are taken on every type it searched (Allocation.Commit); types it
        ruled out are released (ReleaseInstanceType)."""
        for name in [n for n in state if n not in taken]:
            del state[name]
        for name, results in taken.items():
            state[name].take(results)
        self.allocated.update(key for key, _ in claims if key in self.index.claims)


def fresh_devices(instance_type: InstanceType, node_name: str) -> NodeDevices:
    """A new node's devices: what its instance type's inventory publishes, nothing taken."""
    slices = inventory_slices(instance_type, node_name)
    return NodeDevices.of(inventory_devices(instance_type, node_name), [p for p in gather_pools(slices) if p.usable])


#: ``GreedyScheduler.order``: one more pod on a claim, and the mask of the claim's index
_ONE_POD = 1 << 32
_INDEX = _ONE_POD - 1
#: above every order key: a claim that cannot take the pod
_NEVER = np.iinfo(np.int64).max


def _zone(zones: np.ndarray) -> int:
    """The one zone of these templates' zones, else -1."""
    return int(zones[0]) if bool((zones == zones[0]).all()) else -1


def _copies(free: np.ndarray, size: np.ndarray) -> int:
    """How many pods of ``size`` fit in ``free``."""
    return int(_copies_each(free[None, :], size)[0])


def _copies_each(free: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Per row of ``free`` (rows × axes), how many pods of ``size`` fit; axes the pod does not use are no limit
    (every pod uses the ``pods`` axis, so some axis bounds it)."""
    used = size > 0
    counts: np.ndarray = (free[:, used] // size[used]).min(axis=1)
    return counts


class GreedyScheduler:
    def __init__(self, problem: Problem, batch_runs: bool = True) -> None:
        """``batch_runs``: place rows of identical pods at once (``_place_run``, the same decisions); False
        places every pod through Karpenter's per-pod loop (the reference the tests compare against)."""
        self.p = problem
        self.batch_runs = batch_runs
        self.class_of = problem.class_of()
        self.by_pool: list[np.ndarray] = []
        for pool in problem.pools:
            idx = [t for t, tmpl in enumerate(problem.templates) if tmpl.pool.name == pool.name]
            self.by_pool.append(np.array(idx, dtype=np.int64))
        self.remaining = [dict(pool.limits_remaining) for pool in problem.pools]
        self.limit_names = [sorted(pool.limits_remaining) for pool in problem.pools]
        self.limit_use = [
            np.array([[problem.templates[t].limit_use.get(n, 0) for n in names] for t in idx],
                     dtype=np.int64).reshape(len(idx), len(names))
            for idx, names in zip(self.by_pool, self.limit_names, strict=True)]
        self.free = problem.existing_free.copy()
        self._launch_order: np.ndarray | None = None
        # zones as small integers: a claim whose candidates all sit in one zone skips pods pinned elsewhere
        zones = sorted({t.offering.zone for t in problem.templates})
        self.template_zone = np.array([zones.index(t.offering.zone) for t in problem.templates], dtype=np.int64)
        self.class_zone = np.array([zones.index(c.representative.zone_pin) if c.representative.zone_pin in zones
                                    else -1 for c in problem.classes], dtype=np.int64)
        self.claim_zone = np.zeros(0, dtype=np.int64)
        #: pods per in-flight claim: Karpenter tries the emptiest claim first
        self.npods = np.zeros(0, dtype=np.int64)
        #: Karpenter's claim order as one number per claim, (pods << 32) | index: the smallest is tried first
        self.order = np.zeros(0, dtype=np.int64)
        #: per in-flight claim (column): its largest candidate's allocatable less its requests, axis by axis (one
        #: contiguous row per axis: a pod's fit test reads only the axes it uses, over every claim at once)
        self.room = np.zeros((len(problem.axes), 0), dtype=np.int64)
        #: class → claims none of whose remaining candidates admits and holds one more of its pods (requests
        #: only grow, candidates only narrow: only grows)
        self.refuses: dict[int, set[int]] = {}
        self._axes: dict[int, list[int]] = {}
        #: ``template_alloc`` one contiguous row per axis: a test reads only the axes a class uses
        self._by_axis = np.ascontiguousarray(problem.template_alloc.T)
        self._openings: dict[tuple[int, int, bool], _Opening] = {}
        #: Karpenter's device allocator, when some pod has claims
        self.devices = DeviceTracker(problem) if any(p.resource_claims for c in problem.classes for p in c.pods) \
            else None

    def _try_existing(self, c: int, size: np.ndarray, prefer: bool, claims: Claims) -> int | None:
        """The first existing node that fits (and, for claims, whose devices the search can allocate: committed)."""
        if not len(self.free):
            return None
        ok = self.p.existing_ok[c] & np.all(self.free >= size, axis=1)
        if prefer:
            ok &= self.p.existing_heaviest[c]
        for e in np.flatnonzero(ok).tolist():
            if not claims:
                return int(e)
            assert self.devices is not None
            if self.devices.add_to_existing(e, claims):
                return int(e)
        return None

    def _used_axes(self, c: int) -> list[int]:
        """The axes a pod of class ``c`` requests something on."""
        axes = self._axes.get(c)
        if axes is None:
            axes = self._axes[c] = np.flatnonzero(self.p.sizes[c] > 0).tolist()
        return axes

    def _holds(self, capacity: np.ndarray, c: int, size: np.ndarray) -> np.ndarray:
        """Which columns of ``capacity`` (axes × columns, never below zero: a claim's room) hold a pod of class
        ``c``, reading only the axes it uses (an axis it does not use holds it anyway)."""
        held = np.ones(capacity.shape[1], dtype=bool)
        for a in self._used_axes(c):
            held &= capacity[a] >= size[a]
        return held

    def _templates_hold(self, cand: np.ndarray, c: int, total: np.ndarray) -> np.ndarray:
        """Which templates ``cand`` (each already holding a claim's requests) hold ``total``, the requests with
        more pods of class ``c``: only the axes the class uses can rule one out."""
        held = np.ones(len(cand), dtype=bool)
        for a in self._used_axes(c):
            held &= self._by_axis[a, cand] >= total[a]
        return held

    def _fits(self, c: int, size: np.ndarray, n: int) -> np.ndarray:
        """The in-flight claims (of the first ``n``) whose largest candidate still has room for a pod of class
        ``c`` — a claim failing this cannot take it — less claims in another zone than the class's pin and
        claims known to refuse the class."""
        fits = self._holds(self.room[:, :n], c, size)
        if self.class_zone[c] >= 0:
            fits &= (self.claim_zone[:n] < 0) | (self.claim_zone[:n] == self.class_zone[c])
        refused = self.refuses.get(c)
        if refused:
            fits[list(refused)] = False
        return fits

    def _narrow(self, claim: _Claim, c: int, total: np.ndarray, prefer: bool) -> np.ndarray:
        cand = claim.candidates
        if not prefer and claim.floor is not None and bool(np.all(total <= claim.floor)):
            # the common case once a claim has a few pods: every candidate still fits, nothing to narrow
            if c not in claim.admits and bool(self.p.template_ok[c, cand].all()):
                claim.admits.add(c)
            if c in claim.admits:
                return cand
        admitting = cand[self.p.template_ok[c, cand]]
        if prefer:
            admitting = admitting[self.p.template_heaviest[c, admitting]]
        # every candidate already holds the claim's requests: only the axes this pod adds to can rule one out
        narrowed: np.ndarray = admitting[self._templates_hold(admitting, c, total)] if len(admitting) else admitting
        return narrowed

    def _new_claim(self, c: int, size: np.ndarray, order: int, prefer: bool, claims: Claims) -> _Claim | None:
        for pool_index, idx in enumerate(self.by_pool):
            remaining = self.remaining[pool_index]
            if remaining.get(NODES, 1) <= 0:
                continue
            opening = self._opening(pool_index, c, size, prefer)
            mask = opening.mask
            if self.limit_names[pool_index]:
                rem = np.array([remaining[n] for n in self.limit_names[pool_index]], dtype=np.int64)
                within = np.all(self.limit_use[pool_index] <= rem, axis=1)
                if not within[mask].all():
                    mask = mask & within
            if not mask.any():
                continue
            fresh = mask is opening.mask and not claims
            candidates = opening.candidates if fresh else idx[mask]
            state: dict[str, NodeDevices] = {}
            if claims:  # one search per instance type the new NodeClaim may become; those that fail are dropped
                assert self.devices is not None
                candidates, taken = self.devices.on_types(claims, candidates, state, f"greedy-{order}")
                if not len(candidates):
                    continue
                self.devices.commit(claims, taken, state)
                mask = np.isin(idx, candidates)
            charged = (opening.charged if fresh else self.limit_use[pool_index][mask].max(axis=0).tolist()) \
                if self.limit_names[pool_index] else []
            for name, amount in zip(self.limit_names[pool_index], charged, strict=True):
                remaining[name] -= int(amount)
            claim = _Claim(pool_index=pool_index, candidates=candidates, requests=size.copy(), order=order,
                           devices=state)
            if fresh:
                claim.ceiling, claim.floor, claim.zone = opening.ceiling, opening.floor, opening.zone
            else:
                self._bound(claim)
            return claim
        return None

    def _opening(self, pool_index: int, c: int, size: np.ndarray, prefer: bool) -> _Opening:
        """What a new NodeClaim of this pool opened for a pod of class ``c`` starts from before limits and
        devices, worked out once per (pool, class, attempt): 10,000 anti-affine pods open 10,000 claims alike."""
        key = (pool_index, c, prefer)
        opening = self._openings.get(key)
        if opening is None:
            idx = self.by_pool[pool_index]
            # every axis: a template whose daemons leave it below zero on one holds no pod at all
            mask = self.p.template_ok[c, idx] & np.all(self.p.template_alloc[idx] >= size, axis=1)
            if prefer:
                mask &= self.p.template_heaviest[c, idx]
            opening = _Opening(mask=mask, candidates=idx[mask])
            if len(opening.candidates):
                alloc = self.p.template_alloc[opening.candidates]
                opening.ceiling, opening.floor = alloc.max(axis=0), alloc.min(axis=0)
                opening.zone = _zone(self.template_zone[opening.candidates])
                if self.limit_names[pool_index]:
                    opening.charged = self.limit_use[pool_index][mask].max(axis=0).tolist()
            self._openings[key] = opening
        return opening

    def _bound(self, claim: _Claim) -> None:
        """A claim's ceiling, floor and zone from its candidates (after they narrowed)."""
        alloc = self.p.template_alloc[claim.candidates]
        claim.ceiling, claim.floor = alloc.max(axis=0), alloc.min(axis=0)
        claim.zone = _zone(self.template_zone[claim.candidates])

    def run(self, pods: list[Pod] | None = None) -> Placement:
        queue = karpenter_sorted(pods if pods is not None else [p for c in self.p.classes for p in c.pods])
        placement = Placement()
        claims: list[_Claim] = []
        placed_bundles: set[int] = set()
        classes = [self.class_of[pod.key] for pod in queue]
        members: dict[int, list[Pod]] = {}  # each class's pods in queue order (a bundle is placed whole)
        for pod, c in zip(queue, classes, strict=True):
            members.setdefault(c, []).append(pod)
        start = 0
        while start < len(queue):
            c = classes[start]
            end = start + 1
            while end < len(queue) and classes[end] == c:
                end += 1
            if end - start > 1 and self.batch_runs and self._runs_alone(c):
                self._place_run(queue[start:end], c, claims, placement)
            else:
                self._place_each(queue[start:end], c, members[c], claims, placement, placed_bundles)
            start = end
        for claim in claims:
            placement.new_nodes.append(NewNode(template=self._cheapest(claim.candidates), pods=claim.pods))
        return placement

    def _runs_alone(self, c: int) -> bool:
        """May a row of this class's pods be placed at once (``_place_run``)? Not for bundles, preferences (two
        attempts per pod) or device claims (a search per pod and node): those go pod by pod."""
        pod_class = self.p.classes[c]
        pod = pod_class.representative
        return not (pod_class.bundle or pod.preferred_terms or pod.resource_claims)

    def _place_run(self, pods: list[Pod], c: int, claims: list[_Claim], placement: Placement) -> None:
        """Pods of one class that follow each other in the queue, placed exactly as one ``_place`` per pod
        would, in far fewer numpy calls (100,000 benchmark pods are 30 such rows): identical pods fill each
        fitting existing node in order until it is full; then each goes to the in-flight NodeClaim with the
        fewest pods (lowest index on ties) that some remaining candidate can still hold it on — how many more
        pods of the class a claim can take is worked out once per row — else to a new NodeClaim. A claim's
        candidates after m more pods are those that hold all m at once (requests only grow), so each claim is
        narrowed once, at the end of the row."""
        size = self.p.sizes[c]
        k = 0
        if len(self.free):
            fitting = self.p.existing_ok[c] & (self.free >= size).all(axis=1)
            for e in np.flatnonzero(fitting).tolist():
                take = min(_copies(self.free[e], size), len(pods) - k)
                self.free[e] -= take * size
                placement.existing.setdefault(e, []).extend(pods[k:k + take])
                k += take
                if k == len(pods):
                    return
        n = len(claims)
        # claims by Karpenter's order key: sorted, so already a heap
        heap: list[int] = np.sort(self.order[:n][self._fits(c, size, n)]).tolist() if n else []
        spare: dict[int, int] = {}
        taken: dict[int, list[Pod]] = {}
        while k < len(pods):
            if not heap:
                new_claim = self._new_claim(c, size, len(claims), False, [])
                if new_claim is None:  # nothing can take this pod, so nothing can take the identical rest
                    placement.unschedulable.extend(pods[k:])
                    break
                claims.append(new_claim)
                self._record(len(claims) - 1, new_claim, [pods[k]])
                k += 1
                heapq.heappush(heap, int(self.order[len(claims) - 1]))
                continue
            i = heap[0] & _INDEX
            if i not in spare:
                spare[i] = self._room(claims[i], i, c, size)
            if not spare[i]:
                heapq.heappop(heap)
                continue
            taken.setdefault(i, []).append(pods[k])
            k += 1
            spare[i] -= 1
            if spare[i]:
                heapq.heapreplace(heap, heap[0] + _ONE_POD)
            else:
                heapq.heappop(heap)
        for i, more in taken.items():
            claim = claims[i]
            total = claim.requests + len(more) * size
            cand = claim.candidates
            narrowed = cand[self.p.template_ok[c, cand] & self._templates_hold(cand, c, total)]
            changed = len(narrowed) != len(cand)
            claim.candidates, claim.requests = narrowed, total
            self._record(i, claim, more, changed)

    def _room(self, claim: _Claim, i: int, c: int, size: np.ndarray) -> int:
        """How many more pods of class ``c`` the claim can take: the most any remaining candidate that admits
        the class holds beside the claim's requests."""
        cand = claim.candidates
        admits = self.p.template_ok[c, cand]
        if not admits.any():
            self.refuses.setdefault(c, set()).add(i)
            return 0
        holding = cand[admits]
        most: np.ndarray | None = None  # per candidate, the copies its free room takes on every axis used
        for a in self._used_axes(c):
            copies = (self._by_axis[a, holding] - claim.requests[a]) // size[a]
            most = copies if most is None else np.minimum(most, copies)
        assert most is not None  # every pod uses the ``pods`` axis
        return max(int(most.max()), 0)

    def _place_each(self, pods: list[Pod], c: int, members: list[Pod], claims: list[_Claim], placement: Placement,
                    placed_bundles: set[int]) -> None:
        """Pods of one class placed one at a time, Karpenter's loop as it is."""
        for pod in pods:
            group = [pod]
            if self.p.classes[c].bundle:  # a self-affine group goes whole to one node
                if c in placed_bundles:
                    continue
                placed_bundles.add(c)
                group = members
            # Karpenter tries the heaviest preferred node-affinity term as if required, then relaxes it
            attempts = (True, False) if pod.preferred_terms else (False,)
            if not any(self._place(group, c, claims, placement, prefer) for prefer in attempts):
                placement.unschedulable.extend(group)

    def _place(self, pods: list[Pod], c: int, claims: list[_Claim], placement: Placement, prefer: bool) -> bool:
        size = self.p.sizes[c]
        wanted = self.devices.wanted(pods) if self.devices is not None else []
        e = self._try_existing(c, size, prefer, wanted)
        if e is not None:
            self.free[e] -= size
            placement.existing.setdefault(e, []).extend(pods)
            return True
        n = len(claims)
        if n:
            # every in-flight claim at once: cheap tests in numpy, then the fewest-pods-first order
            fits = self._fits(c, size, n)
            while True:
                i = int(np.where(fits, self.order[:n], _NEVER).argmin())
                if not fits[i]:
                    break
                fits[i] = False
                claim = claims[i]
                total = claim.requests + size
                narrowed = self._narrow(claim, c, total, prefer)
                if not prefer and not len(narrowed):
                    # no candidate admits and holds one more pod of the class: requests only grow and
                    # candidates only narrow, so none ever will (its devices are the pod's own question)
                    self.refuses.setdefault(c, set()).add(i)
                    continue
                if len(narrowed) and wanted:
                    assert self.devices is not None
                    narrowed, taken = self.devices.on_types(wanted, narrowed, claim.devices, f"greedy-{claim.order}")
                    if len(narrowed):
                        self.devices.commit(wanted, taken, claim.devices)
                if len(narrowed):
                    changed = len(narrowed) != len(claim.candidates)
                    claim.candidates, claim.requests = narrowed, total
                    self._record(i, claim, pods, changed)
                    return True
        new_claim = self._new_claim(c, size, n, prefer, wanted)
        if new_claim is None:
            return False
        claims.append(new_claim)
        self._record(n, new_claim, pods)
        return True

    def _record(self, i: int, claim: _Claim, pods: list[Pod], candidates_changed: bool = False) -> None:
        """Book ``pods`` onto claim ``i``; its ceiling and zone only move when its candidates narrowed
        (narrowing only drops candidates, so an unchanged count is an unchanged set; a new claim comes with
        them)."""
        if i >= len(self.npods):
            grow = max(64, len(self.npods))
            self.room = np.hstack([self.room, np.zeros((self.room.shape[0], grow), np.int64)])
            self.claim_zone = np.concatenate([self.claim_zone, np.full(grow, -1, np.int64)])
            self.npods = np.concatenate([self.npods, np.zeros(grow, np.int64)])
            self.order = np.concatenate([self.order, np.zeros(grow, np.int64)])
        claim.pods.extend(pods)
        self.npods[i] = len(claim.pods)
        self.order[i] = len(claim.pods) * _ONE_POD + i
        if candidates_changed:
            self._bound(claim)
        assert claim.ceiling is not None
        self.room[:, i] = claim.ceiling - claim.requests
        self.claim_zone[i] = claim.zone

    def _cheapest(self, candidates: np.ndarray) -> int:
        """Karpenter's launch choice: cheapest offering; ties by instance-type name, then catalog order."""
        if self._launch_order is None:
            templates = self.p.templates
            keys = sorted(range(len(templates)), key=lambda t: (
                templates[t].price_micros, templates[t].instance_type.name,
                templates[t].instance_type.offerings.index(templates[t].offering)))
            self._launch_order = np.empty(len(templates), dtype=np.int64)
            self._launch_order[keys] = np.arange(len(templates))
        return int(candidates[np.argmin(self._launch_order[candidates])])


def greedy_placement(problem: Problem) -> Placement:
    return GreedyScheduler(problem).run()


def finish_greedily(problem: Problem, placement: Placement) -> Placement:
    """Place a partial plan's unscheduled pods with Karpenter's greedy, around what the plan already uses
    (existing free capacity, NodePool limits): an LP rounding cut short by the time limit still ends in
    a complete plan. Pods greedy cannot place stay unschedulable."""
    if not placement.unschedulable:
        return placement
    scheduler = GreedyScheduler(problem)
    units = np.array([c.unit for c in problem.classes], dtype=np.int64)
    for e, pods in placement.existing.items():
        counts = np.bincount([scheduler.class_of[p.key] for p in pods], minlength=len(problem.classes))
        scheduler.free[e] -= (counts // units) @ problem.sizes
    pool_index = {pool.name: i for i, pool in enumerate(problem.pools)}
    for node in placement.new_nodes:
        tmpl = problem.templates[node.template]
        remaining = scheduler.remaining[pool_index[tmpl.pool.name]]
        for name, use in tmpl.limit_use.items():
            if name in remaining:
                remaining[name] -= use
    if scheduler.devices is not None:  # the devices the plan's pods take on existing nodes, in its order
        for e, pods in placement.existing.items():
            for pod in pods:
                if claims := scheduler.devices.wanted([pod]):
                    scheduler.devices.add_to_existing(e, claims)
    extra = scheduler.run(list(placement.unschedulable))
    for e, pods in extra.existing.items():
        placement.existing.setdefault(e, []).extend(pods)
    placement.new_nodes.extend(extra.new_nodes)
    placement.unschedulable = extra.unschedulable
    return placement
