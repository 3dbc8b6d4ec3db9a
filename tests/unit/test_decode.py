"""Slim decoding of watched objects (``controller.decode``): what the cache keeps of a Pod or Node is enough for
every rule and every controller predicate to decide exactly as on the object the API server sent, and nothing
of what no one reads (managedFields, images, env, probes, container statuses) is kept."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bench.controller_scale import api_node, api_pod
from controller.batch import is_bound, is_daemon_or_static, is_provisionable, is_terminal
from controller.decode import LAST_APPLIED, DecodeError, Decoder, NodeParser, PodParser
from controller.drain import is_critical, is_drainable
from model.node import Node
from model.pod import Pod
from model.snapshot import parse_objects


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the cache stores it after a watch event delivered it."""
    decoder = Decoder(obj["kind"], obj["apiVersion"])
    kind, out = decoder.decode_event(event("ADDED", obj))
    assert kind == "ADDED"
    return out


def rich_pod() -> dict[str, Any]:
    """A pending pod using every placement field a rule reads (the PodSpec fields of the scheduler's filters:
    NodeResourcesFit with init sidecars, overhead and pod-level resources, NodeAffinity, TaintToleration,
    PodTopologySpread, InterPodAffinity, NodePorts, VolumeBinding, DynamicResources, SchedulingGates)."""
    pod = api_pod("rich-1", "shop", "rich-5d9f", cpu="1", memory="1Gi")
    spec = pod["spec"]
    spec["containers"][0]["ports"].append({"name": "host", "containerPort": 80, "hostPort": 8080,
                                           "protocol": "TCP"})
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    spec["initContainers"] = [
        {"name": "proxy", "image": "proxy:1", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}}, "env": [{"name": "X", "value": "1"}]},
        {"name": "migrate", "image": "migrate:1", "resources": {"requests": {"cpu": "2"}}}]
    spec["overhead"] = {"cpu": "250m", "memory": "120Mi"}
    spec["resources"] = {"limits": {"memory": "4Gi"}}
    spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a", "test-zone-b"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": {"matchExpressions": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "app"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                          "whenUnsatisfiable": "DoNotSchedule",
                                          "labelSelector": {"matchLabels": {"app": "app"}}}]
    spec["tolerations"].append({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
    spec["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "data-rich-1"}})
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    spec["priority"] = 1000
    spec["priorityClassName"] = "system-cluster-critical"
    pod["status"]["nominatedNodeName"] = "n7"
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "rich-1-gpu-x8z"}]
    pod["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
    return pod


@pytest.mark.parametrize("raw", [
    api_pod("web-1", "shop", "web-7c6b", cpu="250m", memory="512Mi", node="n1"),
    api_pod("web-2", "shop", "web-7c6b", cpu="250m", memory="512Mi"),
    rich_pod(),
], ids=["running", "unschedulable", "every-placement-field"])
def test_a_slim_pod_parses_to_the_same_model_and_predicates(raw: dict[str, Any]) -> None:
    kept = slim(raw)
    assert Pod.parse(kept) == Pod.parse(raw)
    for predicate in (is_bound, is_terminal, is_provisionable, is_daemon_or_static, is_critical, is_drainable):
        assert predicate(kept) == predicate(raw), predicate.__name__
    assert kept["metadata"]["resourceVersion"] == raw["metadata"]["resourceVersion"]


def test_what_no_one_reads_is_dropped() -> None:
    raw = rich_pod()
    raw["metadata"]["annotations"][LAST_APPLIED] = json.dumps(raw)  # kubectl apply's copy: no rule reads it
    kept = slim(raw)
    assert "managedFields" not in kept["metadata"]
    assert LAST_APPLIED not in kept["metadata"]["annotations"]
    assert kept["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    container = kept["spec"]["containers"][0]
    assert set(container) == {"name", "resources", "ports"}  # no image, env, probes, mounts
    assert [v["name"] for v in kept["spec"]["volumes"]] == ["data"]  # configMap and token volumes go
    assert set(kept["status"]) <= {"phase", "conditions", "nominatedNodeName", "resourceClaimStatuses",
                                   "startTime"}
    assert all(set(c) <= {"type", "status", "reason"} for c in kept["status"]["conditions"])
    running = api_pod("web-1", "shop", "web-7c6b", cpu="250m", memory="512Mi", node="n1")
    assert len(json.dumps(slim(running))) < len(json.dumps(running)) / 3


def test_a_slim_node_keeps_capacity_taints_and_conditions() -> None:
    raw = api_node("n1")
    raw["spec"]["taints"] = [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
    raw["spec"]["unschedulable"] = True
    raw["metadata"]["deletionTimestamp"] = "2026-12-01T10:05:00Z"
    kept = slim(raw)
    assert Node.parse(kept) == Node.parse(raw)
    assert {"addresses", "nodeInfo", "daemonEndpoints"}.isdisjoint(kept["status"])
    assert kept["status"]["conditions"][0]["type"] == "Ready"


def test_other_kinds_are_kept_whole_without_managed_fields() -> None:
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "managedFields": [{"manager": "kubectl"}],
                         "annotations": {LAST_APPLIED: "{}", "team": "a"}},
            "spec": {"template": {"spec": {"requirements": []}}, "weight": 5}, "status": {"resources": {}}}
    kept = slim(pool)
    expected = copy.deepcopy(pool)
    del expected["metadata"]["managedFields"]
    expected["metadata"]["annotations"] = {"team": "a"}
    assert kept == expected


def test_list_pages_and_replicas_share_their_common_parts() -> None:
    items = [api_pod(f"web-{i}", "shop", "web-7c6b", cpu="250m", memory="512Mi", node=f"n{i}") for i in range(3)]
    body = json.dumps({"kind": "PodList", "apiVersion": "v1",
                       "metadata": {"resourceVersion": "77", "continue": "next-page"}, "items": items}).encode()
    decoded, rv, token = Decoder("Pod", "v1").decode_list(body)
    assert (rv, token) == ("77", "next-page")
    assert [p["kind"] for p in decoded] == ["Pod"] * 3  # list items carry no kind: the cache adds it
    assert decoded[0]["spec"]["containers"] is decoded[2]["spec"]["containers"]
    assert decoded[0]["metadata"]["labels"] is decoded[1]["metadata"]["labels"]
    assert decoded[0]["spec"]["nodeName"] != decoded[1]["spec"]["nodeName"]


def test_watch_errors_and_bookmarks() -> None:
    decoder = Decoder("Pod", "v1")
    kind, status = decoder.decode_event(event("ERROR", {"kind": "Status", "code": 410, "message": "too old"}))
    assert (kind, status["code"]) == ("ERROR", 410)
    kind, mark = decoder.decode_event(event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "9"}}))
    assert (kind, mark["metadata"]["resourceVersion"]) == ("BOOKMARK", "9")
    with pytest.raises(DecodeError, match="Pod watch event: malformed JSON"):
        decoder.decode_event(b'{"type": "ADDED", "object": {')


def test_a_field_of_the_wrong_type_is_kept_for_the_parser_to_name() -> None:
    raw = api_pod("web-1", "shop", "web-7c6b", cpu="250m", memory="512Mi", node="n1")
    raw["spec"]["containers"] = {"name": "not-a-list"}
    kept = slim(raw)
    assert kept["spec"]["containers"] == {"name": "not-a-list"}
    assert "managedFields" not in kept["metadata"]
    with pytest.raises(Exception, match=r"cluster: Pod shop/web-1: field spec.containers: expected a list"):
        parse_objects([kept], source="cluster")


def test_pod_parser_gives_pod_parse_s_model_for_each_replica() -> None:
    parse = PodParser()
    first = slim(api_pod("web-1", "shop", "web-7c6b", cpu="250m", memory="512Mi", node="n1", rv=5))
    second = slim(api_pod("web-2", "shop", "web-7c6b", cpu="250m", memory="512Mi", node="n2", rv=6))
    pending = slim(api_pod("web-3", "shop", "web-7c6b", cpu="250m", memory="512Mi", rv=7))
    other = slim(api_pod("api-1", "shop", "api-5f5f", cpu="1", memory="2Gi", node="n1", rv=8))
    models = [parse(p) for p in (first, second, pending, other)]
    assert models == [Pod.parse(p) for p in (first, second, pending, other)]
    assert models[1].node_name == "n2" and models[1].uid == "uid-shop-web-2"
    assert models[2].pending and not models[2].node_name
    assert models[0].requests is models[1].requests  # shared, not copied
    assert models[3].requests != models[0].requests


def test_node_parser_gives_node_parse_s_model_for_each_node() -> None:
    """Nodes of one type share their model's taints, annotations and resources; whatever differs in a field
    ``Node.parse`` reads (taints, allocatable, Ready, cordon, deletion) gives that node its own model."""
    parse = NodeParser()
    nodes = [slim(api_node(f"n{i}", zone=f"test-zone-{'ab'[i % 2]}", rv=i)) for i in range(4)]
    nodes[2]["spec"] = {**nodes[2]["spec"], "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
    nodes[3]["spec"] = {**nodes[3]["spec"], "unschedulable": True}
    bigger = slim(api_node("n4", cpu="8", memory="32Gi"))
    not_ready = slim(api_node("n5"))
    not_ready["status"]["conditions"] = [{**c, "status": "False"} if c["type"] == "Ready" else c
                                         for c in not_ready["status"]["conditions"]]
    deleting = slim(api_node("n6"))
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T11:00:00Z"
    raws = [*nodes, bigger, not_ready, deleting]
    models = [parse(n) for n in raws]
    assert models == [Node.parse(n) for n in raws]
    assert models[0].name == "n0" and models[1].labels["kubernetes.io/hostname"] == "n1"
    assert models[1].labels["topology.kubernetes.io/zone"] == "test-zone-b" and models[1].provider_id == "kwok://n1"
    assert models[0].allocatable is models[1].allocatable  # shared, not copied
    assert models[2].taints and not models[0].taints and models[3].unschedulable
    assert models[4].allocatable != models[0].allocatable and not models[5].ready and models[6].deleting


def test_node_parser_leaves_a_bad_field_to_node_parse() -> None:
    raw = slim(api_node("n1"))
    raw["metadata"]["labels"] = {**raw["metadata"]["labels"], "bad": 3}
    with pytest.raises(Exception, match=r"metadata.labels.bad: expected a string"):
        NodeParser()(raw)
