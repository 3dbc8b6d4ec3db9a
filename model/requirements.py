"""Label requirements and their algebra.

A requirement constrains one label key with one of the node-affinity operators (In, NotIn, Exists,
DoesNotExist, Gt, Lt) or Karpenter's NodePool extensions (Gte, Lte). ``Requirements`` is a conjunction.
Matching follows Kubernetes' node-affinity rules exactly: NotIn and DoesNotExist match an absent label,
In / Exists / Gt / Lt / Gte / Lte need the label present, and the numeric operators need an integer value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from model.errors import InputError

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]
_NUMERIC = ("Gt", "Lt", "Gte", "Lte")
NODE_AFFINITY_OPERATORS: frozenset[str] = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
NODEPOOL_OPERATORS: frozenset[str] = NODE_AFFINITY_OPERATORS | {"Gte", "Lte"}


_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (Kubernetes' qualified name: an optional DNS-subdomain prefix
    of at most 253 characters and ``/``, then a name of at most 63), or None when it is."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"invalid label key {key!r}: the prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not _NAME.match(name):
        return (f"invalid label key {key!r}: the name must be at most 63 characters, alphanumerics, "
                "'-', '_' or '.', starting and ending with an alphanumeric")
    return None


def _as_int(value: str) -> int | None:
    """An integer label value as Go's strconv.ParseInt reads it (no underscores, no spaces)."""
    if not _INTEGER.match(value):
        return None
    number = int(value)
    return number if -(2**63) <= number < 2**63 else None


class Requirement(BaseModel):
    """One ``key operator values`` expression; ``min_values`` is Karpenter's flexibility floor."""

    model_config = ConfigDict(frozen=True)

    key: str
    operator: Operator
    values: tuple[str, ...] = ()
    min_values: int | None = Field(default=None)

    @classmethod
    def parse(cls, raw: Any, *, allowed: frozenset[str] = NODEPOOL_OPERATORS) -> Requirement:
        """Parse ``{key, operator, values, minValues}`` validating what the API server validates."""
        if not isinstance(raw, Mapping):
            raise InputError("expected a requirement {key, operator, values}")
        key = raw.get("key")
        if not isinstance(key, str) or not key:
            raise InputError("key is required", field="key")
        problem = label_key_problem(key)
        if problem:
            raise InputError(problem, field="key")
        op = raw.get("operator")
        if op not in allowed:
            raise InputError(f"unknown operator {op!r}; expected one of {', '.join(sorted(allowed))}",
                             field="operator")
        values_raw = raw.get("values") or []
        if not isinstance(values_raw, list):
            raise InputError("values must be a list", field="values")
        values = tuple(str(v) for v in values_raw)
        if op in ("In", "NotIn") and not values:
            raise InputError(f"operator {op} needs at least one value", field="values")
        if op in ("Exists", "DoesNotExist") and values:
            raise InputError(f"operator {op} takes no values", field="values")
        if op in _NUMERIC and (len(values) != 1 or _as_int(values[0]) is None):
            raise InputError(f"operator {op} needs exactly one integer value", field="values")
        min_values = raw.get("minValues")
        if min_values is not None and (not isinstance(min_values, int) or isinstance(min_values, bool)
                                       or min_values < 1):
            raise InputError("minValues must be a positive integer", field="minValues")
        return cls(key=key, operator=op, values=values, min_values=min_values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes' node-affinity semantics against a concrete label set."""
        present = self.key in labels
        value = labels.get(self.key, "")
        op = self.operator
        if op == "In":
            return present and value in self.values
        if op == "NotIn":
            return not present or value not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        number = _as_int(value) if present else None
        if number is None:
            return False
        bound = int(self.values[0])
        return {"Gt": number > bound, "Lt": number < bound,
                "Gte": number >= bound, "Lte": number <= bound}[op]

    def allows_value(self, value: str | None) -> bool:
        """Would a node whose label ``key`` is ``value`` (None = absent) satisfy this requirement?"""
        return self.matches({} if value is None else {self.key: value})

    def describe(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        if self.operator == "In" and len(self.values) == 1:
            return f"{self.key}={self.values[0]}"
        return f"{self.key} {self.operator} [{', '.join(self.values)}]"


class Requirements(BaseModel):
    """A conjunction of requirements (a nodeSelector plus one node-selector term, or a NodePool's list)."""

    model_config = ConfigDict(frozen=True)

    items: tuple[Requirement, ...] = ()

    @classmethod
    def of(cls, items: Iterable[Requirement]) -> Requirements:
        return cls(items=tuple(items))

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """A nodeSelector: every label must be present with exactly this value."""
        return cls(items=tuple(Requirement(key=k, operator="In", values=(v,))
                               for k, v in sorted(labels.items())))

    def __and__(self, other: Requirements) -> Requirements:
        return Requirements(items=self.items + other.items)

    @classmethod
    def never(cls) -> Requirements:
        """A term that matches no node (Kubernetes: an empty node selector term matches no objects)."""
        return cls(items=(Requirement(key="nodeplan.io/empty-term", operator="In", values=()),))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req.matches(labels) for req in self.items)

    def failing(self, labels: Mapping[str, str]) -> list[Requirement]:
        return [req for req in self.items if not req.matches(labels)]

    def label_keys(self) -> set[str]:
        return {req.key for req in self.items}

    def for_key(self, key: str) -> list[Requirement]:
        return [req for req in self.items if req.key == key]

    def allows_value(self, key: str, value: str | None) -> bool:
        """Could the label ``key`` take ``value`` (None = absent) without violating any requirement?"""
        return all(req.allows_value(value) for req in self.for_key(key))

    def candidate_values(self, key: str) -> tuple[str, ...] | None:
        """The finite set of values allowed for ``key`` when an In requirement fixes one, else None."""
        finite: set[str] | None = None
        for req in self.for_key(key):
            if req.operator == "In":
                finite = set(req.values) if finite is None else finite & set(req.values)
        if finite is None:
            return None
        return tuple(sorted(v for v in finite if self.allows_value(key, v)))

    def values_mentioned(self, key: str) -> set[str]:
        return {v for req in self.for_key(key) if req.operator in ("In", "NotIn") for v in req.values}

    def describe(self) -> str:
        return ", ".join(req.describe() for req in self.items) or "(none)"
