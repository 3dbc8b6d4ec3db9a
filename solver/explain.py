"""Reasons for unschedulable pods, phrased so a person can act on them: each rule family
(``solver.rules.registry``) is asked in turn, the first answer wins."""

from __future__ import annotations

from model.pod import Pod
from solver.problem import Problem
from solver.rules.base import Why, counter_owner
from solver.rules.limits import NodePoolLimits
from solver.rules.registry import RULES


def explain(problem: Problem, pod: Pod) -> str:
    """The first rule that rules out every node, checked in the order a person would fix them."""
    c = next(cl.index for cl in problem.classes if any(p.key == pod.key for p in cl.pods))
    why = Why(problem, c)
    for rule in RULES:
        reason = rule.explain(why)
        if reason:
            return reason + (per_node_caps(why) if isinstance(rule, NodePoolLimits) else "")
    if not why.admitted:
        return "no node the NodePools can launch passes the pod's per-node rules"
    return "no room left within NodePool limits and existing capacity for this pod" + per_node_caps(why)


def per_node_caps(why: Why) -> str:
    """The per-node counters that cap how many of the class one node holds, named by their families."""
    problem, c = why.problem, why.c
    names = set()
    for i, axis in enumerate(problem.axes[problem.resource_axes:], start=problem.resource_axes):
        owner = counter_owner(RULES, axis)
        if owner is not None and problem.sizes[c, i]:
            names.add(owner + (f" {axis.split(':', 1)[1]}" if axis.startswith("hostPort:") else ""))
    return f" (and {', '.join(sorted(names))} caps how many of its pods share a node)" if names else ""
