"""Benchmark scenarios: generic Deployment mixes at several sizes on the KWOK and realistic catalogs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.workloads import generic_deployments, linux_pool
from model.instancetype import InstanceType
from model.snapshot import Snapshot, parse_objects
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog

ROOT = Path(__file__).resolve().parent.parent
REALISTIC_CATALOG = ROOT / "fixtures" / "catalogs" / "aws-like.yaml"


def catalogs() -> dict[str, tuple[InstanceType, ...]]:
    return {"kwok": kwok_catalog(), "aws-like": load_catalog(REALISTIC_CATALOG)}


#: The NodePool each catalog is benchmarked with: KWOK's e2e default (linux), and for the AWS-like catalog
#: the usual general-purpose pool (c/m/r families; no GPU or burstable types).
POOL_REQUIREMENTS: dict[str, list[dict[str, Any]]] = {
    "kwok": [],
    "aws-like": [{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}],
}


def generic_objects(pods: int, catalog_name: str, seed: int = 42) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [linux_pool("default", requirements=POOL_REQUIREMENTS.get(catalog_name, []))]
    objects += generic_deployments(pods, seed=seed, mean_replicas=max(5, pods // 40))
    return objects


def generic_snapshot(pods: int, catalog: tuple[InstanceType, ...], seed: int = 42,
                     catalog_name: str = "kwok") -> Snapshot:
    return parse_objects(generic_objects(pods, catalog_name, seed), source=f"generic-{pods}").with_catalog(catalog)
