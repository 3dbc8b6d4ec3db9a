"""PlanDiff: what a change to NodePools or workloads does to the nodes nodeplan would launch.

The JSON schema of ``nodeplan diff -o json`` (camelCase, like every nodeplan document)::

    {"kind": "PlanDiff", "apiVersion": "nodeplan.io/v1alpha1",
     "verdict": "unchanged|changed|cheaper|costlier|regression",
         # regression: some pod becomes unschedulable (whatever the cost); changed: same cost, other nodes
     "headline": "one sentence for a PR comment",
     "base" / "head": {"source", "input": "snapshot|plan|manifests", "catalog", "catalogFingerprint",
                       "status", "nodes", "pods", "scheduled", "unschedulable", "costPerHour",
                       "costPerMonth", "lowerBound", "gap", "greedy", "cpuUtilisation",
                       "memoryUtilisation"},
     "cost": {"perHour", "perMonth", "percent"},         # head − base; percent null when base costs 0
     "utilisation": {"cpu": {"base", "head", "delta"}, "memory": {...}},
     "nodes": [{"nodePool", "instanceType", "zone", "capacityType", "base", "head", "delta",
                "pricePerHour", "costDeltaPerHour"}],     # only groups whose count changed
     "newlyUnschedulable": [{"pod", "base", "head", "reason"}],
     "newlySchedulable":   [{"pod", "base", "head", "reason"}],
     "poolChanges":        [{"pod", "base", "head", "reason"}],
         # base/head: the pod's NodePool, "existing" (an existing node), "(absent)" (not pending on that
         # side: a new or deleted workload), or null (unschedulable; reason says why)
     "addedPods": ["ns/name"], "removedPods": ["ns/name"],          # pending on one side only
     "catalogMismatch": "why the two sides' prices are not comparable" | null,
     "gateFailures": ["the reason each failed --fail-on-* / --max-* gate gives"]}

Costs are $/h unless the name says month (730 hours). Utilisation is requested / allocatable over the
new nodes of a side (DaemonSet overhead included), null for a side that launches nothing.
"""

from __future__ import annotations

from typing import Literal

from model.api import ApiModel

HOURS_PER_MONTH = 730
EXISTING = "existing"
ABSENT = "(absent)"

InputKind = Literal["snapshot", "plan", "manifests"]
Verdict = Literal["unchanged", "changed", "cheaper", "costlier", "regression"]


class SideSummary(ApiModel):
    """One side of a diff, as solved (or as saved)."""

    source: str
    input: InputKind
    #: where the prices came from: "built-in KWOK", a catalog file, or "unknown" for a saved plan
    catalog: str
    #: sha256 prefix over every (type, zone, capacity type, price) of the catalog; null for saved plans
    catalog_fingerprint: str | None = None
    status: str
    nodes: int
    pods: int
    scheduled: int
    unschedulable: int
    cost_per_hour: float
    cost_per_month: float
    lower_bound: float
    gap: float | None = None
    greedy: float | None = None
    cpu_utilisation: float | None = None
    memory_utilisation: float | None = None


class CostDelta(ApiModel):
    per_hour: float
    per_month: float
    percent: float | None = None


class UtilisationChange(ApiModel):
    base: float | None = None
    head: float | None = None
    delta: float | None = None


class Utilisation(ApiModel):
    cpu: UtilisationChange
    memory: UtilisationChange


class NodeGroupChange(ApiModel):
    """Nodes of one (NodePool, instance type, zone, capacity type) whose count differs."""

    node_pool: str
    instance_type: str
    zone: str
    capacity_type: str
    base: int
    head: int
    delta: int
    price_per_hour: float
    cost_delta_per_hour: float


class PodChange(ApiModel):
    """A pod whose fate differs: ``base``/``head`` are its NodePool, ``existing``, or null (unschedulable)."""

    pod: str
    base: str | None = None
    head: str | None = None
    reason: str | None = None


class PlanDiff(ApiModel):
    kind: Literal["PlanDiff"] = "PlanDiff"
    api_version: Literal["nodeplan.io/v1alpha1"] = "nodeplan.io/v1alpha1"
    verdict: Verdict
    headline: str
    base: SideSummary
    head: SideSummary
    cost: CostDelta
    utilisation: Utilisation
    nodes: list[NodeGroupChange] = []
    newly_unschedulable: list[PodChange] = []
    newly_schedulable: list[PodChange] = []
    pool_changes: list[PodChange] = []
    added_pods: list[str] = []
    removed_pods: list[str] = []
    catalog_mismatch: str | None = None
    gate_failures: list[str] = []

    @property
    def nodes_added(self) -> int:
        return sum(c.delta for c in self.nodes if c.delta > 0)

    @property
    def nodes_removed(self) -> int:
        return -sum(c.delta for c in self.nodes if c.delta < 0)
