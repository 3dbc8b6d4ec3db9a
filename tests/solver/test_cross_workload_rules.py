"""Hard pod-to-pod rules between workloads, and pods carrying several of them: each once reported as "not
modelled" (the plan gate then stripped the pods the verifier rejected). The expected placements are the
Kubernetes documentation's rules, not nodeplan's output:

- Inter-pod anti-affinity (``requiredDuringScheduling``): a pod may not land in a topology domain (the nodes
  sharing the ``topologyKey`` label's value) that holds a pod its term selects; and the rule is symmetric
  for the scheduler: an incoming pod is refused a domain holding a pod whose required anti-affinity term
  selects the incoming pod. A node without the key is in no domain, so it passes.
- Inter-pod affinity: a pod may only land in a domain holding a pod its term selects (on the hostname, the
  same node); when several terms are given, all must hold. The first pod of a group may go anywhere only
  while no pod the term selects exists, and only if its term selects itself.
- Topology spread (``DoNotSchedule``): the pod's domain may hold at most ``maxSkew`` more matching pods than
  the emptiest eligible domain (eligible: nodes passing the pod's node affinity); several constraints, and
  spread together with affinity, all hold at once (a logical AND).
- The kube-scheduler checks all of these as each pod binds, one at a time, in an order nobody controls
  (``solver.verify.replay`` replays it).
"""

from __future__ import annotations

from typing import Any

from bench.workloads import linux_pool, nodepool, pod
from model.plan import ProvisioningPlan
from solver.problem import compile_problem
from solver.verify import verify
from solver.verify.replay import replay
from tests.conftest import snapshot_of, solve_verified

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
RACK = "example.com/rack"
ZONES = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"]


def _term(selector: dict[str, str], key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": selector}, "topologyKey": key}


def _affinity(**kinds: list[dict[str, Any]]) -> dict[str, Any]:
    """``_affinity(podAffinity=[term], podAntiAffinity=[term])`` as required terms."""
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": terms}
                         for kind, terms in kinds.items()}}


def _spread(selector: dict[str, str], key: str = ZONE) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": selector}}]}


def _workload(name: str, count: int, cpu: str = "500m", memory: str = "256Mi",
              extra: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return [pod(f"{name}-{i}", cpu=cpu, memory=memory, labels={"app": name, **(labels or {})}, owner=name,
                spec_extra=extra) for i in range(count)]


def _zones_of(plan: ProvisioningPlan, app: str) -> set[str]:
    return {c.zone for c in plan.node_claims if any(p.startswith(f"default/{app}-") for p in c.pods)}


def _placed(plan: ProvisioningPlan) -> set[str]:
    return {k for c in plan.node_claims for k in c.pods} | {k for e in plan.existing_nodes for k in e.pods}


def _not_modelled(plan: ProvisioningPlan) -> list[str]:
    return [n for n in plan.solver.notes if "not modelled" in n]


def _moved(plan: ProvisioningPlan, pod_key: str, to_claim: int) -> ProvisioningPlan:
    data = plan.to_json_dict()
    for claim in data["nodeClaims"]:
        if pod_key in claim["pods"]:
            claim["pods"].remove(pod_key)
    data["nodeClaims"][to_claim]["pods"].append(pod_key)
    return ProvisioningPlan.model_validate(data)


# --- 1. required anti-affinity towards pending pods of other workloads, zone or any label ---------------------

def test_zone_anti_affinity_to_another_pending_workload_splits_the_zones() -> None:
    """A's term selects B's pods (not A's own): no zone may hold both an A and a B pod, in either order."""
    objects = [linux_pool(), *_workload("batch", 6, extra=_affinity(podAntiAffinity=[_term({"app": "db"}, ZONE)]))]
    objects += _workload("db", 3)
    snap = snapshot_of(objects)
    plan = solve_verified(snap).plan
    assert plan.unschedulable == [] and _not_modelled(plan) == []
    batch, db = _zones_of(plan, "batch"), _zones_of(plan, "db")
    assert batch and db and not batch & db
    # the verifier rejects a db pod moved into a batch zone (symmetry: the batch pods' term repels it)
    into = next(i for i, c in enumerate(plan.node_claims) if c.zone in batch)
    db_pod = next(k for c in plan.node_claims for k in c.pods if k.startswith("default/db-"))
    assert any("anti-affinity" in v for v in verify(snap, _moved(plan, db_pod, into)))
    assert replay(snap, plan, orders=20).ok  # anti-affinity only tightens as pods bind: any order holds


def test_anti_affinity_on_a_custom_label_between_workloads_splits_its_domains() -> None:
    objects = [linux_pool(f"rack-{r}", labels={RACK: r}) for r in ("r1", "r2", "r3")]
    objects += _workload("db", 2, extra=_affinity(podAntiAffinity=[_term({"app": "cache"}, RACK)]))
    objects += _workload("cache", 4)
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and _not_modelled(plan) == []
    racks = {app: {c.labels[RACK] for c in plan.node_claims if any(p.startswith(f"default/{app}-") for p in c.pods)}
             for app in ("db", "cache")}
    assert racks["db"] and racks["cache"] and not racks["db"] & racks["cache"]


def test_anti_affinity_split_gives_the_selected_pods_the_only_zone_they_may_use() -> None:
    """The cache may only run in test-zone-b; the web pods repelling it take the other zones."""
    only_b = {"nodeSelector": {ZONE: "test-zone-b"}}
    objects = [linux_pool(), *_workload("web", 4, extra=_affinity(podAntiAffinity=[_term({"app": "cache"}, ZONE)]))]
    objects += _workload("cache", 2, extra=only_b)
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and _not_modelled(plan) == []
    assert _zones_of(plan, "cache") == {"test-zone-b"} and "test-zone-b" not in _zones_of(plan, "web")


def test_anti_affinity_with_no_zone_for_both_sides_leaves_the_owners_pending() -> None:
    """One zone only: the pods carrying the term stay pending, naming it; the pods it selects run."""
    one_zone = linux_pool(requirements=[{"key": ZONE, "operator": "In", "values": ["test-zone-a"]}])
    objects = [one_zone, *_workload("batch", 2, extra=_affinity(podAntiAffinity=[_term({"app": "db"}, ZONE)]))]
    objects += _workload("db", 2)
    plan = solve_verified(snapshot_of(objects)).plan
    assert _not_modelled(plan) == []
    assert {u.pod for u in plan.unschedulable} == {"default/batch-0", "default/batch-1"}
    assert all("required pod anti-affinity with app=db on topology.kubernetes.io/zone" in u.reason
               for u in plan.unschedulable)
    assert _zones_of(plan, "db") == {"test-zone-a"}


def test_anti_affinity_to_a_workload_that_lands_only_where_the_owner_must_leaves_the_owner_pending() -> None:
    only_a = {"nodeSelector": {ZONE: "test-zone-a"}}
    repel = _affinity(podAntiAffinity=[_term({"app": "db"}, ZONE)])
    objects = [linux_pool(), *_workload("batch", 2, extra={**only_a, **repel})]
    objects += _workload("db", 1, extra=only_a)
    plan = solve_verified(snapshot_of(objects)).plan
    assert _not_modelled(plan) == [] and _placed(plan) == {"default/db-0"}
    assert all("anti-affinity with app=db" in u.reason for u in plan.unschedulable)


# --- 2. several hard topology rules on one pod ----------------------------------------------------------------

def test_zone_spread_and_zone_anti_affinity_to_another_workload_both_hold() -> None:
    """web spreads over zones (maxSkew 1) and repels the db pods' zone. db's zone is eligible for web's
    spread (its nodes pass web's node affinity) and holds no web pod, so the global minimum is 0 and every
    zone web uses holds at most one web pod: three run, one per zone db does not use."""
    extra = {**_spread({"app": "web"}), **_affinity(podAntiAffinity=[_term({"app": "db"}, ZONE)])}
    objects = [linux_pool(), *_workload("web", 5, extra=extra)]
    objects += _workload("db", 1)
    snap = snapshot_of(objects)
    plan = solve_verified(snap).plan
    assert _not_modelled(plan) == []
    web, db = _zones_of(plan, "web"), _zones_of(plan, "db")
    assert len(db) == 1 and not web & db and len(web) == 3
    assert sum(k.startswith("default/web-") for k in _placed(plan)) == 3
    pending = [u for u in plan.unschedulable if u.pod.startswith("default/web-")]
    assert len(pending) == 2 and all("topology spread with app=web" in u.reason
                                     and "pod anti-affinity on topology.kubernetes.io/zone" in u.reason
                                     for u in pending)


def test_zone_spread_and_rack_self_affinity_pin_both_keys() -> None:
    """Spread on the zone and affinity to its own pods on a rack label: one rack, zones balanced."""
    pools = [linux_pool(f"rack-{r}", labels={RACK: r}) for r in ("r1", "r2")]
    extra = {**_spread({"app": "web"}), **_affinity(podAffinity=[_term({"app": "web"}, RACK)])}
    snap = snapshot_of(pools + _workload("web", 8, extra=extra))
    problem = compile_problem(snap)
    pods = [p for c in problem.classes for p in c.pods]
    assert all(p.zone_pin for p in pods) and len({p.rule_terms for p in pods}) == 1  # a zone and the same rack
    plan = solve_verified(snap).plan
    assert plan.unschedulable == [] and _not_modelled(plan) == []
    assert len({c.labels[RACK] for c in plan.node_claims}) == 1
    per_zone = [sum(len(c.pods) for c in plan.node_claims if c.zone == z) for z in ZONES]
    assert max(per_zone) - min(per_zone) <= 1


def test_rules_that_cannot_all_hold_leave_the_pod_pending_naming_both() -> None:
    """Self anti-affinity on the zone (one per zone) and self affinity on the zone (all in one zone): the
    first pod runs anywhere, the second could satisfy one rule only."""
    extra = _affinity(podAntiAffinity=[_term({"app": "zk"}, ZONE)], podAffinity=[_term({"app": "zk"}, ZONE)])
    plan = solve_verified(snapshot_of([linux_pool(), *_workload("zk", 2, extra=extra)])).plan
    assert _not_modelled(plan) == [] and len(_placed(plan)) == 1
    (left,) = plan.unschedulable
    assert "pod affinity with app=zk" in left.reason and "pod anti-affinity with app=zk" in left.reason


# --- 3. required affinity on hostname to pending pods of another workload -------------------------------------

def test_hostname_affinity_to_another_pending_workload_puts_one_of_its_pods_on_every_node() -> None:
    objects = [linux_pool(), *_workload("web", 6, extra=_affinity(podAffinity=[_term({"app": "cache"}, HOST)]))]
    objects += _workload("cache", 3)
    snap = snapshot_of(objects)
    result = solve_verified(snap)
    plan = result.plan
    assert plan.unschedulable == [] and _not_modelled(plan) == []
    for claim in plan.node_claims:
        if any(p.startswith("default/web-") for p in claim.pods):
            assert any(p.startswith("default/cache-") for p in claim.pods), claim.pods
    assert any("default/web" in n and "bundle" in n for n in result.problem.conservative)
    # no web pod binds before a cache pod is bound on its node, but once one is, it binds: none is left out
    assert replay(snap, plan, orders=20).max_never_bound == 0


def test_hostname_affinity_beyond_what_the_selected_pods_can_host_leaves_the_rest_pending() -> None:
    """Each node holds one web pod (3 of a c-4x's 4 cpus) beside one cache pod: two cache pods, two nodes."""
    small = nodepool("default", requirements=[
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x-amd64-linux"]}])
    objects = [small, *_workload("web", 4, cpu="3", extra=_affinity(podAffinity=[_term({"app": "cache"}, HOST)]))]
    objects += _workload("cache", 2)
    plan = solve_verified(snapshot_of(objects)).plan
    assert _not_modelled(plan) == []
    assert sum(k.startswith("default/web-") for k in _placed(plan)) == 2
    assert {u.pod.split("-")[0] for u in plan.unschedulable} == {"default/web"}
    assert all("each node holding it needs one of the pods it selects" in u.reason for u in plan.unschedulable)


def test_hostname_affinity_to_zone_pinned_pods_takes_their_zone() -> None:
    """The cache pods spread over the zones; each web pod runs on a node beside one of them."""
    objects = [linux_pool(), *_workload("web", 4, extra=_affinity(podAffinity=[_term({"app": "cache"}, HOST)]))]
    objects += _workload("cache", 4, extra=_spread({"app": "cache"}))
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable == [] and _not_modelled(plan) == []
    assert len(_zones_of(plan, "cache")) == 4
    for claim in plan.node_claims:
        if any(p.startswith("default/web-") for p in claim.pods):
            assert any(p.startswith("default/cache-") for p in claim.pods), claim.pods


def test_hostname_affinity_to_pods_that_cannot_share_a_node_with_it_is_pending_with_the_reason() -> None:
    """The cache pods only tolerate nodes the web pods do not: no node holds both."""
    taint = {"key": "cache", "value": "only", "effect": "NoSchedule"}
    objects = [linux_pool("cache", taints=[taint])]
    objects += _workload("web", 2, extra=_affinity(podAffinity=[_term({"app": "cache"}, HOST)]))
    objects += _workload("cache", 2, extra={"tolerations": [{"key": "cache", "operator": "Exists"}]})
    plan = solve_verified(snapshot_of(objects)).plan
    assert _not_modelled(plan) == []
    assert {u.pod for u in plan.unschedulable} == {"default/web-0", "default/web-1"}
    assert all("required pod affinity with app=cache on kubernetes.io/hostname" in u.reason
               for u in plan.unschedulable)


# --- 4. bind order: every pending pod a group's term selects beside the group ----------------------------------

def _diverse_pair(hosts: int, zones: int) -> list[dict[str, Any]]:
    """Karpenter's diverse mix in small: hostname and zone self-affinity pods sharing one label value."""
    label = {"my-affininity": "a"}
    host = {"podAffinity": [_term(label, HOST)]}
    zone = {"podAffinity": [_term(label, ZONE)]}
    return ([pod(f"host-{i}", cpu="500m", labels=dict(label), spec_extra=_affinity(**host)) for i in range(hosts)]
            + [pod(f"zone-{i}", cpu="500m", labels=dict(label), spec_extra=_affinity(**zone)) for i in range(zones)])


def test_hostname_self_affinity_group_holds_in_every_bind_order() -> None:
    """The hostname group's term also selects the zone pods: once any of them binds elsewhere first, the
    group has no node left. With all of them on the group's node, every order binds every pod."""
    snap = snapshot_of([linux_pool(), *_diverse_pair(3, 4)])
    bundle = next(c for c in compile_problem(snap).classes if c.bundle)
    assert sorted(p.name for p in bundle.pods) == [f"host-{i}" for i in range(3)] + [f"zone-{i}" for i in range(4)]
    plan = solve_verified(snap).plan
    assert plan.unschedulable == [] and len(plan.node_claims) == 1
    report = replay(snap, plan, orders=30)
    assert report.ok, report.summary()


def test_selected_pods_too_large_for_one_node_keep_the_group_valid() -> None:
    """When the selected pods cannot share the group's node (no instance type holds them all), the group
    still gets a partner when alone and the plan verifies (bind order is then not guaranteed)."""
    small = nodepool("default", requirements=[
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}])
    snap = snapshot_of([small, *_diverse_pair(1, 6)])
    bundle = next(c for c in compile_problem(snap).classes if c.bundle)
    assert len(bundle.pods) == 2  # the lone carrier and one partner
    plan = solve_verified(snap).plan
    assert plan.unschedulable == []
