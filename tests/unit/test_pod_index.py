"""``controller.podindex.PodIndex``, as the Pod informer keeps it: after any sequence of watch events and re-lists
it answers what a scan of every cached pod answers (the provisioning and lifecycle loops read it instead of
scanning on every pass)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.batch import is_provisionable, is_terminal
from controller.cache import ClusterCache, Resource

NODES = ("n1", "n2", "n3")
NAMES = tuple(f"web-{i}" for i in range(6))


def pod(name: str, rv: int, *, node: str = "", nominated: str = "", phase: str = "Pending",
        unschedulable: bool = True, uid: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if nominated:
        status["nominatedNodeName"] = nominated
    if unschedulable and not node:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "uid": uid or f"uid-{name}",
                         "resourceVersion": str(rv)},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
                     **({"nodeName": node} if node else {})},
            "status": status}


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


def scanned(cache: ClusterCache) -> dict[str, Any]:
    """What each reader answers, worked out by reading every cached pod."""
    alive = [p for p in cache.items("Pod") if not is_terminal(p)]
    unbound = [p for p in alive if not p["spec"].get("nodeName")]
    return {
        "unbound": sorted(p["metadata"]["uid"] for p in unbound),
        "provisionable": names([p for p in cache.items("Pod") if is_provisionable(p)]),
        "bound": {n: names([p for p in alive if p["spec"].get("nodeName") == n]) for n in NODES},
        "on": {n: names([p for p in alive if (p["spec"].get("nodeName") or p["status"].get("nominatedNodeName"))
                         == n]) for n in NODES},
    }


def indexed(cache: ClusterCache) -> dict[str, Any]:
    index = cache.pods
    return {"unbound": sorted(index.unbound()), "provisionable": names(index.provisionable()),
            "bound": {n: names(pods) for n, pods in index.bound_to(NODES).items()},
            "on": {n: names(index.on(n)) for n in NODES}}


def a_cache() -> ClusterCache:
    return ClusterCache({"Pod": Resource("Pod", "v1", lambda **_: None)})


def test_a_pod_moves_through_the_index_as_it_is_nominated_bound_and_finished() -> None:
    cache = a_cache()
    informer = cache.informers["Pod"]
    informer._apply("ADDED", pod("web-0", 1))
    assert names(cache.pods.provisionable()) == ["web-0"] and list(cache.pods.unbound()) == ["uid-web-0"]
    informer._apply("MODIFIED", pod("web-0", 2, nominated="n1"))
    assert names(cache.pods.on("n1")) == ["web-0"] and cache.pods.bound_to(["n1"]) == {"n1": []}
    informer._apply("MODIFIED", pod("web-0", 3, node="n1", nominated="n1"))  # bound: counted once, on its node
    assert names(cache.pods.on("n1")) == ["web-0"] and names(cache.pods.bound_to(["n1"])["n1"]) == ["web-0"]
    assert cache.pods.unbound() == {} and cache.pods.provisionable() == []
    informer._apply("MODIFIED", pod("web-0", 4, node="n1", phase="Succeeded"))  # finished: takes no room
    assert cache.pods.on("n1") == [] and cache.pods.bound_to(["n1"]) == {"n1": []}
    informer._apply("MODIFIED", pod("web-0", 5, node="n1", phase="Running"))
    informer._apply("DELETED", pod("web-0", 6, node="n1", phase="Running"))
    assert cache.pods.on("n1") == []


def test_a_relist_replaces_what_was_indexed() -> None:
    cache = a_cache()
    informer = cache.informers["Pod"]
    informer._apply("ADDED", pod("web-0", 1, node="n1"))
    informer._apply("ADDED", pod("web-1", 2))
    informer._replace({"shop/web-1": pod("web-1", 3, node="n2"), "shop/web-2": pod("web-2", 4)})
    assert indexed(cache) == scanned(cache)
    assert names(cache.pods.bound_to(["n2"])["n2"]) == ["web-1"] and list(cache.pods.unbound()) == ["uid-web-2"]


EVENT = st.tuples(st.sampled_from(("ADDED", "MODIFIED", "DELETED", "RELIST")), st.sampled_from(NAMES),
                  st.sampled_from(("", *NODES)), st.sampled_from(("", *NODES)),
                  st.sampled_from(("Pending", "Running", "Succeeded", "Failed")), st.booleans(), st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(EVENT, max_size=40))
def test_the_index_answers_what_a_scan_of_the_cache_answers(events: list[tuple[Any, ...]]) -> None:
    cache = a_cache()
    informer = cache.informers["Pod"]
    for rv, (kind, name, node, nominated, phase, unschedulable, recreated) in enumerate(events, start=1):
        obj = pod(name, rv, node=node, nominated=nominated, phase=phase, unschedulable=unschedulable,
                  uid=f"uid-{name}-{rv}" if recreated else "")  # a pod deleted and created again has a new UID
        if kind == "RELIST":
            store = {f"shop/{p['metadata']['name']}": p for p in cache.items("Pod") if p["metadata"]["name"] != name}
            store[f"shop/{name}"] = obj
            informer._replace(store)
        else:
            informer._apply(kind, obj)
        assert indexed(cache) == scanned(cache)
