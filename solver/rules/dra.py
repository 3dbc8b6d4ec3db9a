"""Dynamic Resource Allocation (``resource.k8s.io/v1``): pods' device claims as admission, per-node device
dimensions, bundles and pins, so every stage (greedy, pricing, compact, proof, master, consolidation) keeps
them without knowing DRA.

A pod's claims are resolved as the scheduler's PreEnqueue / PreFilter read them (``model.dra.ClaimIndex``): a
claim that is missing, in use, or names a DeviceClass that does not exist leaves the pod pending with that
reason. An allocated claim pins its pods to the nodes its allocation reaches (``nodeSelector``: the node's
name for node-local devices) and asks for no new devices. An unallocated named claim shared by several
pending pods is allocated once, with its first consumer, and the others must follow it: those pods are one
*bundle* (one unit on one node), the shared claim's devices counted once. Every other claim (from a template,
or named and used by one pod) is a per-pod demand.

Demand is counted per *kind* — a request's class, selectors, mode, tolerations, capacity requests and admin
access — and supply per node: the free devices each kind may take there (``model.devices``: the instance
type's inventory for a new or in-flight node, the published slices of an initialized node, minus devices
allocated claims hold). The kube-scheduler allocates first fit, pod after pod, in a fixed device order, so a
plan must hold whatever order pods bind in. For each kind ρ present on a node with candidate set S_ρ, the
*order-proof* condition

    Σ over kinds ρ' whose candidates meet S_ρ of the devices they take  ≤  |S_ρ|

guarantees every slot of ρ finds a device whatever the order (a slot fails only when all of S_ρ is taken, and
only those kinds take from it). It is one knapsack dimension per (kind, neighbourhood) pair, its capacity
|S_ρ| on nodes where ρ has that neighbourhood and unbounded elsewhere. It is exact (also necessary) when the
kinds' candidate sets on a node are equal or disjoint — one GPU model per instance type, or different
drivers — and stricter than Kubernetes where they overlap partially (then the dimension applies even when ρ
itself is absent; ``conservative`` says where).

``All`` takes every candidate of the node, none may be in use: a per-node counter of capacity H where the
kind has candidates; an All unit takes H, a unit of any kind whose candidates meet its kind's on some node
takes 1, so the two never share a node. ``adminAccess`` takes nothing: admission only.

``firstAvailable`` (sub-requests tried in order, the first that can be satisfied wins): a node is admitted
when some alternative has enough candidates, and in every dimension the unit counts the most any alternative
takes there, since whichever one the scheduler picks must fit (safe; stricter than Kubernetes when
alternatives differ in count). The scheduler's Score for nodes where an earlier alternative fits is not
mirrored.

Multi-allocatable devices (consumable capacity): one allocation takes the request's capacity rounded up by
the device's policy (the largest over a kind's candidates); a share fails only when every candidate has less
left than it needs, so per capacity name Σ allocations × share ≤ Σ over the candidates (left − share) + share
holds in any order (exact for one shared device). Partitionable devices drawing on one counter set per node:
besides the device dimensions, per counter Σ allocations × the most a kind's candidates draw ≤ what the set
has left (exact when a kind's candidates draw alike). Several counter sets (a set per GPU, MIG): a blocking
bound per partition kind (``_Analysis._sets``), exact for one partition size on identical sets.

Constraints: a request a ``matchAttribute`` / ``distinctAttribute`` covers is a kind of its own (its devices
must have the attribute) whose devices come in *pieces*; per node, the candidates' groups by value give a
bound that holds in any binding order (``_Analysis._grouped``; exact slots when one piece size fills the
groups alone, and where every value is one group or all values differ). ``matchAttribute`` across requests
of different devices is modelled on nodes where those devices share one value (the constraint then holds
whatever the scheduler picks).

Not modelled yet, and left pending (or kept off the nodes concerned) with that reason rather than placed
invalidly (the verifier, ``solver/verify/dra.py``, allocates every plan concretely): ``firstAvailable`` with
an ``All`` alternative or under a constraint; a constraint on an ``All`` or adminAccess request, two on one
request, ``distinctAttribute`` across requests of different devices; ``matchAttribute`` across requests on
nodes where their devices carry several values; constraints over multi-allocatable devices;
multi-allocatable devices mixed with dedicated ones among a kind's candidates; a device drawing on several
counter sets; network-attached devices that are multi-allocatable, draw on counters or are selected per
device (not offered; the note says so), ``All`` over network-attached devices.

Network-attached devices (``allNodes`` / ``nodeSelector`` slices) are one pool for the whole batch
(``_Network``): a kind only they serve takes nothing on the node, needs a node reaching its slices, and is
reserved in queue order against everything that could take those devices; pods sharing such a claim need no
common node.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from math import gcd, lcm
from typing import TYPE_CHECKING

import numpy as np

from model import labels as wk
from model.allocator import share
from model.devices import (
    NodeDevice,
    candidate,
    counter_sets,
    device_type,
    inventory_devices,
    inventory_slices,
    network_pools,
    offered_slices,
    published_devices,
)
from model.dra import (
    ClaimIndex,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceConstraint,
    DeviceID,
    ExactRequest,
    ResolvedClaim,
    ResourceSlice,
    allocated_state,
    node_terms,
)
from model.dracel import SelectorCompileError, SelectorEvalError, compile_selector
from model.inflight import node_views
from model.pod import Pod
from model.requirements import Requirement, Requirements
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule, Why
from solver.rules.counters import NodeCounter

if TYPE_CHECKING:
    from solver.problem import Problem

NAME = "DRA resource claims"
DEVICES = "dra"
ALL = "dra-all"


@dataclass(frozen=True)
class Kind:
    """Requests that may take exactly the same devices anywhere (what CEL, taints and capacity see)."""

    device_class: str
    selectors: tuple[str, ...]
    all: bool
    admin: bool
    request: ExactRequest
    #: ``("match" | "distinct", attribute)`` when a claim constraint covers the request: its devices must have
    #: the attribute (plain requests of the class need not), and they come in *pieces* (``_Demand.pieces``)
    constraint: tuple[str, ...] = ()

    @classmethod
    def of(cls, request: ExactRequest, constraint: tuple[str, ...] = ()) -> Kind:
        return cls(request.device_class_name, request.selectors, request.allocation_mode == "All",
                   request.admin_access, request.model_copy(update={"count": 0}), constraint)

    def describe(self) -> str:
        what = f"class {self.device_class}"
        if self.selectors:
            what += " with " + " && ".join(self.selectors)
        if self.constraint:
            what += f" ({self.constraint[0]}Attribute {self.constraint[1]})"
        return what


@dataclass
class _Node:
    """One node's devices as the kinds see them."""

    devices: Sequence[NodeDevice]
    #: free (or, for admin kinds, any) candidates per kind, as device indices
    candidates: dict[Kind, frozenset[int]] = field(default_factory=dict)
    #: kinds whose selectors fail on a device here, with the CEL message
    errors: dict[Kind, str] = field(default_factory=dict)
    #: kinds some of whose candidates are devices this family does not model (shared / partitionable)
    unsupported: dict[Kind, str] = field(default_factory=dict)
    #: constrained kinds: free candidates per value of the constraint's attribute
    groups: dict[Kind, dict[str, int]] = field(default_factory=dict)
    #: ``All`` kinds with a candidate in use
    busy: set[Kind] = field(default_factory=set)
    #: kinds whose candidates here are all multi-allocatable: the capacity one allocation takes (name →
    #: amount, the largest over the candidates) and what the candidates still have of it
    shares: dict[Kind, dict[str, Fraction]] = field(default_factory=dict)
    room: dict[Kind, dict[str, Fraction]] = field(default_factory=dict)
    #: the one counter set partitions here draw from: counter → what is left; and what each kind's
    #: allocation takes from it (the most any of its candidates consumes)
    counters_left: dict[str, Fraction] = field(default_factory=dict)
    draws: dict[Kind, dict[str, Fraction]] = field(default_factory=dict)
    #: several counter sets (one per physical GPU, say): (pool, set) → counter → what is left / its full value,
    #: and each partition kind's free candidates per set
    set_left: dict[tuple[str, str], dict[str, Fraction]] = field(default_factory=dict)
    set_full: dict[tuple[str, str], dict[str, Fraction]] = field(default_factory=dict)
    per_set: dict[Kind, dict[tuple[str, str], int]] = field(default_factory=dict)


@dataclass
class _Demand:
    """What one unit of a class asks for: devices per ExactCount kind, All and admin kinds, ``firstAvailable``
    choices, and the constraints' pieces: devices of one constrained kind that must share a value of the
    attribute (match) or all differ in it (distinct), and matchAttribute across requests of several kinds."""

    count: dict[Kind, int] = field(default_factory=dict)
    all: list[Kind] = field(default_factory=list)
    admin: list[Kind] = field(default_factory=list)
    #: ``firstAvailable`` requests: (where from, [(kind, count)] in the order the allocator tries them)
    choices: list[tuple[str, list[tuple[Kind, int]]]] = field(default_factory=list)
    #: constrained kind → the device count of each piece (one constraint of one claim)
    pieces: dict[Kind, list[int]] = field(default_factory=dict)
    #: matchAttribute across several kinds: (where from, attribute, [(kind, count)])
    linked: list[tuple[str, str, tuple[tuple[Kind, int], ...]]] = field(default_factory=list)
    #: which claim and request each kind comes from (for reasons)
    source: dict[Kind, str] = field(default_factory=dict)
    #: kinds only network-attached devices serve (``_Network``): no devices on the node
    network: frozenset[Kind] = frozenset()

    @property
    def kinds(self) -> list[Kind]:
        return [*self.count, *self.all, *self.admin, *(k for _, alts in self.choices for k, _ in alts)]

    def uses(self, near: frozenset[Kind]) -> int:
        """Devices one unit may take from kinds in ``near``: its ExactCount requests there, and for each
        firstAvailable request the most any alternative there takes (whichever the scheduler picks)."""
        return int(self.weighted({k: Fraction(1) for k in near}))

    def weighted(self, weight: Mapping[Kind, Fraction]) -> Fraction:
        """What one unit takes of a resource each allocation of kind k takes ``weight[k]`` of (devices,
        capacity, counters), firstAvailable requests counting their largest alternative."""
        return sum((n * weight[k] for k, n in self.count.items() if k in weight), Fraction(0)) + sum(
            (max((n * weight[k] for k, n in alts if k in weight), default=Fraction(0)) for _, alts in self.choices),
            Fraction(0))

    def add(self, claim: str, spec: ClaimSpec) -> None:
        covering = _covering(spec)
        exact_kinds: dict[str, tuple[Kind, int]] = {}
        for request in spec.requests:
            alternatives = request.alternatives()
            if len(alternatives) > 1:
                alts = [(Kind.of(exact), exact.count) for _, exact in alternatives]
                for (ref, _), (kind, _) in zip(alternatives, alts, strict=True):
                    self.source.setdefault(kind, f"claim {claim} request {ref}")
                self.choices.append((f"claim {claim} request {request.name}", alts))
                continue
            ref, exact = alternatives[0]
            constraint = covering.get(request.name)
            kind = Kind.of(exact, _constraint_key(constraint) if constraint else ())
            if kind in self.network:
                continue
            self.source.setdefault(kind, f"claim {claim} request {ref}")
            exact_kinds[request.name] = (kind, exact.count)
            if kind.admin:
                self.admin.append(kind)
            elif kind.all:
                self.all.append(kind)
            else:
                self.count[kind] = self.count.get(kind, 0) + exact.count
        for constraint in spec.constraints:
            members: dict[Kind, int] = {}
            for name in _covered(constraint, spec):
                kind, count = exact_kinds[name]
                members[kind] = members.get(kind, 0) + count
            if len(members) == 1:
                ((kind, count),) = members.items()
                self.pieces.setdefault(kind, []).append(count)
            elif members:
                self.linked.append((f"claim {claim}", constraint.match_attribute, tuple(members.items())))


def _covered(constraint: DeviceConstraint, spec: ClaimSpec) -> list[str]:
    """The requests a constraint applies to (all of the claim's when it names none)."""
    return list(constraint.requests) if constraint.requests else [r.name for r in spec.requests]


def _covering(spec: ClaimSpec) -> dict[str, DeviceConstraint]:
    """Request name → the constraint covering it (``_not_modelled`` has ruled out two on one request)."""
    return {name: constraint for constraint in spec.constraints for name in _covered(constraint, spec)}


def _constraint_key(constraint: DeviceConstraint) -> tuple[str, ...]:
    if constraint.match_attribute:
        return ("match", constraint.match_attribute)
    return ("distinct", constraint.distinct_attribute)


def _not_modelled(spec: ClaimSpec) -> str:
    """The first feature of a claim this family does not model yet ("" when none)."""
    for request in spec.requests:
        if len(request.first_available) > 1 and any(s.allocation_mode == "All" for s in request.first_available):
            return f"firstAvailable with an allocationMode All sub-request (request {request.name})"
    by_name = {r.name: r for r in spec.requests}
    seen: set[str] = set()
    for constraint in spec.constraints:
        attribute = constraint.match_attribute or constraint.distinct_attribute
        what = f"{'matchAttribute' if constraint.match_attribute else 'distinctAttribute'} {attribute}"
        covered = _covered(constraint, spec)
        if any("/" in r or len(by_name[r].first_available) > 1 for r in covered):
            return f"{what} on a firstAvailable request"
        if seen & set(covered):
            return f"two constraints on one request ({', '.join(sorted(seen & set(covered)))})"
        seen.update(covered)
        exacts = [by_name[r].alternatives()[0][1] for r in covered]
        if any(e.allocation_mode == "All" or e.admin_access for e in exacts):
            return f"{what} on an allocationMode All or adminAccess request"
        if constraint.distinct_attribute and len({Kind.of(e) for e in exacts}) > 1:
            return f"{what} across requests that select different devices"
    return ""


def _uncompilable(spec: ClaimSpec, classes: Mapping[str, DeviceClass]) -> str:
    """The first selector of the claim's requests or their classes that does not compile ("" when all do):
    the kube-scheduler cannot allocate the claim anywhere."""
    for request in spec.requests:
        for ref, exact in request.alternatives():
            device_class = classes.get(exact.device_class_name)
            owners = [(f"device class {exact.device_class_name}", device_class.selectors if device_class else ()),
                      (f"request {ref}", exact.selectors)]
            for owner, expressions in owners:
                for expression in expressions:
                    try:
                        compile_selector(expression)
                    except SelectorCompileError as err:
                        return f"the CEL selector of {owner} does not compile ({err.cel_message})"
    return ""


def _pin(claim: ResolvedClaim) -> tuple[Requirements, ...]:
    """Where an allocated claim's devices are reachable (ORed node terms; none = everywhere)."""
    assert claim.claim is not None and claim.claim.allocation is not None
    allocation = claim.claim.allocation
    if allocation.node_name:
        return (Requirements(items=(Requirement(key=wk.HOSTNAME, operator="In", values=(allocation.node_name,)),)),)
    return allocation.node_terms()


class ResourceClaims(Rule):
    name = NAME
    reads = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice")
    counter_names = {DEVICES: "DRA devices", ALL: "DRA devices taken whole (allocationMode All)"}

    # --- 1. what the claims decide before packing -------------------------------------------------------

    def constrain(self, batch: BatchContext, pods: list[Pod]) -> list[Pod]:
        if not any(p.resource_claims for p in pods):
            return pods
        index = _index(batch)
        network = _network(batch, pods)
        out = []
        for pod in pods:
            if not pod.resource_claims or pod.rule_problem or pod.volume_problem:
                out.append(pod)
                continue
            problem, groups, reasons = "", [], []
            for claim in index.resolve(pod):
                if claim.problem:
                    problem = claim.problem
                elif claim.allocated:
                    pin = _pin(claim)
                    if pin:
                        groups.append(pin)
                        reasons.append(f"resourceclaim {claim.claim_key} is allocated (its devices' nodes)")
                elif claim.spec is None:
                    problem = f"claim {claim.ref.name} has nothing to allocate"
                elif missing := index.missing_classes(claim.spec):
                    problem = f"device class {missing[0]} not found (the pod waits for it)"
                elif broken := _uncompilable(claim.spec, index.classes):
                    problem = f"claim {claim.claim_key or claim.ref.name}: {broken}"
                elif feature := _not_modelled(claim.spec):
                    problem = f"claim {claim.claim_key or claim.ref.name}: DRA {feature} is not modelled yet"
                if problem:
                    break
            if not problem:
                problem, reach = network.reserve(pod, index)
                groups += reach
                reasons += [f"network-attached devices of {where} are reachable from these nodes"
                            for where in network.reach_names[:len(reach)]]
            if problem:
                out.append(pod.model_copy(update={"rule_problem": f"{NAME}: {problem}"}))
            elif groups:
                out.append(pod.model_copy(update={"rule_terms": pod.rule_terms + tuple(groups),
                                                  "rule_reasons": pod.rule_reasons + tuple(reasons)}))
            else:
                out.append(pod)
        return out

    def bundles(self, batch: BatchContext, pods: Sequence[Pod]) -> Mapping[str, Hashable]:
        """Pods sharing an unallocated named claim: one bundle per connected group (union-find)."""
        if not any(p.resource_claims for p in pods):
            return {}
        index = _index(batch)
        parent: dict[str, str] = {}

        def root(key: str) -> str:
            while parent.setdefault(key, key) != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        members: dict[str, list[str]] = {}
        network = _network(batch)
        for pod in pods:
            if pod.rule_problem or not pod.resource_claims:
                continue
            for claim in index.resolve(pod):
                if claim.shared and not claim.allocated and claim.claim_key and not network.serves(claim):
                    members.setdefault(claim.claim_key, []).append(pod.key)
        for keys in members.values():
            for key in keys[1:]:
                parent[root(key)] = root(keys[0])
        return {key: ("dra", root(key)) for keys in members.values() if len(keys) > 1 for key in keys}

    # --- 2. per-node device dimensions --------------------------------------------------------------------

    def counters(self, batch: BatchContext, classes: Sequence[PodClass]) -> Sequence[NodeCounter]:
        if not any(p.resource_claims for c in classes for p in c.pods):
            return ()
        analysis = _Analysis.build(batch, classes)
        batch.memo[NAME] = analysis
        return analysis.counters

    def admit(self, batch: BatchContext, problem: Problem) -> None:
        analysis = batch.memo.get(NAME)
        if not isinstance(analysis, _Analysis):
            return
        closed = problem.closed_because.setdefault(NAME, {})
        axes = [j for j, axis in enumerate(problem.axes) if axis.split(":", 1)[0] in self.counter_names]
        for c, demand in analysis.demands.items():
            # templates of one instance type share one _Node (every zone and capacity type): judged once
            refusals: dict[int, str] = {}
            for t, node in enumerate(analysis.template_nodes):
                if not problem.template_ok[c, t]:
                    continue
                if id(node) not in refusals:
                    refusals[id(node)] = analysis.refusal(c, demand, node)
                if why := refusals[id(node)]:
                    problem.template_ok[c, t] = False
                    closed.setdefault(c, why)
            for e, node in enumerate(analysis.existing_nodes):
                if problem.existing_ok[c, e] and (why := analysis.refusal(c, demand, node)):
                    problem.existing_ok[c, e] = False
                    closed.setdefault(c, why)
            if axes:  # one unit must fit the node's devices, capacity and counters at all
                short = ~np.all(problem.template_alloc[:, axes] >= problem.sizes[c, axes], axis=1)
                for tt in np.flatnonzero(short & problem.template_ok[c]):
                    problem.template_ok[c, tt] = False
                    closed.setdefault(c, "no instance type has enough free devices, device capacity or counters "
                                         "for one pod's claims together")
                short = ~np.all(problem.existing_free[:, axes] >= problem.sizes[c, axes], axis=1)
                problem.existing_ok[c, short] = False

    # --- 3. what the plan says ----------------------------------------------------------------------------

    def explain(self, why: Why) -> str:
        if why.pod.rule_problem.startswith(NAME):
            return why.pod.rule_problem
        reason = why.problem.closed_because.get(NAME, {}).get(why.c)
        if reason and not why.admitted and not any(why.problem.existing_ok[why.c]):
            return f"{NAME}: {reason}"
        return ""

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        analysis = batch.memo.get(NAME)
        return list(analysis.strict) if isinstance(analysis, _Analysis) else []

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        network = batch.memo.get("dra-network")
        if isinstance(network, _Network) and network.ignored and any(p.resource_claims for c in classes
                                                                      for p in c.pods):
            return [f"network-attached devices are not offered to {', '.join(sorted(network.ignored)[:3])} (only "
                    "its node-local devices are planned)"]
        return []


@dataclass
class _Network:
    """Network-attached devices (slices with ``allNodes`` / ``nodeSelector``): one pool for every node that
    reaches it, so what they give is counted across the batch, not per node.

    A request whose kind has network candidates and node-local ones somewhere is planned on node-local devices
    (if the scheduler gives it a network device instead, a local one is left idle) and counts as a possible
    user of the network devices it could take. A kind only network devices serve (``only``) takes nothing on
    the node: its pod needs a node that reaches every slice holding the kind's candidates, and pods get their
    devices in queue order while, for each such kind ρ, Σ over kinds whose network candidates meet ρ's of the
    devices they may take ≤ ρ's free network candidates — so they are found in any binding order (every
    possible user counted first). A pod past that stays pending, naming the kind. Network devices that are
    multi-allocatable or draw on counters, and per-device node selection, are not offered (``ignored``)."""

    devices: tuple[NodeDevice, ...]
    slices: Mapping[tuple[str, str], Sequence[ResourceSlice]]
    classes: Mapping[str, DeviceClass]
    local_types: tuple[tuple[Device, str], ...]
    candidates: dict[Kind, frozenset[int]] = field(default_factory=dict)
    only: set[Kind] = field(default_factory=set)
    tally: dict[Kind, int] = field(default_factory=dict)
    #: claims whose network devices are reserved (a shared claim: by its first consumer)
    reserved: set[str] = field(default_factory=set)
    ignored: set[str] = field(default_factory=set)
    reach_names: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, batch: BatchContext, pods: Sequence[Pod], index: ClaimIndex) -> _Network:
        snapshot = batch.snapshot
        held = allocated_state(snapshot.resource_claims).devices
        pools = network_pools(snapshot.resource_slices)
        devices = tuple(NodeDevice(pool.device_id(d), d) for pool in pools for d in pool.devices
                        if pool.device_id(d) not in held)
        local: dict[str, Device] = {}
        catalog = {it.name: it for it in snapshot.instance_types}
        for it in {t.instance_type.name: t.instance_type for t in batch.templates}.values():
            for item in inventory_devices(it, "node"):
                local.setdefault(device_type(item.device), item.device)
        for e in batch.existing:
            for item in (*published_devices(snapshot.resource_slices, e.name, e.node.labels),
                         *inventory_devices(catalog.get(e.node.labels.get(wk.INSTANCE_TYPE, "")), e.name)):
                local.setdefault(device_type(item.device), item.device)
        network = cls(devices=devices, slices={(p.driver, p.name): p.slices for p in pools}, classes=index.classes,
                      local_types=tuple((d, k) for k, d in local.items()))
        counted: set[tuple[str, Kind]] = set()
        for pod in pods:  # every possible user first, so the reservations below hold whatever binds first
            requests = network._requests(pod, index)
            for key, kind, count, _ in requests:
                if kind not in network.only and (key, kind) not in counted:
                    network.tally[kind] = network.tally.get(kind, 0) + count
            counted.update((key, kind) for key, kind, _, _ in requests)  # a shared claim counts once
        return network

    def _requests(self, pod: Pod, index: ClaimIndex) -> list[tuple[str, Kind, int, ExactRequest]]:
        """(claim, kind, count, request) of the pod's unallocated requests that network devices could serve."""
        out = []
        for claim in index.resolve(pod):
            if claim.allocated or claim.spec is None or claim.problem:
                continue
            key = claim.claim_key or f"{pod.key}/{claim.ref.name}"
            covering = _covering(claim.spec)
            for request in claim.spec.requests:
                for _, exact in request.alternatives():
                    constraint = covering.get(request.name)
                    kind = Kind.of(exact, _constraint_key(constraint) if constraint else ())
                    if not exact.admin_access and self._classify(kind, len(request.alternatives()) == 1):
                        out.append((key, kind, exact.count, exact))
        return out

    def _classify(self, kind: Kind, plain: bool) -> frozenset[int]:
        """The kind's free network candidates (empty: network devices play no part); ``only`` gains it when
        no node-local device anywhere is a candidate and the request is a plain ExactCount one."""
        if kind in self.candidates:
            return self.candidates[kind]
        device_class = self.classes.get(kind.device_class)
        found: list[int] = []
        if device_class is not None:
            try:
                found = [i for i, d in enumerate(self.devices) if candidate(kind.request, device_class, d.device)]
            except (SelectorEvalError, SelectorCompileError):
                found = []
        unusable = [i for i in found if self.devices[i].device.allow_multiple_allocations
                    or self.devices[i].device.consumes_counters
                    or any(s.per_device_node_selection for s in self.slices[self.devices[i].id.driver,
                                                                            self.devices[i].id.pool])]
        if unusable:
            self.ignored.add(kind.describe())
            found = []
        self.candidates[kind] = frozenset(found)
        if found and plain and not kind.all and not kind.constraint and device_class is not None and not any(
                candidate(kind.request, device_class, d, key) for d, key in self.local_types):
            self.only.add(kind)
        return self.candidates[kind]

    def serves(self, claim: ResolvedClaim) -> bool:
        """Do network devices serve every request of the claim (then its pods need not share a node)?"""
        if claim.spec is None or not claim.spec.requests:
            return False
        return all(len(r.alternatives()) == 1 and Kind.of(r.alternatives()[0][1]) in self.only
                   and not _covering(claim.spec) for r in claim.spec.requests)

    def reserve(self, pod: Pod, index: ClaimIndex) -> tuple[str, list[tuple[Requirements, ...]]]:
        """Take the pod's network devices (or say why not) and the nodes that reach them."""
        if not self.devices:
            return "", []
        wanted: dict[Kind, int] = {}
        taken: set[str] = set()
        reach: list[tuple[Requirements, ...]] = []
        self.reach_names = []
        for key, kind, count, exact in self._requests(pod, index):
            if exact.allocation_mode == "All":
                return f"{kind.describe()}: allocationMode All over network-attached devices is not modelled yet", []
            if kind not in self.only:
                continue
            terms = self._reach(kind)
            if terms is None:
                return (f"the network-attached devices of {kind.describe()} sit behind different node selectors "
                        "(not modelled yet)"), []
            if terms:
                reach.append(terms)
                self.reach_names.append(kind.describe())
            if key not in self.reserved:
                wanted[kind] = wanted.get(kind, 0) + count
                taken.add(key)
        if not wanted:
            return "", reach
        tally = dict(self.tally)
        for kind, count in wanted.items():
            tally[kind] = tally.get(kind, 0) + count
        for kind in self.only:
            own = self.candidates[kind]
            used = sum(n for k, n in tally.items() if self.candidates.get(k, frozenset()) & own)
            if used > len(own):
                return (f"the {len(own)} free network-attached device(s) of {kind.describe()} are all spoken for "
                        "by pods before it"), []
        self.tally = tally
        self.reserved |= taken
        return "", reach

    def _reach(self, kind: Kind) -> tuple[Requirements, ...] | None:
        """Node terms reaching every slice with a candidate of the kind (() = every node; None = selectors
        that differ)."""
        selectors = set()
        for i in self.candidates[kind]:
            device = self.devices[i]
            for item in self.slices[device.id.driver, device.id.pool]:
                if any(d.name == device.device.name for d in item.devices) and not item.all_nodes:
                    selectors.add(json.dumps(item.node_selector, sort_keys=True))
        if len(selectors) > 1:
            return None
        return node_terms(json.loads(next(iter(selectors)))) if selectors else ()


def _network(batch: BatchContext, pods: Sequence[Pod] = ()) -> _Network:
    """The batch's network-attached devices, analysed once (with the pods ``constrain`` sees)."""
    network = batch.memo.get("dra-network")
    if not isinstance(network, _Network):
        network = _Network.build(batch, pods, _index(batch))
        batch.memo["dra-network"] = network
    return network


def _index(batch: BatchContext) -> ClaimIndex:
    """The snapshot's claims, resolved once per batch."""
    index = batch.memo.get("dra-index")
    if not isinstance(index, ClaimIndex):
        index = batch.snapshot.claim_index()
        batch.memo["dra-index"] = index
    return index


@dataclass
class _Analysis:
    """Kinds, demands and per-node candidate sets of one batch, and the counters they give."""

    demands: dict[int, _Demand]
    template_nodes: list[_Node]
    existing_nodes: list[_Node]
    counters: list[NodeCounter] = field(default_factory=list)
    strict: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, batch: BatchContext, classes: Sequence[PodClass]) -> _Analysis:
        index = _index(batch)
        network = _network(batch)
        demands = {c.index: _class_demand(c, index, network) for c in classes
                   if not c.representative.rule_problem and any(p.resource_claims for p in c.pods)}
        demands = {c: d for c, d in demands.items() if d.kinds}
        kinds = sorted({k for d in demands.values() for k in d.kinds}, key=_kind_order)
        class_defs = index.classes
        held = allocated_state(batch.snapshot.resource_claims)
        by_type: dict[str, _Node] = {}
        template_nodes = []
        for t in batch.templates:
            it = t.instance_type
            if it.name not in by_type:
                by_type[it.name] = _node(inventory_devices(it, "node"), kinds, class_defs, frozenset(), demands,
                                         sets=counter_sets(inventory_slices(it, "node"), "node"))
            template_nodes.append(by_type[it.name])
        views = {v.node.name: v for v in node_views(batch.snapshot)}
        catalog = {it.name: it for it in batch.snapshot.instance_types}
        existing_nodes = []
        for e in batch.existing:
            view = views.get(e.name)
            slices, devices = offered_slices(batch.snapshot.resource_slices, e.name, e.node.labels,
                                             catalog.get(e.node.labels.get(wk.INSTANCE_TYPE, "")),
                                             view is not None and view.initialized and not view.inflight)
            existing_nodes.append(_node(devices, kinds, class_defs, held.devices, demands, held.consumed,
                                        counter_sets(slices, e.name)))
        analysis = cls(demands=demands, template_nodes=template_nodes, existing_nodes=existing_nodes)
        analysis._dimensions(kinds, classes)
        return analysis

    def _dimensions(self, kinds: Sequence[Kind], classes: Sequence[PodClass]) -> None:
        nodes = self.template_nodes + self.existing_nodes
        exact = [k for k in kinds if not k.all and not k.admin]
        # one dimension per (kind, neighbourhood) pair met on some node
        pairs: dict[tuple[Kind, frozenset[Kind]], None] = {}
        neighbourhoods: list[dict[Kind, frozenset[Kind]]] = []
        partial: set[str] = set()
        for node in nodes:
            seen: dict[Kind, frozenset[Kind]] = {}
            dedicated = [k for k in exact if k not in node.shares]
            for kind in dedicated:
                own = node.candidates.get(kind, frozenset())
                if not own:
                    continue
                near = frozenset(k for k in dedicated if node.candidates.get(k, frozenset()) & own)
                seen[kind] = near
                pairs.setdefault((kind, near), None)
                for other in near:
                    if node.candidates.get(other, frozenset()) != own:
                        partial.add(f"{kind.describe()} / {other.describe()}")
            neighbourhoods.append(seen)
        for n, (kind, near) in enumerate(pairs):
            uses = {c: d.uses(near) for c, d in self.demands.items()}
            uses = {c: u for c, u in uses.items() if u}
            if not uses:
                continue
            unbounded = 1 + sum(classes[c].demand * u for c, u in uses.items())
            caps = [len(node.candidates.get(kind, ())) if seen.get(kind) == near else unbounded
                    for node, seen in zip(nodes, neighbourhoods, strict=True)]
            split = len(self.template_nodes)
            self.counters.append(NodeCounter(
                name=f"{DEVICES}:{n}:{kind.describe()}", uses=uses, new_capacity=unbounded, per_unit=True,
                template_capacity=tuple(caps[:split]), existing_capacity=tuple(caps[split:])))
        self._grouped(nodes, neighbourhoods, classes)
        self._sets(nodes, classes)
        self._amounts(nodes, classes)
        if partial:
            shown = sorted(partial)
            self.strict.append("DRA devices: candidate sets overlap partially on some nodes ("
                               + "; ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
                               + "): each kind's order-proof limit applies even where it is absent")
        self._whole(kinds, classes, nodes)

    def _grouped(self, nodes: Sequence[_Node], neighbourhoods: Sequence[Mapping[Kind, frozenset[Kind]]],
                 classes: Sequence[PodClass]) -> None:
        """Pieces of a constrained kind ρ on a node whose candidates fall into groups by the attribute's value
        (sizes c_g), each piece needing q devices of one group (match) or of q different groups (distinct).

        A match piece fails only when every group has more than c_g − q of its devices taken, a distinct
        piece only when fewer than q groups have a device left, which takes the m − q + 1 smallest groups;
        so with T the devices the kinds meeting ρ take on the node (the piece's own included), any order of
        binding succeeds when T ≤ Σ_{c_g ≥ q} (c_g − q + 1) + q − 1 (match) or T ≤ q − 1 + the m − q + 1
        smallest c_g (distinct), for the largest q that fits the node (both caps shrink as q grows). When
        only ρ meets ρ and every match piece asks the same q, first fit fills a group before the next and
        the exact slots count Σ units ≤ Σ_g ⌊c_g / q⌋ replaces it."""
        wanted: dict[Hashable, dict[int, int]] = {}
        uses_of: dict[Hashable, dict[int, int]] = {}
        for n, node in enumerate(nodes):
            for kind, groups in node.groups.items():
                near = neighbourhoods[n].get(kind)
                if near is None or kind in node.unsupported:
                    continue
                mode = kind.constraint[0]
                sizes = sorted(groups.values())
                fits = [q for d in self.demands.values() for q in d.pieces.get(kind, ())
                        if (q <= sizes[-1] if mode == "match" else q <= len(sizes))]
                if not fits:
                    continue
                q = max(fits)
                if mode == "match" and near == {kind} and all(
                        set(d.pieces.get(kind, ())) <= {q} and not any(k == kind for _, _, m in d.linked for k, _ in m)
                        for d in self.demands.values()):
                    key: Hashable = ("slots", kind, q)
                    uses_of[key] = {c: len(d.pieces[kind]) for c, d in self.demands.items() if d.pieces.get(kind)}
                    wanted.setdefault(key, {})[n] = sum(size // q for size in sizes)
                    continue
                if mode == "match":
                    cap = sum(size - q + 1 for size in sizes if size >= q) + q - 1
                else:
                    cap = q - 1 + sum(sizes[:len(sizes) - q + 1])
                if cap >= sum(sizes):
                    continue  # no stricter than the device count (one group, or all values distinct)
                key = (mode, kind, near)
                uses_of[key] = {c: u for c, d in self.demands.items() if (u := d.uses(near))}
                wanted.setdefault(key, {})[n] = cap
                if near != {kind}:
                    self.strict.append(f"DRA devices: {kind.describe()} shares devices with other requests; its "
                                       "pieces count every device they take (any binding order)")
        self._linked(nodes, neighbourhoods, wanted, uses_of)
        self._add_counters(wanted, uses_of, nodes, classes)

    def _linked(self, nodes: Sequence[_Node], neighbourhoods: Sequence[Mapping[Kind, frozenset[Kind]]],
                wanted: dict[Hashable, dict[int, int]], uses_of: dict[Hashable, dict[int, int]]) -> None:
        """matchAttribute across requests of kinds ρ_1..ρ_r (q_j devices each, one value for all) on a node
        whose devices carry several values. A value v is usable when every ρ_j has q_j free there; a piece
        fails only when each usable value is broken — some ρ_j has more than c_jv − q_j of its devices there
        taken, at least β_j = min_v (c_jv − q_j + 1) — so fewer than |usable| breaks, Σ_j (T_j − q_j) / β_j <
        |usable| with T_j the devices the kinds meeting ρ_j take, holds in any binding order. When only these
        kinds' candidates are disjoint, no other request takes them and every piece asks the same, first fit
        fills a value before the next:
        Σ pieces ≤ Σ_v min_j ⌊c_jv / q_j⌋, exactly."""
        shapes = {(attribute, members) for d in self.demands.values() for _, attribute, members in d.linked}
        pieces_of = {shape: {c: sum(1 for _, a, m in d.linked if (a, m) == shape) for c, d in self.demands.items()}
                     for shape in shapes}
        for n, node in enumerate(nodes):
            for attribute, members in shapes:
                groups = [node.groups.get(kind, {}) for kind, _ in members]
                values = set().union(*groups)
                if len(values) < 2 or any(kind in node.unsupported for kind, _ in members):
                    continue
                usable = [v for v in values if all(g.get(v, 0) >= q for g, (_, q) in zip(groups, members,
                                                                                           strict=True))]
                near = [neighbourhoods[n].get(kind) for kind, _ in members]
                if not usable or any(nb is None for nb in near):
                    continue
                own = {kind for kind, _ in members}
                pieces = pieces_of[attribute, members]
                alone = all(nb == frozenset({kind}) for nb, (kind, _) in zip(near, members, strict=True)) and all(
                    not own & {*d.all, *d.admin, *(k for _, a in d.choices for k, _ in a)}
                    and {k: v for k, v in d.count.items() if k in own} == {
                        k: q * pieces[c] for k, q in members if pieces[c]}
                    for c, d in self.demands.items())
                if alone:
                    key: Hashable = ("linked-slots", attribute, members)
                    uses_of[key] = {c: p for c, p in pieces.items() if p}
                    wanted.setdefault(key, {})[n] = sum(min(g.get(v, 0) // q for g, (_, q) in
                                                            zip(groups, members, strict=True)) for v in usable)
                    continue
                beta = [min(g[v] - q + 1 for v in usable) for g, (_, q) in zip(groups, members, strict=True)]
                scale = lcm(*beta)
                key = ("linked", attribute, members, tuple(near), scale)
                uses_of[key] = {c: u for c, d in self.demands.items()
                                if (u := sum(scale // b * d.uses(nb) for b, nb in zip(beta, near, strict=True)
                                             if nb is not None))}
                wanted.setdefault(key, {})[n] = scale * len(usable) + sum(
                    q * scale // b for b, (_, q) in zip(beta, members, strict=True)) - 1
                self.strict.append(f"DRA devices: matchAttribute {attribute} across requests on nodes whose devices "
                                   "carry several values: a bound that holds in any binding order")

    def _add_counters(self, wanted: Mapping[Hashable, Mapping[int, int]], uses_of: Mapping[Hashable, dict[int, int]],
                      nodes: Sequence[_Node], classes: Sequence[PodClass]) -> None:
        """One per-unit counter per key: its capacity on the nodes listed, unbounded on the others."""
        split = len(self.template_nodes)
        for key, caps in wanted.items():
            uses = uses_of[key]
            if not uses:
                continue
            unbounded = 1 + sum(classes[c].demand * u for c, u in uses.items())
            per_node = [max(caps[n], 0) if n in caps else unbounded for n in range(len(nodes))]
            assert isinstance(key, tuple)
            self.counters.append(NodeCounter(
                name=f"{DEVICES}:{key[0]}:{len(self.counters)}:{_label(key[1])}", uses=uses,
                new_capacity=unbounded, per_unit=True,
                template_capacity=tuple(per_node[:split]), existing_capacity=tuple(per_node[split:])))

    def _sets(self, nodes: Sequence[_Node], classes: Sequence[PodClass]) -> None:
        """Partitions on a node with several counter sets (MIG: a set per GPU), for each partition kind ρ.

        A set blocks ρ when a counter k it needs has less than need_ρ[k] left or ρ's candidates in it are all
        taken. Measure an allocation of kind κ by w_κ = max(max_k need_κ[k] / V_k, [κ may take a candidate of
        ρ] / M) (V_k the largest set's value of k, M the most free candidates of ρ in one set): an allocation
        lies in one set, so the allocations in a set weigh at least each measure's use there, and a set that
        blocks ρ carries θ_s = min(the smallest achievable use of k above left_k − need_ρ[k] (uses are
        multiples of the gcd of the draws), over V_k; free candidates / M). A piece of ρ fails only if the
        others weigh Σ_s θ_s, so Σ units' weight < Σ_s θ_s + w_ρ holds in any binding order: exact for one
        partition size on identical sets, conservative (said) when sizes mix."""
        wanted: dict[Hashable, dict[int, int]] = {}
        uses_of: dict[Hashable, dict[int, int]] = {}
        for n, node in enumerate(nodes):
            if not node.set_left:
                continue
            for kind, per_set in node.per_set.items():
                if kind in node.unsupported or not per_set or kind.admin:
                    continue
                need = {k: v for k, v in node.draws[kind].items() if v > 0}
                full = {k: max((values.get(k, Fraction(0)) for values in node.set_full.values()),
                               default=Fraction(0)) for k in need}
                if any(v <= 0 for v in full.values()):
                    continue  # no set has the counter: no candidate can be allocated (refused by the counts)
                most = max(per_set.values())
                own = node.candidates.get(kind, frozenset())
                weight: dict[Kind, Fraction] = {}
                for other, draws in node.draws.items():
                    w = max((draws.get(k, Fraction(0)) / full[k] for k in need), default=Fraction(0))
                    if node.candidates.get(other, frozenset()) & own:
                        w = max(w, Fraction(1, most))
                    if w:
                        weight[other] = w
                for other, found in node.candidates.items():  # dedicated devices that are candidates of ρ too
                    if other not in weight and found & own and not other.admin:
                        weight[other] = Fraction(1, most)
                step = {k: _gcd(*(d[k] for d in node.draws.values() if d.get(k))) for k in need}
                theta = Fraction(0)
                for set_key, left in node.set_left.items():
                    blocks = [Fraction(per_set.get(set_key, 0), most)]
                    for k, amount in need.items():
                        slack = left.get(k, Fraction(0)) - amount
                        blocks.append(Fraction(0) if slack < 0 else (slack // step[k] + 1) * step[k] / full[k])
                    theta += min(blocks)
                raw = {c: u for c, d in self.demands.items() if (u := d.weighted(weight))}
                cap = theta + weight[kind]
                scale = lcm(*(v.denominator for v in (*raw.values(), cap)))
                if scale > 10 ** 6:
                    node.unsupported[kind] = "partitions whose counters and counts have no small common unit"
                    continue
                key = ("sets", kind, _signature(weight), scale)
                uses_of[key] = {c: int(u * scale) for c, u in raw.items()}
                wanted.setdefault(key, {})[n] = int(cap * scale) - 1
                if len(weight) > 1:
                    self.strict.append(f"DRA devices: partitions of several sizes share counter sets with "
                                       f"{kind.describe()}: the per-set blocking bound is conservative")
        self._add_counters(wanted, uses_of, nodes, classes)

    def _amounts(self, nodes: Sequence[_Node], classes: Sequence[PodClass]) -> None:
        """Capacity of multi-allocatable devices and counters of partitionable ones, as dimensions: on a node,
        Σ allocations × what each takes ≤ what is left (for shared devices: of the devices a kind may use,
        less one allocation, plus one — a share fails only when every candidate has less than it needs).
        One dimension per (resource, what each neighbouring kind takes) met on some node, unbounded
        elsewhere."""
        wanted: dict[Hashable, dict[int, Fraction]] = {}  # dimension → node index → capacity
        weights: dict[Hashable, dict[Kind, Fraction]] = {}
        for n, node in enumerate(nodes):
            for kind, take in node.shares.items():
                own = node.candidates.get(kind, frozenset())
                if not own:
                    continue
                near = {k: node.shares[k] for k in node.shares if node.candidates.get(k, frozenset()) & own}
                for name in take:
                    weight = {k: t.get(name, Fraction(0)) for k, t in near.items()}
                    key: Hashable = ("capacity", kind, name, _signature(weight))
                    weights[key] = weight
                    wanted.setdefault(key, {})[n] = node.room[kind][name]
            if node.counters_left and node.draws:
                for name, left in node.counters_left.items():
                    weight = {k: d.get(name, Fraction(0)) for k, d in node.draws.items()}
                    key = ("counter", name, _signature(weight))
                    weights[key] = weight
                    wanted.setdefault(key, {})[n] = left
        split = len(self.template_nodes)
        for j, (key, caps) in enumerate(wanted.items()):
            weight = weights[key]
            raw = {c: d.weighted(weight) for c, d in self.demands.items()}
            raw = {c: u for c, u in raw.items() if u}
            if not raw:
                continue
            scale = lcm(*(v.denominator for v in (*raw.values(), *caps.values())))
            uses = {c: int(u * scale) for c, u in raw.items()}
            unbounded = 1 + sum(classes[c].demand * u for c, u in uses.items())
            per_node = [int(caps[n] * scale) if n in caps else unbounded for n in range(len(nodes))]
            per_node = [max(v, 0) for v in per_node]
            assert isinstance(key, tuple)
            self.counters.append(NodeCounter(
                name=f"{DEVICES}:{key[0]}:{j}:{key[-2]}", uses=uses, new_capacity=unbounded, per_unit=True,
                template_capacity=tuple(per_node[:split]), existing_capacity=tuple(per_node[split:])))

    def _whole(self, kinds: Sequence[Kind], classes: Sequence[PodClass], nodes: Sequence[_Node]) -> None:
        """``All`` kinds: a node holds one All unit of the kind, or units whose kinds meet it, not both."""
        for n, kind in enumerate(k for k in kinds if k.all and not k.admin):
            meets = {k for node in nodes if node.candidates.get(kind) for k in node.candidates
                     if k != kind and not k.admin and node.candidates[k] & node.candidates[kind]}
            neighbours = {c for c, d in self.demands.items() if any(k in meets for k in d.kinds)}
            owners = {c for c, d in self.demands.items() if kind in d.all}
            heavy = 1 + sum(classes[c].demand for c in neighbours | owners)
            uses = {c: heavy for c in owners} | {c: 1 for c in neighbours - owners}
            unbounded = 1 + sum(classes[c].demand * u for c, u in uses.items())
            caps = [heavy if node.candidates.get(kind) else unbounded for node in nodes]
            split = len(self.template_nodes)
            self.counters.append(NodeCounter(
                name=f"{ALL}:{n}:{kind.describe()}", uses=uses, new_capacity=unbounded, per_unit=True,
                template_capacity=tuple(caps[:split]), existing_capacity=tuple(caps[split:])))
            if any(neighbours - owners):
                self.strict.append(f"DRA devices: {kind.describe()} (allocationMode All) keeps every pod whose "
                                   "devices could meet it on some node off its nodes")

    def refusal(self, c: int, demand: _Demand, node: _Node) -> str:
        """Why a unit of class ``c`` cannot have its devices on ``node`` ("" when it can)."""
        for kind in demand.kinds:
            source = demand.source[kind]
            if kind in node.errors:
                return (f"{source}: the CEL selector fails on a device ({node.errors[kind]}); the kube-scheduler "
                        "aborts the pod's scheduling there")
            if kind in node.unsupported:
                return f"{source}: {node.unsupported[kind]} is not modelled yet"
            have = len(node.candidates.get(kind, ()))
            if kind in demand.all and (not have or kind in node.busy):
                return f"{source}: allocationMode All needs every device of {kind.describe()} free"
            if kind.constraint and (why := _piece_refusal(kind, demand.pieces.get(kind, ()), node)):
                return f"{source}: {why}"
            if kind in demand.count or kind in demand.admin:
                need = demand.count.get(kind, 0)
                if (need and have < need) or (kind in demand.admin and not have):
                    return f"no instance type offers {max(need, 1)} free device(s) of {kind.describe()} ({source})"
        for source, attribute, members in demand.linked:
            groups = [node.groups.get(k, {}) for k, _ in members]
            if not set.intersection(*({v for v, n in g.items() if n >= q} for g, (_, q) in zip(groups, members,
                                                                                                  strict=True))):
                return f"{source}: no {attribute} value has enough free devices for every request (matchAttribute)"
        for source, alts in demand.choices:
            if not any(len(node.candidates.get(k, ())) >= n for k, n in alts):
                wanted = " or ".join(f"{n} of {k.describe()}" for k, n in alts)
                return f"no instance type offers free devices for any alternative of {source} ({wanted})"
        return ""


def _label(what: object) -> str:
    return what.describe() if isinstance(what, Kind) else str(what)


def _gcd(*values: Fraction) -> Fraction:
    """The largest amount every value is a whole multiple of (1 when none)."""
    out = Fraction(0)
    for v in values:
        out = Fraction(gcd(out.numerator * v.denominator, v.numerator * out.denominator),
                       out.denominator * v.denominator)
    return out or Fraction(1)


def _signature(weight: Mapping[Kind, Fraction]) -> tuple[tuple[Kind, Fraction], ...]:
    return tuple(sorted(weight.items(), key=lambda kv: _kind_order(kv[0])))


def _kind_order(kind: Kind) -> tuple[str, tuple[str, ...], bool, bool, str]:
    return kind.device_class, kind.selectors, kind.all, kind.admin, repr(kind.request)


def _class_demand(pod_class: PodClass, index: ClaimIndex, network: _Network) -> _Demand:
    """One unit's devices: each pod's own claims, each shared claim once; requests network-attached devices
    serve take nothing on the node."""
    demand = _Demand(network=frozenset(network.only))
    seen: set[str] = set()
    for pod in (pod_class.pods if pod_class.bundle else pod_class.pods[:1]):
        for claim in index.resolve(pod):
            if claim.allocated or claim.spec is None or claim.problem:
                continue
            key = claim.claim_key or f"{pod.key}/{claim.ref.name}"
            if claim.claim_key and claim.claim_key in seen:
                continue
            seen.add(key)
            demand.add(claim.claim_key or f"{pod.namespace}/{pod.name}:{claim.ref.name}", claim.spec)
    return demand


def _shared(node: _Node, kind: Kind, devices: Sequence[NodeDevice], found: list[int],
            consumed: Mapping[DeviceID, Mapping[str, Fraction]]) -> list[int]:
    """Multi-allocatable candidates: what one allocation of ``kind`` takes (``model.allocator.share``: the
    request rounded up by each device's policy — the largest over the devices, so every device is counted as
    giving the most) and what the devices have left. Devices that cannot take one allocation are no
    candidates. A mix with dedicated devices, devices with counters or capacity names that differ between
    devices is not modelled."""
    items = [devices[i].device for i in found]
    if any(not d.allow_multiple_allocations or d.consumes_counters for d in items) or \
            len({tuple(sorted(d.capacity)) for d in items}) > 1:
        node.unsupported[kind] = "multi-allocatable devices mixed with other devices"
        return found
    keep: list[int] = []
    take: dict[str, Fraction] = {}
    for i in found:
        already = consumed.get(devices[i].id, {})
        got = share(kind.request.model_copy(update={"count": 1}), devices[i].device, already)
        if got is None:
            continue
        keep.append(i)
        for name, amount in got:
            take[name] = max(take.get(name, Fraction(0)), amount)
    node.shares[kind] = take
    node.room[kind] = {name: sum((devices[i].device.capacity[name].amount
                                  - Fraction(consumed.get(devices[i].id, {}).get(name, 0)) - amount for i in keep),
                                 Fraction(0)) + amount for name, amount in take.items()}
    return keep


def _partitions(node: _Node, kind: Kind, devices: Sequence[NodeDevice], found: list[int],
                in_use: frozenset[DeviceID], counter_sets: Mapping[tuple[str, str], Mapping[str, Fraction]]) -> None:
    """Candidates that draw on counter sets (partitionable devices). One set per node: its counters bound the
    node (``counters_left``). Several (a set per physical GPU): each device must draw on exactly one, and the
    sets' counters (``set_left``) feed the blocking dimension of ``_Analysis._sets``. What in-use devices draw
    is gone either way."""
    sets = {(d.id.pool, use.counter_set) for d in devices for use in d.device.consumes_counters}
    if len(sets) > 1 and any(len(d.device.consumes_counters) > 1 for d in devices):
        node.unsupported[kind] = "partitionable devices each drawing on several counter sets"
        return
    if len(sets) == 1 and not node.counters_left:
        ((pool, name),) = sets
        node.counters_left = _set_values(devices, in_use, counter_sets.get((pool, name), {}), (pool, name))
    elif len(sets) > 1 and not node.set_left:
        for key in sorted(sets):
            node.set_full[key] = dict(counter_sets.get(key, {}))
            node.set_left[key] = _set_values(devices, in_use, counter_sets.get(key, {}), key)
    draws: dict[str, Fraction] = {}
    for i in found:
        for use in devices[i].device.consumes_counters:
            for name, amount in use.amounts().items():
                draws[name] = max(draws.get(name, Fraction(0)), amount)
    node.draws[kind] = draws


def _set_values(devices: Sequence[NodeDevice], in_use: frozenset[DeviceID], values: Mapping[str, Fraction],
                key: tuple[str, str]) -> dict[str, Fraction]:
    """A counter set's counters less what devices in use draw on it."""
    left = dict(values)
    for d in devices:
        if d.id in in_use:
            for use in d.device.consumes_counters:
                if (d.id.pool, use.counter_set) != key:
                    continue
                for name, amount in use.amounts().items():
                    left[name] = left.get(name, Fraction(0)) - amount
    return left


def _node(devices: Sequence[NodeDevice], kinds: Sequence[Kind], classes: Mapping[str, DeviceClass],
          in_use: frozenset[DeviceID], demands: Mapping[int, _Demand],
          consumed: Mapping[DeviceID, Mapping[str, Fraction]] | None = None,
          sets: Mapping[tuple[str, str], Mapping[str, Fraction]] | None = None) -> _Node:
    node = _Node(devices=devices)
    consumed = consumed or {}
    keys = [device_type(d.device) for d in devices]
    for kind in kinds:
        device_class = classes.get(kind.device_class)
        if device_class is None:
            continue
        found: list[int] = []
        try:
            for i, item in enumerate(devices):
                if candidate(kind.request, device_class, item.device, keys[i]):
                    found.append(i)
        except (SelectorEvalError, SelectorCompileError) as err:
            node.errors[kind] = str(err)
            continue
        if kind.constraint:  # the attribute must exist on every device of a constrained request
            found = [i for i in found if devices[i].device.attribute(kind.constraint[1]) is not None]
        multi = [i for i in found if devices[i].device.allow_multiple_allocations]
        if multi and kind.constraint:
            node.unsupported[kind] = f"{kind.constraint[0]}Attribute over multi-allocatable devices"
        elif multi:
            found = _shared(node, kind, devices, found, consumed)
        elif any(devices[i].device.consumes_counters for i in found):
            _partitions(node, kind, devices, found, in_use, sets or {})
        free = [i for i in found if devices[i].id not in in_use]
        if kind.all and len(free) < len(found):
            node.busy.add(kind)
        node.candidates[kind] = frozenset(found if kind.admin else free)
        if kind.constraint:
            node.groups[kind] = _values(devices, node.candidates[kind], kind.constraint[1])
        if node.set_left and kind in node.draws:
            per_set: dict[tuple[str, str], int] = {}
            for i in node.candidates[kind]:
                for use in devices[i].device.consumes_counters:
                    per_set[(devices[i].id.pool, use.counter_set)] = per_set.get(
                        (devices[i].id.pool, use.counter_set), 0) + 1
            node.per_set[kind] = per_set
    return node


def _values(devices: Sequence[NodeDevice], found: frozenset[int], attribute: str) -> dict[str, int]:
    """Free candidates per value of ``attribute`` (JSON-spelled, so ``1`` and ``"1"`` stay apart)."""
    out: dict[str, int] = {}
    for i in found:
        value = json.dumps(devices[i].device.attribute(attribute))
        out[value] = out.get(value, 0) + 1
    return out


def _piece_refusal(kind: Kind, pieces: Sequence[int], node: _Node) -> str:
    """Why a piece of a constrained kind finds no devices on ``node`` whatever else is there ("" when it can)."""
    groups = node.groups.get(kind, {})
    mode, attribute = kind.constraint
    for q in pieces:
        if mode == "match" and not any(n >= q for n in groups.values()):
            return f"no {attribute} value has {q} free device(s) of {kind.describe()} (matchAttribute)"
        if mode == "distinct" and len(groups) < q:
            return f"fewer than {q} distinct {attribute} values among the free devices of {kind.describe()}"
    return ""
