"""Move shapes the CP-SAT consolidation finds (1→2 splits, N→M, N→0) and the placement rules moved pods keep."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench.fragmented import fragmented_cluster, split_cluster
from model import labels as wk
from solver.disruption.plan import ConsolidationResult
from tests.disruption.helpers import (
    consolidate_verified,
    node,
    on_demand_pool,
    pinned,
    price,
    removed,
    running,
)


def _zone_of(result: ConsolidationResult, objects: list[dict[str, Any]], destination: str) -> str:
    claims = {c.name: c.zone for c in result.plan.node_claims}
    if destination in claims:
        return claims[destination]
    return next(o["metadata"]["labels"][wk.ZONE] for o in objects
                if o["kind"] == "Node" and o["metadata"]["name"] == destination)


def test_split_one_node_into_two_cheaper_ones() -> None:
    result = consolidate_verified(split_cluster())
    plan = result.plan
    assert removed(result) == {"big-0"}
    assert len(plan.node_claims) == 2
    big = plan.remove[0].price
    assert all(c.price < big for c in plan.node_claims)
    assert sum(c.price for c in plan.node_claims) < big
    assert {c.pods[0] for c in plan.node_claims} == {"default/batch-0", "default/sidecar-0"}
    assert plan.cost.savings == pytest.approx(big - sum(c.price for c in plan.node_claims), abs=1e-6)
    assert plan.cost.savings > 0.3
    # Karpenter replaces N nodes by at most one: nothing to gain here
    assert plan.cost.yardstick_savings == 0.0
    assert {m.to for m in plan.moves} == {c.name for c in plan.node_claims}


@pytest.mark.parametrize(("nodes", "seed"), [(40, 1), (100, 3)])
def test_fragmented_cluster_beats_the_yardstick_within_budget(nodes: int, seed: int,
                                                              record_property: Any) -> None:
    objects = fragmented_cluster(nodes, seed, budget="10%")
    result = consolidate_verified(objects, time_limit=4.0)
    plan = result.plan
    yardstick = plan.cost.yardstick_savings
    assert yardstick is not None
    assert plan.cost.savings >= yardstick - 1e-6
    ratio = plan.cost.savings / yardstick if yardstick > 0 else float("inf")
    record_property("savings_vs_yardstick", ratio)
    print(f"{nodes} nodes: saves {plan.cost.savings:.4f} $/h, yardstick {yardstick:.4f} $/h (×{ratio:.2f})")
    assert plan.remove, "a fragmented cluster always has something to consolidate"
    # 10 % of the pool's nodes, rounded up
    assert [(b.allowed, b.used) for b in plan.budgets] == [(-(-nodes // 10), len(plan.remove))]
    assert all(b.used <= b.allowed for b in plan.budgets)
    assert plan.cost.lower_bound is not None and plan.cost.lower_bound <= plan.cost.after + 1e-6
    evicted = {f"default/{o['metadata']['name']}": o["spec"]["nodeName"] for o in objects
               if o["kind"] == "Pod" and o["spec"].get("nodeName") in removed(result)}
    assert Counter(m.pod for m in plan.moves) == Counter(evicted.keys())
    assert all(evicted[m.pod] == m.source for m in plan.moves)
    assert not {m.to for m in plan.moves} & removed(result)


def test_n_to_zero_deletes_nodes_whose_pods_fit_elsewhere() -> None:
    # three c-4x nodes with one 1-cpu pod each: all three pods fit on any one of them (3.9 cpu)
    objects: list[dict[str, Any]] = [on_demand_pool()]
    for i in range(3):
        objects += [node(f"n-{i}"), running(f"p-{i}", f"n-{i}")]
    result = consolidate_verified(objects)
    plan = result.plan
    assert len(plan.remove) == 2 and plan.node_claims == []
    assert all(r.reason == "Underutilized" for r in plan.remove)
    (kept,) = {"n-0", "n-1", "n-2"} - removed(result)
    assert {m.to for m in plan.moves} == {kept}
    assert plan.cost.after == pytest.approx(price("c-4x"), abs=1e-6)
    assert plan.disruption.evictions == 2


def test_n_to_m_two_big_nodes_become_a_cheaper_pair() -> None:
    # two c-48x nodes, each running a 31-cpu and a 1.5-cpu pod (split_cluster twice): 65 cpu fit on no single
    # node cheaper than a c-96x, but both big pods and one small one fit on a c-64x (63.5 ≤ 63.9 cpu) and the
    # other small one on a c-2x — 2→2, cheaper than anything Karpenter's N→1 can reach
    objects: list[dict[str, Any]] = [on_demand_pool()]
    for i in range(2):
        objects += [node(f"big-{i}", "c-48x"), running(f"batch-{i}", f"big-{i}", "31"),
                    running(f"sidecar-{i}", f"big-{i}", "1500m")]
    result = consolidate_verified(objects)
    plan = result.plan
    assert removed(result) == {"big-0", "big-1"}
    assert sorted(c.instance_type for c in plan.node_claims) == ["c-2x-amd64-linux", "c-64x-amd64-linux"]
    assert plan.cost.after == pytest.approx(price("c-64x") + price("c-2x"), abs=1e-6)
    assert plan.cost.yardstick_savings is not None and plan.cost.savings > plan.cost.yardstick_savings + 0.1


def _spread(app: str) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": wk.ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": app}}}]}


def test_zone_spread_pods_stay_in_their_zone() -> None:
    # web: two pods in zone a (a-0, a-1), one in zone b (b-0); every node has room for the others. Without the
    # spread rule all three would share one node; with it, moving zone a's pods to zone b breaks maxSkew 1.
    objects: list[dict[str, Any]] = [on_demand_pool()]
    for name, zone in (("a-0", "test-zone-a"), ("a-1", "test-zone-a"), ("b-0", "test-zone-b")):
        objects += [node(name, zone=zone),
                    running(f"web-{name}", name, labels={"app": "web"}, spec_extra=_spread("web"))]
    result = consolidate_verified(objects)
    plan = result.plan
    assert plan.moves, "a-0 and a-1 can share a node in zone a"
    zones_before = Counter(_zone_of(result, objects, o["spec"]["nodeName"]) for o in objects if o["kind"] == "Pod")
    for move in plan.moves:
        assert _zone_of(result, objects, move.to) == _zone_of(result, objects, move.source), move
    final: dict[str, str] = {o["metadata"]["name"]: o["spec"]["nodeName"] for o in objects if o["kind"] == "Pod"}
    final.update({m.pod.split("/")[1]: m.to for m in plan.moves})
    assert Counter(_zone_of(result, objects, n) for n in final.values()) == zones_before


def test_zone_anti_affinity_pods_stay_in_their_zone() -> None:
    anti = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": wk.ZONE, "labelSelector": {"matchLabels": {"app": "db"}}}]}}}
    objects: list[dict[str, Any]] = [on_demand_pool(),
                                     node("a-0", zone="test-zone-a"), node("a-1", zone="test-zone-a"),
                                     node("b-0", zone="test-zone-b"),
                                     running("filler-a", "a-0", "2"),
                                     running("db-a", "a-1", labels={"app": "db"}, spec_extra=anti),
                                     running("db-b", "b-0", labels={"app": "db"}, spec_extra=anti)]
    result = consolidate_verified(objects)
    plan = result.plan
    db_moves = [m for m in plan.moves if m.pod.startswith("default/db-")]
    assert db_moves, "db-a's node a-1 can go: a-0 in the same zone has room"
    for move in db_moves:
        assert _zone_of(result, objects, move.to) == _zone_of(result, objects, move.source), move
    # one db per zone after the plan too
    final = {"db-a": "a-1", "db-b": "b-0"} | {m.pod.split("/")[1]: m.to for m in db_moves}
    assert len({_zone_of(result, objects, n) for n in final.values()}) == 2


def test_hostname_anti_affinity_is_respected_at_the_destination() -> None:
    anti = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": wk.HOSTNAME, "labelSelector": {"matchLabels": {"app": "cache"}}}]}}}
    objects: list[dict[str, Any]] = [on_demand_pool()]
    for i in range(3):
        objects += [node(f"n-{i}"), running(f"cache-{i}", f"n-{i}", labels={"app": "cache"}, spec_extra=anti)]
    objects.append(running("web-0", "n-0"))
    result = consolidate_verified(objects)
    plan = result.plan
    final = {f"default/cache-{i}": f"n-{i}" for i in range(3)} | {"default/web-0": "n-0"}
    final.update({m.pod: m.to for m in plan.moves})
    caches = [final[f"default/cache-{i}"] for i in range(3)]
    assert len(set(caches)) == 3, final
    assert not set(final.values()) & removed(result)
    # without the rule the three 1-cpu caches would share one c-4x; with it every cache keeps a node of its own,
    # and the cheapest way is one c-2x per lone cache
    assert plan.cost.after == pytest.approx(price("c-4x") + 2 * price("c-2x"), abs=1e-6)


def test_hostname_spread_holds_after_the_moves() -> None:
    spread = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": wk.HOSTNAME,
                                             "whenUnsatisfiable": "DoNotSchedule",
                                             "labelSelector": {"matchLabels": {"app": "web"}}}]}
    objects: list[dict[str, Any]] = [on_demand_pool(), node("big", "c-8x"), running("big-pod", "big", "1")]
    for i in range(3):
        objects += [node(f"n-{i}"), running(f"web-{i}", f"n-{i}", labels={"app": "web"}, spec_extra=spread)]
    result = consolidate_verified(objects)  # the verifier's final-state check covers the spread
    plan = result.plan
    assert plan.cost.savings > 0
    assert plan.cost.yardstick_savings is not None and plan.cost.savings >= plan.cost.yardstick_savings - 1e-6


def test_pod_with_a_bound_zonal_volume_stays_in_the_volume_zone() -> None:
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-b"},
          "spec": {"capacity": {"storage": "10Gi"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
              {"matchExpressions": [{"key": wk.ZONE, "operator": "In", "values": ["test-zone-b"]}]}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data-db", "namespace": "default"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                    "volumeName": "pv-b"}}
    volume = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db"}}]}
    # a-0 (zone a) has room, but db's volume lives in zone b: it goes to a c-2x in zone b instead
    objects: list[dict[str, Any]] = [on_demand_pool(), pv, pvc, node("a-0", "c-8x", zone="test-zone-a"),
                                     pinned("a-pod", "a-0"), node("b-0", zone="test-zone-b"),
                                     running("db", "b-0", spec_extra=volume)]
    result = consolidate_verified(objects)
    assert removed(result) == {"b-0"}
    assert [(c.instance_type, c.zone) for c in result.plan.node_claims] == [("c-2x-amd64-linux", "test-zone-b")]
    assert [m.to for m in result.plan.moves] == [result.plan.node_claims[0].name]


def _unusable(kind: str, obj: dict[str, Any]) -> None:
    if kind == "cordoned":
        obj["spec"]["unschedulable"] = True
    elif kind == "NotReady":
        obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    elif kind == "deleting":
        obj["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    else:
        obj["spec"]["taints"] = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]


@pytest.mark.parametrize("kind", ["cordoned", "NotReady", "deleting", "disrupted-taint"])
def test_pods_never_move_onto_an_unusable_node(kind: str) -> None:
    # keeper has room but cannot take pods: target's pod goes to a replacement (a c-2x) instead
    objects: list[dict[str, Any]] = [on_demand_pool(), node("keeper", "c-8x"), running("keep-pod", "keeper"),
                                     node("target"), running("t-pod", "target")]
    _unusable(kind, objects[1])
    result = consolidate_verified(objects)
    assert "keeper" not in removed(result)
    assert [m.to for m in result.plan.moves] == [c.name for c in result.plan.node_claims]
    assert [c.instance_type for c in result.plan.node_claims] == ["c-2x-amd64-linux"]


@pytest.mark.parametrize("daemonset", [False, True])
def test_daemon_pods_stay_and_replacements_leave_room_for_them(daemonset: bool) -> None:
    agent = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
             "spec": {"selector": {"matchLabels": {"app": "agent"}},
                      "template": {"metadata": {"labels": {"app": "agent"}},
                                   "spec": {"containers": [{"name": "a", "resources": {
                                       "requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}}
    daemon_pod = running("agent-target", "target", "500m", "256Mi", labels={"app": "agent"})
    daemon_pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                                  "uid": "uid-ds-agent", "controller": True}]
    objects = [on_demand_pool(), node("target", "c-8x"), running("app", "target", "1700m"), daemon_pod]
    if daemonset:
        objects.append(agent)
    result = consolidate_verified(objects)
    plan = result.plan
    assert removed(result) == {"target"}
    assert [m.pod for m in plan.moves] == ["default/app"] and plan.disruption.evictions == 1
    # 1.7 cpu fit a c-2x (1.9) alone; with the DaemonSet's 0.5 cpu on every new node it takes a c-4x
    assert [c.instance_type for c in plan.node_claims] == ["c-4x-amd64-linux" if daemonset else "c-2x-amd64-linux"]
