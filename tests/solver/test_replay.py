"""The bind-order replay (``solver.verify.replay``), written from the kube-scheduler's filter rules as the
Kubernetes documentation states them, not from what nodeplan outputs: plans here are written by hand.

- Topology spread (DoNotSchedule) is checked when each pod binds: ``matching pods in the node's domain + 1
  (if the pod matches) - global minimum <= maxSkew``, the minimum over eligible domains; nodeTaintsPolicy
  defaults to Ignore (tainted nodes still count as domains), nodeAffinityPolicy to Honor.
- Required pod affinity needs a matching pod already in the domain, except for the first pod of a group
  whose term selects itself; required anti-affinity refuses a domain holding a selected pod, both ways.
- Host ports clash on equal port and protocol with overlapping host IPs; requests must fit what is left.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from bench.workloads import as_list, linux_pool, pod
from cli.app import app
from model import labels as wk
from model.plan import ProvisioningPlan
from model.pod import Pod
from model.requirements import Requirements
from model.resources import Resources
from model.snapshot import Snapshot
from model.taints import Taint, untolerated
from providers.kwok import kwok_catalog
from solver.verify import verify
from solver.verify.replay import (
    AFFINITY,
    ANTI_AFFINITY,
    EXISTING_ANTI_AFFINITY,
    PORTS,
    RESOURCES,
    SPREAD,
    OrderOutcome,
    replay,
    replay_order,
)
from tests.conftest import snapshot_of

ZONE, HOST = wk.ZONE, wk.HOSTNAME
TYPE = "c-2x-amd64-linux"          # KWOK: 1900m allocatable, two 900m pods per node
PRICES = {(it.name, o.zone): o.price for it in kwok_catalog() for o in it.offerings if o.capacity_type == "on-demand"}


def _claim(name: str, zone: str, pods: Sequence[str], pool: str = "default", instance_type: str = TYPE
           ) -> dict[str, Any]:
    return {"name": name, "nodePool": pool, "instanceType": instance_type, "zone": zone,
            "capacityType": "on-demand", "price": PRICES[(instance_type, zone)],
            "pods": [f"default/{p}" for p in pods]}


def _plan(*claims: dict[str, Any], existing: Mapping[str, Sequence[str]] | None = None) -> ProvisioningPlan:
    total = sum(c["price"] for c in claims)
    return ProvisioningPlan.model_validate({
        "nodeClaims": list(claims),
        "existingNodes": [{"name": n, "pods": [f"default/{p}" for p in ps]} for n, ps in (existing or {}).items()],
        "cost": {"total": total, "lowerBound": total}, "solver": {"status": "FEASIBLE", "wallSeconds": 0.0}})


def _spread(app: str, key: str = ZONE, skew: int = 1, **extra: Any) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": app}}, **extra}]}


def _term(kind: str, app: str, key: str) -> dict[str, Any]:
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}}


def _web(name: str, spec: dict[str, Any], cpu: str = "900m", app: str = "web") -> dict[str, Any]:
    return pod(name, cpu=cpu, memory="256Mi", labels={"app": app}, spec_extra=spec)


def _keys(*names: str) -> list[str]:
    return [f"default/{n}" for n in names]


def _dedicated(zone_pools: Sequence[str]) -> list[dict[str, Any]]:
    """One NodePool per letter, tainted dedicated=<letter>:NoSchedule."""
    return [linux_pool(f"pool-{z}", taints=[{"key": "dedicated", "value": z, "effect": "NoSchedule"}])
            for z in zone_pools]


def _tolerate(z: str) -> list[dict[str, str]]:
    return [{"key": "dedicated", "operator": "Equal", "value": z, "effect": "NoSchedule"}]


# --- zone topology spread: the README's claim is false -----------------------------------------------------

def _two_by_two_objects(policy: str | None = None) -> list[dict[str, Any]]:
    extra: dict[str, Any] = {"nodeTaintsPolicy": policy} if policy else {}
    return _dedicated("ab") + [
        _web(f"w{i}", {**_spread("web", **extra), "tolerations": _tolerate(z)}) for i, z in enumerate("aabb")]


def _two_by_two(policy: str | None = None) -> tuple[Snapshot, ProvisioningPlan]:
    """Two zones planned 2/2. Each zone's node is tainted for its own two pods only, so a pod refused on its
    node has nowhere else to go; with nodeTaintsPolicy Ignore (the default) both zones count for every pod."""
    plan = _plan(_claim("node-a", "test-zone-a", ["w0", "w1"], pool="pool-a"),
                 _claim("node-b", "test-zone-b", ["w2", "w3"], pool="pool-b"))
    return snapshot_of(_two_by_two_objects(policy)), plan


def test_zone_spread_two_by_two_is_valid_finally_but_not_in_every_bind_order() -> None:
    snapshot, plan = _two_by_two()
    assert verify(snapshot, plan) == []                               # final counts 2/2: skew 0
    outcome = replay_order(snapshot, plan, _keys("w0", "w1", "w2", "w3"))
    # w1 binds second: zone a holds 1 matching pod, zone b 0: 1 + 1 - 0 = 2 > maxSkew 1
    assert outcome.stranded == ("default/w1",)
    assert outcome.stranded_by == {"default/w1": f"{SPREAD}({ZONE})"}
    assert outcome.never_bound == ()                                  # once zone b has a pod, w1 binds on retry
    assert replay_order(snapshot, plan, _keys("w0", "w2", "w1", "w3")).stranded == ()   # interleaved: fine
    report = replay(snapshot, plan, orders=20)
    assert report.planned is not None and report.planned.stranded == ("default/w1",)  # the plan's own listing
    assert report.orders_stranding >= 2 and report.max_stranded == 1 and report.orders_never_bound == 0
    assert set(report.by_rule) == {f"{SPREAD}({ZONE})"}
    assert not report.ok and report.short().startswith(f"{report.orders_stranding}/21")


def test_nodes_a_pod_cannot_tolerate_are_no_domain_under_node_taints_policy_honor() -> None:
    snapshot, plan = _two_by_two(policy="Honor")   # each pod's only eligible domain is its own zone
    assert replay(snapshot, plan, orders=20).orders_stranding == 0


def test_interchangeable_pods_refused_on_their_node_bind_on_another_plan_node() -> None:
    """Without the taints, the pod refused in zone a takes zone b's free room and zone b's pod takes the room
    it left: refused on its planned node, yet not stranded."""
    objects = [linux_pool()] + [_web(f"w{i}", _spread("web")) for i in range(4)]
    plan = _plan(_claim("node-a", "test-zone-a", ["w0", "w1"]), _claim("node-b", "test-zone-b", ["w2", "w3"]))
    snapshot = snapshot_of(objects)
    assert verify(snapshot, plan) == []
    outcome = replay_order(snapshot, plan, _keys("w0", "w1", "w2", "w3"))
    assert outcome.stranded == () and outcome.moved == 2
    assert outcome.refused == {f"{SPREAD}({ZONE})": 1, RESOURCES: 1}   # w1 by the skew, w3 by w1 taking its room
    assert replay(snapshot, plan, orders=30).orders_stranding == 0


def test_min_domains_counts_the_global_minimum_as_zero_while_domains_are_missing() -> None:
    """minDomains 3 with two zones: the minimum is 0, so each zone takes at most maxSkew pods."""
    objects = [linux_pool()] + [_web(f"w{i}", _spread("web", skew=2, minDomains=3)) for i in range(4)]
    snapshot = snapshot_of(objects)
    fine = _plan(_claim("node-a", "test-zone-a", ["w0", "w1"]), _claim("node-b", "test-zone-b", ["w2", "w3"]))
    assert replay(snapshot, fine, orders=20).orders_stranding == 0
    crowded = _plan(_claim("node-a", "test-zone-a", ["w0", "w1"]), _claim("node-a2", "test-zone-a", ["w2"]),
                    _claim("node-b", "test-zone-b", ["w3"]))
    outcome = replay_order(snapshot, crowded, _keys("w0", "w1", "w2", "w3"))
    assert outcome.refused.get(f"{SPREAD}({ZONE})") == 1 and outcome.stranded == ()   # w2 goes to zone b


def test_a_pod_its_own_selector_does_not_match_adds_nothing_to_the_skew() -> None:
    """A reader pod spreads by app=web but is labelled app=reader: next to one web pod in zone a and none in
    zone b its skew is 1 + 0 - 0; a web pod with the same constraint would count itself: 1 + 1 - 0 > 1."""
    objects = [linux_pool(), _web("web0", {}), _web("reader", _spread("web"), cpu="300m", app="reader"),
               _web("web1", _spread("web"), cpu="300m"), pod("other", cpu="900m")]
    snapshot = snapshot_of(objects)
    plan = _plan(_claim("node-a", "test-zone-a", ["web0", "reader"]), _claim("node-a2", "test-zone-a", ["web1"]),
                 _claim("node-b", "test-zone-b", ["other"]))
    outcome = replay_order(snapshot, plan, _keys("other", "web0", "reader", "web1"))
    assert outcome.refused == {f"{SPREAD}({ZONE})": 1} and outcome.moved == 1   # web1, not reader


# --- anti-affinity, ports and resources hold in any order ------------------------------------------------

def test_hostname_anti_affinity_plan_is_order_independent() -> None:
    objects = [linux_pool()] + [_web(f"w{i}", _term("podAntiAffinity", "web", HOST)) for i in range(4)]
    plan = _plan(*(_claim(f"node-{i}", f"test-zone-{'ab'[i % 2]}", [f"w{i}"]) for i in range(4)))
    snapshot = snapshot_of(objects)
    assert verify(snapshot, plan) == []
    report = replay(snapshot, plan, orders=30)
    assert report.orders_stranding == 0 and all(o.moved == 0 and not o.refused for o in report.outcomes)


def test_anti_affinity_refuses_a_shared_node_in_either_direction() -> None:
    """A pod without anti-affinity is still refused next to a bound pod whose term selects it."""
    objects = [linux_pool(), _web("guard", _term("podAntiAffinity", "web", HOST), app="guard"),
               _web("w0", {}), _web("w1", _term("podAntiAffinity", "guard", HOST))]
    snapshot = snapshot_of(objects)
    plan = _plan(_claim("node-a", "test-zone-a", ["guard", "w0"]), _claim("node-b", "test-zone-a", ["w1"]))
    outcome = replay_order(snapshot, plan, _keys("guard", "w0", "w1"))
    assert outcome.refused == {f"{EXISTING_ANTI_AFFINITY}({HOST})": 1} and outcome.moved == 1
    crowded = _plan(_claim("node-a", "test-zone-a", ["w1", "guard"]), _claim("node-b", "test-zone-a", ["w0"]))
    outcome = replay_order(snapshot, crowded, _keys("guard", "w1", "w0"))
    assert outcome.refused == {f"{ANTI_AFFINITY}({HOST})": 1} and outcome.stranded == ()


def _port(host_port: int, protocol: str = "TCP", host_ip: str = "") -> dict[str, Any]:
    port: dict[str, Any] = {"containerPort": 80, "hostPort": host_port, "protocol": protocol}
    if host_ip:
        port["hostIP"] = host_ip
    return {"containers": [{"name": "app", "image": "app:1", "ports": [port],
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}


@pytest.mark.parametrize(("second", "clash"), [
    (_port(8080), True),                                  # same port, both on every IP
    (_port(8080, host_ip="10.0.0.2"), True),              # the first one's empty IP overlaps every IP
    (_port(8080, protocol="UDP"), False),                 # another protocol
    (_port(8081), False),
])
def test_host_port_clash_strands_the_second_pod_in_every_order(second: dict[str, Any], clash: bool) -> None:
    objects = [linux_pool(), pod("p0", spec_extra=_port(8080)), pod("p1", spec_extra=second)]
    snapshot = snapshot_of(objects)
    plan = _plan(_claim("node-a", "test-zone-a", ["p0", "p1"]))
    report = replay(snapshot, plan, orders=10)
    assert report.orders_stranding == (report.orders_tried if clash else 0)
    if clash:
        assert set(report.by_rule) == {PORTS}
    spread_out = _plan(_claim("node-a", "test-zone-a", ["p0"]), _claim("node-b", "test-zone-a", ["p1"]))
    assert replay(snapshot, spread_out, orders=10).orders_stranding == 0


def test_resources_count_bound_pods_and_daemonset_pods() -> None:
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
              "spec": {"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [
                  {"name": "agent", "image": "agent:1", "resources": {"requests": {"cpu": "200m"}}}]}}}}
    objects = [linux_pool(), daemon] + [pod(f"p{i}", cpu="900m") for i in range(3)]
    snapshot = snapshot_of(objects)
    # 1900m allocatable - 200m daemon = 1700m: one 900m pod fits, not two
    plan = _plan(_claim("node-a", "test-zone-a", ["p0", "p1"]), _claim("node-b", "test-zone-a", ["p2"]))
    outcome = replay_order(snapshot, plan, _keys("p0", "p1", "p2"))
    # p1 does not fit beside p0 and the daemon, takes node-b's room; p2 then fits nowhere
    assert outcome.refused == {RESOURCES: 2} and outcome.moved == 1
    assert outcome.stranded == ("default/p2",) == outcome.never_bound
    tight = _plan(_claim("node-a", "test-zone-a", ["p0", "p1", "p2"]))
    report = replay(snapshot, tight, orders=5)
    assert report.max_stranded == 2 and set(report.by_rule) == {RESOURCES}


def test_planned_node_that_is_cordoned_sends_the_pod_to_another_plan_node() -> None:
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "old", "labels": {"kubernetes.io/os": "linux", HOST: "old", ZONE: "test-zone-a"}},
            "spec": {"unschedulable": True},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    objects = [linux_pool(), node, pod("p0", cpu="500m"), pod("p1", cpu="500m")]
    snapshot = snapshot_of(objects)
    plan = _plan(_claim("node-a", "test-zone-a", ["p0"]), existing={"old": ["p1"]})
    outcome = replay_order(snapshot, plan, _keys("p0", "p1"))
    assert outcome.stranded == () and outcome.moved == 1 and outcome.refused == {"NodeUnschedulable": 1}


# --- pod affinity: the first pod of a self-affine group may go anywhere, the rest must follow ---------------

def test_self_affine_group_split_over_two_nodes_is_stranded_forever_in_some_orders() -> None:
    """Each node holds two pods of one hostname self-affine group: valid finally (each finds its partner),
    but once the first pod binds, the other node has no matching pod and never will."""
    objects = [linux_pool()] + [_web(f"w{i}", _term("podAffinity", "web", HOST)) for i in range(4)]
    snapshot = snapshot_of(objects)
    split = _plan(_claim("node-a", "test-zone-a", ["w0", "w1"]), _claim("node-b", "test-zone-a", ["w2", "w3"]))
    assert verify(snapshot, split) == []
    outcome = replay_order(snapshot, split, _keys("w0", "w1", "w2", "w3"))
    assert outcome.stranded == ("default/w2", "default/w3") == outcome.never_bound
    assert set(outcome.stranded_by.values()) == {f"{AFFINITY}({HOST})"}
    together = _plan(_claim("node-a", "test-zone-a", ["w0", "w1", "w2", "w3"], instance_type="c-4x-amd64-linux"))
    assert replay(snapshot, together, orders=20).orders_stranding == 0


def test_affinity_to_another_group_needs_that_group_bound_first() -> None:
    """cache pods require a web pod on their node: no self-match, so no first-pod exception."""
    objects = [linux_pool(), _web("w0", {}), _web("c0", _term("podAffinity", "web", HOST), cpu="500m", app="cache")]
    snapshot = snapshot_of(objects)
    plan = _plan(_claim("node-a", "test-zone-a", ["w0", "c0"]))
    assert replay_order(snapshot, plan, _keys("w0", "c0")).stranded == ()
    outcome = replay_order(snapshot, plan, _keys("c0", "w0"))
    assert outcome.stranded == ("default/c0",) and outcome.never_bound == ()


# --- the incremental counters agree with a direct reading of the rules ------------------------------------

def _reference_refusal(snapshot: Snapshot, pod_: Pod, node: str, nodes: dict[str, tuple[dict[str, str], list[Taint]]],
                       bound: dict[str, list[Pod]], free: dict[str, Resources]) -> bool:
    """Does any filter refuse ``pod_`` on ``node`` given ``bound``? Every rule recomputed from scratch."""
    labels, taints = nodes[node]
    namespaces = {ns.name: ns.labels for ns in snapshot.namespaces}
    if not pod_.accepts_labels(labels) or untolerated(pod_.tolerations, taints):
        return True
    if any(p.conflicts(q) for p in pod_.host_ports for other in bound[node] for q in other.host_ports):
        return True
    if not pod_.requests.fits_in(free[node]):
        return True
    hard = [c for c in pod_.topology_spread if c.when_unsatisfiable == "DoNotSchedule"]
    for c in hard:
        if c.topology_key not in labels:
            return True
        selector = c.selector_for(pod_.labels)
        counts: dict[str, int] = {}
        for name, (other_labels, other_taints) in nodes.items():
            if not all(h.topology_key in other_labels for h in hard):
                continue
            if c.node_affinity_policy == "Honor" and not any(
                    r.matches(other_labels) for r in _required(pod_)):
                continue
            if c.node_taints_policy == "Honor" and untolerated(pod_.tolerations, other_taints):
                continue
            n = 0 if selector is None or not (selector.match_labels or selector.match_expressions) else sum(
                1 for q in bound[name] if q.namespace == pod_.namespace and selector.matches(q.labels))
            counts[other_labels[c.topology_key]] = counts.get(other_labels[c.topology_key], 0) + n
        low = 0 if len(counts) < (c.min_domains or 1) else min(counts.values())
        own = int(selector is not None and selector.matches(pod_.labels))
        if counts.get(labels[c.topology_key], 0) + own - low > c.max_skew:
            return True
    everyone = [(nodes[n][0], q) for n, qs in bound.items() for q in qs]
    terms = pod_.pod_affinity
    if terms:
        def matches_all(q: Pod) -> bool:
            return all(t.selects(pod_.namespace, pod_.labels, q.namespace, q.labels, namespaces.get(q.namespace))
                       for t in terms)
        if any(t.topology_key not in labels for t in terms):
            return True
        present = all(any(ql.get(t.topology_key) == labels[t.topology_key] and matches_all(q) for ql, q in everyone)
                      for t in terms)
        anywhere = any(matches_all(q) and any(t.topology_key in ql for t in terms) for ql, q in everyone)
        if not present and (anywhere or not matches_all(pod_)):
            return True
    for t in pod_.pod_anti_affinity:
        if t.topology_key in labels and any(
                ql.get(t.topology_key) == labels[t.topology_key]
                and t.selects(pod_.namespace, pod_.labels, q.namespace, q.labels, namespaces.get(q.namespace))
                for ql, q in everyone):
            return True
    return any(t.topology_key in labels and ql.get(t.topology_key) == labels[t.topology_key]
               and t.selects(q.namespace, q.labels, pod_.namespace, pod_.labels, namespaces.get(pod_.namespace))
               for ql, q in everyone for t in q.pod_anti_affinity)


def _required(pod_: Pod) -> list[Requirements]:
    selector = Requirements.from_labels(pod_.node_selector)
    return [selector & t for t in pod_.required_terms] or [selector]


def _reference_replay(snapshot: Snapshot, plan: ProvisioningPlan, order: Sequence[str]) -> tuple[list[str], list[str]]:
    """The replay's policy (planned node, else the first node by name, else stranded; then retries) over the
    reference filters. New claims only."""
    catalog = {it.name: it for it in snapshot.instance_types}
    nodes: dict[str, tuple[dict[str, str], list[Taint]]] = {}
    free: dict[str, Resources] = {}
    for c in plan.node_claims:
        pool = snapshot.nodepool(c.node_pool)
        assert pool is not None
        it = catalog[c.instance_type]
        nodes[c.name] = ({**it.labels, **pool.labels, ZONE: c.zone, wk.CAPACITY_TYPE: c.capacity_type,
                          wk.NODEPOOL: pool.name, HOST: c.name}, list(pool.taints))
        free[c.name] = it.allocatable
    planned = {k: c.name for c in plan.node_claims for k in c.pods}
    pods = {p.key: p for p in snapshot.pods}
    bound: dict[str, list[Pod]] = {n: [] for n in nodes}

    def place(key: str) -> bool:
        for node in [planned[key], *sorted(nodes)]:
            if not _reference_refusal(snapshot, pods[key], node, nodes, bound, free):
                bound[node].append(pods[key])
                free[node] = free[node] - pods[key].requests
                return True
        return False

    stranded = [k for k in order if not place(k)]
    waiting = list(stranded)
    while waiting:
        left = [k for k in waiting if not place(k)]
        if left == waiting:
            break
        waiting = left
    return stranded, waiting


def _random_case(rng: random.Random) -> tuple[Snapshot, ProvisioningPlan]:
    """Pods with random rules on random claims of two NodePools (one tainted), planned with no regard to
    validity: the replay and the reference must agree on what binds, not the plan be good."""
    kinds = ["plain", "zone-spread", "host-spread", "zone-affinity", "host-affinity", "host-anti", "port"]
    objects: list[dict[str, Any]] = [linux_pool(), *_dedicated("t")]
    names = []
    for i in range(rng.randint(4, 14)):
        kind, app = rng.choice(kinds), rng.choice("xy")
        spec: dict[str, Any] = {}
        if kind.endswith("spread"):
            extra: dict[str, Any] = rng.choice([{}, {"minDomains": 3}, {"nodeTaintsPolicy": "Honor"},
                                {"nodeAffinityPolicy": "Ignore"}, {"matchLabelKeys": ["tier"]}])
            spec = _spread(rng.choice("xy"), ZONE if kind.startswith("zone") else HOST,
                           skew=rng.choice((1, 1, 2)), **extra)
        elif kind.endswith("affinity"):
            spec = _term("podAffinity", app, ZONE if kind.startswith("zone") else HOST)
        elif kind == "host-anti":
            spec = _term("podAntiAffinity", rng.choice("xy"), HOST)
        elif kind == "port":
            spec = _port(9000 + rng.randint(0, 1))
        if rng.random() < 0.3:
            spec["tolerations"] = _tolerate("t")
        if rng.random() < 0.2:
            spec["nodeSelector"] = {ZONE: rng.choice(("test-zone-a", "test-zone-b"))}
        name = f"p{i:02d}"
        objects.append(pod(name, cpu=rng.choice(("300m", "600m", "900m")), memory="256Mi",
                           labels={"app": app, "tier": rng.choice("12")}, spec_extra=spec))
        names.append(name)
    claims: dict[str, list[str]] = {}
    zones = [f"test-zone-{z}" for z in "abc"]
    node_zone = {f"n{j}": rng.choice(zones) for j in range(rng.randint(2, 6))}
    node_pool = {n: rng.choice(("default", "default", "default", "pool-t")) for n in node_zone}
    for name in names:
        claims.setdefault(rng.choice(sorted(node_zone)), []).append(name)
    plan = _plan(*(_claim(n, node_zone[n], ps, pool=node_pool[n]) for n, ps in sorted(claims.items())))
    return snapshot_of(objects), plan


@pytest.mark.parametrize("seed", range(60))
def test_incremental_replay_agrees_with_the_rules_recomputed_at_every_bind(seed: int) -> None:
    rng = random.Random(seed)
    snapshot, plan = _random_case(rng)
    keys = [k for c in plan.node_claims for k in c.pods]
    for _ in range(3):
        rng.shuffle(keys)
        outcome: OrderOutcome = replay_order(snapshot, plan, keys)
        stranded, waiting = _reference_replay(snapshot, plan, keys)
        assert (list(outcome.stranded), list(outcome.never_bound)) == (stranded, waiting)


# --- command line ------------------------------------------------------------------------------------------

def _files(tmp_path: Path, objects: list[dict[str, Any]], plan: ProvisioningPlan) -> tuple[str, str]:
    snap, plan_file = tmp_path / "snapshot.yaml", tmp_path / "plan.json"
    snap.write_text(yaml.safe_dump(as_list(objects), sort_keys=False))
    plan_file.write_text(json.dumps(plan.to_json_dict()))
    return str(snap), str(plan_file)


def test_cli_verify_replay_exits_1_when_an_order_strands_a_pod(tmp_path: Path) -> None:
    _, plan = _two_by_two()
    snap, plan_file = _files(tmp_path, _two_by_two_objects(), plan)
    runner = CliRunner()
    plain = runner.invoke(app, ["verify", snap, plan_file])
    assert plain.exit_code == 0, plain.output                          # the final state is valid
    result = runner.invoke(app, ["verify", snap, plan_file, "--replay", "10"])
    assert result.exit_code == 1, result.output
    assert "orders stranding a pod:" in result.output and f"{SPREAD}({ZONE})" in result.output


def test_cli_verify_replay_exits_0_for_an_order_independent_plan(tmp_path: Path) -> None:
    objects = [linux_pool()] + [_web(f"w{i}", _term("podAntiAffinity", "web", HOST)) for i in range(3)]
    plan = _plan(*(_claim(f"node-{i}", "test-zone-a", [f"w{i}"]) for i in range(3)))
    snap, plan_file = _files(tmp_path, objects, plan)
    result = CliRunner().invoke(app, ["verify", snap, plan_file, "--replay", "5"])
    assert result.exit_code == 0, result.output
    assert "orders stranding a pod: 0/6" in result.output
