"""Every API permission the controller uses, in one table, and the start-up check against it.

``REQUIRED`` is the single source: ``check`` asks the API server (one SelfSubjectAccessReview per verb and
resource) whether the running identity may do each of them, and ``tests/unit/test_operations.py`` checks that
``deploy/controller.yaml`` grants exactly this table, no more. A missing permission would otherwise surface as
a 403 deep inside a watch loop that retries forever; checking first turns it into one line and exit code 2.
Add a row here when code starts calling a new verb, and the same rule to deploy/controller.yaml. The read rows
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
    Permission("", "pods", ("delete",), "drain: delete pods past the NodeClaim's terminationGracePeriod"),
    Permission("", "pods", ("patch",), "provisioner: annotate pods planned onto a running node (scheduler retry)"),
    Permission("", "pods", ("create",), "drain: evict pods through the Eviction API", subresource="eviction"),
    Permission("karpenter.sh", "nodeclaims", ("create",), "provisioner creates one per planned node"),
    Permission("karpenter.sh", "nodeclaims", ("patch", "delete"),
               "provisioner: pods joining an in-flight claim; termination: finalizer, claims of deleted Nodes"),
    Permission("karpenter.sh", "nodeclaims", ("patch",), "lifecycle: Launched / Registered / Initialized",
               subresource="status"),
    Permission("karpenter.sh", "nodepools", ("patch",), "NodePool status: ValidationSucceeded, resources, nodes",
               subresource="status"),
    Permission("", "pods", ("patch",), "lifecycle: nominate pods to their planned node", subresource="status"),
    Permission("", "nodes", ("create", "patch", "delete"), "KWOK provider: launch, register, remove Nodes"),
    Permission("resource.k8s.io", "resourceslices", ("create",),
               "KWOK provider: publish a new node's devices (it plays the DRA driver)"),
    Permission("", "events", ("create", "patch"), "Events on pods, NodeClaims and NodePools"),
    Permission("coordination.k8s.io", "leases", ("get", "create", "update"), "leader election",
               namespaced=True),
)


def required(shadow: bool = False) -> tuple[Permission, ...]:
    """The rows the controller needs: all of ``REQUIRED``, or in shadow mode the read-only ones."""
    return tuple(p for p in REQUIRED if p.shadow) if shadow else REQUIRED


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
          *, leases: bool = True) -> list[Missing]:
    """Ask the API server about every (verb, resource); returns what is denied (empty: all allowed).

    ``leases=False`` skips the leader-election rows (not needed when leader election is off). API errors
    (unreachable server, 401) propagate: the caller reports them as such, not as missing permissions.
    """
    authz = client.AuthorizationV1Api(api)
    wanted = [r for r in requests(namespace, required) if leases or r[0].resource != "leases"]

    def allowed(item: tuple[Permission, str, str]) -> bool:
        permission, verb, ns = item
        attributes = client.V1ResourceAttributes(group=permission.group, resource=permission.resource, verb=verb,
                                                 subresource=permission.subresource or None, namespace=ns or None)
        review = authz.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)), _request_timeout=15)
        return bool(review.status and review.status.allowed)

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(allowed, wanted))
    return [Missing(p, verb, ns) for (p, verb, ns), ok in zip(wanted, answers, strict=True) if not ok]


def rbac_rules(objects: Iterable[dict[str, Any]]) -> set[tuple[str, str, str, bool]]:
    """(group, resource, verb, namespaced) granted by the ClusterRoles and Roles among ``objects``
    (resourceNames-restricted rules count as granted; wildcard rules are expanded to nothing, on purpose:
    deploy/ must not use them)."""
    out: set[tuple[str, str, str, bool]] = set()
    for obj in objects:
        if obj.get("kind") not in ("ClusterRole", "Role"):
            continue
        namespaced = obj.get("kind") == "Role"
        for rule in obj.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        out.add((group, resource, verb, namespaced))
    return out


def required_rules(required: Iterable[Permission] = REQUIRED) -> set[tuple[str, str, str, bool]]:
    return {(p.group, p.rbac_resource, verb, p.namespaced) for p in required for verb in p.verbs}
