"""The real control plane for e2e tests: built once (``hack/control-plane/build.sh`` only builds what is
missing — a cold build takes ~6–8 min), started once per session in a temporary directory, torn down after.

Every test here is marked ``e2e`` and runs in the normal ``make test``; nothing is skipped when the binaries
are missing, the fixture builds them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

from controller.run import api_client
from model.snapshot import parse_objects

ROOT = Path(__file__).resolve().parents[2]
CONTROL_PLANE = ROOT / "hack" / "control-plane"
CRDS = ROOT / "deploy" / "crds"
#: how long a scale-out in these tests may take to have every pod Running: well inside the kube-scheduler's
#: 5-minute unschedulable flush, so a pod the controller leaves waiting for that flush fails the test (a re-plan
#: comes after the 15 s bind grace; the scheduler's backoff is at most 10 s)
RUNNING_WITHIN = 150.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the e2e tests last: the control plane starts at the first of them and runs until the session ends,
    and it should not steal CPU from the time-limited solver tests."""
    here = Path(__file__).parent
    items.sort(key=lambda item: Path(str(item.path)).is_relative_to(here))


@dataclass
class Cluster:
    dir: Path
    kubeconfig: Path
    env: dict[str, str]

    def api(self) -> client.ApiClient:
        return api_client(str(self.kubeconfig))

    def log(self, component: str) -> str:
        path = self.dir / "logs" / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextlib.contextmanager
def control_plane(state: Path) -> Iterator[Cluster]:
    """A control plane of its own in ``state`` (built if missing), stopped on exit."""
    started = time.monotonic()
    build = subprocess.run([str(CONTROL_PLANE / "build.sh")], capture_output=True, text=True, check=False)
    if build.returncode != 0:
        pytest.fail(f"control-plane build failed:\n{build.stderr[-4000:]}")
    bin_dir = build.stdout.strip().splitlines()[-1]
    env = {**os.environ, "NODEPLAN_CLUSTER_DIR": str(state), "NODEPLAN_CONTROL_PLANE_BIN": bin_dir}
    up = subprocess.run([str(CONTROL_PLANE / "cluster.sh"), "up"], capture_output=True, text=True, env=env,
                        check=False)
    if up.returncode != 0:
        subprocess.run([str(CONTROL_PLANE / "cluster.sh"), "down"], env=env, check=False, capture_output=True)
        pytest.fail(f"cluster.sh up failed:\n{up.stderr[-4000:]}")
    print(f"control plane ready in {time.monotonic() - started:.1f}s (state {state})")
    try:
        yield Cluster(dir=state, kubeconfig=state / "kubeconfig", env=env)
    finally:
        subprocess.run([str(CONTROL_PLANE / "cluster.sh"), "down"], env=env, check=False, capture_output=True)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with control_plane(tmp_path_factory.mktemp("control-plane") / "cluster") as running:
        yield running


@pytest.fixture(scope="module")
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A second control plane for one test module, for tests that install CRDs other than deploy/crds (the
    session's ``cluster`` keeps nodeplan's)."""
    with control_plane(tmp_path_factory.mktemp("fresh-control-plane") / "cluster") as running:
        yield running


@dataclass
class KarpenterKwok:
    """Karpenter's KWOK provider as ``hack/karpenter-kwok/build.sh`` caches it: the binary and its CRDs."""

    bin_dir: Path
    crds: Path  # crds/core: pkg/apis/crds; crds/kwok: what the KWOK chart installs

    @property
    def binary(self) -> Path:
        return self.bin_dir / "karpenter-kwok"


def _karpenter_version() -> str:
    text = (ROOT / "bench" / "karpenter" / "versions.env").read_text()
    return next(line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("KARPENTER_VERSION="))


@pytest.fixture(scope="session")
def karpenter_kwok() -> KarpenterKwok:
    """The cached build; ``make test`` builds it first (``make karpenter-kwok``), so under ``CI`` a missing build
    fails, and elsewhere the tests that need it are skipped rather than building it (~3 min cold) unasked."""
    cache = Path(os.environ.get("NODEPLAN_CACHE") or Path.home() / ".cache" / "nodeplan")
    root = cache / "karpenter-kwok" / _karpenter_version()
    found = KarpenterKwok(bin_dir=root / "bin", crds=root / "crds")
    if not (found.binary.is_file() and (found.crds / "core").is_dir() and (found.crds / "kwok").is_dir()):
        reason = f"Karpenter's KWOK provider is not built in {root} (run `make karpenter-kwok`)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def apply(api: client.ApiClient, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Server-side apply one object (``dry_run``: the API server validates and admits it, stores nothing)."""
    resource = dynamic.DynamicClient(api).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    kwargs: dict[str, Any] = {"field_manager": "nodeplan-e2e", "force_conflicts": True}
    if dry_run:
        kwargs["dry_run"] = "All"
    namespace = obj.get("metadata", {}).get("namespace")
    result = resource.server_side_apply(body=obj, namespace=namespace, **kwargs)
    return result.to_dict()  # type: ignore[no-any-return]


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def wait_for(predicate: Any, timeout: float, interval: float = 0.5, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def fits_beside_claim(pod: dict[str, Any], claim: dict[str, Any], pods: list[dict[str, Any]],
                      nodes: dict[str, dict[str, Any]]) -> bool:
    """Could ``pod`` still fit on ``claim``'s node beside the pods bound there now and the claim's other planned
    pods, wherever they went? Room on a node only shrinks while no pod is deleted, except the room its other
    planned pods held until the scheduler bound them elsewhere; a pod planned again that fits even beside those
    was never displaced from the claim (``controller.provisioner.displaced_pods``). API objects as dicts."""
    node = nodes.get((claim.get("status") or {}).get("nodeName") or claim["metadata"]["name"])
    if node is None:
        return False
    uid = pod["metadata"]["uid"]
    allocatable = parse_objects([node | {"kind": "Node"}], source="cluster").nodes[0].allocatable
    planned = set(json.loads(claim["metadata"]["annotations"]["nodeplan.io/pods"]))
    here = node["metadata"]["name"]
    beside = [p for p in pods if p["metadata"]["uid"] != uid
              and ((p.get("spec") or {}).get("nodeName") == here or p["metadata"]["uid"] in planned)]
    total = parse_objects([pod | {"kind": "Pod"}], source="cluster").pods[0].requests
    for other in beside:
        total = total + parse_objects([other | {"kind": "Pod"}], source="cluster").pods[0].requests
    return bool(total.fits_in(allocatable))


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> list[str]:
    """The generated CRDs, installed and Established."""
    api = cluster.api()
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        for obj in load_yaml(path):
            apply(api, obj)
            names.append(obj["metadata"]["name"])
    ext = client.ApiextensionsV1Api(api)

    def established() -> bool:
        for name in names:
            conditions = ext.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for(established, 30, what="CRDs Established")
    return names


def release_finalizers(api: client.ApiClient) -> None:
    """Drop the ``karpenter.sh/termination`` finalizers from every NodeClaim and Node, for test clean-up once the
    controller that would honour them has stopped (otherwise deleted claims and their Nodes stay forever)."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    for claim in custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]:
        if claim["metadata"].get("finalizers"):
            with contextlib.suppress(client.ApiException):
                custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim["metadata"]["name"],
                                                   {"metadata": {"finalizers": None}})
    for node in core.list_node().items:
        if node.metadata.finalizers:
            with contextlib.suppress(client.ApiException):
                core.patch_node(node.metadata.name, {"metadata": {"finalizers": None}},
                                _content_type="application/merge-patch+json")


def open_workspace(cluster: Cluster, namespace: str, nodepool: dict[str, Any], *objects: dict[str, Any]
                   ) -> Generator[client.ApiClient, None, client.ApiClient]:
    """A test's namespace, NodePool and cluster objects (node class, device class …), for a fixture to
    ``yield from``; the namespace and the pool are taken down afterwards (``tear_down``), and the client is
    returned for whatever else the fixture removes."""
    api = cluster.api()
    client.CoreV1Api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for obj in (*objects, nodepool):
        apply(api, obj)
    yield api
    tear_down(api, namespace, nodepool["metadata"]["name"])
    return api


def tear_down(api: client.ApiClient, namespace: str, nodepool: str) -> None:
    """A test's clean-up once its controller has stopped: its Deployments and namespace, its NodePool's
    NodeClaims (finalizers released, nothing would drain them) and the NodePool; returns once the namespace
    and the pool's Nodes are gone, so the next test starts from a cluster without them."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    client.AppsV1Api(api).delete_collection_namespaced_deployment(namespace)
    core.delete_namespace(namespace, grace_period_seconds=0)
    for claim in custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]:
        if claim["metadata"].get("labels", {}).get("karpenter.sh/nodepool") == nodepool:
            with contextlib.suppress(client.ApiException):
                custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim["metadata"]["name"])
    release_finalizers(api)
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", nodepool)

    def clean() -> bool:
        nodes = [n for n in core.list_node().items
                 if (n.metadata.labels or {}).get("karpenter.sh/nodepool") == nodepool]
        return namespace not in [n.metadata.name for n in core.list_namespace().items] and not nodes

    wait_for(clean, 120, interval=1.0, what="namespace and nodes deleted")
