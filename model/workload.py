"""DaemonSets, PodDisruptionBudgets and Namespaces: the workload objects a solve reads besides pods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from model.fields import RawObject
from model.pod import Pod
from model.taints import Taint, Toleration, untolerated

#: Tolerations the DaemonSet controller adds to every daemon pod (kubernetes/pkg/controller/daemon/util).
DAEMON_DEFAULT_TOLERATIONS = (
    Toleration(key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute"),
    Toleration(key="node.kubernetes.io/unreachable", operator="Exists", effect="NoExecute"),
    Toleration(key="node.kubernetes.io/disk-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/memory-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/pid-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule"),
)


class DaemonSet(BaseModel):
    """A DaemonSet, reduced to the pod it would run on every node it matches."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    pod: Pod

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def runs_on(self, labels: Mapping[str, str], taints: Sequence[Taint]) -> bool:
        """Would the DaemonSet controller run a pod on a node with these labels and taints?

        Its pod must tolerate every NoSchedule/NoExecute taint and its nodeSelector / required node
        affinity must accept the labels; PreferNoSchedule never keeps a daemon away.
        """
        return not untolerated(self.pod.tolerations, taints) and self.pod.accepts_labels(labels)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> DaemonSet:
        obj = RawObject(raw)
        meta = obj.obj("metadata")
        template = obj.obj("spec").obj("template")
        fields = Pod.parse_spec(template.obj("spec"))
        fields["tolerations"] = tuple(fields["tolerations"]) + DAEMON_DEFAULT_TOLERATIONS
        namespace = meta.str("namespace", "default")
        pod = Pod(namespace=namespace, name=f"{meta.str('name')}-daemon",
                  labels=template.obj("metadata").string_map("labels"),
                  owner_kind="DaemonSet", owner_name=meta.str("name"), **fields)
        return cls(namespace=namespace, name=meta.str("name"), pod=pod)


class PodDisruptionBudget(BaseModel):
    """A PDB: parsed now so snapshots round-trip; consolidation enforces it."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    match_labels: dict[str, str] = {}
    min_available: str | None = None
    max_unavailable: str | None = None
    disruptions_allowed: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> PodDisruptionBudget:
        obj = RawObject(raw)
        meta, spec = obj.obj("metadata"), obj.obj("spec")
        return cls(
            namespace=meta.str("namespace", "default"), name=meta.str("name"),
            match_labels=spec.obj("selector").string_map("matchLabels"),
            min_available=spec.str("minAvailable") or None,
            max_unavailable=spec.str("maxUnavailable") or None,
            disruptions_allowed=obj.obj("status").int("disruptionsAllowed"),
        )


class Namespace(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str] = {}

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Namespace:
        meta = RawObject(raw).obj("metadata")
        return cls(name=meta.str("name"), labels=meta.string_map("labels"))
