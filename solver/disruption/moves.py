"""The cluster after some nodes are removed: their evictable pods become pending again.

For the solver each evicted pod is a *movable copy*: pinned to its node's value of every topology key other
than the hostname that its spread or pod (anti-)affinity names, with those terms dropped. A pod that stays in
its zone (or rack, region) leaves every domain count unchanged, so every zone-level rule that held before
the move holds after it, in whatever order the scheduler binds; hostname-level rules stay in the copy and are
modelled as usual. Conservative: a cheaper plan that also moves pods across zones may exist.
The verifier reads the untouched originals (``final_snapshot``), not the copies.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from model import volumes
from model.labels import HOSTNAME
from model.node import Node
from model.pod import Pod
from model.snapshot import Snapshot


def unbound(pod: Pod, raw: list) -> Pod:  # type: ignore[type-arg]
    """The pod as the scheduler will see it once evicted and recreated: pending, volumes resolved, and no
    generated ResourceClaims yet (those are owned by the evicted pod and go with it; the replacement gets
    fresh ones from its templates, allocated wherever it lands)."""
    return volumes.resolve(pod.model_copy(update={"node_name": "", "phase": "Pending", "nominated_node": "",
                                                  "claim_statuses": ()}), raw)


def _pins(pod: Pod, node: Node) -> dict[str, str]:
    """The node's value of every topology key other than the hostname that the pod's rules name."""
    terms = pod.topology_spread + pod.pod_affinity + pod.pod_anti_affinity
    return {t.topology_key: node.labels[t.topology_key] for t in terms
            if t.topology_key != HOSTNAME and t.topology_key in node.labels}


def movable_copy(pod: Pod, node: Node, raw: list) -> Pod:  # type: ignore[type-arg]
    copy = unbound(pod, raw)
    pins = _pins(pod, node)
    if not pins:
        return copy
    return copy.model_copy(update={
        "node_selector": {**pod.node_selector, **pins},
        "topology_spread": tuple(s for s in pod.topology_spread if s.topology_key == HOSTNAME),
        "pod_affinity": tuple(t for t in pod.pod_affinity if t.topology_key == HOSTNAME),
        "pod_anti_affinity": tuple(t for t in pod.pod_anti_affinity if t.topology_key == HOSTNAME),
    })


def movable_copies(removed: Iterable[tuple[Node, Iterable[Pod]]], raw: list) -> list[Pod]:  # type: ignore[type-arg]
    """``movable_copy`` of every pod of every (node, pods), replicas sharing one copied shape per original
    shape and pins: the solver then works out classes and node requirements once per shape, not per pod (at
    5,000 nodes, 30,000 copies). A pod with volume claims resolves its own (its claims are its own)."""
    shapes: dict[tuple[int, tuple[tuple[str, str], ...]], tuple[Pod, Pod]] = {}
    out = []
    for node, pods in removed:
        for pod in pods:
            if pod.volume_claims:
                out.append(movable_copy(pod, node, raw))
                continue
            key = (id(pod.shape), tuple(sorted(_pins(pod, node).items())))
            if key not in shapes:  # the original is kept with its copy: its shape's id stays its own
                shapes[key] = (pod, movable_copy(pod, node, raw))
            out.append(pod.model_copy(update={"node_name": "", "shape": shapes[key][1].shape}))
    return out


def _without(snapshot: Snapshot, removed: Collection[str], moved: Iterable[Pod]) -> Snapshot:
    """Removed nodes gone, their pods (daemon ones included) gone, ``moved`` pending in their place.
    Pods pending before are left out: consolidation plans for the running pods only."""
    kept = [p for p in snapshot.pods if p.node_name and p.node_name not in removed]
    return snapshot.model_copy(update={"nodes": tuple(n for n in snapshot.nodes if n.name not in removed),
                                       "pods": tuple(kept) + tuple(moved)})


def solver_snapshot(snapshot: Snapshot, removed: dict[str, list[Pod]]) -> Snapshot:
    """What the solver packs: ``removed`` maps node name → its evictable pods, which come back as movable
    copies."""
    nodes = {n.name: n for n in snapshot.nodes}
    return _without(snapshot, removed.keys(),
                    movable_copies(((nodes[name], pods) for name, pods in removed.items()), list(snapshot.raw_objects)))


def final_snapshot(snapshot: Snapshot, removed: dict[str, list[Pod]]) -> Snapshot:
    """What the verifier checks: the evicted originals pending, every rule intact."""
    raw = list(snapshot.raw_objects)
    return _without(snapshot, removed.keys(), [unbound(p, raw) for pods in removed.values() for p in pods])
