"""The informer against a scripted API: list, watch from the list's resourceVersion, bookmarks, re-list on
410 Gone, back-off and resume after errors."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from kubernetes import client

from controller.cache import ClusterCache, Informer, Resource


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
