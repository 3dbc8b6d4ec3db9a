"""DaemonSets, PodDisruptionBudgets and Namespaces: the workload objects a solve reads besides pods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from model.affinity import LabelSelector
from model.errors import InputError
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
    """A PDB: how many of the pods it selects may be voluntarily evicted right now."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    #: ``None``: the PDB has no selector and selects nothing (policy/v1); an empty selector selects all
    selector: LabelSelector | None = None
    min_available: str | None = None
    max_unavailable: str | None = None
    disruptions_allowed: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, pod: Pod) -> bool:
        return self.selector is not None and pod.namespace == self.namespace and self.selector.matches(pod.labels)

    def allowed(self, pods: Iterable[Pod]) -> int:
        """Evictions allowed now: ``status.disruptionsAllowed`` when the snapshot has it (the disruption
        controller's figure), else computed from the selected pods as that controller does (a percentage
        rounds up; unhealthy = selected pods not Running)."""
        if self.disruptions_allowed is not None:
            return max(self.disruptions_allowed, 0)
        selected = [p for p in pods if self.selects(p) and not p.terminal]
        expected, healthy = len(selected), sum(1 for p in selected if p.phase == "Running" and not p.deleting)
        if self.max_unavailable is not None:
            desired = max(expected - _scaled(self.max_unavailable, expected), 0)
        elif self.min_available is not None:
            desired = _scaled(self.min_available, expected)
        else:
            return 0  # neither field (policy/v1 defaults none): the controller expects 0 pods and allows nothing
        return max(healthy - desired, 0) if expected > 0 else 0

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> PodDisruptionBudget:
        obj = RawObject(raw)
        meta, spec = obj.obj("metadata"), obj.obj("spec")
        for field in ("minAvailable", "maxUnavailable"):
            value = spec.int_or_str(field)
            if value and not (value.isdigit() or (value.endswith("%") and value[:-1].isdigit())):
                raise InputError(f"expected a count or a percentage, got {value!r}", field=f"spec.{field}")
        return cls(
            namespace=meta.str("namespace", "default"), name=meta.str("name"),
            selector=spec.parse("selector", LabelSelector.parse) if spec.data.get("selector") is not None else None,
            min_available=spec.int_or_str("minAvailable") or None,
            max_unavailable=spec.int_or_str("maxUnavailable") or None,
            disruptions_allowed=obj.obj("status").int("disruptionsAllowed"),
        )


def _scaled(value: str, total: int) -> int:
    """An IntOrString count: a percentage of ``total`` rounded up, or the integer itself."""
    if value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)
    return int(value)


class Namespace(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str] = {}

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Namespace:
        meta = RawObject(raw).obj("metadata")
        return cls(name=meta.str("name"), labels=meta.string_map("labels"))


def daemon_pods(daemonsets: Iterable[DaemonSet], labels: Mapping[str, str], taints: Sequence[Taint]) -> list[Pod]:
    """The pods the DaemonSet controller would run on a node with these labels and taints (``runs_on``)."""
    return [ds.pod for ds in daemonsets if ds.runs_on(labels, taints)]
