"""Loading parses pods once per shape (``model.podshapes``): every pod's model must be exactly the one
``Pod.parse`` builds from its own object, replicas share one ``PodShape``, and a bad pod is still named."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.controller_scale import api_pod
from model.errors import InputError
from model.pod import Pod
from model.podshapes import PodShapes
from model.snapshot import parse_objects
from tests.unit.test_decode import rich_pod


def _replica(name: str, **changes: Any) -> dict[str, Any]:
    pod = api_pod(name, "shop", "web-5d9f", cpu="250m", memory="512Mi")
    for path, value in changes.items():
        section, field = path.split("__")
        pod.setdefault(section, {})[field] = value
    return pod


def test_every_model_equals_its_own_parse() -> None:
    raws = [rich_pod(), _replica("web-1"), _replica("web-2", metadata__resourceVersion="77",
                                                   metadata__creationTimestamp="2026-11-30T10:00:00Z"),
            _replica("web-3", spec__nodeName="node-a", status__startTime="2026-11-30T10:00:05Z"),
            _replica("web-4", metadata__deletionTimestamp="2026-11-30T11:00:00Z"),
            _replica("web-5", status__nominatedNodeName="node-b"),
            _replica("web-6", metadata__labels={"app": "other"}),
            _replica("web-7", spec__priority=1000)]
    shapes = PodShapes()
    for raw in raws + [copy.deepcopy(r) for r in raws]:
        model, reference = shapes(raw), Pod.parse(raw)
        assert model == reference
        assert model.model_dump() == reference.model_dump()


def test_replicas_share_a_shape_and_what_parse_reads_splits_them() -> None:
    shapes = PodShapes()
    # fields Pod.parse does not read (managedFields, resourceVersion, conditions) do not split a shape
    a = shapes(_replica("web-1", metadata__managedFields=[{"manager": "kubelet", "time": "2026-11-30T10:00:00Z"}]))
    b = shapes(_replica("web-2", metadata__resourceVersion="9", status__conditions=[
        {"type": "PodScheduled", "status": "False", "lastTransitionTime": "2026-11-30T10:01:00Z"}]))
    assert a.shape is b.shape and (a.name, b.name) == ("web-1", "web-2")
    # what it reads does: a label, a request, the phase, an owner
    c = shapes(_replica("web-3", metadata__labels={"app": "api"}))
    d = shapes(_replica("web-4", status__phase="Succeeded"))
    assert len({id(p.shape) for p in (a, c, d)}) == 3
    assert c.labels == {"app": "api"} and d.terminal and not a.terminal


def test_a_bad_pod_after_good_replicas_is_named() -> None:
    good = [_replica(f"web-{i}") for i in range(3)]
    bad = _replica("web-9")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(InputError) as err:
        parse_objects([*good, bad], source="snap.yaml")
    assert "Pod shop/web-9" in str(err.value) and "cpu" in str(err.value)


def test_snapshot_loading_shares_shapes() -> None:
    snapshot = parse_objects([_replica(f"web-{i}") for i in range(50)], source="snap.yaml")
    assert len({id(p.shape) for p in snapshot.pods}) == 1
    assert [p.name for p in snapshot.pods] == [f"web-{i}" for i in range(50)]
    assert len({p.uid for p in snapshot.pods}) == 50  # each keeps its own identity


def test_a_bounded_table_starts_again_and_every_model_is_still_its_own_parse() -> None:
    """The watch cache's parser (``controller.decode.PodParser``) is this table with a bound: past it the
    shapes are forgotten, which may only cost sharing, never a wrong model."""
    from controller.decode import PodParser

    shapes = PodParser(limit=2)
    raws = [_replica(f"web-{i}", metadata__labels={"app": f"app-{i % 3}"}) for i in range(9)]
    models = [shapes(raw) for raw in raws]
    assert models == [Pod.parse(raw) for raw in raws]
    assert len(shapes) <= 2
    assert models[0].shape is not models[3].shape  # app-0's shape was forgotten after app-1 and app-2
