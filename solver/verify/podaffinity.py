"""Required pod affinity and anti-affinity, on any topology key, in both directions, on the final state.

A domain is every final node sharing the key's value; what counts is the pods bound there and the plan's.

- Hostname anti-affinity, per node: no two pods on a node (the plan's, the bound ones and the daemon pods that
  will run there) where either one's hostname term selects the other. The later pod of the pair comes off.
- Anti-affinity on other keys: no placed pod's term selects another pod in its domain (the later of two
  placed pods comes off; against a running pod, the placed one), and no running pod's term selects a placed
  pod in the running pod's domain (the placed one comes off).
- Affinity: each term of a placed pod selects another pod in its domain; the node must carry the key. The
  first of a self-affine group may go anywhere: when its term selects itself and no other pod anywhere.

Selectors are matched once per (term, label class) pair (``LabelClasses``), not per pod pair.
"""

from __future__ import annotations

from collections.abc import Iterator

from model.labels import HOSTNAME
from model.pod import Pod
from solver.verify.context import Context, NodeState
from solver.verify.violation import Violation

RULE = "pod affinity"


def check(ctx: Context) -> Iterator[Violation]:
    for state in (*ctx.claims, *ctx.existing.values()):
        if state.placed and state.usable:
            yield from _hostname_pairs(ctx, state)
    pods = ctx.pods
    for key in sorted(k for k in ctx.where if pods[k].pod_anti_affinity or pods[k].pod_affinity):
        yield from _anti_affinity(ctx, key, pods[key])
        yield from _affinity(ctx, key, pods[key])
    yield from _running_anti_affinity(ctx)


def _host_terms(pod: Pod) -> list[int]:
    return [i for i, term in enumerate(pod.pod_anti_affinity) if term.topology_key == HOSTNAME]


def _hostname_pairs(ctx: Context, state: NodeState) -> Iterator[Violation]:
    resident = state.resident
    everyone = resident + state.placed
    owners = [(i, pod) for i, pod in enumerate(everyone) if pod.pod_anti_affinity and _host_terms(pod)]
    if not owners:
        return
    classes = ctx.classes
    groups: dict[int, list[int]] = {}
    for i, pod in enumerate(everyone):
        groups.setdefault(classes.of(pod), []).append(i)
    pairs: set[tuple[int, int]] = set()
    for i, owner in owners:
        own = classes.of(owner)
        for t in _host_terms(owner):
            term = classes.term(owner.pod_anti_affinity[t])
            for cid, positions in groups.items():
                if classes.selects(term, own, cid):
                    pairs.update((max(i, j), min(i, j)) for j in positions if j != i and max(i, j) >= len(resident))
    for later, earlier in sorted(pairs):
        pod, other = everyone[later], everyone[earlier]
        yield Violation(RULE, f"{state.where}: pods {pod.key} and {other.key} violate required pod anti-affinity "
                              "on the node", pods=ctx.pending_only(pod.key))


def _anti_affinity(ctx: Context, key: str, pod: Pod) -> Iterator[Violation]:
    state = ctx.where[key]
    classes = ctx.classes
    own = classes.of(pod)
    for term in pod.pod_anti_affinity:
        domain = state.labels.get(term.topology_key)
        if domain is None or term.topology_key == HOSTNAME:  # hostname: per node, ``_hostname_pairs``
            continue
        tid = classes.term(term)
        for cid, members in ctx.domains(term.topology_key).get(domain, {}).items():
            if not classes.selects(tid, own, cid):
                continue
            for other in members:
                if other.key != key:
                    culprit = ctx.later(key, other.key) if other.key in ctx.where else key
                    yield Violation(RULE, f"node {state.name}: pod {key} anti-affinity on {term.topology_key} is "
                                          f"violated by {other.key}", pods=ctx.pending_only(culprit))


def _affinity(ctx: Context, key: str, pod: Pod) -> Iterator[Violation]:
    state = ctx.where[key]
    classes = ctx.classes
    own = classes.of(pod)
    for term in pod.pod_affinity:
        domain = state.labels.get(term.topology_key)
        if domain is None:
            yield Violation(RULE, f"node {state.name}: pod {key} affinity on {term.topology_key}: the node has no "
                                  "such label", pods=ctx.pending_only(key))
            continue
        tid = classes.term(term)
        if any(classes.selects(tid, own, cid) and any(o.key != key for o in members)
               for cid, members in ctx.domains(term.topology_key).get(domain, {}).items()):
            continue
        if classes.selects(tid, own, own) and not _selects_another(ctx, tid, own):
            continue  # the first of a self-affine group may go anywhere
        yield Violation(RULE, f"node {state.name}: pod {key} affinity on {term.topology_key} finds no matching pod "
                              f"in its domain {domain}", pods=ctx.pending_only(key))


def _selects_another(ctx: Context, tid: int, own: int) -> bool:
    """Does the term (of a pod of class ``own``, on the final nodes) select any pod but its owner there?"""
    classes = ctx.classes
    counts = ctx.class_counts()
    return sum(n for cid, n in counts.items() if classes.selects(tid, own, cid)) > 1


def _running_anti_affinity(ctx: Context) -> Iterator[Violation]:
    """A running pod's anti-affinity repels placed pods from its domain (hostname: ``_hostname_pairs``)."""
    classes = ctx.classes
    for state in ctx.final.values():
        for resident in state.bound:
            if not resident.pod_anti_affinity or resident.key in ctx.where:
                continue
            own = classes.of(resident)
            for term in resident.pod_anti_affinity:
                domain = state.labels.get(term.topology_key)
                if term.topology_key == HOSTNAME or domain is None:
                    continue
                tid = classes.term(term)
                for cid, members in ctx.domains(term.topology_key).get(domain, {}).items():
                    if not classes.selects(tid, own, cid):
                        continue
                    for other in members:
                        if other.key in ctx.where:
                            yield Violation(RULE, f"pod {other.key} lands in {term.topology_key}={domain}, where "
                                                  f"running pod {resident.key}'s required anti-affinity repels it",
                                            pods=ctx.pending_only(other.key))
