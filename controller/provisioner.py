"""Provisioning: cache → Snapshot → solver → NodeClaims. No placement logic lives here; the solver decides.

Every NodeClaim records the UIDs of the pods it was planned for (annotation ``nodeplan.io/pods``). While a
NodeClaim is in flight (not yet initialized, or initialized less than ``bind_grace`` ago) its pods are
*covered*: they are left out of the next batch, and once its Node exists they are shown to the solver as
already bound to it, so the capacity they will take is not offered to anyone else. A restarted controller
reads the same annotations back from the API server, so it never launches twice for the same pods.
NodeClaim names are derived from the plan (pool, offering, pod UIDs), so a retried create is a no-op.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from kubernetes import client

from controller.batch import is_bound, is_provisionable, is_terminal, pod_key
from controller.cache import ClusterCache
from controller.offerings import UnavailableOfferings
from model import labels as wk
from model.errors import InputError
from model.instancetype import InstanceType
from model.nodepool import NodeClaim, NodePool
from model.plan import PlannedNodeClaim, ProvisioningPlan
from model.snapshot import parse_objects
from solver.provision import SolveOptions, solve

log = logging.getLogger(__name__)

PODS_ANNOTATION = "nodeplan.io/pods"
PRICE_ANNOTATION = "nodeplan.io/price"
GROUP, VERSION = "karpenter.sh", "v1"


def claim_name(nodepool: str, planned: PlannedNodeClaim, pod_uids: Iterable[str]) -> str:
    """A name that is a function of the decision: same pool, offering and pods ⇒ same NodeClaim."""
    digest = hashlib.sha256(json.dumps(
        [nodepool, planned.instance_type, planned.zone, planned.capacity_type, sorted(pod_uids)]).encode())
    return f"{nodepool[:50]}-{digest.hexdigest()[:10]}"


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


def covered_pods(claims: Iterable[Mapping[str, Any]], now: float, bind_grace: float) -> dict[str, str]:
    """Pod UID → NodeClaim name for every pod an in-flight NodeClaim was launched for."""
    out: dict[str, str] = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        launched = [c for c in (claim.get("status") or {}).get("conditions") or [] if c.get("type") == "Launched"]
        if launched and launched[0].get("status") == "False":
            continue  # the launch failed: its pods need another plan
        initialized = _condition_time(claim, "Initialized")
        if initialized is not None and now - initialized > bind_grace:
            continue
        try:
            uids = json.loads((meta.get("annotations") or {}).get(PODS_ANNOTATION) or "[]")
        except json.JSONDecodeError:
            continue
        for uid in uids:
            out[str(uid)] = str(meta.get("name"))
    return out


def nodeclaim_body(planned: PlannedNodeClaim, nodepool: NodePool, name: str, pod_uids: Sequence[str]
                   ) -> dict[str, Any]:
    """The NodeClaim that launches one planned node: the pool's template pinned to the planned offering."""
    template = nodepool.spec.template
    pinned = {wk.INSTANCE_TYPE: planned.instance_type, wk.ZONE: planned.zone,
              wk.CAPACITY_TYPE: planned.capacity_type}
    requirements = [r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in template.spec.requirements
                    if r.key not in pinned]
    for req in requirements:
        if "min_values" in req:
            req["minValues"] = req.pop("min_values")
    requirements += [{"key": k, "operator": "In", "values": [v]} for k, v in pinned.items()]
    spec: dict[str, Any] = {
        "requirements": requirements,
        "resources": {"requests": dict(planned.requests)},
    }
    if template.spec.taints:
        spec["taints"] = [t.model_dump(mode="json") for t in template.spec.taints]
    if template.spec.startup_taints:
        spec["startupTaints"] = [t.model_dump(mode="json") for t in template.spec.startup_taints]
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
    solve_seconds: float = 0.0


@dataclass
class ProvisionerOptions:
    solve_time_limit: float = 10.0
    seed: int = 0
    workers: int = 2
    #: how long after initialization a NodeClaim's pods stay reserved for it (for the scheduler to bind them)
    bind_grace: float = 15.0


class Provisioner:
    def __init__(self, api: client.ApiClient, cache: ClusterCache, catalog: Sequence[InstanceType],
                 options: ProvisionerOptions, clock: Callable[[], float] = time.time,
                 unavailable: UnavailableOfferings | None = None) -> None:
        self.unavailable = unavailable or UnavailableOfferings()
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._cache = cache
        self._catalog = tuple(catalog)
        self._options = options
        self._clock = clock
        self.history: list[BatchRecord] = []

    # -- what the next batch sees ---------------------------------------------------------------------
    def pending(self) -> dict[str, dict[str, Any]]:
        """Provisionable pods not covered by an in-flight NodeClaim, by key."""
        covered = covered_pods(self._cache.items("NodeClaim"), self._clock(), self._options.bind_grace)
        return {pod_key(p): p for p in self._cache.items("Pod")
                if is_provisionable(p) and (p.get("metadata") or {}).get("uid") not in covered}

    def valid_nodepools(self) -> list[dict[str, Any]]:
        out = []
        for raw in self._cache.items("NodePool"):
            try:
                parse_objects([raw], source="cluster")
            except InputError as err:
                log.warning("ignoring invalid NodePool: %s", err)
                continue
            out.append(raw)
        return out

    def snapshot_objects(self, batch: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
        claims = self._cache.items("NodeClaim")
        covered = covered_pods(claims, self._clock(), self._options.bind_grace)
        nodes = self._cache.items("Node")
        node_names = {(n.get("metadata") or {}).get("name") for n in nodes}
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
            if claim is not None and claim in node_names:
                reserved = copy.deepcopy(pod)
                reserved.setdefault("spec", {})["nodeName"] = claim
                pods.append(reserved)
        return [*self.valid_nodepools(), *nodes, *claims, *self._cache.items("DaemonSet"), *pods]

    # -- one batch -------------------------------------------------------------------------------------
    def provision(self, batch: Mapping[str, dict[str, Any]]) -> BatchRecord:
        started = time.monotonic()
        catalog = self.unavailable.apply(self._catalog)
        snapshot = parse_objects(self.snapshot_objects(batch), source="cluster").with_catalog(catalog)
        result = solve(snapshot, SolveOptions(time_limit=self._options.solve_time_limit, seed=self._options.seed,
                                              workers=self._options.workers))
        plan = result.plan
        record = BatchRecord(started=started, pods=len(batch), plan=plan,
                             solve_seconds=time.monotonic() - started)
        log.info("solved batch of %d pods: %d NodeClaims, cost %.4f (greedy %s, bound %.4f), %s in %.1fs",
                 len(batch), len(plan.node_claims), plan.cost.total, plan.cost.greedy, plan.cost.lower_bound,
                 plan.solver.status, record.solve_seconds)
        for item in plan.unschedulable:
            log.info("pod %s cannot be scheduled: %s", item.pod, item.reason)
        uid_of = {k: (p.get("metadata") or {}).get("uid", "") for k, p in batch.items()}
        pools = {np.name: np for np in snapshot.nodepools}
        bodies: list[dict[str, Any]] = []
        for planned in plan.node_claims:
            uids = [uid_of[k] for k in planned.pods if k in uid_of]
            if uids:
                name = claim_name(planned.node_pool, planned, uids)
                record.claims[name] = planned
                bodies.append(nodeclaim_body(planned, pools[planned.node_pool], name, uids))
        for body in bodies:
            created = self._create(body)
            if created is not None:
                self._cache.upsert("NodeClaim", created)
                record.created.append(body["metadata"]["name"])
        self.history.append(record)
        return record

    def _create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            created = cast(dict[str, Any], self._custom.create_cluster_custom_object(GROUP, VERSION, "nodeclaims",
                                                                                     body))
        except client.ApiException as err:
            if err.status == 409:
                log.info("NodeClaim %s already exists", body["metadata"]["name"])
                return None
            raise
        log.info("created NodeClaim %s (%s)", body["metadata"]["name"],
                 body["metadata"]["labels"].get(wk.INSTANCE_TYPE))
        return created


def parse_claim(raw: Mapping[str, Any]) -> NodeClaim:
    return NodeClaim.model_validate(raw)
