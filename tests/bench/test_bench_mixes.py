"""The benchmark mixes are Karpenter's: ``makeDiversePods`` and its generators in sigs.k8s.io/karpenter v1.15.0
(``pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go``) and ``fake.InstanceTypes(400)``,
checked by counting on generated batches: five blocks of ``count // 5`` (remainder generic), spread selectors
drawn apart from the pods' own labels, self-affinity and anti-affinity terms selecting the pods' own labels,
cpu / memory / label values uniform over Karpenter's sets."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench.crossworkload import cross_workload_objects
from bench.diverse import (
    CPUS,
    LABEL_VALUES,
    MEMORIES,
    diverse_objects,
    diverse_pods,
    karpenter_benchmark_catalog,
    karpenter_generic_objects,
)
from bench.hostaffinity import hostname_affinity_pods
from model import labels as wk
from model.snapshot import parse_objects

GIB = 2**30


def _kind(pod: dict[str, Any]) -> str:
    """What a pod is, read from its spec alone (not its name)."""
    spec = pod["spec"]
    if "topologySpreadConstraints" in spec:
        key = spec["topologySpreadConstraints"][0]["topologyKey"]
        return {wk.ZONE: "zone-spread", wk.HOSTNAME: "hostname-spread"}[key]
    affinity = spec.get("affinity", {})
    if "podAffinity" in affinity:
        key = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
        return {wk.ZONE: "zone-affinity", wk.HOSTNAME: "hostname-affinity"}[key]
    if "podAntiAffinity" in affinity:
        key = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
        return {wk.HOSTNAME: "hostname-anti"}[key]
    return "generic"


def _requests(pod: dict[str, Any]) -> dict[str, str]:
    requests: dict[str, str] = pod["spec"]["containers"][0]["resources"]["requests"]
    return requests


def _assert_uniform(counts: Counter[str], values: tuple[str, ...], total: int) -> None:
    """Every value drawn, each within 5 standard deviations of total / len(values)."""
    assert set(counts) == set(values)
    p = 1 / len(values)
    sigma = (total * p * (1 - p)) ** 0.5
    for value in values:
        assert abs(counts[value] - total * p) < 5 * sigma, (value, counts)


@pytest.mark.parametrize("count", [5, 7, 1000, 1003])
def test_diverse_mix_has_karpenters_five_blocks_in_order(count: int) -> None:
    kinds = [_kind(p) for p in diverse_pods(count, seed=3)]
    share = count // 5
    expected = (["generic"] * share + ["zone-spread"] * share + ["hostname-spread"] * share
                + ["zone-affinity"] * share + ["hostname-anti"] * share + ["generic"] * (count - 5 * share))
    assert kinds == expected


def test_diverse_mix_has_no_share_karpenter_does_not_have() -> None:
    kinds = Counter(_kind(p) for p in diverse_pods(2000))
    assert set(kinds) == {"generic", "zone-spread", "hostname-spread", "zone-affinity", "hostname-anti"}
    assert all(n == 400 for n in kinds.values())


def test_every_pod_is_a_pending_default_pod_with_the_discovery_label() -> None:
    pods = diverse_pods(200)
    assert all(p["metadata"]["namespace"] == "default" for p in pods)
    assert all(p["metadata"]["labels"]["testing/cluster"] == "unspecified" for p in pods)
    snapshot = parse_objects(diverse_objects(200), source="diverse")
    assert len(snapshot.pending_pods()) == 200
    assert len({p.key for p in snapshot.pods}) == 200
    (pool,) = snapshot.nodepools
    assert pool.name == "default"


def test_cpu_and_memory_are_uniform_over_karpenters_sets() -> None:
    pods = diverse_pods(20000, seed=11)
    _assert_uniform(Counter(_requests(p)["cpu"] for p in pods), CPUS, len(pods))
    _assert_uniform(Counter(_requests(p)["memory"] for p in pods), MEMORIES, len(pods))
    anti = [p for p in pods if _kind(p) == "hostname-anti"]  # each share draws from the same sets
    _assert_uniform(Counter(_requests(p)["cpu"] for p in anti), CPUS, len(anti))


def test_generic_and_spread_labels_are_uniform_over_seven_values() -> None:
    pods = [p for p in diverse_pods(20000, seed=5) if _kind(p) in ("generic", "zone-spread", "hostname-spread")]
    assert all(set(p["metadata"]["labels"]) == {"my-label", "testing/cluster"} for p in pods)
    _assert_uniform(Counter(p["metadata"]["labels"]["my-label"] for p in pods), LABEL_VALUES, len(pods))


def test_spread_constraint_is_maxskew_1_do_not_schedule_on_a_selector_drawn_apart_from_the_label() -> None:
    pods = [p for p in diverse_pods(20000, seed=9) if _kind(p).endswith("-spread")]
    pairs: Counter[tuple[str, str]] = Counter()
    for p in pods:
        (constraint,) = p["spec"]["topologySpreadConstraints"]
        assert constraint["maxSkew"] == 1 and constraint["whenUnsatisfiable"] == "DoNotSchedule"
        assert set(constraint["labelSelector"]) == {"matchLabels"}
        selector = constraint["labelSelector"]["matchLabels"]
        assert list(selector) == ["my-label"]
        pairs[(p["metadata"]["labels"]["my-label"], selector["my-label"])] += 1
    # independent draws: all 49 (label, selector) pairs, each near n / 49 (a pod selects itself 1/7 of the time)
    assert len(pairs) == 49
    expected = len(pods) / 49
    chi2 = sum((n - expected) ** 2 / expected for n in pairs.values())
    assert chi2 < 100, chi2  # 48 degrees of freedom: P(chi2 > 100) < 1e-5
    own = sum(n for (label, selector), n in pairs.items() if label == selector) / len(pods)
    assert abs(own - 1 / 7) < 0.03


def test_zone_affinity_is_self_affinity_on_the_zone() -> None:
    pods = [p for p in diverse_pods(20000, seed=2) if _kind(p) == "zone-affinity"]
    for p in pods:
        labels = p["metadata"]["labels"]
        assert set(labels) == {"my-affininity", "testing/cluster"}  # Karpenter's spelling
        (term,) = p["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"labelSelector": {"matchLabels": {"my-affininity": labels["my-affininity"]}},
                        "topologyKey": wk.ZONE}
    _assert_uniform(Counter(p["metadata"]["labels"]["my-affininity"] for p in pods), LABEL_VALUES, len(pods))


def test_hostname_anti_affinity_pods_all_repel_each_other() -> None:
    pods = [p for p in diverse_pods(1000) if _kind(p) == "hostname-anti"]
    assert len(pods) == 200
    for p in pods:
        assert p["metadata"]["labels"] == {"app": "nginx", "testing/cluster": "unspecified"}
        (term,) = p["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"labelSelector": {"matchLabels": {"app": "nginx"}}, "topologyKey": wk.HOSTNAME}


def test_a_seed_reproduces_its_batch_and_another_seed_differs() -> None:
    assert diverse_pods(300, seed=42) == diverse_pods(300, seed=42)
    assert diverse_pods(300, seed=42) != diverse_pods(300, seed=7)


def test_karpenter_generic_batch_is_generic_pods_only() -> None:
    objects = karpenter_generic_objects(500, seed=1)
    pool, pods = objects[0], objects[1:]
    assert pool["kind"] == "NodePool" and pool["spec"]["limits"] == {"cpu": "10000000", "memory": "10000000Gi"}
    assert len(pods) == 500 and {_kind(p) for p in pods} == {"generic"}


def test_hostname_self_affinity_is_a_scenario_of_its_own() -> None:
    pods = hostname_affinity_pods(1001, seed=4)
    kinds = [_kind(p) for p in pods]
    assert kinds == ["generic"] * 500 + ["hostname-affinity"] * 500 + ["generic"]
    for p in pods[500:1000]:
        (term,) = p["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["labelSelector"]["matchLabels"] == {"my-affininity": p["metadata"]["labels"]["my-affininity"]}
        assert term["topologyKey"] == wk.HOSTNAME


def test_cross_workload_mix_still_generates() -> None:
    objects = cross_workload_objects(300, seed=3)
    assert sum(o["kind"] == "Pod" for o in objects) == 300


def test_benchmark_catalog_is_fake_instance_types_400() -> None:
    catalog = karpenter_benchmark_catalog()
    assert len(catalog) == 400
    for i in (0, 3, 4, 199, 399):
        it = catalog[i]
        cpu = i + 1
        assert it.name == f"fake-it-{i}"
        assert it.capacity.get("cpu") == 1000 * cpu
        assert it.capacity.get("memory") == 2 * cpu * GIB
        assert it.capacity.get("pods") == 10 * cpu
        assert it.allocatable.get("cpu") == 1000 * cpu - 100
        assert it.allocatable.get("memory") == 2 * cpu * GIB - 10 * 2**20
        price = 0.1 * cpu + 0.1 * 2 * cpu * GIB / 1e9
        assert sorted((o.capacity_type, o.zone) for o in it.offerings) == [
            ("on-demand", "test-zone-1"), ("on-demand", "test-zone-2"), ("on-demand", "test-zone-3"),
            ("spot", "test-zone-1"), ("spot", "test-zone-2")]
        assert all(o.price == pytest.approx(price) and o.available for o in it.offerings)
        # "large" only above 4 vCPU and 8Gi, as the fake provider labels it
        assert it.labels["size"] == ("large" if cpu > 4 else "small")
