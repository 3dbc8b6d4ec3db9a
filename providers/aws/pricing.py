"""On-demand Linux prices per instance type from the AWS Pricing API (GetProducts), or from a file holding a
response of the same shape (``fixtures/aws/pricing-us-east-1.json``) where the API cannot be reached."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from model.errors import InputError

FILTERS = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}


def parse_price_list(items: Iterable[str | dict[str, Any]], region: str) -> dict[str, float]:
    """Instance type → USD per hour from GetProducts ``PriceList`` entries (JSON strings) for ``region``."""
    out: dict[str, float] = {}
    for item in items:
        product = json.loads(item) if isinstance(item, str) else item
        attributes = (product.get("product") or {}).get("attributes") or {}
        if attributes.get("regionCode", region) != region or any(
                attributes.get(k, v) != v for k, v in FILTERS.items()):
            continue
        for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = float((dimension.get("pricePerUnit") or {}).get("USD", 0) or 0)
                if usd > 0 and attributes.get("instanceType"):
                    out[str(attributes["instanceType"])] = usd
    return out


def live_prices(pricing: Any, region: str) -> dict[str, float]:
    """From the Pricing API (its endpoint is in us-east-1 whatever the region priced)."""
    filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
               *({"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in FILTERS.items())]
    items: list[str] = []
    for page in pricing.get_paginator("get_products").paginate(ServiceCode="AmazonEC2", Filters=filters):
        items += page["PriceList"]
    return parse_price_list(items, region)


def recorded_prices(path: str | Path, region: str) -> dict[str, float]:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(f"cannot read price list: {err}", file=str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("PriceList"), list):
        raise InputError("expected a GetProducts response with a PriceList", file=str(path), field="PriceList")
    return parse_price_list(doc["PriceList"], region)
