"""Reasons for unschedulable pods, phrased so a person can act on them."""

from __future__ import annotations

import numpy as np

from model.labels import HOSTNAME, ZONE
from model.pod import Pod
from model.resources import Resources
from model.taints import untolerated
from solver.problem import Problem
from solver.rules import minvalues
from solver.rules.selection import explain_requirements, explain_taints


def _noun(key: str) -> str:
    return {ZONE: "zones", HOSTNAME: "nodes"}.get(key, f"{key} domains")


def _pod_rule_reason(problem: Problem, pod: Pod) -> str:
    """A pod-to-pod rule (``pod.rule_terms``) that closes every node the pod's own selection leaves open:
    which rule, which pods, which domains."""
    if not pod.rule_terms:
        return ""
    plain = pod.model_copy(update={"rule_terms": (), "rule_reasons": ()})
    new = [t.labels for t in problem.templates if plain.accepts_labels(t.labels)]
    old = [(e.name, e.node.labels) for e in problem.existing if plain.accepts_labels(e.node.labels)]
    for group, reason in zip(pod.rule_terms, pod.rule_reasons, strict=False):
        req = group[0].items[0]
        if any(alt.matches(labels) for alt in group for labels in new):
            continue
        noun = _noun(req.key)
        if req.operator == "NotIn":
            if any(alt.matches(labels) for alt in group for _, labels in old):
                continue
            open_domains = sorted({labels[req.key] for labels in new + [lb for _, lb in old] if req.key in labels})
            return (f"{reason}: matching pods already occupy all {len(open_domains)} {noun} it may use "
                    f"({', '.join(open_domains)})")
        hosts = [name for name, labels in old if any(alt.matches(labels) for alt in group)]
        if hosts:
            return f"{reason} confines it to {noun} {', '.join(req.values)}: none of those has room for it"
        return (f"{reason} confines it to {noun} {', '.join(req.values)}, where no node it may use "
                "can be launched")
    return ""


def _min_values_reason(problem: Problem, c: int, tolerated: list[int]) -> str:
    """Templates that would hold the class but minValues closed (``rules.minvalues``)."""
    closed = {(problem.templates[t].pool.name, key, m) for t in tolerated if not problem.template_ok[c, t]
              and np.all(problem.template_alloc[t] >= problem.sizes[c])
              for key, m in minvalues.strict_keys(problem.templates[t].pool.nodepool)}
    return "; ".join(f"NodePool {pool} requires minValues {m} distinct {key} among the instance types that "
                     "could hold its NodeClaim (Strict), and fewer of those are large enough for it"
                     for pool, key, m in sorted(closed))


def explain(problem: Problem, pod: Pod) -> str:
    """The first rule that rules out every node, checked in the order a person would fix them."""
    c = next(cl.index for cl in problem.classes if any(p.key == pod.key for p in cl.pods))
    pod_class = problem.classes[c]
    representative = pod_class.representative
    if representative.volume_problem or representative.rule_problem:
        return representative.volume_problem or representative.rule_problem
    if not problem.pools and not problem.existing:
        return "no NodePool in the snapshot and no existing node with room"
    if not problem.templates and not problem.existing:
        return "the NodePools' requirements filter out every instance type in the catalog"
    rule_reason = _pod_rule_reason(problem, representative)
    if rule_reason:
        return rule_reason
    if not problem.templates:
        return "the NodePools' requirements filter out every instance type in the catalog"
    label_ok = [t for t, tmpl in enumerate(problem.templates) if problem.selection_labels_ok(c, t)]
    if not label_ok:
        offered: dict[str, set[str]] = {}
        for tmpl in problem.templates:
            for key, value in tmpl.labels.items():
                offered.setdefault(key, set()).add(value)
        reason = explain_requirements(pod_class.requirements, offered)
        return reason or "no NodePool offers nodes whose labels satisfy the pod's node selector / affinity"
    tolerated = [t for t in label_ok if not untolerated(pod_class.tolerations, problem.templates[t].pool.taints)]
    if not tolerated:
        pools = sorted({problem.templates[t].pool.name for t in label_ok})
        taints = "; ".join(f"{p}: {explain_taints(pod_class, problem.templates[t].pool.taints)}"
                           for p in pools for t in [next(t for t in label_ok
                                                        if problem.templates[t].pool.name == p)])
        return f"does not tolerate the taints of the NodePools that match it ({taints})"
    taint_ok = [t for t in tolerated if problem.template_ok[c, t]]
    if not taint_ok and _min_values_reason(problem, c, tolerated):
        return _min_values_reason(problem, c, tolerated)
    if not taint_ok:
        if representative.pod_affinity:
            return ("required pod affinity on kubernetes.io/hostname: it must join a node already running its "
                    "group, and none of those has room")
        return "no node the NodePools can launch passes the pod's per-node rules"
    counters = [i for i, axis in enumerate(problem.axes) if axis.startswith("hostPort:") and problem.sizes[c, i]]
    if counters and not any(np.all(problem.template_alloc[t, counters] >= 1) for t in taint_ok):
        ports = ", ".join(problem.axes[i].split(":", 1)[1] for i in counters)
        return f"host port(s) {ports} are already bound by DaemonSets on every node the NodePools can launch"
    fits = [t for t in taint_ok if np.all(problem.template_alloc[t] >= problem.sizes[c])]
    if not fits and _min_values_reason(problem, c, tolerated):
        return _min_values_reason(problem, c, tolerated)
    if not fits and pod_class.bundle:
        return (f"required pod affinity on kubernetes.io/hostname puts all {pod_class.unit} pods of its group on one "
                "node, and no instance type the NodePools allow holds them all")
    if not fits:
        biggest = Resources({a: int(problem.template_alloc[taint_ok, i].max()) for i, a in enumerate(problem.axes)})
        short = pod_class.requests.exceeding(biggest)
        return (f"requests {pod_class.requests.format()} but the largest compatible instance type leaves "
                f"at most {', '.join(f'{r}={biggest.to_quantities().get(r, 0)}' for r in short)} "
                "after DaemonSet overhead")
    pools = sorted({problem.templates[t].pool.name for t in fits})
    limited = [p for p in problem.pools if p.name in pools and p.limits_remaining]
    if limited and len(limited) == len(pools):
        text = "; ".join(f"NodePool {p.name} limit "
                         + ", ".join(f"{k}={v}" for k, v in sorted(p.nodepool.limits.to_quantities().items()))
                         + " reached" for p in limited)
        return text + _per_node_rules(problem, c)
    return "no room left within NodePool limits and existing capacity for this pod" + _per_node_rules(problem, c)


_COUNTER_RULES = {"repel": f"required pod anti-affinity on {HOSTNAME}",
                  "repel-other": f"required pod anti-affinity between workloads on {HOSTNAME}",
                  "spread": f"topology spread on {HOSTNAME}", "hostPort": "host port"}


def _per_node_rules(problem: Problem, c: int) -> str:
    """The per-node counters (``rules.counters``) that cap how many of the class one node holds."""
    rules = sorted({_COUNTER_RULES[axis.split(":", 1)[0]] + (f" {axis.split(':', 1)[1]}" if axis.startswith(
        "hostPort:") else "") for i, axis in enumerate(problem.axes)
        if axis.split(":", 1)[0] in _COUNTER_RULES and problem.sizes[c, i]})
    return f" (and {', '.join(rules)} caps how many of its pods share a node)" if rules else ""
