"""NodeClaim termination against recording fakes: taint, drain, Drained, delete the instance, release the
finalizer — one idempotent step per lifecycle pass; a deleted Node takes its NodeClaim with it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from controller.cache import ClusterCache, Resource
from controller.lifecycle import Lifecycle
from controller.termination import FINALIZER, drain_deadline
from model.nodepool import NodeClaim
from providers.protocol import NodeClaimNotFoundError
from tests.unit.test_drain import FakeCore, pod


class FakeApi(FakeCore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    def patch_node(self, name: str, body: Any, **kwargs: Any) -> None:
        self.calls.append(("patch_node", body))

    def patch_cluster_custom_object_status(self, group: str, version: str, plural: str, name: str, body: Any
                                           ) -> dict[str, Any]:
        self.calls.append(("status", body["status"]))
        return {"metadata": {"name": name, "resourceVersion": "0"}, **body}

    def patch_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any,
                                    **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("patch_claim", body))
        return {}

    def delete_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> None:
        self.calls.append(("delete_claim", name))


class FakeProvider:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def create(self, claim: NodeClaim) -> dict[str, Any]:
        raise AssertionError("nothing is launched here")

    def delete(self, claim: NodeClaim) -> None:
        self.deleted.append(claim.name)


def claim(*, deleting: bool = True, grace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c1", "uid": "c1-uid", "resourceVersion": "1", "finalizers": [FINALIZER],
                            "labels": {"karpenter.sh/nodepool": "p"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"terminationGracePeriod": grace} if grace else {}
    conditions = [{"type": t, "status": "True"} for t in ("Launched", "Registered", "Initialized")]
    return {"metadata": meta, "spec": spec, "status": {"nodeName": "c1", "conditions": conditions}}


def node(*, deleting: bool = False, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c1", "resourceVersion": "1", "labels": {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"taints": taints or []},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def setup(raw_claim: dict[str, Any], raw_node: dict[str, Any] | None, *pods: dict[str, Any]
          ) -> tuple[Lifecycle, ClusterCache, FakeApi, FakeProvider]:
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in ("Pod", "Node", "NodeClaim")})
    cache.upsert("NodeClaim", raw_claim)
    if raw_node is not None:
        cache.upsert("Node", raw_node)
    for p in pods:
        cache.upsert("Pod", p)
    provider = FakeProvider()
    lifecycle = Lifecycle(client.ApiClient(), cache, provider)
    api = FakeApi()
    for target in (lifecycle, lifecycle.terminator, lifecycle.terminator.drainer):
        target._core = api  # type: ignore[attr-defined]
        if hasattr(target, "_custom"):
            target._custom = api  # type: ignore[attr-defined]
    return lifecycle, cache, api, provider


def drained(api: FakeApi) -> list[str]:
    return [c["status"] for kind, body in api.calls if kind == "status"
            for c in body["conditions"] if c["type"] == "Drained"]


def test_deleting_claim_is_tainted_drained_deleted_and_released() -> None:
    lifecycle, cache, api, provider = setup(claim(), node(), pod("web", node="c1"), pod("ds", node="c1",
                                                                                        owner="DaemonSet"))
    lifecycle.reconcile_all()
    taint = next(body for kind, body in api.calls if kind == "patch_node")
    assert {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"} in taint[0]["value"]
    assert api.evictions == ["web"] and drained(api) == ["False"]
    assert provider.deleted == []
    # still draining: no second eviction, no second status write
    cache.upsert("Node", node(taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]))
    api.calls.clear()
    lifecycle.reconcile_all()
    assert api.calls == [] and api.evictions == ["web"]
    # the pod left (the DaemonSet pod stays): Drained, the instance is deleted, the claim waits for the Node
    cache.informers["Pod"]._store.pop("ns/web")
    lifecycle.reconcile_all()
    assert drained(api) == ["True"] and provider.deleted == ["c1"]
    assert not any(kind == "patch_claim" for kind, _ in api.calls)
    # the Node is gone: the finalizer is removed (a test-and-replace patch, so a concurrent change is not lost)
    cache.informers["Node"]._store.pop("c1")
    lifecycle.reconcile_all()
    patch = next(body for kind, body in api.calls if kind == "patch_claim")
    assert patch == [{"op": "test", "path": "/metadata/finalizers", "value": [FINALIZER]},
                     {"op": "replace", "path": "/metadata/finalizers", "value": []}]


def test_claim_without_node_is_released_at_once() -> None:
    raw = claim()
    raw["status"] = {"conditions": []}
    lifecycle, _, api, provider = setup(raw, None)
    lifecycle.reconcile_all()
    assert provider.deleted == ["c1"] and any(kind == "patch_claim" for kind, _ in api.calls)


def test_without_our_finalizer_nothing_is_done() -> None:
    raw = claim()
    raw["metadata"]["finalizers"] = ["someone.else/finalizer"]
    lifecycle, _, api, provider = setup(raw, node(), pod("web", node="c1"))
    lifecycle.reconcile_all()
    assert api.calls == [] and api.evictions == [] and provider.deleted == []


def test_deleted_node_takes_its_claim_with_it() -> None:
    lifecycle, _, api, _ = setup(claim(deleting=False), node(deleting=True), pod("web", node="c1"))
    lifecycle.reconcile_all()
    assert ("delete_claim", "c1") in api.calls
    # a registered claim whose Node vanished is deleted too; a healthy one is left alone
    lifecycle, _, api, _ = setup(claim(deleting=False), None)
    lifecycle.reconcile_all()
    assert ("delete_claim", "c1") in api.calls
    lifecycle, _, api, _ = setup(claim(deleting=False), node())
    lifecycle.reconcile_all()
    assert not any(kind == "delete_claim" for kind, _ in api.calls)


def test_termination_grace_period_forces_deletion() -> None:
    assert drain_deadline(claim()) is None
    assert drain_deadline(claim(grace="1h")) == drain_deadline(claim(grace="60m")) == 1_767_225_600.0 + 3600
    assert drain_deadline(claim(grace="soon")) is None  # invalid: ignored (logged)
    lifecycle, _, api, _ = setup(claim(grace="30s"), node(), pod("guarded", node="c1"))
    api.refuse["guarded"] = 100
    lifecycle.reconcile_all()  # the deletion was in 2026-01-01, long past + 30 s: pods are deleted, not evicted
    assert api.deletions == ["guarded"] and api.evictions == []


def test_created_claims_and_kwok_nodes_carry_the_finalizer_and_delete_releases_the_node() -> None:
    from types import SimpleNamespace

    from controller.provisioner import nodeclaim_body
    from providers.kwok import kwok_catalog
    from providers.kwok_nodes import KwokProvider
    from tests.unit.test_controller import nodepool, planned

    body = nodeclaim_body(planned(), nodepool(), "default-abc", ["u1"])
    assert body["metadata"]["finalizers"] == [FINALIZER]
    provider = KwokProvider(client.ApiClient(), kwok_catalog())
    claim = NodeClaim.model_validate(body)
    assert provider.node_for(claim)["metadata"]["finalizers"] == [FINALIZER]

    class Core:
        def __init__(self, finalizers: list[str] | None) -> None:
            self.finalizers, self.calls = finalizers, []  # type: ignore[var-annotated]

        def delete_node(self, name: str) -> None:
            self.calls.append(("delete", name))
            if self.finalizers is None:
                raise client.ApiException(status=404)

        def read_node(self, name: str) -> Any:
            return SimpleNamespace(json=lambda: {"metadata": {"finalizers": self.finalizers}})

        def patch_node(self, name: str, body: Any, **kwargs: Any) -> None:
            self.calls.append(("patch", body))

    core = Core(["other/finalizer", FINALIZER])
    provider._core = core  # type: ignore[assignment]
    provider.delete(claim)
    assert core.calls == [("delete", "default-abc"), ("patch", [
        {"op": "test", "path": "/metadata/finalizers", "value": ["other/finalizer", FINALIZER]},
        {"op": "replace", "path": "/metadata/finalizers", "value": ["other/finalizer"]}])]
    core = Core(None)  # already gone: the provider says so, and termination takes that as done
    provider._core = core  # type: ignore[assignment]
    with pytest.raises(NodeClaimNotFoundError):
        provider.delete(claim)
    assert core.calls == [("delete", "default-abc")]
