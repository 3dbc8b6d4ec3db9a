"""Karpenter's older benchmark mix, cross-workload: pod (anti-)affinity and spread selectors drawn
independently of the pod's own labels, so each term points at OTHER workloads, not at itself.

Karpenter's scheduling benchmark before 1.x (``makePodAffinityPods`` with ``randomAffinityLabels``,
``makeTopologySpreadPods`` with ``randomLabels``) labelled each pod ``my-affininity=<v>`` / ``my-label=<v>``
and gave it a term selecting ``my-affininity=<w>`` / ``my-label=<w>``, both values drawn independently from
seven: a pod is affine to (or spread against) whichever pods happen to carry ``w`` — mostly other
workloads, itself only when ``v == w``. This mix keeps that and adds the anti-affinity counterparts the
brief asks for, all grouped into Deployments (replicas share one shape, one label value and one term):

- ``generic``: ``my-label=<v>``, no term;
- ``zone-spread`` / ``hostname-spread``: ``my-label=<v>``, maxSkew 1 DoNotSchedule on ``my-label=<w>``
  (generic and spread pods are what it counts);
- ``zone-affinity`` / ``hostname-affinity``: ``my-affininity=<v>``, required pod affinity to
  ``my-affininity=<w>``;
- ``hostname-anti``: ``my-anti=<v>``, required pod anti-affinity to ``my-anti=<w>`` on the hostname;
- ``zone-anti``: required pod anti-affinity on the zone to one other Deployment drawn at random (its
  ``app`` label): with seven shared values a zone term would repel a seventh of the cluster from every
  zone, so the zone share repels one workload, as real "keep these two apart" rules do.

cpu and memory are drawn from Karpenter's sets; Python's ``random`` with the given seed draws the same
distributions as Go's ``math/rand``, not the same pods. Pods carry a ReplicaSet owner, as a Deployment's
do (each pod its own copy of the template, so the YAML has no anchors).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

from bench.diverse import CPUS, LABEL_VALUES, MEMORIES
from bench.workloads import nodepool, pod
from model import labels as wk

KINDS = ("generic", "zone-spread", "hostname-spread", "zone-affinity", "hostname-affinity", "hostname-anti",
         "zone-anti")
#: mean replicas of a Deployment (exponentially distributed, at least 1)
MEAN_REPLICAS = 8


@dataclass(frozen=True)
class _Deployment:
    app: str
    kind: str
    replicas: int
    cpu: str
    memory: str
    value: str
    selects: str


def _deployments(pods: int, rng: random.Random) -> list[_Deployment]:
    out: list[_Deployment] = []
    total = 0
    while total < pods:
        kind = rng.choice(KINDS)
        replicas = min(max(1, int(rng.expovariate(1 / MEAN_REPLICAS))), pods - total)
        out.append(_Deployment(app=f"{kind}-{len(out):04d}", kind=kind, replicas=replicas, cpu=rng.choice(CPUS),
                               memory=rng.choice(MEMORIES), value=rng.choice(LABEL_VALUES),
                               selects=rng.choice(LABEL_VALUES)))
        total += replicas
    return out


def _term(selector: dict[str, str], key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": selector}, "topologyKey": key}


def _spec(d: _Deployment, others: list[_Deployment], rng: random.Random) -> tuple[dict[str, str], dict[str, Any]]:
    """The Deployment's pod labels and the placement fields of its pod template."""
    labels = {"app": d.app}
    key = wk.ZONE if d.kind.startswith("zone") else wk.HOSTNAME
    if d.kind in ("generic", "zone-spread", "hostname-spread"):
        labels["my-label"] = d.value
        if d.kind == "generic":
            return labels, {}
        return labels, {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": key,
                                                       "whenUnsatisfiable": "DoNotSchedule",
                                                       "labelSelector": {"matchLabels": {"my-label": d.selects}}}]}
    if d.kind in ("zone-affinity", "hostname-affinity"):
        labels["my-affininity"] = d.value
        return labels, {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            _term({"my-affininity": d.selects}, key)]}}}
    if d.kind == "hostname-anti":
        labels["my-anti"] = d.value
        return labels, {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            _term({"my-anti": d.selects}, key)]}}}
    target = rng.choice(others).app if others else d.app
    return labels, {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        _term({"app": target}, key)]}}}


def cross_workload_pods(pods: int, seed: int = 42) -> list[dict[str, Any]]:
    """``pods`` pending pods in Deployments of the seven kinds above (equal odds per Deployment)."""
    rng = random.Random(seed)
    deployments = _deployments(pods, rng)
    out: list[dict[str, Any]] = []
    for d in deployments:
        labels, extra = _spec(d, [o for o in deployments if o.app != d.app], rng)
        for r in range(d.replicas):
            out.append(pod(f"{d.app}-{r:05d}", cpu=d.cpu, memory=d.memory, labels=dict(labels),
                           owner=f"{d.app}-rs", spec_extra=copy.deepcopy(extra)))
    return out


def cross_workload_objects(pods: int, seed: int = 42) -> list[dict[str, Any]]:
    """The pods plus the one NodePool the mix is solved with (limits as high as the diverse mix's)."""
    return [nodepool("default", limits={"cpu": "10000000", "memory": "10000000Gi"}),
            *cross_workload_pods(pods, seed)]
