"""``nodeplan diff``: load two sides (snapshot, saved plan or manifests), solve them, and compare the plans.

A side is read as
- a **saved plan** when the file is one ``ProvisioningPlan`` document (``nodeplan solve --output-file``);
- **manifests** when it is a directory, or a file of workloads with nothing only a live cluster has
  (``helm template`` / ``kustomize build`` output; see ``model.manifests.looks_like_manifests``);
- a **snapshot** otherwise (``kubectl get -o yaml`` output);
- any of these as of a git revision: ``REV:PATH`` (``origin/main:deploy``), see ``reports.gitrev``.
Snapshots and manifests are solved on the fly with the side's catalog; the diff itself only reads the two
plans, so any two plans compare.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from model.errors import InputError
from model.instancetype import InstanceType
from model.manifests import load_input
from model.plan import ProvisioningPlan
from model.plandiff import (
    ABSENT,
    EXISTING,
    HOURS_PER_MONTH,
    CostDelta,
    InputKind,
    NodeGroupChange,
    PlanDiff,
    PodChange,
    SideSummary,
    Utilisation,
    UtilisationChange,
    Verdict,
)
from model.quantity import quantity_int
from model.snapshot import Snapshot, read_documents
from reports.gitrev import export, is_revision_spec, relocate
from solver.provision import SolveOptions, solve

SideName = Literal["base", "head"]
EPSILON = 5e-7  # prices carry 6 decimals; smaller differences are rounding


class SideError(InputError):
    """A side that fails to load: the message says which side, then file, object and field."""

    def __init__(self, side: SideName, err: InputError) -> None:
        super().__init__(err.message, file=err.file, obj=err.obj, field=err.field)
        self.side = side

    def __str__(self) -> str:
        return f"{self.side}: {super().__str__()}"


@dataclass(frozen=True)
class Catalog:
    """An instance catalog and how to name it in a report."""

    label: str
    instance_types: tuple[InstanceType, ...]

    @property
    def fingerprint(self) -> str:
        rows = sorted((it.name, o.zone, o.capacity_type, f"{o.price:.6f}", o.available,
                       tuple(sorted(it.capacity.items())))
                      for it in self.instance_types for o in it.offerings)
        return hashlib.sha256(repr(rows).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Side:
    name: SideName
    source: str
    input: InputKind
    plan: ProvisioningPlan
    catalog: Catalog | None  # None: a saved plan, whose catalog is unknown
    snapshot: Snapshot | None = None
    warnings: tuple[str, ...] = ()


def _plan_from(doc: object, path: Path) -> ProvisioningPlan:
    """A saved plan, refused unless every figure the diff reads is finite and every quantity parses."""
    try:
        plan = ProvisioningPlan.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        raise InputError(first["msg"], file=str(path), obj="ProvisioningPlan",
                         field=".".join(str(p) for p in first["loc"])) from None
    figures = [(f"nodeClaims[{i}].price", c.price) for i, c in enumerate(plan.node_claims)]
    figures += [("cost.total", plan.cost.total), ("cost.lowerBound", plan.cost.lower_bound)]
    for field, value in figures:
        if not math.isfinite(value):
            raise InputError(f"{value} is not a finite $/h figure", file=str(path), obj="ProvisioningPlan",
                             field=field)
    for i, claim in enumerate(plan.node_claims):
        for part in ("requests", "allocatable"):
            for resource, text in getattr(claim, part).items():
                try:
                    quantity_int(resource, text)
                except InputError as err:
                    raise err.located(file=str(path), obj=f"ProvisioningPlan nodeClaim {claim.name}",
                                      field_prefix=f"nodeClaims[{i}].{part}.{resource}") from None
    return plan


def load_side(name: SideName, path: Path, catalog: Catalog, options: SolveOptions) -> Side:
    """Read, and unless it is a saved plan solve, one side; any InputError becomes a SideError.

    ``REV:PATH`` (when no such file exists) reads PATH as of git revision REV (``reports.gitrev``).
    """
    spec = str(path)
    if not is_revision_spec(spec):
        try:
            return _load_local(name, path, catalog, options)
        except InputError as err:
            raise SideError(name, err) from None
    with tempfile.TemporaryDirectory(prefix=f"nodeplan-{name}-") as tmp:
        local = Path(tmp)
        try:
            local = export(spec, Path(tmp))
            side = _load_local(name, local, catalog, options)
        except InputError as err:
            raise SideError(name, relocate(err, local, spec)) from None
    prefix = str(local)
    return dataclasses.replace(side, source=spec, snapshot=None,
                               warnings=tuple(w.replace(prefix, spec) for w in side.warnings))


def _load_local(name: SideName, path: Path, catalog: Catalog, options: SolveOptions) -> Side:
    docs = None if path.is_dir() else read_documents(path)
    if docs and len(docs) == 1 and isinstance(docs[0], dict) and docs[0].get("kind") == "ProvisioningPlan":
        return Side(name=name, source=str(path), input="plan", plan=_plan_from(docs[0], path), catalog=None)
    snap, loaded_as = load_input(path, docs)
    kind: InputKind = "manifests" if loaded_as == "manifests" else "snapshot"
    snap = snap.with_catalog(catalog.instance_types)
    plan = solve(snap, options).plan
    return Side(name=name, source=str(path), input=kind, plan=plan, catalog=catalog, snapshot=snap,
                warnings=snap.warnings)


def placements(plan: ProvisioningPlan) -> dict[str, str | None]:
    """Each pending pod's NodePool (``existing`` for an existing node, None if unschedulable)."""
    out: dict[str, str | None] = {}
    for claim in plan.node_claims:
        for pod in claim.pods:
            out[pod] = claim.node_pool
    for node in plan.existing_nodes:
        for pod in node.pods:
            out[pod] = EXISTING
    for u in plan.unschedulable:
        out[u.pod] = None
    return out


def utilisation(plan: ProvisioningPlan, resource: str) -> float | None:
    """Requested over allocatable across the plan's new nodes (DaemonSet overhead counts as requested)."""
    alloc = sum(quantity_int(resource, c.allocatable.get(resource, "0")) for c in plan.node_claims)
    used = sum(quantity_int(resource, c.requests.get(resource, "0")) for c in plan.node_claims)
    return used / alloc if alloc else None


def summarise(side: Side) -> SideSummary:
    plan = side.plan
    where = placements(plan)
    cost = plan.cost
    gap = cost.gap
    if gap is None and cost.lower_bound > 0:
        gap = cost.total / cost.lower_bound - 1
    return SideSummary(
        source=side.source, input=side.input,
        catalog=side.catalog.label if side.catalog else "unknown (saved plan)",
        catalog_fingerprint=side.catalog.fingerprint if side.catalog else None,
        status=plan.solver.status, nodes=len(plan.node_claims), pods=len(where),
        scheduled=sum(1 for v in where.values() if v is not None), unschedulable=len(plan.unschedulable),
        cost_per_hour=round(cost.total, 6), cost_per_month=round(cost.total * HOURS_PER_MONTH, 2),
        lower_bound=round(cost.lower_bound, 6), gap=None if gap is None else round(gap, 6),
        greedy=None if cost.greedy is None else round(cost.greedy, 6),
        cpu_utilisation=_round(utilisation(plan, "cpu")), memory_utilisation=_round(utilisation(plan, "memory")),
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _change(base: float | None, head: float | None) -> UtilisationChange:
    delta = None if base is None or head is None else round(head - base, 4)
    return UtilisationChange(base=base, head=head, delta=delta)


def catalog_mismatch(base: Side, head: Side) -> str | None:
    """Why the two sides' costs do not come from the same price list, or None when they (seem to) do."""
    if base.catalog and head.catalog and base.catalog.fingerprint != head.catalog.fingerprint:
        return (f"base was solved with catalog {base.catalog.label} ({base.catalog.fingerprint}), head with "
                f"{head.catalog.label} ({head.catalog.fingerprint}): cost differences include price-list "
                f"differences")
    prices: dict[tuple[str, str, str], float] = {}
    for claim in base.plan.node_claims:
        prices[(claim.instance_type, claim.zone, claim.capacity_type)] = claim.price
    for claim in head.plan.node_claims:
        key = (claim.instance_type, claim.zone, claim.capacity_type)
        if key in prices and abs(prices[key] - claim.price) > EPSILON:
            return (f"the sides price the same offering differently ({key[0]} {key[1]} {key[2]}: "
                    f"{prices[key]:.4f} $/h in base, {claim.price:.4f} $/h in head): they were solved with "
                    f"different catalogs")
    return None  # same catalog, or a saved plan (catalog unknown) no shared offering contradicts


GroupKey = tuple[str, str, str, str]  # NodePool, instance type, zone, capacity type


def _groups(plan: ProvisioningPlan) -> tuple[Counter[GroupKey], dict[GroupKey, float]]:
    counts: Counter[GroupKey] = Counter()
    price: dict[GroupKey, float] = {}
    for c in plan.node_claims:
        key = (c.node_pool, c.instance_type, c.zone, c.capacity_type)
        counts[key] += 1
        price[key] = c.price
    return counts, price


def node_changes(base: ProvisioningPlan, head: ProvisioningPlan) -> list[NodeGroupChange]:
    base_counts, base_price = _groups(base)
    head_counts, head_price = _groups(head)
    out = []
    for key in sorted(set(base_counts) | set(head_counts)):
        b, h = base_counts[key], head_counts[key]
        if b == h:
            continue
        cost = h * head_price.get(key, 0.0) - b * base_price.get(key, 0.0)
        out.append(NodeGroupChange(node_pool=key[0], instance_type=key[1], zone=key[2], capacity_type=key[3],
                                   base=b, head=h, delta=h - b,
                                   price_per_hour=round(head_price.get(key, base_price.get(key, 0.0)), 6),
                                   cost_delta_per_hour=round(cost, 6)))
    out.sort(key=lambda c: (c.delta > 0, c.node_pool, c.instance_type, c.zone, c.capacity_type))
    return out


def _money(value: float) -> str:
    return f"{value:+.4f} $/h, {value * HOURS_PER_MONTH:+.2f} $/month"


def _verdict(cost: CostDelta, nodes: Sequence[NodeGroupChange], newly_unschedulable: int,
             moved: int) -> Verdict:
    if newly_unschedulable:
        return "regression"
    if cost.per_hour > EPSILON:
        return "costlier"
    if cost.per_hour < -EPSILON:
        return "cheaper"
    return "changed" if nodes or moved else "unchanged"


def _headline(verdict: Verdict, cost: CostDelta, added: int, removed: int, unschedulable: int,
              moved: int) -> str:
    percent = f", {cost.percent:+.1f} %" if cost.percent is not None else ""
    parts = [f"cost {cost.per_hour:+.4f} $/h ({cost.per_month:+.2f} $/month{percent})"]
    if added or removed:
        parts.append(f"{added} node(s) added, {removed} removed")
    if unschedulable:
        parts.append(f"{unschedulable} pod(s) become unschedulable")
    if moved:
        parts.append(f"{moved} pod(s) change NodePool")
    title = {"unchanged": "No change", "changed": "Same cost, different nodes", "cheaper": "Cheaper",
             "costlier": "Costlier", "regression": "Regression"}[verdict]
    return f"{title}: " + "; ".join(parts) + "."


def compute_diff(base: Side, head: Side) -> PlanDiff:
    """Compare two sides' plans (pure: no solving, no I/O)."""
    b_sum, h_sum = summarise(base), summarise(head)
    per_hour = round(head.plan.cost.total - base.plan.cost.total, 6)
    percent = None
    if base.plan.cost.total > 0:
        percent = round(100 * per_hour / base.plan.cost.total, 2)
    cost = CostDelta(per_hour=per_hour, per_month=round(per_hour * HOURS_PER_MONTH, 2), percent=percent)
    b_where, h_where = placements(base.plan), placements(head.plan)
    reasons = {u.pod: u.reason for u in head.plan.unschedulable}
    base_reasons = {u.pod: u.reason for u in base.plan.unschedulable}
    newly_unschedulable, newly_schedulable, moved = [], [], []
    for pod in sorted(set(b_where) | set(h_where)):
        b = b_where.get(pod, ABSENT)
        h = h_where.get(pod, ABSENT)
        if h is None and b is not None:
            newly_unschedulable.append(PodChange(pod=pod, base=b, head=None, reason=reasons[pod]))
        elif b is None and h is not None and h != ABSENT:
            newly_schedulable.append(PodChange(pod=pod, base=None, head=h, reason=base_reasons[pod]))
        elif b not in (None, ABSENT) and h not in (None, ABSENT) and b != h:
            moved.append(PodChange(pod=pod, base=b, head=h))
    nodes = node_changes(base.plan, head.plan)
    added = sum(c.delta for c in nodes if c.delta > 0)
    removed = -sum(c.delta for c in nodes if c.delta < 0)
    verdict = _verdict(cost, nodes, len(newly_unschedulable), len(moved))
    return PlanDiff(
        verdict=verdict,
        headline=_headline(verdict, cost, added, removed, len(newly_unschedulable), len(moved)),
        base=b_sum, head=h_sum, cost=cost,
        utilisation=Utilisation(cpu=_change(b_sum.cpu_utilisation, h_sum.cpu_utilisation),
                                memory=_change(b_sum.memory_utilisation, h_sum.memory_utilisation)),
        nodes=nodes, newly_unschedulable=newly_unschedulable, newly_schedulable=newly_schedulable,
        pool_changes=moved,
        added_pods=sorted(set(h_where) - set(b_where)), removed_pods=sorted(set(b_where) - set(h_where)),
        catalog_mismatch=catalog_mismatch(base, head),
    )


def gate_failures(diff: PlanDiff, *, fail_on_unschedulable: bool, max_cost_increase: float | None) -> list[str]:
    """One line per failed gate, saying why."""
    out = []
    if fail_on_unschedulable and diff.newly_unschedulable:
        first = diff.newly_unschedulable[0]
        more = f" and {len(diff.newly_unschedulable) - 1} more" if len(diff.newly_unschedulable) > 1 else ""
        out.append(f"{len(diff.newly_unschedulable)} pod(s) become unschedulable: {first.pod} "
                   f"({first.reason}){more}")
    if max_cost_increase is not None and diff.cost.per_hour > EPSILON:
        if diff.cost.percent is None:
            out.append(f"cost rises from 0 to {diff.head.cost_per_hour:.4f} $/h "
                       f"(limit +{max_cost_increase:g} %)")
        elif diff.cost.percent > max_cost_increase:
            out.append(f"cost rises {diff.cost.percent:+.2f} % ({_money(diff.cost.per_hour)}), above the "
                       f"limit of +{max_cost_increase:g} %")
    return out
