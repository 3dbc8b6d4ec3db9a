"""DisruptionPlan: the consolidation contract (``architecture.md``), camelCase JSON like the provisioning plan.

Replacement NodeClaims have exactly the provisioning plan's shape, so the controller launches both the same way.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from model.api import ApiModel
from model.plan import PlannedNodeClaim

#: Why a node is removed. Empty / Underutilized / Drifted are the budget reasons Karpenter defines;
#: Expired is forceful (not budgeted), as in Karpenter.
RemovalReason = Literal["Empty", "Underutilized", "Drifted", "Expired"]


class NodeRemoval(ApiModel):
    node: str
    node_pool: str
    reason: RemovalReason
    price: float
    evictions: int


class PodMove(ApiModel):
    pod: str
    source: str = Field(alias="from")
    to: str


class DisruptionCost(ApiModel):
    before: float
    after: float
    savings: float
    #: cheapest reachable cluster cost (a lower bound on ``after``), when one could be certified
    lower_bound: float | None = None
    #: what the Karpenter-style yardstick saves on the same snapshot, when it was run
    yardstick_savings: float | None = None


class Disruption(ApiModel):
    evictions: int
    #: summed Karpenter eviction cost (1 + deletion-cost/2^27 + priority/2^25, clamped to [-10, 10])
    cost: float


class BudgetUse(ApiModel):
    node_pool: str
    reasons: list[str]
    allowed: int
    used: int
    window: str = ""


class DisruptionSolverReport(ApiModel):
    status: Literal["OPTIMAL", "FEASIBLE", "NOTHING_TO_DO", "TIMEOUT"]
    wall_seconds: float
    #: CP-SAT's bound on the cost after the move, over the candidates and patterns the model considered
    objective_bound: float | None = None
    candidates: int = 0
    pod_classes: int = 0
    patterns: int = 0
    stages: dict[str, float] = {}
    notes: list[str] = []


class DisruptionPlan(ApiModel):
    kind: Literal["DisruptionPlan"] = "DisruptionPlan"
    remove: list[NodeRemoval] = []
    node_claims: list[PlannedNodeClaim] = []
    moves: list[PodMove] = []
    cost: DisruptionCost
    disruption: Disruption
    budgets: list[BudgetUse] = []
    solver: DisruptionSolverReport

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
