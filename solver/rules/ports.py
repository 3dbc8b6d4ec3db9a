"""Host ports: a node can bind a (protocol, port, host IP) once, and an every-address binding (empty,
0.0.0.0 or ::) clashes with every address (``HostPort.conflicts``). The solver models them as per-node
counters (``NodeCounter``, capacity 1): per (protocol, port) one counter per specific address, charged by
its binders and the every-address binders, and one for the every-address binders — two classes share a
counter exactly when they clash. Resident pods (DaemonSets, bound pods) close a counter by the same check.
The verifier's check is ``model.affinity.ports_clash``, pair by pair."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from model.affinity import HostPort
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule, Why
from solver.rules.counters import WILDCARD_IPS, NodeCounter


def _port_groups(classes: Sequence[PodClass]) -> dict[tuple[str, int], dict[str, list[int]]]:
    """(protocol, port) → host IP ("" for every address) → the classes binding it, in class order."""
    groups: dict[tuple[str, int], dict[str, list[int]]] = {}
    for c in classes:
        for port in c.representative.host_ports:
            ip = "" if port.host_ip in WILDCARD_IPS else port.host_ip
            users = groups.setdefault((port.protocol, port.port), {}).setdefault(ip, [])
            if c.index not in users:
                users.append(c.index)
    return groups


def host_port_counters(classes: Sequence[PodClass]) -> list[NodeCounter]:
    """Host ports as Kubernetes' NodePorts filter sees them (see the module docstring): per (protocol,
    port) a counter per specific address (its binders and the every-address binders) and one for the
    every-address binders, each of capacity 1."""
    counters: list[NodeCounter] = []
    for (protocol, number), by_ip in _port_groups(classes).items():
        wildcard = by_ip.get("", [])
        if wildcard:
            counters.append(NodeCounter(name=f"hostPort:{protocol}/{number}", uses=dict.fromkeys(wildcard, 1),
                                        new_capacity=1, port=(protocol, number),
                                        probe=HostPort(port=number, protocol=protocol)))
        for ip in sorted(ip for ip in by_ip if ip):
            users = dict.fromkeys(by_ip[ip], 1) | dict.fromkeys(wildcard, 1)
            counters.append(NodeCounter(name=f"hostPort:{protocol}/{number}@{ip}", uses=users, new_capacity=1,
                                        port=(protocol, number), probe=HostPort(port=number, protocol=protocol,
                                                                                host_ip=ip)))
    return counters



class HostPorts(Rule):
    """Host ports as per-node counters of capacity 1 (``host_port_counters``)."""

    name = "host ports"
    reads = ("DaemonSet",)
    relaxable = True
    counter_names = {"hostPort": "host port"}

    def counters(self, batch: BatchContext, classes: Sequence[PodClass]) -> Sequence[NodeCounter]:
        return host_port_counters(classes)

    def explain(self, why: Why) -> str:
        problem, c = why.problem, why.c
        ports = [i for i, axis in enumerate(problem.axes) if axis.startswith("hostPort:") and problem.sizes[c, i]]
        if not why.admitted or not ports or any(np.all(problem.template_alloc[t, ports] >= 1) for t in why.admitted):
            return ""
        names = ", ".join(problem.axes[i].split(":", 1)[1] for i in ports)
        return f"host port(s) {names} are already bound by DaemonSets on every node the NodePools can launch"
