"""The chart's RBAC is the permission table with its restrictions: the Lease written by name, Node and
ResourceSlice creation only for the KWOK provider (``provider: kwok``, the default), none of either in shadow
mode — rendered with helm and compared grant by grant, ``resourceNames`` included."""

from __future__ import annotations

from controller import permissions
from tests.unit.test_chart import helm, render  # noqa: F401  (helm: the fixture building the pinned helm)


def test_default_chart_is_the_kwok_variant(helm: str) -> None:  # noqa: F811
    assert permissions.rbac_grants(render(helm)) == permissions.required_grants(
        permissions.required(provider="kwok"))


def test_a_cloud_provider_gets_no_node_creation(helm: str) -> None:  # noqa: F811
    grants = permissions.rbac_grants(render(helm, "provider=aws"))
    assert grants == permissions.required_grants(permissions.required(provider="aws"))
    assert not {g for g in grants if g[1] in ("nodes", "resourceslices") and g[2] == "create"}


def test_shadow_chart_reads_only(helm: str) -> None:  # noqa: F811
    grants = permissions.rbac_grants(render(helm, "settings.shadow=true"))
    assert grants == permissions.required_grants(permissions.required(shadow=True))
    assert {g[2] for g in grants} == {"get", "list", "watch"}
