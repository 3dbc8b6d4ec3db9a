"""Soft node preferences, one mechanism for all of them: a class's *score* on a node.

The score sums, for the node's labels and taints:

- every preferred node-affinity term the labels match (its weight, 1–100);
- every soft term the pod-to-pod rules derive (``rules.topology``, ``rules.podaffinity``): a preferred pod
  (anti-)affinity term towards running pods (its own weight), a ScheduleAnyway spread or a preferred
  self-(anti-)affinity turned into a domain to aim for (``SOFT_TOPOLOGY_WEIGHT``), a preferred term
  towards pending pods of other workloads whose domains are decided (``rules.hostpreferences``, its own
  weight). These live on the pod copies as extra preferred terms, so classes and bins already tell them
  apart;
- ``taint_weight`` for every PreferNoSchedule taint the node does *not* carry untolerated (out of the
  most any node carries), where ``taint_weight`` exceeds every other part of any class's score: avoiding
  an untolerated PreferNoSchedule taint outranks every other preference. Karpenter relaxes it last (it
  first treats such taints as NoSchedule); kube-scheduler weighs TaintToleration highest (3 vs 2).

A class's *deficit* on a node is the best score any node could give it minus that score. The objective
charges deficits per pod: ``Respect`` (Karpenter's default) ranks them above cost, so a preference is
dropped only when it cannot be met; ``Price`` charges a user-given price per unit of weight; ``Ignore``
charges nothing. Scores are additive, not kube-scheduler's per-plugin normalised sums.

Preferences a per-node score cannot express (ScheduleAnyway spread and preferred self-(anti-)affinity on
the hostname: they depend on which pods share a node) are kept by ``rules.hostpreferences`` as per-node
counters and bundles, under the same policy; that family also reports what is still not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

from model.taints import Taint, untolerated
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule

if TYPE_CHECKING:
    from solver.problem import Problem

#: weight of one soft topology term (the heaviest a preferred node-affinity term may be)
SOFT_TOPOLOGY_WEIGHT = 100


class PreferencePolicy(StrEnum):
    RESPECT = "Respect"
    IGNORE = "Ignore"
    PRICE = "Price"


def score(pod_class: PodClass, labels: Mapping[str, str]) -> int:
    return sum(term.weight for term in pod_class.representative.preferred_terms if term.requirements.matches(labels))


def heaviest_term_matches(pod_class: PodClass, labels: Mapping[str, str]) -> bool:
    """Karpenter's first attempt treats the heaviest preferred term as required (the greedy yardstick)."""
    terms = pod_class.representative.preferred_terms
    if not terms:
        return True
    heaviest = max(terms, key=lambda t: t.weight)
    return heaviest.requirements.matches(labels)


def prefer_no_schedule(pod_class: PodClass, taints: Sequence[Taint]) -> int:
    """How many of a node's PreferNoSchedule taints the class does not tolerate."""
    return len(untolerated(pod_class.tolerations, taints, effects=("PreferNoSchedule",)))


class PreferenceScorer:
    """Scores every class on every node; built once per batch from the taints nodes can carry."""

    def __init__(self, classes: Sequence[PodClass], taint_sets: Iterable[Sequence[Taint]]) -> None:
        self.most_taints = max((sum(t.effect == "PreferNoSchedule" for t in ts) for ts in taint_sets), default=0)
        heaviest = max((sum(t.weight for t in c.representative.preferred_terms) for c in classes), default=0)
        self.taint_weight = heaviest + 1

    def wanted(self, pod_class: PodClass) -> bool:
        """Does the class have any preference at all (else every score is 0)?"""
        return bool(pod_class.representative.preferred_terms) or self.most_taints > 0


def score_matrices(classes: Sequence[PodClass], nodes: Sequence[tuple[Mapping[str, str], Sequence[Taint]]],
                   scorer: PreferenceScorer) -> tuple[np.ndarray, np.ndarray]:
    """(score, first choice) of every class on every node (labels, taints), shapes (C, N). Label terms are
    matched only for classes that have some; taints once per distinct taint set (one per NodePool)."""
    pref = np.zeros((len(classes), len(nodes)), dtype=np.int64)
    first = np.ones((len(classes), len(nodes)), dtype=bool)
    taint_ids: dict[tuple[Taint, ...], int] = {}
    node_taints = np.array([taint_ids.setdefault(tuple(taints), len(taint_ids)) for _, taints in nodes],
                           dtype=np.int64)
    distinct = list(taint_ids)
    for c in classes:
        if not scorer.wanted(c):
            continue
        if scorer.most_taints:
            missed = np.array([prefer_no_schedule(c, ts) for ts in distinct], dtype=np.int64)[node_taints]
            pref[c.index] = scorer.taint_weight * (scorer.most_taints - missed)
            first[c.index] = missed == 0
        if c.representative.preferred_terms:
            for n, (labels, _) in enumerate(nodes):
                pref[c.index, n] += score(c, labels)
                first[c.index, n] &= heaviest_term_matches(c, labels)
    return pref, first


class Preferences(Rule):
    """Every soft rule as one score per (class, node) (above): the objective charges the deficits."""

    name = "preferences"
    relaxable = True

    def score(self, batch: BatchContext, problem: Problem) -> None:
        classes = problem.classes
        template_nodes = [(t.labels, t.pool.taints) for t in problem.templates]
        existing_nodes = [(e.node.labels, list(e.node.taints)) for e in problem.existing]
        scorer = PreferenceScorer(classes, [taints for _, taints in template_nodes + existing_nodes])
        problem.template_pref, problem.template_heaviest = score_matrices(classes, template_nodes, scorer)
        problem.existing_pref, problem.existing_heaviest = score_matrices(classes, existing_nodes, scorer)
