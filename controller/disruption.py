"""Consolidation in the controller: ``solver.disruption.consolidate`` decides, this module carries it out safely.

Every ``interval`` seconds, and only while the cluster is quiet (no pending pod the last batch could have
placed, no NodeClaim launching or terminating: one action at a time, as Karpenter), one pass:

1. snapshot (the provisioner's view plus PodDisruptionBudgets) → ``consolidate`` within ``time_limit``;
2. if the plan removes nodes, wait ``validation_wait`` (Karpenter: 15 s) and re-check the decision against
   fresh state as Karpenter does (``controller.disruption_validation``): every removed node still a candidate,
   the pools' budgets and the PDBs' allowances still covering it, and every pod now on a removed node still
   placed — where the plan put it or, if an arrival took that room or the pod is new, wherever else it fits
   — with the same replacements. Otherwise abandon;
3. taint the candidates ``karpenter.sh/disrupted:NoSchedule``; create the replacement NodeClaims (the
   provisioner's body, names derived from the decision) and wait until they are Initialized;
4. delete the candidates' NodeClaims: their finalizer drains each node through the Eviction API, PDB refusals
   retried (``controller.termination``, ``controller.drain``), then the instance goes.

A replacement that fails to launch or is not Initialized within ``replacement_timeout`` abandons the decision:
candidates untainted, replacements deleted, nothing evicted. A disrupted taint left on a node whose NodeClaim is
not being deleted (a pass interrupted by a crash) is removed at the start of the next pass.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.batch import is_bound, is_daemon_or_static, is_terminal, pod_key
from controller.cache import ClusterCache
from controller.conditions import conditions_of, is_true
from controller.disruption_validation import Revalidation, revalidate
from controller.drain import Drainer
from controller.events import EventRecorder
from controller.logs import get_logger, stage_fields
from controller.metrics import Metrics
from controller.offerings import UnavailableOfferings
from controller.provisioner import GROUP, VERSION, Provisioner, claim_name, claim_node_name, nodeclaim_body
from controller.rest import CoreApi
from controller.steering import STEERING_TAINT, KubeSteerer, Steerer, Steering, is_steering
from model import labels as wk
from model.disruption import DisruptionPlan
from model.instancetype import InstanceType
from model.nodepool import NodePool
from model.snapshot import Snapshot
from solver.disruption.candidates import ClusterState, analyse
from solver.disruption.consolidate import ConsolidateOptions
from solver.disruption.plan import ConsolidationResult, consolidate, why_nothing
from solver.disruption.target import Target

log = get_logger(__name__)

PLURAL = "nodeclaims"
#: on replacement NodeClaims: the nodes they replace (for people reading ``kubectl get nodeclaims -o yaml``)
REPLACES_ANNOTATION = "nodeplan.io/replaces"
#: how long a pass that found nothing stands while the cluster does not change (Karpenter's ConsolidationState
#: resets after five minutes, for what it cannot watch: prices, instance type availability)
CONSOLIDATED_FOR = 300.0
#: the line of a pass skipped because the last pass found nothing in this very cluster (``_consolidated``)
CONSOLIDATED = "consolidated: nothing changed since the last pass"
#: blocked-candidate reasons worth an Event (the others — consolidateAfter, not initialized — are transient)
_ACTIONABLE = ("node has", "pod ", "PodDisruptionBudget", "nominated")


@dataclass
class DisruptionOptions:
    enabled: bool = True
    interval: float = 10.0
    #: seconds ``consolidate`` may spend on one decision
    time_limit: float = 15.0
    #: wait between deciding and re-checking the decision (Karpenter: 15 s)
    validation_wait: float = 15.0
    #: replacements not Initialized by then abandon the decision
    replacement_timeout: float = 300.0
    seed: int = 0
    workers: int = 2
    #: evict a decision's pods one destination at a time, the other nodes fenced (``controller.steering``)
    steer: bool = True
    spot_to_spot: bool = False
    #: a decision stops once certified within this relative gap (``ConsolidateOptions.gap``; the provisioner's
    #: ``--decision-gap``)
    decision_gap: float = 0.02


# -- what a pass writes -----------------------------------------------------------------------------------
class Writer(Protocol):
    def taint(self, node: str) -> None: ...

    def untaint(self, node: str) -> None: ...

    def create_claim(self, body: dict[str, Any]) -> None:
        """Create a NodeClaim; one that already exists (a retried decision) is not an error."""
        ...

    def delete_claim(self, name: str) -> None:
        """Delete a NodeClaim (its finalizer drains the node); one already gone is not an error."""
        ...


class KubeWriter:
    """``Writer`` against the API server; writes are reflected in the cache at once."""

    def __init__(self, api: client.ApiClient, cache: ClusterCache) -> None:
        self._core = CoreApi(api)
        self._custom = client.CustomObjectsApi(api)
        self._cache = cache

    def set_taints(self, node: str, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
        for attempt in range(5):
            try:
                raw = cast(dict[str, Any], self._core.read_node(node).json())
            except client.ApiException as err:
                if err.status == 404:
                    return
                raise
            current = (raw.get("spec") or {}).get("taints")
            wanted = edit(list(current or []))
            if wanted == (current or []):
                return
            patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": raw["metadata"]["resourceVersion"]},
                     {"op": "replace" if current is not None else "add", "path": "/spec/taints", "value": wanted}]
            try:
                updated = self._core.patch_node(node, patch)
            except client.ApiException as err:
                if err.status in (409, 422) and attempt < 4:
                    continue  # changed under us: read again
                if err.status == 404:
                    return
                raise
            self._cache.upsert("Node", cast(dict[str, Any], updated.json()))
            return

    def taint(self, node: str) -> None:
        self.set_taints(node, lambda taints: taints if any(_is_disrupted(t) for t in taints)
                         else [*taints, {"key": wk.DISRUPTED_TAINT, "effect": "NoSchedule"}])
        log.info(f"tainted node {wk.DISRUPTED_TAINT}:NoSchedule", node=node)

    def untaint(self, node: str) -> None:
        self.set_taints(node, lambda taints: [t for t in taints if not _is_disrupted(t)])
        log.info("untainted node", node=node)

    def create_claim(self, body: dict[str, Any]) -> None:
        try:
            created = self._custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        except client.ApiException as err:
            if err.status == 409:
                return
            raise
        self._cache.upsert("NodeClaim", cast(dict[str, Any], created))

    def delete_claim(self, name: str) -> None:
        try:
            self._custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except client.ApiException as err:
            if err.status != 404:
                raise


def _target_source(plan: DisruptionPlan) -> str:
    """Where the decision's budget-free target came from (for the decision's log line): restored from the
    last pass, solved now, or none (the decision is not a step toward one)."""
    stages = plan.solver.stages
    return "restored" if "target restored" in stages else "solved" if "target" in stages else "none"


def _is_disrupted(taint: Mapping[str, Any]) -> bool:
    return taint.get("key") == wk.DISRUPTED_TAINT and taint.get("effect") == "NoSchedule"


# -- metrics ----------------------------------------------------------------------------------------------
class DisruptionMetrics:
    """Karpenter's disruption metrics (its names, so its dashboards work), in the controller's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter("karpenter_voluntary_disruption_decisions", "Disruption decisions carried out",
                                 ["decision", "reason", "consolidation_type"], registry=registry)
        self.disrupted = Counter("karpenter_nodeclaims_disrupted", "Number of nodeclaims disrupted in total by "
                                 "Karpenter. Labeled by reason the nodeclaim was disrupted, the owning nodepool, the "
                                 "capacity type, the consolidation policy, and the termination mode.",
                                 ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
                                 registry=registry)
        self.decisions_by_nodepool = Counter(
            "karpenter_voluntary_disruption_decisions_by_nodepool", "Number of disruption decisions performed by "
            "nodepool. Labeled by nodepool name, disruption decision, reason, and consolidation type.",
            ["nodepool", "decision", "reason", "consolidation_type"], registry=registry)
        self.passes: Callable[[float, bool], None] | None = None
        self.eligible = Gauge("karpenter_voluntary_disruption_eligible_nodes",
                              "Nodes consolidation may remove, by reason (last pass)", ["reason"], registry=registry)
        self.evaluation = Histogram("karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
                                    "Seconds one consolidation decision took to compute", registry=registry,
                                    buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0))
        self.abandoned = Counter("nodeplan_disruption_abandoned", "Decisions abandoned before any eviction",
                                 ["cause"], registry=registry)
        self.failed_validations = Counter(
            "karpenter_voluntary_disruption_failed_validations", "Number of candidates that were selected for "
            "disruption but failed validation. Labeled by consolidation type.", ["consolidation_type"],
            registry=registry)
        for reason in ("Empty", "Underutilized", "Drifted", "Expired"):
            self.eligible.labels(reason).set(0)


# -- one decision -----------------------------------------------------------------------------------------
@dataclass
class Decision:
    plan: DisruptionPlan
    #: removed node → its NodeClaim
    claims: dict[str, str]
    #: replacement NodeClaims to create: name → body
    replacements: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """Karpenter's ``decision`` label: delete (no replacement) or replace."""
        return "replace" if self.plan.node_claims else "delete"

    @property
    def consolidation_type(self) -> str:
        if all(r.evictions == 0 for r in self.plan.remove):
            return "empty"
        return "multi" if len(self.plan.remove) > 1 else "single"

    def describe(self) -> str:
        removed = ", ".join(f"{r.node} ({r.reason})" for r in self.plan.remove)
        launched = ", ".join(f"{c.instance_type}/{c.zone}/{c.capacity_type}" for c in self.plan.node_claims)
        return (f"remove {removed}" + (f"; launch {launched}" if launched else "")
                + f"; saves {self.plan.cost.savings:.4f} $/h, {self.plan.disruption.evictions} eviction(s)")


def consolidation_state(snapshot: Snapshot, state: ClusterState) -> tuple[object, ...]:
    """What a consolidation decision depends on, comparable between passes: every node's standing (reason,
    blocker, price, the pods it runs), the budgets and PDB allowances in force, the NodePools and the catalog.
    Karpenter marks its cluster unconsolidated on the same kinds of change (a pod bound or deleted, a node or
    NodeClaim added, removed, initialized or marked for deletion, a NodePool changed)."""
    nodes = tuple((n.name, n.reason, n.blocked, n.price, n.disrupting, tuple(sorted(p.key for p in n.pods)))
                  for n in state.nodes)
    budgets = tuple(sorted((pool, repr(limits)) for pool, limits in state.budgets.items()))
    pdbs = tuple(sorted((pdb.key, allowed) for pdb, allowed in state.pdbs))
    pools = tuple(sorted((p.name, p.model_dump_json()) for p in snapshot.nodepools))
    catalog = tuple(sorted((t.name, repr(t.offerings)) for t in snapshot.instance_types))
    return nodes, budgets, pdbs, pools, catalog


@dataclass
class PassRecord:
    """What one pass did (tests, logs)."""

    started: float
    #: busy | nothing | abandoned | failed | disrupted | stopped
    outcome: str
    detail: str = ""
    plan: DisruptionPlan | None = None
    removed: list[str] = field(default_factory=list)
    replacements: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: why nodes were not candidates: first words of the reason → nodes (e.g. "PodDisruptionBudget": 9)
    blocked: dict[str, int] = field(default_factory=dict)


def _claim_state(raw: Mapping[str, Any] | None) -> str:
    """initialized | failed | gone | launching"""
    if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
        return "gone"
    if conditions_of(raw).get("Launched", {}).get("status") == "False":
        return "failed"
    return "initialized" if is_true(raw, "Initialized") else "launching"


class Disruption:
    """The consolidation loop's passes; clients, clock and waiting are passed in, so tests drive it with fakes."""

    def __init__(self, cache: ClusterCache, writer: Writer, snapshot: Callable[[], Snapshot], *,
                 options: DisruptionOptions | None = None, events: EventRecorder | None = None,
                 metrics: DisruptionMetrics | None = None,
                 unplaceable: Callable[[], Collection[str]] = lambda: (),
                 on_created: Callable[[dict[str, Any]], None] | None = None,
                 steerer: Steerer | None = None,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.options = options or DisruptionOptions()
        self._cache = cache
        self._writer = writer
        self._snapshot = snapshot
        self._events = events
        self._metrics = metrics
        self._unplaceable = unplaceable
        self._on_created = on_created
        self._now = now
        self._stop = threading.Event()
        self._heartbeat: Callable[[], None] = lambda: None
        #: evicts a decision's pods one destination at a time (``controller.steering``); None: the drain does
        self._steerer = steerer
        self.history: list[PassRecord] = []
        #: the cluster as the last pass that found nothing saw it, and when (``_consolidated``)
        self._nothing_seen: tuple[object, ...] | None = None
        self._nothing_at = 0.0
        #: why the last passes decided nothing, as last logged at INFO (``_level``)
        self._said = ""
        #: the budget-free plan the last decision stepped toward: the next pass takes its next step without
        #: solving it again while it holds (``ConsolidateOptions.target``), for ``CONSOLIDATED_FOR`` seconds
        self._target: Target | None = None

    # -- the loop -----------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, heartbeat: Callable[[], None] = lambda: None,
            on_error: Callable[[Exception], None] | None = None) -> None:
        """Pass after pass until ``stop``; a failed pass is logged and retried after ``interval``."""
        self._stop, self._heartbeat = stop, heartbeat
        last = ""
        while not stop.wait(self.options.interval):
            heartbeat()
            try:
                self.step()
                last = ""
            except Exception as err:
                log.exception("consolidation pass failed")
                if on_error is not None and str(err) != last:  # a lasting failure is reported once
                    on_error(err)
                last = str(err)

    def _wait(self, seconds: float) -> bool:
        """Sleep (stop-aware, heartbeating); False when asked to stop."""
        deadline = time.monotonic() + seconds
        while True:
            self._heartbeat()
            left = deadline - time.monotonic()
            if left <= 0:
                return not self._stop.is_set()
            if self._stop.wait(min(left, 1.0)):
                return False

    # -- quiet? -------------------------------------------------------------------------------------------
    def busy(self) -> str:
        """Why the cluster is not quiet enough to consolidate ('' when it is)."""
        unplaceable = set(self._unplaceable())
        waiting = [pod_key(p) for p in self._cache.items("Pod")
                   if not is_bound(p) and not is_terminal(p) and not is_daemon_or_static(p)
                   and not (p.get("metadata") or {}).get("deletionTimestamp")
                   and not (p.get("spec") or {}).get("schedulingGates") and pod_key(p) not in unplaceable]
        if waiting:
            return f"{len(waiting)} pending pod(s), e.g. {sorted(waiting)[0]}"
        for raw in self._cache.items("NodeClaim"):
            name = (raw.get("metadata") or {}).get("name")
            if (raw.get("metadata") or {}).get("deletionTimestamp"):
                return f"NodeClaim {name} is terminating"
            if _claim_state(raw) == "launching":
                return f"NodeClaim {name} is launching"
        return ""

    # -- one pass -----------------------------------------------------------------------------------------
    def step(self) -> PassRecord:
        started = time.monotonic()
        try:
            record = self._step(started)
        except Exception:
            if self._metrics is not None and self._metrics.passes is not None:
                self._metrics.passes(time.monotonic() - started, True)
            raise
        record.seconds = time.monotonic() - started
        if self._metrics is not None and self._metrics.passes is not None:
            self._metrics.passes(record.seconds, False)
        self.history.append(record)
        if record.outcome not in ("busy", "nothing"):
            self._nothing_seen = None  # the pass acted: what an earlier empty pass saw no longer stands
        log.log(self._level(record), f"consolidation pass: {record.outcome}"
                + (f" ({record.detail})" if record.detail else ""),
                **({"node": ",".join(record.removed)} if record.removed else {}))
        return record

    def _level(self, record: PassRecord) -> int:
        """INFO for a pass that acted, and for the first pass of each distinct reason to decide nothing (busy,
        no candidate, budgets, PDBs, no saving, the plan gate): an operator sees why consolidation stopped
        without a line every ``interval``. A skip because nothing changed restates the last reason: DEBUG."""
        if record.outcome not in ("busy", "nothing"):
            self._said = ""
            return logging.INFO
        if record.detail == CONSOLIDATED:
            return logging.DEBUG
        # names and counts change from pass to pass; the kind of reason is what is new
        key = re.sub(r"\S*\d\S*", "#", f"{record.outcome}: {record.detail}")
        if key == self._said:
            return logging.DEBUG
        self._said = key
        return logging.INFO

    def _step(self, started: float) -> PassRecord:
        self._untaint_stale()
        reason = self.busy()
        if reason:
            return PassRecord(started, "busy", reason)
        snapshot = self._snapshot()
        if not snapshot.nodepools:
            return PassRecord(started, "nothing", "no NodePool")
        seen = consolidation_state(snapshot, analyse(snapshot, self._now()))
        if self._consolidated(seen):
            return PassRecord(started, "nothing", CONSOLIDATED)
        t0 = time.monotonic()
        result = consolidate(snapshot, self._consolidate_options())
        self._target = result.outcome.target if result.outcome is not None else None
        if self._metrics is not None:
            self._metrics.evaluation.observe(time.monotonic() - t0)
        self._observe_candidates(result)
        plan = result.plan
        if not plan.remove:
            blocked: dict[str, int] = {}
            for node in result.state.nodes:
                if node.blocked:
                    blocked[node.blocked.split(" ")[0]] = blocked.get(node.blocked.split(" ")[0], 0) + 1
            self._nothing_seen, self._nothing_at = seen, time.monotonic()
            return PassRecord(started, "nothing", why_nothing(result), plan=plan, blocked=blocked)
        decision = self._decision(result, snapshot)
        log.info(f"consolidation decision: {decision.describe()}; validating in {self.options.validation_wait:.0f}s",
                 node=",".join(r.node for r in decision.plan.remove),
                 nodepool=",".join(sorted({r.node_pool for r in decision.plan.remove})),
                 seconds=round(plan.solver.wall_seconds, 3), target=_target_source(plan),
                 stages=stage_fields(plan.solver.stages))
        if not self._wait(self.options.validation_wait):
            return PassRecord(started, "stopped", "before validation", plan=plan)
        held = self._revalidate(decision)
        why = held.why or self.busy()
        if why or held.plan is None:
            if self._metrics is not None:
                self._metrics.failed_validations.labels(decision.consolidation_type).inc(len(decision.plan.remove))
            return self._abandon(started, decision, "validation", why, tainted=False)
        if held.replaced:
            log.info(f"consolidation decision still valid; {len(held.replaced)} pod(s) placed anew by the "
                     f"re-simulation, e.g. {held.replaced[0]}", node=",".join(r.node for r in held.plan.remove))
        return self._execute(started, Decision(plan=held.plan, claims=decision.claims,
                                               replacements=decision.replacements))

    def _consolidated(self, seen: tuple[object, ...]) -> bool:
        """Did the last pass find nothing in this very cluster (Karpenter's ``IsConsolidated``)? Then this pass
        would find nothing again, and solving it was most of the controller's CPU while a cluster sat idle."""
        return seen == self._nothing_seen and time.monotonic() - self._nothing_at < CONSOLIDATED_FOR

    def _consolidate_options(self) -> ConsolidateOptions:
        o = self.options
        target = self._target
        if target is not None and time.monotonic() - target.solved_at >= CONSOLIDATED_FOR:
            target = None  # what it cannot see (prices, offerings, a better plan) may have changed: solve again
        return ConsolidateOptions(time_limit=o.time_limit, now=self._now(), seed=o.seed, workers=o.workers,
                                  spot_to_spot=o.spot_to_spot, gap=o.decision_gap, target=target)

    def _revalidate(self, decision: Decision) -> Revalidation:
        """The decision as it holds on a fresh snapshot (Karpenter's candidate re-check and re-simulation)."""
        orphans = sorted(node for node, claim in decision.claims.items() if not claim)
        if orphans:
            return Revalidation(None, f"node {orphans[0]} has no NodeClaim: not ours to remove")
        snapshot = self._snapshot()
        now = self._now()
        return revalidate(decision.plan, snapshot, analyse(snapshot, now), now, spot_to_spot=self.options.spot_to_spot)

    def _decision(self, result: ConsolidationResult, snapshot: Snapshot) -> Decision:
        plan = result.plan
        claims = {claim_node_name(c): str(c["metadata"]["name"]) for c in self._cache.items("NodeClaim")}
        decision = Decision(plan=plan, claims={r.node: claims.get(r.node, "") for r in plan.remove})
        uid_of = {p.key: p.uid or p.key for p in snapshot.pods}
        pools: dict[str, NodePool] = {p.name: p for p in snapshot.nodepools}
        replaces = ",".join(r.node for r in plan.remove)
        for planned in plan.node_claims:
            uids = sorted(uid_of.get(k, k) for k in planned.pods)
            name = claim_name(planned.node_pool, planned, [replaces, *uids])
            body = nodeclaim_body(planned, pools[planned.node_pool], name, [])
            body["metadata"]["annotations"][REPLACES_ANNOTATION] = replaces
            decision.replacements[name] = body
        return decision

    # -- execution ----------------------------------------------------------------------------------------
    def _execute(self, started: float, decision: Decision) -> PassRecord:
        try:
            failure = self._prepare(decision)
        except Exception as err:  # an API error before any eviction: put the candidates back, then report it
            try:
                self._abandon(started, decision, "error", f"{type(err).__name__}: {err}", tainted=True)
            except Exception:
                log.exception("could not roll back the consolidation decision; the next pass untaints")
            raise
        if failure:
            return self._abandon(started, decision, "replacement", failure, tainted=True)
        nodes = [r.node for r in decision.plan.remove]
        self._steer(decision)
        for node in nodes:  # from here on the decision is carried out: termination drains and deletes
            self._writer.delete_claim(decision.claims[node])
            self._count_disrupted(decision, node)
        if self._metrics is not None:
            reason = decision.plan.remove[0].reason
            self._metrics.decisions.labels(decision.kind, reason, decision.consolidation_type).inc()
            for pool in sorted({r.node_pool for r in decision.plan.remove}):
                self._metrics.decisions_by_nodepool.labels(pool, decision.kind, reason,
                                                           decision.consolidation_type).inc()
        self._event_on_pools(decision, "Normal", "Consolidated", decision.describe())
        return PassRecord(started, "disrupted", decision.describe(), plan=decision.plan, removed=nodes,
                          replacements=list(decision.replacements))

    def _steer(self, decision: Decision) -> None:
        """Move the decision's pods where it packed them (``controller.steering``); the drain evicts the rest."""
        if self._steerer is None or not decision.plan.moves:
            return
        claims = {str((c.get("metadata") or {}).get("name")): c for c in self._cache.items("NodeClaim")}
        node_of = {planned.name: claim_node_name(claims.get(name) or decision.replacements[name])
                   for planned, name in zip(decision.plan.node_claims, decision.replacements, strict=False)}
        where = {m.pod: node_of.get(m.to, m.to) for m in decision.plan.moves}
        steering = Steering(self._cache, self._steerer, heartbeat=self._heartbeat, stopped=self._stop.is_set)
        try:
            report = steering.move(where, {r.node for r in decision.plan.remove})
        except Exception as err:  # the candidates are tainted and the replacements up: the drain carries on
            log.warning(f"steered eviction failed, the drain evicts the rest: {type(err).__name__}: {err}",
                        node=",".join(r.node for r in decision.plan.remove))
            return
        log.info(f"steered {report.evicted} eviction(s) in {report.waves} wave(s), {len(report.fenced)} node(s) "
                 f"fenced{'; stopped: ' + report.stopped if report.stopped else ''}",
                 node=",".join(r.node for r in decision.plan.remove))

    def _prepare(self, decision: Decision) -> str:
        """Taint the candidates, launch the replacements and wait for them; '' when they are all Initialized."""
        for removal in decision.plan.remove:
            self._writer.taint(removal.node)
            self._event_on_candidate(decision, removal.node, "Normal", "Disrupting",
                                     f"Disrupting Node: {removal.reason}/{decision.kind.title()}"
                                     f" ({decision.describe()})")
        for body in decision.replacements.values():
            self._writer.create_claim(body)
            if self._on_created is not None:
                self._on_created(body)
        return self._await_replacements(list(decision.replacements))

    def _await_replacements(self, names: Sequence[str]) -> str:
        """'' once every replacement is Initialized; else why not (failed launch, gone, timeout, stop)."""
        if not names:
            return ""
        deadline = time.monotonic() + self.options.replacement_timeout
        generation = -1
        while True:
            claims = {str((c.get("metadata") or {}).get("name")): c for c in self._cache.items("NodeClaim")}
            states = {name: _claim_state(claims.get(name)) for name in names}
            bad = [f"{name} {state}" for name, state in states.items() if state in ("failed", "gone")]
            if bad:
                return f"replacement NodeClaim {bad[0]}"
            if all(state == "initialized" for state in states.values()):
                return ""
            if time.monotonic() >= deadline:
                waiting = sorted(n for n, s in states.items() if s != "initialized")
                return (f"replacement NodeClaim {waiting[0]} not Initialized after "
                        f"{self.options.replacement_timeout:.0f}s")
            self._heartbeat()
            if self._stop.is_set():
                return "the controller is stopping"
            generation = self._cache.wait_for_change(generation, min(1.0, max(0.0, deadline - time.monotonic())))

    def _abandon(self, started: float, decision: Decision, cause: str, why: str, *, tainted: bool) -> PassRecord:
        log.info(f"consolidation decision abandoned ({cause}): {why}",
                 node=",".join(r.node for r in decision.plan.remove))
        if tainted:
            for name in decision.replacements:
                self._writer.delete_claim(name)
            for removal in decision.plan.remove:
                self._writer.untaint(removal.node)
        if self._metrics is not None:
            self._metrics.abandoned.labels(cause).inc()
        kind = "Normal" if cause == "validation" else "Warning"
        for removal in decision.plan.remove:
            self._event_on_candidate(decision, removal.node, kind, "DisruptionAbandoned", why)
        return PassRecord(started, "abandoned" if cause == "validation" else "failed", why, plan=decision.plan,
                          replacements=list(decision.replacements))

    def _untaint_stale(self) -> None:
        """A disrupted taint on a node whose NodeClaim (ours) is not being deleted was left by an interrupted
        pass. Nodes without a NodeClaim are someone else's: left alone. A steering taint is ours on any node,
        and no pass is steering while this runs."""
        claims = self._cache.items("NodeClaim")
        managed = {claim_node_name(c) for c in claims}
        # an interrupted claim's node stays tainted while its replacements launch (``controller.interruption``)
        deleting = {claim_node_name(c) for c in claims if (c.get("metadata") or {}).get("deletionTimestamp")
                    or "nodeplan.io/interrupted" in ((c.get("metadata") or {}).get("annotations") or {})}
        for node in self._cache.items("Node"):
            meta = node.get("metadata") or {}
            name = str(meta.get("name"))
            taints = (node.get("spec") or {}).get("taints") or []
            if self._steerer is not None and any(is_steering(t) for t in taints):
                log.info(f"node carries a stale {STEERING_TAINT} taint; removing it", node=name)
                self._steerer.fence(name, False)
            if meta.get("deletionTimestamp") or name in deleting or name not in managed:
                continue
            if any(_is_disrupted(t) for t in taints):
                log.info(f"node carries a stale {wk.DISRUPTED_TAINT} taint; removing it", node=name)
                self._writer.untaint(name)

    # -- observability ------------------------------------------------------------------------------------
    def _observe_candidates(self, result: ConsolidationResult) -> None:
        if self._metrics is not None:
            counts: dict[str, int] = {"Empty": 0, "Underutilized": 0, "Drifted": 0, "Expired": 0}
            for s in result.state.candidates:
                counts[s.reason or "Underutilized"] = counts.get(s.reason or "Underutilized", 0) + 1
            for reason, n in counts.items():
                self._metrics.eligible.labels(reason).set(n)
        if self._events is None:
            return
        nodes = {str((n.get("metadata") or {}).get("name")): n for n in self._cache.items("Node")}
        for s in result.state.nodes:
            if s.blocked and s.blocked.startswith(_ACTIONABLE) and s.name in nodes:
                self._events.normal(nodes[s.name], "DisruptionBlocked", f"Cannot disrupt Node: {s.blocked}")

    def _count_disrupted(self, decision: Decision, node: str) -> None:
        if self._metrics is None:
            return
        removal = next(r for r in decision.plan.remove if r.node == node)
        raw = next((n for n in self._cache.items("Node") if (n.get("metadata") or {}).get("name") == node), {})
        capacity = ((raw.get("metadata") or {}).get("labels") or {}).get(wk.CAPACITY_TYPE, "")
        pool = next((p for p in self._cache.items("NodePool")
                     if (p.get("metadata") or {}).get("name") == removal.node_pool), {})
        policy = ((pool.get("spec") or {}).get("disruption") or {}).get("consolidationPolicy",
                                                                         "WhenEmptyOrUnderutilized")
        # graceful: drained respecting PDBs until the claim's terminationGracePeriod (Karpenter's label values)
        self._metrics.disrupted.labels(removal.reason, removal.node_pool, capacity, policy, "graceful").inc()

    def _event_on_candidate(self, decision: Decision, node: str, kind: str, reason: str, message: str) -> None:
        if self._events is None:
            return
        targets = [n for n in self._cache.items("Node") if (n.get("metadata") or {}).get("name") == node]
        claim = decision.claims.get(node)
        targets += [c for c in self._cache.items("NodeClaim")
                    if claim and (c.get("metadata") or {}).get("name") == claim]
        for obj in targets:
            self._events.record(obj, kind, reason, message)

    def _event_on_pools(self, decision: Decision, kind: str, reason: str, message: str) -> None:
        if self._events is None:
            return
        names = {r.node_pool for r in decision.plan.remove}
        for pool in self._cache.items("NodePool"):
            if (pool.get("metadata") or {}).get("name") in names:
                self._events.record(pool, kind, reason, message)


def snapshot_source(objects: Callable[[], list[dict[str, Any]]], cache: ClusterCache,
                    catalog: Callable[[], Sequence[InstanceType]]) -> Callable[[], Snapshot]:
    """The consolidation snapshot: the provisioner's objects (nothing pending) plus the cache's PDBs."""

    def build() -> Snapshot:
        pdbs = cache.items("PodDisruptionBudget") if "PodDisruptionBudget" in cache.informers else []
        return cache.snapshot([*objects(), *pdbs]).with_catalog(catalog())

    return build


def for_controller(api: client.ApiClient, cache: ClusterCache, provisioner: Provisioner,
                   catalog: Sequence[InstanceType], unavailable: UnavailableOfferings, events: EventRecorder,
                   metrics: Metrics, options: DisruptionOptions) -> Disruption:
    """The controller's consolidation, wired to its cache, provisioner, Events and metrics."""

    def unplaceable() -> set[str]:
        history = provisioner.history
        return {item.pod for item in history[-1].plan.unschedulable} if history else set()

    def created(body: dict[str, Any]) -> None:
        labels = body["metadata"]["labels"]
        metrics.nodeclaims_created.labels("consolidation", labels.get(wk.NODEPOOL, ""), "false").inc()

    snapshot = snapshot_source(lambda: provisioner.snapshot_objects({}), cache, lambda: unavailable.apply(catalog))
    observed = DisruptionMetrics(metrics.registry)
    observed.passes = lambda seconds, failed: metrics.reconciled("disruption", seconds, error=failed)
    writer = KubeWriter(api, cache)
    drainer = Drainer(api, cache, on_eviction=metrics.evicted)  # steered evictions count as the drain's do
    steerer = KubeSteerer(writer.set_taints, drainer.evict) if options.steer else None
    return Disruption(cache, writer, snapshot, options=options, events=events, metrics=observed,
                      unplaceable=unplaceable, on_created=created, steerer=steerer)
