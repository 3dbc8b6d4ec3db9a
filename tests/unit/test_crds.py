"""The committed CRDs are exactly what the generator makes from the pydantic models, and structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from controller import crds

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crds_match_generator() -> None:
    generated = crds.generate()
    committed = {p.name: p.read_text() for p in (ROOT / "deploy" / "crds").glob("*.yaml")}
    assert committed == generated, "deploy/crds is stale: run `python -m controller.crds`"


def _walk(schema: dict[str, Any], path: str) -> list[str]:
    problems = []
    if "$ref" in schema:
        problems.append(f"{path}: $ref")
    if "type" not in schema and not schema.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: no type")
    for name, sub in (schema.get("properties") or {}).items():
        problems += _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        problems += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += _walk(schema["additionalProperties"], f"{path}{{}}")
    return problems


def test_schemas_are_structural() -> None:
    for spec in crds.CRDS:
        doc = crds.crd(spec)
        schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert _walk(schema, spec.kind) == []
        assert schema["properties"]["metadata"] == {"type": "object"}


def test_karpenter_fields_and_semantics() -> None:
    nodepool = crds.crd(crds.CRDS[0])
    version = nodepool["spec"]["versions"][0]
    assert (nodepool["spec"]["group"], version["name"], nodepool["spec"]["names"]["kind"]) == (
        "karpenter.sh", "v1", "NodePool")
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    template = spec["template"]["properties"]["spec"]["properties"]
    requirement = template["requirements"]["items"]
    assert set(requirement["properties"]) == {"key", "operator", "values", "minValues"}
    assert "Gte" in requirement["properties"]["operator"]["enum"]
    assert set(template) >= {"requirements", "taints", "startupTaints", "nodeClassRef", "expireAfter",
                             "terminationGracePeriod"}
    assert spec["weight"] == {"type": "integer", "minimum": 1, "maximum": 100, "format": "int32"}
    cpu = spec["limits"]["additionalProperties"]
    assert cpu["x-kubernetes-int-or-string"] is True
    assert spec["disruption"]["properties"]["budgets"]["default"] == [{"nodes": "10%"}]
    assert version["subresources"] == {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                               "statusReplicasPath": ".status.nodes"}}
    claim = crds.crd(crds.CRDS[1])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    assert set(claim["status"]["properties"]) >= {"nodeName", "providerID", "capacity", "allocatable", "conditions"}
    assert "resources" in claim["spec"]["properties"]


def test_generated_yaml_has_no_anchors() -> None:
    for text in crds.generate().values():
        assert "&id" not in text and "*id" not in text
        yaml.safe_load(text)
