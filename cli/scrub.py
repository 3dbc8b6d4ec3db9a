"""What ``nodeplan snapshot`` keeps of each object: the fields placement and consolidation read, nothing else.

An allow-list, not a deny-list: a snapshot is a file people attach to bug reports and pull requests, and a
deny-list misses the next place a secret hides (probe HTTP headers, lifecycle hooks, CSI volume attributes,
flex volume options, StorageClass parameters, DRA driver parameters, annotations holding whole objects).
Each table below names what is kept and why; everything else is dropped. Labels stay whole (selectors,
affinity and spread match them); annotations stay only where nodeplan or Kubernetes' scheduling reads them.
``tests/capture/test_scrub.py`` plants a token in every other place and checks the snapshot loads to the same
``Snapshot`` as the unscrubbed objects.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

Object = dict[str, Any]

#: annotations read by nodeplan or by Kubernetes' scheduling, and who reads them
KEPT_ANNOTATIONS: Mapping[str, str] = {
    "karpenter.sh/do-not-disrupt": "consolidation candidates (pods and nodes)",
    "karpenter.sh/nodepool-hash": "drift: the NodePool's hash against its nodes'",
    "karpenter.sh/nodepool-hash-version": "drift: hashes compare only within one version",
    "controller.kubernetes.io/pod-deletion-cost": "Karpenter's eviction cost of a pod",
    "kubernetes.io/config.mirror": "mirror (static) pods stay on their node",
    "storageclass.kubernetes.io/is-default-class": "the class of a claim without storageClassName",
    "storageclass.beta.kubernetes.io/is-default-class": "the same, as older clusters mark it",
    "volume.beta.kubernetes.io/storage-class": "a claim's class, as the scheduler's VolumeBinding reads it",
    "volume.kubernetes.io/selected-node": "the node a WaitForFirstConsumer claim is being provisioned for",
    "pv.kubernetes.io/bind-completed": "whether a claim's binding is complete",
    "kwok.x-k8s.io/node": "nodes KWOK simulates",
}
#: annotation prefixes whose every key is kept: what Karpenter and nodeplan write on their own objects
KEPT_ANNOTATION_PREFIXES: Mapping[str, str] = {
    "nodeplan.io/": "the controller's own bookkeeping (pods planned for a NodeClaim, prices, replacements)",
    "karpenter.sh/": "Karpenter's state on NodePools, NodeClaims and nodes",
}

#: metadata every kind keeps (``managedFields`` and the rest are dropped; annotations are filtered)
METADATA = ("name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
            "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
            "finalizers")

#: PodSpec fields the scheduler's filters, Karpenter's scheduling and consolidation read
POD_SPEC = ("nodeName", "nodeSelector", "affinity", "tolerations", "topologySpreadConstraints", "schedulerName",
            "priority", "priorityClassName", "preemptionPolicy", "schedulingGates", "overhead", "runtimeClassName",
            "resources", "resourceClaims", "hostNetwork", "os", "terminationGracePeriodSeconds", "volumes",
            "containers", "initContainers")
#: container fields: requests and limits (with DRA ``claims``), host ports, sidecar restart policy; the image
#: for the scheduler's ImageLocality. Never env/envFrom, command/args, probes, lifecycle hooks, mounts.
CONTAINER = ("name", "image", "resources", "ports", "restartPolicy")
PORT = ("name", "containerPort", "hostPort", "hostIP", "protocol")
POD_STATUS = ("phase", "conditions", "startTime", "nominatedNodeName", "resourceClaimStatuses", "qosClass")

#: per volume source, the fields Kubernetes' VolumeBinding, VolumeRestrictions and NodeVolumeLimits read
#: (claim names, drivers, volume identities); any other source keeps only its type (``secret: {}``)
VOLUME_SOURCE: Mapping[str, tuple[str, ...]] = {
    "persistentVolumeClaim": ("claimName", "readOnly"),
    "csi": ("driver", "volumeHandle", "readOnly", "fsType"),
    "flexVolume": ("driver", "readOnly", "fsType"),
    "emptyDir": ("medium", "sizeLimit"),
    "awsElasticBlockStore": ("volumeID", "readOnly", "fsType", "partition"),
    "gcePersistentDisk": ("pdName", "readOnly", "fsType", "partition"),
    "azureDisk": ("diskName", "diskURI", "readOnly", "fsType", "kind"),
}
CLAIM_SPEC = ("storageClassName", "volumeName", "accessModes", "resources", "volumeMode", "selector",
              "volumeAttributesClassName")
PV_SPEC = ("capacity", "accessModes", "claimRef", "storageClassName", "nodeAffinity", "volumeMode",
           "persistentVolumeReclaimPolicy", "volumeAttributesClassName")
CLAIM_REF = ("kind", "apiVersion", "namespace", "name", "uid")
#: StorageClass ``parameters`` and ``mountOptions`` are dropped: parameters name provisioner secrets
STORAGE_CLASS = ("provisioner", "volumeBindingMode", "allowedTopologies", "reclaimPolicy", "allowVolumeExpansion")
CSI_DRIVER = ("name", "nodeID", "topologyKeys", "allocatable")
NODE_SPEC = ("providerID", "taints", "unschedulable")
NODE_STATUS = ("capacity", "allocatable", "conditions")


def _pick(data: Any, keys: tuple[str, ...]) -> Object:
    return {k: data[k] for k in keys if k in data} if isinstance(data, Mapping) else {}


def _annotation_kept(key: str) -> bool:
    return key in KEPT_ANNOTATIONS or any(key.startswith(p) for p in KEPT_ANNOTATION_PREFIXES)


def metadata(meta: Any) -> Object:
    """The kept metadata; annotations filtered to ``KEPT_ANNOTATIONS`` (and left out when none remain)."""
    out = _pick(meta, METADATA)
    annotations = out.pop("annotations", None)
    if isinstance(annotations, Mapping):
        kept = {k: v for k, v in annotations.items() if isinstance(k, str) and _annotation_kept(k)}
        if kept:
            out["annotations"] = kept
    return out


def _container(container: Any) -> Any:
    if not isinstance(container, Mapping):
        return container  # left for the loader to reject with its field
    out = _pick(container, CONTAINER)
    if isinstance(out.get("ports"), list):
        out["ports"] = [_pick(p, PORT) if isinstance(p, Mapping) else p for p in out["ports"]]
    return out


def _volume_source(kind: str, source: Any) -> Any:
    if kind == "ephemeral":  # a generic ephemeral volume: its claim's spec decides topology
        template = source.get("volumeClaimTemplate") if isinstance(source, Mapping) else None
        if not isinstance(template, Mapping):
            return {}
        kept: Object = {"spec": _pick(template.get("spec"), CLAIM_SPEC)}
        if isinstance(template.get("metadata"), Mapping):
            kept = {"metadata": metadata(template["metadata"]), **kept}
        return {"volumeClaimTemplate": kept}
    return _pick(source, VOLUME_SOURCE.get(kind, ()))


def _volume(volume: Any) -> Any:
    if not isinstance(volume, Mapping):
        return volume
    return {k: v if k == "name" else _volume_source(k, v) for k, v in volume.items()}


def pod_spec(spec: Any) -> Any:
    """The kept PodSpec (shared by Pods and DaemonSet templates)."""
    if not isinstance(spec, Mapping):
        return spec
    out = _pick(spec, POD_SPEC)
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [_container(c) for c in out[key]]
    if isinstance(out.get("volumes"), list):
        out["volumes"] = [_volume(v) for v in out["volumes"]]
    return out


def _pod(obj: Mapping[str, Any]) -> Object:
    return {"spec": pod_spec(obj.get("spec")), "status": _pick(obj.get("status"), POD_STATUS)}


def _template_spec(spec: Any) -> Any:
    """A workload spec with its pod template scrubbed (DaemonSets)."""
    if not isinstance(spec, Mapping):
        return spec
    out = dict(spec)
    template = spec.get("template")
    if isinstance(template, Mapping):
        out["template"] = {"metadata": metadata(template.get("metadata")), "spec": pod_spec(template.get("spec"))}
    return out


def _daemonset(obj: Mapping[str, Any]) -> Object:
    return {"spec": _template_spec(obj.get("spec")), "status": obj.get("status")}


def _node(obj: Mapping[str, Any]) -> Object:
    return {"spec": _pick(obj.get("spec"), NODE_SPEC), "status": _pick(obj.get("status"), NODE_STATUS)}


def _claim(obj: Mapping[str, Any]) -> Object:
    return {"spec": _pick(obj.get("spec"), CLAIM_SPEC), "status": _pick(obj.get("status"), ("phase", "capacity",
                                                                                          "accessModes"))}


def _volume_object(obj: Mapping[str, Any]) -> Object:
    raw = obj.get("spec")
    spec = _pick(raw, PV_SPEC)
    if isinstance(spec.get("claimRef"), Mapping):
        spec["claimRef"] = _pick(spec["claimRef"], CLAIM_REF)
    for kind, keys in VOLUME_SOURCE.items():
        if isinstance(raw, Mapping) and kind in raw:
            spec[kind] = _pick(raw[kind], keys)
    return {"spec": spec, "status": _pick(obj.get("status"), ("phase",))}


def _storage_class(obj: Mapping[str, Any]) -> Object:
    return _pick(obj, STORAGE_CLASS)


def _csinode(obj: Mapping[str, Any]) -> Object:
    drivers = (obj.get("spec") or {}).get("drivers") if isinstance(obj.get("spec"), Mapping) else None
    if not isinstance(drivers, list):
        return {"spec": obj.get("spec")}
    return {"spec": {"drivers": [_pick(d, CSI_DRIVER) if isinstance(d, Mapping) else d for d in drivers]}}


def _opaque_config(configs: Any) -> Any:
    """DRA ``config[]`` entries without their ``opaque.parameters`` (driver settings, not placement)."""
    if not isinstance(configs, list):
        return configs
    out = []
    for item in configs:
        if isinstance(item, Mapping) and isinstance(item.get("opaque"), Mapping):
            item = {**item, "opaque": {**_pick(item["opaque"], ("driver",)), "parameters": {}}}
        out.append(item)
    return out


def _with_config(spec: Any, path: tuple[str, ...]) -> Any:
    """``spec`` with the config list at ``path`` (below spec) scrubbed."""
    if not isinstance(spec, Mapping):
        return spec
    out = dict(spec)
    if len(path) == 1:
        if path[0] in out:
            out[path[0]] = _opaque_config(out[path[0]])
        return out
    if path[0] in out:
        out[path[0]] = _with_config(out[path[0]], path[1:])
    return out


def _device_class(obj: Mapping[str, Any]) -> Object:
    return {"spec": _with_config(obj.get("spec"), ("config",))}


def _resource_claim(obj: Mapping[str, Any]) -> Object:
    status = obj.get("status")
    if isinstance(status, Mapping):
        status = _with_config(status, ("allocation", "devices", "config"))
    return {"spec": _with_config(obj.get("spec"), ("devices", "config")), "status": status}


def _claim_template(obj: Mapping[str, Any]) -> Object:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return {"spec": spec}
    out = dict(spec)
    if isinstance(spec.get("metadata"), Mapping):
        out["metadata"] = metadata(spec["metadata"])
    return {"spec": _with_config(out, ("spec", "devices", "config"))}


def _as_is(obj: Mapping[str, Any]) -> Object:
    """Everything but metadata: NodePools, NodeClaims, PDBs, Namespaces, ResourceSlices hold only what the
    rules read (requirements, limits, budgets, devices)."""
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}


def _nodepool(obj: Mapping[str, Any]) -> Object:
    out = _as_is(obj)
    spec = out.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if isinstance(spec, Mapping) and isinstance(template, Mapping) and "metadata" in template:
        out["spec"] = {**spec, "template": {**template, "metadata": metadata(template["metadata"])}}
    return out


_BODY: Mapping[str, Callable[[Mapping[str, Any]], Object]] = {
    "Pod": _pod,
    "DaemonSet": _daemonset,
    "Node": _node,
    "NodePool": _nodepool,
    "PersistentVolumeClaim": _claim,
    "PersistentVolume": _volume_object,
    "StorageClass": _storage_class,
    "CSINode": _csinode,
    "DeviceClass": _device_class,
    "ResourceClaim": _resource_claim,
    "ResourceClaimTemplate": _claim_template,
}


def scrub(obj: Mapping[str, Any]) -> Object:
    """A new object holding only what nodeplan reads of ``obj`` (the tables above); ``apiVersion`` and
    ``kind`` first, as ``kubectl get -o yaml`` prints them."""
    head = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    body = _BODY.get(str(obj.get("kind")), _as_is)(obj)
    out: Object = {**head, "metadata": metadata(obj.get("metadata"))}
    out.update({k: v for k, v in body.items() if v not in (None, {})})
    return copy.deepcopy(out)  # nothing shared with the listed object
