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


def generic_snapshot(pods: int, catalog: tuple[InstanceType, ...], seed: int = 42) -> Snapshot:
    objects: list[dict[str, Any]] = [linux_pool("default")]
    objects += generic_deployments(pods, seed=seed, mean_replicas=max(5, pods // 40))
    return parse_objects(objects, source=f"generic-{pods}").with_catalog(catalog)
