"""Owning only what it is given: ``--nodepool-selector`` (kubectl's label-selector syntax), NodePools whose node
class no provider serves skipped with a condition naming the class, other pools' nodes as existing capacity,
their NodeClaims hidden from the parts that launch, drain and delete."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from controller.cache import FilteredCache
from controller.nodepool_status import NodePoolStatusWriter, Ownership, desired_status, parse_nodepool_selector
from controller.provisioner import Provisioner, ProvisionerOptions
from model.errors import InputError
from providers.protocol import NodeClassKind
from tests.unit.test_shadow import CATALOG, NODEPOOL, NoWrites, fake_cache, karpenter_claim, pending_pod

KWOK_NODE_CLASS = NodeClassKind("karpenter.kwok.sh", "KWOKNodeClass", "v1alpha1", "kwoknodeclasses")
KWOK = Ownership(None, (KWOK_NODE_CLASS,))


def pool(name: str, labels: dict[str, str] | None = None, node_class: tuple[str, str] | None = None
         ) -> dict[str, Any]:
    out = copy.deepcopy(NODEPOOL)
    out["metadata"] = {"name": name, "uid": f"np-{name}", "labels": labels or {}}
    if node_class:
        out["spec"]["template"]["spec"]["nodeClassRef"] = {"group": node_class[0], "kind": node_class[1],
                                                           "name": "default"}
    return out


def test_selector_syntax_is_kubectls() -> None:
    selector = parse_nodepool_selector("owner=nodeplan,tier in (a, b),!legacy,env!=prod")
    assert selector.matches({"owner": "nodeplan", "tier": "a"})
    assert selector.matches({"owner": "nodeplan", "tier": "b", "env": "dev"})
    assert not selector.matches({"owner": "nodeplan", "tier": "c"})
    assert not selector.matches({"owner": "nodeplan", "tier": "a", "legacy": "1"})
    assert not selector.matches({"owner": "nodeplan", "tier": "a", "env": "prod"})
    assert not selector.matches({"owner": "karpenter", "tier": "a"})
    assert parse_nodepool_selector("team").matches({"team": ""}) and not parse_nodepool_selector("team").matches({})
    with pytest.raises(InputError, match="field --nodepool-selector: 'bad key=1'"):
        parse_nodepool_selector("bad key=1")


def test_bad_selector_on_run_is_exit_2() -> None:
    result = CliRunner().invoke(app, ["run", "--nodepool-selector", "a in ()", "--kubeconfig", "/dev/null"])
    assert result.exit_code == 2
    assert "--nodepool-selector" in result.stderr and "needs at least one value" in result.stderr


def test_an_unserved_node_class_is_skipped_with_a_condition_naming_it() -> None:
    ec2 = pool("gpu", node_class=("karpenter.k8s.aws", "EC2NodeClass"))
    assert KWOK.unserved_class(ec2) == "EC2NodeClass.karpenter.k8s.aws/default" and not KWOK.owns(ec2)
    conditions = {c["type"]: c for c in desired_status(ec2, [], KWOK)["conditions"]}
    assert conditions["ValidationSucceeded"]["status"] == "True"
    for kind in ("NodeClassReady", "Ready"):
        assert conditions[kind]["status"] == "False" and conditions[kind]["reason"] == "NodeClassNotSupported"
        assert "EC2NodeClass.karpenter.k8s.aws/default" in conditions[kind]["message"]
    served = {c["type"]: c["status"] for c in desired_status(pool("general"), [], KWOK)["conditions"]}
    assert served == {"ValidationSucceeded": "True", "NodeClassReady": "True", "Ready": "True"}


def test_plans_use_owned_pools_only_and_others_nodes_as_capacity() -> None:
    cache = fake_cache()
    cache.upsert("NodePool", pool("mine", {"owner": "nodeplan"}))
    cache.upsert("NodePool", pool("theirs", {"owner": "karpenter"}))
    cache.upsert("NodePool", pool("aws", {"owner": "nodeplan"}, ("karpenter.k8s.aws", "EC2NodeClass")))
    claim, node = karpenter_claim("theirs-1", "c-4x-amd64-linux", created=-100)
    for obj in (claim, node):
        obj["metadata"]["labels"]["karpenter.sh/nodepool"] = "theirs"
        cache.upsert(obj["kind"], obj)
    ownership = Ownership(parse_nodepool_selector("owner=nodeplan"), (KWOK_NODE_CLASS,))
    provisioner = Provisioner(NoWrites(), cache, CATALOG, ProvisionerOptions(solve_time_limit=3.0),
                              owns=ownership.owns)
    assert [p["metadata"]["name"] for p in provisioner.valid_nodepools()] == ["mine"]
    # two 1-core pods fit the other pool's 4-core node: placed there, nothing launched
    pods = {f"default/web-{i}": pending_pod(i) for i in range(2)}
    for pod in pods.values():
        cache.upsert("Pod", pod)
    record, bodies = provisioner.plan(pods)
    assert bodies == [] and [n.name for n in record.plan.existing_nodes] == ["theirs-1"]
    # more than it holds: the rest on a new node of the owned pool, never of the other or the EC2 one
    big = {f"default/web-{i}": pending_pod(i, cpu="2") for i in range(2, 6)}
    for pod in big.values():
        cache.upsert("Pod", pod)
    record, bodies = provisioner.plan({**pods, **big})
    assert bodies and {b["metadata"]["labels"]["karpenter.sh/nodepool"] for b in bodies} == {"mine"}
    # the writing parts do not see the other pool's NodeClaim
    owned = FilteredCache(cache, lambda kind, obj: kind != "NodeClaim" or (obj["metadata"].get("labels") or {})
                          .get("karpenter.sh/nodepool") in ownership.owned_pools(cache.items("NodePool")))
    assert owned.items("NodeClaim") == [] and len(cache.items("NodeClaim")) == 1
    assert len(owned.items("Node")) == 1


def test_status_is_written_for_selected_pools_only() -> None:
    cache = fake_cache()
    cache.upsert("NodePool", pool("mine", {"owner": "nodeplan"}, ("karpenter.k8s.aws", "EC2NodeClass")))
    cache.upsert("NodePool", pool("theirs", {"owner": "karpenter"}))
    patched: list[tuple[str, dict[str, Any]]] = []

    class Custom:
        def patch_cluster_custom_object_status(self, group: str, version: str, plural: str, name: str,
                                               body: dict[str, Any]) -> dict[str, Any]:
            patched.append((name, body))
            return {**next(p for p in cache.items("NodePool") if p["metadata"]["name"] == name), **body}

    writer = NodePoolStatusWriter(NoWrites(), cache, None,
                                  Ownership(parse_nodepool_selector("owner=nodeplan"), (KWOK_NODE_CLASS,)))
    writer._custom = Custom()  # type: ignore[assignment]
    writer.reconcile()
    assert [name for name, _ in patched] == ["mine"]  # Karpenter's NodePool is not ours to write
    assert writer.unserved == {"mine": "EC2NodeClass.karpenter.k8s.aws/default"}
