"""The KWOK provider's reference catalog (Karpenter's ``kwok`` provider), built in as the default.

144 instance types: vCPU in {1 … 256} × family c/s/m (2/4/8 GiB per vCPU) × arch amd64/arm64 × os
linux/windows, offered in four zones as spot and on-demand. On-demand price = 0.025 × vCPU + 0.001 ×
memory in bytes / 1e9 (memory counted in GiB × 2^30); spot costs 0.7 × on-demand. kubeReserved is 100m
cpu and 10Mi memory.
"""

from __future__ import annotations

from functools import cache

from model import labels as wk
from model.instancetype import InstanceType, Offering, Overhead
from model.quantity import format_quantity
from model.resources import Resources

CPU_SIZES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
FAMILIES = {"c": 2, "s": 4, "m": 8}
ARCHS = ("amd64", "arm64")
OSES = ("linux", "windows")
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")
CAPACITY_TYPES = ("spot", "on-demand")
SPOT_DISCOUNT = 0.7
GIB = 2**30
EPHEMERAL_STORAGE = 20 * GIB
LABEL_PREFIX = "karpenter.kwok.sh"


def on_demand_price(cpu: int, memory_bytes: int) -> float:
    return 0.025 * cpu + 0.001 * (memory_bytes / 1e9)


@cache
def kwok_catalog() -> tuple[InstanceType, ...]:
    """The reference catalog in the generator's order (cpu, family, os, arch)."""
    out = []
    for cpu in CPU_SIZES:
        for family, gib_per_cpu in FAMILIES.items():
            memory = cpu * gib_per_cpu * GIB
            price = on_demand_price(cpu, memory)
            for os_name in OSES:
                for arch in ARCHS:
                    name = f"{family}-{cpu}x-{arch}-{os_name}"
                    offerings = tuple(
                        Offering(zone=zone, capacity_type=ct,
                                 price=price * SPOT_DISCOUNT if ct == "spot" else price)
                        for zone in ZONES for ct in CAPACITY_TYPES)
                    out.append(InstanceType(
                        name=name,
                        labels={
                            wk.INSTANCE_TYPE: name, wk.ARCH: arch, wk.OS: os_name,
                            f"{LABEL_PREFIX}/instance-family": family,
                            f"{LABEL_PREFIX}/instance-size": str(cpu),
                            f"{LABEL_PREFIX}/instance-cpu": str(cpu),
                            f"{LABEL_PREFIX}/instance-memory": format_quantity("memory", memory),
                        },
                        capacity=Resources({"cpu": cpu * 1000, "memory": memory,
                                            "pods": min(16 * cpu, 1024),
                                            "ephemeral-storage": EPHEMERAL_STORAGE}),
                        overhead=Overhead(kube_reserved=Resources({"cpu": 100, "memory": 10 * 2**20})),
                        offerings=offerings,
                    ))
    return tuple(out)
