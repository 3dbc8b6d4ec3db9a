"""Host ports: no two pods on a node bind a clashing (hostIP, protocol, port) — the plan's pods against each
other, the pods bound there and the daemon pods that will run there (``HostPort.conflicts``). The later pod
of a clashing pair is the one to take off."""

from __future__ import annotations

from collections.abc import Iterator

from model.affinity import ports_clash
from solver.verify.context import Context, NodeState
from solver.verify.violation import Violation

RULE = "host ports"


def check(ctx: Context) -> Iterator[Violation]:
    for state in (*ctx.claims, *ctx.existing.values()):
        if state.placed and state.usable:
            yield from _node(ctx, state)


def _node(ctx: Context, state: NodeState) -> Iterator[Violation]:
    placed = [p for p in state.placed if p.host_ports]
    if not placed:
        return
    resident = [p for p in state.resident if p.host_ports]
    everyone = resident + placed
    earlier: dict[tuple[int, str], list[int]] = {}  # (port, protocol) → positions of the pods binding it so far
    for i, pod in enumerate(everyone):
        if i >= len(resident):
            others = sorted({j for port in pod.host_ports for j in earlier.get((port.port, port.protocol), ())})
            for other in (everyone[j] for j in others):
                if ports_clash(pod.host_ports, other.host_ports):
                    yield Violation(RULE, f"{state.where}: pods {pod.key} and {other.key} bind the same host port",
                                    pods=ctx.pending_keys([pod]))
        for port in pod.host_ports:
            earlier.setdefault((port.port, port.protocol), []).append(i)
