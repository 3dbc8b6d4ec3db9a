"""Packing classes: merge pod classes that every solver stage treats identically.

``build_classes`` must keep pods apart whenever a rule reads something that differs between them (labels a
selector looks at, spread constraints, affinity terms). Once the rules are compiled into the problem's
matrices (resource and per-node counter sizes, admissible templates and existing nodes, preference scores)
and node requirements (zone and domain pins), many of those classes have become indistinguishable: the
hostname-spread pod whose selector picks ``my-label=b`` and the generic pod labelled ``my-label=b`` take the
same counter, the same pins and the same nodes. Karpenter's diverse benchmark has 3,247 classes at 20,000
pods but 697 packing classes, and column generation, the dive and the master all scale with the latter.

Merged classes keep every pod (the decode and the verifier see real pods); greedy makes the same choices,
because it reads nothing but these rows and the pods themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

import numpy as np

from model.pod import Pod
from solver.classes import PodClass, karpenter_order, karpenter_sorted
from solver.problem import Problem

#: ``Problem`` arrays with one row per class: merged classes must agree on each of them
PER_CLASS_ROWS = ("sizes", "template_ok", "existing_ok", "template_pref", "existing_pref", "template_heaviest",
                  "existing_heaviest")


def _signature(problem: Problem, c: PodClass) -> Hashable:
    """Everything a stage reads of a class: its matrix rows and what node selection and explanations take
    from its representative. Bundles stay alone (their unit is the whole group)."""
    if c.bundle:
        return ("bundle", c.index)
    pod = c.representative
    rows = []
    for name in PER_CLASS_ROWS:
        matrix = getattr(problem, name)
        if matrix.shape[0] == len(problem.classes):
            rows.append(matrix[c.index].tobytes())
    return (tuple(rows), c.requests, pod.node_requirements(), frozenset(pod.tolerations), pod.volume_problem,
            getattr(pod, "rule_problem", ""), getattr(pod, "zone_problem", ""))


def merge_classes(problem: Problem) -> Problem:
    """The same problem over packing classes (a new ``Problem``; the input is left as it is)."""
    groups: dict[Hashable, list[PodClass]] = {}
    for c in problem.classes:
        groups.setdefault(_signature(problem, c), []).append(c)
    if len(groups) == len(problem.classes):
        return problem
    merged: list[tuple[PodClass, list[Pod]]] = []
    for members in groups.values():
        pods = karpenter_sorted(p for m in members for p in m.pods)
        merged.append((members[0], pods))
    merged.sort(key=lambda item: karpenter_order(item[1][0]))
    classes = [PodClass(index=i, pods=tuple(pods), requests=first.requests, bundle=first.bundle)
               for i, (first, pods) in enumerate(merged)]
    keep = np.array([first.index for first, _ in merged], dtype=np.int64)
    updates: dict[str, object] = {"classes": classes}
    for name in PER_CLASS_ROWS:
        matrix = getattr(problem, name)
        if matrix.shape[0] == len(problem.classes):
            updates[name] = matrix[keep]
    return dataclasses.replace(problem, **updates)  # type: ignore[arg-type]
