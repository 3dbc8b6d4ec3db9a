"""The provisioner shows in-flight NodeClaims to the solver as capacity with their planned pods already on them,
so a later batch (or a restarted controller) fills their leftover room instead of launching again, and records
the pods it put there on the claim so they are covered and nominated like the others."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from controller.cache import ClusterCache, Resource
from controller.provisioner import PODS_ANNOTATION, Provisioner, ProvisionerOptions, covered_pods
from providers.kwok import kwok_catalog

NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general", "uid": "np",
                                                                             "resourceVersion": "1"},
            "spec": {"template": {"spec": {"requirements": [
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}


def pending(name: str, cpu: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1",
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                           "reason": "Unschedulable"}]}}


def inflight_claim(uids: list[str], *, launched: bool = True) -> dict[str, Any]:
    itype, zone = "c-4x-amd64-linux", "test-zone-a"
    labels = {"karpenter.sh/nodepool": "general", "node.kubernetes.io/instance-type": itype,
              "topology.kubernetes.io/zone": zone, "karpenter.sh/capacity-type": "on-demand",
              "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}
    status: dict[str, Any] = {}
    if launched:
        status = {"nodeName": "general-a", "providerID": "kwok://general-a",
                  "conditions": [{"type": "Launched", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "general-a", "uid": "claim-uid", "resourceVersion": "1", "labels": labels,
                         "annotations": {PODS_ANNOTATION: json.dumps(uids)}},
            "spec": {"requirements": [{"key": k, "operator": "In", "values": [v]} for k, v in labels.items()
                                      if k != "karpenter.sh/nodepool"]},
            "status": status}


class FakeCustom:
    def __init__(self) -> None:
        self.created: list[str] = []
        self.patches: list[tuple[str, Any]] = []

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: Any) -> dict[str, Any]:
        self.created.append(body["metadata"]["name"])
        return dict(body)

    def patch_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any
                                    ) -> dict[str, Any]:
        self.patches.append((name, body))
        claim = inflight_claim([])
        claim["metadata"]["resourceVersion"] = "2"
        claim["metadata"]["annotations"] = body["metadata"]["annotations"]
        return claim


def setup(launched: bool = True) -> tuple[Provisioner, ClusterCache, FakeCustom]:
    kinds = ("Pod", "Node", "NodeClaim", "NodePool", "DaemonSet")
    cache = ClusterCache({kind: Resource(kind, "v1", lambda **kw: None) for kind in kinds})
    cache.upsert("NodePool", NODEPOOL)
    # two 1-cpu pods planned onto the 4-vCPU claim (3900m allocatable): 1900m left
    cache.upsert("NodeClaim", inflight_claim(["uid-old-0", "uid-old-1"], launched=launched))
    for name in ("old-0", "old-1"):
        cache.upsert("Pod", pending(name, "1"))
    provisioner = Provisioner(client.ApiClient(), cache, kwok_catalog(),
                              ProvisionerOptions(solve_time_limit=2.0, workers=1))
    custom = FakeCustom()
    provisioner._custom = custom  # type: ignore[assignment]
    return provisioner, cache, custom


def test_covered_pods_sit_on_their_claims_node_before_it_exists() -> None:
    provisioner, cache, _ = setup()
    cache.upsert("Pod", pending("new-0", "1500m"))
    batch = provisioner.pending()
    assert set(batch) == {"ns/new-0"}  # the claim's own pods are covered
    objects = provisioner.snapshot_objects(batch)
    bound = {o["metadata"]["name"]: o["spec"].get("nodeName") for o in objects if o.get("kind", "Pod") == "Pod"
             and "containers" in o.get("spec", {})}
    assert bound == {"old-0": "general-a", "old-1": "general-a", "new-0": None}


def test_a_new_batch_fills_the_inflight_claim_instead_of_launching() -> None:
    for launched in (True, False):  # launched (Node not joined yet), or created and not even launched
        provisioner, cache, custom = setup(launched)
        cache.upsert("Pod", pending("new-0", "1500m"))
        record = provisioner.provision(provisioner.pending())
        assert custom.created == [] and record.plan.node_claims == []
        assert [(n.name, n.pods) for n in record.plan.existing_nodes] == [("general-a", ["ns/new-0"])]
        # the pod joins the claim's planned pods: covered from now on (and nominated by the lifecycle)
        assert record.joined == {"general-a": ["ns/new-0"]}
        name, patch = custom.patches[0]
        assert name == "general-a"
        assert json.loads(patch["metadata"]["annotations"][PODS_ANNOTATION]) == ["uid-new-0", "uid-old-0",
                                                                                   "uid-old-1"]
        assert "uid-new-0" in covered_pods(cache.items("NodeClaim"), 0.0, 15.0)
        assert provisioner.pending() == {}


def test_what_does_not_fit_the_leftover_room_gets_a_new_node() -> None:
    provisioner, cache, custom = setup()
    cache.upsert("Pod", pending("new-0", "1500m"))
    cache.upsert("Pod", pending("new-1", "1500m"))  # 3000m > 1900m left on the claim
    record = provisioner.provision(provisioner.pending())
    assert len(custom.created) == 1
    on_claim = [p for n in record.plan.existing_nodes if n.name == "general-a" for p in n.pods]
    assert len(on_claim) == 1 and len(record.plan.node_claims[0].pods) == 1


class NominationRecorder:
    """The pod calls ``_mark_placed`` makes: annotations, and each server-side apply of the nomination — a node
    name, or ``None`` for an apply without the field (the nomination withdrawn)."""

    def __init__(self) -> None:
        self.patched: list[tuple[str, Any]] = []
        self.applied: list[tuple[str, str | None]] = []

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any) -> None:
        self.patched.append((name, body))

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any, **apply: Any) -> None:
        assert apply == {"field_manager": "nodeplan-nomination", "_content_type": "application/apply-patch+yaml"}
        self.applied.append((name, (body.get("status") or {}).get("nominatedNodeName")))


def running_node_setup() -> tuple[Provisioner, ClusterCache, FakeCustom, NominationRecorder]:
    provisioner, cache, custom = setup()
    cache.informers["NodeClaim"]._store.clear()
    cache.upsert("Node", {"metadata": {"name": "running", "resourceVersion": "1", "labels": {
        "karpenter.sh/nodepool": "general", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "spec": {}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                               "conditions": [{"type": "Ready", "status": "True"}]}})
    recorder = NominationRecorder()
    provisioner._core = recorder  # type: ignore[assignment]
    return provisioner, cache, custom, recorder


def test_pods_planned_onto_a_running_node_are_annotated_and_nominated() -> None:
    provisioner, _, custom, recorder = running_node_setup()
    record = provisioner.provision(provisioner.pending())
    assert custom.created == [] and {p for n in record.plan.existing_nodes for p in n.pods} == {"ns/old-0", "ns/old-1"}
    assert sorted(name for name, _ in recorder.patched) == ["old-0", "old-1"]
    assert recorder.patched[0][1] == {"metadata": {"annotations": {"nodeplan.io/placed": "running"}}}
    # the node exists: the placement is their nomination (KEP-5278), written, withdrawn and written again: the
    # scheduler retries a pod it rejected for room when a nomination moves, not when a first one appears
    for name in ("old-0", "old-1"):
        assert [node for pod, node in recorder.applied if pod == name] == ["running", None, "running"]


def test_a_nomination_is_moved_once_and_the_schedulers_own_is_left_alone() -> None:
    provisioner, cache, _, recorder = running_node_setup()
    moved, kept = pending("old-0", "1"), pending("old-1", "1")
    # old-0: nodeplan had nominated it to the node it planned (its annotation names that node); old-1: the
    # scheduler nominated it to the running node itself (a binding cycle), which nodeplan never takes over
    moved["metadata"]["annotations"] = {"nodeplan.io/placed": "elsewhere"}
    moved["status"]["nominatedNodeName"] = "elsewhere"
    kept["status"]["nominatedNodeName"] = "running"
    cache.upsert("Pod", moved)
    cache.upsert("Pod", kept)
    provisioner.provision(provisioner.pending())
    assert recorder.applied == [("old-0", "running")]


def test_a_nomination_nodeplan_holds_on_the_node_already_is_withdrawn_and_written_again() -> None:
    provisioner, cache, _, recorder = running_node_setup()
    for name in ("old-0", "old-1"):
        pod = pending(name, "1")
        pod["metadata"]["annotations"] = {"nodeplan.io/placed": "running"}
        pod["status"]["nominatedNodeName"] = "running"
        cache.upsert("Pod", pod)
    provisioner.provision(provisioner.pending())
    for name in ("old-0", "old-1"):
        assert [node for pod, node in recorder.applied if pod == name] == [None, "running"]
    assert recorder.patched == []  # already annotated


def test_a_recorded_batch_replays_to_the_same_plan(tmp_path: Any) -> None:
    """``--record-batches``: the snapshot the solver saw, written as a v1 List, solves again to the same plan
    (in-flight claim and its planned pods included)."""
    from model.snapshot import parse_objects
    from solver.provision import SolveOptions, solve
    provisioner, cache, _ = setup()
    provisioner._options = ProvisionerOptions(solve_time_limit=2.0, workers=1, record_batches=tmp_path)
    cache.upsert("Pod", pending("new-0", "3"))
    record, _ = provisioner.plan(provisioner.pending())
    files = sorted(tmp_path.glob("batch-*.json"))
    assert [f.name for f in files] == ["batch-00001.json"]
    document = json.loads(files[0].read_text())
    assert document["kind"] == "List" and record.plan.node_claims
    replayed = solve(parse_objects(document["items"], source=str(files[0])).with_catalog(kwok_catalog()),
                     SolveOptions(time_limit=2.0, workers=1)).plan
    assert [(c.instance_type, c.pods) for c in replayed.node_claims] == \
        [(c.instance_type, c.pods) for c in record.plan.node_claims]
    assert replayed.existing_nodes == record.plan.existing_nodes


def test_the_provisioner_says_it_is_deciding_until_the_batch_is_applied_then_wakes_the_cache() -> None:
    """The NodeClaim registration waits while a batch is decided (``Lifecycle``'s barrier): ``deciding`` holds
    from planning to the last in-flight join, and its end wakes whoever waits on the cache."""
    provisioner, cache, custom = setup()
    cache.upsert("Pod", pending("new-0", "1500m"))
    seen: list[bool] = []
    real_join = provisioner._join_inflight

    def join(*args: Any) -> None:
        seen.append(provisioner.deciding())
        real_join(*args)
    provisioner._join_inflight = join  # type: ignore[method-assign]
    woken: list[bool] = []
    cache.wake = lambda: woken.append(provisioner.deciding())  # type: ignore[method-assign]
    assert not provisioner.deciding()
    provisioner.provision(provisioner.pending())
    assert seen == [True] and not provisioner.deciding()
    assert custom.patches  # the pod joined the in-flight claim
    assert woken == [False]  # woken once, after the decision ended
