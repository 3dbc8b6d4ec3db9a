"""``nodeplan catalog aws --region R --output-file catalog.yaml``: an instance catalog from the EC2 API.

DescribeInstanceTypes (capacity, labels, ENI-limited pods), DescribeInstanceTypeOfferings (zones), the latest
spot price per type and zone, and on-demand prices from the Pricing API — or, where it cannot be reached (the
offline test API has none), from ``--prices`` (default: ``fixtures/aws/pricing-us-east-1.json``, a file in the
Pricing API's response shape; see its ``_source``). Allocatable is computed as Karpenter's AWS provider does
(``providers.aws.instancetypes``). The output is an ``InstanceCatalog`` (``providers/catalog_file.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from cli.output import DataFormat, format_option, output_file_option
from model.errors import InputError
from model.instancetype import InstanceType
from reports.atomic import check_writable, write_atomic

app = typer.Typer(help="Build an instance catalog from a cloud's API.", no_args_is_help=True)
RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "aws" / "pricing-us-east-1.json"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def catalog_document(types: list[InstanceType], region: str) -> dict[str, Any]:
    """The ``InstanceCatalog`` YAML document for ``types``."""
    def overhead(it: InstanceType) -> dict[str, Any]:
        return {"kubeReserved": it.overhead.kube_reserved.to_quantities(),
                "systemReserved": it.overhead.system_reserved.to_quantities(),
                "evictionThreshold": it.overhead.eviction_threshold.to_quantities()}

    return {"apiVersion": "nodeplan.io/v1alpha1", "kind": "InstanceCatalog",
            "metadata": {"name": f"aws-{region}"}, "region": region,
            "instanceTypes": [{"name": it.name, "labels": dict(sorted(it.labels.items())),
                               "capacity": it.capacity.to_quantities(), "overhead": overhead(it),
                               "offerings": [{"zone": o.zone, "capacityType": o.capacity_type,
                                              "price": round(o.price, 6), "available": o.available}
                                             for o in it.offerings]} for it in types]}


@app.command("aws", short_help="Write an instance catalog from the EC2 API.")
def aws_cmd(
    region: Annotated[str, typer.Option("--region", help="AWS region, e.g. us-east-1.")],
    output_file: Annotated[Path, output_file_option("the catalog")],
    endpoint_url: Annotated[str | None, typer.Option("--endpoint-url", help="EC2 API endpoint (a test API).")
                            ] = None,
    prices: Annotated[Path, typer.Option("--prices", help="On-demand prices in the Pricing API's GetProducts "
                                         "shape, used when the Pricing API cannot be reached.")] = RECORDED,
    pricing_api: Annotated[bool, typer.Option("--pricing-api/--no-pricing-api", help="Ask the Pricing API for "
                                              "on-demand prices first.")] = True,
    fmt: Annotated[DataFormat, format_option(DataFormat, "of the catalog file")] = DataFormat.yaml,
) -> None:
    """Write an instance catalog for REGION from the EC2 API (types, zones, spot and on-demand prices)."""
    try:
        check_writable(output_file, "--output-file")
    except InputError as err:
        raise _fail(str(err)) from None
    import boto3  # here, not at start-up: every other command would pay for botocore's import
    from botocore.exceptions import BotoCoreError, ClientError

    from providers.aws.errors import translated
    from providers.aws.instancetypes import Prices, describe, instance_type, spot_prices
    from providers.aws.pricing import live_prices, recorded_prices

    session = boto3.session.Session(region_name=region)
    ec2 = session.client("ec2", endpoint_url=endpoint_url)
    try:
        infos, zones = describe(ec2)
        spot = spot_prices(ec2)
    except ClientError as err:
        raise _fail(str(translated(err, "ec2"))) from None
    except BotoCoreError as err:
        raise _fail(f"cannot reach the EC2 API: {err}") from None
    on_demand: dict[str, float] = {}
    if pricing_api:
        try:
            on_demand = live_prices(session.client("pricing", region_name="us-east-1", endpoint_url=endpoint_url),
                                    region)
        except (ClientError, BotoCoreError) as err:
            typer.echo(f"warning: Pricing API unavailable ({type(err).__name__}); on-demand prices from {prices}",
                       err=True)
    if not on_demand:
        try:
            on_demand = recorded_prices(prices, region)
        except InputError as err:
            raise _fail(str(err)) from None
    types = [it for it in (instance_type(info, zones.get(info["InstanceType"], ()), Prices(on_demand, spot))
                           for info in sorted(infos, key=lambda i: i["InstanceType"])) if it is not None]
    if not types:
        raise _fail(f"no instance type in {region} has a priced offering")
    document = catalog_document(types, region)
    write_atomic(output_file, json.dumps(document, indent=2) + "\n" if fmt is DataFormat.json
                 else yaml.safe_dump(document, sort_keys=False, width=200))
    typer.echo(f"{output_file}: {len(types)} instance types, {sum(len(t.offerings) for t in types)} offerings",
               err=True)
