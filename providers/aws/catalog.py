"""The AWS instance catalog from the EC2 API, and its periodic refresh in the controller.

``LiveCatalog.build`` reads DescribeInstanceTypes and DescribeInstanceTypeOfferings (types, zones), the latest
spot price per type and zone, and on-demand prices from the Pricing API — else from a file in its GetProducts
shape (the offline test API has no Pricing API; ``fixtures/aws/pricing-us-east-1.json`` is derived from the
aws-like catalog, not recorded from AWS). ``only`` keeps the types of a given catalog (``--catalog`` names the
instance types a cluster uses; prices and offerings still come from the API).

``CatalogRefreshTask`` rebuilds it every ``interval`` (``nodeplan run --catalog-refresh``, default 12 h: Karpenter's
AWS provider refreshes instance types and prices every 12 hours, ``pkg/controllers/providers/pricing`` and
``.../instancetype``) and hands it to ``apply`` (the provider and the controller's planners). A refresh that
fails keeps the catalog in use and is retried at the next interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from model.errors import InputError
from model.instancetype import InstanceType
from providers.aws.errors import translated
from providers.aws.instancetypes import Prices, describe, instance_type, spot_prices
from providers.aws.pricing import live_prices, recorded_prices
from providers.protocol import CloudProviderError

log = logging.getLogger(__name__)

RECORDED_PRICES = Path(__file__).resolve().parents[2] / "fixtures" / "aws" / "pricing-us-east-1.json"
#: Karpenter's AWS provider refreshes prices and instance types every 12 hours
DEFAULT_REFRESH = 12 * 3600.0


class LiveCatalog:
    def __init__(self, ec2: Any, pricing: Any, region: str, *, prices_file: Path = RECORDED_PRICES,
                 pricing_api: bool = True, only: Collection[str] | None = None) -> None:
        self._ec2, self._pricing, self.region = ec2, pricing, region
        self._prices_file = prices_file
        self._pricing_api = pricing_api
        self._only = frozenset(only) if only is not None else None
        #: where the last build's on-demand prices came from (``pricing-api`` or the file)
        self.on_demand_source = ""

    def on_demand(self) -> dict[str, float]:
        if self._pricing_api:
            try:
                prices = live_prices(self._pricing, self.region)
            except (ClientError, BotoCoreError) as err:
                log.info("Pricing API unavailable (%s); on-demand prices from %s", type(err).__name__,
                         self._prices_file)
            else:
                if prices:
                    self.on_demand_source = "pricing-api"
                    return prices
        self.on_demand_source = str(self._prices_file)
        return recorded_prices(self._prices_file, self.region)

    def build(self) -> list[InstanceType]:
        """Every priced instance type (of ``only``, when given), sorted by name."""
        try:
            infos, zones = describe(self._ec2)
            wanted = [i for i in infos if self._only is None or i["InstanceType"] in self._only]
            spot = spot_prices(self._ec2, sorted(i["InstanceType"] for i in wanted) if self._only else None)
        except ClientError as err:
            raise translated(err, "ec2") from None
        except BotoCoreError as err:
            raise CloudProviderError(f"cannot reach the EC2 API: {err}") from None
        prices = Prices(self.on_demand(), spot)
        types = (instance_type(info, zones.get(info["InstanceType"], ()), prices)
                 for info in sorted(wanted, key=lambda i: i["InstanceType"]))
        return [it for it in types if it is not None]


class CatalogRefreshTask:
    """A periodic controller task: rebuild the catalog, then ``apply`` it."""

    name = "catalog-refresh"

    def __init__(self, catalog: LiveCatalog, apply: Callable[[Sequence[InstanceType]], None],
                 interval: float = DEFAULT_REFRESH, *, initial_delay: bool = True) -> None:
        self._catalog = catalog
        self._apply = apply
        self.interval = interval
        #: the controller built the catalog at start: the first refresh is one interval later
        self.initial_delay = initial_delay
        self.refreshes = 0

    def step(self) -> None:
        try:
            types = self._catalog.build()
        except (CloudProviderError, InputError) as err:
            log.warning("catalog refresh failed, keeping the current catalog: %s", err)
            return
        if not types:
            log.warning("catalog refresh found no priced instance type; keeping the current catalog")
            return
        self._apply(types)
        self.refreshes += 1
        log.info("catalog refreshed: %d instance types, %d offerings (on-demand prices from %s)", len(types),
                 sum(len(t.offerings) for t in types), self._catalog.on_demand_source)
