"""Loading snapshots from ``kubectl get -o yaml|json`` output, and the errors bad input produces.

Input shapes follow kubectl: a YAML stream of documents separated by ``---``, or a single ``kind: List``
(``kubectl get -o yaml`` output) whose ``items`` are the objects, or the same as JSON.
Every error is an InputError whose message names the file, the object ("Kind namespace/name") and the
field path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from model.errors import InputError
from model.snapshot import load_snapshot, parse_objects, read_documents


def pod(name: str, *, namespace: str = "default", cpu: str = "100m", node: str | None = None,
        phase: str | None = None, owner: str | None = None, gated: bool = False,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner",
                                    "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox",
                                            "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "example.com/gate"}]
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def nodepool(name: str = "general", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"requirements": [
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}}, **spec}}


NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def write_yaml(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


def load_error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_snapshot(path)
    return info.value


# --- input shapes ---------------------------------------------------------------------------------------

def test_multi_document_yaml(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "snap.yaml", nodepool(), NODE, pod("a"), pod("b", namespace="team"))
    snap = load_snapshot(path)
    assert [p.key for p in snap.pods] == ["default/a", "team/b"]
    assert [n.name for n in snap.nodes] == ["node-1"]
    assert [np.name for np in snap.nodepools] == ["general"]
    assert snap.source == str(path)
    assert snap.warnings == ()


def test_empty_documents_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text("---\n" + yaml.safe_dump(pod("a")) + "---\n---\n", encoding="utf-8")
    assert [p.name for p in load_snapshot(path).pods] == ["a"]


def test_kind_list_is_flattened(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "list.yaml",
                      {"apiVersion": "v1", "kind": "List", "items": [pod("a"), pod("b"), NODE]})
    snap = load_snapshot(path)
    assert [p.name for p in snap.pods] == ["a", "b"]
    assert len(snap.nodes) == 1


def test_typed_list_is_flattened(tmp_path: Path) -> None:
    # `kubectl get pods -o yaml` against the API directly yields kind: PodList
    path = write_yaml(tmp_path / "pods.yaml", {"apiVersion": "v1", "kind": "PodList", "items": [pod("a")]})
    assert [p.name for p in load_snapshot(path).pods] == ["a"]


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod("a"), nodepool()]}),
                    encoding="utf-8")
    snap = load_snapshot(path)
    assert [p.name for p in snap.pods] == ["a"]
    assert [np.name for np in snap.nodepools] == ["general"]
    assert snap.pods[0].requests["cpu"] == 100


def test_read_documents_returns_every_object(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "docs.yaml", pod("a"), {"kind": "List", "items": [pod("b"), pod("c")]})
    assert [d["metadata"]["name"] for d in read_documents(path)] == ["a", "b", "c"]


def test_unknown_kinds_are_skipped_with_a_warning(tmp_path: Path) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}}
    path = write_yaml(tmp_path / "snap.yaml", pod("a"), service, service, config_map)
    snap = load_snapshot(path)
    assert [p.name for p in snap.pods] == ["a"]
    assert len(snap.warnings) == 2
    joined = "\n".join(snap.warnings)
    assert "2 object(s) of unsupported kind Service" in joined
    assert "1 object(s) of unsupported kind ConfigMap" in joined
    assert str(path) in joined
    assert snap.raw_objects == ()


def test_raw_kinds_are_kept_not_warned() -> None:
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "data", "namespace": "x"}}
    snap = parse_objects([pvc], source="mem")
    assert snap.raw_objects == (pvc,)
    assert snap.warnings == ()


# --- pending pods ---------------------------------------------------------------------------------------

def test_pending_pods_excludes_bound_finished_daemon_and_gated_pods() -> None:
    snap = parse_objects([
        pod("pending"),
        pod("pending-rs", owner="ReplicaSet"),
        pod("explicit-pending", phase="Pending"),
        pod("bound", node="node-1"),                              # already has spec.nodeName
        pod("succeeded", phase="Succeeded"),                      # terminal phases never need a node
        pod("failed", phase="Failed"),
        pod("daemon", owner="DaemonSet"),                         # the DaemonSet controller places these
        pod("gated", gated=True),                                 # schedulingGates hold the pod back
        pod("deleting", deleting=True),
    ], source="mem")
    assert [p.name for p in snap.pending_pods()] == ["pending", "pending-rs", "explicit-pending"]
    assert len(snap.pods) == 9


def test_pods_on_excludes_terminal_pods() -> None:
    snap = parse_objects([pod("run", node="n1", phase="Running"), pod("done", node="n1", phase="Succeeded"),
                          pod("other", node="n2")], source="mem")
    assert [p.name for p in snap.pods_on("n1")] == ["run"]


# --- errors ---------------------------------------------------------------------------------------------

def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    err = load_error(path)
    assert str(path) in str(err)
    assert "not found" in str(err)
    assert err.file == str(path)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [a, b\n  namespace: x\n", encoding="utf-8")
    err = load_error(path)
    text = str(err)
    assert str(path) in text
    assert "malformed YAML" in text
    assert "line 5" in text


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "kind": "List",\n  "items": [\n}\n', encoding="utf-8")
    text = str(load_error(path))
    assert str(path) in text
    assert "malformed JSON" in text
    assert "line 4" in text


def test_invalid_cpu_quantity(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "snap.yaml", pod("ok"), pod("x", cpu="lots"))
    err = load_error(path)
    text = str(err)
    assert str(path) in text
    assert "Pod default/x" in text
    assert "spec.containers[0].resources.requests.cpu" in text
    assert "lots" in text
    assert err.field == "spec.containers[0].resources.requests.cpu"


def test_nodepool_unknown_requirement_operator(tmp_path: Path) -> None:
    bad = nodepool("bad")
    bad["spec"]["template"]["spec"]["requirements"] = [
        {"key": "kubernetes.io/arch", "operator": "Equals", "values": ["amd64"]}]
    path = write_yaml(tmp_path / "pools.yaml", nodepool("good"), bad)
    err = load_error(path)
    text = str(err)
    assert str(path) in text
    assert "NodePool bad" in text
    assert "field spec.template.spec.requirements[0].operator" in text
    assert "Equals" in text


def test_nodepool_weight_out_of_range(tmp_path: Path) -> None:
    # karpenter.sh/v1 NodePool: weight minimum 1, maximum 100
    path = write_yaml(tmp_path / "pools.yaml", nodepool("heavy", weight=500))
    text = str(load_error(path))
    assert str(path) in text
    assert "NodePool heavy" in text
    assert "field spec.weight" in text


def test_nodepool_weight_in_range_is_kept(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "pools.yaml", nodepool("heavy", weight=100))
    assert load_snapshot(path).nodepools[0].weight == 100


def test_nodepool_label_contradicting_requirement(tmp_path: Path) -> None:
    bad = nodepool("contradiction")
    bad["spec"]["template"]["metadata"] = {"labels": {"kubernetes.io/os": "windows"}}
    text = str(load_error(write_yaml(tmp_path / "pools.yaml", bad)))
    assert "NodePool contradiction" in text
    assert "field spec.template.spec.requirements[0]" in text


def test_object_without_name(tmp_path: Path) -> None:
    nameless = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "default"},
                "spec": {"containers": []}}
    path = write_yaml(tmp_path / "snap.yaml", nameless)
    err = load_error(path)
    text = str(err)
    assert str(path) in text
    assert "Pod default/" in text
    assert "field metadata.name" in text
    assert err.field == "metadata.name"


def test_object_without_metadata(tmp_path: Path) -> None:
    err = load_error(write_yaml(tmp_path / "snap.yaml", {"apiVersion": "v1", "kind": "Node"}))
    assert err.field == "metadata.name"
    assert "Node" in str(err)


def test_object_without_kind(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "snap.yaml", pod("a"), {"metadata": {"name": "x"}})
    err = load_error(path)
    assert str(path) in str(err)
    assert "document 2" in str(err)
    assert err.field == "kind"


def test_non_object_document(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text("- just\n- a list\n", encoding="utf-8")
    err = load_error(path)
    assert str(path) in str(err)
    assert "not a Kubernetes object" in str(err)


def test_error_in_a_list_item_names_the_object(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"kind": "List", "items": [pod("a"), pod("b", namespace="team", cpu="1x")]}),
                    encoding="utf-8")
    text = str(load_error(path))
    assert str(path) in text
    assert "Pod team/b" in text
    assert "field spec.containers[0].resources.requests.cpu" in text


def test_bad_toleration_names_the_field() -> None:
    bad = pod("t")
    bad["spec"]["tolerations"] = [{"key": "a", "operator": "Exists", "value": "x"}]
    with pytest.raises(InputError) as info:
        parse_objects([bad], source="snap.yaml")
    text = str(info.value)
    assert "snap.yaml" in text
    assert "Pod default/t" in text
    assert "field spec.tolerations[0].value" in text
