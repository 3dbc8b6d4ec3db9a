"""Host ports: a node can bind a (protocol, port, host IP) once. The solver models ports as per-node
counters (``counters.py``); this is the exact pairwise check the verifier applies."""

from __future__ import annotations

from collections.abc import Iterable

from model.affinity import HostPort


def ports_clash(a: Iterable[HostPort], b: Iterable[HostPort]) -> bool:
    others = tuple(b)
    return any(p.conflicts(q) for p in a for q in others)
