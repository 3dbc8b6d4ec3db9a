"""Dynamic Resource Allocation (``resource.k8s.io``): pods' ResourceClaims and the devices nodes publish.

Not modelled yet: a pod with claims is reported in the plan's notes (and, as the plan gate re-checks
nothing about devices, placed by its other rules only).
"""

from __future__ import annotations

from collections.abc import Sequence

from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule
from solver.rules.counters import NodeCounter


class ResourceClaims(Rule):
    name = "DRA resource claims"
    reads = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice")

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        return [f"{c.name}: DRA resource claims are not modelled" for c in classes
                if c.representative.resource_claims and not c.representative.rule_problem
                and not c.representative.volume_problem]
