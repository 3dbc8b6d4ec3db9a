"""The controller's logs: one JSON object per line (or a console line for people), through structlog.

Karpenter logs with zap: ``{"level":"INFO","time":"2026-12-01T17:36:47.123Z","logger":"controller",
"message":"launched nodeclaim","NodeClaim":{"name":"..."}}``. nodeplan writes the same keys — ``level``,
``time`` (RFC 3339, milliseconds, ``Z``), ``logger``, ``message`` — and the objects a line is about as flat
fields: ``pod`` (``namespace/name``), ``node``, ``nodeclaim``, ``nodepool``. Lines from the standard library's
``logging`` (the watch cache, the kubernetes client, modules not yet on structlog) go through the same
processors, so every line of ``kubectl logs`` parses the same way.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TextIO

import structlog

#: the object fields a line may carry, in the order a console line shows them
OBJECT_FIELDS = ("pod", "node", "nodeclaim", "nodepool")


class LogFormat(StrEnum):
    """``json`` for collectors (the default, as Karpenter's), ``console`` for a person at a terminal."""

    json = "json"
    console = "console"


def timestamp(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """``time``: RFC 3339 in UTC with milliseconds and ``Z`` (what zap's ISO8601 encoder writes)."""
    event["time"] = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return event


def upper_level(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if "level" in event:
        event["level"] = str(event["level"]).upper()
    return event


def _shared() -> list[Any]:
    """What every line gets, from structlog and from ``logging`` alike."""
    return [structlog.contextvars.merge_contextvars, structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name,
            timestamp, upper_level, structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(), structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("message")]


def configure(level: str = "info", log_format: LogFormat | str = LogFormat.json, stream: TextIO | None = None
              ) -> None:
    """Route structlog and the standard library's ``logging`` to one handler on ``stream`` (stderr)."""
    renderer: Any = (structlog.processors.JSONRenderer() if LogFormat(log_format) is LogFormat.json
                     else structlog.dev.ConsoleRenderer(colors=False, event_key="message"))
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared()[:-1],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.EventRenamer("message"), renderer]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(str(level).upper())
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


def get_logger(name: str) -> Any:
    """A structlog logger named ``name`` (the module): ``log.info("launched", nodeclaim=..., nodepool=...)``.

    It hands every line to the standard library's logger of that name, whose handler (``configure``) renders it:
    no global structlog configuration, so a process that never calls ``configure`` (tests, benches) logs as it
    did before, through ``logging`` only."""
    return structlog.wrap_logger(
        logging.getLogger(name), wrapper_class=structlog.stdlib.BoundLogger,
        processors=[structlog.stdlib.filter_by_level, *_shared()[:-1],
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter])


def claim_fields(raw: Mapping[str, Any]) -> dict[str, str]:
    """``nodeclaim`` and ``nodepool`` of a NodeClaim (raw API object)."""
    meta = raw.get("metadata") or {}
    fields = {"nodeclaim": str(meta.get("name") or "")}
    pool = (meta.get("labels") or {}).get("karpenter.sh/nodepool")
    if pool:
        fields["nodepool"] = str(pool)
    return fields


def stage_fields(stages: Mapping[str, float]) -> dict[str, float]:
    """A solve's stage times worth a log line (50 ms and more), rounded to the millisecond."""
    return {name: round(seconds, 3) for name, seconds in stages.items() if seconds >= 0.05}


def pod_fields(pod: Mapping[str, Any]) -> dict[str, str]:
    """``pod`` (namespace/name) and, when bound, ``node`` of a Pod (raw API object)."""
    meta = pod.get("metadata") or {}
    fields = {"pod": f"{meta.get('namespace', '')}/{meta.get('name', '')}"}
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        fields["node"] = str(node)
    return fields
