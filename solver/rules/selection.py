"""Node selection: nodeSelector and required node affinity against node labels, and taints.

Both are Kubernetes' own predicates from ``model``; this module applies them to pod classes and node
templates, caches the answers (many templates share the labels a class looks at), and phrases refusals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from model.requirements import Requirements
from model.taints import Taint, untolerated
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule, Why
from solver.templates import NodeTemplate

if TYPE_CHECKING:
    from solver.problem import Problem


class SelectionRule:
    """Does a class accept a node's labels and tolerate its taints? Memoised per projected label set."""

    def __init__(self) -> None:
        self._label_cache: dict[tuple[int, tuple[tuple[str, str | None], ...]], bool] = {}
        self._keys: dict[int, tuple[str, ...]] = {}
        self._projections: dict[tuple[str, ...], tuple[list[int], np.ndarray]] = {}
        self._projected_templates: Sequence[NodeTemplate] | None = None
        self._pool_index: np.ndarray | None = None
        self._pool_taints: list[list[Taint]] = []

    def _class_keys(self, pod_class: PodClass) -> tuple[str, ...]:
        keys = self._keys.get(pod_class.index)
        if keys is None:
            keys = tuple(sorted({k for reqs in pod_class.requirements for k in reqs.label_keys()}))
            self._keys[pod_class.index] = keys
        return keys

    def accepts_labels(self, pod_class: PodClass, labels: Mapping[str, str]) -> bool:
        projected = tuple((k, labels.get(k)) for k in self._class_keys(pod_class))
        cache_key = (pod_class.index, projected)
        hit = self._label_cache.get(cache_key)
        if hit is None:
            hit = pod_class.representative.accepts_labels(labels)
            self._label_cache[cache_key] = hit
        return hit

    def admits(self, pod_class: PodClass, labels: Mapping[str, str], taints: Sequence[Taint]) -> bool:
        return not untolerated(pod_class.tolerations, taints) and self.accepts_labels(pod_class, labels)

    def admits_all(self, pod_class: PodClass, templates: Sequence[NodeTemplate]) -> np.ndarray:
        """``admits`` for every template at once: taints once per NodePool, labels once per distinct
        projection onto the keys the class looks at (thousands of templates share a few)."""
        keys = self._class_keys(pod_class)
        groups = self._projections.get(keys)
        if groups is None or self._projected_templates is not templates:
            projections: dict[tuple[str | None, ...], int] = {}
            first: list[int] = []
            inverse = np.empty(len(templates), dtype=np.int64)
            for t, tmpl in enumerate(templates):
                projection = tuple(tmpl.labels.get(k) for k in keys)
                if projection not in projections:
                    projections[projection] = len(first)
                    first.append(t)
                inverse[t] = projections[projection]
            groups = (first, inverse)
            if self._projected_templates is not templates:
                self._projections = {}
                self._projected_templates = templates
                self._pool_index = None
            self._projections[keys] = groups
        first, inverse = groups
        labels_ok = np.array([self.accepts_labels(pod_class, templates[t].labels) for t in first], dtype=bool)
        if self._pool_index is None:
            names = sorted({tmpl.pool.name for tmpl in templates})
            self._pool_taints = [next(t.pool.taints for t in templates if t.pool.name == n) for n in names]
            self._pool_index = np.array([names.index(t.pool.name) for t in templates], dtype=np.int64)
        tolerated = np.array([not untolerated(pod_class.tolerations, taints) for taints in self._pool_taints],
                             dtype=bool)
        admitted: np.ndarray = labels_ok[inverse] & tolerated[self._pool_index]
        return admitted


def explain_requirements(alternatives: Sequence[Requirements], offered: Mapping[str, set[str]]) -> str:
    """Why no node label set satisfies the pod: the first failing requirement and what pools offer."""
    reasons = []
    for reqs in alternatives:
        for req in reqs.items:
            values = offered.get(req.key, set())
            if not any(req.allows_value(v) for v in values) and not (req.allows_value(None) and not values):
                allowed = ", ".join(sorted(values)) if values else "no value"
                reasons.append(f"requires {req.describe()}; NodePools allow {req.key} {allowed}")
                break
    return reasons[0] if reasons else ""


def explain_taints(pod_class: PodClass, taints: Sequence[Taint]) -> str:
    missing = untolerated(pod_class.tolerations, taints)
    return ", ".join(t.describe() for t in missing)


class NodeSelection(Rule):
    """nodeSelector, required node affinity and taints: which NodePool templates and nodes a class may use."""

    name = "node selection and taints"
    reads = ("NodePool",)

    def admit(self, batch: BatchContext, problem: Problem) -> None:
        rule = problem.rule
        for c in problem.classes:
            problem.template_ok[c.index] &= rule.admits_all(c, problem.templates)
            for e, cap in enumerate(problem.existing):
                if problem.existing_ok[c.index, e]:
                    problem.existing_ok[c.index, e] = rule.admits(c, cap.node.labels, cap.node.taints)

    def explain(self, why: Why) -> str:
        problem = why.problem
        if not problem.pools and not problem.existing:
            return "no NodePool in the snapshot and no existing node with room"
        if not problem.templates:
            return "the NodePools' requirements filter out every instance type in the catalog"
        if not why.label_ok:
            offered: dict[str, set[str]] = {}
            for tmpl in problem.templates:
                for key, value in tmpl.labels.items():
                    offered.setdefault(key, set()).add(value)
            reason = explain_requirements(why.pod_class.requirements, offered)
            return reason or "no NodePool offers nodes whose labels satisfy the pod's node selector / affinity"
        if not why.tolerated:
            pools = sorted({problem.templates[t].pool.name for t in why.label_ok})
            first = {p: next(t for t in why.label_ok if problem.templates[t].pool.name == p) for p in pools}
            taints = "; ".join(f"{p}: {explain_taints(why.pod_class, problem.templates[first[p]].pool.taints)}"
                               for p in pools)
            return f"does not tolerate the taints of the NodePools that match it ({taints})"
        return ""
