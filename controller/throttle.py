"""Client-side rate limiting and 429 retries for every request the controller sends, as client-go does them.

client-go gives every REST client a token bucket (``flowcontrol.NewTokenBucketRateLimiter(QPS, Burst)``: ``Burst``
tokens, refilled at ``QPS`` a second, each request waiting for one) and repeats a request answered ``429 Too Many
Requests`` (or a 5xx) with a ``Retry-After`` after that many seconds, at most 10 times (``rest.WithRetry``,
``checkWait``), writes included: API Priority and Fairness rejects a request before it is processed. Karpenter
sets the bucket with ``KUBE_CLIENT_QPS`` / ``KUBE_CLIENT_BURST`` (defaults 200 / 300, ``pkg/operator/options``).

``install`` wraps the ``kubernetes.client.ApiClient``'s ``rest_client.request`` once, below every generated API
method, ``CustomObjectsApi`` and the watch cache's lists and watches, so nothing bypasses it. A watch takes one
token when it starts, however long it streams. Every attempt, a retry included, waits for its token.

One layer retries each request. urllib3's own status retries (a GET, PUT or DELETE answered 429 or 503 with
``Retry-After``, silently, up to 3 times) are switched off. The watch cache's informers repeat their own
throttled lists and watches (``controller.cache.Informer._call``: without a bound, since a cache that gives up
misses every batch after it, and interruptibly on stop), so on their threads (``caller_retries``) a 429 is
passed straight up. Evictions are passed up too: their 429 is usually a PodDisruptionBudget's refusal (with
``Retry-After: 10``), which ``controller.drain`` retries on its next step instead of blocking the termination
loop here. An answer without ``Retry-After`` is not repeated, as in client-go.
"""

from __future__ import annotations

import contextlib
import contextvars
import email.utils
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client
from urllib3.util.retry import Retry

from controller.kinds import READ

log = logging.getLogger(__name__)

#: Karpenter's defaults for KUBE_CLIENT_QPS and KUBE_CLIENT_BURST (``pkg/operator/options``)
DEFAULT_QPS = 200.0
DEFAULT_BURST = 300
#: client-go's ``rest.Request`` default: a throttled request is repeated at most this many times
MAX_RETRIES = 10
#: the longest ``Retry-After`` honoured (a larger one is read as this)
MAX_RETRY_AFTER = 60.0
#: a wait for a token this long is logged (client-go logs its "client-side throttling" waits from 1 s)
LOG_WAIT = 1.0

_ATTRIBUTE = "_nodeplan_throttle"
_caller_retries: contextvars.ContextVar[bool] = contextvars.ContextVar("nodeplan_caller_retries", default=False)
#: resource (plural) → kind, for the throttled-request metric's ``kind`` label (the cache labels by kind too)
_KINDS = {k.resource: k.kind for k in READ} | {"events": "Event", "leases": "Lease"}


def retry_after(response: Any, default: float) -> float:
    """Seconds a throttled request should wait: the ``Retry-After`` of ``response`` (an ``ApiException`` or a
    REST response; seconds or an HTTP date), else ``default``; at most ``MAX_RETRY_AFTER``."""
    value = str((getattr(response, "headers", None) or {}).get("Retry-After") or "").strip()
    seconds = default
    if value:
        try:
            seconds = float(value)
        except ValueError:
            with contextlib.suppress(TypeError, ValueError):
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


@contextlib.contextmanager
def caller_retries() -> Iterator[None]:
    """Requests sent inside are not repeated on 429 here: the caller repeats them (the informers do)."""
    token = _caller_retries.set(True)
    try:
        yield
    finally:
        _caller_retries.reset(token)


class TokenBucket:
    """client-go's token-bucket rate limiter (golang.org/x/time/rate under ``flowcontrol``): starts full with
    ``burst`` tokens, refills ``qps`` a second up to ``burst``. A request takes its token at once, into debt
    if need be, and waits until the debt is repaid, so waiters are served in arrival order."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1 (got qps={qps}, burst={burst})")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock()

    def reserve(self) -> float:
        """Take one token; the seconds the caller must wait before sending (0 while the burst lasts)."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_accept(self) -> bool:
        """client-go's ``TryAccept``: take a token if one is there, never into debt (Events use it)."""
        with self._lock:
            self._refill()
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._at) * self.qps)
        self._at = now


class Throttle:
    """The rate limit and 429 retries of one ``ApiClient`` (``install``); hooks count what it does."""

    def __init__(self, bucket: TokenBucket, *, max_retries: int = MAX_RETRIES,
                 sleep: Callable[[float], object] | None = None) -> None:
        self.bucket = bucket
        self.max_retries = max_retries
        self._closed = threading.Event()
        #: waits for a token and for a Retry-After; the default ends at once after ``close``
        self._sleep: Callable[[float], object] = sleep or self._closed.wait
        #: called with (HTTP verb, seconds waited for a token) for every attempt (a histogram observes it)
        self.on_wait: Callable[[str, float], None] | None = None
        #: called with (HTTP verb, kind) for every 429 repeated here (a counter counts it)
        self.on_throttled: Callable[[str, str], None] | None = None
        #: called with (HTTP verb, URL, status code or "<error>", seconds) for every attempt sent, its wait for
        #: a token excluded (client-go's request count and latency)
        self.on_attempt: Callable[[str, str, str, float], None] | None = None

    def close(self) -> None:
        """Stop waiting: a shutdown is not held up by a Retry-After; what is pending is sent or given up."""
        self._closed.set()

    def send(self, inner: Callable[..., Any], method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        """``inner(method, url, ...)`` (the REST client's ``request``) after a token, repeated while the answer
        is a 429 (or 5xx) with ``Retry-After`` and this layer is the one that retries; the last answer is
        returned (the generated method raises its ``ApiException``)."""
        verb = method.upper()
        repeat = not _caller_retries.get() and not _evicts(verb, url)
        attempt = 0
        while True:
            waited = self.bucket.reserve()
            if waited > 0:
                if waited >= LOG_WAIT:
                    log.info("waited %.1fs for a token due to client-side throttling (QPS %g, burst %d): %s %s",
                             waited, self.bucket.qps, self.bucket.burst, verb, urlsplit(url).path)
                self._sleep(waited)
            if self.on_wait is not None:
                self.on_wait(verb, waited)
            response = self._attempt(inner, method, url, *args, **kwargs)
            if (not repeat or attempt >= self.max_retries or self._closed.is_set()
                    or not _retry_later(response)):
                return response
            attempt += 1
            wait = retry_after(response, 0.0)
            _release(response)
            kind = kind_of(url)
            if self.on_throttled is not None:
                self.on_throttled(verb, kind)
            log.info("%s %s answered %s with Retry-After; retry %d of %d in %.1fs", verb, kind, response.status,
                     attempt, self.max_retries, wait)
            self._sleep(wait)

    def _attempt(self, inner: Callable[..., Any], method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        return attempt(inner, self.on_attempt, method, url, *args, **kwargs)


def attempt(inner: Callable[..., Any], report: Callable[[str, str, str, float], None] | None, method: str, url: str,
            *args: Any, **kwargs: Any) -> Any:
    """``inner(method, url, ...)``, then ``report(HTTP verb, URL, status code or "<error>", seconds)``: one
    request as client-go counts and times it."""
    started = time.monotonic()
    code = "<error>"  # client-go's code for a request that got no response
    try:
        response = inner(method, url, *args, **kwargs)
        code = str(getattr(response, "status", "") or "<error>")
        return response
    except client.ApiException as err:
        code = str(err.status)
        raise
    finally:
        if report is not None:
            report(method.upper(), url, code, time.monotonic() - started)


def install(api: client.ApiClient, qps: float = DEFAULT_QPS, burst: int = DEFAULT_BURST, *,
            max_retries: int = MAX_RETRIES, clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], object] | None = None) -> Throttle:
    """Rate-limit every request of ``api`` and repeat its throttled ones (once per client: a second call
    returns the first ``Throttle``)."""
    existing = installed(api)
    if existing is not None:
        return existing
    throttle = Throttle(TokenBucket(qps, burst, clock=clock), max_retries=max_retries, sleep=sleep)
    _without_status_retries(api)
    rest = api.rest_client
    inner = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        return throttle.send(inner, method, url, *args, **kwargs)

    rest.request = request  # type: ignore[method-assign]
    setattr(api, _ATTRIBUTE, throttle)
    return throttle


def _without_status_retries(api: client.ApiClient) -> None:
    """urllib3's default ``Retry`` (3 tries) repeats a GET, PUT or DELETE answered 429, 413 or 503 with
    ``Retry-After`` by itself, sleeping as long as the header says, uncounted and uncapped, before any layer above
    sees the answer: its connection retries stay, its status retries go, so only ``Throttle`` (or the informer)
    repeats."""
    retries = api.configuration.retries
    if retries is False:
        return
    base = retries if isinstance(retries, Retry) else Retry.DEFAULT if retries is None or retries is True \
        else Retry.from_int(retries)
    pools = api.rest_client.pool_manager
    pools.connection_pool_kw["retries"] = base.new(status=0, status_forcelist=(), respect_retry_after_header=False)
    pools.clear()  # pools are made on first use with these arguments; none made before keeps the old ones


def installed(api: object) -> Throttle | None:
    """The ``Throttle`` of ``api``, if ``install`` put one there."""
    found = getattr(api, _ATTRIBUTE, None)
    return found if isinstance(found, Throttle) else None


def kind_of(url: str) -> str:
    """The kind a request's path addresses (``/api/v1/namespaces/ns/pods/p/status`` → ``Pod``); the resource
    itself for one not in the table, ``""`` for a path that is no resource."""
    parts = [p for p in urlsplit(url).path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return ""
    at = 2 if parts[0] == "api" else 3  # past the group and version
    if len(parts) > at + 2 and parts[at] == "namespaces":
        at += 2
    if len(parts) <= at:
        return ""
    return _KINDS.get(parts[at], parts[at])


def _evicts(verb: str, url: str) -> bool:
    return verb == "POST" and urlsplit(url).path.rstrip("/").endswith("/eviction")


def _retry_later(response: Any) -> bool:
    """client-go's ``checkWait``: a 429, or a 5xx, that says when to come back (``Retry-After``)."""
    status = getattr(response, "status", None)
    if not isinstance(status, int) or not (status == 429 or status >= 500):
        return False
    return bool(str((getattr(response, "headers", None) or {}).get("Retry-After") or "").strip())


def _release(response: Any) -> None:
    """Read what is left of a throttled answer and give its connection back to the pool."""
    raw: Any = getattr(response, "response", None)
    with contextlib.suppress(Exception):
        raw.drain_conn()
        raw.release_conn()
