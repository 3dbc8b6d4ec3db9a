"""Label requirements, checked against Kubernetes' node-affinity rules.

Rules (https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#operators and the
NodeSelectorRequirement API reference):
  * In: the label is present and its value is in the set.        NotIn: absent, or value not in the set.
  * Exists: the label is present.                                  DoesNotExist: the label is absent.
  * Gt / Lt: the label is present and, parsed as an integer, greater / less than the single value.
  * In / NotIn need a non-empty values list; Exists / DoesNotExist must have an empty one;
    Gt / Lt need exactly one value which is an integer.
Karpenter's NodePool adds Gte / Lte and ``minValues`` (an integer >= 1).
"""

from __future__ import annotations

from typing import Any

import pytest

from model.api import validate_api
from model.errors import InputError
from model.nodepool import NodePool
from model.requirements import NODE_AFFINITY_OPERATORS, Requirement, Requirements


def req(key: str, operator: str, *values: str) -> Requirement:
    return Requirement.parse({"key": key, "operator": operator, "values": list(values)})


# --- matching ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("requirement", "labels", "expected"), [
    # In: present and listed
    (("zone", "In", "a", "b"), {"zone": "a"}, True),
    (("zone", "In", "a", "b"), {"zone": "c"}, False),
    (("zone", "In", "a", "b"), {}, False),
    # NotIn: absent or not listed
    (("zone", "NotIn", "a"), {"zone": "b"}, True),
    (("zone", "NotIn", "a"), {"zone": "a"}, False),
    (("zone", "NotIn", "a"), {}, True),
    (("zone", "NotIn", "a"), {"other": "a"}, True),
    # Exists / DoesNotExist look only at presence (an empty value is still present)
    (("gpu", "Exists"), {"gpu": ""}, True),
    (("gpu", "Exists"), {"gpu": "x"}, True),
    (("gpu", "Exists"), {}, False),
    (("gpu", "DoesNotExist"), {}, True),
    (("gpu", "DoesNotExist"), {"gpu": ""}, False),
    (("gpu", "DoesNotExist"), {"gpu": "x"}, False),
])
def test_set_operators(requirement: tuple[str, ...], labels: dict[str, str], expected: bool) -> None:
    assert req(*requirement).matches(labels) is expected


@pytest.mark.parametrize(("operator", "label", "expected"), [
    ("Gt", "5", True),
    ("Gt", "4", False),      # strictly greater
    ("Gt", "3", False),
    ("Lt", "3", True),
    ("Lt", "4", False),      # strictly less
    ("Lt", "5", False),
    ("Gte", "4", True),      # Karpenter extensions: inclusive bounds
    ("Gte", "3", False),
    ("Lte", "4", True),
    ("Lte", "5", False),
    ("Gt", "10", True),      # compared as integers, not strings ("10" < "4" as text)
    ("Lt", "10", False),
    ("Gt", "-1", False),
    ("Lt", "-1", True),
])
def test_numeric_operators_compare_integers(operator: str, label: str, expected: bool) -> None:
    assert req("cpu", operator, "4").matches({"cpu": label}) is expected


@pytest.mark.parametrize("operator", ["Gt", "Lt", "Gte", "Lte"])
@pytest.mark.parametrize("labels", [{}, {"cpu": "large"}, {"cpu": "4.5"}, {"cpu": ""}])
def test_numeric_operators_fail_on_absent_or_non_integer_label(operator: str, labels: dict[str, str]) -> None:
    # Gt/Lt need the label present and parseable as an integer; otherwise the node does not match
    assert req("cpu", operator, "4").matches(labels) is False


def test_gt_rejects_label_value_with_underscore_like_strconv_parseint() -> None:
    # "1_000" is a valid label value ([A-Za-z0-9_.-]) but not a base-10 integer for strconv.ParseInt,
    # so apimachinery's labels.Requirement.Matches returns false for Gt/Lt.
    assert req("cpu", "Gt", "500").matches({"cpu": "1_000"}) is False


def test_allows_value_treats_none_as_absent() -> None:
    assert req("zone", "NotIn", "a").allows_value(None) is True
    assert req("zone", "In", "a").allows_value(None) is False
    assert req("zone", "In", "a").allows_value("a") is True
    assert req("zone", "DoesNotExist").allows_value("a") is False


# --- parse validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "field", "fragment"), [
    ({"key": "k", "operator": "Equals", "values": ["a"]}, "operator", "unknown operator"),
    ({"key": "k", "values": ["a"]}, "operator", "unknown operator"),
    ({"key": "k", "operator": "In"}, "values", "at least one value"),
    ({"key": "k", "operator": "In", "values": []}, "values", "at least one value"),
    ({"key": "k", "operator": "NotIn", "values": []}, "values", "at least one value"),
    ({"key": "k", "operator": "Exists", "values": ["a"]}, "values", "takes no values"),
    ({"key": "k", "operator": "DoesNotExist", "values": ["a"]}, "values", "takes no values"),
    ({"key": "k", "operator": "Gt", "values": ["big"]}, "values", "integer"),
    ({"key": "k", "operator": "Gt", "values": ["1.5"]}, "values", "integer"),
    ({"key": "k", "operator": "Lt", "values": []}, "values", "integer"),
    ({"key": "k", "operator": "Lt", "values": ["1", "2"]}, "values", "exactly one"),
    ({"key": "k", "operator": "Gte", "values": ["x"]}, "values", "integer"),
    ({"key": "k", "operator": "In", "values": "a"}, "values", "must be a list"),
    ({"key": "k", "operator": "In", "values": ["a"], "minValues": 0}, "minValues", "positive integer"),
    ({"key": "k", "operator": "In", "values": ["a"], "minValues": -1}, "minValues", "positive integer"),
    ({"key": "k", "operator": "In", "values": ["a"], "minValues": "2"}, "minValues", "positive integer"),
    ({"key": "k", "operator": "In", "values": ["a"], "minValues": True}, "minValues", "positive integer"),
    ({"operator": "Exists"}, "key", "key is required"),
    ({"key": "", "operator": "Exists"}, "key", "key is required"),
])
def test_parse_rejects_invalid_requirements(raw: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(InputError) as info:
        Requirement.parse(raw)
    assert info.value.field == field
    assert fragment in str(info.value)
    assert f"field {field}" in str(info.value)


def test_parse_rejects_a_non_map() -> None:
    with pytest.raises(InputError):
        Requirement.parse(["k", "In", "a"])


@pytest.mark.parametrize("operator", ["Gte", "Lte"])
def test_pod_node_affinity_does_not_accept_karpenter_only_operators(operator: str) -> None:
    # core/v1 NodeSelectorOperator is In, NotIn, Exists, DoesNotExist, Gt, Lt only
    with pytest.raises(InputError) as info:
        Requirement.parse({"key": "k", "operator": operator, "values": ["1"]},
                          allowed=NODE_AFFINITY_OPERATORS)
    assert info.value.field == "operator"


def test_parse_keeps_values_and_min_values() -> None:
    parsed = Requirement.parse({"key": "k", "operator": "In", "values": ["a", "b", 3], "minValues": 2})
    assert parsed.values == ("a", "b", "3")
    assert parsed.min_values == 2
    assert Requirement.parse({"key": "k", "operator": "Gt", "values": ["-3"]}).values == ("-3",)


def _nodepool_with(requirement: dict[str, Any]) -> NodePool:
    return validate_api(NodePool, {"metadata": {"name": "np"},
                                   "spec": {"template": {"spec": {"requirements": [requirement]}}}})


def test_nodepool_rejects_min_values_above_value_count() -> None:
    # karpenter.sh/v1 CRD: "requirements with 'minValues' must have at least that many values specified in
    # the 'values' field" (rule: operator == 'In' && has(minValues) ? values.size() >= minValues)
    with pytest.raises(InputError):
        _nodepool_with({"key": "k", "operator": "In", "values": ["a"], "minValues": 2})


def test_nodepool_rejects_negative_numeric_requirement() -> None:
    # karpenter.sh/v1 CRD: "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive
    # integer value" (rule: values.size() == 1 && int(values[0]) >= 0)
    with pytest.raises(InputError):
        _nodepool_with({"key": "k", "operator": "Gt", "values": ["-1"]})


# --- conjunction and candidate values ------------------------------------------------------------------

def test_requirements_are_a_conjunction() -> None:
    both = Requirements.of([req("zone", "In", "a", "b")]) & Requirements.of([req("arch", "In", "amd64")])
    assert len(both.items) == 2
    assert both.matches({"zone": "a", "arch": "amd64"})
    assert not both.matches({"zone": "a", "arch": "arm64"})
    assert not both.matches({"zone": "c", "arch": "amd64"})
    assert not both.matches({"zone": "a"})
    assert [r.key for r in both.failing({"zone": "c", "arch": "arm64"})] == ["zone", "arch"]


def test_empty_requirements_match_everything() -> None:
    assert Requirements().matches({})
    assert Requirements().matches({"any": "thing"})


def test_from_labels_is_a_node_selector() -> None:
    # nodeSelector: the node must have each of the indicated key-value pairs as labels
    selector = Requirements.from_labels({"disktype": "ssd", "zone": "a"})
    assert selector.matches({"disktype": "ssd", "zone": "a", "extra": "x"})
    assert not selector.matches({"disktype": "ssd"})
    assert not selector.matches({"disktype": "hdd", "zone": "a"})


def test_allows_value_checks_every_requirement_on_the_key() -> None:
    reqs = Requirements.of([req("zone", "In", "a", "b"), req("zone", "NotIn", "b"), req("arch", "Exists")])
    assert reqs.allows_value("zone", "a")
    assert not reqs.allows_value("zone", "b")
    assert not reqs.allows_value("zone", None)
    assert reqs.allows_value("unrelated", None)


def test_candidate_values_intersects_in_sets_and_applies_other_operators() -> None:
    reqs = Requirements.of([
        req("zone", "In", "a", "b", "c"),
        req("zone", "In", "b", "c", "d"),
        req("zone", "NotIn", "c"),
    ])
    assert reqs.candidate_values("zone") == ("b",)


def test_candidate_values_filters_with_numeric_bounds() -> None:
    reqs = Requirements.of([req("cpu", "In", "2", "4", "8", "16"), req("cpu", "Gt", "3"),
                            req("cpu", "Lte", "8")])
    assert set(reqs.candidate_values("cpu") or ()) == {"4", "8"}


def test_candidate_values_is_none_without_an_in_requirement() -> None:
    reqs = Requirements.of([req("zone", "NotIn", "a"), req("arch", "In", "amd64")])
    assert reqs.candidate_values("zone") is None
    assert reqs.candidate_values("missing") is None


def test_candidate_values_can_be_empty_when_contradictory() -> None:
    reqs = Requirements.of([req("zone", "In", "a"), req("zone", "In", "b")])
    assert reqs.candidate_values("zone") == ()
    absent = Requirements.of([req("zone", "In", "a"), req("zone", "DoesNotExist")])
    assert absent.candidate_values("zone") == ()
