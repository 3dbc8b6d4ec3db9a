"""Property tests: on random clusters every plan passes the verifier, schedules at least as many pods as
greedy, never costs more than greedy when it schedules the same pods, and never undercuts its bound."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.workloads import nodepool, pod
from providers.kwok import kwok_catalog
from tests.conftest import snapshot_of, solve_verified

CATALOG = tuple(it for it in kwok_catalog() if it.labels["kubernetes.io/os"] == "linux"
                and int(it.labels["karpenter.kwok.sh/instance-cpu"]) <= 16)
ZONES = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"]
TAINT = {"key": "team", "value": "ml", "effect": "NoSchedule"}
SOFT_TAINT = {"key": "legacy", "value": "true", "effect": "PreferNoSchedule"}
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
RACK = "example.com/rack"


@st.composite
def pools(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 3))):
        reqs = []
        if draw(st.booleans()):
            reqs.append({"key": "karpenter.sh/capacity-type", "operator": "In",
                         "values": draw(st.sampled_from([["spot"], ["on-demand"], ["spot", "on-demand"]]))})
        if draw(st.booleans()):
            reqs.append({"key": "kubernetes.io/arch", "operator": "In",
                         "values": draw(st.sampled_from([["amd64"], ["arm64"]]))})
        if draw(st.booleans()):
            reqs.append({"key": "karpenter.kwok.sh/instance-family", "operator": "NotIn",
                         "values": [draw(st.sampled_from(["c", "s", "m"]))]})
        if draw(st.integers(0, 5)) == 0:  # Strict flexibility: at least two instance families per claim
            reqs.append({"key": "karpenter.kwok.sh/instance-family", "operator": "Exists", "minValues": 2})
        limits = {"cpu": str(draw(st.sampled_from([8, 16, 64])))} if draw(st.integers(0, 3)) == 0 else None
        taints = draw(st.sampled_from([[TAINT], [SOFT_TAINT], None, None]))
        labels = {RACK: f"r{draw(st.integers(0, 1))}"} if draw(st.booleans()) else None  # a custom domain key
        out.append(nodepool(f"pool-{i}", requirements=reqs, weight=draw(st.sampled_from([None, 10, 50])),
                            limits=limits, taints=taints, labels=labels))
    return out


@st.composite
def workloads(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for d in range(draw(st.integers(1, 5))):
        extra: dict[str, Any] = {}
        selector = draw(st.sampled_from([None, "zone", "arch", "capacity"]))
        if selector == "zone":
            extra["nodeSelector"] = {"topology.kubernetes.io/zone": draw(st.sampled_from(ZONES))}
        elif selector == "arch":
            extra["nodeSelector"] = {"kubernetes.io/arch": draw(st.sampled_from(["amd64", "arm64"]))}
        elif selector == "capacity":
            extra["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}]}}}
        if draw(st.booleans()):
            extra["tolerations"] = [{"key": "team", "operator": "Exists"}]
        if draw(st.integers(0, 3)) == 0:
            node_affinity = extra.setdefault("affinity", {}).setdefault("nodeAffinity", {})
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": draw(st.integers(1, 100)), "preference": {"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In",
                     "values": [draw(st.sampled_from(ZONES))]}]}}]
        pod_rule = draw(st.sampled_from([None, None, "anti", "port", "zone-anti", "zone-spread", "host-spread",
                                         "host-affinity", "zone-affinity", "soft-spread", "soft-anti",
                                         "affinity-bound", "anti-bound", "anti-other", "rack-spread", "rack-anti",
                                         "affinity-other"]))
        if pod_rule in ("affinity-bound", "anti-bound"):  # towards the running pods (app=bound), if any
            kind = "podAffinity" if pod_rule == "affinity-bound" else "podAntiAffinity"
            key = draw(st.sampled_from([ZONE, HOST]))
            extra.setdefault("affinity", {})[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "bound"}}, "topologyKey": key}]}
        if pod_rule == "anti-other" and d > 0:  # repels an earlier Deployment on the hostname
            extra.setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": f"d{draw(st.integers(0, d - 1))}"}}, "topologyKey": HOST}]}
        if pod_rule == "affinity-other" and d > 0:  # joins an earlier Deployment's zone or rack
            extra.setdefault("affinity", {})["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": f"d{draw(st.integers(0, d - 1))}"}},
                 "topologyKey": draw(st.sampled_from([ZONE, RACK]))}]}
        if pod_rule == "soft-spread":
            extra["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": ZONE,
                                                   "whenUnsatisfiable": "ScheduleAnyway",
                                                   "labelSelector": {"matchLabels": {"app": f"d{d}"}}}]
        if pod_rule == "soft-anti":
            extra.setdefault("affinity", {})["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": draw(st.integers(1, 100)), "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": f"d{d}"}}, "topologyKey": ZONE}}]}
        if pod_rule in ("host-affinity", "zone-affinity"):  # to its own Deployment only
            key = "kubernetes.io/hostname" if pod_rule == "host-affinity" else "topology.kubernetes.io/zone"
            extra.setdefault("affinity", {})["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": f"d{d}"}}, "topologyKey": key}]}
        if pod_rule in ("anti", "zone-anti"):  # against its own Deployment only
            key = "kubernetes.io/hostname" if pod_rule == "anti" else "topology.kubernetes.io/zone"
            extra.setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": f"d{d}"}}, "topologyKey": key}]}
        if pod_rule in ("zone-spread", "host-spread", "rack-spread"):
            key = {"host-spread": HOST, "zone-spread": ZONE, "rack-spread": RACK}[pod_rule]
            extra["topologySpreadConstraints"] = [{"maxSkew": draw(st.integers(1, 2)), "topologyKey": key,
                                                   "whenUnsatisfiable": "DoNotSchedule",
                                                   "nodeTaintsPolicy": draw(st.sampled_from(["Honor", "Ignore"])),
                                                   "labelSelector": {"matchLabels": {"app": f"d{d}"}}}]
        if pod_rule == "rack-anti":
            extra.setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": f"d{d}"}}, "topologyKey": RACK}]}
        cpu = draw(st.sampled_from(["100m", "250m", "500m", "1", "1500m", "3"]))
        memory = draw(st.sampled_from(["128Mi", "512Mi", "1Gi", "4Gi", "12Gi"]))
        for r in range(draw(st.integers(1, 12))):
            spec = dict(extra)
            if pod_rule == "port":  # a port of its own, so Deployments never clash with each other
                spec["containers"] = [{"name": "app", "ports": [{"containerPort": 80, "hostPort": 8000 + d}],
                                       "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
            out.append(pod(f"d{d}-{r}", cpu=cpu, memory=memory, owner=f"d{d}", labels={"app": f"d{d}"},
                           spec_extra=spec))
    return out


@st.composite
def existing(draw: st.DrawFn, pool_names: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 2))):
        name = f"node-{i}"
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {
                        "karpenter.sh/nodepool": draw(st.sampled_from(pool_names)), "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name,
                        "karpenter.sh/capacity-type": "on-demand",
                        "topology.kubernetes.io/zone": draw(st.sampled_from(ZONES))}},
                    "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "64"},
                               "allocatable": {"cpu": "3900m", "memory": "16Gi", "pods": "64"},
                               "conditions": [{"type": "Ready", "status": "True"}]}})
        out.append(pod(f"bound-{i}", cpu=draw(st.sampled_from(["500m", "2"])), memory="2Gi", node_name=name,
                       labels={"app": "bound"}))
    return out


@st.composite
def clusters(draw: st.DrawFn) -> list[dict[str, Any]]:
    ps = draw(pools())
    objects = ps + draw(workloads()) + draw(existing([p["metadata"]["name"] for p in ps]))
    if draw(st.booleans()):
        objects.append({"apiVersion": "apps/v1", "kind": "DaemonSet",
                        "metadata": {"name": "agent", "namespace": "kube-system"},
                        "spec": {"template": {"spec": {"containers": [{"name": "a", "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}})
    return objects


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(clusters())
def test_random_clusters_give_valid_plans_no_worse_than_greedy(objects: list[dict[str, Any]]) -> None:
    snapshot = snapshot_of(objects, CATALOG)
    result = solve_verified(snapshot, time_limit=2.0)
    plan, greedy = result.plan, result.greedy
    assert len(plan.unschedulable) <= len(greedy.unschedulable)
    weights = {np.weight for np in snapshot.nodepools}
    preferences = any(p.preferred_terms or p.preferred_pod_anti_affinity or p.preferred_pod_affinity
                      or any(s.when_unsatisfiable == "ScheduleAnyway" for s in p.topology_spread)
                      for p in snapshot.pods) or any(t.effect == "PreferNoSchedule" for np in snapshot.nodepools
                                                     for t in np.taints)
    if len(plan.unschedulable) == len(greedy.unschedulable) and len(weights) == 1 and not preferences:
        assert plan.cost.total <= (plan.cost.greedy or 0.0) + 1e-5  # prices are summed as floats
