"""Bad pod-to-pod rules in a snapshot: one line naming file, object and field, exit 2 (issue 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app

HEAD = ("apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n"
        "  containers: [{name: a, resources: {requests: {cpu: 100m}}}]\n")
ANTI = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
SPREAD = "spec.topologySpreadConstraints[0]"


def _spread(**fields: object) -> str:
    constraint = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                  "labelSelector": {"matchLabels": {"app": "web"}}, **fields}
    return HEAD + f"  topologySpreadConstraints: [{constraint!r}]\n".replace("'", '"')


def _anti(term: str) -> str:
    return HEAD + f"  affinity: {{podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{term}]}}}}\n"


CASES = {
    "negative maxSkew": (_spread(maxSkew=-1), f"{SPREAD}.maxSkew: maxSkew must be a positive integer"),
    "zero maxSkew": (_spread(maxSkew=0), f"{SPREAD}.maxSkew: maxSkew must be a positive integer"),
    "minDomains 0": (_spread(minDomains=0), f"{SPREAD}.minDomains: minDomains must be positive"),
    "bad whenUnsatisfiable": (_spread(whenUnsatisfiable="Sometimes"),
                              f"{SPREAD}.whenUnsatisfiable: unknown whenUnsatisfiable 'Sometimes'"),
    "bad topology key": (_spread(topologyKey="zone!"), f"{SPREAD}.topologyKey: invalid label key 'zone!'"),
    "bad selector operator": (
        _anti("{labelSelector: {matchExpressions: [{key: app, operator: Near, values: [x]}]}, topologyKey: zone}"),
        f"{ANTI}.labelSelector.matchExpressions[0].operator: unknown operator 'Near'"),
    "In without values": (
        _anti("{labelSelector: {matchExpressions: [{key: app, operator: In}]}, topologyKey: zone}"),
        f"{ANTI}.labelSelector.matchExpressions[0].values: operator In needs at least one value"),
    "missing topology key": (_anti("{labelSelector: {matchLabels: {app: x}}}"),
                             f"{ANTI}.topologyKey: topologyKey is required"),
    "bad anti-affinity key": (_anti("{labelSelector: {matchLabels: {app: x}}, topologyKey: 'a/b/c'}"),
                              f"{ANTI}.topologyKey: invalid label key 'a/b/c'"),
    "bad matchLabels key": (_anti("{labelSelector: {matchLabels: {'-app': x}}, topologyKey: zone}"),
                            f"{ANTI}.labelSelector.matchLabels.-app: invalid label key '-app'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_pod_rule_is_one_line_exit_2(case: str, tmp_path: Path) -> None:
    text, expected = CASES[case]
    path = tmp_path / "snap.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["solve", str(path)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.stderr
    assert f"{path}: Pod shop/web: field {expected}" in lines[0], lines[0]
