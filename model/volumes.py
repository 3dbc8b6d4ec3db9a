"""Volume topology (the scheduler's VolumeBinding rule): where a pod's PersistentVolumeClaims let it run.

- A claim bound to a PersistentVolume: the PV's ``spec.nodeAffinity.required`` terms (ORed) must match.
- An unbound claim whose StorageClass binds ``WaitForFirstConsumer``: the class's ``allowedTopologies``
  terms (ORed; none = anywhere) must match — the volume is provisioned where the pod lands.
- An unbound claim with ``Immediate`` binding (or no StorageClass), or a claim that does not exist:
  the pod cannot be scheduled until the claim is bound; ``volume_problem`` says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from model.fields import RawObject
from model.pod import Pod, selector_term
from model.requirements import Requirement, Requirements

Alternatives = tuple[Requirements, ...]


def _pv_terms(pv: Mapping[str, Any]) -> Alternatives | None:
    required = RawObject(pv).obj("spec").obj("nodeAffinity").obj("required")
    terms = tuple(required.parse_each("nodeSelectorTerms", selector_term))
    return terms or None


def _class_terms(sc: Mapping[str, Any]) -> Alternatives | None:
    out = []
    for term in RawObject(sc).items("allowedTopologies"):
        reqs = [Requirement(key=e.str("key"), operator="In", values=tuple(str(v) for v in e.data.get("values") or ()))
                for e in term.items("matchLabelExpressions")]
        out.append(Requirements.of(reqs))
    return tuple(out) or None


def resolve(pod: Pod, raw: list[dict[str, Any]]) -> Pod:
    """The pod with its volume constraints attached (unchanged when it has no claims)."""
    if not pod.volume_claims:
        return pod
    claims = {(o["metadata"].get("namespace", "default"), o["metadata"]["name"]): o
              for o in raw if o.get("kind") == "PersistentVolumeClaim"}
    volumes = {o["metadata"]["name"]: o for o in raw if o.get("kind") == "PersistentVolume"}
    classes = {o["metadata"]["name"]: o for o in raw if o.get("kind") == "StorageClass"}
    default_class = next((name for name, o in classes.items() if RawObject(o).obj("metadata").string_map(
        "annotations").get("storageclass.kubernetes.io/is-default-class") == "true"), None)
    groups: list[Alternatives] = []
    for name in pod.volume_claims:
        claim = claims.get((pod.namespace, name))
        if claim is None:
            return pod.model_copy(update={"volume_problem": f"PersistentVolumeClaim {pod.namespace}/{name} not found"})
        spec = RawObject(claim).obj("spec")
        volume_name = spec.str("volumeName")
        if volume_name:
            pv = volumes.get(volume_name)
            if pv is None:
                return pod.model_copy(update={"volume_problem": f"PersistentVolume {volume_name} not found"})
            terms = _pv_terms(pv)
            if terms:
                groups.append(terms)
            continue
        class_name = spec.str("storageClassName") or default_class
        sc = classes.get(class_name or "")
        if sc is None or RawObject(sc).str("volumeBindingMode", "Immediate") != "WaitForFirstConsumer":
            return pod.model_copy(update={"volume_problem": f"PersistentVolumeClaim {pod.namespace}/{name} is unbound "
                                          "and its StorageClass binds Immediate: waiting for the volume"})
        terms = _class_terms(sc)
        if terms:
            groups.append(terms)
    return pod.model_copy(update={"volume_terms": tuple(groups)})
