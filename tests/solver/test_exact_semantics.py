"""Kubernetes semantics, exactly: shapes that once returned a wrong answer, each asserted from the Kubernetes
documentation's rule rather than from what nodeplan printed.

The rules, as the Kubernetes reference states them:

- Topology spread (``TopologySpreadConstraint``): the labelSelector finds the pods *counted* per domain; the
  constraint binds the pod that carries it. ``maxSkew`` is the largest permitted difference between the
  matching pods in the pod's domain and the global minimum over eligible domains (0 while fewer than
  ``minDomains`` are eligible). Eligible domains come from *nodes*: those passing the pod's nodeAffinity /
  nodeSelector (``nodeAffinityPolicy: Honor``, the default) and, with ``nodeTaintsPolicy: Honor``, whose taints
  it tolerates. A zone with no node is no domain.
- Inter-pod anti-affinity: a pod may not land in a domain holding a pod its required term selects, and a pod
  whose term selects an incoming pod keeps it out (symmetric). Pods that carry no term but are selected by
  another's term are only kept away from that pod, not from each other.
- Inter-pod affinity to its own pods: every pod of the group needs a matching pod in its domain (the first
  may go anywhere), so the group needs one domain that can hold it.
- Host ports: a node binds each (hostIP, hostPort, protocol) once; an empty hostIP or 0.0.0.0 binds every
  address. Two pods binding one port on different specific addresses may share a node.
"""

from __future__ import annotations

from typing import Any

from bench.workloads import linux_pool, pod
from model.affinity import HostPort
from model.plan import ProvisioningPlan
from solver.classes import build_classes
from solver.rules import counters
from solver.rules.ports import host_port_counters
from tests.conftest import snapshot_of, solve_verified

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
WEB = {"tier": "web"}

def _spread(selector: dict[str, str], key: str = ZONE, skew: int = 1) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": selector}}]}


def _term(kind: str, selector: dict[str, str], key: str) -> dict[str, Any]:
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": selector}, "topologyKey": key}]}}}


def _zones_of(zones: list[str]) -> list[dict[str, Any]]:
    return [{"key": ZONE, "operator": "In", "values": zones}]


def _node(name: str, zone: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", HOST: name, ZONE: zone}},
            "spec": {}, "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def _where(plan: ProvisioningPlan) -> dict[str, str]:
    """Pod key → the zone it lands in (new claims) or the existing node's name."""
    out = {key: claim.zone for claim in plan.node_claims for key in claim.pods}
    out.update({key: node.name for node in plan.existing_nodes for key in node.pods})
    return out


def _count(where: dict[str, str], prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, zone in where.items():
        if key.startswith(prefix):
            out[zone] = out.get(zone, 0) + 1
    return out


# --- 1. rule-free pods another workload's selector matches keep their own selection ---------------------

def test_pods_matched_by_another_workloads_zone_spread_keep_their_own_node_selector() -> None:
    # b carries no rule and may only run in zone d; a's spread counts b there (same namespace, selector
    # matches) and balances around it: d holds 2 b, so a fills a, b, c first and the skew stays ≤ 1
    objects = [linux_pool()]
    objects += [pod(f"a-{i}", labels={"app": "a", **WEB}, owner="a", spec_extra=_spread(WEB)) for i in range(4)]
    objects += [pod(f"b-{i}", labels={"app": "b", **WEB}, owner="b",
                    spec_extra={"nodeSelector": {ZONE: "test-zone-d"}}) for i in range(2)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == []
    where = _where(plan)
    assert _count(where, "default/b-") == {"test-zone-d": 2}
    everyone = _count(where, "default/")
    assert max(everyone.values()) - min(everyone.values()) <= 1 and len(everyone) == 4


def test_matched_pods_on_nodes_the_constraint_does_not_count_are_neither_counted_nor_pinned() -> None:
    # nodeAffinityPolicy Honor (the default): a's constraint counts pods on nodes a's own nodeSelector accepts
    # only, so the b pods on team=y nodes in zone d do not count and a spreads one per zone
    objects = [linux_pool("x", labels={"team": "x"}), linux_pool("y", labels={"team": "y"})]
    objects += [pod(f"a-{i}", labels={"app": "a", **WEB}, owner="a",
                    spec_extra=_spread(WEB) | {"nodeSelector": {"team": "x"}}) for i in range(4)]
    objects += [pod(f"b-{i}", labels={"app": "b", **WEB}, owner="b",
                    spec_extra={"nodeSelector": {"team": "y", ZONE: "test-zone-d"}}) for i in range(3)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == []
    where = _where(plan)
    assert _count(where, "default/a-") == dict.fromkeys(("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"), 1)
    assert _count(where, "default/b-") == {"test-zone-d": 3}


def test_pods_matched_by_another_workloads_zone_anti_affinity_keep_their_own_node_selector() -> None:
    # a repels every tier=web pod from its zone; b (rule-free, zone a only) stays in zone a, and the two a
    # pods take two other zones. The b pods may share zone a with each other (they carry no term).
    objects = [linux_pool()]
    objects += [pod(f"a-{i}", labels={"app": "a", **WEB}, owner="a", spec_extra=_term("podAntiAffinity", WEB, ZONE))
                for i in range(2)]
    objects += [pod(f"b-{i}", labels={"app": "b", **WEB}, owner="b",
                    spec_extra={"nodeSelector": {ZONE: "test-zone-a"}}) for i in range(2)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == []
    where = _where(plan)
    assert _count(where, "default/b-") == {"test-zone-a": 2}
    a_zones = _count(where, "default/a-")
    assert len(a_zones) == 2 and "test-zone-a" not in a_zones


def test_flexible_rule_free_pods_avoid_the_zones_anti_affinity_takes_without_being_pinned() -> None:
    objects = [linux_pool(requirements=_zones_of(["test-zone-a", "test-zone-b", "test-zone-c"]))]
    objects += [pod(f"a-{i}", labels={"app": "a", **WEB}, owner="a", spec_extra=_term("podAntiAffinity", WEB, ZONE))
                for i in range(2)]
    objects += [pod(f"b-{i}", labels={"app": "b", **WEB}, owner="b") for i in range(3)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == []
    where = _where(plan)
    a_zones, b_zones = _count(where, "default/a-"), _count(where, "default/b-")
    assert len(a_zones) == 2 and not set(a_zones) & set(b_zones)


# --- 2. existing nodes' domains hold only what is free on them --------------------------------------------

def test_a_full_existing_zone_caps_the_others_instead_of_taking_a_share_it_cannot_hold() -> None:
    # the NodePool offers zones a and b; zone c is one existing node with room for one pod. Kubernetes counts
    # zone c (the node passes the pods' node affinity): it ends with 1, so a and b may hold at most 2 each
    objects = [linux_pool(requirements=_zones_of(["test-zone-a", "test-zone-b"])), _node("old-c", "test-zone-c", "2")]
    objects += [pod(f"s-{i}", cpu="1500m", labels={"app": "s"}, owner="s", spec_extra=_spread({"app": "s"}))
                for i in range(9)]
    plan = solve_verified(snapshot_of(objects)).plan
    counts = _count(_where(plan), "default/s-")
    assert counts == {"test-zone-a": 2, "test-zone-b": 2, "old-c": 1}
    assert len(plan.unschedulable) == 4
    assert all("topology spread with app=s on topology.kubernetes.io/zone" in u.reason for u in plan.unschedulable)


# --- 3. a self-affine group is homed where it fits; a zone too small for the pod is no domain ------------

def _small_and_big_pools() -> list[dict[str, Any]]:
    small = linux_pool("small", requirements=[
        *_zones_of(["test-zone-a"]), {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["2"]}])
    return [small, linux_pool("big", requirements=_zones_of(["test-zone-b"]))]


def test_a_zone_self_affine_group_is_homed_where_an_instance_type_holds_its_pods() -> None:
    # zone a (first by name) only offers 1-cpu types, which cannot hold a 1.5-cpu pod: the group lives in b
    objects = _small_and_big_pools() + [
        pod(f"g-{i}", cpu="1500m", labels={"app": "g"}, owner="g", spec_extra=_term("podAffinity", {"app": "g"}, ZONE))
        for i in range(3)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and _count(_where(plan), "default/g-") == {"test-zone-b": 3}


def test_a_zone_whose_offerings_are_too_small_is_no_spread_domain() -> None:
    # no node in zone a can hold the pods and none will be launched there, so Kubernetes sees one domain (b)
    objects = _small_and_big_pools() + [
        pod(f"s-{i}", cpu="1500m", labels={"app": "s"}, owner="s", spec_extra=_spread({"app": "s"})) for i in range(4)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and _count(_where(plan), "default/s-") == {"test-zone-b": 4}


# --- 4. host ports conflict by (hostIP, protocol, port) -------------------------------------------------

def _binds(ip: str, protocol: str = "TCP") -> dict[str, Any]:
    port = {"containerPort": 80, "hostPort": 80, "protocol": protocol} | ({"hostIP": ip} if ip else {})
    return {"containers": [{"name": "app", "image": "registry.example/app:1", "ports": [port],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}


def test_one_host_port_on_two_specific_addresses_may_share_a_node() -> None:
    objects = [linux_pool()]
    objects += [pod(f"one-{i}", labels={"app": "one"}, owner="one", spec_extra=_binds("10.0.0.1")) for i in range(2)]
    objects += [pod(f"two-{i}", labels={"app": "two"}, owner="two", spec_extra=_binds("10.0.0.2")) for i in range(2)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and len(plan.node_claims) == 2  # one of each per node: 10.0.0.1 twice clashes
    for claim in plan.node_claims:
        assert sorted(p.split("-")[0] for p in claim.pods) == ["default/one", "default/two"]


def test_a_wildcard_host_port_clashes_with_every_address_and_counters_match_conflicts() -> None:
    objects = [linux_pool(), pod("any", labels={"app": "any"}, spec_extra=_binds("")),
               pod("one", labels={"app": "one"}, spec_extra=_binds("10.0.0.1")),
               pod("udp", labels={"app": "udp"}, spec_extra=_binds("10.0.0.1", "UDP"))]
    plan = solve_verified(snapshot_of(objects)).plan
    homes = {key: claim.name for claim in plan.node_claims for key in claim.pods}
    assert homes["default/any"] != homes["default/one"] and len(plan.node_claims) == 2  # udp joins either
    # the counters keep two classes apart exactly when ``HostPort.conflicts`` says they clash
    classes = build_classes(snapshot_of(objects).pending_pods())
    built = host_port_counters(classes)
    for a in classes:
        for b in classes:
            if a.index < b.index:
                clash = any(p.conflicts(q) for p in a.representative.host_ports for q in b.representative.host_ports)
                apart = any(c.uses.get(a.index, 0) + c.uses.get(b.index, 0) > c.new_capacity for c in built)
                assert clash == apart, (a.name, b.name)


def test_a_daemon_on_one_address_leaves_the_node_open_to_another_address() -> None:
    counter = next(c for c in host_port_counters(build_classes(snapshot_of(
        [pod("two", spec_extra=_binds("10.0.0.2"))]).pending_pods())))
    daemon = snapshot_of([pod("d", spec_extra=_binds("10.0.0.1"))]).pods[0]
    wildcard = snapshot_of([pod("w", spec_extra=_binds("0.0.0.0"))]).pods[0]
    assert counter.capacity_with([daemon]) == 1 and counter.capacity_with([wildcard]) == 0
    assert HostPort(port=80, host_ip="10.0.0.2").conflicts(HostPort(port=80, host_ip="0.0.0.0"))


# --- 5. per-node counters charge what Kubernetes charges -------------------------------------------------

def test_rule_free_pods_a_hostname_anti_affinity_selects_may_share_a_node_with_each_other() -> None:
    # a keeps every tier=web pod off its node; the three b pods carry no term and may share one
    objects = [linux_pool()]
    objects += [pod(f"a-{i}", labels={"app": "a", **WEB}, owner="a", spec_extra=_term("podAntiAffinity", WEB, HOST))
                for i in range(2)]
    objects += [pod(f"b-{i}", labels={"app": "b", **WEB}, owner="b") for i in range(3)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and len(plan.node_claims) == 3
    homes = {key: claim.name for claim in plan.node_claims for key in claim.pods}
    assert len({homes[f"default/b-{i}"] for i in range(3)}) == 1
    assert len({homes["default/a-0"], homes["default/a-1"], homes["default/b-0"]}) == 3
    assert not any("kept one per node" in note for note in plan.solver.notes)


def test_rule_free_pods_a_hostname_spread_selects_gather_and_the_encoding_says_where_it_is_strict() -> None:
    # maxSkew 1 on the hostname with a global minimum of 0: a node holding an a pod holds no other match;
    # the b pods carry no constraint and may share one node
    objects = [linux_pool()]
    objects += [pod(f"a-{i}", labels={"app": "a", **WEB}, owner="a", spec_extra=_spread(WEB, HOST)) for i in range(2)]
    objects += [pod(f"b-{i}", labels={"app": "b", **WEB}, owner="b") for i in range(3)]
    result = solve_verified(snapshot_of(objects))
    homes = {key: claim.name for claim in result.plan.node_claims for key in claim.pods}
    assert result.plan.unschedulable == [] and len({homes[f"default/b-{i}"] for i in range(3)}) == 1
    notes = counters.conservative(result.problem.classes, counters.spread_counters(result.problem.classes))
    assert len(notes) == 1 and "global minimum above 0" in notes[0]


def test_conservative_names_the_counters_stricter_than_kubernetes() -> None:
    objects = [linux_pool()]
    objects += [pod(f"a-{i}", labels={"app": "a", **WEB}, owner="a", spec_extra=_spread(WEB, HOST, skew=2))
                for i in range(2)]
    objects += [pod(f"b-{i}", labels={"app": "b", **WEB}, owner="b") for i in range(3)]
    objects += [pod(f"x-{i}", labels={"app": "x"}, owner="x", spec_extra=_term("podAntiAffinity", {"app": "y"}, HOST))
                for i in range(2)]
    objects += [pod(f"y-{i}", labels={"app": "y"}, owner="y") for i in range(3)]
    classes = build_classes(snapshot_of(objects).pending_pods(), frozenset({"app", "tier"}))
    built = counters.anti_affinity_counters(classes) + counters.spread_counters(classes)
    notes = counters.conservative(classes, built)
    spread = [n for n in notes if n.startswith("spread:")]
    assert len(spread) == 1 and "default/b" in spread[0] and "maxSkew 2" in spread[0]
    assert any(n.startswith("repel-other:") and "default/x" in n for n in notes)
    assert not any(n.startswith("repel:") for n in notes)
