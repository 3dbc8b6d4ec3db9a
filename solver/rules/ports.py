"""Host ports: a node can bind a (protocol, port, host IP) once. The solver models ports as per-node
counters (``counters.py``); the exact pairwise check (``model.affinity.ports_clash``) is the verifier's."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule, Why
from solver.rules.counters import NodeCounter, host_port_counters


class HostPorts(Rule):
    """Host ports as per-node counters of capacity 1 (``counters.host_port_counters``)."""

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

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        """A counter per (protocol, port) also keeps apart pods binding it on different specific host IPs."""
        notes = []
        for counter in counters:
            if counter.port is None:
                continue
            ips = {p.host_ip for k in counter.uses for p in classes[k].representative.host_ports
                   if (p.protocol, p.port) == counter.port}
            if len(ips) > 1 and not ips & {"", "0.0.0.0", "::"}:
                notes.append(f"{counter.name}: pods binding it on different host IPs are kept on separate nodes")
        return notes
