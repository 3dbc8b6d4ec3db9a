"""The controller's plain HTTP calls (``controller.rest``) against a local HTTP server: each sends the request the
generated ``CoreV1Api`` method of the same name sends (path, query, patch type), and answers as that client does
(an ``ApiException`` with the status outside 2xx; otherwise the response, its JSON readable)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from controller.kinds import BY_KIND
from controller.rest import CoreApi, ResourceApi, collection_path
from tests.unit.test_throttle import Answer, Server


@pytest.fixture
def api_server() -> Iterator[Server]:
    """The local API server stand-in of ``test_throttle``: scripted answers, every request recorded."""
    running = Server()
    yield running
    running.close()


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1", "finalizers": ["f"]}}


def api_of(api_server: Server) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = api_server.url
    return client.ApiClient(configuration)


def test_patch_types_follow_the_body_as_the_generated_client_chooses(api_server: Server) -> None:
    core = CoreApi(api_of(api_server))
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    core.patch_node("n1", [{"op": "remove", "path": "/spec/taints/0"}])
    core.patch_namespaced_pod_status("p", "shop", {"status": {"nominatedNodeName": "n1"}},
                                     field_manager="nodeplan-nomination", _content_type="application/apply-patch+yaml")
    sent = api_server.seen
    assert [(s.method, s.path, s.content_type) for s in sent] == [
        ("PATCH", "/api/v1/nodes/n1", "application/strategic-merge-patch+json"),
        ("PATCH", "/api/v1/nodes/n1", "application/json-patch+json"),
        ("PATCH", "/api/v1/namespaces/shop/pods/p/status?fieldManager=nodeplan-nomination",
         "application/apply-patch+yaml")]
    assert sent[1].body == [{"op": "remove", "path": "/spec/taints/0"}]


def test_answers_are_read_as_json_and_failures_raise_with_their_status(api_server: Server) -> None:
    api_server.default["/api/v1/nodes/n1"] = Answer(200, body=NODE)
    api_server.default["/api/v1/nodes/gone"] = Answer(404, body={"kind": "Status", "code": 404, "reason": "NotFound"})
    core = CoreApi(api_of(api_server))
    assert core.read_node("n1").json()["metadata"]["uid"] == "u1"
    with pytest.raises(client.ApiException) as raised:
        core.read_node("gone")
    assert raised.value.status == 404 and "NotFound" in str(raised.value.body)
    # the failed answer was read to its end: the connection serves the next request
    assert core.delete_node("n1").status == 200


def test_writes_go_to_the_paths_of_their_resources(api_server: Server) -> None:
    api = api_of(api_server)
    core = CoreApi(api)
    core.create_node(NODE)
    core.delete_namespaced_pod("p", "shop")
    core.create_namespaced_pod_eviction("p", "shop", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                      "metadata": {"name": "p", "namespace": "shop"}})
    core.create_namespaced_event("shop", {"metadata": {"generateName": "p."}, "reason": "Nominated"})
    core.patch_namespaced_event("p.1", "shop", {"count": 2})
    core.list_node(label_selector="karpenter.sh/nodepool")
    ResourceApi(api).create_resource_slice({"kind": "ResourceSlice"})
    assert [(s.method, s.path) for s in api_server.seen] == [
        ("POST", "/api/v1/nodes"), ("DELETE", "/api/v1/namespaces/shop/pods/p"),
        ("POST", "/api/v1/namespaces/shop/pods/p/eviction"), ("POST", "/api/v1/namespaces/shop/events"),
        ("PATCH", "/api/v1/namespaces/shop/events/p.1"), ("GET", "/api/v1/nodes?labelSelector=karpenter.sh/nodepool"),
        ("POST", "/apis/resource.k8s.io/v1/resourceslices")]
    assert api_server.seen[0].body == NODE


def test_every_read_kind_is_listed_and_watched_across_namespaces(api_server: Server) -> None:
    assert collection_path("v1", "pods") == "/api/v1/pods"
    assert collection_path("apps/v1", "daemonsets") == "/apis/apps/v1/daemonsets"
    api = api_of(api_server)
    response = BY_KIND["DaemonSet"].lister(api)(limit=500, _continue="tok", _request_timeout=60)
    assert response.json() == {"metadata": {}, "items": []}
    BY_KIND["Pod"].lister(api)(watch=True, resource_version="7", allow_watch_bookmarks=True, timeout_seconds=240)
    assert [s.path for s in api_server.seen] == [
        "/apis/apps/v1/daemonsets?limit=500&continue=tok",
        "/api/v1/pods?watch=true&resourceVersion=7&allowWatchBookmarks=true&timeoutSeconds=240"]


def test_an_argument_the_generated_client_does_not_take_is_refused(api_server: Server) -> None:
    with pytest.raises(TypeError, match="pretty"):
        CoreApi(api_of(api_server)).read_node("n1", pretty=True)


def test_starting_the_controller_loads_none_of_the_generated_core_models() -> None:
    """What ``controller.rest`` is for: building the controller (its informers, provisioner, lifecycle, drains,
    events, KWOK provider) does not import ``CoreV1Api`` and the ~400 models it names (0.8 CPU s a start)."""
    code = ("import sys; from kubernetes import client; from controller.run import Controller, ControllerOptions; "
            "Controller(client.ApiClient(), ControllerOptions()); "
            "print(sorted(m for m in sys.modules if m.startswith('kubernetes.client.api.')), "
            "sum(m.startswith('kubernetes.client.models.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    apis, models = out.rsplit(" ", 1)
    assert "core_v1_api" not in apis and "resource_v1_api" not in apis and "apps_v1_api" not in apis, apis
    assert int(models) < 50, out


def test_requests_do_not_read_the_proxy_environment_again(tmp_path: Path, api_server: Server,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A token kubeconfig's refresh hook sets the host before every request; the proxy the client resolved while
    loading stands (kubernetes-client would read every environment variable again each time)."""
    import kubernetes.client.configuration as configuration

    from controller.run import api_client

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": api_server.url}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "users": [{"name": "t", "user": {"token": "secret"}}]}))
    api = api_client(str(kubeconfig))
    assert api.configuration.refresh_api_key_hook is not None  # the hook this is about
    reads: list[int] = []
    real = configuration.getproxies
    monkeypatch.setattr(configuration, "getproxies", lambda: reads.append(1) or real())
    CoreApi(api).read_node("n1")
    assert reads == [] and len(api_server.requests("/api/v1/nodes/n1")) == 1
