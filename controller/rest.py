"""The controller's calls to built-in APIs as plain HTTP requests through the ``ApiClient`` (its auth, TLS,
connection pool and ``controller.throttle``), without the generated API classes.

Loading ``kubernetes.client.CoreV1Api`` builds the ~400 pydantic models its signatures name: with the apps,
storage and resource.k8s.io classes the informers listed through, 0.8 CPU s at every start of ``nodeplan run``
(kubernetes-client 37; Karpenter's whole start-up takes 0.1 s). The controller never reads those models: lists and
watches are decoded by ``controller.decode`` and answers are read as JSON or not at all. ``CoreApi`` keeps the
generated class's method names and arguments for the calls the controller makes, so the test fakes written
against ``CoreV1Api`` stand in for it; every call answers with the HTTP response, its body read (``.json()``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3 import BaseHTTPResponse

#: a patch's type unless the caller names one, as the generated client chooses it: a list of operations is a JSON
#: patch, an object a strategic merge (built-in kinds)
JSON_PATCH, STRATEGIC_MERGE = "application/json-patch+json", "application/strategic-merge-patch+json"
#: keyword arguments of the generated client's methods and the query parameter each becomes
_QUERY = {"field_manager": "fieldManager", "label_selector": "labelSelector", "limit": "limit",
          "_continue": "continue", "watch": "watch", "resource_version": "resourceVersion",
          "allow_watch_bookmarks": "allowWatchBookmarks", "timeout_seconds": "timeoutSeconds"}


def request(api: ApiClient, method: str, path: str, body: Any = None, *, stream: bool = False,
            _content_type: str | None = None, _request_timeout: Any = None, _preload_content: bool = True,
            **query: Any) -> BaseHTTPResponse:
    """One request; an answer outside 2xx raises ``ApiException`` as the generated client does. The body is read
    and the connection given back unless ``stream`` (a watch, or a list page the caller decodes itself);
    ``_preload_content`` is accepted for the generated client's callers and changes nothing."""
    unknown = set(query) - set(_QUERY)
    if unknown:
        raise TypeError(f"{method} {path}: unexpected arguments {sorted(unknown)}")
    params = [(_QUERY[k], _text(v)) for k, v in query.items() if v is not None and v != ""]
    headers = {"Accept": "application/json"}
    if body is not None:
        patch = JSON_PATCH if isinstance(body, list) else STRATEGIC_MERGE
        headers["Content-Type"] = _content_type or (patch if method == "PATCH" else "application/json")
    # the body is sent as it is (plain JSON-ready dicts): the client's own serialization walks it for models
    method, url, headers, _, _ = api.param_serialize(method=method, resource_path=path, query_params=params,
                                                     header_params=headers, auth_settings=["BearerToken"])
    answer = api.call_api(method, url, header_params=headers, body=body, _request_timeout=_request_timeout)
    if not 200 <= answer.status <= 299:
        answer.read()  # type: ignore[no-untyped-call]
        raise ApiException.from_response(http_resp=answer, body=None, data=None)
    response: BaseHTTPResponse = answer.response
    if not stream:
        _ = response.data
        response.release_conn()
    return response


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def collection_path(api_version: str, resource: str) -> str:
    """Where every object of a resource is listed (all namespaces): ``/api/v1/pods``, ``/apis/apps/v1/daemonsets``."""
    return f"/api/{api_version}/{resource}" if "/" not in api_version else f"/apis/{api_version}/{resource}"


def lister(api: ApiClient, api_version: str, resource: str) -> Callable[..., BaseHTTPResponse]:
    """The list (and, with ``watch=True``, watch) call of one resource across namespaces, streamed: the caller
    reads the answer (``controller.cache.Informer``, ``nodeplan snapshot``)."""
    path = collection_path(api_version, resource)

    def list_all(**kwargs: Any) -> BaseHTTPResponse:
        return request(api, "GET", path, stream=True, **kwargs)
    return list_all


class CoreApi:
    """The core/v1 calls the controller makes, named and called as ``kubernetes.client.CoreV1Api``'s."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    def _call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> BaseHTTPResponse:
        return request(self._api, method, path, body, **kwargs)

    def read_node(self, name: str, **kwargs: Any) -> BaseHTTPResponse:
        return self._call("GET", f"/api/v1/nodes/{name}", **kwargs)

    def list_node(self, **kwargs: Any) -> BaseHTTPResponse:
        return self._call("GET", "/api/v1/nodes", **kwargs)

    def create_node(self, body: Mapping[str, Any], **kwargs: Any) -> BaseHTTPResponse:
        return self._call("POST", "/api/v1/nodes", body, **kwargs)

    def patch_node(self, name: str, body: Any, **kwargs: Any) -> BaseHTTPResponse:
        return self._call("PATCH", f"/api/v1/nodes/{name}", body, **kwargs)

    def delete_node(self, name: str, **kwargs: Any) -> BaseHTTPResponse:
        return self._call("DELETE", f"/api/v1/nodes/{name}", **kwargs)

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **kwargs: Any) -> BaseHTTPResponse:
        return self._call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", body, **kwargs)

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any, **kwargs: Any) -> BaseHTTPResponse:
        return self._call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", body, **kwargs)

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> BaseHTTPResponse:
        return self._call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", **kwargs)

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Mapping[str, Any],
                                       **kwargs: Any) -> BaseHTTPResponse:
        return self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body, **kwargs)

    def create_namespaced_event(self, namespace: str, body: Mapping[str, Any], **kwargs: Any) -> BaseHTTPResponse:
        return self._call("POST", f"/api/v1/namespaces/{namespace}/events", body, **kwargs)

    def patch_namespaced_event(self, name: str, namespace: str, body: Any, **kwargs: Any) -> BaseHTTPResponse:
        return self._call("PATCH", f"/api/v1/namespaces/{namespace}/events/{name}", body, **kwargs)


class ResourceApi:
    """The resource.k8s.io/v1 call the KWOK provider makes (a launched node's ResourceSlices)."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    def create_resource_slice(self, body: Mapping[str, Any], **kwargs: Any) -> BaseHTTPResponse:
        return request(self._api, "POST", "/apis/resource.k8s.io/v1/resourceslices", body, **kwargs)
