"""DaemonSet overhead: every DaemonSet whose pod would run on a node takes part of that node.

A daemon pod runs on a node when it tolerates the node's taints (PreferNoSchedule never blocks a daemon;
startupTaints are ignored, as Karpenter does) and its nodeSelector / required node affinity accept the
node's labels. Its requests are then reserved before any pending pod is placed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from model.node import Node
from model.pod import Pod
from model.resources import Resources
from model.taints import Taint
from model.workload import DaemonSet, daemon_pods
from solver.rules.base import Rule


def daemon_overhead(daemonsets: Iterable[DaemonSet], labels: Mapping[str, str],
                    taints: Sequence[Taint]) -> Resources:
    total = Resources()
    for pod in daemon_pods(daemonsets, labels, taints):
        total = total + pod.requests
    return total


def missing_daemon_overhead(daemonsets: Iterable[DaemonSet], node: Node, bound: Iterable[Pod]) -> Resources:
    """Requests of daemons that should run on an existing node but have no pod there yet."""
    running = {(p.namespace, p.owner_name) for p in bound if p.owner_kind == "DaemonSet"}
    missing = Resources()
    for ds in daemonsets:
        if (ds.namespace, ds.name) not in running and ds.runs_on(node.labels, node.taints):
            missing = missing + ds.pod.requests
    return missing


class DaemonSetOverhead(Rule):
    """DaemonSets: their pods' requests come off every template's and node's capacity before packing
    (``templates.build_templates`` and ``problem.existing_capacity`` apply ``daemon_overhead``); their host
    ports close nodes to pods binding the same ports (``counters.NodeCounter.capacity_with``)."""

    name = "DaemonSet overhead"
    reads = ("DaemonSet",)
