"""The batch as Kubernetes constrains it: a model every plan the verifier accepts fits, for lower bounds.

Each step below only removes constraints or widens what a pod may use, so every plan Kubernetes accepts (the
verifier's rules, evaluated on the final state; ``solver/verify/``) stays feasible and the relaxation's optimum
is never above the cost of such a plan:

1. Encodings stricter than Kubernetes (``Problem.conservative_by``) are undone. Zone pins chosen before packing
   (zone spread, zone self-affinity): a pinned class may use every offering (zone, capacity type) of a NodePool's
   instance type it was admitted to in one, where its own node requirements accept the offering's labels. A zone
   self-affinity group all in one zone, or any zone spread split, is one of the plans this allows. Per-node
   counters with a ``strict`` note and every hostname-spread counter (stricter than Kubernetes wherever a carrier
   does not match its own selector) are dropped.
2. Exact counters stay: required self anti-affinity on the hostname (owners take the whole capacity H, the pods
   the term selects 1 each), cross-workload anti-affinity counters without a strict note, host ports
   (capacity 1, charged by exactly the bindings that clash) — each keeps pods off one node exactly when
   Kubernetes does (``rules/counters.py``, ``rules/ports.py``).
3. Hostname topology spread (DoNotSchedule, maxSkew s) is left out altogether. What it certainly implies is
   weak: a carrier's node may hold s + floor matching pods, floor the fewest matches on an eligible node, and
   floor is certainly 0 only when more nodes are forced (by the counters of step 2) than there are matching pods.
   Then at most s self-matching carriers share a node — but the carriers, being matching pods themselves, are
   then fewer than the forced nodes and fit one to a node already paid for: on Karpenter's diverse mix such
   counters left the bound unchanged (219.490 $/h at 1,000 pods, with 7 more axes and 1.4 s more work).
4. Templates of one price and one capacity on every kept axis are one column admitting what any of them admits
   (the nodes a plan puts on them are nodes of that column); templates one node of which already breaks its
   NodePool's limits are no column (no plan may launch them); classes the relaxation no longer tells apart are
   one class.

``from_problem`` does this on the compiled problem when its stricter encodings are only pins on the zone and
per-node counters (Karpenter's diverse mix); otherwise ``recompiled`` compiles the pods the plan schedules with
the exact families only and applies the same steps.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from model.snapshot import Snapshot
from solver.problem import Problem, compile_problem
from solver.rules.antiaffinity import HostnameAntiAffinity
from solver.rules.base import Rule
from solver.rules.counters import HostnameSpread
from solver.rules.registry import RULES
from solver.rules.topology import DomainRules

#: counter prefixes whose counters are exact unless a note names them (``rules/counters.py``, ``rules/ports.py``)
EXACT_COUNTERS = ("repel", "repel-other", "hostPort")
#: stricter families whose stricter part ``from_problem`` can undo without recompiling: zone pins and per-node
#: counters (steps 1 and 3)
UNDOABLE = (DomainRules.name, HostnameSpread.name, HostnameAntiAffinity.name)
#: the families a recompiled relaxation keeps although stricter: only their counters are, and step 1 drops those
KEPT_FOR_EXACT_COUNTERS = (HostnameAntiAffinity.name,)


@dataclass
class Relaxation:
    """Classes (sizes per unit over ``axes``, demand in units) and node columns: new ones with a price, existing
    ones with a count and no price."""

    axes: tuple[str, ...]
    sizes: np.ndarray  # (K, R)
    demand: np.ndarray  # (K,)
    cost: np.ndarray  # (B,) micro-units
    capacity: np.ndarray  # (B, R)
    admits: np.ndarray  # (B, K)
    existing_capacity: np.ndarray  # (E, R)
    existing_admits: np.ndarray  # (E, K)
    existing_count: np.ndarray  # (E,)

    @property
    def holds(self) -> np.ndarray:
        """(B, K): the column admits the class and one unit of it fits."""
        out: np.ndarray = self.admits & _fits(self.capacity, self.sizes)
        return out

    @property
    def existing_holds(self) -> np.ndarray:
        out: np.ndarray = self.existing_admits & _fits(self.existing_capacity, self.sizes)
        return out


def _fits(capacity: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.zeros((len(capacity), len(sizes)), dtype=bool)
    if len(capacity) and len(sizes):
        out = np.all(capacity[:, None, :] >= sizes[None, :, :], axis=2)
    return out


def relaxes_in_place(problem: Problem) -> bool:
    """Can the compiled ``problem`` be relaxed without recompiling? Only when its stricter encodings are zone
    pins and per-node counters alone, and no pin on another key or on existing nodes needs telling apart."""
    if set(problem.conservative_by) - set(UNDOABLE):
        return False
    pinned = DomainRules.name in problem.conservative_by
    return not (pinned and (problem.existing or any(c.representative.rule_terms for c in problem.classes)))


def from_problem(problem: Problem, demand: np.ndarray) -> Relaxation | None:
    """The relaxation of the compiled ``problem`` for ``demand`` units per class, or None when it cannot be
    relaxed in place (``relaxes_in_place``; then ``recompiled``)."""
    if not relaxes_in_place(problem):
        return None
    return _relax(problem, demand, unpin=DomainRules.name in problem.conservative_by)


def recompiled(snapshot: Snapshot, scheduled: set[str], stricter: Collection[str] | None = None) -> Relaxation:
    """The relaxation compiled afresh for the ``scheduled`` pending pods, without the families stricter than
    Kubernetes (``stricter``, by name; every ``Rule.relaxable`` one when not known) but those whose only
    stricter part is per-node counters (step 1 drops those counters)."""
    pods = [p for p in snapshot.pending_pods() if p.key in scheduled]
    rules: list[Rule] = [r for r in RULES if not (r.relaxable and (stricter is None or r.name in stricter))
                         or r.name in KEPT_FOR_EXACT_COUNTERS]
    problem = compile_problem(snapshot, pods, rules=rules)
    return _relax(problem, problem.demand, unpin=False)


def _relax(problem: Problem, demand: np.ndarray, unpin: bool) -> Relaxation:
    kept = _kept_axes(problem)
    sizes = problem.sizes[:, kept]
    template_capacity = problem.template_alloc[:, kept]
    existing_capacity = problem.existing_free[:, kept]
    template_ok = _unpinned(problem) if unpin else problem.template_ok
    existing_ok = problem.existing_ok
    axes = tuple(problem.axes[j] for j in kept)
    # step 4: classes alike on every row merge; columns alike in price and capacity merge
    groups: dict[bytes, int] = {}
    members: list[int] = []
    merged_demand: list[int] = []
    for k in np.flatnonzero(demand > 0).tolist():
        key = sizes[k].tobytes() + template_ok[k].tobytes() + existing_ok[k].tobytes()
        at = groups.setdefault(key, len(members))
        if at == len(members):
            members.append(k)
            merged_demand.append(0)
        merged_demand[at] += int(demand[k])
    ks = np.array(members, dtype=np.int64)
    columns: dict[bytes, int] = {}
    costs: list[int] = []
    capacities: list[np.ndarray] = []
    admits: list[np.ndarray] = []
    for t, template in enumerate(problem.templates):
        if any(use > template.pool.limits_remaining.get(name, use) for name, use in template.limit_use.items()):
            continue  # one node of it already breaks its NodePool's limits
        row = template_ok[ks, t] if len(ks) else np.zeros(0, dtype=bool)
        if not row.any():
            continue
        key = template_capacity[t].tobytes() + str(template.price_micros).encode()
        at = columns.setdefault(key, len(costs))
        if at == len(costs):
            costs.append(template.price_micros)
            capacities.append(template_capacity[t])
            admits.append(row.copy())
        else:
            admits[at] |= row
    olds: dict[bytes, int] = {}
    old_capacity: list[np.ndarray] = []
    old_admits: list[np.ndarray] = []
    old_count: list[int] = []
    for e in range(len(problem.existing)):
        row = existing_ok[ks, e] if len(ks) else np.zeros(0, dtype=bool)
        if not row.any() or np.any(existing_capacity[e] < 0):
            continue
        key = existing_capacity[e].tobytes() + row.tobytes()
        at = olds.setdefault(key, len(old_count))
        if at == len(old_count):
            old_capacity.append(existing_capacity[e])
            old_admits.append(row)
            old_count.append(0)
        old_count[at] += 1
    width = len(axes)
    return Relaxation(
        axes=axes, sizes=sizes[ks].reshape(len(ks), width), demand=np.array(merged_demand, dtype=np.int64),
        cost=np.array(costs, dtype=np.float64), capacity=np.array(capacities, dtype=np.int64).reshape(-1, width),
        admits=np.array(admits, dtype=bool).reshape(len(costs), len(ks)),
        existing_capacity=np.array(old_capacity, dtype=np.int64).reshape(-1, width),
        existing_admits=np.array(old_admits, dtype=bool).reshape(len(old_count), len(ks)),
        existing_count=np.array(old_count, dtype=np.int64))


def _kept_axes(problem: Problem) -> list[int]:
    """Resource axes, and the counter axes that are exact (step 1–2): an exact kind no note names, or any
    counter of a family with no stricter encoding at all (hostname spread's never: it is replaced, step 3)."""
    strict = {note.split(" (", 1)[0] for notes in problem.conservative_by.values() for note in notes}
    owner = {prefix: rule.name for rule in RULES for prefix in rule.counter_names}
    kept = list(range(problem.resource_axes))
    for j in range(problem.resource_axes, len(problem.axes)):
        name = problem.axes[j]
        prefix = name.split(":", 1)[0]
        family = owner.get(prefix)
        if family is None or family == HostnameSpread.name or name in strict:
            continue
        if prefix in EXACT_COUNTERS or family not in problem.conservative_by:
            kept.append(j)
    return kept


def _unpinned(problem: Problem) -> np.ndarray:
    """Admission with zone pins undone (step 1): a pinned class may use every offering of a NodePool's instance
    type it may use in one offering, where its own node requirements (as submitted) accept the offering's
    labels. The pin was the only zone restriction the stricter family added; taints and every exact closure
    are the NodePool's and the instance type's, alike for all its offerings."""
    ok = problem.template_ok.copy()
    pinned = [c for c in problem.classes if c.representative.zone_pin]
    if not pinned or not problem.templates:
        return ok
    copies: dict[tuple[str, str], int] = {}
    group = np.array([copies.setdefault((t.pool.name, t.instance_type.name), len(copies))
                      for t in problem.templates], dtype=np.int64)
    rows = np.array([c.index for c in pinned], dtype=np.int64)
    any_copy = np.zeros((len(rows), len(copies)), dtype=bool)
    np.logical_or.at(any_copy.T, group, ok[rows].T)
    originals = {p.key: p for p in problem.snapshot.pending_pods()}
    accepted: dict[object, np.ndarray] = {}
    for i, c in enumerate(pinned):
        own = originals.get(c.representative.key, c.representative)
        requirements = own.node_requirements()
        if requirements not in accepted:
            accepted[requirements] = np.array([any(r.matches(t.labels) for r in requirements)
                                               for t in problem.templates], dtype=bool)
        ok[c.index] = any_copy[i, group] & accepted[requirements]
    return ok
