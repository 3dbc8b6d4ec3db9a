"""Small hand-built clusters for the consolidation tests, and the consolidate-and-verify helper.

Every object is built as ``kubectl get -o yaml`` shows it (bench.workloads.pod, bench.fragmented.node_object,
linux_pool); every time-dependent rule is evaluated at the fixed ``NOW``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bench.fragmented import CREATED, node_object
from bench.workloads import linux_pool, pod
from model import labels as wk
from model.snapshot import Snapshot, parse_objects
from providers.kwok import kwok_catalog
from solver.disruption.consolidate import ConsolidateOptions
from solver.disruption.plan import ConsolidationResult, consolidate
from solver.disruption.verify import verify_disruption

#: nodes and pods are created at CREATED (2026-11-01); NOW is 28 days later, inside the default 720h expireAfter
NOW = datetime(2026, 11, 29, tzinfo=UTC)
CATALOG = {it.name: it for it in kwok_catalog()}


def price(size: str, zone: str = "test-zone-a", capacity_type: str = "on-demand") -> float:
    it = CATALOG[f"{size}-amd64-linux"]
    return next(o.price for o in it.offerings if o.zone == zone and o.capacity_type == capacity_type)


def node(name: str, size: str = "c-4x", *, zone: str = "test-zone-a", capacity_type: str = "on-demand",
         pool: str = "default", annotations: dict[str, str] | None = None, created: str = CREATED,
         **labels: str) -> dict[str, Any]:
    obj = node_object(name, CATALOG[f"{size}-amd64-linux"], zone, capacity_type, pool)
    obj["metadata"]["creationTimestamp"] = created
    if annotations:
        obj["metadata"]["annotations"] = dict(annotations)
    obj["metadata"]["labels"].update(labels)
    return obj


def running(name: str, node_name: str, cpu: str = "1", memory: str = "1Gi", *, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, started: str = CREATED, namespace: str = "default",
            spec_extra: dict[str, Any] | None = None, owner: str | None = None) -> dict[str, Any]:
    obj = pod(name, namespace=namespace, cpu=cpu, memory=memory, labels=labels or {"app": name},
              node_name=node_name, owner=owner or f"{name}-rs", spec_extra=spec_extra)
    obj["metadata"]["creationTimestamp"] = started
    obj["status"]["startTime"] = started
    if annotations:
        obj["metadata"]["annotations"] = dict(annotations)
    return obj


def nodepool(name: str = "default", *, budgets: list[dict[str, Any]] | None = None,
             policy: str = "WhenEmptyOrUnderutilized", consolidate_after: str = "30s",
             expire_after: str | None = None, annotations: dict[str, str] | None = None,
             requirements: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj = linux_pool(name, requirements=requirements or [])
    obj["spec"]["disruption"] = {"consolidationPolicy": policy, "consolidateAfter": consolidate_after,
                                 "budgets": budgets if budgets is not None else [{"nodes": "100%"}]}
    if expire_after is not None:
        obj["spec"]["template"]["spec"]["expireAfter"] = expire_after
    if annotations:
        obj["metadata"]["annotations"] = dict(annotations)
    return obj


def on_demand_pool(name: str = "default", **kwargs: Any) -> dict[str, Any]:
    """A pool that only launches on-demand nodes (so replacements are predictable)."""
    reqs = [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]
    return nodepool(name, requirements=reqs + kwargs.pop("requirements", []), **kwargs)


def pdb(name: str, match: dict[str, str], *, min_available: str | int | None = None,
        max_unavailable: str | int | None = None, disruptions_allowed: int | None = None,
        namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": dict(match)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    obj: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    if disruptions_allowed is not None:
        obj["status"] = {"disruptionsAllowed": disruptions_allowed}
    return obj


def snapshot(objects: list[dict[str, Any]]) -> Snapshot:
    return parse_objects(objects, source="test").with_catalog(kwok_catalog())


def half_empty(n: int, *, size: str = "c-4x", cpu: str = "1", labels: dict[str, str] | None = None,
               capacity_type: str = "on-demand", zone: str = "test-zone-a", prefix: str = "n"
               ) -> list[dict[str, Any]]:
    """``n`` nodes, each running one pod of ``cpu``: any one node holds three of them (c-4x: 3.9 cpu)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(node(f"{prefix}-{i}", size, zone=zone, capacity_type=capacity_type))
        out.append(running(f"{prefix}-pod-{i}", f"{prefix}-{i}", cpu, labels=labels))
    return out


def consolidate_verified(objects: list[dict[str, Any]] | Snapshot, *, now: datetime = NOW, **options: Any
                         ) -> ConsolidationResult:
    """Consolidate, then insist the independent verifier accepts the plan and its figures are coherent."""
    snap = objects if isinstance(objects, Snapshot) else snapshot(objects)
    options.setdefault("time_limit", 3.0)
    result = consolidate(snap, ConsolidateOptions(now=now, **options))
    plan = result.plan
    violations = verify_disruption(snap, plan, now, spot_to_spot=options.get("spot_to_spot", False))
    assert violations == [], violations
    if plan.cost.lower_bound is not None:
        assert plan.cost.lower_bound <= plan.cost.after + 1e-6, plan.cost
    assert plan.disruption.evictions == sum(r.evictions for r in plan.remove)
    assert len(plan.moves) == plan.disruption.evictions
    return result


def removed(result: ConsolidationResult) -> set[str]:
    return {r.node for r in result.plan.remove}


def reasons(result: ConsolidationResult) -> dict[str, str]:
    return {r.node: r.reason for r in result.plan.remove}


def blocked(result: ConsolidationResult, name: str) -> str:
    state = result.state.state(name)
    assert state is not None, name
    return state.blocked


def pinned(name: str, node_name: str, cpu: str = "1", **kwargs: Any) -> dict[str, Any]:
    """A pod that can only run on ``node_name`` (hostname nodeSelector): its node is never worth removing."""
    return running(name, node_name, cpu, spec_extra={"nodeSelector": {wk.HOSTNAME: node_name}}, **kwargs)


def keeper_and_target(*, node_kwargs: dict[str, Any] | None = None, pod_kwargs: dict[str, Any] | None = None,
                      pool: str = "default") -> list[dict[str, Any]]:
    """``keeper`` (c-4x, a pinned 1-cpu pod) and ``target`` (c-4x, one 1-cpu pod ``t-pod``): the only saving is
    removing ``target`` and moving ``t-pod`` onto ``keeper``."""
    return [node("keeper", pool=pool), pinned("keep-pod", "keeper"),
            node("target", pool=pool, **(node_kwargs or {})), running("t-pod", "target", **(pod_kwargs or {}))]


def ago(**delta: float) -> str:
    """An RFC 3339 time ``delta`` before NOW."""
    return (NOW - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def balanced_cluster(policy: str) -> list[dict[str, Any]]:
    """keeper: a c-16x with room; target: a c-2x running ten small pods. Removing target saves 0.0543 of
    0.4887 $/h (11 %) but evicts 10 of the pool's 11 pods (91 %): Balanced needs savings ≥ half of that."""
    objects = [on_demand_pool(policy=policy), node("keeper", "c-16x"), pinned("keep-pod", "keeper"),
               node("target", "c-2x")]
    objects += [running(f"small-{i}", "target", "100m", "100Mi", labels={"app": "small"}, owner="small-rs")
                for i in range(10)]
    return objects
