"""``make bench-scale``: the controller's cluster state at scale (issue 13, item 5).

**Offline** (``--offline``, default 50,000 bound pods of 500 Deployments on 5,000 nodes): pods and nodes as a
kube-apiserver 1.36 lists them (``api_pod``, ``api_node``: managedFields of every writer, the defaults the API
server fills in, the status KWOK reports; ~5 KB of JSON a pod) are served as JSON list pages to the cache's own
``Informer._list`` (500 a page) and watch lines to its ``_apply``, the path a live watch takes. Measured:
decoding time, the cache's memory per pod (tracemalloc: the slim objects; then the parsed models a batch adds),
the resident memory they add as an operator sees it (``VmRSS`` before and after, in a fresh process, at 20,000
pods and at ``--pods``: the list on an informer thread, the first batch on another; and the peak during the
list), and the per-batch overhead, everything a batch does but the solve — ``Provisioner.pending`` (the batch window's
poll), ``snapshot_objects`` and ``ClusterCache.snapshot`` — on the first batch (every pod parsed) and on a
steady one after ``--changed`` bound pods changed and ``--pending`` new pods arrived by watch; beside it, what
the same snapshot costs when every object is parsed again (``parse_objects``, what each batch did before).

**Live** (``--live``, default 2,000 KWOK nodes, 20,000 running pods, a 1,000-pod scale-out): a control plane of
its own (``hack/control-plane``), Nodes and pods created through the API (pods bound by ``spec.nodeName``, KWOK
runs them), then the controller in this process (``controller.run.Controller``) with the KWOK provider: the
resident memory the synced cache adds per pod, and each batch's overhead: its time before the solve (cache →
snapshot) and after it (NodeClaim bodies and their fallback types), the first batch (every pod parsed) apart.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_CREATED = "2026-12-01T10:00:00Z"
ROOT = Path(__file__).resolve().parents[1]


def _fields(manager: str, operation: str, subresource: str = "", body: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    entry: dict[str, Any] = {"manager": manager, "operation": operation, "apiVersion": "v1", "time": _CREATED,
                             "fieldsType": "FieldsV1", "fieldsV1": body or {}}
    if subresource:
        entry["subresource"] = subresource
    return entry


def api_pod(name: str, namespace: str, replicaset: str, *, cpu: str, memory: str, node: str = "",
            rv: int = 1000, app: str = "app") -> dict[str, Any]:
    """A Deployment's pod, bound to ``node`` and Running (or pending and Unschedulable without one)."""
    template_hash = replicaset.rsplit("-", 1)[-1]
    container = {
        "name": app, "image": f"registry.example.com/team/{app}:v1.42.7",
        "command": ["/bin/server"], "args": ["--port=8080", "--log-level=info", "--metrics"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                     "fieldPath": "metadata.namespace"}}},
                {"name": "GOMAXPROCS", "value": "2"}],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/app"},
                         {"name": "kube-api-access-x7k2p", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1,
                          "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1,
                           "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    spec: dict[str, Any] = {
        "volumes": [{"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
                    {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
        "containers": [container], "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "schedulerName": "default-scheduler",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300},
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}],
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
    }
    kcm = _fields("kube-controller-manager", "Update", body={
        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                       "f:ownerReferences": {".": {}, f"k:{{\"uid\":\"uid-{replicaset}\"}}": {}}},
        "f:spec": {"f:containers": {f"k:{{\"name\":\"{app}\"}}": {
            ".": {}, "f:args": {}, "f:command": {}, "f:env": {}, "f:image": {}, "f:imagePullPolicy": {},
            "f:livenessProbe": {}, "f:name": {}, "f:ports": {}, "f:readinessProbe": {}, "f:resources": {},
            "f:securityContext": {}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
            "f:volumeMounts": {}}},
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {},
            "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}, "f:volumes": {}}})
    meta: dict[str, Any] = {
        "name": name, "generateName": f"{replicaset}-", "namespace": namespace, "uid": f"uid-{namespace}-{name}",
        "resourceVersion": str(rv), "creationTimestamp": _CREATED,
        "labels": {"app": app, "pod-template-hash": template_hash},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replicaset,
                             "uid": f"uid-{replicaset}", "controller": True, "blockOwnerDeletion": True}],
        "managedFields": [kcm],
    }
    if node:
        spec["nodeName"] = node
        meta["managedFields"].append(_fields("kwok", "Update", "status", {"f:status": {
            "f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {},
            "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}))
        conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": _CREATED}
                      for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                "PodScheduled")]
        status: dict[str, Any] = {
            "phase": "Running", "conditions": conditions, "hostIP": "10.0.3.17", "hostIPs": [{"ip": "10.0.3.17"}],
            "podIP": "10.244.3.41", "podIPs": [{"ip": "10.244.3.41"}], "startTime": _CREATED, "qosClass": "Burstable",
            "containerStatuses": [{"name": app, "state": {"running": {"startedAt": _CREATED}}, "lastState": {},
                                   "ready": True, "restartCount": 0, "image": container["image"],
                                   "imageID": "", "started": True}],
        }
    else:
        status = {"phase": "Pending", "qosClass": "Burstable", "conditions": [
            {"type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": _CREATED,
             "reason": "Unschedulable", "message": "0/12 nodes are available: 12 Insufficient cpu. preemption: "
                                                  "0/12 nodes are available: 12 No preemption victims found."}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def api_node(name: str, *, instance_type: str = "c-4x-amd64-linux", zone: str = "test-zone-a", cpu: str = "4",
             memory: str = "16Gi", nodepool: str = "default", rv: int = 500) -> dict[str, Any]:
    """A KWOK Node of a Karpenter NodePool, as the API server lists it."""
    labels = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
              "node.kubernetes.io/instance-type": instance_type, "topology.kubernetes.io/zone": zone,
              "karpenter.sh/capacity-type": "on-demand", "karpenter.sh/nodepool": nodepool,
              "karpenter.sh/initialized": "true", "karpenter.sh/registered": "true", "type": "kwok"}
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "20Gi"}
    conditions = [{"type": t, "status": s, "lastHeartbeatTime": _CREATED, "lastTransitionTime": _CREATED,
                   "reason": r, "message": m} for t, s, r, m in (
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"))]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}", "resourceVersion": str(rv),
                     "creationTimestamp": _CREATED, "labels": labels,
                     "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                     "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": name,
                                          "uid": f"uid-claim-{name}", "blockOwnerDeletion": True}],
                     "managedFields": [_fields("kwok", "Update", "status", {"f:status": {
                         "f:allocatable": {}, "f:capacity": {}, "f:conditions": {}, "f:daemonEndpoints": {},
                         "f:nodeInfo": {}, "f:phase": {}}}),
                         _fields("nodeplan", "Update", body={"f:metadata": {"f:labels": {}}, "f:spec": {}})]},
        "spec": {"providerID": f"kwok://{name}"},
        "status": {"capacity": resources, "allocatable": resources, "conditions": conditions,
                   "addresses": [{"type": "InternalIP", "address": "10.0.3.17"}, {"type": "Hostname",
                                                                                   "address": name}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                                "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "fake",
                                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
                   "phase": "Running"},
    }


# --- offline: a synthetic cluster through the cache's ingest path ----------------------------------------------
CPUS = ("100m", "250m", "500m", "1", "1500m")
MEMORIES = ("128Mi", "256Mi", "512Mi", "1Gi", "2Gi")
PAGE = 500


def _stamp(i: int) -> str:
    return f"2026-12-01T{8 + i // 3600 % 12:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"


def synthetic_pods(count: int, nodes: int, deployments: int, first_rv: int = 10_000) -> Iterator[dict[str, Any]]:
    """``count`` running pods of ``deployments`` Deployments spread over ``nodes`` nodes, each its own
    creation and start time."""
    for i in range(count):
        d = i % deployments
        pod = api_pod(f"app-{d:04d}-{i:06d}", f"team-{d % 20:02d}", f"app-{d:04d}-6d5f{d:04x}",
                      cpu=CPUS[d % len(CPUS)], memory=MEMORIES[d // len(CPUS) % len(MEMORIES)],
                      node=f"node-{i % nodes:05d}", rv=first_rv + i, app=f"app-{d:04d}")
        pod["metadata"]["creationTimestamp"] = pod["status"]["startTime"] = _stamp(i)
        yield pod


def synthetic_nodes(count: int) -> Iterator[dict[str, Any]]:
    for i in range(count):
        yield api_node(f"node-{i:05d}", instance_type="c-8x-amd64-linux", cpu="8", memory="32Gi",
                       zone=f"test-zone-{'abcd'[i % 4]}", rv=1_000 + i)


def list_pages(kind: str, objects: Iterator[dict[str, Any]], rv: str = "99999") -> list[bytes]:
    """The JSON pages a paginated list returns (``metadata.continue`` on all but the last)."""
    pages: list[bytes] = []
    batch: list[dict[str, Any]] = []

    def flush(last: bool) -> None:
        meta: dict[str, Any] = {"resourceVersion": rv}
        if not last:
            meta["continue"] = f"page-{len(pages) + 1}"
        pages.append(json.dumps({"kind": f"{kind}List", "apiVersion": "v1", "metadata": meta,
                                 "items": batch}).encode())
        batch.clear()

    for obj in objects:
        batch.append(obj)
        if len(batch) == PAGE:
            flush(False)
    flush(True)
    return pages


class PagedLister:
    """A list call answering ``limit``/``_continue`` from prepared pages, as the API server's pager does."""

    class Response:
        def __init__(self, data: bytes) -> None:
            self.data = data

    def __init__(self, pages: list[bytes]) -> None:
        self.pages = pages
        self.calls = 0

    def __call__(self, **kwargs: Any) -> Any:
        token = kwargs.get("_continue") or ""
        index = int(token.split("-")[1]) if token else 0
        self.calls += 1
        # a body of its own, as urllib3 reads each response into new bytes (freed after decoding: the allocator
        # sees the same megabytes come and go as on a live list)
        return self.Response(bytes(memoryview(self.pages[index])))


def _tracemalloc_delta(action: Callable[[], Any]) -> tuple[Any, int, float]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - started
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return result, after - before, seconds


class OfflineCluster:
    """The synthetic cluster as list pages (``pods`` bound pods of ``deployments`` Deployments on ``nodes``
    nodes, one NodePool), served to as many fresh caches as the measurements need."""

    KINDS = ("Pod", "Node", "NodePool", "NodeClaim", "DaemonSet")

    def __init__(self, pods: int, nodes: int, deployments: int) -> None:
        from bench.workloads import linux_pool

        self.pods = pods
        self.pages = {"Pod": list_pages("Pod", synthetic_pods(pods, nodes, deployments)),
                      "Node": list_pages("Node", synthetic_nodes(nodes)),
                      "NodePool": list_pages("NodePool", iter([linux_pool()]))}

    def cache(self) -> Any:
        """A ClusterCache with every kind but Pods listed (``informers["Pod"]._list()`` lists those)."""
        from controller.cache import ClusterCache, Resource

        empty = list_pages("X", iter([]))
        made = ClusterCache({k: Resource(k, "karpenter.sh/v1" if k in ("NodePool", "NodeClaim") else "v1",
                                         PagedLister(self.pages.get(k, empty))) for k in self.KINDS})
        for kind in self.KINDS:
            if kind != "Pod":
                made.informers[kind]._list()
        return made

    def provisioner(self, cache: Any) -> Any:
        from kubernetes import client

        from controller.provisioner import Provisioner, ProvisionerOptions
        from providers.kwok import kwok_catalog

        return Provisioner(client.ApiClient(), cache, kwok_catalog(), ProvisionerOptions())

    def memory_per_pod(self) -> tuple[float, float]:
        """Bytes a pod costs under tracemalloc: the slim objects the list stores, then the models the first
        batch parses and the cache keeps (together, what the controller holds per watched pod)."""
        measured = self.cache()
        _, listed, _ = _tracemalloc_delta(measured.informers["Pod"]._list)
        provisioner = self.provisioner(measured)
        _, parsed, _ = _tracemalloc_delta(lambda: batch_timed(measured, provisioner))
        return listed / self.pods, parsed / self.pods


    def resident_per_pod(self) -> dict[str, float]:
        """Resident set size the pods add, as an operator sees it (``VmRSS``, after ``gc.collect()``): the Pod
        list on a thread of its own (as ``Informer`` runs it: glibc gives each thread its own malloc arena), then
        the first batch on another (the provisioner's), every other kind listed before the first reading. Also
        the peak during the list (``VmHWM``, reset first), which holds the pages being decoded."""
        from controller.cache import release_freed_memory

        measured = self.cache()
        provisioner = self.provisioner(measured)
        gc.collect()
        release_freed_memory()  # what making the pages freed goes back to the system: the baseline is what is live
        before = _status_bytes("VmRSS")
        peak_reset = _reset_peak()
        _on_thread("informer-Pod", measured.informers["Pod"]._list)
        peak = _status_bytes("VmHWM") if peak_reset else 0
        gc.collect()
        listed = _status_bytes("VmRSS")
        _on_thread("provisioner", lambda: batch_timed(measured, provisioner))
        gc.collect()
        after = _status_bytes("VmRSS")
        figures = {"rss list bytes/pod": (listed - before) / self.pods,
                   "rss list + models bytes/pod": (after - before) / self.pods}
        if peak_reset:
            figures["rss peak during list bytes/pod"] = (peak - before) / self.pods
        return figures


def resident(pods: int, nodes: int, deployments: int) -> dict[str, float]:
    """``OfflineCluster.resident_per_pod`` in a fresh process (memory freed by earlier measurements here would
    be reused and hide growth)."""
    done = subprocess.run([sys.executable, "-m", "bench.controller_scale", "--resident", str(pods), str(nodes),
                           str(deployments)], cwd=ROOT, check=True, capture_output=True, text=True)
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return {f"{key} ({pods} pods)": value for key, value in figures.items()}


def _status_bytes(field: str) -> int:
    """A ``/proc/self/status`` memory figure (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux: ``clear_refs`` 5); False where that is not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _on_thread(name: str, action: Callable[[], Any]) -> None:
    thread = threading.Thread(target=action, name=name)
    thread.start()
    thread.join()


def batch_timed(cache: Any, provisioner: Any) -> tuple[int, float, float]:
    """A batch's work but the solve: its pending pods, wall and CPU seconds (CPU time is what a loaded machine
    leaves comparable)."""
    started, cpu = time.perf_counter(), time.process_time()
    batch = provisioner.pending()
    snapshot = cache.snapshot(provisioner.snapshot_objects(batch))
    return len(snapshot.pending_pods()), time.perf_counter() - started, time.process_time() - cpu


def offline(pods: int, nodes: int, deployments: int, pending: int, changed: int) -> dict[str, float]:
    from model.snapshot import parse_objects

    made = time.perf_counter()
    cluster = OfflineCluster(pods, nodes, deployments)
    pod_pages = cluster.pages["Pod"]
    json_bytes = sum(len(p) for p in pod_pages)
    print(f"generated {pods} pods ({json_bytes / pods:.0f} bytes of JSON each) and {nodes} nodes in "
          f"{time.perf_counter() - made:.1f}s", file=sys.stderr)
    pod_bytes, parsed_bytes = (per_pod * pods for per_pod in cluster.memory_per_pod())
    gc.collect()
    rss = {**resident(20_000, 2_000, deployments), **resident(pods, nodes, deployments)} if pods > 20_000 else \
        resident(pods, nodes, deployments)
    # time, without tracemalloc, on a cache of its own
    cache = cluster.cache()
    informer = cache.informers["Pod"]
    started, cpu = time.perf_counter(), time.process_time()
    informer._list()
    decode_s, decode_cpu = time.perf_counter() - started, time.process_time() - cpu
    provisioner = cluster.provisioner(cache)
    _, first_s, first_cpu = batch_timed(cache, provisioner)
    # a steady batch: bound pods changed (a label) and new pending pods arrived, by watch events
    decoder = informer._decoder
    lines = []
    for pod in synthetic_pods(changed, nodes, deployments, first_rv=900_000):
        pod["metadata"]["labels"]["revision"] = "2"
        lines.append(json.dumps({"type": "MODIFIED", "object": pod}).encode())
    for i in range(pending):
        d = i % deployments
        pod = api_pod(f"new-{i:05d}", f"team-{d % 20:02d}", f"new-{d:04d}-7c7c", cpu="500m", memory="1Gi",
                      rv=950_000 + i, app=f"new-{d:04d}")
        lines.append(json.dumps({"type": "ADDED", "object": pod}).encode())
    started, cpu = time.perf_counter(), time.process_time()
    for line in lines:
        informer._apply(*decoder.decode_event(line))
    events_s, events_cpu = time.perf_counter() - started, time.process_time() - cpu
    steady_pending, steady_s, steady_cpu = batch_timed(cache, provisioner)
    unchanged = [batch_timed(cache, provisioner) for _ in range(5)]
    unchanged_s, unchanged_cpu = sorted(u[1] for u in unchanged), sorted(u[2] for u in unchanged)
    # what a batch cost before: every object parsed again
    objects = provisioner.snapshot_objects(provisioner.pending())
    started, cpu = time.perf_counter(), time.process_time()
    parse_objects(objects, source="cluster")
    reparse_s, reparse_cpu = time.perf_counter() - started, time.process_time() - cpu
    old_decode = time.perf_counter()
    for data in pod_pages:
        json.loads(data)
    old_decode = time.perf_counter() - old_decode
    return {
        "pods": pods, "nodes": nodes, "JSON bytes/pod": json_bytes / pods, "list pages": informer.pages,
        "list + slim decode s": decode_s, "list + slim decode cpu s": decode_cpu,
        "json.loads of the pages s": old_decode,
        "cache bytes/pod": pod_bytes / pods, "parsed models bytes/pod": parsed_bytes / pods,
        "memory bytes/pod (target 2048)": (pod_bytes + parsed_bytes) / pods,
        **rss,
        "first batch s (all parsed)": first_s, "first batch cpu s": first_cpu,
        "watch events": len(lines), "watch events s": events_s, "watch events cpu s": events_cpu,
        "steady batch s": steady_s, "steady batch cpu s": steady_cpu, "steady batch pending pods": steady_pending,
        "unchanged batch s (median of 5)": unchanged_s[2], "unchanged batch s (min)": unchanged_s[0],
        "unchanged batch cpu s (median of 5)": unchanged_cpu[2], "unchanged batch cpu s (min)": unchanged_cpu[0],
        "every object parsed again s": reparse_s, "every object parsed again cpu s": reparse_cpu,
    }


# --- offline: /metrics scrapes, quiet and under load ------------------------------------------------------------
class _Scraper:
    """``/metrics`` served as the controller serves it (``controller.health.Servers`` on its own thread, the
    controller's ``Metrics.render``) and scraped over HTTP from another process, as Prometheus scrapes (text
    format, gzip accepted): the wall time that process waits, and, in this one, the wall and CPU time of the
    serving thread's ``render`` (``time.thread_time``)."""

    def __init__(self, metrics: Any) -> None:
        from controller.health import Endpoints, Servers

        self.metrics = metrics
        self.cpu: list[float] = []
        self.render: list[float] = []

        def render(accept: str | None, encoding: str | None, names: Any) -> tuple[bytes, list[tuple[str, str]]]:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return metrics.render(accept, encoding, names)  # type: ignore[no-any-return]
            finally:
                self.cpu.append(time.thread_time() - cpu)
                self.render.append(time.perf_counter() - started)

        #: CPU seconds of each publication of the cluster-state families (its own thread, off the scrape)
        self.publish_cpu: list[float] = []
        state = metrics.state
        publish = state._publish

        def timed_publish(*args: Any, **kwargs: Any) -> None:
            cpu = time.thread_time()
            try:
                publish(*args, **kwargs)
            finally:
                self.publish_cpu.append(time.thread_time() - cpu)

        state._publish = timed_publish
        self.servers = Servers(Endpoints(lambda: (True, ""), lambda: (True, ""), render), metrics_port=0,
                               health_port=None, bind="127.0.0.1")
        self.servers.start()
        url = f"http://127.0.0.1:{self.servers.ports['/metrics']}/metrics"
        self.client = subprocess.Popen([sys.executable, "-m", "bench.controller_scale", "--scrape-client", url],
                                       cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def scrape(self) -> tuple[float, int, int]:
        """(seconds the scraping process waited, gzip bytes, ``karpenter_pods_state`` series in the body)."""
        assert self.client.stdin is not None and self.client.stdout is not None
        self.client.stdin.write("scrape\n")
        self.client.stdin.flush()
        wall, size, pods = self.client.stdout.readline().split()
        return float(wall), int(size), int(pods)

    def close(self) -> None:
        if self.client.stdin is not None:
            self.client.stdin.close()
        self.client.wait(10)
        self.servers.stop()


def scrape_client(url: str) -> None:
    """The scraping process: one scrape per line read, answered with its wall seconds, gzip bytes and
    ``karpenter_pods_state`` series (decompressed after the clock stopped)."""
    import gzip
    import urllib.request

    for _ in sys.stdin:
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip", "Accept": "text/plain"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as answer:
            body: bytes = answer.read()
        wall = time.perf_counter() - started
        pods = gzip.decompress(body).count(b"\nkarpenter_pods_state{")
        print(f"{wall:.6f} {len(body)} {pods}", flush=True)


class _Churn:
    """Watch events between scrapes, shaped like a scale-out: ``arrive`` new pending pods each round, the
    previous round's arrivals bound and Running, and ``touch`` old pods spread over the cluster modified."""

    def __init__(self, informer: Any, pods: int, nodes: int, deployments: int, arrive: int = 100,
                 touch: int = 100) -> None:
        self.informer, self.pods, self.nodes, self.deployments = informer, pods, nodes, deployments
        self.arrive, self.touch = arrive, touch
        self.round = 0
        self.rv = 2_000_000

    def _send(self, kind: str, pod: dict[str, Any]) -> None:
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        self.informer._apply(*self.informer._decoder.decode_event(
            json.dumps({"type": kind, "object": pod}).encode()))

    def step(self) -> None:
        r = self.round
        for i in range(self.arrive):
            name = f"out-{r:03d}-{i:04d}"
            self._send("ADDED", api_pod(name, "scale", "out-6d5f", cpu="500m", memory="1Gi", app="out"))
            if r:
                self._send("MODIFIED", api_pod(f"out-{r - 1:03d}-{i:04d}", "scale", "out-6d5f", cpu="500m",
                                               memory="1Gi", node=f"node-{(r * 37 + i) % self.nodes:05d}",
                                               app="out"))
        for j in range(self.touch):
            i = (r * 7_919 + j * (self.pods // max(1, self.touch))) % self.pods
            d = i % self.deployments
            pod = api_pod(f"app-{d:04d}-{i:06d}", f"team-{d % 20:02d}", f"app-{d:04d}-6d5f{d:04x}",
                          cpu=CPUS[d % len(CPUS)], memory=MEMORIES[d // len(CPUS) % len(MEMORIES)],
                          node=f"node-{i % self.nodes:05d}", app=f"app-{d:04d}")
            pod["metadata"]["creationTimestamp"] = pod["status"]["startTime"] = _stamp(i)
            pod["metadata"]["labels"]["revision"] = str(r)
            self._send("MODIFIED", pod)
        self.round += 1


def _solve_loop(stop: threading.Event, solved: list[float]) -> None:
    """CPU-bound work in the controller's process: the solve of a 1,000-pod batch (``bench.decisions``'
    Deployments, KWOK catalog, 2 % gap), again and again until ``stop``."""
    from bench.controller_perf import NODEPOOL
    from bench.decisions import deployment_pods
    from model.snapshot import parse_objects
    from providers.kwok import kwok_catalog
    from solver.provision import SolveOptions, solve

    catalog = kwok_catalog()
    while not stop.is_set():
        started = time.monotonic()
        snapshot = parse_objects([NODEPOOL, *deployment_pods(1_000, 1)], source="bench").with_catalog(catalog)
        solve(snapshot, SolveOptions(time_limit=10.0, gap=0.02, started_at=started))
        solved.append(time.monotonic() - started)


def scrapes(pods: int, nodes: int, deployments: int, count: int) -> dict[str, float]:
    """``count`` scrapes over HTTP in each condition: quiet, a 1,000-pod solve looping on another thread of this
    process, and a busy loop on each core in other processes; each with nothing changed between scrapes and with
    a scale-out's watch events (``_Churn``) applied between them. Median and p95 of wall and of serving CPU."""
    from bench.controller_perf import percentile
    from controller.metrics import Metrics

    cluster = OfflineCluster(pods, nodes, deployments)
    cache = cluster.cache()
    cache.informers["Pod"]._list()
    metrics = Metrics(cache)
    scraper = _Scraper(metrics)
    started = time.perf_counter()
    first, size, _ = scraper.scrape()
    out: dict[str, float] = {"pods": pods, "nodes": nodes, "first scrape s": first,
                             "first scrape cpu s": scraper.cpu[-1], "gzip bytes": size}
    out["series"] = sum(1 for line in metrics.exposition().splitlines() if line and not line.startswith(b"#"))
    churn = _Churn(cache.informers["Pod"], pods, nodes, deployments)
    cores = os.cpu_count() or 2
    for condition in ("quiet", "solve in this process", f"busy loop on {cores} cores"):
        stop = threading.Event()
        solved: list[float] = []
        busy: list[subprocess.Popen[bytes]] = []
        if condition.startswith("solve"):
            threading.Thread(target=_solve_loop, args=(stop, solved), daemon=True, name="solve").start()
            time.sleep(2.0)
        elif condition.startswith("busy"):
            # sessions of their own: with autogroup scheduling a child in this session would share this
            # process's CPU share, where another container's processes compete as their own group
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                    for _ in range(cores)]
            time.sleep(1.0)
        try:
            for changes in ("unchanged", "scale-out churn"):
                walls: list[float] = []
                del scraper.cpu[:], scraper.render[:], scraper.publish_cpu[:]
                stale = 0
                for _ in range(count):
                    before = len(cache.items("Pod"))
                    if changes != "unchanged":
                        churn.step()
                    wall, _, seen = scraper.scrape()
                    walls.append(wall)
                    # a scrape shows the cluster as it is, or (when its refresh took longer than the scrape
                    # waits) as the previous scrape saw it
                    if seen != len(cache.items("Pod")):
                        if seen != before:
                            raise AssertionError(f"a scrape showed {seen} of {len(cache.items('Pod'))} pods")
                        stale += 1
                    time.sleep(1.5)  # Prometheus scrapes every 15-60 s; more than the scrape's freshness window
                label = f"{condition}, {changes}"
                out[f"{label}: previous state served"] = stale
                out[f"{label}: scrape p50 s"] = statistics.median(walls)
                out[f"{label}: scrape p95 s"] = percentile(walls, 0.95)
                out[f"{label}: render p50 s"] = statistics.median(scraper.render)
                out[f"{label}: render cpu p50 s"] = statistics.median(scraper.cpu)
                out[f"{label}: render cpu p95 s"] = percentile(scraper.cpu, 0.95)
                if scraper.publish_cpu:
                    out[f"{label}: publications"] = len(scraper.publish_cpu)
                    out[f"{label}: publication cpu p50 s"] = statistics.median(scraper.publish_cpu)
                out[f"{label}: load"] = os.getloadavg()[0]
        finally:
            stop.set()
            for process in busy:
                process.terminate()
                process.wait(10)
        if solved:
            out[f"{condition}: solves done"] = len(solved)
    out["bench s"] = time.perf_counter() - started
    scraper.close()
    return out


# --- live: the real control plane with KWOK nodes --------------------------------------------------------------
NAMESPACE = "scale"


def static_node(name: str) -> dict[str, Any]:
    """A KWOK node outside every NodePool (existing capacity the pods are bound to)."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok",
                                    "topology.kubernetes.io/zone": f"test-zone-{'abcd'[hash(name) % 4]}"}},
            "spec": {}, "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                                   "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}


def running_pod(i: int, nodes: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"run-{i:06d}", "namespace": NAMESPACE, "labels": {"app": f"run-{i % 200:03d}"}},
            "spec": {"nodeName": f"static-{i % nodes:05d}",
                     "containers": [{"name": "app", "image": "registry.example.com/app:1",
                                     "resources": {"requests": {"cpu": CPUS[i % 5], "memory": "256Mi"}}}]}}


def populate(kubeconfig: str, nodes: int, pods: int, workers: int = 8) -> None:
    """Create the nodes and the running pods (a separate process, so the controller's memory is its own)."""
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client

    from controller.run import api_client

    api = api_client(kubeconfig)
    core: Any = client.CoreV1Api(api)  # plain dicts as bodies
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})

    def done(response: Any) -> None:
        response.read()
        response.release_conn()  # unread raw responses would hold their connections (and file descriptors)

    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda i: done(core.create_node(static_node(f"static-{i:05d}"), _preload_content=False)),
                      range(nodes)))
        list(pool.map(lambda i: done(core.create_namespaced_pod(NAMESPACE, running_pod(i, nodes),
                                                                _preload_content=False)), range(pods)))
    print(f"created {nodes} nodes and {pods} pods in {time.monotonic() - started:.0f}s", file=sys.stderr)


def scale_out(replicas: int) -> dict[str, Any]:
    """A Deployment only a NodePool's nodes can take (its node selector names the pool)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "scale-out", "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "scale-out"}},
                     "template": {"metadata": {"labels": {"app": "scale-out"}}, "spec": {
                         "nodeSelector": {"karpenter.sh/nodepool": "default"},
                         "containers": [{"name": "app", "image": "registry.example.com/app:1",
                                         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}}


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def _timed_solves(record: list[tuple[float, float]]) -> Iterator[None]:
    """Record when every solve the provisioner makes (``controller.provisioner.solve``) starts and ends, to take
    it out of the batch."""
    import controller.provisioner as provisioner

    inner = getattr(provisioner, "solve")  # noqa: B009 - replaced below

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            record.append((started, time.perf_counter()))

    setattr(provisioner, "solve", timed)  # noqa: B010 - the module attribute the provisioner calls
    try:
        yield
    finally:
        setattr(provisioner, "solve", inner)  # noqa: B010


def _rate_limiter(registry: Any) -> tuple[int, int, float, float]:
    """From the controller's ``nodeplan_client_rate_limiter_duration_seconds``: requests, requests that waited
    longer than the first bucket (5 ms) for a token, seconds waited in all, and the bucket bound the longest
    wait stayed under."""
    count = slow = 0
    total = longest = 0.0
    for family in registry.collect():
        if family.name != "nodeplan_client_rate_limiter_duration_seconds":
            continue
        by_verb: dict[str, list[tuple[float, float]]] = {}
        for sample in family.samples:
            if sample.name.endswith("_sum"):
                total += sample.value
            elif sample.name.endswith("_bucket"):
                by_verb.setdefault(sample.labels["verb"], []).append((float(sample.labels["le"]), sample.value))
        for buckets in by_verb.values():
            buckets.sort()
            requests = int(buckets[-1][1])  # the +Inf bucket
            count += requests
            slow += requests - int(buckets[0][1])
            longest = max(longest, min(le for le, n in buckets if n >= requests))
    return count, slow, total, longest


class _LoadSampler(threading.Thread):
    """The 1-minute load average every few seconds while the run lasts (2 cores shared: load says how much of
    a figure is waiting for a core)."""

    def __init__(self, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.every, self.stop = every, threading.Event()
        self.samples: list[float] = []

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.samples.append(os.getloadavg()[0])


class _WaitLog(logging.Handler):
    """Counts the throttle's "waited ... for a token" log lines (waits of a second or more)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "for a token" in record.getMessage():
            self.lines += 1


class _LiveScrapes(threading.Thread):
    """Scrapes the controller's ``/metrics`` every ``every`` seconds from another process while the run lasts,
    as Prometheus does (``scrape_client``), keeping each scrape's wall time."""

    def __init__(self, url: str, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.url, self.every, self.stop = url, every, threading.Event()
        self.walls: list[float] = []

    def run(self) -> None:
        client = subprocess.Popen([sys.executable, "-m", "bench.controller_scale", "--scrape-client", self.url],
                                  cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert client.stdin is not None and client.stdout is not None
        try:
            while not self.stop.wait(self.every):
                client.stdin.write("scrape\n")
                client.stdin.flush()
                self.walls.append(float(client.stdout.readline().split()[0]))
        finally:
            client.stdin.close()
            client.wait(30)


def live(nodes: int, pods: int, replicas: int, timeout: float) -> dict[str, float]:
    from kubernetes import client

    from bench.controller_perf import NODECLASS, NODEPOOL, _apply, _fresh_cluster, _install_crds, percentile
    from controller.provisioner import BatchRecord, Provisioner
    from controller.run import Controller, ControllerOptions, api_client

    build = subprocess.run([str(ROOT / "hack" / "control-plane" / "build.sh")], capture_output=True, text=True,
                           check=True)
    bin_dir = build.stdout.strip().splitlines()[-1]
    out: dict[str, float] = {"nodes": nodes, "pods": pods, "scale-out": replicas}
    load = _LoadSampler()
    load.start()
    waits = _WaitLog()
    logging.getLogger("controller.throttle").addHandler(waits)
    logging.getLogger("controller.throttle").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp, _fresh_cluster(tmp, bin_dir) as (api, kubeconfig):
        _install_crds(api, sorted((ROOT / "deploy" / "crds").glob("*.yaml")))
        _apply(api, NODECLASS)
        _apply(api, NODEPOOL)
        made = time.monotonic()
        subprocess.run([sys.executable, "-m", "bench.controller_scale", "--populate", kubeconfig, str(nodes),
                        str(pods)], cwd=ROOT, check=True)
        out["populate s"] = time.monotonic() - made
        # the bench's own polls on a client of their own: the controller's token bucket is the controller's
        core = client.CoreV1Api(api_client(kubeconfig))
        gc.collect()
        rss_before = _rss_mib()
        solves: list[tuple[float, float]] = []
        #: per batch: seconds before the solve (snapshot: cache → objects → models), after it (NodeClaim bodies)
        batches: list[tuple[float, float]] = []
        inner_plan = Provisioner.plan

        def plan(self: Provisioner, *args: Any, **kwargs: Any) -> tuple[BatchRecord, list[dict[str, Any]]]:
            started = time.perf_counter()
            done = len(solves)
            result = inner_plan(self, *args, **kwargs)
            ended = time.perf_counter()
            if len(solves) > done:
                batches.append((solves[done][0] - started, ended - solves[-1][1]))
            return result

        Provisioner.plan = plan  # type: ignore[method-assign]
        stop = threading.Event()
        options = ControllerOptions(batch_idle=1.0, batch_max=10.0, metrics_port=0, bind_address="127.0.0.1")
        options.disruption.enabled = False
        with _timed_solves(solves):
            controller = Controller(api, options)
            thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
            synced = time.monotonic()
            thread.start()
            try:
                if not controller.synced.wait(300):
                    raise RuntimeError("the controller's cache did not sync in 300s")
                out["sync s"] = time.monotonic() - synced
                gc.collect()
                out["rss after sync MiB"] = _rss_mib() - rss_before
                out["rss/pod after sync KiB"] = out["rss after sync MiB"] * 1024 / pods
                pages = controller.cache.informers["Pod"].pages
                out["pod list pages"] = pages
                started = time.monotonic()
                out["load at scale-out start"] = os.getloadavg()[0]
                scale_samples = len(load.samples)
                scraping = _LiveScrapes(f"http://127.0.0.1:{controller.ports['/metrics']}/metrics")
                scraping.start()
                _apply(api, scale_out(replicas))
                while time.monotonic() - started < timeout:
                    listed: Any = core.list_namespaced_pod(NAMESPACE, label_selector="app=scale-out",
                                                           _preload_content=False)
                    running = sum(1 for p in json.loads(listed.data)["items"]
                                  if (p.get("status") or {}).get("phase") == "Running")
                    if running >= replicas:
                        out["scale-out to all Running s"] = time.monotonic() - started
                        break
                    time.sleep(2.0)
                else:
                    out["scale-out Running at timeout"] = running
                scraping.stop.set()
                scraping.join(120)
                if scraping.walls:
                    out["/metrics scrapes during scale-out"] = len(scraping.walls)
                    out["/metrics scrape during scale-out p50 s"] = statistics.median(scraping.walls)
                    out["/metrics scrape during scale-out p95 s"] = percentile(scraping.walls, 0.95)
                    out["/metrics scrape during scale-out max s"] = max(scraping.walls)
                for scrape in ("first", "second"):  # as Prometheus asks: text format, gzip accepted
                    began, cpu = time.perf_counter(), time.process_time()
                    controller.metrics.render(accept_encoding="gzip")
                    out[f"/metrics {scrape} scrape s"] = time.perf_counter() - began
                    out[f"/metrics {scrape} scrape cpu s"] = time.process_time() - cpu
                during = load.samples[scale_samples:] or [os.getloadavg()[0]]
                out["load during scale-out mean"] = sum(during) / len(during)
                out["load during scale-out max"] = max(during)
                gc.collect()
                out["rss after scale-out MiB"] = _rss_mib() - rss_before
                out["rss/pod after scale-out KiB"] = out["rss after scale-out MiB"] * 1024 / (pods + replicas)
            finally:
                dropped_running = controller.events.dropped  # a full queue's drops, before stop gives up any
                stop.set()
                thread.join(60)
                Provisioner.plan = inner_plan  # type: ignore[method-assign]
        out["batches"] = len(batches)
        if batches:
            out["first batch before solve s"], out["first batch after solve s"] = batches[0]
            later = batches[1:] or batches
            out["later batches before solve max s"] = max(b for b, _ in later)
            out["later batches before solve mean s"] = sum(b for b, _ in later) / len(later)
            out["later batches after solve max s"] = max(a for _, a in later)
            out["solve max s"] = max(end - start for start, end in solves)
        out["peak rss MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out["throttled"] = sum(i.throttled for i in controller.cache.informers.values())
        requests, slow, waited, longest = _rate_limiter(controller.metrics.registry)
        out["rate limiter: requests"] = requests
        out["rate limiter: waited > 5 ms"] = slow
        out["rate limiter: seconds waited"] = waited
        out["rate limiter: longest wait <= s"] = longest
        out["'waited ... for a token' lines"] = waits.lines
        out["Events sent"], out["Events dropped (queue full)"] = controller.events.sent, dropped_running
        out["Events given up at stop"] = controller.events.dropped - dropped_running
        out["Events failed"] = controller.events.failed
        out["Events held back (dedupe)"] = controller.events.suppressed
        out["Events refused (rate limit)"] = controller.events.rate_limited
        out["Events aggregated"] = controller.events.aggregated
        out["Events spam-filtered"] = controller.events.spam_filtered
        print("per batch (before solve s, after solve s): "
              + ", ".join(f"({b:.2f}, {a:.2f})" for b, a in batches), file=sys.stderr)
    load.stop.set()
    out["load max (whole run)"] = max(load.samples or [os.getloadavg()[0]])
    return out


def _print(title: str, figures: dict[str, float]) -> None:
    print(f"\n{title}")
    for key, value in figures.items():
        print(f"  {key:32s} {value:12.3f}" if isinstance(value, float) else f"  {key:32s} {value:12}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offline", action="store_true", help="only the synthetic cache")
    parser.add_argument("--live", action="store_true", help="only the real control plane")
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--deployments", type=int, default=500)
    parser.add_argument("--pending", type=int, default=100, help="new pending pods before the steady batch")
    parser.add_argument("--changed", type=int, default=100, help="bound pods changed before the steady batch")
    parser.add_argument("--live-nodes", type=int, default=2_000)
    parser.add_argument("--live-pods", type=int, default=20_000)
    parser.add_argument("--scale-out", type=int, default=1_000)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--scrapes", type=int, default=0, metavar="N",
                        help="only /metrics: N scrapes per condition (quiet, a solve in-process, busy cores)")
    parser.add_argument("--scrape-client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--populate", nargs=3, metavar=("KUBECONFIG", "NODES", "PODS"), help=argparse.SUPPRESS)
    parser.add_argument("--resident", nargs=3, type=int, metavar=("PODS", "NODES", "DEPLOYMENTS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.resident:
        print(json.dumps(OfflineCluster(*args.resident).resident_per_pod()))
        return 0
    if args.populate:
        populate(args.populate[0], int(args.populate[1]), int(args.populate[2]))
        return 0
    if args.scrape_client:
        scrape_client(args.scrape_client)
        return 0
    if args.scrapes:
        _print(f"/metrics: {args.pods} pods, {args.nodes} nodes, {args.scrapes} scrapes per condition "
               "(python -m bench.controller_scale --scrapes N)",
               scrapes(args.pods, args.nodes, args.deployments, args.scrapes))
        return 0
    both = not args.offline and not args.live
    if args.offline or both:
        _print(f"offline: {args.pods} bound pods, {args.nodes} nodes (python -m bench.controller_scale --offline)",
               offline(args.pods, args.nodes, args.deployments, args.pending, args.changed))
    if args.live or both:
        _print(f"live: {args.live_nodes} KWOK nodes, {args.live_pods} running pods, {args.scale_out}-pod scale-out",
               live(args.live_nodes, args.live_pods, args.scale_out, args.timeout))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NODEPLAN_STARTED", str(time.time()))
    sys.exit(main())
