"""The one table of every kind nodeplan reads: the watch cache (``controller.cache.resources``), ``nodeplan
snapshot`` (``cli.capture.kinds``), the start-up permission check and ``deploy/`` RBAC (the get/list/watch rows of
``controller.permissions.REQUIRED``) are all derived from ``READ``, so they cannot disagree.

They once did: the cache read Pods, Nodes, DaemonSets, NodePools and NodeClaims only while ``snapshot`` read
PVCs too, so in-cluster every pod with a PersistentVolumeClaim was "claim not found" and never provisioned.
Adding a kind here makes the controller watch it, the snapshot capture it, the permission check ask for it and
the RBAC tests demand it. Every kind is listed and watched by its path (``controller.rest.collection_path``), so
``cli`` can read the table without loading the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: ``lister(**kwargs)``: a generated kubernetes-client list call (``watch=True`` watches)
Lister = Callable[..., Any]


@dataclass(frozen=True)
class ReadKind:
    """One kind nodeplan lists and watches: where it lives, why, and which solver rule (or controller part)
    reads it."""

    kind: str
    #: ``v1``, ``apps/v1``, ``karpenter.sh/v1``
    api_version: str
    #: the resource (plural) RBAC names
    resource: str
    namespaced: bool
    why: str
    #: solver rules (``solver/rules/<name>.py``) or controller parts that read it
    readers: tuple[str, ...]
    #: the provisioning snapshot holds it (False: consolidation only, added by ``controller.disruption``)
    provisioning: bool = True

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def lister(self, api: Any) -> Lister:
        """The list (and watch) call on ``api``, a ``kubernetes.client.ApiClient``: a plain request for every kind,
        CRD or built-in (``controller.rest``), whose answer the caller reads itself."""
        from controller.rest import lister

        return lister(api, self.api_version, self.resource)


READ: tuple[ReadKind, ...] = (
    ReadKind("Namespace", "v1", "namespaces", False, "namespace labels for namespaceSelector terms",
             ("podaffinity", "antiaffinity", "topology")),
    ReadKind("NodePool", "karpenter.sh/v1", "nodepools", False, "what may be launched: requirements, limits, "
             "taints, budgets", ("selection", "limits", "minvalues", "disruption")),
    ReadKind("NodeClaim", "karpenter.sh/v1", "nodeclaims", False, "in-flight capacity and the claims nodeplan "
             "launched", ("resources", "lifecycle", "disruption")),
    ReadKind("Node", "v1", "nodes", False, "existing capacity", ("resources", "selection", "topology")),
    ReadKind("DaemonSet", "apps/v1", "daemonsets", True, "DaemonSet pods' overhead on new nodes",
             ("daemonsets",)),
    ReadKind("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True, "consolidation plans within "
             "disruption allowances", ("disruption",), provisioning=False),
    ReadKind("StorageClass", "storage.k8s.io/v1", "storageclasses", False, "WaitForFirstConsumer binding and "
             "allowedTopologies of unbound claims", ("volumes",)),
    ReadKind("CSINode", "storage.k8s.io/v1", "csinodes", False, "per-node CSI volume attach limits", ("volumes",)),
    ReadKind("PersistentVolume", "v1", "persistentvolumes", False, "bound volumes' node affinity (zonal disks)",
             ("volumes",)),
    ReadKind("PersistentVolumeClaim", "v1", "persistentvolumeclaims", True, "pods' claims: bound volume or "
             "storage class", ("volumes",)),
    ReadKind("DeviceClass", "resource.k8s.io/v1", "deviceclasses", False, "DRA device selectors", ("dra",)),
    ReadKind("ResourceClaim", "resource.k8s.io/v1", "resourceclaims", True, "pods' DRA claims", ("dra",)),
    ReadKind("ResourceClaimTemplate", "resource.k8s.io/v1", "resourceclaimtemplates", True, "DRA claims not "
             "generated yet", ("dra",)),
    ReadKind("ResourceSlice", "resource.k8s.io/v1", "resourceslices", False, "devices nodes publish", ("dra",)),
    ReadKind("Pod", "v1", "pods", True, "pending pods to place and bound pods taking room",
             ("resources", "podaffinity", "antiaffinity", "topology", "ports", "volumes", "dra")),
)

BY_KIND = {k.kind: k for k in READ}
#: kinds the provisioner's snapshot takes from the cache as they are (Pods, Nodes, NodePools and NodeClaims are
#: filtered or rewritten first: in-flight claims, reserved pods, invalid pools)
PASSED_THROUGH = tuple(k.kind for k in READ if k.provisioning
                       and k.kind not in ("Pod", "Node", "NodePool", "NodeClaim"))
