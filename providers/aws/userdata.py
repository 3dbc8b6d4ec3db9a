"""AL2023 user data: a MIME multi-part document whose ``application/node.eks.aws`` part is the ``nodeadm``
``NodeConfig`` that joins the node to the cluster (endpoint, CA bundle, service CIDR), with the kubelet settings
Karpenter passes: max pods, cluster DNS, reserved resources, eviction thresholds, the NodeClaim's labels as
``--node-labels`` and its taints (plus ``karpenter.sh/unregistered:NoExecute``) as ``registerWithTaints``.

An EC2NodeClass's own ``userData`` is kept: a MIME document contributes its parts, anything else becomes one
part (a ``NodeConfig`` YAML as ``application/node.eks.aws``, a script as ``text/x-shellscript``). Those parts
come after the generated NodeConfig, so nodeadm's merge lets a user's NodeConfig refine it.
"""

from __future__ import annotations

import email
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message

import yaml

from model.labels import UNREGISTERED_TAINT
from model.taints import Taint

BOUNDARY = "//"
NODECONFIG_TYPE = "application/node.eks.aws"


@dataclass(frozen=True)
class ClusterInfo:
    """What a node needs to join: the EKS cluster's name, API endpoint, CA bundle (base64) and service CIDR."""

    name: str
    endpoint: str
    certificate_authority: str = ""
    cidr: str = ""


@dataclass(frozen=True)
class KubeletSettings:
    max_pods: int | None = None
    cluster_dns: Sequence[str] = ()
    kube_reserved: Mapping[str, str] = field(default_factory=dict)
    system_reserved: Mapping[str, str] = field(default_factory=dict)
    eviction_hard: Mapping[str, str] = field(default_factory=dict)


def node_config(cluster: ClusterInfo, kubelet: KubeletSettings, labels: Mapping[str, str],
                taints: Sequence[Taint]) -> dict[str, object]:
    """The ``node.eks.aws/v1alpha1`` NodeConfig for one node."""
    config: dict[str, object] = {
        "registerWithTaints": [*({"key": t.key, "value": t.value, "effect": t.effect} if t.value else
                                 {"key": t.key, "effect": t.effect} for t in taints),
                               {"key": UNREGISTERED_TAINT, "effect": "NoExecute"}],
    }
    if kubelet.max_pods is not None:
        config["maxPods"] = kubelet.max_pods
    if kubelet.cluster_dns:
        config["clusterDNS"] = list(kubelet.cluster_dns)
    for key, value in (("kubeReserved", kubelet.kube_reserved), ("systemReserved", kubelet.system_reserved),
                       ("evictionHard", kubelet.eviction_hard)):
        if value:
            config[key] = dict(value)
    cluster_spec: dict[str, str] = {"name": cluster.name, "apiServerEndpoint": cluster.endpoint}
    if cluster.certificate_authority:
        cluster_spec["certificateAuthority"] = cluster.certificate_authority
    if cluster.cidr:
        cluster_spec["cidr"] = cluster.cidr
    flags = [f"--node-labels={','.join(f'{k}={v}' for k, v in sorted(labels.items()))}"] if labels else []
    return {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig",
            "spec": {"cluster": cluster_spec, "kubelet": {"config": config, "flags": flags}}}


def _user_parts(user_data: str | None) -> list[tuple[str, str]]:
    if not user_data or not user_data.strip():
        return []
    if user_data.lstrip().startswith("MIME-Version"):
        message = email.message_from_string(user_data)
        return [(part.get_content_type(), str(part.get_payload())) for part in message.walk()
                if not part.is_multipart()]
    try:
        doc = yaml.safe_load(user_data)
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "NodeConfig":
        return [(NODECONFIG_TYPE, user_data)]
    return [("text/x-shellscript", user_data)]


def al2023_user_data(cluster: ClusterInfo, kubelet: KubeletSettings, labels: Mapping[str, str],
                     taints: Sequence[Taint], custom: str | None = None) -> str:
    """The whole MIME multi-part user data (plain text; EC2 wants it base64-encoded)."""
    parts = [(NODECONFIG_TYPE, yaml.safe_dump(node_config(cluster, kubelet, labels, taints), sort_keys=False)),
             *_user_parts(custom)]
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for content_type, body in parts:
        lines += [f"--{BOUNDARY}", f"Content-Type: {content_type}", "", body.rstrip("\n")]
    lines += [f"--{BOUNDARY}--", ""]
    return "\n".join(lines)


def parts(user_data: str) -> list[Message]:
    """The parts of a MIME user data document (for tests and for reading back a launch template)."""
    return [p for p in email.message_from_string(user_data).walk() if not p.is_multipart()]
