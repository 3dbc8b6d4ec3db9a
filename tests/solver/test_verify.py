"""The verifier must catch every kind of broken plan (a checker that cannot fail is worth nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from model.plan import ProvisioningPlan
from model.snapshot import Snapshot
from solver.provision import SolveOptions, solve
from solver.verify import verify


@pytest.fixture(scope="module")
def solved(example_snapshot: Snapshot) -> dict[str, Any]:
    return solve(example_snapshot, SolveOptions(time_limit=5.0)).plan.to_json_dict()


def _tamper(plan: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> ProvisioningPlan:
    data = {**plan, "nodeClaims": [dict(c, pods=list(c["pods"])) for c in plan["nodeClaims"]],
            "existingNodes": [dict(n, pods=list(n["pods"])) for n in plan["existingNodes"]],
            "unschedulable": [dict(u) for u in plan["unschedulable"]], "cost": dict(plan["cost"])}
    change(data)
    return ProvisioningPlan.model_validate(data)


def _general_claim(plan: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in plan["nodeClaims"] if c["nodePool"] == "general")


def _batch_claim(plan: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in plan["nodeClaims"] if c["nodePool"] == "gpu-batch")


CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "missing pod": (lambda p: _general_claim(p)["pods"].pop(), "missing from the plan"),
    "duplicated pod": (lambda p: p["unschedulable"].append({"pod": _general_claim(p)["pods"][0], "reason": "x"}),
                       "appears 2 times"),
    "unknown pod": (lambda p: _general_claim(p)["pods"].append("default/ghost"), "not a pending pod"),
    "overfull node": (lambda p: _general_claim(p).update(instanceType="c-1x-amd64-linux",
                                                         price=0.0190032385536),
                      "only"),
    "wrong price": (lambda p: _general_claim(p).update(price=0.0001), "differs from the offering"),
    "unknown type": (lambda p: _general_claim(p).update(instanceType="z-9x"), "not in the catalog"),
    "offering outside pool": (lambda p: _batch_claim(p).update(capacityType="spot",
                                                               price=_batch_claim(p)["price"] * 0.7),
                              "requirement(s) not met"),
    "intolerant pod on tainted pool": (
        lambda p: _batch_claim(p)["pods"].append(_general_claim(p)["pods"].pop()), "does not tolerate"),
    # the s390x pod moved from unschedulable onto an amd64 node
    "selector mismatch": (lambda p: _general_claim(p)["pods"].append(p["unschedulable"].pop()["pod"]),
                          "rejects the node's labels"),
    "bound above cost": (lambda p: p["cost"].update(lowerBound=p["cost"]["total"] + 1), "above cost.total"),
    "empty reason": (lambda p: p["unschedulable"][0].update(reason=" "), "has no reason"),
    "existing node overfull": (lambda p: p["existingNodes"][0]["pods"].extend(
        [pod for c in p["nodeClaims"] if c["nodePool"] == "general" for pod in c["pods"]]), "is free"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_verifier_catches(name: str, solved: dict[str, Any], example_snapshot: Snapshot) -> None:
    change, expected = CASES[name]
    assert verify(example_snapshot, ProvisioningPlan.model_validate(solved)) == []
    violations = verify(example_snapshot, _tamper(solved, change))
    assert any(expected in v for v in violations), violations


def test_limit_violation_is_caught(example_snapshot: Snapshot, solved: dict[str, Any]) -> None:
    def blow_limit(p: dict[str, Any]) -> None:
        claim = _general_claim(p)
        for i in range(3):
            p["nodeClaims"].append(dict(claim, name=f"extra-{i}", pods=[], instanceType="c-96x-amd64-linux",
                                        price=0.7 * (0.025 * 96 + 0.001 * 192 * 2**30 / 1e9)))
    violations = verify(example_snapshot, _tamper(solved, blow_limit))
    assert any("limit cpu=256 exceeded" in v for v in violations), violations
