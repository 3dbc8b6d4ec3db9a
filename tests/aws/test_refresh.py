"""The controller's periodic catalog refresh against moto: a price that changed in the source reaches what the
provider and the planners use; a refresh that fails keeps the catalog in use."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from model.instancetype import InstanceType
from providers.aws.catalog import RECORDED_PRICES, CatalogRefreshTask, LiveCatalog
from providers.aws.clients import make_clients
from tests.aws.conftest import REGION, Aws


def with_price(path: Path, instance_type: str, usd: str) -> None:
    """The recorded price list with one type's on-demand price changed."""
    doc = json.loads(RECORDED_PRICES.read_text())
    items = []
    for item in doc["PriceList"]:
        product = json.loads(item)
        if product["product"]["attributes"]["instanceType"] == instance_type:
            for term in product["terms"]["OnDemand"].values():
                for dimension in term["priceDimensions"].values():
                    dimension["pricePerUnit"]["USD"] = usd
        items.append(json.dumps(product))
    path.write_text(json.dumps({**doc, "PriceList": items}))


def on_demand(types: Sequence[InstanceType], name: str) -> float:
    it = next(t for t in types if t.name == name)
    return next(o.price for o in it.offerings if o.capacity_type == "on-demand")


def test_refresh_applies_new_prices_and_keeps_the_catalog_when_it_fails(aws: Aws, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.json"
    with_price(prices, "m5.large", "0.0960000000")
    catalog = LiveCatalog(aws.ec2, aws.client("pricing"), REGION, prices_file=prices, pricing_api=False,
                          only={"m5.large", "c5.large"})
    first = catalog.build()
    assert sorted(t.name for t in first) == ["c5.large", "m5.large"] and on_demand(first, "m5.large") == 0.096
    applied: list[Sequence[InstanceType]] = []
    task = CatalogRefreshTask(catalog, applied.append, interval=60.0)
    with_price(prices, "m5.large", "0.1010000000")
    task.step()
    assert on_demand(applied[-1], "m5.large") == 0.101 and task.refreshes == 1
    assert {o.capacity_type for t in applied[-1] for o in t.offerings} == {"on-demand", "spot"}
    # EC2 unreachable: nothing applied, the controller keeps planning with what it has
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    down = make_clients(REGION, endpoint_url="http://127.0.0.1:9", max_attempts=1)
    CatalogRefreshTask(LiveCatalog(down.ec2, down.pricing, REGION, prices_file=prices), applied.append).step()
    assert len(applied) == 1
