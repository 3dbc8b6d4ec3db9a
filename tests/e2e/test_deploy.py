"""deploy/ against the real API server: the generated CRDs install and validate, the controller's
ServiceAccount, RBAC and Deployment pass server-side dry-run."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client

from tests.e2e.conftest import ROOT, Cluster, apply, load_yaml

pytestmark = pytest.mark.e2e


def test_crds_established_and_sample_nodepool_validates(cluster: Cluster, crds: list[str]) -> None:
    assert set(crds) == {"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh",
                         "ec2nodeclasses.karpenter.k8s.aws"}
    api = cluster.api()
    for obj in load_yaml(ROOT / "deploy" / "examples" / "nodepool.yaml"):
        applied = apply(api, obj, dry_run=True)
        assert applied["metadata"]["name"] == obj["metadata"]["name"]
        if obj["kind"] == "NodePool":
            # no field was pruned: the schema knows every field of the Karpenter manifest
            assert applied["spec"]["template"]["spec"]["requirements"] == obj["spec"]["template"]["spec"][
                "requirements"]
            assert applied["spec"]["disruption"]["budgets"] == obj["spec"]["disruption"]["budgets"]
            assert applied["spec"]["template"]["spec"]["taints"] == obj["spec"]["template"]["spec"]["taints"]


def test_nodepool_defaults_applied_by_the_api_server(cluster: Cluster, crds: list[str]) -> None:
    minimal = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "minimal"},
               "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {
                   "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}},
                        "disruption": {}}}
    applied = apply(cluster.api(), minimal, dry_run=True)
    assert applied["spec"]["template"]["spec"]["expireAfter"] == "720h"
    assert applied["spec"]["disruption"] == {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                                             "consolidateAfter": "0s", "budgets": [{"nodes": "10%"}]}


@pytest.mark.parametrize(("path", "value", "needle"), [
    (("spec", "template", "spec", "requirements", 0, "operator"), "Sometimes", "operator"),
    (("spec", "limits", "cpu"), "lots", "limits"),
    (("spec", "weight"), 101, "weight"),
    (("spec", "template", "spec", "taints", 0, "effect"), "Never", "effect"),
])
def test_invalid_nodepools_are_rejected(cluster: Cluster, crds: list[str], path: tuple, value: object,
                                        needle: str) -> None:
    nodepool = next(o for o in load_yaml(ROOT / "deploy" / "examples" / "nodepool.yaml") if o["kind"] == "NodePool")
    bad = copy.deepcopy(nodepool)
    target = bad
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(client.ApiException) as err:
        apply(cluster.api(), bad, dry_run=True)
    assert err.value.status == 422
    assert needle in str(err.value.body)


def test_controller_manifests_pass_server_side_dry_run(cluster: Cluster) -> None:
    api = cluster.api()
    for obj in load_yaml(ROOT / "deploy" / "namespace.yaml"):
        apply(api, obj)  # namespaced objects need their namespace to exist, even in a dry run
    kinds = []
    for obj in load_yaml(ROOT / "deploy" / "controller.yaml"):
        apply(api, obj, dry_run=True)
        kinds.append(obj["kind"])
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"]
    # nothing was stored
    assert not client.RbacAuthorizationV1Api(api).list_cluster_role(
        field_selector="metadata.name=nodeplan").items
