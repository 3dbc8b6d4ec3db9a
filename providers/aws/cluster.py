"""EC2NodeClasses in the cluster: read from the API server, their resolved status written back (what Karpenter's
EC2NodeClass status controller does), and the RBAC that takes.

``ClusterNodeClasses`` is the provider's ``NodeClassSource``: ``get`` reads the object (a malformed one is
reported as not ready, naming the field, never a crash), ``write_status`` patches the status subresource.
``NodeClassStatusTask`` resolves every EC2NodeClass once per interval, so each one's status — subnets, security
groups, AMIs, instance profile and one condition per part, ``Ready`` last — is current even when no NodePool
launches through it, and a selector that matches nothing is visible on the object
(``kubectl get ec2nodeclass -o yaml``) as well as on its NodePools (``NodeClassReady=False``).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from kubernetes import client
from pydantic import ValidationError

from controller.permissions import Permission
from providers.aws.nodeclass import GROUP, PLURAL, VERSION, EC2NodeClass
from providers.protocol import CloudProviderError, NodeClassNotReadyError

log = logging.getLogger(__name__)

#: what ``nodeplan run --provider aws`` needs beyond ``controller.permissions.REQUIRED`` (checked at start-up;
#: deploy/aws/values.yaml grants it through the chart's additionalClusterRoleRules)
PERMISSIONS: tuple[Permission, ...] = (
    Permission(GROUP, PLURAL, ("get", "list"), "AWS provider: the EC2NodeClasses NodePools refer to"),
    Permission(GROUP, PLURAL, ("patch",), "AWS provider: resolved subnets, security groups, AMIs, conditions",
               subresource="status"),
)


def _field(err: ValidationError) -> str:
    first = err.errors()[0]
    return ".".join(str(p) for p in first["loc"]) + f": {first['msg']}"


class ClusterNodeClasses:
    """EC2NodeClasses on the API server (``karpenter.k8s.aws/v1``)."""

    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)
        #: name → why the object cannot be read (a malformed spec); the provider reports it as NotReady
        self.invalid: dict[str, str] = {}

    def _parse(self, raw: dict[str, Any]) -> EC2NodeClass | None:
        name = str((raw.get("metadata") or {}).get("name"))
        try:
            nodeclass = EC2NodeClass.model_validate(raw)
        except ValidationError as err:
            message = f"EC2NodeClass {name}: field {_field(err)}"
            if self.invalid.get(name) != message:
                log.warning("%s", message)
            self.invalid[name] = message
            return None
        self.invalid.pop(name, None)
        return nodeclass

    def get(self, name: str) -> EC2NodeClass | None:
        try:
            raw = self._custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise CloudProviderError(f"reading EC2NodeClass {name}: HTTP {err.status} {err.reason}") from None
        nodeclass = self._parse(cast(dict[str, Any], raw))
        if nodeclass is None:
            raise NodeClassNotReadyError(self.invalid[name])
        return nodeclass

    def names(self) -> list[str]:
        listed = self._custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return sorted(str(item["metadata"]["name"]) for item in cast(dict[str, Any], listed).get("items") or [])

    def write_status(self, nodeclass: EC2NodeClass) -> None:
        status = nodeclass.status.model_dump(mode="json", by_alias=True, exclude_none=True)
        try:
            self._custom.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, nodeclass.name,
                                                            {"status": status})
        except client.ApiException as err:
            if err.status != 404:
                log.warning("could not write the status of EC2NodeClass %s: HTTP %s %s", nodeclass.name,
                            err.status, err.reason)


class NodeClassStatusTask:
    """Resolve every EC2NodeClass each ``interval`` seconds (a periodic controller task)."""

    name = "ec2nodeclass-status"

    def __init__(self, provider: Any, source: ClusterNodeClasses, interval: float = 60.0) -> None:
        self._provider = provider
        self._source = source
        self.interval = interval

    def step(self) -> None:
        for name in self._source.names():
            try:
                self._provider.nodeclass(name, fresh=True)
            except CloudProviderError as err:
                log.info("%s", err)
