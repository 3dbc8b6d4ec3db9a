"""Hostile input through every loader and command: no traceback, exit codes only 0/1/2, every exit 2 one
line naming a file.

Each example takes a valid input set (snapshot, manifests, catalog, plan), damages it (a field replaced by a
value of the wrong type, out of range, NaN, deeply nested, a YAML alias bomb, raw garbage text) and runs
``solve``, ``verify``, ``consolidate`` and ``diff`` in-process. CI runs ``FUZZ_EXAMPLES`` (default 25) examples
per command; ``make fuzz`` runs 600 per command (2,400 inputs).
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.app import app

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=20_000, derandomize=not os.environ.get("FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])

CATALOG: dict[str, Any] = {
    "apiVersion": "nodeplan.io/v1alpha1", "kind": "InstanceCatalog", "region": "r",
    "instanceTypes": [{
        "name": "m.large", "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"},
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": "32"},
        "overhead": {"kubeReserved": {"cpu": "100m", "memory": "500Mi"}},
        "offerings": [{"zone": "z1", "capacityType": "on-demand", "price": 0.2, "available": True},
                      {"zone": "z1", "capacityType": "spot", "price": 0.08, "available": True}]}]}
NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
    "spec": {"template": {"spec": {"requirements": [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
        "limits": {"cpu": "100"}}}
NODE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "n1", "labels": {
        "karpenter.sh/nodepool": "default", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "m.large", "topology.kubernetes.io/zone": "z1",
        "karpenter.sh/capacity-type": "on-demand", "kubernetes.io/hostname": "n1"}},
    "spec": {"providerID": "kwok://n1"},
    "status": {"allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "32"},
               "capacity": {"cpu": "4", "memory": "16Gi", "pods": "32"},
               "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}],
                            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                            "nodeSelector": {"kubernetes.io/os": "linux"}}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": {"app": "web"}}, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
    "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"name": "c", "resources": {
                                             "requests": {"cpu": "250m", "memory": "256Mi"}}}]}}}}
SNAPSHOT = [NODEPOOL, NODE, _pod("bound", "n1"), _pod("p1"), _pod("p2")]
MANIFESTS = [NODEPOOL, DEPLOYMENT,
             {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
              "spec": {"parallelism": 2, "template": DEPLOYMENT["spec"]["template"]}},
             {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}]

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from([2**63, -(2**63) - 1, 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e308, 1e30]),
    st.text(max_size=20), st.sampled_from(["yes", "on", "0755", "1e30", "999999E", "9999999Ei", "-1", "x[/bold]",
                                          "[link=http://x]y[/link]", "<img src=x>", "@team", "\x1b[31m", "In", ""]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.recursive(st.integers(), lambda inner: st.lists(inner, max_size=2), max_leaves=30),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON-like value (dict keys and list indices), the root excluded."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, sub in value.items():
            out.append((*prefix, key))
            out.extend(_paths(sub, (*prefix, key)))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            out.append((*prefix, i))
            out.extend(_paths(sub, (*prefix, i)))
    return out


def _set(value: Any, path: tuple[Any, ...], new: Any) -> None:
    for step in path[:-1]:
        value = value[step]
    value[path[-1]] = new


@st.composite
def damaged(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with one to three fields replaced by hostile values (or a hostile value added)."""
    value = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(value)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        if draw(st.booleans()) or not isinstance(path[-1], str):
            _set(value, path, draw(HOSTILE))
        else:  # a new sibling key
            _set(value, (*path[:-1], draw(st.sampled_from(["metadata", "spec", "kind", "items", "replicas"]))),
                 draw(HOSTILE))
    return value


RAW_TEXT = st.one_of(
    st.text(max_size=200),
    st.sampled_from([
        "a: &a [x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e]\n",
        "[" * 3000 + "]" * 3000, "{a: 1, a: 2}", "kind: List\nitems: [1, 2]\n", "? [a]\n: b\n", "- !!int x\n",
        "kind: Pod\nmetadata: {name: p, namespace: [x]}\n", "kind: [Pod]\n", "\x00", "key: \"\\ud800\"\n",
        "kind: Pod\nmetadata: {name: p}\nspec: {priority: " + "9" * 5000 + "}\n",
    ]),
)


def _dump(path: Path, docs: Any, as_json: bool) -> None:
    if isinstance(docs, str):
        path.write_text(docs, encoding="utf-8", errors="surrogatepass")
    elif as_json:
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs} if isinstance(docs, list)
                                   else docs, allow_nan=True), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump_all(docs if isinstance(docs, list) else [docs]), encoding="utf-8")


def _check(args: list[str], files: list[Path]) -> None:
    result = CliRunner().invoke(app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"traceback for {args}") from result.exception
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert lines, (args, result.stderr)
        assert any(f.name in lines[0] or str(f) in lines[0] for f in files), (args, result.stderr)


def _good_plan(tmp: Path) -> dict[str, Any]:
    snap, cat = tmp / "s.yaml", tmp / "c.yaml"
    _dump(snap, SNAPSHOT, False)
    _dump(cat, CATALOG, False)
    result = CliRunner().invoke(app, ["solve", str(snap), "--catalog", str(cat), "-o", "json", "-q",
                                      "--time-limit", "2"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


_PLAN: dict[str, Any] = {}


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not _PLAN:
        _PLAN.update(_good_plan(tmp_path_factory.mktemp("plan")))
    return _PLAN


SNAPSHOT_INPUT = st.one_of(damaged(SNAPSHOT), damaged(MANIFESTS), RAW_TEXT)


@FUZZ
@given(snapshot=SNAPSHOT_INPUT, catalog=st.one_of(st.just(CATALOG), damaged(CATALOG)), as_json=st.booleans())
def test_solve(tmp_path: Path, snapshot: Any, catalog: Any, as_json: bool) -> None:
    snap, cat = tmp_path / ("s.json" if as_json else "s.yaml"), tmp_path / "c.yaml"
    _dump(snap, snapshot, as_json)
    _dump(cat, catalog, False)
    _check(["solve", str(snap), "--catalog", str(cat), "-q", "--time-limit", "1"], [snap, cat])


@FUZZ
@given(snapshot=st.one_of(st.just(SNAPSHOT), damaged(SNAPSHOT)), data=st.data())
def test_verify(tmp_path: Path, good_plan: dict[str, Any], snapshot: Any, data: st.DataObject) -> None:
    snap, cat, plan = tmp_path / "s.yaml", tmp_path / "c.yaml", tmp_path / "plan.json"
    _dump(snap, snapshot, False)
    _dump(cat, CATALOG, False)
    _dump(plan, data.draw(st.one_of(damaged(good_plan), RAW_TEXT)), True)
    _check(["verify", str(snap), str(plan), "--catalog", str(cat)], [snap, cat, plan])


@FUZZ
@given(snapshot=SNAPSHOT_INPUT)
def test_consolidate(tmp_path: Path, snapshot: Any) -> None:
    snap, cat = tmp_path / "s.yaml", tmp_path / "c.yaml"
    _dump(snap, snapshot, False)
    _dump(cat, CATALOG, False)
    _check(["consolidate", str(snap), "--catalog", str(cat), "-q", "--time-limit", "1", "--no-yardstick",
            "--now", "2026-01-01T00:00:00Z"], [snap, cat])


@FUZZ
@given(head=st.one_of(damaged(MANIFESTS), RAW_TEXT), data=st.data())
def test_diff(tmp_path: Path, good_plan: dict[str, Any], head: Any, data: st.DataObject) -> None:
    base, head_file, cat = tmp_path / "base.json", tmp_path / "head.yaml", tmp_path / "c.yaml"
    _dump(base, data.draw(st.one_of(st.just(good_plan), damaged(good_plan))), True)
    _dump(head_file, head, False)
    _dump(cat, CATALOG, False)
    _check(["diff", str(base), str(head_file), "--catalog", str(cat), "-q", "--time-limit", "1",
            "-o", data.draw(st.sampled_from(["markdown", "json", "yaml", "table"]))], [base, head_file, cat])


def test_nan_prices_fail_verify(tmp_path: Path, good_plan: dict[str, Any]) -> None:
    """NaN prices: not JSON at all (exit 2 naming the file); in YAML the plan loads and verify rejects it."""
    snap, cat, plan = tmp_path / "s.yaml", tmp_path / "c.yaml", tmp_path / "plan.json"
    _dump(snap, SNAPSHOT, False)
    _dump(cat, CATALOG, False)
    bad = copy.deepcopy(good_plan)
    assert bad["nodeClaims"], "the fixture plan launches a node"
    for claim in bad["nodeClaims"]:
        claim["price"] = math.nan
    plan.write_text(json.dumps(bad))  # Python writes NaN; JSON itself has no NaN, so this is exit 2
    result = CliRunner().invoke(app, ["verify", str(snap), str(plan), "--catalog", str(cat)])
    assert result.exit_code == 2 and "NaN" in result.stderr
    plan.write_text(yaml.safe_dump(bad), encoding="utf-8")  # YAML has .nan: the plan loads, verify rejects it
    plan_yaml = plan.with_suffix(".yaml")
    plan.rename(plan_yaml)
    result = CliRunner().invoke(app, ["verify", str(snap), str(plan_yaml), "--catalog", str(cat)])
    assert result.exit_code == 1 and "not a finite" in result.stdout
