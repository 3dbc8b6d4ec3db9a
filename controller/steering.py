"""Steered eviction: a consolidation decision's pods moved one destination at a time, so that the kube-scheduler
binds each evicted pod's replacement where the plan packed it.

A consolidation plan says where every evicted pod goes, but the pod its controller creates in its place is
bound by the kube-scheduler's own scores, which spread it onto the emptiest node that fits: memory-heavy pods
onto nodes the plan kept for their cpu and the reverse. Over a series of budgeted decisions that mismatch
strands room the later steps needed (the bench's 1,000-pod scale-down, replayed with a scheduler's scores:
3.67 $/h at the end where the plan reached 3.25). So the pods planned onto one destination are evicted
together while every other node that could take them carries the ``nodeplan.io/steering:PreferNoSchedule``
taint: the scheduler's TaintToleration score (weight 3 of the default profile's scores) makes the untainted
destination the best it sees, and as a preference it never leaves a pod pending when the destination is full.
The next destination's wave waits until the pods evicted in this one are back and bound.

Steering writes two taints per wave and one per fenced node, so it is skipped above ``STEER_MAX_NODES`` nodes;
a PDB refusal or an API error ends it early. Whatever it did not evict the termination drain evicts as
before, and every steering taint is removed when it ends (a crash leaves them for the next pass's clean-up).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.batch import is_terminal, pod_key
from controller.cache import ClusterCache
from controller.logs import get_logger

log = get_logger(__name__)

STEERING_TAINT = "nodeplan.io/steering"
#: more nodes than this are not fenced (each one is a taint written and removed per decision)
STEER_MAX_NODES = 200
#: a wave's evicted pods are waited for this long to be back and bound before the next wave starts
WAVE_SECONDS = 15.0


def is_steering(taint: Mapping[str, Any]) -> bool:
    return taint.get("key") == STEERING_TAINT and taint.get("effect") == "PreferNoSchedule"


class Steerer(Protocol):
    def fence(self, node: str, on: bool) -> None:
        """Add (``on``) or remove the steering taint on ``node``."""
        ...

    def evict(self, pod: Mapping[str, Any]) -> str:
        """Evict ``pod`` through the Eviction API: "evicted", "gone" or "blocked" (a PDB refused)."""
        ...


@dataclass
class SteerReport:
    waves: int = 0
    evicted: int = 0
    #: why it stopped before the last wave ('' when it did not)
    stopped: str = ""
    fenced: list[str] = field(default_factory=list)


def _owner(pod: Mapping[str, Any]) -> str | None:
    """The controller that creates an evicted pod again (namespace/kind/name), None for a bare pod."""
    meta = pod.get("metadata") or {}
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    return f"{meta.get('namespace')}/{refs[0].get('kind')}/{refs[0].get('name')}" if refs else None


class KubeSteerer:
    """``Steerer`` against the API server: the disruption writer's taint edit and the drainer's eviction."""

    def __init__(self, set_taints: Callable[[str, Callable[[list[dict[str, Any]]], list[dict[str, Any]]]], None],
                 evict: Callable[[Mapping[str, Any]], str]) -> None:
        self._set_taints = set_taints
        self.evict = evict

    def fence(self, node: str, on: bool) -> None:
        def edit(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
            kept = [t for t in taints if not is_steering(t)]
            return [*kept, {"key": STEERING_TAINT, "effect": "PreferNoSchedule"}] if on else kept
        self._set_taints(node, edit)


class Steering:
    def __init__(self, cache: ClusterCache, steerer: Steerer, *, heartbeat: Callable[[], None] = lambda: None,
                 stopped: Callable[[], bool] = lambda: False, wave_seconds: float = WAVE_SECONDS) -> None:
        self._cache = cache
        self._steerer = steerer
        self._heartbeat = heartbeat
        self._stopped = stopped
        self._wave_seconds = wave_seconds

    def move(self, where: Mapping[str, str], removed: set[str]) -> SteerReport:
        """Evict the pods ``where`` maps (pod key → destination node) off the ``removed`` nodes, one destination
        at a time, the other nodes fenced."""
        report = SteerReport()
        waves: dict[str, list[str]] = {}
        for key, node in where.items():
            waves.setdefault(node, []).append(key)
        nodes = sorted(str((n.get("metadata") or {}).get("name")) for n in self._cache.items("Node"))
        fenceable = [n for n in nodes if n not in removed]
        if len(waves) < 2 and not any(n not in waves for n in fenceable):
            return report  # one destination and nothing else to fence: the scheduler has no choice to make
        if len(nodes) > STEER_MAX_NODES:
            report.stopped = f"{len(nodes)} nodes (more than {STEER_MAX_NODES})"
            return report
        order = sorted(waves, key=lambda node: (-len(waves[node]), node))
        fenced: set[str] = set()

        def fence(node: str, on: bool) -> None:
            self._steerer.fence(node, on)
            (fenced.add if on else fenced.discard)(node)

        try:
            for node in fenceable:
                if node != order[0]:
                    fence(node, True)
            report.fenced = sorted(fenced)
            for i, dest in enumerate(order):
                if i:
                    if dest in fenced:
                        fence(dest, False)
                    if order[i - 1] in fenceable:
                        fence(order[i - 1], True)
                why = self._wave(waves[dest], removed, report)
                report.waves += 1
                if why:
                    report.stopped = why
                    break
        finally:
            for node in sorted(fenced):
                self._safe_unfence(node)
        return report

    def _safe_unfence(self, node: str) -> None:
        try:
            self._steerer.fence(node, False)
        except Exception as err:  # the next pass removes what is left (``Disruption._untaint_stale``)
            log.warning(f"could not remove the steering taint: {type(err).__name__}: {err}", node=node)

    def _wave(self, keys: list[str], removed: set[str], report: SteerReport) -> str:
        """Evict one destination's pods and wait until as many pods of their owners are bound as before; why
        it must stop ('' to go on)."""
        pods = {pod_key(p): p for p in self._cache.items("Pod")}
        before = self._bound()
        owners: dict[str, int] = {}
        for key in keys:
            pod = pods.get(key)
            if pod is None or is_terminal(pod) or (pod.get("spec") or {}).get("nodeName") not in removed:
                continue
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            outcome = self._steerer.evict(pod)
            if outcome == "blocked":
                return f"a PodDisruptionBudget refused evicting {key}"
            if outcome == "evicted":
                report.evicted += 1
                owner = _owner(pod)
                if owner is not None:
                    owners[owner] = before.get(owner, 0)
        deadline = time.monotonic() + self._wave_seconds
        generation = -1
        while owners:
            bound = self._bound()
            if all(bound.get(owner, 0) >= n for owner, n in owners.items()):
                return ""
            self._heartbeat()
            if self._stopped():
                return "the controller is stopping"
            if time.monotonic() >= deadline:
                return f"the pods of the last wave were not all bound again after {self._wave_seconds:.0f}s"
            generation = self._cache.wait_for_change(generation, min(0.5, max(0.0, deadline - time.monotonic())))
        return ""

    def _bound(self) -> dict[str, int]:
        """Owner → its pods bound to a node and not terminating."""
        out: dict[str, int] = {}
        for pod in self._cache.items("Pod"):
            owner = _owner(pod)
            if owner is None or is_terminal(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if (pod.get("spec") or {}).get("nodeName"):
                out[owner] = out.get(owner, 0) + 1
        return out
