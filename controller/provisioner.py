"""Provisioning: cache → Snapshot → solver → NodeClaims. No placement logic lives here; the solver decides.

Every NodeClaim records the UIDs of the pods it was planned for (annotation ``nodeplan.io/pods``). While a
NodeClaim is in flight (not yet initialized, or initialized less than ``bind_grace`` ago) its pods are
*covered*: they are left out of the next batch and shown to the solver as already bound to its node, Node
object or not, so the solver sees the claim as capacity (``model.inflight``) with their room taken. Pods a
later plan puts into the room left on an in-flight claim are added to its annotation, and covered the same way.
A restarted controller reads the same annotations back from the API server, so it never launches twice for the
same pods.
NodeClaim names are derived from the plan (pool, offering, pod UIDs), so a retried create is a no-op; a name
taken by a claim that no longer holds room for those pods (``holds``) moves the decision to its next generation,
so a pod the scheduler did not put on its planned node always gets capacity again.

A NodeClaim's requirements allow the planned instance type and up to ``MAX_FALLBACKS`` others (``fallback_types``)
in the same zone and capacity type, so a launch the cloud refuses for capacity falls back within the same call
(the provider tries the planned offering first, ``providers.fallbacks``). A fallback holds the claim's requests,
and every planned pod and the NodePool accept its labels; zone and capacity type stay pinned so zonal topology
the plan relied on still holds.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from controller.batch import is_bound, is_terminal, pod_key
from controller.cache import ClusterCache
from controller.kinds import PASSED_THROUGH
from controller.logs import get_logger, stage_fields
from controller.offerings import UnavailableOfferings
from controller.podindex import PodIndex
from controller.rest import CoreApi
from model import labels as wk
from model.errors import InputError
from model.instancetype import InstanceType
from model.nodepool import NodeClaim, NodePool
from model.plan import PlannedNodeClaim, ProvisioningPlan, UnschedulablePod
from model.pod import Pod
from model.resources import Resources
from model.snapshot import parse_objects
from solver.provision import SolveOptions, solve
from solver.rules.preferences import PreferencePolicy

log = get_logger(__name__)

PODS_ANNOTATION = "nodeplan.io/pods"
PRICE_ANNOTATION = "nodeplan.io/price"
#: on a pending pod: the running node a plan put it on (setting it makes the kube-scheduler retry the pod)
PLACED_ANNOTATION = "nodeplan.io/placed"
GROUP, VERSION = "karpenter.sh", "v1"
#: deleting a NodeClaim only marks it; ``controller.termination`` drains its node, then releases it
TERMINATION_FINALIZER = "karpenter.sh/termination"


def claim_name(nodepool: str, planned: PlannedNodeClaim, pod_uids: Iterable[str], generation: int = 0) -> str:
    """A name that is a function of the decision: same pool, offering and pods ⇒ same NodeClaim, so a retried
    create is a no-op. ``generation`` > 0 names the same decision taken again after the claim of an earlier
    generation stopped holding room for these pods (``holds``); generation 0 is the name it always had."""
    decision: list[Any] = [nodepool, planned.instance_type, planned.zone, planned.capacity_type, sorted(pod_uids)]
    if generation:
        decision.append(generation)
    digest = hashlib.sha256(json.dumps(decision).encode())
    return f"{nodepool[:50]}-{digest.hexdigest()[:10]}"


#: generations tried for one decision before the create gives up (each one is a claim that exists, holds
#: nothing for these pods and has not been deleted yet: a handful at most)
MAX_GENERATIONS = 64


def _condition_time(claim: Mapping[str, Any], kind: str) -> float | None:
    for cond in (claim.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            stamp = cond.get("lastTransitionTime")
            if not stamp:
                return 0.0
            try:
                return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
            except ValueError:
                return 0.0
    return None


def reserving(claim: Mapping[str, Any], now: float, bind_grace: float) -> bool:
    """Does ``claim`` still hold room for its pods? Not deleting, launch not failed, and not initialized longer
    than ``bind_grace`` ago (by then the scheduler has had its chance to bind them)."""
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        return False
    launched = [c for c in (claim.get("status") or {}).get("conditions") or [] if c.get("type") == "Launched"]
    if launched and launched[0].get("status") == "False":
        return False  # the launch failed: its pods need another plan
    initialized = _condition_time(claim, "Initialized")
    return initialized is None or now - initialized <= bind_grace


#: (NodeClaim name, pod UID): a pod its claim's Node has no room left for (``displaced_pods``). Displacement is
#: of a pod from one claim: the claim a later batch plans it onto holds it as any other
Displacement = tuple[str, str]


def holds(claim: Mapping[str, Any], pod_uids: Iterable[str], now: float, bind_grace: float,
          displaced: Collection[Displacement] = ()) -> bool:
    """Does the existing ``claim`` still hold room for every one of ``pod_uids``? Only then is a create of its
    name (409) the same decision already carried out; otherwise the pods need a claim of the next generation."""
    uids = set(pod_uids)
    name = _claim_name(claim)
    return (reserving(claim, now, bind_grace) and uids <= set(planned_pod_uids(claim))
            and not any((name, uid) in displaced for uid in uids))


def _claim_name(claim: Mapping[str, Any]) -> str:
    return str((claim.get("metadata") or {}).get("name"))


def planned_pod_uids(claim: Mapping[str, Any]) -> list[str]:
    """The UIDs of the pods a NodeClaim was planned for (``nodeplan.io/pods``); none when unreadable."""
    return list(_pod_uids(((claim.get("metadata") or {}).get("annotations") or {}).get(PODS_ANNOTATION) or "[]"))


@functools.lru_cache(maxsize=4096)
def _pod_uids(annotation: str) -> tuple[str, ...]:
    """The annotation decoded, once per value: every pass of the provisioning and lifecycle loops reads every
    claim's list."""
    try:
        uids = json.loads(annotation)
    except json.JSONDecodeError:
        return ()
    return tuple(str(uid) for uid in uids) if isinstance(uids, list) else ()


def covered_pods(claims: Iterable[Mapping[str, Any]], now: float, bind_grace: float,
                 displaced: Collection[Displacement] = ()) -> dict[str, str]:
    """Pod UID → NodeClaim name for every pod an in-flight NodeClaim was launched (or later planned) for, less
    the claims it is ``displaced`` from: a pod planned again after its first claim's Node filled up is covered by
    the claim it was planned onto next, though the first one still lists it until its bind grace ends."""
    out: dict[str, str] = {}
    for claim in claims:
        if reserving(claim, now, bind_grace):
            name = _claim_name(claim)
            for uid in planned_pod_uids(claim):
                if (name, uid) not in displaced:
                    out[uid] = name
    return out


def node_allocatable(cache: ClusterCache) -> dict[str, Resources]:
    """Node name → its allocatable, for every readable Node in the cache."""
    out: dict[str, Resources] = {}
    for node in cache.items("Node"):
        try:
            out[str(node["metadata"]["name"])] = cache.parsed(node).allocatable
        except (InputError, KeyError):
            continue
    return out


def pod_requests(cache: ClusterCache, pod: Mapping[str, Any]) -> Resources | None:
    """The pod's effective requests (the cache's parsed model); None when the pod cannot be read."""
    try:
        return cast(Resources, cache.parsed(pod).requests)
    except InputError:
        return None


def room_left(allocatable: Resources, pods: Iterable[Mapping[str, Any]],
              requests: Callable[[Mapping[str, Any]], Resources | None]) -> Resources:
    """``allocatable`` less the requests of ``pods`` (one that cannot be read takes nothing)."""
    room = allocatable
    for pod in pods:
        amount = requests(pod)
        if amount is not None:
            room = room - amount
    return room


def displaced_pods(claims: Iterable[Mapping[str, Any]], allocatable: Mapping[str, Resources], pods: PodIndex,
                   requests: Callable[[Mapping[str, Any]], Resources | None]) -> set[Displacement]:
    """(claim, pod) for the pending pods of ``claims`` whose claim's Node has joined (``allocatable``: node name →
    allocatable) but no longer has room for them: the kube-scheduler is free to bind other pods there, and does,
    and then a planned pod cannot go where it was planned. Room is the Node's allocatable less every pod bound to
    it, handed to the claim's pending pods in planned order. Such a pod is planned again by the next batch, not
    after the bind grace: while covered it waited out the whole grace (the last pod of a 1,000-pod scale-out got
    its node 16 s after the others), and that claim is no answer to a retried create (``holds``)."""
    owner: dict[str, tuple[str, list[str]]] = {}
    for claim in claims:
        node = claim_node_name(claim)
        if node in allocatable:
            owner[node] = (_claim_name(claim), planned_pod_uids(claim))
    if not owner:
        return set()
    pending = pods.unbound()
    # only nodes still waiting for a planned pod can displace one, and only the pods bound to them are summed
    owner = {node: (name, uids) for node, (name, uids) in owner.items() if any(uid in pending for uid in uids)}
    out: set[Displacement] = set()
    for node, bound in pods.bound_to(owner).items():
        room = room_left(allocatable[node], bound, requests)
        name, uids = owner[node]
        for uid in uids:
            waiting = pending.get(uid)
            amount = None if waiting is None else requests(waiting)
            if amount is None:
                continue
            if amount.fits_in(room):
                room = room - amount
            else:
                out.add((name, uid))
    return out


def claim_node_name(claim: Mapping[str, Any]) -> str:
    """The name the claim's Node has (or will have)."""
    return str((claim.get("status") or {}).get("nodeName") or (claim.get("metadata") or {}).get("name"))


def planned_nodes(claims: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Pod UID → the nodes of every NodeClaim that lists it: where nodeplan may have nominated it."""
    out: dict[str, set[str]] = {}
    for claim in claims:
        node = claim_node_name(claim)
        for uid in planned_pod_uids(claim):
            out.setdefault(uid, set()).add(node)
    return out


def may_nominate(pod: Mapping[str, Any], node: str, ours: Iterable[str]) -> bool:
    """KEP-5278's rule for a component other than the scheduler: set ``status.nominatedNodeName`` while it is
    unset, and overwrite only a nomination it set itself (``ours``: the nodes nodeplan planned the pod onto).
    A nomination the scheduler made (preemption, a binding cycle with PreBind work) is left alone."""
    current = _nominated_node(pod)
    if current == node:
        return False
    return not current or nominated_by_nodeplan(pod, ours)


def nominated_by_nodeplan(pod: Mapping[str, Any], ours: Iterable[str]) -> bool:
    """Is the pod's nomination one nodeplan wrote: onto a node it planned the pod onto (``ours``), or the running
    node it placed the pod on (``nodeplan.io/placed``)?"""
    current = _nominated_node(pod)
    return bool(current) and (current in set(ours) or current == \
        ((pod.get("metadata") or {}).get("annotations") or {}).get(PLACED_ANNOTATION))


def _nominated_node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("nominatedNodeName") or "")


#: the field manager of nodeplan's nominations (server-side apply): the API server tells its writes of
#: ``status.nominatedNodeName`` apart from the kube-scheduler's
NOMINATION_MANAGER = "nodeplan-nomination"


def nominate(core: CoreApi, pod: Mapping[str, Any], node: str, ours: Iterable[str]) -> bool:
    """Nominate ``pod`` to ``node`` if ``may_nominate`` allows it, by server-side apply of that one field, as
    KEP-5278 asks of external components: a nomination nodeplan applied earlier is nodeplan's to move, while one
    the kube-scheduler wrote since (preemption, a binding cycle) is a field another manager owns, so the apply is
    refused (409) and the scheduler's value stays; other status changes (its conditions) do not conflict.
    Returns whether the nomination was written."""
    if (pod.get("spec") or {}).get("nodeName") or not may_nominate(pod, node, ours):
        return False
    return _apply_nomination(core, pod, {"status": {"nominatedNodeName": node}})


def withdraw_nomination(core: CoreApi, pod: Mapping[str, Any]) -> bool:
    """Take back the nomination nodeplan applied: server-side apply of the Pod without the field, so the API
    server removes it only while nodeplan's field manager alone owns it (a value the scheduler wrote stays).
    Returns whether the apply was accepted."""
    return _apply_nomination(core, pod, {})


def _apply_nomination(core: CoreApi, pod: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """Server-side apply of ``fields`` to the pod's status as nodeplan's nomination manager; False when the pod
    is gone, bound, or the scheduler owns the nomination (404 / 409 / 422), logged for anything else."""
    meta = pod.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, **fields}
    try:
        # the answer (the whole Pod) is left unparsed (``controller.rest``): nominations are written hundreds at a
        # time right before an untaint
        core.patch_namespaced_pod_status(name, namespace, body, field_manager=NOMINATION_MANAGER,
                                         _content_type="application/apply-patch+yaml")
        return True
    except client.ApiException as err:
        if err.status not in (404, 409, 422):
            log.warning(f"could not apply the nomination: HTTP {err.status}", pod=f"{namespace}/{name}",
                        nominated=(fields.get("status") or {}).get("nominatedNodeName", ""))
        return False


def nominate_into_room(core: CoreApi, pod: Mapping[str, Any], node: str, ours: Iterable[str]) -> int:
    """Nominate a pending pod the plan put into room on a running node so that the kube-scheduler retries it.

    kube-scheduler 1.36 retries a pod NodeResourcesFit rejected only when a node is added or resized, an
    assigned pod is deleted, or a nomination *moves* (it then treats the pod as gone from its old nominated
    node and retries pods of equal or lower priority). Room freed by a nominated pod bound elsewhere raises no
    such event (kubernetes#134859), nor does a first nomination, so a pod placed there waited for the
    scheduler's 5-minute unschedulable flush. The nomination is therefore made to move: one nodeplan holds
    elsewhere moves to ``node``; one it holds on ``node`` already, or one it has just written there, is withdrawn
    and applied again. A nomination the scheduler made is left alone. Returns the number of writes."""
    current = _nominated_node(pod)
    if current and current != node:
        return int(nominate(core, pod, node, ours))  # the move is the retry
    writes = 0
    if not current:
        if not nominate(core, pod, node, ours):
            return 0
        writes = 1
    elif not nominated_by_nodeplan(pod, ours):
        return 0
    if not withdraw_nomination(core, pod):
        return writes
    unset = {**pod, "status": {k: v for k, v in (pod.get("status") or {}).items() if k != "nominatedNodeName"}}
    return writes + 1 + int(nominate(core, unset, node, ours))


#: how many other instance types a NodeClaim may fall back to (Karpenter sends at most 60 to CreateFleet)
MAX_FALLBACKS = 10


def fallback_types(planned: PlannedNodeClaim, nodepool: NodePool, catalog: Iterable[InstanceType],
                   pods: Iterable[Pod], limit: int = MAX_FALLBACKS) -> list[str]:
    """Instance types, cheapest first, that could stand in for the planned one if the cloud refuses it: offered
    available in the planned zone and capacity type, holding the claim's requests, with labels the NodePool and
    every planned pod accept."""
    requests = Resources.parse(planned.requests)
    pods = list(pods)
    options: list[tuple[float, str]] = []
    for it in catalog:
        if it.name == planned.instance_type or not requests.fits_in(it.allocatable):
            continue
        offering = next((o for o in it.offerings if o.zone == planned.zone and o.capacity_type == planned.capacity_type
                         and o.available), None)
        if offering is None:
            continue
        labels = {**planned.labels, **it.labels, wk.INSTANCE_TYPE: it.name, wk.ZONE: planned.zone,
                  wk.CAPACITY_TYPE: planned.capacity_type, wk.NODEPOOL: nodepool.name}
        if not nodepool.requirements.matches(labels) or not all(p.accepts_labels(labels) for p in pods):
            continue
        options.append((offering.price, it.name))
    return [name for _, name in sorted(options)[:limit]]


def _taint(taint: Any) -> dict[str, Any]:
    """A taint as the API writes it: no ``value`` key when it has none (Karpenter's CRD rejects ``""``)."""
    out: dict[str, Any] = taint.model_dump(mode="json", by_alias=True)
    return {k: v for k, v in out.items() if v not in ("", None)}


def nodeclaim_body(planned: PlannedNodeClaim, nodepool: NodePool, name: str, pod_uids: Sequence[str],
                   fallbacks: Sequence[str] = ()) -> dict[str, Any]:
    """The NodeClaim that launches one planned node: the pool's template pinned to the planned offering (the
    instance type may also be one of ``fallbacks``; the labels name the planned one)."""
    template = nodepool.spec.template
    pinned = {wk.INSTANCE_TYPE: planned.instance_type, wk.ZONE: planned.zone,
              wk.CAPACITY_TYPE: planned.capacity_type}
    requirements = [r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in template.spec.requirements
                    if r.key not in pinned]
    for req in requirements:
        if "min_values" in req:
            req["minValues"] = req.pop("min_values")
    requirements += [{"key": k, "operator": "In", "values": [v, *fallbacks] if k == wk.INSTANCE_TYPE else [v]}
                     for k, v in pinned.items()]
    spec: dict[str, Any] = {
        "requirements": requirements,
        "resources": {"requests": dict(planned.requests)},
    }
    if template.spec.taints:
        spec["taints"] = [_taint(t) for t in template.spec.taints]
    if template.spec.startup_taints:
        spec["startupTaints"] = [_taint(t) for t in template.spec.startup_taints]
    if template.spec.node_class_ref is not None:
        spec["nodeClassRef"] = template.spec.node_class_ref.model_dump(mode="json", by_alias=True)
    if template.spec.expire_after is not None:
        spec["expireAfter"] = template.spec.expire_after
    if template.spec.termination_grace_period is not None:
        spec["terminationGracePeriod"] = template.spec.termination_grace_period
    labels = {**template.metadata.labels, **planned.labels, wk.NODEPOOL: nodepool.name}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {**template.metadata.annotations, PODS_ANNOTATION: json.dumps(sorted(pod_uids)),
                            PRICE_ANNOTATION: f"{planned.price:.6f}"},
            "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePool", "name": nodepool.name,
                                 "uid": nodepool.metadata.uid}],
            "finalizers": [TERMINATION_FINALIZER],
        },
        "spec": spec,
    }


@dataclass
class BatchRecord:
    """What one batch did (kept for tests, logs and, later, metrics)."""

    started: float
    pods: int
    plan: ProvisioningPlan
    #: NodeClaim name → the planned node it launches
    claims: dict[str, PlannedNodeClaim] = field(default_factory=dict)
    #: the names this batch created (a name that already existed is in ``claims`` only)
    created: list[str] = field(default_factory=list)
    #: in-flight NodeClaim name → pods of this batch the plan put on it
    joined: dict[str, list[str]] = field(default_factory=dict)
    solve_seconds: float = 0.0
    #: CPU seconds of the controller process while the batch was decided (the solver's worker threads included)
    cpu_seconds: float = 0.0


@dataclass
class ProvisionerOptions:
    solve_time_limit: float = 10.0
    seed: int = 0
    workers: int = 2
    #: how long after initialization a NodeClaim's pods stay reserved for it (for the scheduler to bind them)
    bind_grace: float = 15.0
    #: how preferred node affinity weighs against cost (``nodeplan run --preference-policy``)
    preference_policy: PreferencePolicy = PreferencePolicy.RESPECT
    preference_price: float = 0.0
    #: a batch is decided once its plan is certified within this relative gap of the lower bound, not at the
    #: time limit (``nodeplan run --decision-gap``; ``SolveOptions.gap``)
    decision_gap: float = 0.02
    #: Dynamic Resource Allocation (``nodeplan run --dra/--no-dra``): off, pods with resource claims are left
    #: to other provisioners (Karpenter's ``--ignore-dra-requests``) and the DRA kinds are not read
    dra: bool = True
    #: write each batch's snapshot here (``nodeplan run --record-batches``), for ``nodeplan solve`` to replay
    record_batches: Path | None = None


#: why a pod with claims is not provisioned for while DRA is off (the FailedScheduling Event's text)
DRA_DISABLED = ("DRA is disabled (nodeplan run --no-dra): pods with resource claims are left to other "
                "provisioners")


def has_dra_requirements(pod: Mapping[str, Any]) -> bool:
    """Does the pod use DRA: pod-level ``resourceClaims`` or a container's ``resources.claims`` (Karpenter's
    ``HasDRARequirements``)."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return any((c.get("resources") or {}).get("claims") for c in containers)


class Provisioner:
    def __init__(self, api: client.ApiClient, cache: ClusterCache, catalog: Sequence[InstanceType],
                 options: ProvisionerOptions, clock: Callable[[], float] = time.time,
                 unavailable: UnavailableOfferings | None = None,
                 owns: Callable[[Mapping[str, Any]], bool] = lambda pool: True) -> None:
        """``owns(nodepool)``: whether this nodeplan manages the pool (``--nodepool-selector``, a node class a
        provider serves); the other pools are left out of every plan, their nodes stay as existing capacity."""
        self.unavailable = unavailable or UnavailableOfferings()
        self._owns = owns
        self._custom = client.CustomObjectsApi(api)
        self._core = CoreApi(api)
        self._cache = cache
        self._catalog = tuple(catalog)
        self._options = options
        self._recorded = 0
        self._clock = clock
        self.history: list[BatchRecord] = []
        self._warned_dra = False
        self._deciding = threading.Event()

    def deciding(self) -> bool:
        """Is a batch being planned, its NodeClaims created or its pods joined to in-flight ones right now?"""
        return self._deciding.is_set()

    def use_catalog(self, catalog: Sequence[InstanceType]) -> None:
        """Plan the next batches with these instance types and prices (the periodic catalog refresh)."""
        self._catalog = tuple(catalog)

    # -- what the next batch sees ---------------------------------------------------------------------
    def displaced(self) -> set[Displacement]:
        """(claim, pod UID) for pods planned onto an in-flight NodeClaim whose Node has no room left for them
        (``displaced_pods``)."""
        now = self._clock()
        claims = [c for c in self._cache.items("NodeClaim") if reserving(c, now, self._options.bind_grace)]
        if not claims:
            return set()
        return displaced_pods(claims, node_allocatable(self._cache), self._cache.pods,
                              lambda pod: pod_requests(self._cache, pod))

    def covered(self) -> dict[str, str]:
        """Pod UID → the in-flight NodeClaim that holds room for it (``covered_pods``, less the displaced)."""
        return covered_pods(self._cache.items("NodeClaim"), self._clock(), self._options.bind_grace,
                            self.displaced())

    def pending(self) -> dict[str, dict[str, Any]]:
        """Provisionable pods not covered by an in-flight NodeClaim, by key."""
        covered = self.covered()
        return {pod_key(p): p for p in self._cache.pods.provisionable()
                if (p.get("metadata") or {}).get("uid") not in covered}

    def valid_nodepools(self) -> list[dict[str, Any]]:
        out = []
        for raw in self._cache.items("NodePool"):
            if not self._owns(raw):
                continue
            try:
                parse_objects([raw], source="cluster")
            except InputError as err:
                log.warning(f"ignoring invalid NodePool: {err}")
                continue
            out.append(raw)
        return out

    def snapshot_objects(self, batch: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
        claims = self._cache.items("NodeClaim")
        covered = self.covered()
        node_of = {_claim_name(c): claim_node_name(c) for c in claims}
        nodes = self._cache.items("Node")
        pods: list[dict[str, Any]] = []
        for pod in self._cache.items("Pod"):
            if is_terminal(pod):
                continue
            if is_bound(pod):
                pods.append(pod)
                continue
            if pod_key(pod) in batch:
                pods.append(pod)
                continue
            claim = covered.get((pod.get("metadata") or {}).get("uid", ""))
            if claim is not None:
                # already placed on its claim's node, whether that Node has joined yet or not: the solver counts
                # an in-flight NodeClaim as capacity (``model.inflight``), less what these pods will take
                reserved = copy.deepcopy(pod)
                reserved.setdefault("spec", {})["nodeName"] = node_of[claim]
                pods.append(reserved)
        # DaemonSets, volumes (PVCs, PVs, StorageClasses, CSINodes), Namespaces, DRA objects: as they are
        passed = [obj for kind in PASSED_THROUGH if kind in self._cache.informers for obj in self._cache.items(kind)]
        return [*self.valid_nodepools(), *nodes, *claims, *passed, *pods]

    # -- one batch -------------------------------------------------------------------------------------
    def _record(self, objects: Sequence[dict[str, Any]]) -> None:
        """Write the batch's snapshot objects as one v1 List (the catalog is the controller's ``--catalog``);
        a write that fails is logged, never the batch's end."""
        assert self._options.record_batches is not None
        self._recorded += 1
        path = self._options.record_batches / f"batch-{self._recorded:05d}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
        except OSError as err:
            log.warning(f"could not record the batch: {err}", path=str(path))

    def plan(self, batch: Mapping[str, dict[str, Any]], objects: Sequence[dict[str, Any]] | None = None
             ) -> tuple[BatchRecord, list[dict[str, Any]]]:
        """Solve one batch and name its NodeClaims; writes nothing (shadow mode stops here). Returns the record
        and the NodeClaim bodies ``provision`` would create. ``objects``: the snapshot objects to solve
        (default ``snapshot_objects(batch)``)."""
        started, cpu_started = time.monotonic(), time.process_time()
        catalog = self.unavailable.apply(self._catalog)
        ignored = [] if self._options.dra else sorted(k for k, p in batch.items() if has_dra_requirements(p))
        if ignored:
            self._warn_dra(ignored)
            batch = {k: p for k, p in batch.items() if k not in ignored}
            if objects is not None:
                objects = [o for o in objects if o.get("kind") != "Pod" or pod_key(o) not in ignored]
        objects = self.snapshot_objects(batch) if objects is None else objects
        if self._options.record_batches is not None:
            self._record(objects)
        snapshot = self._cache.snapshot(objects).with_catalog(catalog)
        result = solve(snapshot, SolveOptions(time_limit=self._options.solve_time_limit, seed=self._options.seed,
                                              workers=self._options.workers,
                                              preference_policy=self._options.preference_policy,
                                              preference_price=self._options.preference_price,
                                              gap=self._options.decision_gap))
        plan = result.plan
        if ignored:  # every pending pod accounted for: these with the reason their Event gives
            plan = plan.model_copy(update={"unschedulable": [
                *plan.unschedulable, *(UnschedulablePod(pod=k, reason=DRA_DISABLED) for k in ignored)]})
        record = BatchRecord(started=started, pods=len(batch) + len(ignored), plan=plan,
                             solve_seconds=time.monotonic() - started,
                             cpu_seconds=time.process_time() - cpu_started)
        log.info("solved batch", pods=len(batch), nodeclaims=len(plan.node_claims), cost=plan.cost.total,
                 greedy=plan.cost.greedy, lower_bound=plan.cost.lower_bound, status=plan.solver.status,
                 seconds=round(record.solve_seconds, 3), cpu_seconds=round(record.cpu_seconds, 3),
                 stages=stage_fields(plan.solver.stages))
        for item in plan.unschedulable:
            log.info(f"pod cannot be scheduled: {item.reason}", pod=item.pod)
        uid_of = {k: (p.get("metadata") or {}).get("uid", "") for k, p in batch.items()}
        pools = {np.name: np for np in snapshot.nodepools}
        pods = {p.key: p for p in snapshot.pods}
        bodies: list[dict[str, Any]] = []
        displaced = self.displaced() if plan.node_claims else set()
        for planned in plan.node_claims:
            uids = [uid_of[k] for k in planned.pods if k in uid_of]
            if uids:
                name = next(self._names(planned, uids, displaced))
                record.claims[name] = planned
                fallbacks = fallback_types(planned, pools[planned.node_pool], catalog,
                                           (pods[k] for k in planned.pods if k in pods))
                bodies.append(nodeclaim_body(planned, pools[planned.node_pool], name, uids, fallbacks))
        return record, bodies

    def _warn_dra(self, keys: Sequence[str]) -> None:
        if not self._warned_dra:
            self._warned_dra = True
            log.warning(f"DRA is disabled: {len(keys)} pod(s) with resource claims left to other provisioners "
                        f"({', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}); this is said once",
                        pod=keys[0] if keys else "")

    def provision(self, batch: Mapping[str, dict[str, Any]]) -> BatchRecord:
        """Plan one batch, then create its NodeClaims, join pods to in-flight ones and mark placed pods."""
        self._deciding.set()
        try:
            return self._provision(batch)
        finally:
            self._deciding.clear()
            self._cache.wake()  # a registration held back for this decision goes on now

    def _provision(self, batch: Mapping[str, dict[str, Any]]) -> BatchRecord:
        record, bodies = self.plan(batch)
        plan = record.plan
        uid_of = {k: (p.get("metadata") or {}).get("uid", "") for k, p in batch.items()}
        displaced = self.displaced() if bodies else set()  # once: the batch's own claims join no Node meanwhile
        for body in bodies:
            planned_name = body["metadata"]["name"]
            planned = record.claims[planned_name]
            name, created = self._create(body, planned, planned_pod_uids(body), displaced)
            if name != planned_name:
                record.claims[name] = record.claims.pop(planned_name)
            if created is not None:
                self._cache.upsert("NodeClaim", created)
                record.created.append(name)
        self._join_inflight(plan, uid_of, record)
        self._mark_placed(plan, batch, set(record.joined))
        self.history.append(record)
        return record

    def _mark_placed(self, plan: ProvisioningPlan, batch: Mapping[str, dict[str, Any]], joined: set[str]) -> None:
        """Nominate pods the plan put into room left on a running node to that node, so the scheduler retries
        them there (``nominate_into_room``), and annotate them with it (``nodeplan.io/placed``) to record the
        decision. Pods put on a NodeClaim whose Node has not registered are left to the lifecycle: it nominates
        them, and the node's untainting makes the scheduler retry them."""
        unregistered = {claim_node_name(c) for c in self._cache.items("NodeClaim")
                        if _claim_name(c) in joined and _condition_time(c, "Registered") is None}
        ours = planned_nodes(self._cache.items("NodeClaim"))
        placed = writes = 0
        for assignment in plan.existing_nodes:
            if assignment.name in unregistered:
                continue
            for key in assignment.pods:
                pod = batch.get(key) or {}
                meta = pod.get("metadata") or {}
                if not meta:
                    continue
                placed += 1
                writes += nominate_into_room(self._core, pod, assignment.name, ours.get(str(meta.get("uid")), ()))
                if (meta.get("annotations") or {}).get(PLACED_ANNOTATION) == assignment.name:
                    continue
                try:
                    self._core.patch_namespaced_pod(str(meta.get("name")), str(meta.get("namespace")),
                                                    {"metadata": {"annotations": {PLACED_ANNOTATION: assignment.name}}})
                except client.ApiException as err:
                    if err.status not in (404, 409, 422):
                        raise
        if placed:
            log.info(f"placed {placed} pod(s) into room on running nodes", nomination_writes=writes)

    def _join_inflight(self, plan: ProvisioningPlan, uid_of: Mapping[str, str], record: BatchRecord) -> None:
        """Pods the plan put on an in-flight NodeClaim join its planned pods: covered, and nominated to its
        node like the others, so the scheduler keeps their room there."""
        now = self._clock()
        inflight = {claim_node_name(c): c for c in self._cache.items("NodeClaim")
                    if reserving(c, now, self._options.bind_grace)}
        for assignment in plan.existing_nodes:
            claim = inflight.get(assignment.name)
            uids = [uid_of[k] for k in assignment.pods if k in uid_of]
            if claim is None or not uids:
                continue
            name = str(claim["metadata"]["name"])
            merged = sorted(set(planned_pod_uids(claim)) | set(uids))
            patch = {"metadata": {"annotations": {PODS_ANNOTATION: json.dumps(merged)}}}
            try:
                updated = self._custom.patch_cluster_custom_object(GROUP, VERSION, "nodeclaims", name, patch)
            except client.ApiException as err:
                if err.status != 404:
                    raise
                continue  # deleted meanwhile: its pods stay pending and the next batch plans them again
            self._cache.upsert("NodeClaim", cast(dict[str, Any], updated))
            record.joined[name] = list(assignment.pods)
            log.info(f"{len(uids)} pod(s) join the in-flight nodeclaim", nodeclaim=name,
                     nodepool=((claim.get("metadata") or {}).get("labels") or {}).get(wk.NODEPOOL, ""))

    def _names(self, planned: PlannedNodeClaim, uids: Sequence[str], displaced: Collection[Displacement]
               ) -> Iterator[str]:
        """The names this decision may take, in order: generation 0 first, skipping every name the cache shows
        taken by a claim that does not hold these pods (one initialized past the bind grace whose room the
        scheduler gave away, a failed launch, one being deleted). Without the skip, a pod stranded that way was
        planned onto the same offering again, its create hit the old claim (409, taken for success), and it was
        re-solved every batch without ever getting a node."""
        claims = {_claim_name(c): c for c in self._cache.items("NodeClaim")}
        now = self._clock()
        for generation in range(MAX_GENERATIONS):
            name = claim_name(planned.node_pool, planned, uids, generation)
            claim = claims.get(name)
            if claim is None or holds(claim, uids, now, self._options.bind_grace, displaced):
                yield name

    def _create(self, body: dict[str, Any], planned: PlannedNodeClaim, uids: Sequence[str],
                displaced: Collection[Displacement]) -> tuple[str, dict[str, Any] | None]:
        """Create the claim under the first name free for it: (name, the created object), or (name, None) when a
        claim of that name already holds these pods (a retried create: nothing to launch). A 409 on a name the
        cache did not know is read back, so a claim that holds nothing for these pods is never taken for
        success."""
        for name in self._names(planned, uids, displaced):
            body = {**body, "metadata": {**body["metadata"], "name": name}}
            try:
                created = cast(dict[str, Any], self._custom.create_cluster_custom_object(
                    GROUP, VERSION, "nodeclaims", body))
            except client.ApiException as err:
                if err.status != 409:
                    raise
                existing = self._read_claim(name)
                if existing is not None:
                    self._cache.upsert("NodeClaim", existing)
                    if holds(existing, uids, self._clock(), self._options.bind_grace, displaced):
                        log.info("nodeclaim already exists and holds its pods", nodeclaim=name,
                                 nodepool=planned.node_pool)
                        return name, None
                log.info("nodeclaim exists but holds nothing for these pods: next generation", nodeclaim=name,
                         nodepool=planned.node_pool)
                continue
            log.info("created nodeclaim", nodeclaim=name, nodepool=planned.node_pool,
                     instance_type=body["metadata"]["labels"].get(wk.INSTANCE_TYPE))
            return name, created
        raise RuntimeError(f"no free NodeClaim name for {planned.node_pool}/{planned.instance_type} after "
                           f"{MAX_GENERATIONS} generations")

    def _read_claim(self, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self._custom.get_cluster_custom_object(GROUP, VERSION, "nodeclaims", name))
        except client.ApiException as err:
            if err.status == 404:
                return None  # deleted since the 409
            raise


def parse_claim(raw: Mapping[str, Any]) -> NodeClaim:
    return NodeClaim.model_validate(raw)
