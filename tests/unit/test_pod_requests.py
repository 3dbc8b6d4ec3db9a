"""A pod's effective requests and node requirements, checked against the Kubernetes documentation.

Requests (https://kubernetes.io/docs/concepts/workloads/pods/init-containers/#resource-sharing-within-containers,
https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/#resource-sharing-within-containers,
https://kubernetes.io/docs/concepts/scheduling-eviction/pod-overhead/, component-helpers ``PodRequests``):
  * the effective init request of a resource is the highest request of any single init container;
  * the pod's request is the higher of the sum over app containers and the effective init request;
  * sidecars (init containers with restartPolicy: Always) keep running, so their requests add to the app
    containers' sum and to every regular init container started after them;
  * spec.overhead is added on top; pod-level spec.resources.requests replace the container aggregate;
  * a container with a limit but no request gets request = limit (API defaulting).

Node selection (https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/):
  * nodeSelector and nodeAffinity are ANDed; nodeSelectorTerms are ORed; matchExpressions in one term
    are ANDed; a matchFields term on metadata.name selects the node by name.
"""

from __future__ import annotations

from typing import Any

import pytest

from model.errors import InputError
from model.fields import RawObject
from model.pod import Pod, effective_requests
from model.resources import Resources

MI = 2**20
GI = 2**30


def container(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
              **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def sidecar(name: str, requests: dict[str, str]) -> dict[str, Any]:
    return container(name, requests, restartPolicy="Always")


def pod(spec: dict[str, Any], name: str = "p") -> Pod:
    return Pod.parse({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": name, "namespace": "default"}, "spec": spec})


def requests_of(spec: dict[str, Any]) -> dict[str, int]:
    return dict(pod(spec).requests)


# --- effective requests ---------------------------------------------------------------------------------

def test_app_containers_are_summed() -> None:
    spec = {"containers": [container("a", {"cpu": "100m", "memory": "64Mi"}),
                           container("b", {"cpu": "250m", "memory": "128Mi"}),
                           container("c", {"nvidia.com/gpu": "1"})]}
    assert requests_of(spec) == {"cpu": 350, "memory": 192 * MI, "nvidia.com/gpu": 1, "pods": 1}


def test_effective_requests_takes_a_raw_spec() -> None:
    spec = {"containers": [container("a", {"cpu": "1", "memory": "1Gi"})]}
    assert effective_requests(RawObject(spec)) == Resources({"cpu": 1000, "memory": GI, "pods": 1})


def test_every_pod_takes_one_pod_slot() -> None:
    assert requests_of({"containers": [{"name": "a", "image": "busybox"}]}) == {"pods": 1}
    assert requests_of({}) == {"pods": 1}


def test_larger_init_container_wins_per_resource() -> None:
    # init wants more cpu, app wants more memory: each resource takes its own maximum
    spec = {"initContainers": [container("init", {"cpu": "2", "memory": "64Mi"})],
            "containers": [container("app", {"cpu": "500m", "memory": "1Gi"})]}
    assert requests_of(spec) == {"cpu": 2000, "memory": GI, "pods": 1}


def test_init_containers_take_the_maximum_not_the_sum() -> None:
    # regular init containers run one at a time
    spec = {"initContainers": [container("i1", {"cpu": "1"}), container("i2", {"cpu": "1500m"}),
                               container("i3", {"cpu": "1"})],
            "containers": [container("app", {"cpu": "100m"})]}
    assert requests_of(spec)["cpu"] == 1500


def test_smaller_init_container_is_hidden_by_app_sum() -> None:
    spec = {"initContainers": [container("init", {"cpu": "500m"})],
            "containers": [container("a", {"cpu": "400m"}), container("b", {"cpu": "400m"})]}
    assert requests_of(spec)["cpu"] == 800


def test_sidecar_adds_to_app_containers() -> None:
    spec = {"initContainers": [sidecar("proxy", {"cpu": "200m", "memory": "128Mi"})],
            "containers": [container("app", {"cpu": "1", "memory": "1Gi"})]}
    assert requests_of(spec) == {"cpu": 1200, "memory": GI + 128 * MI, "pods": 1}


def test_sidecar_adds_to_init_containers_started_after_it() -> None:
    # proxy (sidecar) starts first, so it runs alongside "migrate": 500m + 1 = 1500m > 500m + 300m
    spec = {"initContainers": [sidecar("proxy", {"cpu": "500m"}), container("migrate", {"cpu": "1"})],
            "containers": [container("app", {"cpu": "300m"})]}
    assert requests_of(spec)["cpu"] == 1500


def test_sidecar_does_not_add_to_init_containers_started_before_it() -> None:
    # "migrate" finishes before "proxy" starts: init phase 1, app phase 300m + 500m
    spec = {"initContainers": [container("migrate", {"cpu": "1"}), sidecar("proxy", {"cpu": "500m"})],
            "containers": [container("app", {"cpu": "300m"})]}
    assert requests_of(spec)["cpu"] == 1000


def test_several_sidecars_accumulate() -> None:
    spec = {"initContainers": [sidecar("s1", {"cpu": "100m"}), container("i1", {"cpu": "250m"}),
                               sidecar("s2", {"cpu": "200m"}), container("i2", {"cpu": "1"})],
            "containers": [container("app", {"cpu": "50m"})]}
    # i1 runs beside s1: 350m; i2 beside s1+s2: 1300m; app phase 50m + 300m = 350m
    assert requests_of(spec)["cpu"] == 1300


def test_init_container_restart_policy_other_than_always_is_not_a_sidecar() -> None:
    spec = {"initContainers": [container("init", {"cpu": "200m"}, restartPolicy="OnFailure")],
            "containers": [container("app", {"cpu": "1"})]}
    assert requests_of(spec)["cpu"] == 1000


def test_pod_overhead_is_added() -> None:
    # RuntimeClass overhead is added to the sum of container requests
    spec = {"overhead": {"cpu": "250m", "memory": "120Mi"},
            "containers": [container("a", {"cpu": "500m", "memory": "100Mi"}),
                           container("b", {"cpu": "1500m", "memory": "100Mi"})]}
    assert requests_of(spec) == {"cpu": 2250, "memory": 320 * MI, "pods": 1}


def test_overhead_is_added_after_the_init_maximum() -> None:
    spec = {"overhead": {"cpu": "100m"},
            "initContainers": [container("init", {"cpu": "2"})],
            "containers": [container("app", {"cpu": "1"})]}
    assert requests_of(spec)["cpu"] == 2100


def test_limits_only_container_requests_its_limits() -> None:
    # "If you specify a limit for a resource, but do not specify any request, and no admission-time
    # mechanism has applied a default request for that resource, then Kubernetes copies the limit"
    spec = {"containers": [container("a", limits={"cpu": "1", "memory": "1Gi"})]}
    assert requests_of(spec) == {"cpu": 1000, "memory": GI, "pods": 1}


def test_explicit_request_beats_limit_per_resource() -> None:
    spec = {"containers": [container("a", requests={"cpu": "250m"}, limits={"cpu": "2", "memory": "512Mi"})]}
    assert requests_of(spec) == {"cpu": 250, "memory": 512 * MI, "pods": 1}


def test_limits_only_init_container_uses_its_limits() -> None:
    spec = {"initContainers": [container("init", limits={"cpu": "3"})],
            "containers": [container("app", {"cpu": "1"})]}
    assert requests_of(spec)["cpu"] == 3000


def test_pod_level_requests_override_the_container_aggregate() -> None:
    # "When both are present, the pod-level requests take precedence" (only for the resources named)
    spec = {"resources": {"requests": {"cpu": "2"}},
            "containers": [container("a", {"cpu": "500m", "memory": "1Gi"}),
                           container("b", {"cpu": "500m"})]}
    assert requests_of(spec) == {"cpu": 2000, "memory": GI, "pods": 1}


def test_pod_level_requests_can_be_smaller_than_container_sum() -> None:
    spec = {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            "containers": [container("a", {"cpu": "800m", "memory": "800Mi"}),
                           container("b", {"cpu": "800m", "memory": "800Mi"})]}
    assert requests_of(spec) == {"cpu": 1000, "memory": GI, "pods": 1}


def test_overhead_is_added_to_pod_level_requests() -> None:
    spec = {"resources": {"requests": {"cpu": "1"}}, "overhead": {"cpu": "100m"},
            "containers": [container("a", {"cpu": "200m"})]}
    assert requests_of(spec)["cpu"] == 1100


def test_pod_level_limits_only_default_pod_requests() -> None:
    # pkg/apis/core/v1/defaults.go defaultPodRequests (PodLevelResources): "When no containers specify
    # requests for a resource, the pod-level requests will default to match the pod-level limits"
    spec = {"resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
            "containers": [{"name": "a", "image": "busybox"}]}
    assert requests_of(spec) == {"cpu": 2000, "memory": GI, "pods": 1}


def test_bad_quantity_error_names_the_container_field() -> None:
    with pytest.raises(InputError) as info:
        pod({"containers": [container("a", {"cpu": "1"}), container("b", {"memory": "lots"})]})
    assert info.value.field == "spec.containers[1].resources.requests.memory"


def test_bad_init_container_quantity_error_names_the_field() -> None:
    with pytest.raises(InputError) as info:
        pod({"initContainers": [container("i", limits={"cpu": "1x"})], "containers": []})
    assert info.value.field == "spec.initContainers[0].resources.limits.cpu"


# --- node requirements ----------------------------------------------------------------------------------

def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def test_node_selector_alone() -> None:
    p = pod({"nodeSelector": {"disktype": "ssd"}, "containers": []})
    assert len(p.node_requirements()) == 1
    assert p.accepts_labels({"disktype": "ssd", "zone": "a"})
    assert not p.accepts_labels({"disktype": "hdd"})
    assert not p.accepts_labels({})


def test_no_constraints_accept_any_node() -> None:
    assert pod({"containers": []}).accepts_labels({})


def test_node_selector_and_each_term_terms_ored() -> None:
    # "If you specify both nodeSelector and nodeAffinity, both must be satisfied";
    # "If you specify multiple terms in nodeSelectorTerms, the Pod can be scheduled onto a node if one of
    # the specified terms can be satisfied (terms are ORed)"
    p = pod({"nodeSelector": {"disktype": "ssd"},
             "affinity": _affinity({"matchExpressions": [_expr("zone", "In", "a")]},
                                   {"matchExpressions": [_expr("zone", "In", "b")]}),
             "containers": []})
    reqs = p.node_requirements()
    assert len(reqs) == 2
    assert all("disktype" in {r.key for r in term.items} for term in reqs)
    assert p.accepts_labels({"disktype": "ssd", "zone": "a"})
    assert p.accepts_labels({"disktype": "ssd", "zone": "b"})
    assert not p.accepts_labels({"disktype": "ssd", "zone": "c"})
    assert not p.accepts_labels({"zone": "a"})                      # nodeSelector still applies
    assert not p.accepts_labels({"disktype": "hdd", "zone": "b"})


def test_expressions_within_a_term_are_anded() -> None:
    # "If you specify multiple expressions in a single matchExpressions field ... all the expressions
    # must be satisfied"
    p = pod({"affinity": _affinity({"matchExpressions": [_expr("zone", "In", "a", "b"),
                                                         _expr("arch", "NotIn", "arm64")]}),
             "containers": []})
    assert p.accepts_labels({"zone": "a", "arch": "amd64"})
    assert p.accepts_labels({"zone": "b"})                          # NotIn matches an absent label
    assert not p.accepts_labels({"zone": "a", "arch": "arm64"})
    assert not p.accepts_labels({"arch": "amd64"})


def test_match_fields_metadata_name_maps_to_hostname() -> None:
    p = pod({"affinity": _affinity({"matchFields": [_expr("metadata.name", "In", "node-1")]}),
             "containers": []})
    (reqs,) = p.node_requirements()
    assert [r.key for r in reqs.items] == ["kubernetes.io/hostname"]
    assert p.accepts_labels({"kubernetes.io/hostname": "node-1"})
    assert not p.accepts_labels({"kubernetes.io/hostname": "node-2"})


def test_match_fields_and_expressions_in_one_term_are_anded() -> None:
    p = pod({"affinity": _affinity({"matchExpressions": [_expr("zone", "In", "a")],
                                    "matchFields": [_expr("metadata.name", "NotIn", "node-1")]}),
             "containers": []})
    assert p.accepts_labels({"zone": "a", "kubernetes.io/hostname": "node-2"})
    assert not p.accepts_labels({"zone": "a", "kubernetes.io/hostname": "node-1"})
    assert not p.accepts_labels({"zone": "b", "kubernetes.io/hostname": "node-2"})


def test_match_fields_other_than_metadata_name_is_rejected() -> None:
    # the only supported field for matchFields is metadata.name
    with pytest.raises(InputError) as info:
        pod({"affinity": _affinity({"matchFields": [_expr("metadata.uid", "In", "x")]}), "containers": []})
    assert info.value.field is not None
    assert "nodeSelectorTerms[0].matchFields[0].key" in info.value.field


def test_required_affinity_with_no_terms_is_rejected() -> None:
    # NodeSelector.nodeSelectorTerms is required and must be non-empty
    with pytest.raises(InputError) as info:
        pod({"affinity": _affinity(), "containers": []})
    assert info.value.field is not None
    assert info.value.field.endswith("nodeSelectorTerms")


def test_karpenter_operators_are_not_allowed_in_pod_affinity() -> None:
    with pytest.raises(InputError) as info:
        pod({"affinity": _affinity({"matchExpressions": [_expr("cpu", "Gte", "4")]}), "containers": []})
    assert info.value.field == ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                                ".nodeSelectorTerms[0].matchExpressions[0].operator")


def test_empty_node_selector_term_matches_nothing() -> None:
    # NodeSelectorTerm API reference: "A null or empty node selector term matches no objects."
    # So with terms [{}, zone In [a]] only the second term can select a node.
    p = pod({"affinity": _affinity({}, {"matchExpressions": [_expr("zone", "In", "a")]}), "containers": []})
    assert p.accepts_labels({"zone": "a"})
    assert not p.accepts_labels({"zone": "b"})


def test_preferred_terms_are_parsed_with_weights() -> None:
    p = pod({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 30, "preference": {"matchExpressions": [_expr("zone", "In", "a")]}}]}}, "containers": []})
    assert [t.weight for t in p.preferred_terms] == [30]
    assert p.preferred_terms[0].requirements.matches({"zone": "a"})
    assert p.accepts_labels({"zone": "b"})                          # preferences never restrict


@pytest.mark.parametrize("weight", [0, 101])
def test_preferred_weight_must_be_1_to_100(weight: int) -> None:
    with pytest.raises(InputError) as info:
        pod({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": weight, "preference": {"matchExpressions": [_expr("zone", "In", "a")]}}]}},
             "containers": []})
    assert info.value.field is not None
    assert info.value.field.endswith("preferredDuringSchedulingIgnoredDuringExecution[0].weight")
