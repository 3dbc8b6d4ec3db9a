"""Go-style durations (``1h30m``, ``90s``, ``Never``) and RFC 3339 timestamps, as Karpenter's API uses them."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration string; ``None`` for ``Never``. Raises ValueError on anything else."""
    value = text.strip()
    if value == "Never":
        return None
    if value == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(value):
        match = _PART.match(value, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r} (expected e.g. 30s, 15m, 1h30m or Never)")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not value:
        raise ValueError("empty duration")
    return total


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 timestamp as an aware UTC datetime; ``None`` for an empty or unreadable value."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def epoch(text: object) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch (``parse_time``); ``None`` when empty or unreadable."""
    parsed = parse_time(str(text)) if text else None
    return parsed.timestamp() if parsed is not None else None
