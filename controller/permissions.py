"""Every API permission the controller uses, in one table, and the start-up check against it.

``REQUIRED`` is the single source: ``check`` asks the API server (one SelfSubjectAccessReview per verb and
resource) whether the running identity may do each of them, and ``tests/unit/test_operations.py`` checks that
``deploy/controller.yaml`` grants exactly this table, no more. A missing permission would otherwise surface as
a 403 deep inside a watch loop that retries forever; checking first turns it into one line and exit code 2.
Least privilege: the Lease is written by name (``resourceNames``), ``nodes`` are created only by the KWOK
provider (``deploy/controller.yaml`` is the KWOK variant; on a cloud the kubelet registers its Node), and each
pod write names the code path that makes it. Add a row here when code starts calling a new verb, and the
same rule to deploy/controller.yaml. The read rows
(``READS``) come from the table of kinds (``controller.kinds``); they are also all shadow mode needs
(``required(shadow=True)``, granted by deploy/shadow.yaml and the chart with ``settings.shadow``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from controller.kinds import READ
from controller.leader import DEFAULT_LEASE_NAME


@dataclass(frozen=True)
class Permission:
    """``verbs`` on ``resource[/subresource]`` of API group ``group``; ``namespaced`` rules are granted by a Role
    in the controller's own namespace (the leader-election Lease), the others by the ClusterRole."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    subresource: str = ""
    namespaced: bool = False
    #: shadow mode (``nodeplan run --shadow``, ``deploy/shadow.yaml``) needs it too: reads only
    shadow: bool = False
    #: only on the leader-election Lease the controller owns: RBAC ``resourceNames``, checked by that name
    #: (``create`` cannot be restricted by name: the API server authorizes it before the object exists)
    named: bool = False
    #: only when the controller runs this cloud provider (``kwok``: it creates the Nodes a kubelet would register)
    provider: str = ""

    @property
    def rbac_resource(self) -> str:
        """How an RBAC rule spells it: ``pods/status``."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def describe(self, verb: str) -> str:
        """``list resourceclaims.resource.k8s.io``, ``patch pods/status``: kubectl's spelling."""
        name = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{verb} {name}/{self.subresource}" if self.subresource else f"{verb} {name}"


#: get/list/watch of every kind the watch cache reads (``controller.kinds.READ``): all shadow mode needs
READS: tuple[Permission, ...] = tuple(
    Permission(k.group, k.resource, ("get", "list", "watch"), f"cache: {k.why}", shadow=True) for k in READ)

REQUIRED: tuple[Permission, ...] = (
    *READS,
    Permission("", "pods", ("delete",), "drain (controller/drain.py Drainer._delete): delete the pods still on a "
               "node once its NodeClaim's terminationGracePeriod is over, as Karpenter does"),
    Permission("", "pods", ("patch",), "provisioner (controller/provisioner.py _mark_placed): record on a pod the "
               "running node the plan put it on (nodeplan.io/placed)"),
    Permission("", "pods", ("create",), "drain: evict pods through the Eviction API", subresource="eviction"),
    Permission("karpenter.sh", "nodeclaims", ("create",), "provisioner creates one per planned node"),
    Permission("karpenter.sh", "nodeclaims", ("patch", "delete"),
               "provisioner: pods joining an in-flight claim; termination: finalizer, claims of deleted Nodes"),
    Permission("karpenter.sh", "nodeclaims", ("patch",), "lifecycle: Launched / Registered / Initialized",
               subresource="status"),
    Permission("karpenter.sh", "nodepools", ("patch",), "NodePool status: ValidationSucceeded, resources, nodes",
               subresource="status"),
    Permission("", "pods", ("patch",), "lifecycle, provisioner: nominate pods to their planned node (KEP-5278)",
               subresource="status"),
    Permission("", "nodes", ("patch", "delete"), "disruption and termination taint nodes karpenter.sh/disrupted; "
               "lifecycle labels them initialized; termination and garbage collection delete a claim's Node"),
    Permission("", "nodes", ("create",), "KWOK provider: launch a node by creating its Node (on a cloud the "
               "kubelet registers it)", provider="kwok"),
    Permission("resource.k8s.io", "resourceslices", ("create",),
               "KWOK provider: publish a new node's devices (it plays the DRA driver)", provider="kwok"),
    Permission("", "events", ("create", "patch"), "Events on pods, NodeClaims and NodePools"),
    Permission("coordination.k8s.io", "leases", ("get", "update"), "leader election: read and renew its Lease",
               namespaced=True, named=True),
    Permission("coordination.k8s.io", "leases", ("create",), "leader election: create its Lease the first time",
               namespaced=True),
)


#: the DRA API group: its rows are dropped when DRA is disabled (``nodeplan run --no-dra``)
DRA_GROUP = "resource.k8s.io"


def required(shadow: bool = False, dra: bool = True, provider: str = "kwok") -> tuple[Permission, ...]:
    """The rows the controller needs: all of ``REQUIRED``, or in shadow mode the read-only ones; with DRA
    disabled, none of the ``resource.k8s.io`` rows (a cluster without DRA RBAC starts, Karpenter #3249); of the
    provider-specific rows only ``provider``'s (``REQUIRED`` as a whole is the KWOK variant, deploy/controller.yaml)."""
    rows = tuple(p for p in REQUIRED if p.shadow) if shadow else REQUIRED
    rows = tuple(p for p in rows if p.provider in ("", provider))
    return rows if dra else tuple(p for p in rows if p.group != DRA_GROUP)


@dataclass(frozen=True)
class Missing:
    permission: Permission
    verb: str
    namespace: str

    def __str__(self) -> str:
        text = self.permission.describe(self.verb)
        return f"{text} in namespace {self.namespace}" if self.namespace else text


class MissingPermissions(Exception):
    """The running identity lacks some of ``REQUIRED``; ``str()`` is the one line the CLI prints."""

    def __init__(self, missing: Sequence[Missing], manifest: str = "deploy/controller.yaml") -> None:
        self.missing = list(missing)
        noun = "permission" if len(self.missing) == 1 else "permissions"
        super().__init__(f"missing RBAC {noun}: {', '.join(str(m) for m in self.missing)} "
                         f"(grant them as {manifest} does)")



def requests(namespace: str, required: Iterable[Permission] = REQUIRED) -> list[tuple[Permission, str, str]]:
    """(permission, verb, namespace) for every check to make; namespaced rules are asked in ``namespace``."""
    return [(p, verb, namespace if p.namespaced else "") for p in required for verb in p.verbs]


def check(api: client.ApiClient, namespace: str, required: Iterable[Permission] = REQUIRED,
          *, leases: bool = True, lease_name: str = DEFAULT_LEASE_NAME) -> list[Missing]:
    """Ask the API server about every (verb, resource); returns what is denied (empty: all allowed).

    ``leases=False`` skips the leader-election rows (not needed when leader election is off); ``named`` rows
    are asked about the Lease ``lease_name``. API errors (unreachable server, 401) propagate: the caller
    reports them as such, not as missing permissions.
    """
    authz = client.AuthorizationV1Api(api)
    wanted = [r for r in requests(namespace, required) if leases or r[0].resource != "leases"]

    def allowed(item: tuple[Permission, str, str]) -> bool:
        permission, verb, ns = item
        attributes = client.V1ResourceAttributes(group=permission.group, resource=permission.resource, verb=verb,
                                                 subresource=permission.subresource or None, namespace=ns or None,
                                                 name=lease_name if permission.named else None)
        review = authz.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)), _request_timeout=15)
        return bool(review.status and review.status.allowed)

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(allowed, wanted))
    return [Missing(p, verb, ns) for (p, verb, ns), ok in zip(wanted, answers, strict=True) if not ok]


#: (group, resource, verb, namespaced, resourceNames): one RBAC grant; no names is any object
Grant = tuple[str, str, str, bool, tuple[str, ...]]


def rbac_grants(objects: Iterable[dict[str, Any]]) -> set[Grant]:
    """Every grant of the ClusterRoles and Roles among ``objects``, with its ``resourceNames`` (wildcard
    rules are expanded to nothing, on purpose: deploy/ must not use them)."""
    out: set[Grant] = set()
    for obj in objects:
        if obj.get("kind") not in ("ClusterRole", "Role"):
            continue
        namespaced = obj.get("kind") == "Role"
        for rule in obj.get("rules") or []:
            names = tuple(sorted(rule.get("resourceNames") or ()))
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        out.add((group, resource, verb, namespaced, names))
    return out


def required_grants(required: Iterable[Permission] = REQUIRED, lease_name: str = DEFAULT_LEASE_NAME) -> set[Grant]:
    """The grants ``required`` needs, ``named`` rows restricted to the Lease ``lease_name``."""
    return {(p.group, p.rbac_resource, verb, p.namespaced, (lease_name,) if p.named else ())
            for p in required for verb in p.verbs}


def rbac_rules(objects: Iterable[dict[str, Any]]) -> set[tuple[str, str, str, bool]]:
    """(group, resource, verb, namespaced) granted by ``objects``, whatever their ``resourceNames``."""
    return {grant[:4] for grant in rbac_grants(objects)}


def required_rules(required: Iterable[Permission] = REQUIRED) -> set[tuple[str, str, str, bool]]:
    return {(p.group, p.rbac_resource, verb, p.namespaced) for p in required for verb in p.verbs}
