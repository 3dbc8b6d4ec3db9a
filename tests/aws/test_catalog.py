"""``nodeplan catalog aws`` against the offline EC2 API: types, zones and spot prices from EC2, on-demand prices
from the recorded Pricing API response (the test API has no Pricing service), allocatable as Karpenter computes
it; the file loads as a catalog."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from providers.aws.instancetypes import kube_reserved_cpu
from providers.catalog_file import load_catalog
from tests.aws.conftest import Aws


def test_catalog_from_the_ec2_api(aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    out = tmp_path / "catalog.yaml"
    result = CliRunner().invoke(app, ["catalog", "aws", "--region", "us-east-1", "--output-file", str(out),
                                      "--endpoint-url", aws.endpoint])
    assert result.exit_code == 0, result.output
    types = {it.name: it for it in load_catalog(out)}
    assert len(types) > 100
    m5 = types["m5.large"]
    # 8192 MiB less ceil(7.5 %) = 614 MiB of VM overhead
    assert m5.capacity["memory"] == (8192 - 615) * 2**20
    assert m5.capacity["pods"] == 3 * (10 - 1) + 2  # 3 ENIs × 10 IPv4 addresses each
    assert m5.overhead.kube_reserved["cpu"] == 70 and m5.overhead.kube_reserved["memory"] == (11 * 29 + 255) * 2**20
    assert m5.overhead.eviction_threshold["memory"] == 100 * 2**20
    prices = {(o.zone, o.capacity_type): o.price for o in m5.offerings}
    assert prices[("us-east-1a", "on-demand")] == 0.096  # from the recorded price list
    assert ("us-east-1a", "spot") in prices  # from DescribeSpotPriceHistory
    assert m5.labels["karpenter.k8s.aws/instance-family"] == "m5"
    assert m5.labels["topology.kubernetes.io/region"] == "us-east-1"
    assert kube_reserved_cpu(8000) == 90 and kube_reserved_cpu(16000) == 110
