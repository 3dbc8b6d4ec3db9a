"""``effective_requests``' path for pods with app containers only must charge what the general path
(Kubernetes' ``PodRequests``: a limit without a request defaults the request, containers add up, one ``pods``
slot) charges, and leave bad quantities to the general path's located error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import pod as pod_module
from model.errors import InputError
from model.fields import RawObject

QUANTITIES = ["100m", "1", "1.5", "250m", "0", "1Gi", "512Mi", "2G", "1e3", 3, 0.5, "10Ki"]
NAMES = ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "hugepages-2Mi"]


@st.composite
def containers(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0, 4))):
        resources: dict[str, Any] = {}
        for part in ("limits", "requests"):
            if draw(st.booleans()):
                names = draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
                resources[part] = {n: draw(st.sampled_from(QUANTITIES)) for n in names}
        out.append({"name": f"c{i}", **({"resources": resources} if draw(st.booleans()) else {})})
    return out


def _general(spec: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        m.setattr(pod_module, "_containers_only", lambda _: None)
        return pod_module.effective_requests(RawObject(spec))


@settings(max_examples=300, deadline=None)
@given(containers())
def test_app_containers_only_charge_what_the_general_path_charges(items: list[dict[str, Any]]) -> None:
    monkeypatch = pytest.MonkeyPatch()
    spec = {"containers": items}
    assert pod_module.effective_requests(RawObject(spec)) == _general(spec, monkeypatch)


def test_a_bad_quantity_is_the_general_paths_located_error() -> None:
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}
    with pytest.raises(InputError) as err:
        pod_module.effective_requests(RawObject(spec))
    assert "cpu" in str(err.value)


def test_an_explicit_zero_request_is_not_defaulted_from_the_limit() -> None:
    """Kubernetes copies a container's limit into its request only when no request is given for that
    resource ("If you specify a limit for a resource, but do not specify any request, …"): ``cpu: 0`` stays 0,
    by either path."""
    from model.resources import Resources
    spec = {"containers": [{"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"},
                                                        "requests": {"cpu": "0"}}}]}
    expected = Resources({"memory": 2**30, "pods": 1})
    assert pod_module.effective_requests(RawObject(spec)) == expected
    assert _general(spec, pytest.MonkeyPatch()) == expected
