"""Shadow mode (``nodeplan run --shadow``): decide as nodeplan would, beside the provisioner that acts, and compare.

Platform teams adopt a provisioner by running it next to the one they trust. In shadow mode nodeplan writes
nothing to the cluster — no NodeClaim, Node, taint, nomination, status, Lease or Event — and needs read-only
RBAC (``controller.permissions.required(shadow=True)``). It batches pending pods as the provisioner does and
solves each batch against the capacity the cluster had *when the batch's first pod appeared*: NodeClaims and
Nodes created since then are the other provisioner's answer to these very pods, so they are left out of the
solve (and pods already bound to them are pending again in it). Once every pod of the batch is bound (or gone),
or ``settle_timeout`` has passed, the batch is compared with what the other provisioner did: the new NodeClaims
(labelled ``karpenter.sh/nodepool``, created after the batch opened) its pods run on, priced from the catalog,
and the pods it left pending. Each comparison is one structured log line, ``nodeplan_shadow_*`` metrics and one
JSON line in the record file ``nodeplan shadow-report`` reads.

Consolidation is shadowed the same way: when the cluster is quiet, ``consolidate`` decides what nodeplan would
remove and launch, and the record holds the cluster's cost now (what the other provisioner left) next to the
cost nodeplan's decision would reach, and the NodeClaims the other provisioner removed since the last record.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from controller.batch import is_bound, is_daemon_or_static, is_terminal, pod_key
from controller.cache import ClusterCache
from controller.metrics import Metrics
from controller.provisioner import Provisioner, claim_node_name
from model import labels as wk
from model.durations import epoch
from model.instancetype import InstanceType
from model.snapshot import Snapshot
from solver.disruption.consolidate import ConsolidateOptions
from solver.disruption.plan import consolidate

log = logging.getLogger(__name__)

RECORD_VERSION = 1
KARPENTER, NODEPLAN = "karpenter", "nodeplan"


@dataclass
class ShadowOptions:
    #: JSON-lines file every comparison is appended to (None: log and metrics only)
    record: Path | None = None
    #: a batch whose pods are not all bound by then is compared anyway, its unbound pods counted as left pending
    settle_timeout: float = 600.0
    #: seconds between shadow consolidation decisions (0: none)
    consolidation_interval: float = 30.0
    consolidation_time_limit: float = 15.0
    workers: int = 2
    spot_to_spot: bool = False



def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _created(obj: Mapping[str, Any]) -> float | None:
    return epoch(_meta(obj).get("creationTimestamp"))


class Prices:
    """Hourly prices by offering (instance type, zone, capacity type), from the catalog nodeplan solves with."""

    def __init__(self, catalog: Iterable[InstanceType]) -> None:
        self._price: dict[tuple[str, str, str], float] = {
            (it.name, o.zone, str(o.capacity_type)): o.price for it in catalog for o in it.offerings}

    def of(self, labels: Mapping[str, str]) -> float | None:
        return self._price.get((labels.get(wk.INSTANCE_TYPE, ""), labels.get(wk.ZONE, ""),
                                labels.get(wk.CAPACITY_TYPE, "")))


def _offering(labels: Mapping[str, str]) -> dict[str, str]:
    return {"instanceType": labels.get(wk.INSTANCE_TYPE, ""), "zone": labels.get(wk.ZONE, ""),
            "capacityType": labels.get(wk.CAPACITY_TYPE, "")}


def capacity_before(objects: Sequence[dict[str, Any]], opened: float, batch: Iterable[str]) -> list[dict[str, Any]]:
    """The snapshot objects as the cluster was when the batch opened (epoch ``opened``): NodeClaims created since
    then and their Nodes (and other provisioner-launched Nodes that new) removed, pods bound to them pending
    again if they are in ``batch`` (pod UIDs), left out otherwise (they arrived later)."""
    uids = set(batch)
    new_claims = {str(_meta(o).get("name")) for o in objects
                  if o.get("kind") == "NodeClaim" and (_created(o) or 0.0) >= opened}
    new_nodes = {claim_node_name(o) for o in objects if o.get("kind") == "NodeClaim"
                 and str(_meta(o).get("name")) in new_claims}
    new_nodes |= {str(_meta(o).get("name")) for o in objects if o.get("kind") == "Node"
                  and wk.NODEPOOL in (_meta(o).get("labels") or {}) and (_created(o) or 0.0) >= opened}
    out: list[dict[str, Any]] = []
    for obj in objects:
        kind, name = obj.get("kind"), str(_meta(obj).get("name"))
        if (kind == "NodeClaim" and name in new_claims) or (kind == "Node" and name in new_nodes):
            continue
        if kind == "ResourceSlice" and (obj.get("spec") or {}).get("nodeName") in new_nodes:
            continue
        if kind == "Pod" and (obj.get("spec") or {}).get("nodeName") in new_nodes:
            if _meta(obj).get("uid") not in uids:
                continue
            obj = copy.deepcopy(obj)
            obj["spec"].pop("nodeName", None)
            (obj.get("status") or {}).pop("nominatedNodeName", None)
        out.append(obj)
    return out


@dataclass
class OpenBatch:
    """A batch nodeplan has decided and the other provisioner is still acting on."""

    id: str
    #: epoch seconds: the earliest creation of its pods
    opened: float
    solved: float
    #: pod UID → namespace/name
    pods: dict[str, str]
    nodeplan: dict[str, Any]


class Recorder:
    """Appends one JSON object per line to ``path`` (and keeps them, for tests and ``records``)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.records.append(record)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(record, sort_keys=True) + "\n")


@dataclass
class Shadow:
    """The shadow controller's decisions and comparisons; the loop (``controller.run``) calls ``pending``,
    ``decide``, ``settle`` and ``consolidation``. Reads the cache only."""

    cache: ClusterCache
    provisioner: Provisioner
    catalog: Sequence[InstanceType]
    options: ShadowOptions = field(default_factory=ShadowOptions)
    metrics: Metrics | None = None
    consolidation_snapshot: Callable[[], Snapshot] | None = None
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self.prices = Prices(self.catalog)
        self.recorder = Recorder(self.options.record)
        self.open: list[OpenBatch] = []
        #: NodeClaims (or Nodes without one) already counted against a batch
        self._attributed: set[str] = set()
        self._last_consolidation = 0.0
        self._last_claims: dict[str, float | None] | None = None

    # -- batches ------------------------------------------------------------------------------------------
    def pending(self) -> dict[str, dict[str, Any]]:
        """Provisionable pods not already in an open batch."""
        taken = {uid for batch in self.open for uid in batch.pods}
        return {k: p for k, p in self.provisioner.pending().items() if _meta(p).get("uid") not in taken}

    def decide(self, batch: Mapping[str, dict[str, Any]]) -> OpenBatch:
        """What nodeplan would launch for ``batch``, against the capacity there was when it opened."""
        now = self.clock()
        opened = min((_created(p) or now for p in batch.values()), default=now)
        uids = {str(_meta(p).get("uid")): key for key, p in batch.items()}
        objects = capacity_before(self.provisioner.snapshot_objects(batch), opened, uids)
        record, _ = self.provisioner.plan(batch, objects)
        plan = record.plan
        claims = [{**_offering({wk.INSTANCE_TYPE: c.instance_type, wk.ZONE: c.zone, wk.CAPACITY_TYPE: c.capacity_type}),
                   "nodePool": c.node_pool, "price": round(c.price, 6), "pods": len(c.pods)} for c in plan.node_claims]
        in_batch = set(batch)
        decided = OpenBatch(id=uuid.uuid4().hex[:12], opened=opened, solved=now, pods=uids, nodeplan={
            "cost": round(sum(c.price for c in plan.node_claims), 6), "lowerBound": round(plan.cost.lower_bound, 6),
            "nodeClaims": claims, "pending": sum(1 for u in plan.unschedulable if u.pod in in_batch),
            "onExisting": sum(1 for n in plan.existing_nodes for k in n.pods if k in in_batch),
            "status": plan.solver.status, "solveSeconds": round(record.solve_seconds, 3)})
        self.open.append(decided)
        log.info("shadow batch %s: %d pods; nodeplan would launch %d NodeClaims for %.4f $/h (%s)", decided.id,
                 len(batch), len(claims), decided.nodeplan["cost"], plan.solver.status)
        return decided

    def settle(self) -> list[dict[str, Any]]:
        """Compare every open batch whose pods are all bound or gone (or that timed out); returns the records."""
        now = self.clock()
        pods = {str(_meta(p).get("uid")): p for p in self.cache.items("Pod")}
        done: list[dict[str, Any]] = []
        still: list[OpenBatch] = []
        for batch in self.open:
            live = [pods[uid] for uid in batch.pods if uid in pods and not is_terminal(pods[uid])]
            settled = all(is_bound(p) for p in live)
            if not settled and now - batch.solved < self.options.settle_timeout:
                still.append(batch)
                continue
            done.append(self._compare(batch, pods, "bound" if settled else "timeout"))
        self.open = still
        return done

    def _compare(self, batch: OpenBatch, pods: Mapping[str, dict[str, Any]], settled: str) -> dict[str, Any]:
        claims = {claim_node_name(c): c for c in self.cache.items("NodeClaim")}
        nodes = {str(_meta(n).get("name")): n for n in self.cache.items("Node")}
        launched: list[dict[str, Any]] = []
        unpriced: list[str] = []
        pending = gone = existing = 0
        counted: set[str] = set()
        for uid in batch.pods:
            pod = pods.get(uid)
            if pod is None or is_terminal(pod):
                gone += 1
                continue
            node_name = (pod.get("spec") or {}).get("nodeName")
            if not node_name:
                pending += 1
                continue
            claim, node = claims.get(node_name), nodes.get(node_name, {})
            source = claim if claim is not None else node
            labels = {**(_meta(node).get("labels") or {}), **(_meta(source).get("labels") or {})}
            new = wk.NODEPOOL in labels and (_created(source) or 0.0) >= batch.opened
            identity = f"NodeClaim/{_meta(claim).get('name')}" if claim is not None else f"Node/{node_name}"
            if not new or (identity in self._attributed and identity not in counted):
                existing += 1
                continue
            if identity in counted:
                continue
            counted.add(identity)
            self._attributed.add(identity)
            price = self.prices.of(labels)
            if price is None:
                unpriced.append(identity)
            launched.append({"name": identity, "nodePool": labels.get(wk.NODEPOOL, ""), **_offering(labels),
                             "price": None if price is None else round(price, 6)})
        cost = round(sum(c["price"] or 0.0 for c in launched), 6)
        nodeplan = batch.nodeplan
        record = {"version": RECORD_VERSION, "type": "batch", "id": batch.id, "time": _iso(self.clock()),
                  "opened": _iso(batch.opened), "settled": settled, "pods": len(batch.pods), "gone": gone,
                  NODEPLAN: nodeplan,
                  KARPENTER: {"cost": cost, "nodeClaims": launched, "pending": pending, "onExisting": existing,
                              "unpriced": unpriced},
                  "saving": round(cost - nodeplan["cost"], 6)}
        self.recorder.write(record)
        log.info("shadow comparison %s", json.dumps(record, sort_keys=True))
        if self.metrics is not None:
            m = self.metrics
            m.shadow_batches.labels(settled).inc()
            for decider, c, left in ((NODEPLAN, nodeplan["cost"], nodeplan["pending"]), (KARPENTER, cost, pending)):
                m.shadow_cost.labels(decider).set(c)
                m.shadow_cost_sum.labels(decider).inc(c)
                m.shadow_pending.labels(decider).set(left)
                m.shadow_pending_sum.labels(decider).inc(left)
        return record

    # -- consolidation ------------------------------------------------------------------------------------
    def quiet(self) -> bool:
        """Nothing to shadow-consolidate while pods wait, batches are open or claims launch or terminate."""
        if self.open:
            return False
        for pod in self.cache.items("Pod"):
            if not is_bound(pod) and not is_terminal(pod) and not is_daemon_or_static(pod) \
                    and not _meta(pod).get("deletionTimestamp") and not (pod.get("spec") or {}).get("schedulingGates"):
                return False
        return not any(_meta(claim).get("deletionTimestamp") for claim in self.cache.items("NodeClaim"))

    def cluster_cost(self) -> tuple[float, dict[str, float | None]]:
        """$/h of every NodeClaim (by its offering labels) and each claim's price."""
        prices = {str(_meta(c).get("name")): self.prices.of(_meta(c).get("labels") or {})
                  for c in self.cache.items("NodeClaim")}
        return round(sum(p or 0.0 for p in prices.values()), 6), prices

    def consolidation(self) -> dict[str, Any] | None:
        """One shadow consolidation decision when due and quiet; recorded when the cluster changed since."""
        now = self.clock()
        if (self.consolidation_snapshot is None or self.options.consolidation_interval <= 0
                or now - self._last_consolidation < self.options.consolidation_interval or not self.quiet()):
            return None
        self._last_consolidation = now
        cost, prices = self.cluster_cost()
        if self._last_claims is not None and set(prices) == set(self._last_claims):
            return None  # nothing changed since the last record: the same decision again
        snapshot = self.consolidation_snapshot()
        if not snapshot.nodepools:
            return None
        result = consolidate(snapshot, ConsolidateOptions(
            time_limit=self.options.consolidation_time_limit, now=datetime.now(UTC), workers=self.options.workers,
            spot_to_spot=self.options.spot_to_spot))
        plan = result.plan
        removed_price = sum(s.price for s in result.state.nodes if s.name in {r.node for r in plan.remove})
        added = sum(c.price for c in plan.node_claims)
        target = round(cost - removed_price + added, 6)
        gone = sorted(set(self._last_claims or ()) - set(prices))
        record = {"version": RECORD_VERSION, "type": "consolidation", "time": _iso(now), "clusterCost": cost,
                  "nodeClaims": len(prices),
                  NODEPLAN: {"cost": target, "remove": [r.node for r in plan.remove],
                             "launch": [_offering({wk.INSTANCE_TYPE: c.instance_type, wk.ZONE: c.zone,
                                                   wk.CAPACITY_TYPE: c.capacity_type}) for c in plan.node_claims],
                             "status": plan.solver.status},
                  KARPENTER: {"cost": cost, "removedSinceLast": gone},
                  "saving": round(cost - target, 6)}
        self._last_claims = prices
        self.recorder.write(record)
        log.info("shadow consolidation %s", json.dumps(record, sort_keys=True))
        if self.metrics is not None:
            self.metrics.shadow_consolidation_cost.labels(KARPENTER).set(cost)
            self.metrics.shadow_consolidation_cost.labels(NODEPLAN).set(target)
        return record


def batch_keys(batch: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """key → resourceVersion (what the batch window remembers)."""
    return {pod_key(p): str(_meta(p).get("resourceVersion")) for p in batch.values()}
