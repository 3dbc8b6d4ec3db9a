"""``/healthz``, ``/readyz`` and ``/metrics`` over plain HTTP, on one port or two (Karpenter serves metrics and
health probes on separate ports; ``--metrics-port`` and ``--health-port`` may be equal).

``/healthz`` (liveness) fails only when the controller is wedged: a worker loop has not ticked for
``stall_after`` seconds. ``/readyz`` succeeds once the watch cache has synced — a standby replica waiting for
the Lease is ready too (it is healthy and will take over), so a rolling update never waits on leadership.
Standard library HTTP server in a daemon thread: no framework for three GET endpoints. The scrape's format,
compression and ``?name[]=`` filter are negotiated by ``controller.metrics.Metrics.render`` (prometheus_client's
encoders and negotiation).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, str]]
#: (Accept, Accept-Encoding, ?name[] filter) → (body, headers): ``Metrics.render``
Scrape = Callable[[str | None, str | None, Sequence[str] | None], tuple[bytes, list[tuple[str, str]]]]


class Endpoints:
    """What the probes and the scrape answer; the server only routes."""

    def __init__(self, healthy: Check, ready: Check, metrics: Scrape | None) -> None:
        self.healthy = healthy
        self.ready = ready
        self.metrics = metrics


def _handler(endpoints: Endpoints, paths: frozenset[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path not in paths:
                self._answer(404, b"not found\n")
            elif path == "/metrics" and endpoints.metrics is not None:
                names = parse_qs(urlparse(self.path).query).get("name[]")
                body, headers = endpoints.metrics(self.headers.get("Accept"), self.headers.get("Accept-Encoding"),
                                                  names)
                self._answer(200, body, *headers)
            else:
                ok, why = (endpoints.healthy if path == "/healthz" else endpoints.ready)()
                self._answer(200 if ok else 503, f"{'ok' if ok else 'not ok'}: {why}\n".encode())

        def _answer(self, code: int, body: bytes, *headers: tuple[str, str]) -> None:
            self.send_response(code)
            for name, value in headers or (("Content-Type", "text/plain; charset=utf-8"),):
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http: " + format, *args)

    return Handler


class Servers:
    """The HTTP listeners: one per distinct port; ``port=0`` picks a free one (see ``ports``)."""

    def __init__(self, endpoints: Endpoints, *, metrics_port: int | None, health_port: int | None,
                 bind: str = "0.0.0.0") -> None:
        wanted: dict[int, set[str]] = {}
        if metrics_port is not None:
            wanted.setdefault(metrics_port, set()).add("/metrics")
        if health_port is not None:
            wanted.setdefault(health_port, set()).update(("/healthz", "/readyz"))
        self._servers: list[ThreadingHTTPServer] = []
        self.ports: dict[str, int] = {}
        for port, paths in wanted.items():
            server = ThreadingHTTPServer((bind, port), _handler(endpoints, frozenset(paths)))
            server.daemon_threads = True
            self._servers.append(server)
            for path in paths:
                self.ports[path] = server.server_address[1]

    def start(self) -> None:
        for server in self._servers:
            threading.Thread(target=server.serve_forever, name=f"http-{server.server_address[1]}",
                             daemon=True).start()
            log.info("serving %s on port %d", ", ".join(sorted(p for p, n in self.ports.items()
                                                                 if n == server.server_address[1])),
                     server.server_address[1])

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
