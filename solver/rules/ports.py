"""Host ports: a node can bind a (protocol, port, host IP) once. A pod with host ports holds one copy per
node; a node whose DaemonSets or bound pods already use one of its ports is closed to it. Two different
classes sharing a port are not modelled yet (``unmodelled`` says so)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from model.affinity import HostPort
from model.pod import Pod
from solver.classes import PodClass


def ports_clash(a: Iterable[HostPort], b: Iterable[HostPort]) -> bool:
    others = tuple(b)
    return any(p.conflicts(q) for p in a for q in others)


def blocked(pod_class: PodClass, pods_on_node: Sequence[Pod]) -> bool:
    ports = pod_class.representative.host_ports
    return bool(ports) and any(ports_clash(ports, other.host_ports) for other in pods_on_node)


def unmodelled(classes: Sequence[PodClass]) -> list[str]:
    notes = []
    for c in classes:
        for other in classes:
            if other.index > c.index and ports_clash(c.representative.host_ports, other.representative.host_ports):
                notes.append(f"{c.name} and {other.name} bind the same host port: not modelled")
    return notes
