"""The informer against a scripted API: list, watch from the list's resourceVersion, bookmarks, re-list on
410 Gone, back-off and resume after errors."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client

from controller.cache import ClusterCache, Informer, Resource, retry_after
from controller.metrics import Metrics
from model.errors import InputError


class FakeResponse:
    def __init__(self, payload: Any = None, events: list[dict[str, Any]] | None = None, block: bool = False
                 ) -> None:
        self.data = json.dumps(payload).encode() if payload is not None else b""
        self._events = events or []
        self._block = block

    def stream(self, amt: int = 0, decode_content: bool = False) -> Any:
        text = b"".join(json.dumps(e).encode() + b"\n" for e in self._events)
        # split mid-line to exercise the line buffering
        yield text[: len(text) // 2]
        yield text[len(text) // 2:]
        while self._block:
            time.sleep(0.01)

    def release_conn(self) -> None:
        pass


def obj(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


class ScriptedLister:
    """Answers list and watch calls from a script; records the resourceVersion each watch started from."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []
        self.done = threading.Event()

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if not self.script:
            self.done.set()
            return FakeResponse(events=[], block=True)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def run_until_done(lister: ScriptedLister) -> Informer:
    informer = Informer(Resource("Pod", "v1", lister), lambda kind: None, max_backoff=0.05)
    informer.start()
    assert lister.done.wait(5)
    informer._stop.set()
    return informer


def test_list_then_watch_with_bookmarks_and_relist_on_gone() -> None:
    lister = ScriptedLister([
        FakeResponse({"metadata": {"resourceVersion": "10"}, "items": [obj("a", 5), obj("b", 6)]}),
        FakeResponse(events=[{"type": "ADDED", "object": obj("c", 11)},
                             {"type": "MODIFIED", "object": obj("a", 12)},
                             {"type": "DELETED", "object": obj("b", 13)},
                             {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}]),
        # the watch ended (server timeout): resume from the bookmark, then the resourceVersion expired
        FakeResponse(events=[{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]),
        FakeResponse({"metadata": {"resourceVersion": "30"}, "items": [obj("a", 25)]}),
    ])
    informer = run_until_done(lister)
    watches = [c for c in lister.calls if c.get("watch")]
    assert [c["resource_version"] for c in watches] == ["10", "20", "30"]
    assert all(c["allow_watch_bookmarks"] for c in watches)
    assert informer.relists == 1
    assert [o["metadata"]["name"] for o in informer.items()] == ["a"]
    assert informer.items()[0]["kind"] == "Pod"


def test_errors_back_off_and_resume() -> None:
    lister = ScriptedLister([
        client.ApiException(status=500, reason="boom"),
        ConnectionError("refused"),
        FakeResponse({"metadata": {"resourceVersion": "3"}, "items": [obj("a", 1)]}),
        client.ApiException(status=410, reason="Gone"),
        FakeResponse({"metadata": {"resourceVersion": "4"}, "items": [obj("a", 1), obj("b", 4)]}),
    ])
    informer = run_until_done(lister)
    assert informer.errors == 3
    assert informer.relists == 1
    assert informer.synced.is_set()
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "b"]


def test_upsert_never_goes_back_in_time() -> None:
    cache = ClusterCache({"Pod": Resource("Pod", "v1", ScriptedLister([]))})
    generation = cache.generation
    cache.upsert("Pod", obj("a", 5))
    cache.upsert("Pod", obj("a", 3))
    assert cache.items("Pod")[0]["metadata"]["resourceVersion"] == "5"
    assert cache.wait_for_change(generation, 0.1) > generation


def page(names: list[tuple[str, int]], rv: str, token: str = "") -> FakeResponse:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if token:
        meta["continue"] = token
    return FakeResponse({"metadata": meta, "items": [obj(n, r) for n, r in names]})


def test_lists_in_pages_of_500_with_continue_tokens() -> None:
    """client-go's pager: ``limit`` on every list call, the next page asked for with the ``continue`` token the
    last one returned, until a page comes without one; the watch starts from the list's resourceVersion."""
    lister = ScriptedLister([page([("a", 1), ("b", 2)], "40", "tok-1"), page([("c", 3)], "40", "tok-2"),
                             page([("d", 4)], "40")])
    informer = run_until_done(lister)
    lists = [c for c in lister.calls if not c.get("watch")]
    assert [c["limit"] for c in lists] == [500, 500, 500]
    assert [c.get("_continue") for c in lists] == [None, "tok-1", "tok-2"]
    assert informer.pages == 3
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "b", "c", "d"]
    assert next(c for c in lister.calls if c.get("watch"))["resource_version"] == "40"


def test_an_expired_continue_token_restarts_the_list() -> None:
    """A continue token past etcd compaction is answered 410; a consistent list must start again without it
    (the API's documentation of ``continue``), so the first page's objects are not kept from the old snapshot."""
    lister = ScriptedLister([page([("a", 1), ("old", 2)], "40", "tok-1"),
                             client.ApiException(status=410, reason="Gone"),
                             page([("a", 1)], "50", "tok-3"), page([("b", 7)], "50")])
    informer = run_until_done(lister)
    lists = [c for c in lister.calls if not c.get("watch")]
    assert [c.get("_continue") for c in lists] == [None, "tok-1", None, "tok-3"]
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "b"]
    assert informer.relists == 1
    assert next(c for c in lister.calls if c.get("watch"))["resource_version"] == "50"


def throttled(retry_after: str) -> client.ApiException:
    err = client.ApiException(status=429, reason="Too Many Requests")
    err.headers = {"Retry-After": retry_after}
    return err


def test_throttling_waits_for_retry_after_and_repeats_the_same_request() -> None:
    """429 from API Priority and Fairness: wait what Retry-After says and send the same request again (the same
    page of the list, the same watch), counting each throttled request; nothing is skipped."""
    counted: list[str] = []
    lister = ScriptedLister([page([("a", 1)], "40", "tok-1"), throttled("0.3"), page([("b", 2)], "40"),
                             throttled("0.2"),
                             FakeResponse(events=[{"type": "ADDED", "object": obj("c", 41)}])])
    informer = Informer(Resource("Pod", "v1", lister), lambda kind: None, max_backoff=0.05,
                        on_throttled=counted.append)
    started = time.monotonic()
    informer.start()
    assert lister.done.wait(5)
    informer._stop.set()
    assert time.monotonic() - started >= 0.5  # both Retry-After waits, not the 0.05 s back-off
    assert counted == ["Pod", "Pod"] and informer.throttled == 2
    lists = [c for c in lister.calls if not c.get("watch")]
    assert [c.get("_continue") for c in lists] == [None, "tok-1", "tok-1"]
    watches = [c for c in lister.calls if c.get("watch")]
    assert [c["resource_version"] for c in watches[:2]] == ["40", "40"]
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "b", "c"]
    assert informer.errors == 0


def test_retry_after_seconds_or_http_date_and_bounded() -> None:
    assert retry_after(throttled("2"), 0.2) == 2.0
    assert retry_after(throttled(""), 0.4) == 0.4
    assert retry_after(throttled("86400"), 0.2) == 60.0
    assert retry_after(throttled("Wed, 21 Oct 2015 07:28:00 GMT"), 0.2) == 0.0  # already past


def test_cache_counts_throttling_through_its_hook() -> None:
    lister = ScriptedLister([throttled("0"), page([("a", 1)], "40")])
    cache = ClusterCache({"Pod": Resource("Pod", "v1", lister)}, max_backoff=0.05)
    metrics = Metrics(cache)  # the metric hooks itself to the cache
    cache.start()
    assert lister.done.wait(5)
    cache.stop()
    assert metrics.value("nodeplan_api_throttled_requests_total", {"kind": "Pod"}) == 1
    assert cache.items("Pod")[0]["metadata"]["name"] == "a"


def bound_pod(name: str, rv: int, node: str = "n1", cpu: str = "250m") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": str(rv)},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}


def test_a_batch_parses_only_what_changed_since_the_last_one() -> None:
    """Each stored object's model is parsed once: the next snapshot reuses it unless the watch replaced the
    object; a copy a reader changed (the provisioner's reserved pods) is parsed afresh; a re-list keeps the
    models of objects whose uid and resourceVersion did not change."""
    lister = ScriptedLister([
        FakeResponse({"metadata": {"resourceVersion": "10"}, "items": [bound_pod("a", 1), bound_pod("b", 2)]}),
        FakeResponse(events=[{"type": "MODIFIED", "object": bound_pod("b", 11, cpu="500m")}]),
    ])
    cache = ClusterCache({"Pod": Resource("Pod", "v1", lister)})
    informer = cache.informers["Pod"]
    informer._list()
    first = {p.name: p for p in cache.snapshot(cache.items("Pod")).pods}
    again = {p.name: p for p in cache.snapshot(cache.items("Pod")).pods}
    assert again["a"] is first["a"] and again["b"] is first["b"]
    informer._watch()
    after = {p.name: p for p in cache.snapshot(cache.items("Pod")).pods}
    assert after["a"] is first["a"]
    assert after["b"] is not first["b"] and after["b"].requests["cpu"] == 500
    # a reader's changed copy is its own pod, and does not replace the cached model
    copy = json.loads(json.dumps(next(p for p in cache.items("Pod") if p["metadata"]["name"] == "a")))
    copy["spec"]["nodeName"] = "n2"
    assert cache.snapshot([copy]).pods[0].node_name == "n2"
    assert {p.name: p for p in cache.snapshot(cache.items("Pod")).pods}["a"] is first["a"]
    # a re-list: same uid and resourceVersion keep their model, a new version is parsed again
    informer._replace({"ns/a": informer._decoder.slim(bound_pod("a", 1)),
                       "ns/b": informer._decoder.slim(bound_pod("b", 12, cpu="750m"))})
    relisted = {p.name: p for p in cache.snapshot(cache.items("Pod")).pods}
    assert relisted["a"] is first["a"]
    assert relisted["b"].requests["cpu"] == 750


def test_a_malformed_cached_object_is_one_error_naming_object_and_field() -> None:
    cache = ClusterCache({"Pod": Resource("Pod", "v1", ScriptedLister([]))})
    bad = bound_pod("a", 1)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    cache.upsert("Pod", bad)
    with pytest.raises(InputError) as err:
        cache.snapshot(cache.items("Pod"))
    assert str(err.value) == ("cluster: Pod ns/a: field spec.containers[0].resources.requests.cpu: "
                              "invalid quantity 'lots'")
