"""nodeplan's ``karpenter.sh/v1`` CRDs and Karpenter's are interchangeable (issue 16, item 2).

On a control plane of its own (``fresh_cluster``) the same corpus of NodePools and NodeClaims is submitted
under Karpenter's CRDs (``pkg/apis/crds`` of sigs.k8s.io/karpenter at the pinned release, extracted by
``hack/karpenter-kwok/build.sh``) and under nodeplan's (``deploy/crds``); the real API server must accept and
reject exactly the same objects. The corpus follows the cases of Karpenter's own CEL validation suites
(``pkg/apis/v1/nodepool_validation_cel_test.go``, ``nodeclaim_validation_cel_test.go``), including the
transition rules (``oldSelf``). Then objects written under one set are read under the other, without loss.

Uses the CRDs ``hack/karpenter-kwok/build.sh`` extracts from the module (``make karpenter-kwok``, which
``make test`` runs first); skipped outside CI when that has not run.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.crds import CRDS as NODEPLAN_CRD_SPECS
from controller.crds import crd as nodeplan_crd
from controller.nodepool_status import desired_status
from controller.provisioner import claim_name, nodeclaim_body, parse_claim
from model.nodepool import NodePool
from model.plan import PlannedNodeClaim
from tests.e2e.conftest import Cluster, KarpenterKwok, load_yaml, wait_for

pytestmark = pytest.mark.e2e

GROUP, VERSION = "karpenter.sh", "v1"
KINDS = {"NodePool": "nodepools", "NodeClaim": "nodeclaims"}
NAMES = {f"{plural}.{GROUP}" for plural in KINDS.values()}


def karpenter_crds(directory: Path) -> list[dict[str, Any]]:
    """Karpenter's own karpenter.sh CRDs (``pkg/apis/crds``, not the KWOK chart's copy, which also restricts the
    karpenter.kwok.sh label domain)."""
    return [doc for plural in sorted(KINDS.values())
            for doc in load_yaml(directory / "core" / f"{GROUP}_{plural}.yaml")]


def nodeplan_crds() -> list[dict[str, Any]]:
    return [nodeplan_crd(spec) for spec in NODEPLAN_CRD_SPECS if spec.name in NAMES]


def install(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    """Replace (PUT, not merge) the karpenter.sh CRDs with ``docs``, keeping stored objects, and wait until the
    API server serves the new schema."""
    ext = client.ApiextensionsV1Api(api)
    for doc in docs:
        body = copy.deepcopy(doc)
        try:
            current = ext.read_custom_resource_definition(body["metadata"]["name"])
        except client.ApiException as err:
            if err.status != 404:
                raise
            ext.create_custom_resource_definition(body)
            continue
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(body["metadata"]["name"], body)

    def served() -> bool:
        for doc in docs:
            got = ext.read_custom_resource_definition(doc["metadata"]["name"])
            conditions = {c.type: c.status for c in got.status.conditions or []}
            if conditions.get("Established") != "True":
                return False
            schema = got.spec.versions[0].schema.open_apiv3_schema
            if json.dumps(api.sanitize_for_serialization(schema), sort_keys=True) != json.dumps(
                    doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"], sort_keys=True):
                return False
        return True

    wait_for(served, 30, what="CRDs replaced and Established")
    time.sleep(2.0)  # the API server swaps the served handler asynchronously after the CRD update


# --- the corpus -------------------------------------------------------------------------------------------------

def nodepool(name: str = "corpus") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}


def nodeclaim(name: str = "corpus") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeClaim", "metadata": {"name": name},
            "spec": {"requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                     "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}


Edit = Callable[[dict[str, Any]], None]


def _tpl(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"] if obj["kind"] == "NodePool" else obj["spec"]


def req(*requirements: dict[str, Any]) -> Edit:
    return lambda o: _tpl(o).__setitem__("requirements", list(requirements))


def taints(*items: dict[str, Any], field: str = "taints") -> Edit:
    return lambda o: _tpl(o).__setitem__(field, list(items))


def labels(values: dict[str, str]) -> Edit:
    return lambda o: o["spec"]["template"].setdefault("metadata", {}).__setitem__("labels", values)


def spec(**fields: Any) -> Edit:
    return lambda o: o["spec"].update(fields)


def tspec(**fields: Any) -> Edit:
    return lambda o: _tpl(o).update(fields)


def budgets(*items: dict[str, Any]) -> Edit:
    return lambda o: o["spec"].setdefault("disruption", {}).__setitem__("budgets", list(items))


def disruption(**fields: Any) -> Edit:
    return lambda o: o["spec"].setdefault("disruption", {}).update(fields)


def ref(**fields: Any) -> Edit:
    def edit(o: dict[str, Any]) -> None:
        target = _tpl(o)["nodeClassRef"]
        for key, value in fields.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    return edit


def drop(*path: str) -> Edit:
    def edit(o: dict[str, Any]) -> None:
        target = o
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return edit


def r(key: str, operator: str, *values: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator, **extra}
    if values or operator in ("In", "NotIn"):
        out["values"] = list(values)
    return out


def t(key: str | None, effect: str = "NoSchedule", value: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"effect": effect}
    if key is not None:
        out["key"] = key
    if value is not None:
        out["value"] = value
    return out


@dataclass(frozen=True)
class Case:
    """One submission: create ``kind`` edited by ``edit`` (or, with ``update``, create it and then update it with
    ``update``; with ``status``, write that status through the status subresource). ``ok``: Karpenter's
    expected verdict, from its validation test suites."""

    id: str
    kind: str
    ok: bool
    edit: Edit | None = None
    update: Edit | None = None
    status: dict[str, Any] | None = None


def _cond(**fields: Any) -> dict[str, Any]:
    base = {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


_VALUES_51 = [str(i) for i in range(51)]
CORPUS: tuple[Case, ...] = (
    # NodePool: shape and required fields
    Case("np-minimal", "NodePool", True),
    Case("np-no-spec", "NodePool", False, drop("spec")),
    Case("np-no-template-spec", "NodePool", False, drop("spec", "template", "spec")),
    Case("np-no-nodeclassref", "NodePool", False, drop("spec", "template", "spec", "nodeClassRef")),
    Case("np-no-requirements", "NodePool", False, drop("spec", "template", "spec", "requirements")),
    Case("np-empty-requirements", "NodePool", True, req()),
    # expireAfter / consolidateAfter / terminationGracePeriod
    Case("np-expire-never", "NodePool", True, tspec(expireAfter="Never")),
    Case("np-expire-hours-minutes", "NodePool", True, tspec(expireAfter="1h30m")),
    Case("np-expire-days", "NodePool", False, tspec(expireAfter="1d")),
    Case("np-expire-negative", "NodePool", False, tspec(expireAfter="-1h")),
    Case("np-tgp-never", "NodePool", False, tspec(terminationGracePeriod="Never")),
    Case("np-tgp-ok", "NodePool", True, tspec(terminationGracePeriod="30s")),
    Case("np-consolidate-never", "NodePool", True, disruption(consolidateAfter="Never")),
    Case("np-consolidate-when-empty", "NodePool", True, disruption(consolidationPolicy="WhenEmpty",
                                                                   consolidateAfter="1m")),
    Case("np-consolidate-bad", "NodePool", False, disruption(consolidateAfter="soon")),
    Case("np-policy-bad", "NodePool", False, disruption(consolidationPolicy="WhenUnderutilized")),
    # budgets
    Case("np-budget-cron-and-duration", "NodePool", True, budgets({"nodes": "10", "schedule": "* * * * *",
                                                                   "duration": "20m"})),
    Case("np-budget-hours-minutes", "NodePool", True, budgets({"nodes": "10", "schedule": "* * * * *",
                                                               "duration": "2h20m"})),
    Case("np-budget-special-cron", "NodePool", True, budgets({"nodes": "10", "schedule": "@daily",
                                                              "duration": "1h"})),
    Case("np-budget-neither", "NodePool", True, budgets({"nodes": "10"})),
    Case("np-budget-invalid-cron", "NodePool", False, budgets({"nodes": "10", "schedule": "*",
                                                               "duration": "20m"})),
    Case("np-budget-four-fields", "NodePool", False, budgets({"nodes": "10", "schedule": "* * * *",
                                                              "duration": "20m"})),
    Case("np-budget-negative-duration", "NodePool", False, budgets({"nodes": "10", "schedule": "* * * * *",
                                                                    "duration": "-20m"})),
    Case("np-budget-seconds-duration", "NodePool", False, budgets({"nodes": "10", "schedule": "* * * * *",
                                                                   "duration": "30s"})),
    Case("np-budget-negative-int", "NodePool", False, budgets({"nodes": "-10"})),
    Case("np-budget-negative-percent", "NodePool", False, budgets({"nodes": "-10%"})),
    Case("np-budget-1000-percent", "NodePool", False, budgets({"nodes": "1000%"})),
    Case("np-budget-cron-no-duration", "NodePool", False, budgets({"nodes": "10", "schedule": "* * * * *"})),
    Case("np-budget-duration-no-cron", "NodePool", False, budgets({"nodes": "10", "duration": "20m"})),
    Case("np-budgets-one-bad-cron", "NodePool", False, budgets(
        {"nodes": "10", "schedule": "* * * * *", "duration": "20m"}, {"nodes": "10", "schedule": "*",
                                                                      "duration": "20m"})),
    Case("np-budgets-one-incomplete", "NodePool", False, budgets(
        {"nodes": "10", "schedule": "* * * * *", "duration": "20m"}, {"nodes": "10", "schedule": "* * * * *"})),
    Case("np-budget-reasons", "NodePool", True, budgets({"nodes": "10", "reasons": ["Drifted", "Empty",
                                                                                    "Underutilized"]})),
    Case("np-budget-reason-unhealthy", "NodePool", True, budgets({"nodes": "10", "reasons": ["Unhealthy"]})),
    Case("np-budget-reason-bad", "NodePool", False, budgets({"nodes": "10", "reasons": ["Bored"]})),
    Case("np-budget-reason-duplicate", "NodePool", False, budgets({"nodes": "10", "reasons": ["Empty", "Empty"]})),
    Case("np-budget-no-nodes-defaults", "NodePool", True, budgets({"reasons": ["Empty"]})),
    # taints
    Case("np-taints-valid", "NodePool", True, taints(t("a"), t("b", value="b"), t("c", "NoExecute"),
                                                     t("example.com/d", "PreferNoSchedule"))),
    Case("np-taint-bad-key", "NodePool", False, taints(t("???"))),
    Case("np-taint-no-key", "NodePool", False, taints(t(None))),
    Case("np-taint-bad-value", "NodePool", False, taints(t("a", value="???"))),
    Case("np-taint-bad-effect", "NodePool", False, taints(t("a", "Never"))),
    Case("np-taint-same-key-two-effects", "NodePool", True, taints(t("a"), t("a", "NoExecute"))),
    Case("np-startup-taint-bad-key", "NodePool", False, taints(t("???"), field="startupTaints")),
    Case("np-startup-taint-ok", "NodePool", True, taints(t("example.com/ready"), field="startupTaints")),
    # requirements
    Case("np-req-valid-keys", "NodePool", True, req(r("Foo", "In", "bar"), r("foo.com/Bar", "In", "baz"),
                                                    r("node.kubernetes.io/instance-type", "In", "x"))),
    Case("np-req-bad-key", "NodePool", False, req(r("foo/bar/baz", "In", "x"))),
    Case("np-req-nodepool-label", "NodePool", False, req(r("karpenter.sh/nodepool", "In", "x"))),
    Case("np-req-hostname", "NodePool", False, req(r("kubernetes.io/hostname", "In", "x"))),
    Case("np-req-restricted-domain", "NodePool", False, req(r("karpenter.sh/custom", "In", "x"))),
    Case("np-req-restricted-subdomain", "NodePool", False, req(r("subdomain.karpenter.sh/custom", "In", "x"))),
    Case("np-req-capacity-type", "NodePool", True, req(r("karpenter.sh/capacity-type", "In", "spot"))),
    Case("np-req-all-ops", "NodePool", True, req(r("a", "In", "x"), r("b", "NotIn", "x"), r("c", "Exists"),
                                                 r("d", "DoesNotExist"), r("e", "Gt", "1"), r("f", "Lt", "1"),
                                                 r("g", "Gte", "1"), r("h", "Lte", "1"))),
    Case("np-req-bad-op", "NodePool", False, req(r("a", "Within", "x"))),
    Case("np-req-in-empty", "NodePool", False, req(r("a", "In"))),
    Case("np-req-gt-negative", "NodePool", False, req(r("a", "Gt", "-1"))),
    Case("np-req-gt-not-int", "NodePool", False, req(r("a", "Gt", "abc"))),
    Case("np-req-lt-two-values", "NodePool", False, req(r("a", "Lt", "1", "2"))),
    Case("np-req-gte-none", "NodePool", False, req(r("a", "Gte"))),
    Case("np-req-minvalues-ok", "NodePool", True, req(r("a", "In", "x", "y", minValues=2))),
    Case("np-req-minvalues-zero", "NodePool", False, req(r("a", "In", "x", minValues=0))),
    Case("np-req-minvalues-negative", "NodePool", False, req(r("a", "In", "x", minValues=-1))),
    Case("np-req-minvalues-51", "NodePool", False, req(r("a", "In", *_VALUES_51, minValues=51))),
    Case("np-req-minvalues-too-few", "NodePool", False, req(r("a", "In", "x", minValues=2))),
    Case("np-req-51-values", "NodePool", True, req(r("a", "In", *_VALUES_51))),
    Case("np-req-too-many", "NodePool", False, req(*(r(f"k{i}", "Exists") for i in range(101)))),
    # Karpenter's CRD puts the label-value bounds on the values array, where the API server ignores them
    Case("np-req-odd-value", "NodePool", True, req(r("a", "In", "not a label value"))),
    # template labels
    Case("np-labels-unrecognised", "NodePool", True, labels({"example.com/team": "a"})),
    Case("np-labels-nodepool", "NodePool", False, labels({"karpenter.sh/nodepool": "a"})),
    Case("np-labels-hostname", "NodePool", False, labels({"kubernetes.io/hostname": "a"})),
    Case("np-labels-bad-value", "NodePool", False, labels({"a": "???"})),
    Case("np-labels-long-value", "NodePool", False, labels({"a": "x" * 64})),
    Case("np-labels-restricted-domain", "NodePool", False, labels({"karpenter.sh/custom": "a"})),
    Case("np-labels-capacity-type", "NodePool", True, labels({"karpenter.sh/capacity-type": "spot"})),
    Case("np-labels-kops", "NodePool", True, labels({"kops.k8s.io/instancegroup": "a"})),
    Case("np-labels-kubernetes-domain", "NodePool", True, labels({"kubernetes.io/custom": "a",
                                                                  "node.kubernetes.io/custom": "b"})),
    Case("np-labels-101", "NodePool", False, labels({f"k{i}": "v" for i in range(101)})),
    # nodeClassRef
    Case("np-ref-empty-group", "NodePool", False, ref(group="")),
    Case("np-ref-no-kind", "NodePool", False, ref(kind=None)),
    Case("np-ref-empty-name", "NodePool", False, ref(name="")),
    Case("np-ref-slash-group", "NodePool", False, ref(group="karpenter/kwok")),
    # weight, limits, static NodePools
    Case("np-weight-ok", "NodePool", True, spec(weight=50)),
    Case("np-weight-zero", "NodePool", False, spec(weight=0)),
    Case("np-weight-101", "NodePool", False, spec(weight=101)),
    Case("np-limits-bad", "NodePool", False, spec(limits={"cpu": "lots"})),
    Case("np-static", "NodePool", True, spec(replicas=3)),
    Case("np-static-zero", "NodePool", True, spec(replicas=0)),
    Case("np-static-negative", "NodePool", False, spec(replicas=-1)),
    Case("np-static-weight", "NodePool", False, spec(replicas=3, weight=10)),
    Case("np-static-cpu-limit", "NodePool", False, spec(replicas=3, limits={"cpu": "10"})),
    Case("np-static-nodes-limit", "NodePool", True, spec(replicas=3, limits={"nodes": "5"})),
    # NodePool transitions (oldSelf)
    Case("np-mutate-group", "NodePool", False, update=ref(group="example.com")),
    Case("np-mutate-kind", "NodePool", False, update=ref(kind="OtherNodeClass")),
    Case("np-mutate-name", "NodePool", True, update=ref(name="other")),
    Case("np-dynamic-to-static", "NodePool", False, update=spec(replicas=1)),
    Case("np-static-to-dynamic", "NodePool", False, spec(replicas=1), update=drop("spec", "replicas")),
    Case("np-static-scale", "NodePool", True, spec(replicas=1), update=spec(replicas=5)),
    Case("np-static-nodes-limit-change", "NodePool", True, spec(replicas=1, limits={"nodes": "5"}),
         update=spec(limits={"nodes": "10"})),
    # NodePool status
    Case("np-status-ok", "NodePool", True, status={"conditions": [_cond()], "nodes": 2,
                                                   "resources": {"cpu": "4"}}),
    Case("np-status-no-message", "NodePool", False, status={"conditions": [_cond(message=None)]}),
    Case("np-status-empty-reason", "NodePool", False, status={"conditions": [_cond(reason="")]}),
    Case("np-status-no-status", "NodePool", False, status={"conditions": [_cond(status=None)]}),
    Case("np-status-bad-status", "NodePool", False, status={"conditions": [_cond(status="Maybe")]}),
    Case("np-status-duplicate-type", "NodePool", False, status={"conditions": [_cond(), _cond()]}),
    # NodeClaim
    Case("nc-minimal", "NodeClaim", True),
    Case("nc-no-nodeclassref", "NodeClaim", False, drop("spec", "nodeClassRef")),
    Case("nc-taints-valid", "NodeClaim", True, taints(t("a"), t("b", "NoExecute", "c"))),
    Case("nc-taint-bad-key", "NodeClaim", False, taints(t("???"))),
    Case("nc-taint-bad-effect", "NodeClaim", False, taints(t("a", "Never"))),
    Case("nc-req-nodepool-label", "NodeClaim", True, req(r("karpenter.sh/nodepool", "In", "default"))),
    Case("nc-req-hostname", "NodeClaim", False, req(r("kubernetes.io/hostname", "In", "x"))),
    Case("nc-req-restricted-domain", "NodeClaim", False, req(r("karpenter.sh/custom", "In", "x"))),
    Case("nc-req-gte-bad", "NodeClaim", False, req(r("a", "Gte", "x"))),
    Case("nc-req-minvalues-too-few", "NodeClaim", False, req(r("a", "In", "x", minValues=3))),
    Case("nc-group-valid", "NodeClaim", True, ref(group="karpenter.test.sh")),
    Case("nc-group-slash", "NodeClaim", False, ref(group="karpenter/test")),
    Case("nc-resources", "NodeClaim", True, spec(resources={"requests": {"cpu": "2", "memory": "4Gi"}})),
    Case("nc-resources-bad", "NodeClaim", False, spec(resources={"requests": {"cpu": "two"}})),
    Case("nc-spec-immutable", "NodeClaim", False, update=req(r("a", "In", "y"))),
    Case("nc-metadata-mutable", "NodeClaim", True,
         update=lambda o: o["metadata"].setdefault("labels", {}).update({"team": "a"})),
    Case("nc-status-ok", "NodeClaim", True, status={
        "nodeName": "n1", "providerID": "kwok://n1", "imageID": "img", "capacity": {"cpu": "4"},
        "lastPodEventTime": "2026-01-01T00:00:00Z",
        "conditions": [_cond(type="Launched", reason="", message=None, observedGeneration=1)]}),
    Case("nc-status-no-time", "NodeClaim", False, status={"conditions": [_cond(lastTransitionTime=None)]}),
    Case("nc-status-bad-reason", "NodeClaim", False, status={"conditions": [_cond(reason="not a reason")]}),
    Case("nc-status-bad-time", "NodeClaim", False, status={"lastPodEventTime": "yesterday"}),
)


def _object(case: Case) -> dict[str, Any]:
    obj = nodepool() if case.kind == "NodePool" else nodeclaim()
    obj["metadata"]["name"] = case.id
    if case.edit is not None:
        case.edit(obj)
    return obj


def submit(api: client.ApiClient, case: Case) -> tuple[bool, str]:
    """The API server's verdict on one case: (accepted, message)."""
    custom = client.CustomObjectsApi(api)
    plural = KINDS[case.kind]
    obj = _object(case)
    try:
        if case.update is None and case.status is None:
            custom.create_cluster_custom_object(GROUP, VERSION, plural, obj, dry_run="All")
            return True, ""
        created = custom.create_cluster_custom_object(GROUP, VERSION, plural, obj)
    except client.ApiException as err:
        return False, str(err.body)
    try:
        after = copy.deepcopy(created)
        if case.update is not None:
            case.update(after)
            custom.replace_cluster_custom_object(GROUP, VERSION, plural, case.id, after, dry_run="All")
        else:
            after["status"] = case.status
            custom.replace_cluster_custom_object_status(GROUP, VERSION, plural, case.id, after, dry_run="All")
        return True, ""
    except client.ApiException as err:
        return False, str(err.body)
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, plural, case.id)


# --- fixtures -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def crd_sets(karpenter_kwok: KarpenterKwok) -> dict[str, list[dict[str, Any]]]:
    return {"karpenter": karpenter_crds(karpenter_kwok.crds), "nodeplan": nodeplan_crds()}


@pytest.fixture(scope="module")
def verdicts(crd_sets: dict[str, list[dict[str, Any]]], fresh_cluster: Cluster
             ) -> Iterator[dict[str, dict[str, tuple[bool, str]]]]:
    api = fresh_cluster.api()
    out: dict[str, dict[str, tuple[bool, str]]] = {}
    for name in ("karpenter", "nodeplan"):
        install(api, crd_sets[name])
        out[name] = {case.id: submit(api, case) for case in CORPUS}
    yield out


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_both_crds_give_karpenters_verdict(verdicts: dict[str, dict[str, tuple[bool, str]]], case: Case) -> None:
    karpenter_ok, karpenter_msg = verdicts["karpenter"][case.id]
    nodeplan_ok, nodeplan_msg = verdicts["nodeplan"][case.id]
    assert karpenter_ok == case.ok, f"Karpenter's CRD: expected {'accept' if case.ok else 'reject'}: {karpenter_msg}"
    assert nodeplan_ok == karpenter_ok, f"nodeplan's CRD disagrees with Karpenter's: {nodeplan_msg}"


def test_rejections_name_the_same_rule(verdicts: dict[str, dict[str, tuple[bool, str]]]) -> None:
    """Where a CEL rule rejects, the API server reports the same message under either CRD."""
    for case in CORPUS:
        karpenter_ok, karpenter_msg = verdicts["karpenter"][case.id]
        if karpenter_ok:
            continue
        causes = [c.get("message") for c in (json.loads(karpenter_msg).get("details") or {}).get("causes") or []]
        nodeplan_causes = [c.get("message") for c in
                           (json.loads(verdicts["nodeplan"][case.id][1]).get("details") or {}).get("causes") or []]
        assert nodeplan_causes == causes, case.id


# --- round trips ------------------------------------------------------------------------------------------------

KARPENTER_POOL: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePool", "metadata": {"name": "written-by-karpenter"},
    "spec": {
        "template": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"example.com/owner": "a"}},
            "spec": {
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["c", "m", "s"],
                     "minValues": 2},
                    {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lte", "values": ["32"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]}],
                "taints": [{"key": "example.com/dedicated", "value": "a", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "example.com/agent", "value": "not-ready", "effect": "NoExecute"}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "expireAfter": "336h",
                "terminationGracePeriod": "1h"}},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
                       "budgets": [{"nodes": "20%", "reasons": ["Empty", "Drifted"]},
                                   {"nodes": "0", "schedule": "@daily", "duration": "10m"}]},
        "limits": {"cpu": "1000", "memory": "1000Gi"},
        "weight": 10}}
KARPENTER_POOL_STATUS: dict[str, Any] = {
    "nodes": 1, "resources": {"cpu": "8", "memory": "16Gi"}, "nodeClassObservedGeneration": 1,
    "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "observedGeneration": 1,
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
KARPENTER_CLAIM: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeClaim",
    "metadata": {"name": "written-by-karpenter-abcde",
                 "labels": {"karpenter.sh/nodepool": "written-by-karpenter",
                            "node.kubernetes.io/instance-type": "c-8x-amd64-linux"},
                 "finalizers": ["karpenter.sh/termination"]},
    "spec": {
        "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                          "values": ["c-8x-amd64-linux", "m-8x-amd64-linux"], "minValues": 2},
                         {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["written-by-karpenter"]}],
        "taints": [{"key": "example.com/dedicated", "value": "a", "effect": "NoSchedule",
                    "timeAdded": "2026-01-01T00:00:00Z"}],
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
        "resources": {"requests": {"cpu": "2500m", "memory": "3Gi", "pods": "7"}},
        "expireAfter": "336h", "terminationGracePeriod": "1h"}}
KARPENTER_CLAIM_STATUS: dict[str, Any] = {
    "nodeName": "kwok-node-1", "providerID": "kwok://kwok-node-1", "imageID": "kwok-image",
    "capacity": {"cpu": "8", "memory": "16Gi", "pods": "128"},
    "allocatable": {"cpu": "7900m", "memory": "15Gi", "pods": "128"},
    "lastPodEventTime": "2026-01-01T00:05:00Z",
    "conditions": [{"type": "Launched", "status": "True", "reason": "Launched", "message": "",
                    "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"},
                   {"type": "Initialized", "status": "True", "reason": "", "lastTransitionTime":
                    "2026-01-01T00:01:00Z"}]}


def _write(custom: client.CustomObjectsApi, plural: str, obj: dict[str, Any],
           status: dict[str, Any] | None) -> dict[str, Any]:
    created = custom.create_cluster_custom_object(GROUP, VERSION, plural, copy.deepcopy(obj))
    if status is not None:
        created["status"] = copy.deepcopy(status)
        created = custom.replace_cluster_custom_object_status(GROUP, VERSION, plural, obj["metadata"]["name"],
                                                              created)
    return dict(created)


def _read(custom: client.CustomObjectsApi, plural: str, name: str) -> dict[str, Any]:
    return dict(custom.get_cluster_custom_object(GROUP, VERSION, plural, name))


def _revalidate(custom: client.CustomObjectsApi, plural: str, obj: dict[str, Any]) -> None:
    """Submit the stored object again (spec and status) so the API server validates it under the CRDs now
    installed; raises ApiException if they would reject it."""
    name = obj["metadata"]["name"]
    custom.replace_cluster_custom_object(GROUP, VERSION, plural, name, copy.deepcopy(obj), dry_run="All")
    if obj.get("status"):
        custom.replace_cluster_custom_object_status(GROUP, VERSION, plural, name, copy.deepcopy(obj),
                                                    dry_run="All")


def _without_rv(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    return out


@pytest.fixture(scope="module")
def round_trip(fresh_cluster: Cluster, crd_sets: dict[str, list[dict[str, Any]]],
               verdicts: dict[str, Any]) -> Iterator[dict[str, dict[str, Any]]]:
    """Objects written under Karpenter's CRDs, read under nodeplan's; and nodeplan's written objects read back
    under Karpenter's. (``verdicts`` first: both use the same control plane.)"""
    api = fresh_cluster.api()
    custom = client.CustomObjectsApi(api)
    out: dict[str, dict[str, Any]] = {}
    install(api, crd_sets["karpenter"])
    out["k_pool"] = _write(custom, "nodepools", KARPENTER_POOL, KARPENTER_POOL_STATUS)
    out["k_claim"] = _write(custom, "nodeclaims", KARPENTER_CLAIM, KARPENTER_CLAIM_STATUS)

    install(api, crd_sets["nodeplan"])
    out["k_pool_via_nodeplan"] = _read(custom, "nodepools", "written-by-karpenter")
    out["k_claim_via_nodeplan"] = _read(custom, "nodeclaims", KARPENTER_CLAIM["metadata"]["name"])
    _revalidate(custom, "nodepools", out["k_pool_via_nodeplan"])
    _revalidate(custom, "nodeclaims", out["k_claim_via_nodeplan"])
    # nodeplan writes: a NodeClaim the provisioner would create for the Karpenter-written pool, with the status
    # its lifecycle controller writes, and the NodePool status its status writer computes.
    pool = NodePool.model_validate(out["k_pool_via_nodeplan"])
    planned = PlannedNodeClaim(name="n0", node_pool=pool.name, instance_type="c-4x-amd64-linux",
                               zone="test-zone-a", capacity_type="on-demand", price=0.118, pods=["perf/p0"],
                               requests={"cpu": "3", "memory": "4Gi", "pods": "1"})
    body = nodeclaim_body(planned, pool, claim_name(pool.name, planned, ["uid-0"]), ["uid-0"],
                          fallbacks=["m-4x-amd64-linux"])
    claim_status = {"nodeName": "kwok-n0", "providerID": "kwok://kwok-n0", "capacity": {"cpu": "4", "memory": "8Gi"},
                    "allocatable": {"cpu": "3900m", "memory": "7Gi"}, "conditions": [
                        {"type": "Launched", "status": "True", "reason": "Launched", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    out["n_claim"] = _write(custom, "nodeclaims", body, claim_status)
    pool_raw = copy.deepcopy(out["k_pool_via_nodeplan"])
    pool_raw["status"] = desired_status(pool_raw, [out["n_claim"], out["k_claim_via_nodeplan"]])
    out["n_pool"] = dict(custom.replace_cluster_custom_object_status(GROUP, VERSION, "nodepools",
                                                                     pool.name, pool_raw))

    install(api, crd_sets["karpenter"])
    out["n_claim_via_karpenter"] = _read(custom, "nodeclaims", body["metadata"]["name"])
    out["n_pool_via_karpenter"] = _read(custom, "nodepools", pool.name)
    _revalidate(custom, "nodeclaims", out["n_claim_via_karpenter"])
    _revalidate(custom, "nodepools", out["n_pool_via_karpenter"])
    yield out


def test_karpenter_objects_read_under_nodeplan_crds_without_loss(round_trip: dict[str, dict[str, Any]]) -> None:
    assert _without_rv(round_trip["k_pool_via_nodeplan"]) == _without_rv(round_trip["k_pool"])
    assert _without_rv(round_trip["k_claim_via_nodeplan"]) == _without_rv(round_trip["k_claim"])
    # what Karpenter wrote is all there, including the fields only Karpenter interprets
    assert round_trip["k_pool"]["spec"]["disruption"] == KARPENTER_POOL["spec"]["disruption"]
    assert round_trip["k_pool"]["status"]["nodeClassObservedGeneration"] == 1
    assert round_trip["k_claim"]["spec"]["taints"][0]["timeAdded"] == "2026-01-01T00:00:00Z"
    assert round_trip["k_claim"]["status"]["lastPodEventTime"] == "2026-01-01T00:05:00Z"


def test_nodeplan_reads_karpenter_objects(round_trip: dict[str, dict[str, Any]]) -> None:
    pool = NodePool.model_validate(round_trip["k_pool_via_nodeplan"])
    template = KARPENTER_POOL["spec"]["template"]
    assert [(q.key, q.operator, sorted(q.values), q.min_values) for q in pool.spec.template.spec.requirements] == [
        (q["key"], q["operator"], sorted(q.get("values", [])), q.get("minValues"))
        for q in template["spec"]["requirements"]]
    assert [(x.key, x.value, x.effect) for x in pool.taints] == [("example.com/dedicated", "a", "NoSchedule")]
    assert [(x.key, x.value, x.effect) for x in pool.spec.template.spec.startup_taints] == [
        ("example.com/agent", "not-ready", "NoExecute")]
    assert pool.labels == {"team": "a"}
    assert pool.spec.template.metadata.annotations == {"example.com/owner": "a"}
    assert pool.spec.template.spec.node_class_ref is not None
    assert pool.spec.template.spec.node_class_ref.kind == "KWOKNodeClass"
    assert (pool.spec.template.spec.expire_after, pool.spec.template.spec.termination_grace_period) == ("336h",
                                                                                                       "1h")
    assert pool.weight == 10
    assert pool.limits["cpu"] == 1_000_000 and pool.limits["memory"] == 1000 * 2**30
    disruption = pool.spec.disruption
    assert (disruption.consolidation_policy, disruption.consolidate_after) == ("WhenEmptyOrUnderutilized", "30s")
    assert [(b.nodes, b.schedule, b.duration, b.reasons) for b in disruption.budgets] == [
        ("20%", None, None, ["Empty", "Drifted"]), ("0", "@daily", "10m", None)]
    assert pool.status.nodes == 1 and pool.status.resources["cpu"] == 8000
    claim = parse_claim(round_trip["k_claim_via_nodeplan"])
    assert claim.nodepool == "written-by-karpenter"
    assert (claim.status.node_name, claim.status.provider_id, claim.status.image_id) == (
        "kwok-node-1", "kwok://kwok-node-1", "kwok-image")
    assert claim.status.capacity["cpu"] == 8000 and claim.status.allocatable["cpu"] == 7900
    assert claim.condition("Launched") and claim.condition("Initialized")
    assert claim.spec.resources.requests["cpu"] == 2500
    assert [(q.key, q.min_values) for q in claim.spec.requirements] == [("node.kubernetes.io/instance-type", 2),
                                                                        ("karpenter.sh/nodepool", None)]


def test_nodeplan_objects_read_under_karpenter_crds_without_loss(round_trip: dict[str, dict[str, Any]]) -> None:
    """What nodeplan writes (a NodeClaim and its status; a NodePool's status) is valid under Karpenter's CRDs
    (``_revalidate`` in the fixture) and reads back identically."""
    assert _without_rv(round_trip["n_claim_via_karpenter"]) == _without_rv(round_trip["n_claim"])
    assert _without_rv(round_trip["n_pool_via_karpenter"]) == _without_rv(round_trip["n_pool"])
    claim = round_trip["n_claim_via_karpenter"]
    assert claim["spec"]["nodeClassRef"] == KARPENTER_POOL["spec"]["template"]["spec"]["nodeClassRef"]
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In",
            "values": ["c-4x-amd64-linux", "m-4x-amd64-linux"]} in claim["spec"]["requirements"]
    types = {c["type"] for c in round_trip["n_pool_via_karpenter"]["status"]["conditions"]}
    assert {"Ready", "ValidationSucceeded"} <= types


def test_nodeclaim_for_a_pool_with_a_value_less_taint_is_valid() -> None:
    """Karpenter omits an empty taint value and its CRD's pattern rejects ``value: ""``: so must nodeplan."""
    pool = NodePool.model_validate({**KARPENTER_POOL, "spec": {**KARPENTER_POOL["spec"], "template": {
        **KARPENTER_POOL["spec"]["template"], "spec": {**KARPENTER_POOL["spec"]["template"]["spec"], "startupTaints": [
            {"key": "example.com/agent", "effect": "NoExecute"}]}}}})
    planned = PlannedNodeClaim(name="n0", node_pool=pool.name, instance_type="c-4x-amd64-linux", zone="test-zone-a",
                               capacity_type="on-demand", price=0.118, pods=[], requests={"cpu": "1"})
    body = nodeclaim_body(planned, pool, "n0", [])
    assert all(taint.get("value", "x") != "" for taint in body["spec"]["startupTaints"])
