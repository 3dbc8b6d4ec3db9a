"""Zone-level pod rules, decided before packing by pinning pods to zones.

Kubernetes checks zone spread and zone (anti-)affinity against counts per zone. nodeplan turns each such
group of pods into a per-zone quota first, then pins every pod to its zone (an extra zone requirement),
so every later stage — greedy, patterns, the compact model, the proof — keeps the rule without knowing
it. The quota is chosen, not optimised: a valid plan always results, a cheaper one with another split
may exist when zone prices differ (the KWOK catalog's do not).

- ``topologySpreadConstraints`` on ``topology.kubernetes.io/zone`` with DoNotSchedule: the group (pods
  the selector matches, existing ones counted) is water-filled across the eligible zones, so final
  counts differ by at most one level — within any maxSkew ≥ 1. With ``minDomains`` above the zones
  available, each zone holds at most maxSkew (Kubernetes then counts the global minimum as 0).
- Required pod anti-affinity on zone against its own pods: one pod per zone, none where a matching pod
  already runs; the rest cannot be scheduled.
- Required pod affinity on zone to its own pods: all pods in the zone where matching pods already run,
  or, for the first ones, in the first eligible zone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from model.labels import ZONE
from model.pod import Pod
from model.taints import Taint, untolerated


@dataclass
class ZonePlan:
    pins: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _eligible_zones(pod: Pod, nodes: Sequence[tuple[Mapping[str, str], Sequence[Taint]]]) -> list[str]:
    """Zones of nodes whose labels the pod's node affinity accepts (nodeAffinityPolicy Honor)."""
    return sorted({labels[ZONE] for labels, taints in nodes
                   if ZONE in labels and pod.accepts_labels(labels) and not untolerated(pod.tolerations, taints)})


def _water_fill(total: int, existing: dict[str, int], zones: list[str], cap: int | None) -> dict[str, int]:
    """Add ``total`` pods to zones lowest-first (ties by name); ``cap`` bounds a zone's final count."""
    added = dict.fromkeys(zones, 0)
    for _ in range(total):
        open_zones = [z for z in zones if cap is None or existing.get(z, 0) + added[z] < cap]
        if not open_zones:
            break
        target = min(open_zones, key=lambda z: (existing.get(z, 0) + added[z], z))
        added[target] += 1
    return added


def plan_zones(pending: Sequence[Pod], bound: Sequence[tuple[Pod, str]],
               nodes: Sequence[tuple[Mapping[str, str], Sequence[Taint]]]) -> ZonePlan:
    """Zone pins for pending pods whose zone-level rules nodeplan models. ``bound`` pairs each running
    pod with its node's zone; ``nodes`` are the (labels, taints) of every node the plan could use."""
    result = ZonePlan()
    done: set[str] = set()
    for pod in pending:
        if pod.key in done:
            continue
        spread = next((s for s in pod.topology_spread if s.topology_key == ZONE
                       and s.when_unsatisfiable == "DoNotSchedule" and s.selector is not None), None)
        anti = next((t for t in pod.pod_anti_affinity if t.topology_key == ZONE
                     and t.selects(pod.namespace, pod.labels, pod.namespace, pod.labels)), None)
        affinity = next((t for t in pod.pod_affinity if t.topology_key == ZONE
                         and t.selects(pod.namespace, pod.labels, pod.namespace, pod.labels)), None)
        term = anti or affinity
        selector = spread.selector if spread else term.selector if term else None
        if selector is None:
            continue
        group = [p for p in pending if p.key not in done and p.namespace == pod.namespace
                 and selector.matches(p.labels)]
        existing: dict[str, int] = {}
        for other, zone in bound:
            if zone and other.namespace == pod.namespace and selector.matches(other.labels):
                existing[zone] = existing.get(zone, 0) + 1
        zones = _eligible_zones(pod, nodes)
        done.update(p.key for p in group)
        if not zones:
            continue  # nothing can take them: node selection explains why
        if spread is not None:
            cap = spread.max_skew if spread.min_domains and len(zones) < spread.min_domains else None
            quota = _water_fill(len(group), existing, zones, cap)
            rule = "topology spread"
        elif anti is not None:
            quota = {z: (0 if existing.get(z) else 1) for z in zones}
            rule = "pod anti-affinity"
        else:
            home = max(existing, key=lambda z: (existing[z], z)) if existing else zones[0]
            quota = {home: len(group)} if home in zones else {}
            rule = "pod affinity"
        queue = sorted(group, key=lambda p: p.key)
        for zone in zones:
            for _ in range(quota.get(zone, 0)):
                if queue:
                    result.pins[queue.pop(0).key] = zone
        for left in queue:
            result.refused[left.key] = (f"{rule} on {ZONE}: no zone left for it among {', '.join(zones)} "
                                        "(matching pods already running counted)")
    return result
