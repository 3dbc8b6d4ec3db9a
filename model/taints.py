"""Taints and tolerations with Kubernetes' matching rules.

A toleration matches a taint when the effects agree (an empty toleration effect matches every effect),
the keys agree (an empty key with operator Exists matches every key) and, for operator Equal (the
default), the values are equal; Exists ignores the value. NoSchedule and NoExecute taints must be
tolerated for a pod to land; PreferNoSchedule is only a preference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from model.errors import InputError

Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
HARD_EFFECTS = ("NoSchedule", "NoExecute")


class Taint(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    value: str = ""
    effect: Effect

    @classmethod
    def parse(cls, raw: Any) -> Taint:
        if not isinstance(raw, Mapping):
            raise InputError("expected a taint {key, value, effect}")
        key = raw.get("key")
        if not isinstance(key, str) or not key:
            raise InputError("taint key is required", field="key")
        effect = raw.get("effect")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise InputError(f"unknown taint effect {effect!r}", field="effect")
        return cls(key=key, value=str(raw.get("value") or ""), effect=effect)

    def describe(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


class Toleration(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Effect | None = None

    @classmethod
    def parse(cls, raw: Any) -> Toleration:
        if not isinstance(raw, Mapping):
            raise InputError("expected a toleration")
        operator = raw.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise InputError(f"unknown toleration operator {operator!r}", field="operator")
        effect = raw.get("effect") or None
        if effect is not None and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise InputError(f"unknown toleration effect {effect!r}", field="effect")
        key = str(raw.get("key") or "")
        value = str(raw.get("value") or "")
        if operator == "Exists" and value:
            raise InputError("a toleration with operator Exists takes no value", field="value")
        if not key and operator != "Exists":
            raise InputError("a toleration with an empty key needs operator Exists", field="operator")
        return cls(key=key, operator=operator, value=value, effect=effect)

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def untolerated(tolerations: Iterable[Toleration], taints: Iterable[Taint],
                effects: Iterable[str] = HARD_EFFECTS) -> list[Taint]:
    """The taints with one of ``effects`` that no toleration matches (empty = the pod may land)."""
    tols = tuple(tolerations)
    wanted = set(effects)
    return [t for t in taints if t.effect in wanted and not tolerates(tols, t)]
