"""The provider interface as the controller uses it: fallback offerings (planned first), labels following the
offering launched, refused offerings backed off, Nodes matched by providerID, instances gone on delete, and
garbage collection in both directions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from controller.cache import ClusterCache, Resource
from controller.garbage import GarbageCollector
from controller.lifecycle import Lifecycle
from controller.provisioner import PODS_ANNOTATION, fallback_types, nodeclaim_body
from model.nodepool import NodeClaim, NodeClaimStatus
from model.pod import Pod
from providers.kwok import kwok_catalog
from providers.kwok_nodes import KwokProvider
from providers.protocol import InsufficientCapacityError, Launched, NodeClaimNotFoundError
from tests.unit.test_controller import nodepool, planned

CATALOG = {it.name: it for it in kwok_catalog()}
NOW = 1_800_000_000.0


def _stamp(epoch: float) -> str:
    from datetime import UTC, datetime
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_fallbacks_hold_the_requests_and_satisfy_pool_and_pods() -> None:
    pod = Pod.parse({"metadata": {"name": "a", "namespace": "default", "uid": "u1"}, "spec": {
        "nodeSelector": {"kubernetes.io/arch": "amd64"}, "containers": [{"name": "c"}]}})
    names = fallback_types(planned(), nodepool(), kwok_catalog(), [pod])
    assert names and "c-4x-amd64-linux" not in names
    prices = []
    for name in names:
        it = CATALOG[name]
        assert it.labels["kubernetes.io/arch"] == "amd64" and it.labels["kubernetes.io/os"] == "linux"
        assert int(it.labels["karpenter.kwok.sh/instance-cpu"]) >= 2
        assert it.allocatable["cpu"] >= 1500
        prices.append(next(o.price for o in it.offerings if o.zone == "test-zone-b" and o.capacity_type == "spot"))
    assert prices == sorted(prices)
    body = nodeclaim_body(planned(), nodepool(), "x", ["u1"], names)
    reqs = {r["key"]: r["values"] for r in body["spec"]["requirements"]}
    assert reqs["node.kubernetes.io/instance-type"] == ["c-4x-amd64-linux", *names]
    assert reqs["topology.kubernetes.io/zone"] == ["test-zone-b"]  # zone and capacity type stay pinned


def _claim(fallbacks: list[str]) -> NodeClaim:
    body = nodeclaim_body(planned(), nodepool(), "default-abc", ["u1"], fallbacks)
    body["metadata"]["uid"] = "claim-uid"
    return NodeClaim.model_validate(body)


def test_kwok_launches_the_planned_offering_first_then_falls_back() -> None:
    provider = KwokProvider.__new__(KwokProvider)
    provider._types = dict(CATALOG)
    # the planned type is dearer than the fallback and still goes first
    claim = _claim(["c-2x-amd64-linux"])
    assert provider.node_for(claim)["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "c-4x-amd64-linux"
    planned_type = CATALOG["c-4x-amd64-linux"]
    down = tuple(o.model_copy(update={"available": False}) if o.zone == "test-zone-b" else o
                 for o in planned_type.offerings)
    provider._types["c-4x-amd64-linux"] = planned_type.model_copy(update={"offerings": down})
    node = provider.node_for(claim)
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "c-2x-amd64-linux"
    with pytest.raises(InsufficientCapacityError) as err:
        provider.node_for(_claim([]))
    assert err.value.offerings == (("c-4x-amd64-linux", "test-zone-b", "spot"),)


class Api:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def patch_cluster_custom_object_status(self, group: str, version: str, plural: str, name: str, body: Any
                                           ) -> dict[str, Any]:
        self.calls.append(("status", body["status"]))
        return {"metadata": {"name": name, "resourceVersion": "9"}, **body}

    def patch_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any,
                                    **kw: Any) -> dict[str, Any]:
        self.calls.append(("patch_claim", body))
        return {"metadata": {"name": name, "resourceVersion": "9", **body.get("metadata", {})}}

    def delete_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> None:
        self.calls.append(("delete_claim", name))

    def delete_node(self, name: str) -> None:
        self.calls.append(("delete_node", name))

    def patch_node(self, name: str, body: Any, **kwargs: Any) -> None:
        self.calls.append(("patch_node", (name, body)))

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any) -> None:
        self.calls.append(("nominate", name))


def _cache() -> ClusterCache:
    return ClusterCache({k: Resource(k, "v1", lambda **kw: None) for k in ("Pod", "Node", "NodeClaim")})


class CloudLike:
    """A provider that does not know the Node's name and launched a fallback after one refusal."""

    name = "fake"

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.gone = False
        self.instances: list[NodeClaim] = []

    def create(self, claim: NodeClaim) -> Launched:
        labels = {**claim.metadata.labels, "node.kubernetes.io/instance-type": "c-2x-amd64-linux"}
        status = NodeClaimStatus.model_validate({"providerID": "aws:///test-zone-b/i-0abc",
                                                 "capacity": {"cpu": "2"}, "allocatable": {"cpu": "1900m"}})
        launched = claim.model_copy(update={"metadata": claim.metadata.model_copy(update={"labels": labels}),
                                            "status": status})
        return Launched(launched, refused=(("c-4x-amd64-linux", "test-zone-b", "spot"),))

    def delete(self, claim: NodeClaim) -> None:
        self.deleted.append(claim.status.provider_id or claim.name)
        if self.gone:
            raise NodeClaimNotFoundError("terminated")

    def list(self) -> list[NodeClaim]:
        return self.instances


def test_fallback_launch_relabels_the_claim_backs_off_the_refused_offering_and_links_by_provider_id() -> None:
    cache = _cache()
    provider = CloudLike()
    lifecycle = Lifecycle(client.ApiClient(), cache, provider)  # type: ignore[arg-type]
    api = Api()
    lifecycle._core = lifecycle._custom = api  # type: ignore[assignment]
    body = nodeclaim_body(planned(), nodepool(), "default-abc", ["u1"], ["c-2x-amd64-linux"])
    body["metadata"].update(uid="c-uid", resourceVersion="1")
    cache.upsert("NodeClaim", body)
    assert lifecycle.reconcile_all() == 1
    assert lifecycle.unavailable.active() == {("c-4x-amd64-linux", "test-zone-b", "spot")}
    patch = next(b for kind, b in api.calls if kind == "patch_claim")
    assert patch == {"metadata": {"labels": {"node.kubernetes.io/instance-type": "c-2x-amd64-linux"}}}
    raw = cache.items("NodeClaim")[0]
    assert raw["status"]["providerID"] == "aws:///test-zone-b/i-0abc" and raw["status"]["nodeName"] == ""
    # the kubelet registers under its own name; the providerID links it
    cache.upsert("Node", {"metadata": {"name": "ip-10-0-1-7.ec2.internal", "resourceVersion": "2", "labels": {}},
                          "spec": {"providerID": "aws:///test-zone-b/i-0abc"}, "status": {}})
    api.calls.clear()
    lifecycle.reconcile_all()
    assert ("status", {"nodeName": "ip-10-0-1-7.ec2.internal"}) in api.calls
    assert cache.items("NodeClaim")[0]["status"]["nodeName"] == "ip-10-0-1-7.ec2.internal"


def test_termination_deletes_the_node_once_the_instance_is_gone() -> None:
    from tests.unit.test_termination import claim, node, setup

    lifecycle, _, api, _ = setup(claim(), node())
    provider = CloudLike()
    provider.gone = True
    lifecycle.terminator._provider = provider  # type: ignore[assignment]
    api.delete_node = lambda name: api.calls.append(("delete_node", name))  # type: ignore[attr-defined]
    lifecycle.reconcile_all()
    assert ("delete_node", "c1") in api.calls
    assert not any(kind == "patch_claim" for kind, _ in api.calls)  # the claim waits for the Node to go


def _instance(pid: str, launched: float) -> NodeClaim:
    return NodeClaim.model_validate({"metadata": {"name": "", "creationTimestamp": _stamp(launched)},
                                     "status": {"providerID": pid}})


def test_garbage_collection_terminates_leaked_instances_and_forgets_lost_ones() -> None:
    cache = _cache()
    provider = CloudLike()
    provider.instances = [_instance("aws:///z/i-leaked", NOW - 120), _instance("aws:///z/i-young", NOW - 5),
                          _instance("aws:///z/i-owned", NOW - 600)]
    launched = [{"type": "Launched", "status": "True", "lastTransitionTime": _stamp(NOW - 300)}]
    cache.upsert("NodeClaim", {"metadata": {"name": "owned", "resourceVersion": "1",
                                            "annotations": {PODS_ANNOTATION: json.dumps([])}},
                               "status": {"providerID": "aws:///z/i-owned", "conditions": launched}})
    cache.upsert("NodeClaim", {"metadata": {"name": "lost", "resourceVersion": "1"},
                               "status": {"providerID": "aws:///z/i-vanished", "conditions": launched}})
    cache.upsert("Node", {"metadata": {"name": "ip-1", "resourceVersion": "1"},
                          "spec": {"providerID": "aws:///z/i-leaked"}})
    gc = GarbageCollector(client.ApiClient(), cache, provider, grace=30, clock=lambda: NOW)  # type: ignore[arg-type]
    api = Api()
    gc._core = gc._custom = api  # type: ignore[assignment]
    result = gc.collect()
    assert result.terminated == ["aws:///z/i-leaked"] and provider.deleted == ["aws:///z/i-leaked"]
    assert result.nodes_deleted == ["ip-1"]
    assert result.claims_deleted == ["lost"]
    assert not gc.due()
