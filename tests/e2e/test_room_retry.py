"""A pod placed into room on a running node is retried by the real kube-scheduler at once, not at its 5-minute
unschedulable flush.

kube-scheduler 1.36 keeps room on a node for pods nominated to it (``status.nominatedNodeName``, KEP-5278) and
retries a pod it rejected for lack of room only on an event that can free room: a node added or resized, an
assigned pod deleted, a nomination moved. A nominated pod bound somewhere else frees its room without one
(kubernetes#134859: "an unlikely external binding"; in the bench it came from the scheduler's own binding of a
pod nodeplan had nominated elsewhere). This builds that state on the pinned control plane: pod Q, nominated
to node N, holds N's room; pod P is rejected on N for it; Q is bound to node M. A plain nomination of P to N —
what ``controller.provisioner`` wrote until session 25 — leaves P Pending; ``nominate_into_room`` moves the
nomination and P is bound to N.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from controller.provisioner import nominate, nominate_into_room
from controller.rest import CoreApi, request
from tests.e2e.conftest import Cluster, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "room-retry"
KEY = "nodeplan.io/e2e-room-retry"
TOLERATION = {"key": KEY, "operator": "Exists", "effect": "NoSchedule"}
#: the scheduler retries a rejected pod after a backoff of at most 10 s (its default maximum)
RETRY_SECONDS = 30
#: how long P must stay Pending to show no event retried it (its backoff is 1–2 s after one or two attempts)
QUIET_SECONDS = 12


def fake_node(name: str, cpu: str) -> dict[str, Any]:
    """A KWOK Node that only this test's pods tolerate and select (``KEY``)."""
    allocatable = {"cpu": cpu, "memory": "8Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {KEY: name, "kubernetes.io/hostname": name},
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"providerID": f"kwok://{name}", "taints": [{"key": KEY, "value": "true", "effect": "NoSchedule"}]},
            "status": {"capacity": allocatable, "allocatable": allocatable}}


def pod(name: str, cpu: str, node_label: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"nodeSelector": {KEY: node_label}, "tolerations": [TOLERATION], "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}


@pytest.fixture
def api(fresh_cluster: Cluster) -> client.ApiClient:
    """A client of a control plane of its own (gone after this module), with the test's namespace: on the
    session's, another test's Node added or pod deleted meanwhile is an event that retries P too."""
    api = fresh_cluster.api()
    client.CoreV1Api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return api


def read(api: client.ApiClient, name: str) -> dict[str, Any]:
    return dict(request(api, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}").json())


def rejected(api: client.ApiClient, name: str) -> bool:
    """Has the scheduler tried the pod and found no node for it?"""
    conditions = (read(api, name).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)


def quiet(api: client.ApiClient) -> bool:
    """No pod is being deleted anywhere: an assigned pod's deletion would retry P and hide what is tested."""
    items = request(api, "GET", "/api/v1/pods").json()["items"]
    return not any((p.get("metadata") or {}).get("deletionTimestamp") for p in items)


def test_a_pod_placed_into_room_freed_without_an_event_is_bound_at_once(api: client.ApiClient) -> None:
    core, generated = CoreApi(api), client.CoreV1Api(api)
    generated.create_node(fake_node("room-retry-n", "2"))
    generated.create_node(fake_node("room-retry-m", "2"))
    wait_for(lambda: quiet(api), 120, interval=1.0, what="no pod being deleted in the cluster")

    # Q selects a node that does not exist, so the scheduler rejects it; then it is nominated to N as nodeplan
    # nominates a planned pod, and the scheduler keeps 1500m of N's 2 CPUs for it
    request(api, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod("q", "1500m", "nowhere"))
    wait_for(lambda: rejected(api, "q"), 30, what="q rejected")
    assert nominate(core, read(api, "q"), "room-retry-n", ["room-retry-n"])
    wait_for(lambda: (read(api, "q").get("status") or {}).get("nominatedNodeName") == "room-retry-n", 10,
             what="q nominated to N")

    # P (1 CPU) fits N only without Q's reservation: rejected
    request(api, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod("p", "1", "room-retry-n"))
    wait_for(lambda: rejected(api, "p"), 30, what="p rejected for Q's reservation")

    # Q is bound to M by another binder: N's room is free, and no event tells the scheduler so
    request(api, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods/q/binding",
            {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "q"},
             "target": {"apiVersion": "v1", "kind": "Node", "name": "room-retry-m"}})
    wait_for(lambda: (read(api, "q").get("spec") or {}).get("nodeName") == "room-retry-m", 10, what="q bound to M")

    # the plan puts P into N's room. A first nomination is no event to the scheduler either: P stays Pending
    assert nominate(core, read(api, "p"), "room-retry-n", [])
    time.sleep(QUIET_SECONDS)
    assert quiet(api), "a pod was deleted meanwhile: the premise cannot be checked"
    assert not (read(api, "p").get("spec") or {}).get("nodeName"), \
        "the scheduler retried p before its nomination moved: another event, or a kube-scheduler that raises one here"

    # nodeplan's placement moves its nomination (withdrawn, applied again): the scheduler retries P and binds it,
    # often before the second write, which the API server then refuses for a bound pod
    assert nominate_into_room(core, read(api, "p"), "room-retry-n", ["room-retry-n"]) in (1, 2)
    started = time.monotonic()
    wait_for(lambda: (read(api, "p").get("spec") or {}).get("nodeName") == "room-retry-n", RETRY_SECONDS,
             what="p bound to N after its nomination moved")
    print(f"p bound {time.monotonic() - started:.1f}s after the nomination moved")
