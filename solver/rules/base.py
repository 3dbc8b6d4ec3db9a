"""The interface every rule family implements, and what it compiles against.

A rule family is one Kubernetes placement rule (node selection, host ports, topology spread on hostname,
...) and one way of encoding it. ``compile_problem`` runs the registered families (``solver.rules.RULES``)
phase by phase, each family taking part only in the phases its rule needs:

1. ``constrain`` — pod-to-pod rules decided before packing: copies of the pending pods get node
   requirements (zone pins, ``rule_terms``) or a ``rule_problem`` that leaves them pending;
2. ``bundles`` — pods that must share one new node become one bundle class;
3. ``admit`` — close the (class, node) pairs the rule forbids in ``problem.template_ok`` / ``existing_ok``;
4. ``counters`` — per-node caps as extra knapsack dimensions (``counters.NodeCounter``);
5. ``score`` — soft preferences into the objective.

After solving, ``explain`` asks each family in registry order why a pod was left out (the first answer
wins, so the order is the order a person would fix things in), ``unmodelled`` what pods carry that the
family cannot model (reported as plan notes; the plan gate then leaves such pods pending rather than
place them invalidly), and ``conservative`` where the family's encoding is stricter than Kubernetes (a
proof of optimality then holds for that stricter model only).

The verifier is not part of this: it checks plans with ``model/`` predicates only, one module per
family under ``solver/verify/``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from model.pod import Pod
from model.snapshot import Snapshot
from model.taints import Taint

if TYPE_CHECKING:
    from solver.classes import PodClass
    from solver.problem import ExistingCapacity, Problem
    from solver.rules.counters import NodeCounter
    from solver.rules.preferences import PreferencePolicy
    from solver.templates import NodeTemplate


@dataclass
class BatchContext:
    """What the families read while one batch compiles, computed once."""

    snapshot: Snapshot
    templates: list[NodeTemplate]
    existing: list[ExistingCapacity]
    #: the pending pods as submitted, before any family constrained them (pod key → pod)
    submitted: Mapping[str, Pod]
    #: ``SolveOptions.preference_policy`` and ``preference_price`` ($/h per unit of weight, with Price), for
    #: families whose soft rules are encoded per node (``rules.hostpreferences``); None when the caller
    #: states no policy (consolidation, bounds): those families then encode nothing
    preference_policy: PreferencePolicy | None = None
    preference_price: float = 0.0
    #: what a family works out once per batch and reads in several phases (family name → its analysis)
    memo: dict[str, object] = field(default_factory=dict)

    @cached_property
    def namespaces(self) -> dict[str, dict[str, str]]:
        """Namespace name → labels (namespaceSelector reads them)."""
        return {ns.name: ns.labels for ns in self.snapshot.namespaces}

    @cached_property
    def bound(self) -> dict[str, list[Pod]]:
        """Node name → the non-terminal pods bound to it."""
        out: dict[str, list[Pod]] = {}
        for pod in self.snapshot.pods:
            if pod.node_name and not pod.terminal:
                out.setdefault(pod.node_name, []).append(pod)
        return out

    @cached_property
    def running(self) -> list[Pod]:
        return [p for pods in self.bound.values() for p in pods]

    @cached_property
    def placed(self) -> list[tuple[Pod, dict[str, str]]]:
        """Every running pod with its node's labels (in-flight NodeClaims' nodes included)."""
        from model.inflight import node_views
        from solver.rules.podaffinity import running_pods
        return running_pods(self.snapshot.pods, [v.node for v in node_views(self.snapshot)])

    def nodes(self) -> Sequence[tuple[Mapping[str, str], Sequence[Taint]]]:
        """(labels, taints) of every node the plan could use: templates, then existing nodes."""
        return ([(t.labels, t.pool.taints) for t in self.templates]
                + [(e.node.labels, list(e.node.taints)) for e in self.existing])


class Why:
    """One class's standing against the compiled problem, worked out once for ``explain``: which templates
    its labels accept, which of those it tolerates, which its rules admit, which are large enough."""

    def __init__(self, problem: Problem, c: int) -> None:
        self.problem = problem
        self.c = c

    @property
    def pod_class(self) -> PodClass:
        return self.problem.classes[self.c]

    @property
    def pod(self) -> Pod:
        return self.problem.classes[self.c].representative

    @cached_property
    def label_ok(self) -> list[int]:
        return [t for t in range(len(self.problem.templates)) if self.problem.selection_labels_ok(self.c, t)]

    @cached_property
    def tolerated(self) -> list[int]:
        from model.taints import untolerated
        return [t for t in self.label_ok if not untolerated(self.pod_class.tolerations,
                                                             self.problem.templates[t].pool.taints)]

    @cached_property
    def admitted(self) -> list[int]:
        """Templates every family's admission leaves open to the class."""
        return [t for t in self.tolerated if self.problem.template_ok[self.c, t]]

    @cached_property
    def fits(self) -> list[int]:
        """Admitted templates whose allocatable (counters included) holds one unit of the class."""
        sizes = self.problem.sizes[self.c]
        return [t for t in self.admitted if np.all(self.problem.template_alloc[t] >= sizes)]


class Rule:
    """A rule family. Every hook has a neutral default, so a family implements only its phases."""

    #: what the family is called in notes and reasons
    name: ClassVar[str] = ""
    #: the Kubernetes kinds it reads beyond Pods and Nodes (the controller's watch list follows them)
    reads: ClassVar[tuple[str, ...]] = ()
    #: counter axis prefix → the rule as a person names it (``explain`` lists per-node caps with it)
    counter_names: ClassVar[Mapping[str, str]] = {}
    #: may a lower bound drop the family? (pod-to-pod rules may: fewer rules can only make plans cheaper;
    #: node selection, resources and volumes stay, or the bound would be for pods that cannot run there)
    relaxable: ClassVar[bool] = False

    def constrain(self, batch: BatchContext, pods: list[Pod]) -> list[Pod]:
        """Copies of ``pods`` carrying what this rule decides before packing."""
        return pods

    def bundles(self, batch: BatchContext, pods: Sequence[Pod]) -> Mapping[str, Hashable]:
        """Pod key → bundle key, for pods that must share one new node."""
        return {}

    def admit(self, batch: BatchContext, problem: Problem) -> None:
        """Close, in place, the (class, template) and (class, existing node) pairs this rule forbids."""

    def counters(self, batch: BatchContext, classes: Sequence[PodClass]) -> Sequence[NodeCounter]:
        """Per-node caps this rule adds as knapsack dimensions."""
        return ()

    def score(self, batch: BatchContext, problem: Problem) -> None:
        """Soft preferences, written into the problem's preference matrices."""

    def explain(self, why: Why) -> str:
        """Why this rule leaves the class with no node, or "" when it does not."""
        return ""

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        """One note per rule instance pods carry that this family does not model."""
        return []

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        """One note per place this family's encoding is stricter than Kubernetes."""
        return []


def counter_owner(rules: Sequence[Rule], axis: str) -> str | None:
    """The rule a counter axis belongs to, as a person names it."""
    prefix = axis.split(":", 1)[0]
    return next((r.counter_names[prefix] for r in rules if prefix in r.counter_names), None)
