"""The Pod store's indexes: what the provisioning and lifecycle loops ask of the pods on every pass.

Both loops run up to five passes a second during a scale-out, and each pass used to read every cached pod (which
are provisionable, which are unbound, which are bound to the nodes a plan is waiting on): 5-7 CPU ms a pass at
1,000 pods, about 2.5 of the controller's 18 CPU s in a scale-out. As client-go's informer indexers do, the index
is kept as the watch writes the store (O(1) per event, under the informer's lock), and a pass reads only the pods
it asks about.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable
from typing import Any

from controller.batch import is_provisionable, is_terminal

Object = dict[str, Any]


class PodIndex:
    """Alive pods (not Succeeded or Failed) by the facts the loops read: unbound ones by UID, the provisionable
    ones, bound ones by node, unbound ones by the node they are nominated to. ``replace`` and ``reset`` are the
    store's (its owner holds the informer's lock); readers get copies, taken under the index's own lock.

    Nothing is kept per pod but a dict entry keyed by its UID (the string its object holds already): the facts
    to take a replaced pod out again are read from the replaced object itself (a pod costs ~30 bytes more here,
    within ``tests/unit/test_pod_memory``'s budget)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unbound: dict[str, Object] = {}
        self._provisionable: dict[str, Object] = {}
        self._bound: dict[str, dict[str, Object]] = {}
        self._nominated: dict[str, dict[str, Object]] = {}

    # -- the store's side --------------------------------------------------------------------------------
    def replace(self, old: Object | None, new: Object | None) -> None:
        """The store's object of one slot went from ``old`` to ``new`` (None: none)."""
        with self._lock:
            if old is not None:
                self._file(old, add=False)
            if new is not None:
                self._file(new, add=True)

    def reset(self, pods: Iterable[Object]) -> None:
        """The store was replaced (a re-list): index its pods afresh."""
        with self._lock:
            self._unbound, self._provisionable, self._bound, self._nominated = {}, {}, {}, {}
            for pod in pods:
                self._file(pod, add=True)

    def _file(self, pod: Object, add: bool) -> None:
        if is_terminal(pod):
            return
        key = _key(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            _file_under(self._bound, str(node), key, pod, add)
            return
        _put(self._unbound, key, pod, add)
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated:
            _file_under(self._nominated, str(nominated), key, pod, add)
        if is_provisionable(pod):
            _put(self._provisionable, key, pod, add)

    # -- readers -------------------------------------------------------------------------------------------
    def unbound(self) -> dict[str, Object]:
        """UID → every alive pod without a node."""
        with self._lock:
            return dict(self._unbound)

    def provisionable(self) -> list[Object]:
        """The pods ``controller.batch.is_provisionable`` accepts."""
        with self._lock:
            return list(self._provisionable.values())

    def bound_to(self, nodes: Collection[str]) -> dict[str, list[Object]]:
        """Node → the alive pods bound to it, for ``nodes``."""
        with self._lock:
            return {node: list(self._bound.get(node, {}).values()) for node in nodes}

    def on(self, node: str) -> list[Object]:
        """The alive pods bound to ``node`` and the unbound ones nominated to it: what takes its room."""
        with self._lock:
            return [*self._bound.get(node, {}).values(), *self._nominated.get(node, {}).values()]


def _key(pod: Object) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def _put(index: dict[str, Object], key: str, pod: Object, add: bool) -> None:
    if add:
        index[key] = pod
    elif index.get(key) is pod:
        del index[key]


def _file_under(index: dict[str, dict[str, Object]], node: str, key: str, pod: Object, add: bool) -> None:
    pods = index.setdefault(node, {})
    _put(pods, key, pod, add)
    if not pods:
        del index[node]
