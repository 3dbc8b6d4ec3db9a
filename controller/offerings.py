"""Offerings that failed to launch (insufficient capacity) are unavailable for a while; the next solve gets
a catalog with them marked ``available=False`` and plans around them (Karpenter's unavailable-offerings cache)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from model.instancetype import InstanceType
from providers.protocol import OfferingKey

__all__ = ["OfferingKey", "UnavailableOfferings"]


class UnavailableOfferings:
    def __init__(self, ttl: float = 180.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._until: dict[OfferingKey, float] = {}
        self._lock = threading.Lock()

    def mark(self, instance_type: str, zone: str, capacity_type: str) -> None:
        with self._lock:
            self._until[instance_type, zone, capacity_type] = self._clock() + self._ttl

    def active(self) -> frozenset[OfferingKey]:
        now = self._clock()
        with self._lock:
            self._until = {k: t for k, t in self._until.items() if t > now}
            return frozenset(self._until)

    def apply(self, catalog: Sequence[InstanceType]) -> tuple[InstanceType, ...]:
        """The catalog with every unavailable offering marked ``available=False`` (unchanged when none are)."""
        down = self.active()
        if not down:
            return tuple(catalog)
        out = []
        for it in catalog:
            if any((it.name, o.zone, o.capacity_type) in down for o in it.offerings):
                offerings = tuple(o.model_copy(update={"available": False})
                                  if (it.name, o.zone, o.capacity_type) in down else o for o in it.offerings)
                it = it.model_copy(update={"offerings": offerings})
            out.append(it)
        return tuple(out)
