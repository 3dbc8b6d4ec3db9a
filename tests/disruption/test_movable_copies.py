"""Evicted pods as the solver sees them (``moves.py``): copying them in bulk shares one copied shape among
replicas on nodes of the same zone, and changes nothing about any single copy."""

from __future__ import annotations

from model import labels as wk
from model.snapshot import parse_objects
from solver.disruption.moves import movable_copies, movable_copy
from tests.disruption.helpers import node, nodepool, running

SPREAD = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": wk.ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                         "labelSelector": {"matchLabels": {"app": "web"}}}]}


def _cluster():  # type: ignore[no-untyped-def]
    objects = [nodepool(), node("a1", zone="test-zone-a"), node("a2", zone="test-zone-a"),
               node("b1", zone="test-zone-b")]
    objects += [running(f"web-{i}", name, labels={"app": "web"}, spec_extra=SPREAD, owner="web")
                for i, name in enumerate(["a1", "a2", "b1", "a1"])]
    objects += [running("solo", "b1")]
    return parse_objects(objects, source="test")


def test_bulk_copies_equal_single_copies_and_share_shapes_per_zone() -> None:
    snap = _cluster()
    nodes = {n.name: n for n in snap.nodes}
    pods = [p for p in snap.pods if p.node_name]
    assert len({id(p.shape) for p in pods if p.name.startswith("web")}) == 1  # the replicas share a shape
    raw = list(snap.raw_objects)
    bulk = movable_copies(((nodes[p.node_name], [p]) for p in pods), raw)
    single = [movable_copy(p, nodes[p.node_name], raw) for p in pods]
    assert [c.model_dump() for c in bulk] == [c.model_dump() for c in single]
    assert all(c.pending and not c.node_name for c in bulk)
    by_zone: dict[str, set[int]] = {}
    for pod, copy in zip(pods, bulk, strict=True):
        if pod.name.startswith("web"):
            by_zone.setdefault(nodes[pod.node_name].labels[wk.ZONE], set()).add(id(copy.shape))
            assert copy.node_selector[wk.ZONE] == nodes[pod.node_name].labels[wk.ZONE]  # pinned to its zone
            assert not copy.topology_spread  # the zone rule is held by the pin
    assert all(len(ids) == 1 for ids in by_zone.values())  # one copied shape per zone ...
    assert len(set.union(*by_zone.values())) == 2  # ... and the zones' differ
    assert all(id(c.shape) != id(p.shape) for p, c in zip(pods, bulk, strict=True))  # originals untouched
