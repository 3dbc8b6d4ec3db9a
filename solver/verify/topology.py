"""Topology spread (``whenUnsatisfiable: DoNotSchedule``) on the final state, for any topology key.

For a placed pod's constraint, the pods its selector counts (same namespace, ``matchLabelKeys`` merged in) are
counted per domain over the eligible final nodes: nodes carrying the key, whose labels the pod's node affinity
accepts unless ``nodeAffinityPolicy: Ignore``, whose taints it tolerates if ``nodeTaintsPolicy: Honor``. Its own
domain may hold at most ``maxSkew`` more than the least-filled eligible domain — than zero while fewer than
``minDomains`` domains are eligible. Its node must carry the key.

Counts depend only on (namespace, selector, key, node requirements, tolerations): computed once per such key.
An over-full domain gives up the excess: its last-placed planned pods that the selector counts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from model.affinity import LabelSelector, TopologySpreadConstraint
from model.pod import Pod
from model.requirements import Requirements
from model.taints import Toleration, untolerated
from solver.verify.context import Context
from solver.verify.violation import Violation

RULE = "topology spread"


@dataclass
class _Eligible:
    """The final nodes a (topology key, node requirements, tolerations) counts: rows of ``class_matrix``, and
    each one's domain."""

    rows: np.ndarray
    domain_of_row: np.ndarray
    domains: list[str]

    @cached_property
    def index(self) -> dict[str, int]:
        return {domain: i for i, domain in enumerate(self.domains)}


@dataclass
class _Counts:
    namespace: str
    selector: int
    #: matching pods per eligible domain
    counts: dict[str, int]
    #: the eligible nodes
    eligible: _Eligible

    @cached_property
    def floor(self) -> int:
        return min(self.counts.values(), default=0)


@dataclass
class _Skewed:
    """A placed pod whose constraint is over ``maxSkew`` in its domain."""

    key: str
    message: str
    counts: _Counts
    domain: str
    excess: int


def check(ctx: Context) -> Iterator[Violation]:
    pods = ctx.pods
    cache: dict[Hashable, _Counts] = {}
    eligible: dict[Hashable, _Eligible] = {}
    found: list[Violation | _Skewed] = []
    for key in sorted(k for k in ctx.where if pods[k].topology_spread):
        pod, state = pods[key], ctx.where[key]
        for spread in pod.topology_spread:
            selector = spread.selector_for(pod.labels)
            if spread.when_unsatisfiable != "DoNotSchedule" or selector is None:
                continue
            counts = _counts(ctx, pod, spread, selector, cache, eligible)
            domain = state.labels.get(spread.topology_key)
            if domain is None:
                found.append(Violation(RULE, f"node {state.name}: pod {key} topology spread on "
                                             f"{spread.topology_key}: the node has no such label (DoNotSchedule)",
                                       pods=ctx.pending_only(key)))
                continue
            own = counts.counts.get(domain, 0)
            few = spread.min_domains and len(counts.counts) < spread.min_domains
            floor = 0 if few else counts.floor
            if own - floor > spread.max_skew:
                found.append(_Skewed(key, f"node {state.name}: pod {key} topology spread on {spread.topology_key} has "
                                          f"skew {own - floor} > maxSkew {spread.max_skew}", counts, domain,
                                     own - floor - spread.max_skew))
    removals = _removals(ctx, [f for f in found if isinstance(f, _Skewed)])
    for f in found:
        if isinstance(f, _Skewed):
            yield Violation(RULE, f.message, pods=removals[(id(f.counts), f.domain, f.excess)])
        else:
            yield f


def _counts(ctx: Context, pod: Pod, spread: TopologySpreadConstraint, selector: LabelSelector,
            cache: dict[Hashable, _Counts], eligible: dict[Hashable, _Eligible]) -> _Counts:
    requirements = None if spread.node_affinity_policy == "Ignore" else pod.node_requirements()
    tolerations = pod.tolerations if spread.node_taints_policy == "Honor" else None
    at = (spread.topology_key, requirements, tolerations)
    key = (pod.namespace, selector, at)
    hit = cache.get(key)
    if hit is not None:
        return hit
    nodes = eligible.get(at)
    if nodes is None:
        nodes = eligible[at] = _eligible(ctx, spread.topology_key, requirements, tolerations)
    classes = ctx.classes
    sid = classes.selector(selector)
    matrix = ctx.class_matrix()
    matching = np.array([classes.matches(sid, pod.namespace, cid) for cid in range(matrix.shape[1])], dtype=bool)
    per_row = matrix[nodes.rows][:, matching].sum(axis=1)
    per_domain = np.zeros(len(nodes.domains), dtype=np.int64)
    np.add.at(per_domain, nodes.domain_of_row, per_row)
    out = cache[key] = _Counts(pod.namespace, sid, dict(zip(nodes.domains, per_domain.tolist(), strict=True)),
                               nodes)
    return out


def _eligible(ctx: Context, topology_key: str, requirements: tuple[Requirements, ...] | None,
              tolerations: tuple[Toleration, ...] | None) -> _Eligible:
    rows, domain_of_row = [], []
    domains: dict[str, int] = {}
    for row, state in enumerate(ctx.rows):
        domain = state.labels.get(topology_key)
        if domain is None or (requirements is not None and not any(r.matches(state.labels) for r in requirements)):
            continue
        if tolerations is not None and untolerated(tolerations, state.taints):
            continue
        rows.append(row)
        domain_of_row.append(domains.setdefault(domain, len(domains)))
    return _Eligible(np.array(rows, dtype=np.int64), np.array(domain_of_row, dtype=np.int64), list(domains))


def _removals(ctx: Context, skewed: list[_Skewed]) -> dict[tuple[int, str, int], tuple[str, ...]]:
    """Per over-full (counts, domain, excess): the ``excess`` last-placed planned pods in the domain that the
    selector counts (fewer there: those and the skewed pods themselves)."""
    out: dict[tuple[int, str, int], tuple[str, ...]] = {}
    classes = ctx.classes
    for s in skewed:
        group = (id(s.counts), s.domain, s.excess)
        if group in out:
            continue
        eligible = s.counts.eligible
        d = eligible.index[s.domain]
        in_domain = [ctx.rows[row] for row in eligible.rows[eligible.domain_of_row == d].tolist()]
        counted = [p.key for state in in_domain
                   for cid, members in ctx.groups(state).items()
                   if classes.matches(s.counts.selector, s.counts.namespace, cid)
                   for p in members if p.key in ctx.where and p.key in ctx.pending]
        counted.sort(key=lambda k: ctx.order.get(k, -1), reverse=True)
        if len(counted) >= s.excess:
            out[group] = tuple(counted[:s.excess])
        else:
            own = [x.key for x in skewed if (id(x.counts), x.domain, x.excess) == group and x.key in ctx.pending]
            out[group] = tuple(dict.fromkeys(counted + own))
    return out
