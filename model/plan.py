"""Plans: the solver's output contract (``architecture.md``), camelCase JSON as Kubernetes writes it."""

from __future__ import annotations

from typing import Any, Literal

from model.api import ApiModel


class DeviceAllocation(ApiModel):
    """One device a pod's claim gets on its node, as the allocator would pick it (DRA)."""

    pod: str
    claim: str
    request: str
    driver: str
    pool: str
    device: str


class PlannedNodeClaim(ApiModel):
    name: str
    node_pool: str
    instance_type: str
    zone: str
    capacity_type: str
    price: float
    pods: list[str]
    labels: dict[str, str] = {}
    requests: dict[str, str] = {}
    allocatable: dict[str, str] = {}
    #: DRA: the devices its pods' claims are allocated, in plan order (None, and left out of the JSON, when no
    #: pod of the snapshot has a claim)
    devices: list[DeviceAllocation] | None = None


class ExistingNodeAssignment(ApiModel):
    name: str
    pods: list[str]
    devices: list[DeviceAllocation] | None = None


class UnschedulablePod(ApiModel):
    pod: str
    reason: str


class PlanCost(ApiModel):
    total: float
    lower_bound: float
    gap: float | None = None
    greedy: float | None = None
    lp_bound: float | None = None


class SolverReport(ApiModel):
    status: Literal["OPTIMAL", "FEASIBLE", "GREEDY", "EMPTY"]
    wall_seconds: float
    seed: int = 0
    time_limit_seconds: float = 0.0
    pod_classes: int = 0
    templates: int = 0
    patterns: int = 0
    bound_method: str = ""
    #: what OPTIMAL was proven for: "kubernetes", or "conservative model" when some rule's encoding is
    #: stricter than Kubernetes (the status is then FEASIBLE and ``conservative`` says where)
    optimality: str | None = None
    conservative: list[str] = []
    #: pods the plan gate took out because the verifier rejected where they were placed
    rejected_pods: int = 0
    greedy_seconds: float = 0.0
    stages: dict[str, float] = {}
    #: each distinct note once; a repeated one ends with ``(×N)``
    notes: list[str] = []


class ProvisioningPlan(ApiModel):
    kind: Literal["ProvisioningPlan"] = "ProvisioningPlan"
    node_claims: list[PlannedNodeClaim] = []
    existing_nodes: list[ExistingNodeAssignment] = []
    unschedulable: list[UnschedulablePod] = []
    cost: PlanCost
    solver: SolverReport

    def to_json_dict(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", by_alias=True)
        for node in (*out.get("nodeClaims", ()), *out.get("existingNodes", ())):
            if node.get("devices") is None:
                node.pop("devices", None)
        return out
