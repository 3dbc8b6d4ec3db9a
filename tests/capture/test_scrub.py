"""``nodeplan snapshot`` keeps only what the rules read: a token planted in every place a secret can hide in
the Kubernetes API (env, envFrom, probes, lifecycle hooks, CSI / flex volume attributes and secret refs,
StorageClass parameters, DRA driver parameters, annotations, ...) is gone from the written file, while the
snapshot loads to the same pods, nodes, pools and claims as the objects as listed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.capture import CapturedKind, capture, to_yaml
from cli.scrub import KEPT_ANNOTATION_PREFIXES, KEPT_ANNOTATIONS, scrub
from model.snapshot import Snapshot, load_snapshot, parse_objects, read_documents

TOKEN = "PLANTED-TOKEN"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _probe(port: int) -> dict[str, Any]:
    return {"httpGet": {"path": f"/health?key={TOKEN}-probe-path", "port": port,
                        "httpHeaders": [{"name": "Authorization", "value": f"Bearer {TOKEN}-probe-header"}]}}


def _container(name: str) -> dict[str, Any]:
    return {
        "name": name, "image": "registry.example/web:1",
        "command": ["/bin/web", f"--password={TOKEN}-command"], "args": [f"--key={TOKEN}-args"],
        "workingDir": f"/srv/{TOKEN}-workdir",
        "env": [{"name": "API_KEY", "value": f"{TOKEN}-env"},
                {"name": "DB", "valueFrom": {"secretKeyRef": {"name": f"{TOKEN}-env-secret", "key": "password"}}}],
        "envFrom": [{"secretRef": {"name": f"{TOKEN}-envfrom-secret"}},
                    {"configMapRef": {"name": f"{TOKEN}-envfrom-cm"}, "prefix": "X_"}],
        "livenessProbe": {"exec": {"command": ["check", f"--token={TOKEN}-liveness-exec"]}},
        "readinessProbe": _probe(8080),
        "startupProbe": {"grpc": {"port": 9090, "service": f"{TOKEN}-grpc-service"}},
        "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", f"echo {TOKEN}-poststart"]}},
                      "preStop": _probe(8080)},
        "volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": f"{TOKEN}-subpath"}],
        "securityContext": {"seLinuxOptions": {"user": f"{TOKEN}-selinux"}},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "ports": [{"name": "http", "containerPort": 8080, "hostPort": 18080, "protocol": "TCP"}],
    }


SCHEDULING: dict[str, Any] = {
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "affinity": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": {
                "matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "DoNotSchedule",
                                   "labelSelector": {"matchLabels": {"app": "web"}}}],
    "priority": 1000,
}


def _pod_spec() -> dict[str, Any]:
    sidecar = {**_container("proxy"), "restartPolicy": "Always",
               "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    sidecar.pop("ports")
    return {
        **copy.deepcopy(SCHEDULING),
        "serviceAccountName": f"{TOKEN}-service-account",
        "imagePullSecrets": [{"name": f"{TOKEN}-pull-secret"}],
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": [f"{TOKEN}-host-alias"]}],
        "containers": [_container("web")],
        "initContainers": [sidecar],
        "ephemeralContainers": [{"name": "debug", "image": "busybox",
                                 "env": [{"name": "K", "value": f"{TOKEN}-ephemeral"}]}],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
            {"name": "inline", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": True,
                                       "volumeAttributes": {"secretProviderClass": f"{TOKEN}-csi-attribute"},
                                       "nodePublishSecretRef": {"name": f"{TOKEN}-csi-secret-ref"}}},
            {"name": "flex", "flexVolume": {"driver": "example/lvm", "options": {"password": f"{TOKEN}-flex-option"},
                                            "secretRef": {"name": f"{TOKEN}-flex-secret"}}},
            {"name": "creds", "secret": {"secretName": f"{TOKEN}-secret-volume"}},
            {"name": "settings", "configMap": {"name": f"{TOKEN}-configmap-volume"}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"audience": f"{TOKEN}-audience",
                                                                                   "path": "t"}}]}},
            {"name": "host", "hostPath": {"path": f"/var/{TOKEN}-hostpath"}},
            {"name": "rbd", "rbd": {"monitors": ["10.0.0.2"], "image": "i", "keyring": f"/etc/{TOKEN}-keyring",
                                    "secretRef": {"name": f"{TOKEN}-rbd-secret"}}},
        ],
    }


def _annotations(**kept: str) -> dict[str, str]:
    return {"kubectl.kubernetes.io/last-applied-configuration": json.dumps({"env": f"{TOKEN}-last-applied"}),
            "example.com/api-key": f"{TOKEN}-annotation", **kept}


def _meta(name: str, namespace: str | None = "shop", **kept: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "creationTimestamp": "2026-11-01T00:00:00Z",
                            "labels": {"app": "web"}, "annotations": _annotations(**kept),
                            "managedFields": [{"manager": f"{TOKEN}-manager", "fieldsV1": {"f:x": {}}}]}
    if namespace:
        meta["namespace"] = namespace
    return meta


def cluster() -> list[dict[str, Any]]:
    """One object of every kind the snapshot captures, with a token in every place the rules do not read."""
    nodepool_hash = {"karpenter.sh/nodepool-hash": "1234", "karpenter.sh/nodepool-hash-version": "v3"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta("shop", None)},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": _meta("default", None, **nodepool_hash),
         "spec": {"template": {"metadata": {"labels": {"team": "web"},
                                            "annotations": {"example.com/owner": f"{TOKEN}-template-annotation"}},
                               "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                                         "name": "default"},
                                        "requirements": [{"key": "kubernetes.io/arch", "operator": "In",
                                                          "values": ["amd64", "arm64"]}]}},
                  "limits": {"cpu": "1000"}}},
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {**_meta("node-a", None, **nodepool_hash, **{"karpenter.sh/do-not-disrupt": "true"}),
                      "labels": {"kubernetes.io/hostname": "node-a", "topology.kubernetes.io/zone": "z-1",
                                 "kubernetes.io/arch": "amd64", "karpenter.sh/nodepool": "default"}},
         "spec": {"providerID": "kwok://node-a", "taints": [{"key": "dedicated", "value": "web",
                                                             "effect": "NoSchedule"}],
                  "configSource": {"configMap": {"name": f"{TOKEN}-node-config"}}},
         "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                    "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "images": [{"names": [f"registry.example/{TOKEN}-image"]}],
                    "nodeInfo": {"machineID": f"{TOKEN}-machine-id"},
                    "addresses": [{"type": "Hostname", "address": f"{TOKEN}-address"}]}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta("agent"),
         "spec": {"selector": {"matchLabels": {"app": "agent"}},
                  "template": {"metadata": {"labels": {"app": "agent"},
                                            "annotations": {"example.com/token": f"{TOKEN}-ds-template"}},
                               "spec": _pod_spec()}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": _meta("web-0", **{"controller.kubernetes.io/pod-deletion-cost": "100",
                                       "karpenter.sh/do-not-disrupt": "true"}),
         "spec": _pod_spec(),
         "status": {"phase": "Pending", "message": f"{TOKEN}-status-message",
                    "containerStatuses": [{"name": "web", "imageID": f"{TOKEN}-image-id"}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": _meta("web-1", **{"kubernetes.io/config.mirror": "m"}),
         "spec": {**_pod_spec(), "nodeName": "node-a"}, "status": {"phase": "Running",
                                                                   "startTime": "2026-11-01T00:01:00Z"}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": _meta("data-web-0", **{"volume.kubernetes.io/selected-node": "node-a"}),
         "spec": {"storageClassName": "zonal", "volumeName": "pv-1", "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": "10Gi"}},
                  "dataSource": {"kind": "VolumeSnapshot", "name": f"{TOKEN}-data-source"}},
         "status": {"phase": "Bound"}},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": _meta("pv-1", None),
         "spec": {"storageClassName": "zonal", "capacity": {"storage": "10Gi"},
                  "claimRef": {"namespace": "shop", "name": "data-web-0", "uid": "uid-data-web-0"},
                  "mountOptions": [f"password={TOKEN}-mount-option"],
                  "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1",
                          "volumeAttributes": {"key": f"{TOKEN}-pv-csi-attribute"},
                          "nodeStageSecretRef": {"name": f"{TOKEN}-pv-stage-secret", "namespace": "kube-system"},
                          "nodePublishSecretRef": {"name": f"{TOKEN}-pv-publish-secret"},
                          "controllerPublishSecretRef": {"name": f"{TOKEN}-pv-controller-secret"},
                          "controllerExpandSecretRef": {"name": f"{TOKEN}-pv-expand-secret"},
                          "nodeExpandSecretRef": {"name": f"{TOKEN}-pv-node-expand-secret"}},
                  "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-1"]}]}]}}}},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": _meta("zonal", None, **{"storageclass.kubernetes.io/is-default-class": "true"}),
         "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer",
         "parameters": {"csi.storage.k8s.io/provisioner-secret-name": f"{TOKEN}-sc-parameter"},
         "mountOptions": [f"{TOKEN}-sc-mount-option"],
         "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone",
                                                           "values": ["z-1", "z-2"]}]}]},
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": _meta("node-a", None),
         "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25},
                               "topologyKeys": ["topology.kubernetes.io/zone"]}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta("web"),
         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": _meta("gpu.example.com", None),
         "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}],
                  "config": [{"opaque": {"driver": "gpu.example.com",
                                         "parameters": {"licence": f"{TOKEN}-deviceclass-parameter"}}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": _meta("one-gpu"),
         "spec": {"metadata": {"annotations": {"example.com/x": f"{TOKEN}-claim-template-annotation"}},
                  "spec": {"devices": {
                      "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}],
                      "config": [{"requests": ["gpu"], "opaque": {
                          "driver": "gpu.example.com", "parameters": {"k": f"{TOKEN}-template-parameter"}}}]}}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": _meta("shared-gpu"),
         "spec": {"devices": {
             "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}],
             "config": [{"requests": ["gpu"], "opaque": {"driver": "gpu.example.com",
                                                         "parameters": {"k": f"{TOKEN}-claim-parameter"}}}]}}},
    ]


def _captured(objects: list[dict[str, Any]]) -> list[CapturedKind]:
    """Each object listed by its own fake kubernetes-client call, as the API server returns it."""
    class Response:
        def __init__(self, item: dict[str, Any]) -> None:
            self.data = json.dumps({"items": [item]}).encode()

    def lister(item: dict[str, Any]) -> Any:
        return lambda **kwargs: Response({k: v for k, v in item.items() if k not in ("apiVersion", "kind")})
    return [CapturedKind(o["kind"], o["apiVersion"], lister(o)) for o in objects]


def _placement(snapshot: Snapshot) -> dict[str, Any]:
    """What the rules read of a loaded snapshot: every parsed object (annotations compared on their own, DRA
    opaque driver parameters left out: passed to drivers, never read) and the volume objects' fields the
    volume rule reads, through the pods it resolves."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("annotations", "config")}
        if isinstance(value, list | tuple):
            return [strip(v) for v in value]
        return value
    return strip(snapshot.model_dump(exclude={"raw_objects", "source", "warnings"}))


def test_no_planted_token_survives_in_the_snapshot_file(tmp_path: Path) -> None:
    objects, warnings = capture(_captured(cluster()))
    path = tmp_path / "snap.yaml"
    path.write_text(to_yaml(objects, header="test"))
    text = path.read_text()
    assert warnings == [] and len(objects) == len(cluster())
    leaked = sorted({word for word in text.replace('"', " ").replace("'", " ").split() if TOKEN in word})
    assert leaked == []
    assert "managedFields" not in text and "last-applied-configuration" not in text


def test_every_field_a_rule_reads_survives(tmp_path: Path) -> None:
    original = parse_objects(cluster(), source="cluster")
    objects, _ = capture(_captured(cluster()))
    path = tmp_path / "snap.yaml"
    path.write_text(to_yaml(objects))
    scrubbed = load_snapshot(path)
    assert _placement(scrubbed) == _placement(original)
    web = next(p for p in scrubbed.pods if p.name == "web-0")
    assert web.annotations == {"controller.kubernetes.io/pod-deletion-cost": "100",
                               "karpenter.sh/do-not-disrupt": "true"}
    assert web.volume_claims == ("data-web-0",) and web.volume_terms  # the PV's zone reached the pod
    assert web.host_ports and web.topology_spread and web.pod_anti_affinity and web.tolerations
    assert str(web.requests) == str(original.pods[0].requests)
    assert {n.name: n.annotations for n in scrubbed.nodes} == {"node-a": {
        "karpenter.sh/nodepool-hash": "1234", "karpenter.sh/nodepool-hash-version": "v3",
        "karpenter.sh/do-not-disrupt": "true"}}
    assert scrubbed.nodepools[0].metadata.annotations == {"karpenter.sh/nodepool-hash": "1234",
                                                          "karpenter.sh/nodepool-hash-version": "v3"}
    raw = {o["kind"]: o for o in scrubbed.raw_objects}
    assert raw["StorageClass"]["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert raw["StorageClass"]["allowedTopologies"]
    assert raw["StorageClass"]["volumeBindingMode"] == "WaitForFirstConsumer"
    assert raw["PersistentVolume"]["spec"]["csi"] == {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}
    assert raw["PersistentVolumeClaim"]["metadata"]["annotations"] == {"volume.kubernetes.io/selected-node": "node-a"}
    assert raw["CSINode"]["spec"] == cluster()[9]["spec"]
    pod = next(o for o in objects if o["kind"] == "Pod")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["inline"] == {"name": "inline", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": True}}
    assert volumes["flex"] == {"name": "flex", "flexVolume": {"driver": "example/lvm"}}
    assert volumes["creds"] == {"name": "creds", "secret": {}}  # the kind of volume stays, its content does not
    assert set(pod["spec"]["containers"][0]) == {"name", "image", "resources", "ports"}
    assert pod["spec"]["initContainers"][0]["restartPolicy"] == "Always"  # a sidecar: its requests count apart


@pytest.mark.parametrize("path", sorted((FIXTURES / "snapshots").glob("*.yaml"))
                         + sorted((FIXTURES / "manifests" / "dra").glob("*.yaml")), ids=lambda p: p.name)
def test_bundled_snapshots_load_the_same_after_scrubbing(path: Path) -> None:
    objects = read_documents(path)
    assert _placement(parse_objects([scrub(o) for o in objects], source="s")) == _placement(
        parse_objects(objects, source="s"))


def test_every_annotation_nodeplan_reads_is_kept() -> None:
    """The constants the solver and the controller read annotations by are in the kept table."""
    from controller.drain import MIRROR_ANNOTATION
    from controller.provisioner import PLACED_ANNOTATION, PODS_ANNOTATION, PRICE_ANNOTATION
    from model.labels import DO_NOT_DISRUPT, KWOK_NODE_ANNOTATION
    from solver.disruption.candidates import DELETION_COST, NODEPOOL_HASH

    def kept(key: str) -> bool:
        return key in KEPT_ANNOTATIONS or any(key.startswith(p) for p in KEPT_ANNOTATION_PREFIXES)
    for key in (MIRROR_ANNOTATION, PLACED_ANNOTATION, PODS_ANNOTATION, PRICE_ANNOTATION, DO_NOT_DISRUPT,
                KWOK_NODE_ANNOTATION, DELETION_COST, NODEPOOL_HASH, "storageclass.kubernetes.io/is-default-class"):
        assert kept(key), key
    assert yaml.safe_load(yaml.safe_dump(dict(KEPT_ANNOTATIONS)))  # a plain table of strings


def test_snapshot_command_writes_yaml_or_a_json_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``-o`` is the snapshot's format (yaml stream, or one JSON ``List``), ``--output-file`` the file; both load."""
    import kubernetes.config
    from typer.testing import CliRunner

    import cli.capture
    from cli.app import app

    class Api:
        class configuration:  # the attribute name the client has
            host = "https://cluster.example"

        def __enter__(self) -> Api:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(kubernetes.config, "new_client_from_config", lambda **_: Api())
    monkeypatch.setattr(cli.capture, "kinds", lambda api: _captured(cluster()))
    for fmt in ("yaml", "json"):
        out = tmp_path / f"snap.{fmt}"
        result = CliRunner().invoke(app, ["snapshot", "-o", fmt, "--output-file", str(out), "-q"])
        assert result.exit_code == 0, result.output
        assert TOKEN not in out.read_text()
        assert _placement(load_snapshot(out)) == _placement(parse_objects(cluster(), source="cluster"))
    assert json.loads((tmp_path / "snap.json").read_text())["kind"] == "List"
