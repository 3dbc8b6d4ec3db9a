"""Python's cyclic garbage collector paused while a large batch is loaded and solved.

A 50,000-pod snapshot is millions of live objects (pods, shapes, requirements, numpy rows). Every full
collection walks all of them, and loading, compiling and greedy each allocate enough to trigger a dozen: 3.9 CPU s
of a 32 CPU s diverse 50,000-pod solve went to the collector (``gc.callbacks``, measured), finding almost
nothing: the solver's objects are freed by reference counting. Paused, the collector runs again when the
block ends, so cycles made meanwhile (by other threads too) wait at most one solve.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_collection() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's state is restored after it (nested blocks and
    a collector someone else disabled are left as they were)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def freeze_survivors() -> int:
    """Collect once, then move every object still alive out of the collector's reach (``gc.freeze``); returns
    how many were frozen. For a long-running process after start-up: its imports and the synced watch cache live
    as long as it does, yet each full collection walked them again (a 1,000-pod scale-out spent 14 % of the
    controller's CPU in collections started by the lifecycle loop; the imports alone are 110,000 tracked objects,
    63 ms a collection). Frozen objects that later die are still freed by reference counting; only a cycle
    among them would stay, which is why this runs once, not repeatedly."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
