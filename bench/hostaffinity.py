"""Hostname self-affinity, the share nodeplan's diverse mix used to add to Karpenter's five, as a scenario of
its own.

Karpenter's own generator (``makePodAffinityPods``) called with the hostname key instead of the zone: each pod
carries ``my-affininity=<v>`` (seven values, uniform) and a required pod affinity on
``kubernetes.io/hostname`` to that same label, so every pod of a value must share one node with the others.
Half the batch is these pods, half Karpenter's generic pods (the remainder generic too), cpu and memory drawn
as in ``bench/diverse.py``.
"""

from __future__ import annotations

from typing import Any

from bench.diverse import FACTORIES, benchmark_nodepool, blocks, make_pods, self_affinity_pod
from model import labels as wk

SHARES = ("generic", "hostname-affinity")
_FACTORIES = {**FACTORIES, "hostname-affinity": self_affinity_pod(wk.HOSTNAME)}


def hostname_affinity_pods(count: int, seed: int = 42) -> list[dict[str, Any]]:
    return make_pods(blocks(count, SHARES), seed, _FACTORIES)


def hostname_affinity_objects(count: int, seed: int = 42) -> list[dict[str, Any]]:
    return [benchmark_nodepool(), *hostname_affinity_pods(count, seed)]
