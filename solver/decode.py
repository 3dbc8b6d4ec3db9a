"""From chosen patterns back to pods on nodes, then each new node shrunk to its cheapest fitting offering."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress

import numpy as np

from model.pod import Pod
from solver.bins import Bin
from solver.patterns import Pattern
from solver.placement import NewNode, Placement
from solver.problem import Problem


def pattern_order(pattern: Pattern) -> tuple[int, tuple[tuple[int, int], ...]]:
    """A sort key giving patterns the order of ``(bin, counts)``, read from the classes a pattern uses only:
    ``(-k, count)`` pairs by class compare as the counts do (a class used earlier makes the pattern larger),
    without walking thousands of zeros in each comparison."""
    counts = pattern.counts
    return pattern.bin, tuple((-k, counts[k]) for k in compress(range(len(counts)), counts))


def decode(problem: Problem, bins: list[Bin], chosen: dict[Pattern, int], only: Sequence[Pod] | None = None
           ) -> Placement:
    """Fill pattern copies with real pods (surplus slots stay empty); pods left over are unschedulable.
    ``only``: the pods the patterns are for (default: the whole batch), in their classes' order."""
    if only is None:
        queues: list[list[Pod]] = [list(c.pods) for c in problem.classes]
    else:
        class_of = problem.class_of()
        queues = [[] for _ in problem.classes]
        for pod in only:
            queues[class_of[pod.key]].append(pod)
    placement = Placement()
    existing_slots = {b.index: list(b.members) for b in bins if b.existing}
    # existing capacity first (free), then new nodes largest first so surplus lands on the cheap ones
    order = sorted(chosen.items(), key=lambda item: (not bins[item[0].bin].existing,
                                                     -bins[item[0].bin].cost, pattern_order(item[0])))
    units = [c.unit for c in problem.classes]
    for pattern, copies in order:
        b = bins[pattern.bin]
        # the classes a pattern uses, found in C (a pattern lists every class: 4,603 at 50,000 diverse pods)
        used = [(k, pattern.counts[k] * units[k]) for k in compress(range(len(pattern.counts)), pattern.counts)]
        for _ in range(copies):
            pods: list[Pod] = []
            for k, want in used:
                take = min(want, len(queues[k]))
                pods.extend(queues[k][:take])
                del queues[k][:take]
            if not pods:
                continue
            if b.existing:
                node = existing_slots[b.index].pop(0)
                placement.existing.setdefault(node, []).extend(pods)
            else:
                placement.new_nodes.append(NewNode(template=b.members[0], pods=pods))
    placement.unschedulable = [pod for queue in queues for pod in queue]
    return shrink(problem, placement)


def shrink(problem: Problem, placement: Placement) -> Placement:
    """Move each new node to the cheapest template of its pool that still holds its pods and admits
    every class on it, without using more of any NodePool limit or matching fewer preferences."""
    class_of = problem.class_of()
    prices = np.array([t.price_micros for t in problem.templates], dtype=np.int64)
    # each pool's templates cheapest first (ties by sort key): only the prefix cheaper than a node's
    # current template is worth testing, and the first that passes is the answer
    by_pool: dict[str, list[int]] = {}
    for t in sorted(range(len(problem.templates)), key=lambda t: (prices[t], problem.templates[t].sort_key)):
        by_pool.setdefault(problem.templates[t].pool.name, []).append(t)
    pool_order = {name: np.array(ts, dtype=np.int64) for name, ts in by_pool.items()}
    pool_prices = {name: prices[ts] for name, ts in pool_order.items()}
    units = np.array([c.unit for c in problem.classes], dtype=np.int64)
    limit_use: dict[str, np.ndarray] = {}
    for node in placement.new_nodes:
        current = problem.templates[node.template]
        order = pool_order[current.pool.name]
        idx = order[: int(np.searchsorted(pool_prices[current.pool.name], current.price_micros, side="left"))]
        if not len(idx):
            continue
        # the classes on the node and their pods (not a count per class of the batch: thousands of classes)
        ks, counts = np.unique(np.fromiter((class_of[p.key] for p in node.pods), np.int64, len(node.pods)),
                               return_counts=True)
        load = (counts // units[ks]) @ problem.sizes[ks]
        ok = np.all(problem.template_alloc[idx] >= load, axis=1) & np.all(problem.template_ok[np.ix_(ks, idx)],
                                                                            axis=0)
        # never trade away a preferred node-affinity match the node had
        had = problem.template_pref[ks, node.template][:, None]
        ok &= np.all(problem.template_pref[np.ix_(ks, idx)] >= had, axis=0)
        for name, use in current.limit_use.items():
            if name not in limit_use:
                limit_use[name] = np.array([t.limit_use.get(name, 0) for t in problem.templates], dtype=np.int64)
            ok &= limit_use[name][idx] <= use
        hits = np.flatnonzero(ok)
        if len(hits):
            node.template = int(idx[hits[0]])
    placement.new_nodes.sort(key=lambda n: (problem.templates[n.template].sort_key, -len(n.pods)))
    return placement
