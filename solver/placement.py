"""A placement: the solver-internal answer (which pods go on which new or existing node)."""

from __future__ import annotations

from dataclasses import dataclass, field

from model.pod import Pod
from solver.problem import Problem


@dataclass
class NewNode:
    template: int
    pods: list[Pod] = field(default_factory=list)


@dataclass
class Placement:
    new_nodes: list[NewNode] = field(default_factory=list)
    existing: dict[int, list[Pod]] = field(default_factory=dict)
    unschedulable: list[Pod] = field(default_factory=list)

    def cost_micros(self, problem: Problem) -> int:
        return sum(problem.templates[n.template].price_micros for n in self.new_nodes)

    def scheduled_count(self) -> int:
        return sum(len(n.pods) for n in self.new_nodes) + sum(len(p) for p in self.existing.values())
