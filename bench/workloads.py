"""Seeded workload generators producing Kubernetes objects exactly as ``kubectl get -o yaml`` shows them.

Karpenter's benchmark draws cpu from {100, 250, 500, 1000, 1500}m and memory from {100, 256, 512, 1024,
2048, 4096}Mi; here pods come in Deployments (replicas share one shape), the way real clusters do.
"""

from __future__ import annotations

import random
from typing import Any

CPU_CHOICES = ("100m", "250m", "500m", "1000m", "1500m")
MEMORY_CHOICES = ("100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi")


def pod(name: str, *, namespace: str = "default", cpu: str = "100m", memory: str = "128Mi",
        labels: dict[str, str] | None = None, node_name: str | None = None, owner: str | None = None,
        spec_extra: dict[str, Any] | None = None, extra_requests: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as the API server returns it: pending (unschedulable) unless ``node_name`` is set."""
    requests = {"cpu": cpu, "memory": memory, **(extra_requests or {})}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {},
                            "uid": f"uid-{namespace}-{name}"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                    "uid": f"uid-rs-{owner}", "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.example/app:1",
                                            "resources": {"requests": requests}}],
                            "schedulerName": "default-scheduler", **(spec_extra or {})}
    status: dict[str, Any]
    if node_name:
        spec["nodeName"] = node_name
        status = {"phase": "Running"}
    else:
        status = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                     "reason": "Unschedulable"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def nodepool(name: str, *, requirements: list[dict[str, Any]] | None = None, weight: int | None = None,
             taints: list[dict[str, str]] | None = None, limits: dict[str, str] | None = None,
             labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {"metadata": {"labels": labels or {}},
                     "spec": {"requirements": requirements or [], "taints": taints or [],
                              "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                               "name": "default"}}},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s"},
    }
    if weight is not None:
        spec["weight"] = weight
    if limits:
        spec["limits"] = limits
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def linux_pool(name: str = "default", **kwargs: Any) -> dict[str, Any]:
    reqs = [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]
    return nodepool(name, requirements=reqs + kwargs.pop("requirements", []), **kwargs)


def generic_deployments(total_pods: int, seed: int, *, mean_replicas: int = 20,
                        namespace: str = "default") -> list[dict[str, Any]]:
    """Pending pods grouped into Deployments; each Deployment draws one (cpu, memory) shape."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    d = 0
    while len(out) < total_pods:
        replicas = min(max(1, int(rng.expovariate(1 / mean_replicas))), total_pods - len(out))
        cpu, memory = rng.choice(CPU_CHOICES), rng.choice(MEMORY_CHOICES)
        app = f"app-{d:04d}"
        for r in range(replicas):
            out.append(pod(f"{app}-{r:05d}", namespace=namespace, cpu=cpu, memory=memory,
                           labels={"app": app}, owner=f"{app}-rs"))
        d += 1
    return out


def as_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": objects}


#: The KWOK node class every NodePool in the tests and benchmarks refers to.
KWOK_NODECLASS = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}


def deployment(name: str, namespace: str, replicas: int, *, cpu: str = "500m", memory: str = "256Mi",
               labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A Deployment of identical pods (grace period 0, so evictions and scale-downs finish at once)."""
    labels = labels or {"app": name}
    pod_spec = {"terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": "registry.example.com/app:1",
                                "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}


def generic_deployment_objects(total_pods: int, seed: int, namespace: str) -> list[dict[str, Any]]:
    """Karpenter-style generic workload as Deployments (10–40 replicas each, one (cpu, memory) shape each),
    ``total_pods`` pods in all: what the e2e tests and ``bench.controller_perf`` create on a real cluster."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    made = 0
    while made < total_pods:
        replicas = min(total_pods - made, rng.choice((10, 20, 30, 40)))
        out.append(deployment(f"app-{len(out):03d}", namespace, replicas, cpu=rng.choice(CPU_CHOICES),
                              memory=rng.choice(MEMORY_CHOICES)))
        made += replicas
    return out
