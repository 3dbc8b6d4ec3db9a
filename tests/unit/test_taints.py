"""Taints and tolerations, checked against Kubernetes' matching rules.

Rules (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/):
  * A toleration matches a taint if the keys and effects are the same and
    - operator is Exists (no value should be specified), or
    - operator is Equal (the default) and the values are equal.
  * An empty key with operator Exists matches all keys, values and effects.
  * An empty effect matches all effects with the given key.
  * NoSchedule / NoExecute keep untolerating pods off the node; PreferNoSchedule is a soft preference.
API validation: an empty key requires operator Exists; operator Exists requires an empty value.
"""

from __future__ import annotations

from typing import Any

import pytest

from model.errors import InputError
from model.taints import Taint, Toleration, tolerates, untolerated

GPU = Taint(key="gpu", value="true", effect="NoSchedule")


def tol(**raw: Any) -> Toleration:
    return Toleration.parse(raw)


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    # Equal (default): key, value and effect agree
    ({"key": "gpu", "value": "true", "effect": "NoSchedule"}, GPU, True),
    ({"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}, GPU, True),
    ({"key": "gpu", "value": "false", "effect": "NoSchedule"}, GPU, False),            # value mismatch
    ({"key": "gpu", "effect": "NoSchedule"}, GPU, False),                              # "" != "true"
    ({"key": "tpu", "value": "true", "effect": "NoSchedule"}, GPU, False),             # key mismatch
    ({"key": "gpu", "value": "true", "effect": "NoExecute"}, GPU, False),              # effect mismatch
    # Exists ignores the value
    ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU, True),
    ({"key": "gpu", "operator": "Exists", "effect": "PreferNoSchedule"}, GPU, False),  # effect still counts
    ({"key": "other", "operator": "Exists"}, GPU, False),
    # empty effect matches every effect
    ({"key": "gpu", "value": "true"}, GPU, True),
    ({"key": "gpu", "value": "true"}, Taint(key="gpu", value="true", effect="NoExecute"), True),
    ({"key": "gpu", "operator": "Exists"}, Taint(key="gpu", effect="PreferNoSchedule"), True),
    # empty key + Exists tolerates everything
    ({"operator": "Exists"}, GPU, True),
    ({"operator": "Exists"}, Taint(key="x", value="y", effect="NoExecute"), True),
    # empty key + Exists + effect tolerates every key with that effect only
    ({"operator": "Exists", "effect": "NoExecute"}, Taint(key="x", effect="NoExecute"), True),
    ({"operator": "Exists", "effect": "NoExecute"}, GPU, False),
    # taint without a value is matched by Equal with an empty value
    ({"key": "dedicated", "effect": "NoSchedule"}, Taint(key="dedicated", effect="NoSchedule"), True),
])
def test_toleration_matching(toleration: dict[str, Any], taint: Taint, expected: bool) -> None:
    assert tol(**toleration).tolerates(taint) is expected


def test_any_toleration_is_enough() -> None:
    tolerations = [tol(key="a", operator="Exists"), tol(key="gpu", value="true")]
    assert tolerates(tolerations, GPU)
    assert not tolerates(tolerations[:1], GPU)
    assert not tolerates([], GPU)


def test_untolerated_ignores_prefer_no_schedule_by_default() -> None:
    soft = Taint(key="spot", effect="PreferNoSchedule")
    hard = Taint(key="dedicated", value="batch", effect="NoSchedule")
    evict = Taint(key="maintenance", effect="NoExecute")
    assert untolerated([], [soft]) == []
    assert untolerated([], [soft, hard, evict]) == [hard, evict]
    assert untolerated([tol(key="dedicated", value="batch")], [soft, hard, evict]) == [evict]
    assert untolerated([tol(operator="Exists")], [soft, hard, evict]) == []


def test_untolerated_reports_prefer_no_schedule_when_asked() -> None:
    soft = Taint(key="spot", effect="PreferNoSchedule")
    assert untolerated([], [soft], effects=("PreferNoSchedule",)) == [soft]
    assert untolerated([tol(key="spot", operator="Exists")], [soft], effects=("PreferNoSchedule",)) == []


@pytest.mark.parametrize(("raw", "field"), [
    ({"key": "gpu", "operator": "Exists", "value": "true"}, "value"),   # Exists takes no value
    ({"operator": "Equal", "value": "x"}, "operator"),                  # empty key needs Exists
    ({"value": "x"}, "operator"),                                        # default operator is Equal
    ({}, "operator"),
    ({"key": "gpu", "operator": "In"}, "operator"),
    ({"key": "gpu", "effect": "NoRun"}, "effect"),
])
def test_toleration_parse_errors_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as info:
        Toleration.parse(raw)
    assert info.value.field == field
    assert f"field {field}" in str(info.value)


def test_toleration_parse_defaults() -> None:
    parsed = Toleration.parse({"key": "gpu"})
    assert parsed.operator == "Equal"
    assert parsed.value == ""
    assert parsed.effect is None
    assert Toleration.parse({"key": "gpu", "effect": ""}).effect is None


@pytest.mark.parametrize(("raw", "field"), [
    ({"effect": "NoSchedule"}, "key"),
    ({"key": "", "effect": "NoSchedule"}, "key"),
    ({"key": "gpu"}, "effect"),                       # a taint's effect is required
    ({"key": "gpu", "effect": "Sometimes"}, "effect"),
])
def test_taint_parse_errors_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as info:
        Taint.parse(raw)
    assert info.value.field == field


def test_taint_parse_and_describe() -> None:
    assert Taint.parse({"key": "gpu", "value": "true", "effect": "NoSchedule"}) == GPU
    assert GPU.describe() == "gpu=true:NoSchedule"
    assert Taint.parse({"key": "x", "effect": "NoExecute"}).describe() == "x:NoExecute"
