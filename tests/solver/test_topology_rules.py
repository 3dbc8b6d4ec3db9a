"""Issue 3's remaining rules: PreferNoSchedule, soft topology, pod rules towards running pods, cross-class
anti-affinity, other topology keys. Each rule changes a plan here, and the verifier catches a violation."""

from __future__ import annotations

from typing import Any

import pytest

from bench.workloads import linux_pool, pod
from model.plan import ProvisioningPlan
from solver.rules.preferences import PreferencePolicy
from solver.verify import verify
from tests.conftest import snapshot_of, solve_verified

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
RACK = "example.com/rack"
SOFT_TAINT = {"key": "legacy", "value": "true", "effect": "PreferNoSchedule"}


def _node(name: str, zone: str, cpu: str = "4", taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", HOST: name, ZONE: zone}},
            "spec": {"taints": taints or []},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _affinity(kind: str, app: str, key: str, preferred: int = 0) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    if preferred:
        return {"affinity": {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": preferred, "podAffinityTerm": term}]}}}
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def _spread(app: str, key: str, when: str = "DoNotSchedule", skew: int = 1) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
                                           "labelSelector": {"matchLabels": {"app": app}}}]}


def _zones(plan: ProvisioningPlan, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for claim in plan.node_claims:
        n = sum(p.startswith(prefix) for p in claim.pods)
        if n:
            out[claim.zone] = out.get(claim.zone, 0) + n
    return out


def _moved(plan: ProvisioningPlan, pod_key: str, to_claim: int) -> ProvisioningPlan:
    """The plan with one pod moved onto another claim (cost unchanged: only rules can object)."""
    data = plan.to_json_dict()
    for claim in data["nodeClaims"]:
        if pod_key in claim["pods"]:
            claim["pods"].remove(pod_key)
    for node in data["existingNodes"]:
        if pod_key in node["pods"]:
            node["pods"].remove(pod_key)
    data["nodeClaims"][to_claim]["pods"].append(pod_key)
    return ProvisioningPlan.model_validate(data)


def _stray(plan: ProvisioningPlan, pod_key: str, avoid: str) -> ProvisioningPlan:
    """The plan with one pod moved onto a new node (a copy of its own) in a zone without ``avoid`` pods."""
    data = plan.to_json_dict()
    home = next(c for c in data["nodeClaims"] if pod_key in c["pods"])
    home["pods"].remove(pod_key)
    taken = {c["zone"] for c in data["nodeClaims"] if any(avoid in p for p in c["pods"])}
    zone = next(z for z in ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d") if z not in taken)
    data["nodeClaims"].append({**home, "name": "stray", "zone": zone, "labels": {**home["labels"], ZONE: zone},
                               "pods": [pod_key]})
    data["cost"]["total"] += home["price"]
    return ProvisioningPlan.model_validate(data)


# --- PreferNoSchedule ------------------------------------------------------------------------------------

def _tainted_pools() -> list[dict[str, Any]]:
    spot = linux_pool("legacy", taints=[SOFT_TAINT],
                      requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
    on_demand = linux_pool("clean", requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In",
                                                   "values": ["on-demand"]}])
    return [spot, on_demand]


@pytest.mark.parametrize(("policy", "price", "tolerate", "expected"), [
    (PreferencePolicy.RESPECT, 0.0, False, {"clean"}),     # avoided although spot is cheaper
    (PreferencePolicy.IGNORE, 0.0, False, {"legacy"}),     # cost only
    (PreferencePolicy.PRICE, 1e-7, False, {"legacy"}),     # worth less than the spot saving
    (PreferencePolicy.PRICE, 1.0, False, {"clean"}),       # worth more
    (PreferencePolicy.RESPECT, 0.0, True, {"legacy"}),     # tolerated: no preference left
])
def test_prefer_no_schedule_taints_are_soft(policy: PreferencePolicy, price: float, tolerate: bool,
                                            expected: set[str]) -> None:
    extra = {"tolerations": [{"key": "legacy", "operator": "Exists", "effect": "PreferNoSchedule"}]} if tolerate \
        else {}
    objects = _tainted_pools() + [pod(f"api-{i}", cpu="1", memory="1Gi", owner="api", spec_extra=extra)
                                  for i in range(3)]
    result = solve_verified(snapshot_of(objects), preference_policy=policy, preference_price=price)
    assert {c.node_pool for c in result.plan.node_claims} == expected


def test_prefer_no_schedule_is_dropped_when_nothing_else_fits() -> None:
    objects = [_tainted_pools()[0], pod("api", cpu="1", memory="1Gi")]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and plan.node_claims[0].node_pool == "legacy"


def test_prefer_no_schedule_on_an_existing_node_under_respect() -> None:
    objects = [_tainted_pools()[1], _node("old", "test-zone-a", taints=[SOFT_TAINT]), pod("api", cpu="1")]
    respect = solve_verified(snapshot_of(objects)).plan
    assert respect.existing_nodes == [] and len(respect.node_claims) == 1
    ignore = solve_verified(snapshot_of(objects), preference_policy=PreferencePolicy.IGNORE).plan
    assert ignore.node_claims == [] and ignore.existing_nodes[0].pods == ["default/api"]


def test_prefer_no_schedule_outranks_preferred_node_affinity() -> None:
    prefer_spot = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}]}}}
    objects = [*_tainted_pools(), pod("api", cpu="1", spec_extra=prefer_spot)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.node_claims[0].node_pool == "clean"  # Karpenter relaxes the taint last


# --- soft topology ---------------------------------------------------------------------------------------

def test_schedule_anyway_zone_spread_is_kept_under_respect_and_dropped_under_ignore() -> None:
    objects = [linux_pool("default")] + [pod(f"web-{i}", cpu="500m", labels={"app": "web"}, owner="web",
                                             spec_extra=_spread("web", ZONE, "ScheduleAnyway")) for i in range(8)]
    respect = solve_verified(snapshot_of(objects)).plan
    assert sorted(_zones(respect, "default/web").values()) == [2, 2, 2, 2]
    assert not any("not modelled" in n for n in respect.solver.notes)
    ignore = solve_verified(snapshot_of(objects), preference_policy=PreferencePolicy.IGNORE).plan
    # dropped: the plan costs what the pods cost with no spread at all (c-4x holds 7 of them; the 8th's node may
    # be in any zone at the same price, so the zones it uses are not asserted, only that it does not spread)
    unspread = [linux_pool("default")] + [pod(f"web-{i}", cpu="500m", labels={"app": "web"}, owner="web")
                                          for i in range(8)]
    assert ignore.solver.status == "OPTIMAL"
    assert ignore.cost.total == solve_verified(snapshot_of(unspread)).plan.cost.total
    assert len(_zones(ignore, "default/web")) <= 2


def test_schedule_anyway_spread_relaxes_when_a_zone_cannot_take_its_share() -> None:
    zone_b = linux_pool("zone-b", weight=50, limits={"cpu": "2"},
                        requirements=[{"key": ZONE, "operator": "In", "values": ["test-zone-b"]}])
    zone_a = linux_pool("zone-a", requirements=[{"key": ZONE, "operator": "In", "values": ["test-zone-a"]}])

    def objects(when: str) -> list[dict[str, Any]]:
        return [zone_a, zone_b] + [pod(f"web-{i}", cpu="700m", labels={"app": "web"}, owner="web",
                                       spec_extra=_spread("web", ZONE, when)) for i in range(6)]
    soft = solve_verified(snapshot_of(objects("ScheduleAnyway"))).plan
    assert soft.unschedulable == [] and _zones(soft, "default/web")["test-zone-b"] < 3
    hard = solve_verified(snapshot_of(objects("DoNotSchedule"))).plan
    assert hard.unschedulable  # the same split as a hard rule leaves pods pending


def test_preferred_zone_self_anti_affinity_spreads_the_group() -> None:
    objects = [linux_pool("default")] + [pod(f"zk-{i}", cpu="250m", labels={"app": "zk"}, owner="zk",
                                             spec_extra=_affinity("podAntiAffinity", "zk", ZONE, preferred=50))
                                         for i in range(4)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert sorted(_zones(plan, "default/zk").values()) == [1, 1, 1, 1]


def test_preferred_affinity_to_running_pods_picks_their_zone() -> None:
    objects = [linux_pool("default"), _node("old", "test-zone-c", cpu="1"),
               pod("cache-0", cpu="900m", labels={"app": "cache"}, node_name="old")]
    objects += [pod(f"web-{i}", cpu="1", owner="web", spec_extra=_affinity("podAffinity", "cache", ZONE, 80))
                for i in range(3)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert set(_zones(plan, "default/web")) == {"test-zone-c"}


def test_preferred_hostname_self_anti_affinity_is_modelled() -> None:
    objects = [linux_pool("default")] + [pod(f"a-{i}", labels={"app": "a"}, owner="a", spec_extra=_affinity(
        "podAntiAffinity", "a", HOST, preferred=10)) for i in range(2)]
    plan = solve_verified(snapshot_of(objects)).plan  # kept under Respect: rules.hostpreferences
    assert len(plan.node_claims) == 2 and not any("not modelled" in n for n in plan.solver.notes)


# --- required rules towards running pods -----------------------------------------------------------------

def test_required_hostname_affinity_to_running_pods_joins_their_node() -> None:
    objects = [linux_pool("default"), _node("n1", "test-zone-a"), _node("n2", "test-zone-b"),
               pod("cache", cpu="500m", labels={"app": "cache"}, node_name="n2")]
    objects += [pod(f"web-{i}", cpu="1", owner="web", spec_extra=_affinity("podAffinity", "cache", HOST))
                for i in range(4)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert [n.name for n in plan.existing_nodes] == ["n2"] and len(plan.existing_nodes[0].pods) == 3
    assert len(plan.unschedulable) == 1 and plan.node_claims == []
    assert "pod affinity" in plan.unschedulable[0].reason and "n2" in plan.unschedulable[0].reason


def test_required_zone_affinity_to_running_pods_and_verifier_catches_a_stray() -> None:
    objects = [linux_pool("default"), _node("old", "test-zone-d", cpu="1"),
               pod("cache", cpu="900m", labels={"app": "cache"}, node_name="old")]
    objects += [pod(f"web-{i}", cpu="2", owner="web", spec_extra=_affinity("podAffinity", "cache", ZONE))
                for i in range(3)]
    snap = snapshot_of(objects)
    plan = solve_verified(snap).plan
    assert set(_zones(plan, "default/web")) == {"test-zone-d"}
    data = plan.to_json_dict()
    data["nodeClaims"][0].update(zone="test-zone-a", labels={**data["nodeClaims"][0]["labels"], ZONE: "test-zone-a"})
    assert any("affinity on topology.kubernetes.io/zone" in v
               for v in verify(snap, ProvisioningPlan.model_validate(data)))


def test_required_affinity_nothing_matches_is_unschedulable_with_reason() -> None:
    objects = [linux_pool("default"), pod("web", spec_extra=_affinity("podAffinity", "ghost", ZONE))]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable[0].reason == ("required pod affinity with app=ghost on topology.kubernetes.io/zone: "
                                            "no pod matches it, running or pending")


@pytest.mark.parametrize("direction", ["own", "symmetric"])
def test_zone_anti_affinity_against_running_pods_excludes_their_zone(direction: str) -> None:
    cache_spec = _affinity("podAntiAffinity", "web", ZONE) if direction == "symmetric" else {}
    web_spec = _affinity("podAntiAffinity", "cache", ZONE) if direction == "own" else {}
    objects = [linux_pool("default"), _node("old", "test-zone-a", cpu="16"),
               pod("cache", labels={"app": "cache"}, node_name="old", spec_extra=cache_spec)]
    objects += [pod(f"web-{i}", cpu="1", labels={"app": "web"}, owner="web", spec_extra=web_spec) for i in range(3)]
    snap = snapshot_of(objects)
    plan = solve_verified(snap).plan
    assert plan.existing_nodes == [] and "test-zone-a" not in _zones(plan, "default/web")
    data = plan.to_json_dict()
    data["existingNodes"] = [{"name": "old", "pods": ["default/web-0"]}]
    data["nodeClaims"][0]["pods"].remove("default/web-0")
    assert any("anti-affinity" in v for v in verify(snap, ProvisioningPlan.model_validate(data)))


def test_zone_anti_affinity_occupying_every_zone_is_explained() -> None:
    objects = [linux_pool("default")] + [_node(f"n{z}", f"test-zone-{z}", cpu="1") for z in "abcd"]
    objects += [pod(f"cache-{z}", labels={"app": "cache"}, node_name=f"n{z}") for z in "abcd"]
    objects += [pod("web", spec_extra=_affinity("podAntiAffinity", "cache", ZONE))]
    plan = solve_verified(snapshot_of(objects)).plan
    reason = plan.unschedulable[0].reason
    assert "anti-affinity with app=cache" in reason and "all 4 zones" in reason


# --- cross-class hostname anti-affinity ------------------------------------------------------------------

def test_class_repelling_another_pending_class_never_shares_its_nodes() -> None:
    objects = [linux_pool("default")]
    objects += [pod(f"batch-{i}", cpu="250m", labels={"app": "batch"}, owner="batch",
                    spec_extra=_affinity("podAntiAffinity", "db", HOST)) for i in range(6)]
    objects += [pod(f"db-{i}", cpu="250m", labels={"app": "db"}, owner="db") for i in range(2)]
    snap = snapshot_of(objects)
    plan = solve_verified(snap).plan
    assert not any("not modelled" in n for n in plan.solver.notes)
    for claim in plan.node_claims:
        assert not (any("batch" in p for p in claim.pods) and any("db" in p for p in claim.pods))
    assert max(sum("batch" in p for p in c.pods) for c in plan.node_claims) > 1  # the large side still packs
    db_claim = next(i for i, c in enumerate(plan.node_claims) if any("db" in p for p in c.pods))
    mixed = _moved(plan, "default/batch-0", db_claim)
    assert any("anti-affinity" in v for v in verify(snap, mixed))


# --- other topology keys ---------------------------------------------------------------------------------

def _rack_pools() -> list[dict[str, Any]]:
    return [linux_pool(f"rack-{r}", labels={RACK: r}) for r in ("r1", "r2", "r3")]


def test_spread_on_a_custom_label_balances_its_domains() -> None:
    objects = _rack_pools() + [pod(f"web-{i}", cpu="500m", labels={"app": "web"}, owner="web",
                                   spec_extra=_spread("web", RACK)) for i in range(7)]
    snap = snapshot_of(objects)
    plan = solve_verified(snap).plan
    per_rack: dict[str, int] = {}
    for claim in plan.node_claims:
        per_rack[claim.labels[RACK]] = per_rack.get(claim.labels[RACK], 0) + len(claim.pods)
    assert sorted(per_rack.values()) == [2, 2, 3]
    assert not any("not modelled" in n for n in plan.solver.notes)
    # empty one rack's nodes into another: that rack's nodes remain, with 0 pods against 4 or 5
    r1 = [i for i, c in enumerate(plan.node_claims) if c.labels[RACK] == "r1"]
    crowded = plan
    for claim in plan.node_claims:
        if claim.labels[RACK] == "r2":
            for key in claim.pods:
                crowded = _moved(crowded, key, r1[0])
    assert any(f"topology spread on {RACK}" in v for v in verify(snap, crowded))


def test_anti_affinity_on_a_custom_label_holds_one_pod_per_domain() -> None:
    objects = _rack_pools() + [pod(f"zk-{i}", cpu="250m", labels={"app": "zk"}, owner="zk",
                                   spec_extra=_affinity("podAntiAffinity", "zk", RACK)) for i in range(4)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert sorted(c.labels[RACK] for c in plan.node_claims) == ["r1", "r2", "r3"]
    assert len(plan.unschedulable) == 1 and "anti-affinity with app=zk on example.com/rack" in \
        plan.unschedulable[0].reason


def test_spread_on_a_key_no_node_carries_leaves_pods_pending() -> None:
    objects = [linux_pool("default"), pod("web", labels={"app": "web"}, spec_extra=_spread("web", RACK))]
    plan = solve_verified(snapshot_of(objects)).plan
    assert "no node it may use carries the label example.com/rack" in plan.unschedulable[0].reason


# --- minValues (Strict) ----------------------------------------------------------------------------------

TYPES = ["c-1x-amd64-linux", "c-2x-amd64-linux", "c-4x-amd64-linux"]


def _strict_pool(min_values: int | None, weight: int | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES}
    if min_values:
        req["minValues"] = min_values
    return linux_pool("strict", requirements=[req], weight=weight)


def test_min_values_keeps_a_claim_flexible_or_moves_it_to_another_pool() -> None:
    big = pod("big", cpu="3")  # only c-4x holds it: one instance type where minValues asks for two
    loose = solve_verified(snapshot_of([_strict_pool(None), big])).plan
    assert loose.node_claims[0].instance_type == "c-4x-amd64-linux"
    strict = solve_verified(snapshot_of([_strict_pool(2), big])).plan
    assert strict.node_claims == [] and "minValues 2" in strict.unschedulable[0].reason
    fallback = solve_verified(snapshot_of([_strict_pool(2, weight=50), linux_pool("general"), big])).plan
    assert [c.node_pool for c in fallback.node_claims] == ["general"]
    small = solve_verified(snapshot_of([_strict_pool(2), pod("small", cpu="1500m")])).plan
    assert small.node_claims[0].instance_type == "c-2x-amd64-linux"  # c-2x and c-4x both hold it


def test_verifier_flags_a_claim_short_of_min_values() -> None:
    snap = snapshot_of([_strict_pool(2), pod("big", cpu="3")])
    loose = solve_verified(snapshot_of([_strict_pool(None), pod("big", cpu="3")])).plan.to_json_dict()
    loose["unschedulable"] = []
    violations = verify(snap, ProvisioningPlan.model_validate(loose))
    assert any("minValues not met" in v and "1 of minValues 2" in v for v in violations), violations


# --- spread policies -------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["Ignore", "Honor"])
def test_node_taints_policy_decides_whether_a_tainted_zone_counts(policy: str) -> None:
    control_plane = _node("cp", "test-zone-x", taints=[{"key": "node-role.kubernetes.io/control-plane",
                                                        "effect": "NoSchedule"}])
    spread = _spread("web", ZONE)
    spread["topologySpreadConstraints"][0]["nodeTaintsPolicy"] = policy
    objects = [linux_pool("default"), control_plane] + [
        pod(f"web-{i}", cpu="500m", labels={"app": "web"}, owner="web", spec_extra=spread) for i in range(8)]
    snap = snapshot_of(objects)
    plan = solve_verified(snap).plan
    if policy == "Honor":  # the tainted node's zone is no domain: two per usable zone
        assert plan.unschedulable == [] and sorted(_zones(plan, "default/web").values()) == [2, 2, 2, 2]
    else:  # Kubernetes counts test-zone-x (0 pods): every other zone holds at most maxSkew
        assert sorted(_zones(plan, "default/web").values()) == [1, 1, 1, 1] and len(plan.unschedulable) == 4
        assert "test-zone-x count towards the skew" in plan.unschedulable[0].reason
        honoured = solve_verified(snapshot_of([*objects[:2], *[
            pod(f"web-{i}", cpu="500m", labels={"app": "web"}, owner="web",
                spec_extra=_spread("web", ZONE) | {"topologySpreadConstraints": [
                    {**_spread("web", ZONE)["topologySpreadConstraints"][0], "nodeTaintsPolicy": "Honor"}]})
            for i in range(8)]])).plan
        assert any("has skew 2 > maxSkew 1" in v for v in verify(snap, honoured))


# --- required affinity to pending pods of another workload -----------------------------------------------

@pytest.mark.parametrize("cache_spread", [False, True])
def test_zone_affinity_to_pending_pods_of_another_workload(cache_spread: bool) -> None:
    cache_extra = _spread("cache", ZONE) if cache_spread else {}
    objects = [linux_pool("default")]
    objects += [pod(f"cache-{i}", cpu="1", labels={"app": "cache"}, owner="cache", spec_extra=cache_extra)
                for i in range(3)]
    objects += [pod(f"web-{i}", cpu="1", labels={"app": "web"}, owner="web",
                    spec_extra=_affinity("podAffinity", "cache", ZONE)) for i in range(4)]
    snap = snapshot_of(objects)
    plan = solve_verified(snap).plan
    assert plan.unschedulable == [] and not any("not modelled" in n for n in plan.solver.notes)
    web_zones = set(_zones(plan, "default/web"))
    assert len(web_zones) == 1 and web_zones <= set(_zones(plan, "default/cache"))
    if cache_spread:
        assert len(_zones(plan, "default/cache")) == 3
    assert any("finds no matching pod" in v for v in verify(snap, _stray(plan, "default/web-0", "cache")))


def test_affinity_to_pods_that_stay_pending_leaves_the_owner_pending_too() -> None:
    objects = [linux_pool("default"),
               pod("cache", labels={"app": "cache"}, spec_extra=_affinity("podAffinity", "ghost", ZONE)),
               pod("web", labels={"app": "web"}, spec_extra=_affinity("podAffinity", "cache", ZONE)),
               pod("edge", labels={"app": "edge"}, spec_extra=_affinity("podAffinity", "web", ZONE))]
    plan = solve_verified(snapshot_of(objects)).plan
    reasons = {u.pod: u.reason for u in plan.unschedulable}
    assert set(reasons) == {"default/cache", "default/web", "default/edge"}
    assert "none of the 1 pending pods it selects can be scheduled" in reasons["default/edge"]
    tainted = [linux_pool("gpu", taints=[{"key": "gpu", "effect": "NoSchedule"}]),
               pod("cache", labels={"app": "cache"}),  # tolerates nothing: lands nowhere
               pod("web", labels={"app": "web"}, spec_extra=_affinity("podAffinity", "cache", ZONE)
                   | {"tolerations": [{"key": "gpu", "operator": "Exists"}]})]
    plan = solve_verified(snapshot_of(tainted)).plan
    assert {u.pod for u in plan.unschedulable} == {"default/cache", "default/web"}


def test_a_chain_of_affinities_to_pending_pods_shares_one_zone() -> None:
    objects = [linux_pool("default")]
    objects += [pod(f"edge-{i}", cpu="1", labels={"app": "edge"}, owner="edge",
                    spec_extra=_affinity("podAffinity", "web", ZONE)) for i in range(2)]
    objects += [pod(f"web-{i}", cpu="1", labels={"app": "web"}, owner="web",
                    spec_extra=_affinity("podAffinity", "cache", ZONE)) for i in range(2)]
    objects += [pod(f"cache-{i}", cpu="1", labels={"app": "cache"}, owner="cache") for i in range(2)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and len({c.zone for c in plan.node_claims}) == 1


# --- explanations ----------------------------------------------------------------------------------------

def test_limit_reason_names_the_per_node_rule_that_spends_it() -> None:
    objects = [linux_pool("default", limits={"nodes": "2"})] + [
        pod(f"db-{i}", labels={"app": "db"}, owner="db", spec_extra=_affinity("podAntiAffinity", "db", HOST))
        for i in range(3)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable[0].reason == ("NodePool default limit nodes=2 reached (and required pod anti-affinity "
                                            "on kubernetes.io/hostname caps how many of its pods share a node)")
