"""Drain against a fake Eviction API: Karpenter's tiers, what is never evicted, PDB refusals (429) retried
with a per-pod back-off that holds up nothing else, and the terminationGracePeriod's forced deletion."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from kubernetes import client

from controller.cache import ClusterCache, Resource
from controller.drain import Drainer, is_drainable, parse_duration


class FakeCore:
    """Records evictions and deletions; ``refuse[name]`` answers that many evictions of ``name`` with 429."""

    def __init__(self) -> None:
        self.evictions: list[str] = []
        self.deletions: list[str] = []
        self.refuse: dict[str, int] = {}

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any) -> None:
        assert body["metadata"] == {"name": name, "namespace": namespace} and body["kind"] == "Eviction"
        if self.refuse.get(name, 0) > 0:
            self.refuse[name] -= 1
            self.evictions.append(f"{name}:429")
            raise client.ApiException(status=429, reason="Too Many Requests")
        self.evictions.append(name)

    def delete_namespaced_pod(self, name: str, namespace: str) -> None:
        self.deletions.append(name)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, node: str = "n1", *, critical: bool = False, owner: str = "ReplicaSet", phase: str = "Running",
        annotations: dict[str, str] | None = None, tolerations: list[dict[str, Any]] | None = None,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1",
                            "ownerReferences": [{"kind": owner, "name": "owner", "controller": True}],
                            "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"nodeName": node, "tolerations": tolerations or []}
    if critical:
        spec["priorityClassName"] = "system-node-critical"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def setup(*pods: dict[str, Any]) -> tuple[Drainer, ClusterCache, FakeCore, Clock]:
    cache = ClusterCache({"Pod": Resource("Pod", "v1", lambda **kw: None)})
    for p in pods:
        cache.upsert("Pod", p)
    clock = Clock()
    drainer = Drainer(client.ApiClient(), cache, clock=clock, initial_backoff=1.0, max_backoff=8.0)
    core = FakeCore()
    drainer._core = core  # type: ignore[assignment]
    return drainer, cache, core, clock


def remove(cache: ClusterCache, *names: str) -> None:
    store = cache.informers["Pod"]._store
    for name in names:
        store.pop(f"ns/{name}")


def test_what_is_never_evicted() -> None:
    assert is_drainable(pod("web"))
    assert not is_drainable(pod("ds", owner="DaemonSet"))
    assert not is_drainable(pod("static", owner="Node"))
    assert not is_drainable(pod("mirror", annotations={"kubernetes.io/config.mirror": "abc"}))
    assert not is_drainable(pod("done", phase="Succeeded"))
    assert not is_drainable(pod("failed", phase="Failed"))
    assert not is_drainable(pod("tolerant", tolerations=[{"key": "karpenter.sh/disrupted", "operator": "Exists"}]))
    assert not is_drainable(pod("everything", tolerations=[{"operator": "Exists"}]))
    # tolerating some other taint, or only NoExecute, is no reason to stay
    assert is_drainable(pod("other", tolerations=[{"key": "dedicated", "operator": "Exists"}]))
    assert is_drainable(pod("noexec", tolerations=[{"operator": "Exists", "effect": "NoExecute"}]))


def test_non_critical_pods_go_first_then_critical_ones() -> None:
    drainer, cache, core, _ = setup(pod("a"), pod("b"), pod("crit", critical=True), pod("ds", owner="DaemonSet"),
                                    pod("mirror", annotations={"kubernetes.io/config.mirror": "x"}),
                                    pod("done", phase="Succeeded"), pod("elsewhere", node="n2"))
    status = drainer.drain("n1")
    assert sorted(core.evictions) == ["a", "b"]
    assert status.remaining == ["ns/a", "ns/b", "ns/crit"] and not status.drained
    # a and b are still terminating: nothing new is evicted, and they are not evicted twice
    status = drainer.drain("n1")
    assert sorted(core.evictions) == ["a", "b"] and status.evicted == []
    remove(cache, "a")
    drainer.drain("n1")
    assert "crit" not in core.evictions  # b is still there
    remove(cache, "b")
    status = drainer.drain("n1")
    assert core.evictions[-1] == "crit" and status.evicted == ["ns/crit"]
    remove(cache, "crit")
    status = drainer.drain("n1")
    assert status.drained and status.remaining == []  # DaemonSet, mirror and finished pods stay, and do not count
    assert core.deletions == []


def test_pods_already_terminating_are_waited_for_not_evicted() -> None:
    drainer, _, core, _ = setup(pod("leaving", deleting=True))
    status = drainer.drain("n1")
    assert core.evictions == [] and status.remaining == ["ns/leaving"]


def test_pdb_refusal_backs_off_per_pod_without_holding_up_others() -> None:
    drainer, cache, core, clock = setup(pod("guarded"), pod("free"))
    core.refuse["guarded"] = 3
    status = drainer.drain("n1")
    assert status.blocked == ["ns/guarded"] and status.evicted == ["ns/free"]
    assert sorted(core.evictions) == ["free", "guarded:429"]
    # back-off 1 s, then 2 s, then 4 s; the free pod went at once
    timeline = [(0.5, False), (1.0, True), (2.5, False), (3.0, True), (6.9, False), (7.0, True)]
    for now, expect_call in timeline:
        clock.now = now
        before = len(core.evictions)
        status = drainer.drain("n1")
        assert (len(core.evictions) > before) == expect_call, now
        assert "ns/guarded" in status.blocked or status.evicted == ["ns/guarded"]
    assert core.evictions.count("guarded:429") == 3 and core.evictions[-1] == "guarded"
    remove(cache, "guarded", "free")
    assert drainer.drain("n1").drained


def test_back_off_is_capped() -> None:
    drainer, _, core, clock = setup(pod("guarded"))
    core.refuse["guarded"] = 100
    calls = []
    for step in range(400):
        clock.now = step * 0.25
        before = len(core.evictions)
        drainer.drain("n1")
        if len(core.evictions) > before:
            calls.append(clock.now)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[:4] == [1.0, 2.0, 4.0, 8.0] and max(gaps) == 8.0


def test_after_the_grace_period_pods_are_deleted_pdb_or_not() -> None:
    drainer, _, core, _ = setup(pod("guarded"), pod("crit", critical=True))
    core.refuse["guarded"] = 100
    drainer.drain("n1", force_after=4_000_000_000.0)  # far future: still evicting
    assert core.evictions == ["guarded:429"] and core.deletions == []
    status = drainer.drain("n1", force_after=0.0)  # long past
    assert core.deletions == ["guarded"] and status.evicted == ["ns/guarded"]


def test_parse_duration() -> None:
    assert parse_duration("0s") == 0.0
    assert parse_duration("90s") == 90.0
    assert parse_duration("1h30m") == 5400.0
    assert parse_duration("1.5h") == 5400.0
    assert parse_duration("250ms") == 0.25
    for bad in ("", "10", "1x", "h1", "1h 30m"):
        with pytest.raises(ValueError):
            parse_duration(bad)
