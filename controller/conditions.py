"""Status conditions of NodeClaims as raw dicts: read one, or write one keeping its transition time when the
status does not change (so a repeated write is a no-op for anyone watching ``lastTransitionTime``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions_of(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (raw.get("status") or {}).get("conditions") or []}


def is_true(raw: Mapping[str, Any], kind: str) -> bool:
    return conditions_of(raw).get(kind, {}).get("status") == "True"


def with_condition(raw: Mapping[str, Any], kind: str, status: str, reason: str, message: str = ""
                   ) -> list[dict[str, Any]]:
    """Every condition of ``raw`` with ``kind`` set to ``status``."""
    conditions = conditions_of(raw)
    previous = conditions.get(kind)
    stamp = previous.get("lastTransitionTime") if previous and previous.get("status") == status else now_stamp()
    conditions[kind] = {"type": kind, "status": status, "reason": reason, "message": message,
                        "lastTransitionTime": stamp}
    return list(conditions.values())
