"""Structured violations: each rule family names itself and the pods (and claims) the plan must give up.

For every family a hand-made broken plan, the rule it breaks, and exactly the pods attributed; then a gate
that takes the attributed pods off and verifies again must end clean, on small plans and on a solved plan
scrambled at random.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from bench.workloads import nodepool, pod
from model.instancetype import InstanceType, Offering
from model.plan import ExistingNodeAssignment, PlanCost, PlannedNodeClaim, ProvisioningPlan, SolverReport
from model.resources import Resources
from model.snapshot import Snapshot, parse_objects
from solver.verify import Violation, verify, violations

GI = 2**30
PRICE = {"small": 0.1, "large": 0.4}
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def _type(name: str, cpu: int, pods: int = 10) -> InstanceType:
    return InstanceType(name=name, labels={"node.kubernetes.io/instance-type": name, "kubernetes.io/os": "linux"},
                        capacity=Resources({"cpu": cpu * 1000, "memory": 4 * cpu * GI, "pods": pods}),
                        offerings=tuple(Offering(zone=f"zone-{z}", capacity_type=ct, price=PRICE[name])
                                        for z in "abc" for ct in ("spot", "on-demand")))


CATALOG = (_type("small", 2), _type("large", 8))


def snapshot(*objects: dict[str, Any], pool: dict[str, Any] | None = None) -> Snapshot:
    return parse_objects([pool or nodepool("default"), *objects], source="test").with_catalog(CATALOG)


def claim(name: str, pods: list[str], *, type_: str = "small", zone: str = "a", pool: str = "default",
          price: float | None = None, labels: dict[str, str] | None = None) -> PlannedNodeClaim:
    return PlannedNodeClaim(name=name, node_pool=pool, instance_type=type_, zone=f"zone-{zone}", capacity_type="spot",
                            price=PRICE.get(type_, 0.0) if price is None else price,
                            pods=[f"default/{p}" for p in pods], labels=labels or {})


def plan(*claims: PlannedNodeClaim, existing: dict[str, list[str]] | None = None,
         unschedulable: dict[str, str] | None = None, total: float | None = None,
         lower_bound: float = 0.0) -> ProvisioningPlan:
    return ProvisioningPlan(
        node_claims=list(claims),
        existing_nodes=[ExistingNodeAssignment(name=n, pods=[f"default/{p}" for p in ps])
                        for n, ps in (existing or {}).items()],
        unschedulable=[{"pod": f"default/{p}", "reason": r} for p, r in (unschedulable or {}).items()],
        cost=PlanCost(total=sum(c.price for c in claims) if total is None else total, lower_bound=lower_bound),
        solver=SolverReport(status="FEASIBLE", wall_seconds=0.0))


def p(name: str, cpu: str = "100m", labels: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    return pod(name, cpu=cpu, memory="64Mi", labels=labels or {"app": name}, **kwargs)


def node(name: str, zone: str = "a", *, cpu: str = "4", taints: list[dict[str, str]] | None = None,
         unschedulable: bool = False) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {HOST: name, ZONE: f"zone-{zone}", "kubernetes.io/os": "linux"}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def anti(app: str, key: str = HOST) -> dict[str, Any]:
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}}


def affine(app: str, key: str = ZONE) -> dict[str, Any]:
    return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}}


def spread(app: str, key: str = ZONE, **extra: Any) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": app}}, **extra}]}


def ported(port: int) -> dict[str, Any]:
    return {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": port}],
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}


def only(found: list[Violation], rule: str) -> list[Violation]:
    """The violations of ``rule``, insisting there are no others."""
    assert {v.rule for v in found} == {rule}, found
    return found


def attributed(found: list[Violation]) -> set[str]:
    return {k.removeprefix("default/") for v in found for k in v.pods}


# --- accounting ----------------------------------------------------------------------------------------------

def test_accounting() -> None:
    snap = snapshot(p("a"), p("b"), p("c"), p("d"))
    found = only(violations(snap, plan(claim("c1", ["a", "a", "ghost"]), unschedulable={"c": " "})), "accounting")
    by_message = {v.message: v.pods for v in found}
    assert by_message == {
        "pending pod default/b is missing from the plan": ("default/b",),
        "pending pod default/d is missing from the plan": ("default/d",),
        "pod default/a appears 2 times in the plan": ("default/a",),
        "plan places default/ghost, which is not a pending pod in the snapshot": ("default/ghost",),
        "unschedulable pod default/c has no reason": ("default/c",),
    }


# --- NodeClaims and existing nodes ---------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "expected"), [
    ({"node_pool": "nowhere"}, "NodePool nowhere does not exist"),
    ({"instance_type": "huge"}, "instance type huge is not in the catalog"),
    ({"zone": "zone-z"}, "no available offering zone-z/spot of small"),
    ({"price": 0.05}, "price 0.05 differs from the offering's 0.1"),
    ({"labels": {ZONE: "zone-b"}}, f"label {ZONE}=zone-b contradicts zone-a from the offering"),
])
def test_claim_level_defects_drop_the_claim_and_its_pods(change: dict[str, Any], expected: str) -> None:
    snap = snapshot(p("a"), p("b"))
    broken = claim("c1", ["a", "b"]).model_copy(update=change)
    found = [v for v in violations(snap, plan(claim("c0", []), broken)) if v.rule == "NodeClaim"]
    assert [v.message for v in found] == [f"nodeClaim c1: {expected}"]
    assert found[0].pods == ("default/a", "default/b") and found[0].claims == ("c1",)


def test_nodepool_requirements() -> None:
    pool = nodepool("default", requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                              "values": ["large"]}])
    snap = snapshot(p("a"), pool=pool)
    found = only(violations(snap, plan(claim("c1", ["a"]))), "NodeClaim")
    assert "requirement(s) not met" in found[0].message and found[0].claims == ("c1",)
    assert found[0].pods == ("default/a",)


def test_existing_node_cordoned_or_unknown() -> None:
    snap = snapshot(node("n1", unschedulable=True), p("a"), p("b"))
    found = only(violations(snap, plan(existing={"n1": ["a"], "n9": ["b"]})), "existing node")
    assert [(v.message, v.pods) for v in found] == [
        ("existing node n1: is cordoned, being deleted or not Ready", ("default/a",)),
        ("existing node n9: not in the snapshot", ("default/b",))]


# --- node selection and taints -------------------------------------------------------------------------------

def test_selection_and_taints() -> None:
    pool = nodepool("default", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    tolerant = {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    snap = snapshot(p("fine", spec_extra=tolerant), p("intolerant"),
                    p("elsewhere", spec_extra={**tolerant, "nodeSelector": {ZONE: "zone-b"}}), pool=pool)
    found = only(violations(snap, plan(claim("c1", ["fine", "intolerant", "elsewhere"]))), "node selection")
    assert [v.pods for v in found] == [("default/intolerant",), ("default/elsewhere",)]
    assert "does not tolerate taint(s) dedicated=gpu:NoSchedule" in found[0].message
    assert "rejects the node's labels" in found[1].message


# --- resources -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cpus", "removed"), [
    (["1000m", "600m", "300m", "200m"], {"p3"}),        # 100m over: the last pod alone covers it
    (["1000m", "600m", "300m", "500m", "200m"], {"p1"}),  # 600m over: the last pod that alone covers it
    (["1000m", "600m", "300m", "300m", "100m"], {"p3"}),  # 300m over: p3 is the last that covers it
    (["700m", "700m", "700m", "700m"], {"p3", "p2"}),     # 800m over: no single pod does; p3, then p2 for the rest
])
def test_fit_takes_off_few_pods_last_placed_first(cpus: list[str], removed: set[str]) -> None:
    snap = snapshot(*(p(f"p{i}", cpu) for i, cpu in enumerate(cpus)))
    found = only(violations(snap, plan(claim("c1", [f"p{i}" for i in range(len(cpus))]))), "resources")
    assert found[0].message.startswith("nodeClaim c1: pods request cpu=")
    assert attributed(found) == removed
    keys = [f"p{i}" for i in range(len(cpus))]
    left = [k for k in keys if k not in removed]
    assert verify(snap, plan(claim("c1", left), unschedulable={k: "gate" for k in removed})) == []


def test_fit_counts_daemonset_overhead_and_bound_pods() -> None:
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
              "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}
    snap = snapshot(daemon, node("n1", cpu="2"), p("running", "1500m", node_name="n1"), p("a", "600m"), p("b", "600m"))
    found = only(violations(snap, plan(claim("c1", ["a", "b"]))), "resources")
    assert attributed(found) == {"b"} and "only 1 is free" in found[0].message
    found = only(violations(snap, plan(existing={"n1": ["a", "b"]})), "resources")
    # 2 cpu less 1500m running (the daemon runs there already? no: it is not running, so 1 more): -500m free
    assert attributed(found) == {"a", "b"} and "only -500m is free" in found[0].message


# --- host ports ----------------------------------------------------------------------------------------------

def test_host_ports_take_off_the_later_pod() -> None:
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "proxy", "namespace": "kube-system"},
              "spec": {"template": {"spec": ported(9100)}}}
    snap = snapshot(daemon, p("x", spec_extra=ported(8443)), p("y", spec_extra=ported(8443)),
                    p("z", spec_extra=ported(8443)), p("w", spec_extra=ported(9100)))
    found = only(violations(snap, plan(claim("c1", ["x", "y", "z", "w"]))), "host ports")
    assert [(v.message.split(": ", 1)[1], v.pods) for v in found] == [
        ("pods default/y and default/x bind the same host port", ("default/y",)),
        ("pods default/z and default/x bind the same host port", ("default/z",)),
        ("pods default/z and default/y bind the same host port", ("default/z",)),
        ("pods default/w and kube-system/proxy-daemon bind the same host port", ("default/w",))]


# --- pod affinity and anti-affinity --------------------------------------------------------------------------

def test_hostname_anti_affinity_takes_off_the_later_pod() -> None:
    snap = snapshot(*(p(f"db-{i}", labels={"app": "db"}, spec_extra=anti("db")) for i in range(3)), p("web"))
    found = only(violations(snap, plan(claim("c1", ["db-0", "web", "db-1", "db-2"]))), "pod affinity")
    assert attributed(found) == {"db-1", "db-2"}


def test_anti_affinity_on_a_zone_between_planned_pods_and_against_running_ones() -> None:
    snap = snapshot(node("n1", "b"), p("old", labels={"app": "db"}, node_name="n1"),
                    *(p(f"db-{i}", labels={"app": "db"}, spec_extra=anti("db", ZONE)) for i in range(3)))
    found = only(violations(snap, plan(claim("c1", ["db-0"]), claim("c2", ["db-1"]), claim("c3", ["db-2"], zone="b"))),
                 "pod affinity")
    # db-0 and db-1 share zone-a: the later (db-1) goes; db-2 meets the running pod in zone-b: db-2 goes
    assert {(v.message, v.pods) for v in found} == {
        ("node c1: pod default/db-0 anti-affinity on topology.kubernetes.io/zone is violated by default/db-1",
         ("default/db-1",)),
        ("node c2: pod default/db-1 anti-affinity on topology.kubernetes.io/zone is violated by default/db-0",
         ("default/db-1",)),
        ("node c3: pod default/db-2 anti-affinity on topology.kubernetes.io/zone is violated by default/old",
         ("default/db-2",))}


def test_a_running_pods_anti_affinity_repels_planned_pods() -> None:
    snap = snapshot(node("n1", "a"), p("guard", node_name="n1", spec_extra=anti("web", ZONE)),
                    p("web", labels={"app": "web"}), p("other"))
    found = only(violations(snap, plan(claim("c1", ["other", "web"]))), "pod affinity")
    assert [(v.message, v.pods) for v in found] == [
        ("pod default/web lands in topology.kubernetes.io/zone=zone-a, where running pod default/guard's required "
         "anti-affinity repels it", ("default/web",))]


def test_affinity_without_a_partner_in_the_domain() -> None:
    snap = snapshot(p("cache", labels={"app": "cache"}), p("web", spec_extra=affine("cache")),
                    p("rack", spec_extra=affine("cache", "example.com/rack")))
    found = only(violations(snap, plan(claim("c1", ["cache"]), claim("c2", ["web", "rack"], zone="b"))),
                 "pod affinity")
    assert [(v.message, v.pods) for v in found] == [
        ("node c2: pod default/rack affinity on example.com/rack: the node has no such label", ("default/rack",)),
        ("node c2: pod default/web affinity on topology.kubernetes.io/zone finds no matching pod in its domain "
         "zone-b", ("default/web",))]
    assert verify(snap, plan(claim("c1", ["cache", "web"]), unschedulable={"rack": "x"})) == []


def test_the_first_of_a_self_affine_group_goes_anywhere() -> None:
    snap = snapshot(*(p(f"g-{i}", labels={"app": "g"}, spec_extra=affine("g")) for i in range(2)))
    assert verify(snap, plan(claim("c1", ["g-0", "g-1"]))) == []
    found = only(violations(snap, plan(claim("c1", ["g-0"]), claim("c2", ["g-1"], zone="b"))), "pod affinity")
    assert attributed(found) == {"g-0", "g-1"}


# --- topology spread -----------------------------------------------------------------------------------------

def test_spread_takes_off_the_excess_of_the_over_full_domain() -> None:
    snap = snapshot(*(p(f"s-{i}", labels={"app": "s"}, spec_extra=spread("s")) for i in range(5)))
    found = only(violations(snap, plan(claim("c1", ["s-0", "s-1"]), claim("c2", ["s-2", "s-3"]),
                                       claim("c3", ["s-4"], zone="b"))), "topology spread")
    # zone-a holds 4, zone-b 1: skew 3 > 1 for each of the four; two must go, the last placed there
    assert len(found) == 4 and all(v.pods == ("default/s-3", "default/s-2") for v in found)
    assert verify(snap, plan(claim("c1", ["s-0", "s-1"]), claim("c3", ["s-4"], zone="b"),
                             unschedulable={"s-2": "x", "s-3": "x"})) == []


def test_spread_min_domains_and_a_node_without_the_key() -> None:
    snap = snapshot(*(p(f"s-{i}", labels={"app": "s"}, spec_extra=spread("s", minDomains=3)) for i in range(4)),
                    p("r", labels={"app": "r"}, spec_extra=spread("r", "example.com/rack")))
    found = only(violations(snap, plan(claim("c1", ["s-0", "s-1", "r"]), claim("c2", ["s-2", "s-3"], zone="b"))),
                 "topology spread")
    # two domains of three required: the floor is 0, so each zone may hold 1
    assert attributed([v for v in found if "s-" in v.message]) == {"s-1", "s-3"}
    assert [v.pods for v in found if "rack" in v.message] == [("default/r",)]


def test_spread_counts_only_eligible_nodes() -> None:
    """nodeAffinityPolicy Honor: a zone the pod's node affinity rules out is no domain of its spread."""
    pinned = {**spread("s"), "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]}]}}}}
    snap = snapshot(p("s-0", labels={"app": "s"}, spec_extra=pinned), p("s-1", labels={"app": "s"}, spec_extra=pinned),
                    p("other", labels={"app": "s"}))
    assert verify(snap, plan(claim("c1", ["s-0", "s-1"]), claim("c2", ["other"], zone="b"))) == []


# --- NodePool limits and minValues ---------------------------------------------------------------------------

def test_limits_drop_the_last_claims_that_push_the_pool_over() -> None:
    pool = nodepool("default", limits={"cpu": "5"})
    snap = snapshot(p("a"), p("b"), p("c"), p("d"), pool=pool)
    found = only(violations(snap, plan(claim("c1", ["a"]), claim("c2", ["b"]), claim("c3", ["c", "d"]))),
                 "NodePool limits")
    assert [v.message for v in found] == ["NodePool default: limit cpu=5 exceeded (6 with this plan)"]
    assert found[0].claims == ("c3",) and found[0].pods == ("default/c", "default/d")


def test_limits_skip_claims_that_do_not_add_to_the_exceeded_resource() -> None:
    pool = nodepool("default", limits={"nodes": "2"})
    snap = snapshot(p("a"), p("b"), p("c"), pool=pool)
    found = only(violations(snap, plan(claim("c1", ["a"]), claim("c2", ["b"]), claim("c3", ["c"]))), "NodePool limits")
    assert found[0].claims == ("c3",)


def test_min_values_take_off_the_pods_that_narrow_the_claim() -> None:
    pool = nodepool("default", requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "Exists",
                                              "minValues": 2}])
    snap = snapshot(p("a"), p("b", "2500m"), p("c"), pool=pool)
    # b needs more than small's 2 cpu: only large holds the three, one type of the two required
    found = only(violations(snap, plan(claim("c1", ["a", "b", "c"], type_="large"))), "NodePool minValues")
    assert found[0].pods == ("default/c", "default/b") and found[0].claims == ()
    assert "node.kubernetes.io/instance-type: 1 of minValues 2" in found[0].message


def test_min_values_no_claim_could_meet_drop_the_claim() -> None:
    pool = nodepool("default", requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "Exists",
                                              "minValues": 3}])
    snap = snapshot(p("a"), pool=pool)
    found = only(violations(snap, plan(claim("c1", ["a"]))), "NodePool minValues")
    assert found[0].claims == ("c1",) and found[0].pods == ("default/a",)


# --- cost ----------------------------------------------------------------------------------------------------

def test_cost_figures() -> None:
    snap = snapshot(p("a"))
    found = only(violations(snap, plan(claim("c1", ["a"]), total=0.3, lower_bound=0.5)), "cost")
    assert [(v.message, v.pods, v.claims) for v in found] == [
        ("cost.total 0.3 differs from the sum of offering prices 0.100000", (), ()),
        ("cost.lowerBound 0.5 is above cost.total 0.3", (), ())]
    found = only(violations(snap, plan(claim("c1", ["a"]), lower_bound=math.nan)), "cost")
    assert [v.message for v in found] == ["cost.lowerBound nan is not a finite figure"]
    found = [v for v in violations(snap, plan(claim("c1", ["a"], price=math.inf), total=0.1)) if v.rule == "cost"]
    assert found[0].claims == ("c1",) and "not a finite $/h figure" in found[0].message


# --- the gate: take the attributed pods off, verify again, until clean ---------------------------------------

def gate(snap: Snapshot, broken: ProvisioningPlan, rounds: int = 10) -> tuple[ProvisioningPlan, set[str], int]:
    """What a plan gate does with violations: drop the claims they name, take their pods off, report those
    pending; recompute the cost. Returns the clean plan, the pods taken off and the rounds it took."""
    current, removed = broken, set()
    for n in range(rounds):
        found = violations(snap, current)
        if not found:
            return current, removed, n
        pods = {k for v in found for k in v.pods}
        claims = {c for v in found for c in v.claims}
        removed |= pods
        kept = [c.model_copy(update={"pods": [k for k in c.pods if k not in pods]})
                for c in current.node_claims if c.name not in claims]
        existing = [a.model_copy(update={"pods": [k for k in a.pods if k not in pods]}) for a in current.existing_nodes]
        listed = {k for c in kept for k in c.pods} | {k for a in existing for k in a.pods}
        pending = {k for k in pods if k in {q.key for q in snap.pending_pods()}}
        unschedulable = [u for u in current.unschedulable if u.pod not in pods and u.reason.strip()]
        unschedulable += [{"pod": k, "reason": "the plan gate took it off"} for k in sorted(pending - listed)]
        current = ProvisioningPlan.model_validate({
            **current.model_dump(by_alias=True), "nodeClaims": [c.model_dump(by_alias=True) for c in kept],
            "existingNodes": [a.model_dump(by_alias=True) for a in existing], "unschedulable": unschedulable,
            "cost": {"total": sum(c.price for c in kept), "lowerBound": 0.0}})
    raise AssertionError(f"still broken after {rounds} rounds: {violations(snap, current)[:5]}")


def test_gate_converges_on_a_scrambled_solved_plan() -> None:
    from bench.diverse import diverse_objects, karpenter_benchmark_catalog
    from solver.provision import SolveOptions, solve

    snap = parse_objects(diverse_objects(300, 7), source="diverse").with_catalog(karpenter_benchmark_catalog(40))
    solved = solve(snap, SolveOptions(time_limit=5.0)).plan
    assert verify(snap, solved) == []
    rng = random.Random(3)
    claims = [c.model_copy(update={"pods": list(c.pods)}) for c in solved.node_claims]
    placed = [(i, j) for i, c in enumerate(claims) for j in range(len(c.pods))]
    for (i, j), (k, m) in zip(rng.sample(placed, 60), rng.sample(placed, 60), strict=True):  # swap 60 pairs
        claims[i].pods[j], claims[k].pods[m] = claims[k].pods[m], claims[i].pods[j]
    broken = solved.model_copy(update={"node_claims": claims})
    assert violations(snap, broken)
    clean, removed, rounds = gate(snap, broken)
    assert verify(snap, clean) == []
    total = sum(len(c.pods) for c in claims)
    assert len(removed) < total // 3, (len(removed), total, rounds)
