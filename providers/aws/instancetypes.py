"""EC2 instance types as nodeplan InstanceTypes, with capacity and overhead computed as Karpenter's AWS provider
computes them (``pkg/providers/instancetype/types.go``), so the solver packs against what the kubelet will
report as allocatable:

* memory: ``MemoryInfo.SizeInMiB`` (less 64 MiB on Graviton) less the VM overhead, ``ceil(7.5 %)`` of it;
* pods: ENI-limited, ``MaximumNetworkInterfaces × (Ipv4AddressesPerInterface − 1) + 2`` (or ``maxPods``);
* kube-reserved: cpu 6 % of the first core, 1 % of the second, 0.5 % of the next two, 0.25 % above four;
  memory ``11 MiB × pods + 255 MiB``; ephemeral-storage 1 Gi;
* eviction threshold: memory.available 100 Mi, nodefs.available 10 % of the root volume (20 Gi by default);
* labels: arch, os, instance type and the ``karpenter.k8s.aws/instance-*`` family labels.

Offerings come from the zones that offer the type and the usage classes it supports, priced by ``prices``
(on-demand by type, spot by type and zone); an offering with no price is left out, as Karpenter does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from model import labels as wk
from model.instancetype import InstanceType, Offering, Overhead
from model.resources import Resources

MIB = 2**20
GIB = 2**30
VM_MEMORY_OVERHEAD = 0.075
DEFAULT_ROOT_VOLUME = 20 * GIB
EVICTION_MEMORY = 100 * MIB
LABEL = "karpenter.k8s.aws"
ARCHES = {"x86_64": "amd64", "arm64": "arm64"}


@dataclass(frozen=True)
class Prices:
    """Hourly USD prices: on-demand by instance type, spot by (instance type, zone)."""

    on_demand: Mapping[str, float]
    spot: Mapping[tuple[str, str], float]


def eni_limited_pods(info: Mapping[str, Any]) -> int:
    network = info.get("NetworkInfo") or {}
    return int(network.get("MaximumNetworkInterfaces", 1)) * (int(network.get("Ipv4AddressesPerInterface", 2)) - 1) + 2


def memory_capacity(info: Mapping[str, Any]) -> int:
    """Bytes the node reports: the type's memory, less Graviton's 64 MiB CMA, less the VM overhead."""
    mib = int((info.get("MemoryInfo") or {}).get("SizeInMiB", 0))
    if arch(info) == "arm64":
        mib -= 64
    return (mib - math.ceil(mib * VM_MEMORY_OVERHEAD)) * MIB


def kube_reserved_cpu(millicores: int) -> int:
    """Millicores kube-reserved takes (EKS' formula: 6 % / 1 % / 0.5 % / 0.25 % bands)."""
    bands = ((0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 40, 0.0025))
    return int(sum(max(0, min(millicores, hi) - lo) * rate for lo, hi, rate in bands))


def arch(info: Mapping[str, Any]) -> str:
    archs = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ["x86_64"]
    return str(ARCHES.get(archs[0], archs[0]))


def labels_of(info: Mapping[str, Any]) -> dict[str, str]:
    name = str(info["InstanceType"])
    family, _, size = name.partition(".")
    match = re.match(r"^([a-z]+)(\d+)", family)
    out = {wk.INSTANCE_TYPE: name, wk.ARCH: arch(info), wk.OS: "linux", f"{LABEL}/instance-family": family,
           f"{LABEL}/instance-size": size,
           f"{LABEL}/instance-cpu": str((info.get("VCpuInfo") or {}).get("DefaultVCpus", 0)),
           f"{LABEL}/instance-memory": str((info.get("MemoryInfo") or {}).get("SizeInMiB", 0))}
    if match:
        out[f"{LABEL}/instance-category"] = match.group(1)
        out[f"{LABEL}/instance-generation"] = match.group(2)
    if info.get("Hypervisor"):
        out[f"{LABEL}/instance-hypervisor"] = str(info["Hypervisor"])
    manufacturer = (info.get("ProcessorInfo") or {}).get("Manufacturer")
    if manufacturer:
        out[f"{LABEL}/instance-cpu-manufacturer"] = str(manufacturer).lower()
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        out[f"{LABEL}/instance-gpu-name"] = str(gpus[0].get("Name", "")).lower().replace(" ", "-")
        out[f"{LABEL}/instance-gpu-manufacturer"] = str(gpus[0].get("Manufacturer", "")).lower()
        out[f"{LABEL}/instance-gpu-count"] = str(sum(int(g.get("Count", 0)) for g in gpus))
    return out


def instance_type(info: Mapping[str, Any], zones: Iterable[str], prices: Prices, *,
                  max_pods: int | None = None, root_volume: int = DEFAULT_ROOT_VOLUME) -> InstanceType | None:
    """One DescribeInstanceTypes entry as an InstanceType (None when it has no priced offering)."""
    name = str(info["InstanceType"])
    cpu = int((info.get("VCpuInfo") or {}).get("DefaultVCpus", 0)) * 1000
    pods = max_pods if max_pods is not None else eni_limited_pods(info)
    capacity = {"cpu": cpu, "memory": memory_capacity(info), "pods": pods, "ephemeral-storage": root_volume}
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    nvidia = sum(int(g.get("Count", 0)) for g in gpus if str(g.get("Manufacturer", "")).upper() == "NVIDIA")
    if nvidia:
        capacity["nvidia.com/gpu"] = nvidia
    usage = set(info.get("SupportedUsageClasses") or ["on-demand"])
    offerings = []
    for zone in sorted(set(zones)):
        if "on-demand" in usage and name in prices.on_demand:
            offerings.append(Offering(zone=zone, capacity_type="on-demand", price=prices.on_demand[name]))
        if "spot" in usage and (name, zone) in prices.spot:
            offerings.append(Offering(zone=zone, capacity_type="spot", price=prices.spot[name, zone]))
    if not offerings or cpu <= 0 or capacity["memory"] <= 0:
        return None
    overhead = Overhead(
        kube_reserved=Resources({"cpu": kube_reserved_cpu(cpu), "memory": (11 * pods + 255) * MIB,
                                 "ephemeral-storage": GIB}),
        eviction_threshold=Resources({"memory": EVICTION_MEMORY, "ephemeral-storage": root_volume // 10}))
    return InstanceType(name=name, labels=labels_of(info), capacity=Resources(capacity), overhead=overhead,
                        offerings=tuple(offerings))


def describe(ec2: Any) -> tuple[list[dict[str, Any]], dict[str, set[str]]]:
    """Every instance type of the region and the zones offering each (DescribeInstanceTypes and
    DescribeInstanceTypeOfferings, paginated)."""
    infos: list[dict[str, Any]] = []
    for page in ec2.get_paginator("describe_instance_types").paginate():
        infos += page["InstanceTypes"]
    zones: dict[str, set[str]] = {}
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone"):
        for item in page["InstanceTypeOfferings"]:
            zones.setdefault(item["InstanceType"], set()).add(item["Location"])
    return infos, zones


def spot_prices(ec2: Any, instance_types: Iterable[str] | None = None) -> dict[tuple[str, str], float]:
    """The latest Linux spot price per (instance type, zone) from DescribeSpotPriceHistory."""
    latest: dict[tuple[str, str], tuple[Any, float]] = {}
    kwargs: dict[str, Any] = {"ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]}
    if instance_types is not None:
        kwargs["InstanceTypes"] = list(instance_types)
    for page in ec2.get_paginator("describe_spot_price_history").paginate(**kwargs):
        for item in page["SpotPriceHistory"]:
            key = (item["InstanceType"], item["AvailabilityZone"])
            stamp = item.get("Timestamp")
            if key not in latest or (stamp is not None and stamp > latest[key][0]):
                latest[key] = (stamp, float(item["SpotPrice"]))
    return {k: v for k, (_, v) in latest.items()}
