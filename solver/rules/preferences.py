"""Preferred node affinity: weighted terms a node's labels may satisfy.

A class's *score* on a node is the summed weight of the preferred terms the node's labels match; its
*deficit* is the best score any node could give it minus that. The objective charges deficits per pod:
``Respect`` (Karpenter's default) ranks them above cost, so a preference is dropped only when it cannot
be met; ``Price`` charges a user-given price per unit of weight; ``Ignore`` charges nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from solver.classes import PodClass


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
