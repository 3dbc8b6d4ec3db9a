"""Consolidation of nodes whose pods hold DRA devices. From the Kubernetes DRA documentation: a claim generated
from a template is owned by its pod and deleted with it; the pod's controller creates a replacement whose new
claim is allocated wherever the replacement lands. A named claim stays allocated on its devices while a pod
reserves it, so its consumers can only run where those devices are reachable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.fragmented import CREATED, node_object
from model.snapshot import parse_objects
from providers.catalog_file import load_catalog
from solver.disruption.consolidate import ConsolidateOptions
from solver.disruption.plan import consolidate
from solver.disruption.verify import verify_disruption
from tests.disruption.helpers import NOW, nodepool, running

ROOT = Path(__file__).resolve().parents[2]
CATALOG = load_catalog(ROOT / "fixtures/catalogs/kwok-dra.yaml")
TYPES = {it.name: it for it in CATALOG}
DRIVER = "gpu.kwok.nodeplan.io"
GPU_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
             "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}}


def _gpu_node(name: str, instance_type: str = "g-8x-t4x2") -> list[dict[str, Any]]:
    node = node_object(name, TYPES[instance_type], "test-zone-a", "on-demand", "default")
    node["metadata"]["creationTimestamp"] = CREATED
    slices = [s.api(owner={"apiVersion": "v1", "kind": "Node", "name": name, "uid": f"uid-{name}"})
              for s in TYPES[instance_type].node_resource_slices(name)]
    return [node, *slices]


def _gpu_pod(name: str, node_name: str, device: str, cpu: str = "1") -> list[dict[str, Any]]:
    """A running pod whose claim from ``one-gpu`` is allocated ``device`` of its node."""
    claim_name = f"{name}-gpu"
    obj = running(name, node_name, cpu=cpu, owner="trainer",
                  spec_extra={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]})
    obj["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": claim_name, "namespace": "default", "uid": f"uid-{claim_name}",
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                               "uid": obj["metadata"]["uid"], "controller": True}]},
             "spec": TEMPLATE["spec"]["spec"],
             "status": {"allocation": {
                 "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device}]},
                 "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                     {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}},
                 "reservedFor": [{"resource": "pods", "name": name, "uid": obj["metadata"]["uid"]}]}}
    return [obj, claim]


def _pool() -> dict[str, Any]:
    """On-demand g-8x-t4x2 only, so merging two nodes into one is the cheapest plan there is."""
    return nodepool(requirements=[
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g-8x-t4x2"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])


def test_half_empty_gpu_nodes_merge_and_the_moved_pod_gets_a_device_where_it_lands() -> None:
    objects = [_pool(), GPU_CLASS, TEMPLATE, *_gpu_node("gpu-a"), *_gpu_node("gpu-b"),
               *_gpu_pod("train-0", "gpu-a", "gpu-0"), *_gpu_pod("train-1", "gpu-b", "gpu-0")]
    snapshot = parse_objects(objects, source="test").with_catalog(CATALOG)
    result = consolidate(snapshot, ConsolidateOptions(now=NOW, time_limit=3.0))
    plan = result.plan
    assert verify_disruption(snapshot, plan, NOW) == []
    assert len(plan.remove) == 1 and not plan.node_claims  # the other node's free t4 takes the moved pod
    (move,) = plan.moves
    assert move.to in {"gpu-a", "gpu-b"} and move.to != plan.remove[0].node


def test_a_node_whose_devices_are_all_taken_receives_no_gpu_pod() -> None:
    """Each node's second device is held by a claim of a pod that stays: nowhere to move a GPU pod to."""
    objects = [_pool(), GPU_CLASS, TEMPLATE, *_gpu_node("gpu-a"), *_gpu_node("gpu-b"),
               *_gpu_pod("train-0", "gpu-a", "gpu-0"), *_gpu_pod("keep-a", "gpu-a", "gpu-1", cpu="2"),
               *_gpu_pod("train-1", "gpu-b", "gpu-0"), *_gpu_pod("keep-b", "gpu-b", "gpu-1", cpu="2")]
    snapshot = parse_objects(objects, source="test").with_catalog(CATALOG)
    result = consolidate(snapshot, ConsolidateOptions(now=NOW, time_limit=3.0))
    assert verify_disruption(snapshot, result.plan, NOW) == []
    assert not any(m.to in {"gpu-a", "gpu-b"} for m in result.plan.moves)
