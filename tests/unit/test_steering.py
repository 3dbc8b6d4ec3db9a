"""Steered eviction (``controller.steering``): a consolidation decision's pods are evicted one destination at a
time while every other node carries the ``nodeplan.io/steering:PreferNoSchedule`` taint, so a scheduler that
prefers untainted nodes binds each replacement where the plan put its pod; a wave starts once the last one's
pods are bound again; a PDB refusal stops it; every steering taint is gone when it ends."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from controller.cache import ClusterCache, Resource
from controller.steering import STEER_MAX_NODES, Steering

KINDS = ("Pod", "Node")


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def pod(name: str, on: str, owner: str | None = "web-rs") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": on},
            "status": {"phase": "Running"}}


class Scheduler:
    """The steerer, and a kube-scheduler that binds a replacement to the first node without the steering
    taint (by name); records every fence, eviction and binding."""

    def __init__(self, cache: ClusterCache, removed: set[str], *, refuse: str = "", recreate: bool = True) -> None:
        self.cache = cache
        self.removed = removed
        self.refuse = refuse
        self.recreate = recreate
        self.fenced: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.bound: dict[str, str] = {}
        #: the fenced nodes when each pod was evicted
        self.fenced_at: dict[str, set[str]] = {}

    def fence(self, node: str, on: bool) -> None:
        self.calls.append(("fence" if on else "unfence", node))
        (self.fenced.add if on else self.fenced.discard)(node)

    def evict(self, raw: Mapping[str, Any]) -> str:
        name = raw["metadata"]["name"]
        if name == self.refuse:
            return "blocked"
        self.calls.append(("evict", name))
        self.fenced_at[name] = set(self.fenced)
        gone = copy.deepcopy(dict(raw))  # terminating, as an evicted pod is until its kubelet is done
        gone["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", resourceVersion="2")
        self.cache.upsert("Pod", gone)
        if self.recreate:
            nodes = sorted(str(n["metadata"]["name"]) for n in self.cache.items("Node"))
            to = next(n for n in nodes if n not in self.fenced and n not in self.removed)
            again = copy.deepcopy(dict(raw))
            again["metadata"].update(name=f"{name}-again", uid=f"uid-{name}-again", resourceVersion="1")
            again["spec"]["nodeName"] = to
            self.cache.upsert("Pod", again)
            self.bound[name] = to
        return "evicted"


def cluster(pods: list[dict[str, Any]], nodes: list[str]) -> ClusterCache:
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in KINDS})
    for name in nodes:
        cache.upsert("Node", node(name))
    for p in pods:
        cache.upsert("Pod", p)
    return cache


def test_each_wave_finds_only_its_destination_unfenced_and_every_taint_goes_at_the_end() -> None:
    """Three pods off ``old`` planned onto ``a`` (two) and ``b`` (one), with ``c`` and ``d`` kept too: the
    two for ``a`` go first with ``b``, ``c`` and ``d`` fenced, then the one for ``b`` with ``a``, ``c``, ``d``
    fenced; each replacement is bound where its pod was planned, the removed node is never fenced, and no
    node is fenced afterwards."""
    cache = cluster([pod("p1", "old"), pod("p2", "old"), pod("p3", "old")], ["old", "a", "b", "c", "d"])
    scheduler = Scheduler(cache, {"old"})
    report = Steering(cache, scheduler, wave_seconds=1.0).move({"ns/p1": "a", "ns/p2": "a", "ns/p3": "b"},
                                                                {"old"})
    assert report.stopped == "" and report.waves == 2 and report.evicted == 3
    assert scheduler.bound == {"p1": "a", "p2": "a", "p3": "b"}
    assert scheduler.fenced_at == {"p1": {"b", "c", "d"}, "p2": {"b", "c", "d"}, "p3": {"a", "c", "d"}}
    assert ("fence", "old") not in scheduler.calls
    assert scheduler.fenced == set()


def test_a_pdb_refusal_stops_the_waves_and_leaves_the_rest_to_the_drain() -> None:
    """The first wave's pod is refused by a PodDisruptionBudget: steering stops there, evicts nothing more,
    says why, and removes its taints; the pods stay for the termination drain."""
    cache = cluster([pod("p1", "old"), pod("p2", "old")], ["old", "a", "b"])
    scheduler = Scheduler(cache, {"old"}, refuse="p1")
    report = Steering(cache, scheduler, wave_seconds=1.0).move({"ns/p1": "a", "ns/p2": "b"}, {"old"})
    assert "PodDisruptionBudget" in report.stopped and report.evicted == 0 and report.waves == 1
    assert not [c for c in scheduler.calls if c[0] == "evict"]
    assert scheduler.fenced == set()
    assert not any(p["metadata"].get("deletionTimestamp") for p in cache.items("Pod"))


def test_a_wave_whose_pods_do_not_come_back_stops_after_its_wait() -> None:
    """Evicted pods whose ReplicaSet does not create them again within the wave's wait: steering stops
    there, and unfences every node."""
    cache = cluster([pod("p1", "old"), pod("p2", "old")], ["old", "a", "b"])
    scheduler = Scheduler(cache, {"old"}, recreate=False)
    report = Steering(cache, scheduler, wave_seconds=0.2).move({"ns/p1": "a", "ns/p2": "b"}, {"old"})
    assert "not all bound again" in report.stopped and report.evicted == 1
    assert scheduler.fenced == set()


def test_a_bare_pod_is_not_waited_for_and_a_large_cluster_is_not_fenced() -> None:
    """A pod without a controller is gone once evicted: the next wave does not wait for it. Above
    ``STEER_MAX_NODES`` nodes nothing is fenced or evicted (each node would be two taint writes)."""
    cache = cluster([pod("bare", "old", owner=None), pod("p2", "old")], ["old", "a", "b"])
    scheduler = Scheduler(cache, {"old"}, recreate=False)
    report = Steering(cache, scheduler, wave_seconds=5.0).move({"ns/bare": "a"}, {"old"})
    assert report.stopped == "" and report.evicted == 1
    big = cluster([pod("p1", "old")], ["old", *(f"n{i:03d}" for i in range(STEER_MAX_NODES))])
    scheduler = Scheduler(big, {"old"})
    report = Steering(big, scheduler).move({"ns/p1": "n000"}, {"old"})
    assert "more than" in report.stopped and scheduler.calls == []
