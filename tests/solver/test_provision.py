"""Provisioning behaviour, each case checked by the verifier and against Karpenter's rules."""

from __future__ import annotations

from bench.workloads import linux_pool, nodepool, pod
from model.snapshot import Snapshot
from solver.provision import SolveOptions, solve
from tests.conftest import snapshot_of, solve_verified


def _node(name: str, pool: str, cpu: str, memory: str, pods: str = "110", taints: list | None = None) -> dict:  # type: ignore[type-arg]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool, "kubernetes.io/os": "linux",
                                                  "kubernetes.io/hostname": name,
                                                  "topology.kubernetes.io/zone": "test-zone-a"}},
            "spec": {"taints": taints or []},
            "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": pods},
                       "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_example_snapshot_is_solved_optimally_and_beats_greedy(example_snapshot: Snapshot) -> None:
    result = solve_verified(example_snapshot, time_limit=10.0)
    plan = result.plan
    assert plan.solver.status == "OPTIMAL"
    assert plan.cost.greedy is not None and plan.cost.total < plan.cost.greedy
    assert [u.pod for u in plan.unschedulable] == ["default/mainframe-report"]
    assert "s390x" in plan.unschedulable[0].reason and "amd64, arm64" in plan.unschedulable[0].reason
    batch = [c for c in plan.node_claims if any(p.startswith("batch/") for p in c.pods)]
    assert batch and all(c.node_pool == "gpu-batch" and c.capacity_type == "on-demand" for c in batch)
    # the existing node's free capacity is used before anything is bought
    assert plan.existing_nodes and plan.existing_nodes[0].name == "general-existing-1"


def test_empty_snapshot_gives_empty_plan() -> None:
    result = solve_verified(snapshot_of([linux_pool("default")]))
    assert result.plan.node_claims == [] and result.plan.unschedulable == []
    assert result.plan.solver.status == "EMPTY" and result.plan.cost.total == 0


def test_pods_prefer_the_higher_weight_pool_even_when_it_costs_more() -> None:
    objects = [
        linux_pool("cheap-spot", weight=1, requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]),
        linux_pool("preferred-od", weight=50, requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
    ] + [pod(f"web-{i}", cpu="500m", memory="512Mi", owner="web") for i in range(6)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert {c.node_pool for c in plan.node_claims} == {"preferred-od"}


def test_lower_weight_pool_takes_only_what_the_higher_pool_limit_refuses() -> None:
    objects = [
        linux_pool("low", weight=1),
        linux_pool("high", weight=50, limits={"cpu": "4"},
                   requirements=[{"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": ["4"]}]),
    ] + [pod(f"web-{i}", cpu="1", memory="1Gi", owner="web") for i in range(6)]
    plan = solve_verified(snapshot_of(objects)).plan
    on_high = sum(len(c.pods) for c in plan.node_claims if c.node_pool == "high")
    assert on_high == 3  # one 4-cpu node: 3.9 cpu allocatable holds three 1-cpu pods
    assert sum(len(c.pods) for c in plan.node_claims) == 6


def test_nodepool_limit_leaves_pods_unschedulable_with_the_limit_named() -> None:
    objects = [linux_pool("small", limits={"cpu": "8"})] + [
        pod(f"job-{i}", cpu="3", memory="1Gi", owner="job") for i in range(5)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.unschedulable, "8 cpu cannot hold five 3-cpu pods"
    assert all("limit" in u.reason and "small" in u.reason for u in plan.unschedulable)
    assert sum(int(c.labels["karpenter.kwok.sh/instance-cpu"]) for c in plan.node_claims) <= 8


def test_nodes_limit_counts_new_nodes() -> None:
    objects = [linux_pool("tiny", limits={"nodes": "2"},
                          requirements=[{"key": "karpenter.kwok.sh/instance-cpu", "operator": "In",
                                         "values": ["2"]}])] + [
        pod(f"a-{i}", cpu="1500m", memory="1Gi", owner="a") for i in range(3)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert len(plan.node_claims) == 2 and len(plan.unschedulable) == 1


def test_taints_keep_intolerant_pods_off_and_tolerant_pods_on() -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    objects = [nodepool("tainted", taints=[taint]), linux_pool("plain"),
               pod("tolerant", cpu="1", memory="1Gi", spec_extra={
                   "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                   "nodeSelector": {"karpenter.sh/nodepool": "tainted"}}),
               pod("intolerant", cpu="1", memory="1Gi")]
    plan = solve_verified(snapshot_of(objects)).plan
    where = {p: c.node_pool for c in plan.node_claims for p in c.pods}
    assert where == {"default/tolerant": "tainted", "default/intolerant": "plain"}


def test_existing_free_capacity_is_used_first() -> None:
    objects = [linux_pool("default"), _node("existing", "default", "4", "8Gi")] + [
        pod(f"w-{i}", cpu="1", memory="1Gi", owner="w") for i in range(3)]
    plan = solve_verified(snapshot_of(objects)).plan
    assert plan.node_claims == [] and plan.existing_nodes[0].name == "existing"
    assert plan.cost.total == 0


def test_daemonset_overhead_is_reserved_on_new_nodes() -> None:
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "big", "namespace": "kube-system"},
              "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {
                  "cpu": "1500m", "memory": "1Gi"}}}]}}}}
    objects = [linux_pool("default", requirements=[
        {"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": ["2"]}]), daemon,
        pod("p", cpu="1", memory="1Gi")]
    plan = solve_verified(snapshot_of(objects)).plan
    # 2-cpu nodes leave 1900m; the daemon takes 1500m, so a 1-cpu pod fits on none of them
    assert [u.pod for u in plan.unschedulable] == ["default/p"]
    assert "DaemonSet" in plan.unschedulable[0].reason


def test_pod_selecting_an_absent_zone_is_unschedulable_with_reason() -> None:
    objects = [linux_pool("default"),
               pod("lost", cpu="1", memory="1Gi", spec_extra={"nodeSelector": {
                   "topology.kubernetes.io/zone": "mars-1a"}})]
    plan = solve_verified(snapshot_of(objects)).plan
    assert "mars-1a" in plan.unschedulable[0].reason and "test-zone-a" in plan.unschedulable[0].reason


def test_a_tiny_time_limit_still_returns_a_valid_plan() -> None:
    objects = [linux_pool("default")] + [pod(f"w-{i}", cpu="250m", memory="256Mi", owner=f"d{i % 7}")
                                         for i in range(300)]
    result = solve_verified(snapshot_of(objects), time_limit=0.1)
    assert len(result.plan.unschedulable) == 0
    assert sum(len(c.pods) for c in result.plan.node_claims) == 300


def test_same_input_same_plan() -> None:
    objects = [linux_pool("default")] + [pod(f"w-{i}", cpu=["250m", "1", "1500m"][i % 3],
                                             memory=["256Mi", "2Gi"][i % 2], owner=f"d{i % 5}")
                                         for i in range(60)]
    snap = snapshot_of(objects)
    first = solve(snap, SolveOptions(time_limit=5.0)).plan.to_json_dict()
    second = solve(snap, SolveOptions(time_limit=5.0)).plan.to_json_dict()
    for plan in (first, second):
        plan["solver"].pop("wallSeconds")
        plan["solver"].pop("stages")
        plan["solver"].pop("greedySeconds")
        plan["solver"]["notes"] = [n for n in plan["solver"]["notes"] if " s" not in n]
    assert first == second


def test_progress_reports_cost_and_bound_in_dollars(example_snapshot: Snapshot) -> None:
    seen: list[tuple[str, float, float]] = []
    result = solve(example_snapshot, SolveOptions(time_limit=5.0, on_progress=lambda *r: seen.append(r)))
    assert [stage for stage, _, _ in seen][:2] == ["column generation", "dive"]
    assert all(bound <= cost + 1e-9 for _, cost, bound in seen)
    assert seen[-1][1] >= result.plan.cost.total - 1e-5  # progress never claims a plan better than the result
    assert seen[0][1] <= (result.plan.cost.greedy or 0) + 1e-5  # the first report is greedy's plan or better
