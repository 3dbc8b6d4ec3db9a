"""The API client's rate limit and 429 retries (``controller.throttle``) against a real local HTTP server.

What is asserted is client-go's behaviour (``flowcontrol.NewTokenBucketRateLimiter``, ``rest.WithRetry``): a
bucket of Burst tokens refilled at QPS, one token per request (a watch's included, however long it streams),
a 429 with ``Retry-After`` repeated after that many seconds, writes too, at most 10 times, then the 429 is the
caller's; a 429 without ``Retry-After`` is not repeated. Waits go through an injected clock, so nothing sleeps.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from controller import cache, throttle
from controller.cache import ClusterCache, Informer, Resource
from controller.kinds import BY_KIND
from controller.metrics import Metrics
from controller.rest import CoreApi
from controller.run import api_client


@dataclass
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


EMPTY = {"metadata": {}, "items": []}


@dataclass
class Seen:
    method: str
    path: str
    body: Any
    content_type: str = ""


class Server:
    """Answers each request with the next scripted ``Answer`` for its path (then 200 with ``default``), and
    records every request."""

    def __init__(self) -> None:
        self.script: dict[str, list[Answer]] = {}
        self.default: dict[str, Answer] = {}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                with outer._lock:
                    outer.seen.append(Seen(self.command, self.path, json.loads(raw) if raw else None,
                                           self.headers.get("Content-Type") or ""))
                    queue = outer.script.get(path) or []
                    answer = queue.pop(0) if queue else outer.default.get(path, Answer(200, body=EMPTY))
                payload = answer.body if isinstance(answer.body, bytes) else json.dumps(
                    answer.body if answer.body is not None else
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": answer.status,
                     "reason": "TooManyRequests", "message": "Too many requests, please try again later."}
                ).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def requests(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path.split("?", 1)[0] == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Clock:
    """A monotonic clock that only moves when something sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def throttled(retry_after: str | None = "1") -> Answer:
    return Answer(429, {"Retry-After": retry_after} if retry_after is not None else {})


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def limited(server: Server, clock: Clock, qps: float = 1000.0, burst: int = 1000
            ) -> tuple[client.ApiClient, throttle.Throttle, Metrics]:
    """A client of ``server`` with its rate limit on ``clock``, observed by ``Metrics`` as the controller's is."""
    configuration = client.Configuration()
    configuration.host = server.url
    api = client.ApiClient(configuration)
    limit = throttle.install(api, qps, burst, clock=clock, sleep=clock.sleep)
    metrics = Metrics()
    metrics.instrument(api)
    return api, limit, metrics


NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
CLAIM = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default-abcde"},
         "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}


def test_nodeclaim_create_throttled_twice_waits_retry_after_and_succeeds(server: Server) -> None:
    """A 429 means API Priority and Fairness rejected the create before processing it: the same request is sent
    again after Retry-After, and the caller sees only the 201."""
    server.script[NODECLAIMS] = [throttled("1"), throttled("1"), Answer(201, body=CLAIM)]
    clock = Clock()
    api, _, metrics = limited(server, clock)
    started = clock.now
    created = client.CustomObjectsApi(api).create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", CLAIM)
    assert created["metadata"]["name"] == "default-abcde"
    assert clock.now - started >= 2 * 1.0 and clock.sleeps == [1.0, 1.0]
    sent = server.requests(NODECLAIMS)
    assert [s.method for s in sent] == ["POST"] * 3 and all(s.body == CLAIM for s in sent)
    assert metrics.value("nodeplan_api_throttled_requests_total", {"kind": "NodeClaim"}) == 2
    # client-go counts every attempt it sends, a throttled one too
    assert metrics.value("client_go_request_total", {"code": "429", "method": "POST"}) == 2
    assert metrics.value("client_go_request_total", {"code": "201", "method": "POST"}) == 1


def test_pod_status_patch_throttled_is_repeated(server: Server) -> None:
    path = "/api/v1/namespaces/shop/pods/web-0/status"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "shop"}}
    server.script[path] = [throttled("1"), Answer(200, body=pod)]
    clock = Clock()
    api, _, metrics = limited(server, clock)
    patch = {"status": {"nominatedNodeName": "default-abcde"}}
    CoreApi(api).patch_namespaced_pod_status("web-0", "shop", patch)
    sent = server.requests(path)
    assert [s.method for s in sent] == ["PATCH", "PATCH"] and sent[0].body == sent[1].body == patch
    assert clock.sleeps == [1.0]
    assert metrics.value("nodeplan_api_throttled_requests_total", {"kind": "Pod"}) == 1


def test_persistent_429_gives_up_after_ten_retries_with_the_api_exception(server: Server) -> None:
    server.default[NODECLAIMS] = throttled("2")
    clock = Clock()
    api, _, metrics = limited(server, clock)
    with pytest.raises(client.ApiException) as raised:
        client.CustomObjectsApi(api).create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", CLAIM)
    assert raised.value.status == 429
    assert len(server.requests(NODECLAIMS)) == 1 + throttle.MAX_RETRIES == 11  # client-go's default: 10 retries
    assert clock.sleeps == [2.0] * 10
    assert metrics.value("nodeplan_api_throttled_requests_total", {"kind": "NodeClaim"}) == 10


def test_a_get_is_retried_here_not_inside_urllib3(server: Server) -> None:
    """urllib3's default Retry would repeat an idempotent request answered 429 with Retry-After itself (sleeping
    for real, uncounted); it is switched off, so the wait is this layer's, on its clock, and counted."""
    server.script["/api/v1/nodes"] = [throttled("1"), Answer(200, body=EMPTY)]
    clock = Clock()
    api, _, metrics = limited(server, clock)
    client.CoreV1Api(api).list_node()
    assert len(server.requests("/api/v1/nodes")) == 2 and clock.sleeps == [1.0]
    assert metrics.value("nodeplan_api_throttled_requests_total", {"kind": "Node"}) == 1


def test_a_5xx_is_retried_only_with_retry_after(server: Server) -> None:
    """client-go's ``checkWait``: a 5xx that says when to come back is repeated, any other is the caller's."""
    server.script["/api/v1/nodes"] = [Answer(503, {"Retry-After": "3"}), Answer(200, body=EMPTY),
                                      Answer(500), Answer(200, body=EMPTY)]
    clock = Clock()
    api, _, _ = limited(server, clock)
    core = client.CoreV1Api(api)
    core.list_node()
    assert clock.sleeps == [3.0]
    with pytest.raises(client.ApiException) as raised:
        core.list_node()
    assert raised.value.status == 500 and len(server.requests("/api/v1/nodes")) == 3


def test_retry_after_is_capped(server: Server) -> None:
    server.script[NODECLAIMS] = [throttled("86400"), Answer(201, body=CLAIM)]
    clock = Clock()
    api, _, _ = limited(server, clock)
    client.CustomObjectsApi(api).create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", CLAIM)
    assert clock.sleeps == [throttle.MAX_RETRY_AFTER]


def test_429_without_retry_after_is_not_repeated(server: Server) -> None:
    """client-go's ``checkWait``: only an answer that says when to come back is retried."""
    server.script[NODECLAIMS] = [throttled(None), Answer(201, body=CLAIM)]
    clock = Clock()
    api, _, _ = limited(server, clock)
    with pytest.raises(client.ApiException) as raised:
        client.CustomObjectsApi(api).create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", CLAIM)
    assert raised.value.status == 429 and len(server.requests(NODECLAIMS)) == 1 and clock.sleeps == []


def test_an_eviction_refused_by_a_pdb_is_left_to_the_drainer(server: Server) -> None:
    """The eviction API answers a PodDisruptionBudget's refusal with 429 and ``Retry-After: 10``; the drainer
    retries on its next step, so here it is passed straight up (not 10 × 10 s inside one step)."""
    path = "/api/v1/namespaces/shop/pods/web-0/eviction"
    server.default[path] = Answer(429, {"Retry-After": "10"}, {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429, "reason": "TooManyRequests",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2"}]}})
    clock = Clock()
    api, _, metrics = limited(server, clock)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": "shop"}}
    with pytest.raises(client.ApiException) as raised:
        CoreApi(api).create_namespaced_pod_eviction("web-0", "shop", eviction)
    assert raised.value.status == 429 and len(server.requests(path)) == 1 and clock.sleeps == []
    assert metrics.value("nodeplan_api_throttled_requests_total", {"kind": "Pod"}) is None


def pod_list(*names: str) -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
            "items": [{"metadata": {"name": n, "namespace": "shop", "uid": f"uid-{n}", "resourceVersion": "7"},
                       "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}} for n in names]}


def test_an_informers_list_is_retried_by_the_informer_alone(server: Server) -> None:
    """Exactly one layer repeats a throttled list: the informer (unbounded, stoppable, counted by kind); the
    client passes the 429 up on its threads, so the list is sent twice, not 1 + 10 times, and counted once."""
    server.script["/api/v1/pods"] = [throttled("0"), Answer(200, body=pod_list("a", "b"))]
    clock = Clock()
    configuration = client.Configuration()
    configuration.host = server.url
    api = client.ApiClient(configuration)
    limit = throttle.install(api, clock=clock, sleep=clock.sleep)
    informers = ClusterCache({"Pod": Resource("Pod", "v1", BY_KIND["Pod"].lister(api))})
    metrics = Metrics(informers)  # hooked to the cache and to the client, as the controller's
    metrics.instrument(api)
    waits: list[str] = []
    limit.on_wait = lambda verb, seconds: waits.append(verb)
    informer: Informer = informers.informers["Pod"]
    informer._list()
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "b"]
    assert len(server.requests("/api/v1/pods")) == 2 and informer.throttled == 1
    assert metrics.value("nodeplan_api_throttled_requests_total", {"kind": "Pod"}) == 1
    assert waits == ["GET", "GET"]  # both attempts waited for a token
    assert clock.sleeps == []  # the informer waited its Retry-After (0 s) itself


def test_caller_retries_passes_429_up_at_once(server: Server) -> None:
    server.script[NODECLAIMS] = [throttled("1"), Answer(201, body=CLAIM)]
    clock = Clock()
    api, _, _ = limited(server, clock)
    with throttle.caller_retries(), pytest.raises(client.ApiException):
        client.CustomObjectsApi(api).create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", CLAIM)
    assert len(server.requests(NODECLAIMS)) == 1
    client.CustomObjectsApi(api).create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", CLAIM)  # outside
    assert len(server.requests(NODECLAIMS)) == 2


# -- the token bucket ------------------------------------------------------------------------------------------
def test_burst_passes_at_once_then_requests_are_paced_at_qps() -> None:
    clock = Clock()
    bucket = throttle.TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # no token left: each next request waits a further 1/QPS, in arrival order
    assert [round(bucket.reserve(), 9) for _ in range(2)] == [0.1, 0.2]
    clock.now += 0.5  # 5 tokens refilled: 2 repay the debt, 3 fill the bucket
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert round(bucket.reserve(), 9) == 0.1
    clock.now += 3600  # an idle hour refills to the burst, never beyond
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0] and bucket.reserve() > 0


def test_bucket_rejects_a_rate_that_limits_nothing() -> None:
    for qps, burst in ((0, 10), (-1, 10), (5, 0)):
        with pytest.raises(ValueError):
            throttle.TokenBucket(qps, burst)


def test_requests_beyond_the_burst_wait_for_a_token(server: Server) -> None:
    clock = Clock()
    api, _, metrics = limited(server, clock, qps=5, burst=2)
    core = client.CoreV1Api(api)
    for _ in range(4):
        core.list_node()
    assert clock.sleeps == pytest.approx([0.2, 0.2])  # the 3rd and 4th request, 1/QPS apart
    assert len(server.requests("/api/v1/nodes")) == 4
    labels = {"verb": "GET"}
    assert metrics.value("nodeplan_client_rate_limiter_duration_seconds_count", labels) == 4
    assert metrics.value("nodeplan_client_rate_limiter_duration_seconds_sum", labels) == pytest.approx(0.4)
    assert metrics.value("nodeplan_client_rate_limiter_duration_seconds_bucket", {**labels, "le": "0.005"}) == 2


def test_a_watch_takes_one_token_however_long_it_streams(server: Server) -> None:
    events = b"".join(json.dumps({"type": "ADDED", "object": pod_list(n)["items"][0]}).encode() + b"\n"
                      for n in ("a", "b", "c"))
    server.default["/api/v1/pods"] = Answer(200, body=events)
    clock = Clock()
    api, limit, _ = limited(server, clock)
    tokens: list[str] = []
    limit.on_wait = lambda verb, seconds: tokens.append(verb)
    seen = [e["object"].metadata.name for e in watch.Watch().stream(
        client.CoreV1Api(api).list_pod_for_all_namespaces, timeout_seconds=5)]
    assert seen == ["a", "b", "c"] and tokens == ["GET"]


def test_api_client_installs_the_limit_once_with_its_settings(tmp_path: Path, server: Server) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": server.url}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}], "users": [{"name": "t", "user": {}}]}))
    api = api_client(str(kubeconfig), qps=50, burst=80)
    limit = throttle.installed(api)
    assert limit is not None and (limit.bucket.qps, limit.bucket.burst) == (50.0, 80)
    assert throttle.install(api, 1, 1) is limit  # once per client
    defaults = throttle.installed(api_client(str(kubeconfig)))
    assert defaults is not None and (defaults.bucket.qps, defaults.bucket.burst) == (200.0, 300)  # Karpenter's
    client.CoreV1Api(api).list_node()
    assert len(server.requests("/api/v1/nodes")) == 1


def test_close_ends_a_retry_wait() -> None:
    """On shutdown nothing waits out a Retry-After: the pending answer goes to the caller."""
    answers = iter([429, 201])

    class Response:
        def __init__(self, status: int) -> None:
            self.status, self.headers, self.response = status, {"Retry-After": "30"}, None

    limit = throttle.Throttle(throttle.TokenBucket(100, 100))
    limit.close()
    response = limit.send(lambda *a, **k: Response(next(answers)), "POST", "http://k/api/v1/namespaces/x/pods")
    assert response.status == 429


def test_kind_of_a_request_path() -> None:
    assert throttle.kind_of("https://k/api/v1/namespaces/shop/pods/web-0/status") == "Pod"
    assert throttle.kind_of("https://k/api/v1/pods?watch=true") == "Pod"
    assert throttle.kind_of("https://k/apis/karpenter.sh/v1/nodeclaims/x") == "NodeClaim"
    assert throttle.kind_of("https://k/apis/coordination.k8s.io/v1/namespaces/ns/leases/l") == "Lease"
    assert throttle.kind_of("https://k/api/v1/namespaces/ns/events") == "Event"
    assert throttle.kind_of("https://k/api/v1/namespaces") == "Namespace"
    assert throttle.kind_of("https://k/api/v1/namespaces/ns") == "Namespace"
    assert throttle.kind_of("https://k/apis/example.com/v1/widgets") == "widgets"
    assert throttle.kind_of("https://k/version") == ""


def test_the_cache_shares_the_retry_after_reading() -> None:
    assert cache.retry_after is throttle.retry_after
    err = client.ApiException(status=429)
    err.headers = {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}  # an HTTP date long past
    assert throttle.retry_after(err, 0.5) == 0.0
    err.headers = {"Retry-After": "soon"}  # neither seconds nor a date: the default
    assert throttle.retry_after(err, 0.5) == 0.5
