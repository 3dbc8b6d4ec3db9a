"""``karpenter.kwok.sh/v1alpha1`` KWOKNodeClass: the node class NodePools of the KWOK provider refer to
(``spec.template.spec.nodeClassRef``). KWOK nodes need no cloud settings, so its spec is empty."""

from __future__ import annotations

from typing import Literal

from model.api import ApiModel
from model.nodepool import Condition, ObjectMeta

GROUP = "karpenter.kwok.sh"
VERSION = "v1alpha1"
KIND = "KWOKNodeClass"


class KWOKNodeClassSpec(ApiModel):
    """No settings: every KWOK node is the same simulated machine apart from its instance type."""


class KWOKNodeClassStatus(ApiModel):
    conditions: list[Condition] = []


class KWOKNodeClass(ApiModel):
    """A ``karpenter.kwok.sh/v1alpha1`` KWOKNodeClass."""

    api_version: str = f"{GROUP}/{VERSION}"
    kind: Literal["KWOKNodeClass"] = "KWOKNodeClass"
    metadata: ObjectMeta
    spec: KWOKNodeClassSpec = KWOKNodeClassSpec()
    status: KWOKNodeClassStatus = KWOKNodeClassStatus()
