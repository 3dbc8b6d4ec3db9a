"""Which pods the provisioner acts on, and when: provisionable-pod detection and the batch window."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_daemon_or_static(pod: Mapping[str, Any]) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("kind") in ("DaemonSet", "Node") for o in owners)


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def is_bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def is_provisionable(pod: Mapping[str, Any]) -> bool:
    """The scheduler tried this pod and found no node (PodScheduled=False, reason Unschedulable); it is
    unbound, alive, and not a DaemonSet or static pod (those never get a node of their own)."""
    if is_bound(pod) or is_terminal(pod) or is_daemon_or_static(pod):
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in conditions)


class BatchWindow:
    """Opens when a pod not seen before becomes provisionable; closes after ``idle`` seconds without another
    new one, or ``maximum`` seconds after it opened (Karpenter's BATCH_IDLE_DURATION / BATCH_MAX_DURATION).

    A pod counts as new once per (key, resourceVersion): pods the last solve could not place do not reopen
    the window until they (or the NodePools, see ``forget``) change, so an unplaceable pod cannot make the
    controller solve in a loop. Within one open window a pod extends it once, as Karpenter's Batcher triggers
    once per pod UID a window: the kube-scheduler rewrites a pending pod's Unschedulable message each time the
    node count changes, and during a scale-out those rewrites alone would hold the window to its maximum.
    """

    def __init__(self, idle: float = 1.0, maximum: float = 10.0) -> None:
        if idle <= 0 or maximum < idle:
            raise ValueError("need 0 < idle <= maximum")
        self.idle = idle
        self.maximum = maximum
        self._seen: dict[str, str] = {}
        #: the pods that opened or extended the window now open
        self._window: set[str] = set()
        self.opened_at: float | None = None
        self._last_new: float = 0.0
        #: the window closes at the next look, not at ``idle`` or ``maximum`` (``decide_now``)
        self._now = False

    def observe(self, pods: Mapping[str, str], now: float) -> bool:
        """Record the currently provisionable pods (key → resourceVersion); True if any was new to the window."""
        changed = [k for k, rv in pods.items() if self._seen.get(k) != rv]
        for key in changed:
            self._seen[key] = pods[key]
        new = [k for k in changed if k not in self._window]
        if new:
            self._window.update(new)
            if self.opened_at is None:
                self.opened_at = now
            self._last_new = now
        return bool(new)

    @property
    def open(self) -> bool:
        return self.opened_at is not None

    def age(self, now: float) -> float | None:
        """Seconds since the open window opened (None when it is closed)."""
        return None if self.opened_at is None else now - self.opened_at

    def decide_now(self) -> None:
        """Close the open window at the next look: nodes wait to register until its pods are decided
        (``controller.lifecycle``), and every second it stays open they are held."""
        if self.opened_at is not None:
            self._now = True

    def ready(self, now: float) -> bool:
        if self.opened_at is None:
            return False
        return self._now or now - self._last_new >= self.idle or now - self.opened_at >= self.maximum

    def deadline(self) -> float | None:
        """When the window closes if nothing new arrives."""
        if self.opened_at is None:
            return None
        if self._now:
            return self.opened_at
        return min(self._last_new + self.idle, self.opened_at + self.maximum)

    def close(self, unplaced: Mapping[str, str]) -> None:
        """End the batch; remember only the pods the solve left unplaced (they reopen it when they change)."""
        self.opened_at = None
        self._now = False
        self._window.clear()
        self._seen = dict(unplaced)

    def forget(self) -> None:
        """Something that changes every pod's options (a NodePool) changed: every pod is new again."""
        self._seen.clear()
