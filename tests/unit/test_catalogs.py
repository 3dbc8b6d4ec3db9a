"""Instance catalogs: the built-in KWOK reference catalog and file-backed ``InstanceCatalog`` files.

KWOK rules (Karpenter's kwok provider generator, as documented in providers/kwok.py): vCPU in
{1,2,4,8,16,32,48,64,96,128,192,256} x family c/s/m (2/4/8 GiB per vCPU) x arch amd64/arm64 x os
linux/windows; 4 zones x {spot, on-demand}; on-demand price = 0.025*vCPU + 0.001*memory_bytes/1e9,
spot = 0.7 x on-demand; pods = min(16*vCPU, 1024); kubeReserved 100m cpu and 10Mi memory.
Allocatable = capacity - kubeReserved - systemReserved - evictionThreshold (Kubernetes' "Node Allocatable").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from model.errors import InputError
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog

GI = 2**30
MI = 2**20
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "catalogs" / "aws-like.yaml"


def by_name() -> dict[str, Any]:
    return {t.name: t for t in kwok_catalog()}


# --- KWOK -----------------------------------------------------------------------------------------------

def test_kwok_has_144_uniquely_named_types() -> None:
    catalog = kwok_catalog()
    assert len(catalog) == 144                       # 12 sizes x 3 families x 2 arches x 2 oses
    assert len({t.name for t in catalog}) == 144


def test_kwok_names() -> None:
    names = by_name()
    for name in ("c-1x-amd64-linux", "s-4x-arm64-windows", "m-256x-amd64-linux", "c-48x-arm64-linux"):
        assert name in names
    assert "c-3x-amd64-linux" not in names
    assert "x-1x-amd64-linux" not in names


def test_kwok_labels() -> None:
    t = by_name()["s-4x-arm64-windows"]
    assert t.labels["node.kubernetes.io/instance-type"] == "s-4x-arm64-windows"
    assert t.labels["kubernetes.io/arch"] == "arm64"
    assert t.labels["kubernetes.io/os"] == "windows"
    assert t.labels["karpenter.kwok.sh/instance-family"] == "s"
    assert t.labels["karpenter.kwok.sh/instance-cpu"] == "4"
    assert t.labels["karpenter.kwok.sh/instance-memory"] == "16Gi"


@pytest.mark.parametrize(("name", "memory_label"), [
    ("c-1x-amd64-linux", "2Gi"),
    ("m-96x-amd64-linux", "768Gi"),
    ("m-128x-amd64-linux", "1Ti"),       # 128 x 8 GiB = 1024 GiB = 1 TiB
    ("s-256x-amd64-linux", "1Ti"),
    ("m-192x-amd64-linux", "1536Gi"),    # not a whole number of TiB
    ("m-256x-amd64-linux", "2Ti"),
])
def test_kwok_memory_label_format(name: str, memory_label: str) -> None:
    assert by_name()[name].labels["karpenter.kwok.sh/instance-memory"] == memory_label


def test_kwok_c1x_prices() -> None:
    t = by_name()["c-1x-amd64-linux"]
    on_demand = 0.025 * 1 + 0.001 * 2 * 2**30 / 1e9
    assert on_demand == pytest.approx(0.027147483648, rel=1e-12)
    prices = {(o.zone, o.capacity_type): o.price for o in t.offerings}
    for zone in ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"):
        assert prices[(zone, "on-demand")] == pytest.approx(0.027147483648, rel=1e-12)
        assert prices[(zone, "spot")] == pytest.approx(0.7 * 0.027147483648, rel=1e-12)


@pytest.mark.parametrize("name", ["m-64x-arm64-windows", "s-16x-amd64-linux", "c-256x-arm64-linux"])
def test_kwok_price_formula_everywhere(name: str) -> None:
    t = by_name()[name]
    cpu = t.capacity["cpu"] // 1000
    expected = 0.025 * cpu + 0.001 * t.capacity["memory"] / 1e9
    for o in t.offerings:
        factor = 0.7 if o.capacity_type == "spot" else 1.0
        assert o.price == pytest.approx(expected * factor, rel=1e-12)


def test_kwok_offerings_are_8_per_type_in_4_zones() -> None:
    for t in kwok_catalog():
        assert len(t.offerings) == 8
        assert {o.zone for o in t.offerings} == {"test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"}
        assert sorted(o.capacity_type for o in t.offerings) == ["on-demand"] * 4 + ["spot"] * 4
        assert len({(o.zone, o.capacity_type) for o in t.offerings}) == 8
        assert all(o.available for o in t.offerings)


@pytest.mark.parametrize(("cpu", "pods"), [(1, 16), (2, 32), (16, 256), (48, 768), (64, 1024), (96, 1024),
                                           (256, 1024)])
def test_kwok_pod_capacity_is_16_per_cpu_capped_at_1024(cpu: int, pods: int) -> None:
    t = by_name()[f"c-{cpu}x-amd64-linux"]
    assert t.capacity["pods"] == pods


@pytest.mark.parametrize(("family", "gib_per_cpu"), [("c", 2), ("s", 4), ("m", 8)])
def test_kwok_capacity_and_allocatable(family: str, gib_per_cpu: int) -> None:
    t = by_name()[f"{family}-8x-amd64-linux"]
    assert t.capacity["cpu"] == 8000
    assert t.capacity["memory"] == 8 * gib_per_cpu * GI
    # allocatable = capacity - kubeReserved (100m cpu, 10Mi memory)
    assert t.allocatable["cpu"] == 8000 - 100
    assert t.allocatable["memory"] == 8 * gib_per_cpu * GI - 10 * MI
    assert t.allocatable["pods"] == t.capacity["pods"]


def test_kwok_catalog_order_is_cpu_family_os_arch() -> None:
    names = [t.name for t in kwok_catalog()[:5]]
    assert names == ["c-1x-amd64-linux", "c-1x-arm64-linux", "c-1x-amd64-windows", "c-1x-arm64-windows",
                     "s-1x-amd64-linux"]


# --- file catalogs --------------------------------------------------------------------------------------

def test_aws_like_fixture_loads() -> None:
    catalog = load_catalog(FIXTURE)
    assert len(catalog) > 100
    assert len({t.name for t in catalog}) == len(catalog)
    for t in catalog:
        assert t.labels["node.kubernetes.io/instance-type"] == t.name
        assert t.labels["topology.kubernetes.io/region"] == "us-east-1"
        assert t.offerings


def test_aws_like_m5_large() -> None:
    t = next(t for t in load_catalog(FIXTURE) if t.name == "m5.large")
    assert t.capacity["cpu"] == 2000
    assert t.capacity["memory"] == 8 * GI
    assert t.capacity["pods"] == 29
    # allocatable = 2 - 70m cpu; 8Gi - 574Mi - 100Mi memory
    assert t.allocatable["cpu"] == 1930
    assert t.allocatable["memory"] == 8 * GI - 674 * MI
    on_demand = [o for o in t.offerings if o.capacity_type == "on-demand"]
    assert {o.price for o in on_demand} == {0.096}


def _type(name: str = "t.small", **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": name,
        "labels": {"kubernetes.io/arch": "amd64"},
        "capacity": {"cpu": "2", "memory": "4Gi", "pods": "20"},
        "offerings": [{"zone": "z1", "capacityType": "on-demand", "price": 0.05}],
    }
    base.update(overrides)
    return base


def write_catalog(tmp_path: Path, *types: dict[str, Any], **root: Any) -> Path:
    doc = {"apiVersion": "nodeplan.io/v1alpha1", "kind": "InstanceCatalog", "metadata": {"name": "t"},
           "instanceTypes": list(types), **root}
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def catalog_error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_catalog(path)
    return info.value


def test_load_catalog_adds_instance_type_label(tmp_path: Path) -> None:
    (t,) = load_catalog(write_catalog(tmp_path, _type("t.small")))
    assert t.labels["node.kubernetes.io/instance-type"] == "t.small"
    assert t.labels["kubernetes.io/arch"] == "amd64"
    assert "topology.kubernetes.io/region" not in t.labels


def test_load_catalog_adds_region_label(tmp_path: Path) -> None:
    (t,) = load_catalog(write_catalog(tmp_path, _type(), region="eu-west-1"))
    assert t.labels["topology.kubernetes.io/region"] == "eu-west-1"


def test_load_catalog_parses_overhead(tmp_path: Path) -> None:
    overhead = {"kubeReserved": {"cpu": "100m"}, "systemReserved": {"memory": "100Mi"},
                "evictionThreshold": {"memory": "100Mi"}}
    (t,) = load_catalog(write_catalog(tmp_path, _type(overhead=overhead)))
    assert t.allocatable["cpu"] == 1900
    assert t.allocatable["memory"] == 4 * GI - 200 * MI


def test_negative_price(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type("ok.large"), _type(
        "bad.large", offerings=[{"zone": "z1", "capacityType": "spot", "price": -0.1}]))
    err = catalog_error(path)
    text = str(err)
    assert str(path) in text
    assert "instance type bad.large" in text
    assert "field offerings[0].price" in text
    assert err.field == "offerings[0].price"


def test_price_must_be_a_number(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(offerings=[
        {"zone": "z1", "capacityType": "spot", "price": 0.1},
        {"zone": "z2", "capacityType": "spot", "price": "cheap"}]))
    text = str(catalog_error(path))
    assert "instance type t.small" in text
    assert "field offerings[1].price" in text


def test_unknown_capacity_type(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(offerings=[{"zone": "z1", "capacityType": "preemptible",
                                                      "price": 0.1}]))
    text = str(catalog_error(path))
    assert str(path) in text
    assert "instance type t.small" in text
    assert "field offerings[0].capacityType" in text


def test_missing_zone(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(offerings=[{"capacityType": "spot", "price": 0.1}]))
    assert "field offerings[0].zone" in str(catalog_error(path))


def test_duplicate_names(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type("dup.large"), _type("other"), _type("dup.large"))
    err = catalog_error(path)
    text = str(err)
    assert str(path) in text
    assert "instance type dup.large" in text
    assert "duplicate" in text
    assert err.field == "name"


def test_wrong_kind(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(), kind="NodePool")
    err = catalog_error(path)
    assert str(path) in str(err)
    assert "InstanceCatalog" in str(err)
    assert err.field == "kind"


def test_multiple_documents_are_rejected(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type())
    path.write_text(path.read_text(encoding="utf-8") + "---\n" + path.read_text(encoding="utf-8"),
                    encoding="utf-8")
    assert catalog_error(path).field == "kind"


def test_bad_capacity_quantity(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(capacity={"cpu": "two", "memory": "4Gi"}))
    text = str(catalog_error(path))
    assert "instance type t.small" in text
    assert "field capacity.cpu" in text


def test_capacity_needs_cpu_and_memory(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(capacity={"cpu": "2"}))
    err = catalog_error(path)
    assert err.field == "capacity"
    assert "instance type t.small" in str(err)


def test_bad_overhead_quantity(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(overhead={"kubeReserved": {"memory": "1 Gi"}}))
    assert "field overhead.kubeReserved.memory" in str(catalog_error(path))


def test_type_without_offerings(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(offerings=[]))
    err = catalog_error(path)
    assert err.field == "offerings"
    assert "instance type t.small" in str(err)


def test_type_without_name(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, _type(name=""))
    err = catalog_error(path)
    assert err.field == "name"
    assert "instance type instanceTypes[0]" in str(err)


def test_empty_catalog(tmp_path: Path) -> None:
    path = write_catalog(tmp_path)
    err = catalog_error(path)
    assert err.field == "instanceTypes"
    assert str(path) in str(err)


def test_missing_catalog_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    err = catalog_error(path)
    assert str(path) in str(err)
    assert "not found" in str(err)
