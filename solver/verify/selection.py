"""Node selection and taints: every placed pod's nodeSelector and required node affinity accept its node's
labels (``Pod.accepts_labels``), and it tolerates the node's NoSchedule / NoExecute taints (``untolerated``).

Pods are matched once per distinct (node requirements, tolerations) on a node: the pods of one workload share
them."""

from __future__ import annotations

from collections.abc import Hashable, Iterator

from model.pod import Pod
from model.taints import HARD_EFFECTS, untolerated
from solver.verify.context import Context, NodeState
from solver.verify.violation import Violation

RULE = "node selection"


def check(ctx: Context) -> Iterator[Violation]:
    for state in (*ctx.claims, *ctx.existing.values()):
        if state.placed and state.usable:
            yield from _node(state)


def _affinity_key(pod: Pod) -> Hashable:
    """What ``Pod.node_requirements`` reads: pods with equal keys accept the same nodes."""
    return (tuple(pod.node_selector.items()), pod.required_terms, pod.volume_terms, pod.rule_terms, pod.zone_pin,
            pod.volume_problem, pod.rule_problem)


def _node(state: NodeState) -> Iterator[Violation]:
    labels, where = state.labels, state.where
    taints = [t for t in state.taints if t.effect in HARD_EFFECTS]
    accepts: dict[Hashable, bool] = {}
    missing: dict[Hashable, str] = {}
    for pod in state.placed:
        key = _affinity_key(pod)
        ok = accepts.get(key)
        if ok is None:
            ok = accepts[key] = pod.accepts_labels(labels)
        if not ok:
            yield Violation(RULE, f"{where}: pod {pod.key} node selector / required node affinity rejects the "
                                  "node's labels", pods=(pod.key,))
        if taints:
            tolerations = pod.tolerations
            text = missing.get(tolerations)
            if text is None:
                text = missing[tolerations] = ", ".join(t.describe() for t in untolerated(tolerations, taints))
            if text:
                yield Violation(RULE, f"{where}: pod {pod.key} does not tolerate taint(s) {text}", pods=(pod.key,))
