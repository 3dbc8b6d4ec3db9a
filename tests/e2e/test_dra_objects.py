"""The DRA object model against the real API server (v1.36.3, issue 11): every fixture manifest, the
ResourceSlices a node of each catalog GPU type publishes, and the model tests' full-featured objects are
accepted by a server-side dry-run; the objects the model rejects as malformed are rejected by the API
server too. Nothing is stored but a Namespace of this module's own, removed at the end."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from model.snapshot import parse_objects
from providers.catalog_file import load_catalog
from tests.e2e.conftest import ROOT, Cluster, apply, load_yaml
from tests.model.test_dra_model import BAD, rich_objects

pytestmark = pytest.mark.e2e

MANIFESTS = ROOT / "fixtures" / "manifests" / "dra"
CATALOGS = (ROOT / "fixtures" / "catalogs" / "kwok-dra.yaml", ROOT / "fixtures" / "catalogs" / "aws-like.yaml")
#: BAD cases the API server cannot reject on create: status is dropped (it is written through /status)
STATUS_ONLY = {"result for unknown request"}
#: the namespaced objects are dry-run in a namespace of their own (not the fixtures' ``ml``, which the DRA
#: scenarios use for real), created for real because a dry-run needs it to exist
NAMESPACE = "nodeplan-dra-objects"


@pytest.fixture(scope="module")
def dry_run_api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api = cluster.api()
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    yield api
    with contextlib.suppress(client.ApiException):
        client.CoreV1Api(api).delete_namespace(NAMESPACE)


def _relocated(obj: dict[str, Any]) -> dict[str, Any]:
    if "namespace" in obj.get("metadata", {}):
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": NAMESPACE}}
    return obj


def _manifests() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, _relocated(obj)) for path in sorted(MANIFESTS.glob("*.yaml")) for obj in load_yaml(path)
            if obj["kind"] != "Namespace"]


def test_fixture_manifests_are_accepted(dry_run_api: client.ApiClient, crds: list[str]) -> None:
    objects = _manifests()
    assert {o["kind"] for _, o in objects} == {"DeviceClass", "ResourceClaimTemplate", "ResourceClaim", "Deployment",
                                               "NodePool"}
    for path, obj in objects:
        applied = apply(dry_run_api, obj, dry_run=True)
        assert applied["metadata"]["name"] == obj["metadata"]["name"], path
    # the server's defaults are the model's: ExactCount, count 1
    one_gpu = next(o for _, o in objects if o["metadata"]["name"] == "one-gpu")
    served = apply(dry_run_api, one_gpu, dry_run=True)
    exactly = served["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert (exactly["allocationMode"], exactly["count"]) == ("ExactCount", 1)
    ours = parse_objects([one_gpu], source="t").resource_claim_templates[0].spec.requests[0].exactly
    assert ours is not None and (ours.allocation_mode, ours.count) == ("ExactCount", 1)


@pytest.mark.parametrize("catalog", CATALOGS, ids=lambda p: p.stem)
def test_inventory_slices_of_every_gpu_type_are_accepted(cluster: Cluster, catalog: Path) -> None:
    api = cluster.api()
    published = 0
    for it in load_catalog(catalog):
        node = f"dra-{it.name.replace('.', '-')}"
        owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": "0b7e8f4a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}
        for s in it.node_resource_slices(node):
            body = s.api(owner=owner)
            served = apply(api, body, dry_run=True)
            # nothing dropped: the beta features (counters, consumable capacity) are on in 1.36
            assert served["spec"]["devices" if s.devices else "sharedCounters"] == body["spec"][
                "devices" if s.devices else "sharedCounters"], it.name
            assert parse_objects([served], source="server").resource_slices[0].devices == s.devices
            published += 1
    assert published >= 8


def test_full_featured_model_objects_are_accepted(dry_run_api: client.ApiClient) -> None:
    for obj in map(_relocated, rich_objects()):
        served = apply(dry_run_api, obj, dry_run=True)
        assert served["kind"] == obj["kind"]


@pytest.mark.parametrize("case", sorted(set(BAD) - STATUS_ONLY))
def test_what_the_model_rejects_the_api_server_rejects(dry_run_api: client.ApiClient, case: str) -> None:
    raw = _relocated(BAD[case][0])
    with pytest.raises(client.ApiException) as err:
        apply(dry_run_api, raw, dry_run=True)
    # 422: validation; a value that does not decode (a quantity, an integer) or a repeated list-map key fails
    # the apply's conversion to the typed object (500 with that message)
    body = str(err.value.body)
    typed = "unable to convert" in body or "failed to create typed patch object" in body
    assert err.value.status in (400, 422) or (err.value.status == 500 and typed), body
