"""What the controller holds per watched pod (issue 13's target: at most 2 KB): the slim object the watch cache
keeps plus the model a batch parses from it. Replicas share one immutable ``PodShape``, so a pod costs little
more than its identity; sharing must not let an edit of one pod reach another."""

from __future__ import annotations

import json

import pydantic
import pytest

from bench.controller_scale import OfflineCluster, api_pod
from controller.decode import Decoder, PodParser
from model.pod import Pod, PodShape
from model.resources import Resources

#: issue 13's target, bytes per watched pod as an operator sees them (resident set size)
TARGET = 2048
#: tracemalloc counts live Python objects, deterministically for one Python and one set of packages; the
#: resident size is more: ``python -m bench.controller_scale --offline`` (50,000 pods, 5,000 nodes) measured
#: 1,972 resident bytes a pod where this 5,000-pod / 500-node cache counts 1,706 under tracemalloc (allocator
#: rounding and pools, hash tables grown in steps). A cache that passes this limit keeps the 50,000-pod resident
#: figure under the target; ~75 bytes of headroom are left for new fields.
LIMIT = TARGET - 268


def test_memory_per_watched_pod_stays_under_the_target() -> None:
    cluster = OfflineCluster(pods=5_000, nodes=500, deployments=50)  # 100 replicas a Deployment, as the bench
    cached, parsed = cluster.memory_per_pod()
    assert cached + parsed <= LIMIT, f"{cached:.0f} B cached + {parsed:.0f} B parsed models a pod"


def slim(raw: dict[str, object]) -> dict[str, object]:
    return Decoder("Pod", "v1").slim(raw)


def test_the_store_keeps_no_key_string_per_object_and_pods_share_timestamps() -> None:
    from controller.cache import ClusterCache, Resource

    cache = ClusterCache({"Pod": Resource("Pod", "v1", lambda **_: None)})
    for i in (1, 2):  # created in one second, each started in the second it was created
        raw = json.loads(json.dumps(api_pod(f"web-{i}", "shop", "web-7c6b", cpu="250m", memory="512Mi", node="n1",
                                            rv=i)))  # strings of their own, as decoded from the API server's JSON
        assert raw["status"]["startTime"] is not raw["metadata"]["creationTimestamp"]
        cache.upsert("Pod", raw)
    first, second = sorted(cache.items("Pod"), key=lambda p: p["metadata"]["name"])
    store = cache.informers["Pod"]._store
    [name] = [k for k, v in store._objects["shop"].items() if v is first]
    assert name is first["metadata"]["name"] and store.get("shop/web-1") is first
    created = first["metadata"]["creationTimestamp"]
    assert created == "2026-12-01T10:00:00Z"
    assert first["status"]["startTime"] is created and second["metadata"]["creationTimestamp"] is created
    # a model belongs to its object: replacing the object drops it
    model = cache.parsed(first)
    assert cache.parsed(first) is model
    cache.upsert("Pod", api_pod("web-1", "shop", "web-7c6b", cpu="500m", memory="512Mi", node="n1", rv=5))
    replaced = store.get("shop/web-1")
    assert replaced is not first and cache.parsed(replaced).requests["cpu"] == 500


def test_replicas_share_one_frozen_shape_and_an_edit_does_not_leak() -> None:
    parse = PodParser()
    first, second = (parse(slim(api_pod(f"web-{i}", "shop", "web-7c6b", cpu="250m", memory="512Mi", node=f"n{i}",
                                        rv=i))) for i in (1, 2))
    assert first.shape is second.shape
    assert (first.name, first.node_name, second.name, second.node_name) == ("web-1", "n1", "web-2", "n2")
    with pytest.raises(pydantic.ValidationError):
        first.shape.zone_pin = "test-zone-a"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        first.labels = {}  # type: ignore[misc,assignment]
    pinned = first.model_copy(update={"zone_pin": "test-zone-a", "labels": {"app": "other"}})
    assert pinned.zone_pin == "test-zone-a" and pinned.labels == {"app": "other"} and pinned.name == "web-1"
    assert first.zone_pin == second.zone_pin == "" and second.labels["app"] == "app"
    assert pinned.shape is not first.shape and first.shape is second.shape
    moved = first.model_copy(update={"node_name": "n9"})
    assert moved.shape is first.shape and moved.node_name == "n9" and first.node_name == "n1"


def test_a_pod_is_built_and_read_flat() -> None:
    pod = Pod(namespace="shop", name="web-1", uid="u1", node_name="n1", labels={"app": "web"},
              requests=Resources({"cpu": 250, "pods": 1}), priority=10)
    assert (pod.key, pod.uid, pod.node_name, pod.labels, pod.priority) == ("shop/web-1", "u1", "n1", {"app": "web"}, 10)
    assert pod.requests["cpu"] == 250 and not pod.pending and pod.phase == "Pending"
    assert isinstance(pod.shape, PodShape) and pod.shape.namespace == "shop"
    assert pod == Pod(namespace="shop", name="web-1", uid="u1", node_name="n1", labels={"app": "web"},
                      requests=Resources({"cpu": 250, "pods": 1}), priority=10)
    assert pod != pod.model_copy(update={"priority": 11})
    with pytest.raises(pydantic.ValidationError, match="namespace"):
        Pod(name="web-1")
