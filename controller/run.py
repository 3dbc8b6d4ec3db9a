"""``nodeplan run``: the in-cluster controller. Wires the cache, the batch window, the provisioner, the
NodeClaim lifecycle, Events, metrics, health endpoints and leader election together; every piece gets its
clients passed in, so tests run it in a thread.

Start-up order: cache (every replica, so a standby is warm and ready), HTTP endpoints, then — when leader
election is on — wait for the Lease; only the leader runs the provisioning and lifecycle loops. Losing the
Lease stops both loops and ``run`` returns with ``lost_leadership`` set (the CLI exits 1 and Kubernetes
restarts the pod as a fresh candidate, as controller-runtime does); a stop request finishes the current
step, then releases the Lease.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client, config

from controller import leader, throttle
from controller.batch import BatchWindow
from controller.cache import ClusterCache, FilteredCache, resources
from controller.disruption import DisruptionOptions, for_controller, snapshot_source
from controller.events import EventRecorder
from controller.garbage import GarbageCollector
from controller.health import Endpoints, Servers
from controller.leader import KubeLeaseStore, LeaderElector
from controller.lifecycle import Lifecycle
from controller.metrics import CONTROLLER, Metrics
from controller.nodepool_status import NodePoolStatusWriter, Ownership
from controller.offerings import UnavailableOfferings
from controller.provisioner import BatchRecord, Provisioner, ProvisionerOptions
from controller.shadow import Shadow, ShadowOptions, batch_keys
from model import labels as wk
from model.affinity import LabelSelector
from model.instancetype import InstanceType
from model.nodepool import NodeClaim, NodePool
from providers.kwok import kwok_catalog
from providers.kwok_nodes import KwokProvider
from providers.protocol import CloudProvider, Launched, NodeClaimNotFoundError, NodeClassKind, RepairPolicy
from solver.gcpause import freeze_survivors

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: the user agent of nodeplan's API client, hence the field manager of its writes
FIELD_MANAGER = "nodeplan"
#: the shortest time between two passes of the provisioning and lifecycle loops: a scale-out changes pods dozens
#: of times a second and each pass reads the whole cache, so changes that arrive closer together are taken in one
#: pass (far below the 1 s batch idle window; in py-spy profiles of a 1,000-pod scale-out the pending-pod scan fell
#: from 13 % to 4 % of the samples, the lifecycle passes from 18 % to 7 %)
PASS_INTERVAL = 0.2


@dataclass
class ControllerOptions:
    batch_idle: float = 1.0
    batch_max: float = 10.0
    #: lifecycle re-checks every NodeClaim at least this often even without events
    resync: float = 5.0
    provisioner: ProvisionerOptions = field(default_factory=ProvisionerOptions)
    #: consolidation (``controller.disruption``): interval, solve time limit, validation wait; ``enabled``
    disruption: DisruptionOptions = field(default_factory=DisruptionOptions)
    #: HTTP ports (None: not served; 0: any free port, see ``Controller.ports``); equal ports share one listener
    metrics_port: int | None = None
    health_port: int | None = None
    bind_address: str = "0.0.0.0"
    leader_elect: bool = False
    lease_namespace: str = "default"
    lease_name: str = leader.DEFAULT_LEASE_NAME
    #: this replica's name in the Lease (default: hostname, i.e. the pod name, plus a random suffix)
    identity: str = ""
    lease_duration: float = leader.LEASE_DURATION
    renew_deadline: float = leader.RENEW_DEADLINE
    retry_period: float = leader.RETRY_PERIOD
    #: an identical Event (object, reason, message) is sent at most once per this many seconds
    event_dedup_window: float = 120.0
    #: garbage collection (``controller.garbage``): seconds between passes, and the age below which an instance
    #: without a NodeClaim (or a claim without an instance) is left alone
    gc_interval: float = 10.0
    gc_grace: float = 30.0
    #: shadow mode (``controller.shadow``): decide and compare, write nothing; needs leader election off
    shadow: bool = False
    shadow_options: ShadowOptions = field(default_factory=ShadowOptions)
    #: the NodePools this nodeplan owns (``--nodepool-selector``; None: every one); the others' nodes are
    #: existing capacity, their NodeClaims are never launched, drained or deleted
    nodepool_selector: LabelSelector | None = None
    #: once the cache has synced, freeze what is alive (imports, the cache) out of the cyclic collector's walks
    #: (``solver.gcpause.freeze_survivors``); on for ``nodeplan run``, off where tests run it in a thread
    freeze_heap_after_sync: bool = False


def api_client(kubeconfig: str | None = None, *, qps: float = throttle.DEFAULT_QPS,
               burst: int = throttle.DEFAULT_BURST) -> client.ApiClient:
    """A client from ``kubeconfig``, else the in-cluster service account, else the default kubeconfig; every
    request it sends waits for a token of a ``qps`` / ``burst`` bucket, and a throttled one (429) is repeated
    after its Retry-After (``controller.throttle``, as client-go's QPS, Burst and retries)."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    # one connection per informer's watch, 16 registration and 16 nomination writers, evictions, Events and
    # the Lease at once: a smaller pool discards connections each burst (urllib3: "Connection pool is full")
    # and the next burst pays a TLS handshake for each
    configuration.connection_pool_maxsize = 64
    # the kubeconfig and in-cluster token hooks set ``host`` again before every request, and kubernetes-client
    # then reads the proxy variables of the whole environment again (0.06-0.17 ms of the ~1.4 ms CPU one
    # nomination write costs with 35 variables; more in a pod, with a few variables per Service); the host never
    # changes, so the proxy it resolved while loading stands
    configuration._proxy_from_env = False
    api = client.ApiClient(configuration)
    # the API server names the field manager of every write after the user agent: ``nodeplan``, so the writes
    # of this controller are told apart in managedFields (and shadow mode's none can be checked)
    api.user_agent = FIELD_MANAGER
    throttle.install(api, qps, burst)
    return api


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_NAMESPACE.exists()


def own_namespace() -> str:
    """Where the leader-election Lease lives: $POD_NAMESPACE, else the service account's, else ``default``."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


class PeriodicTask(Protocol):
    """Work the leader does every ``interval`` seconds beside the loops (``Controller.add_task``)."""

    name: str
    interval: float

    def step(self) -> None: ...


class ObservedProvider:
    """The cloud provider, with an Event on the NodeClaim for every launch and a metric for every failed call
    (``karpenter_cloudprovider_errors_total``); everything else is passed through."""

    def __init__(self, inner: CloudProvider, events: EventRecorder, metrics: Metrics,
                 owns: Callable[[str], bool] = lambda pool: True) -> None:
        """``owns(nodepool name)``: instances of other NodePools are not listed (garbage collection would take
        another provisioner's nodes for leaked ones)."""
        self._inner, self._events, self._metrics, self._owns = inner, events, metrics, owns

    @property
    def name(self) -> str:
        return self._inner.name

    def _raw(self, claim: NodeClaim) -> dict[str, Any]:
        return {"kind": "NodeClaim", "apiVersion": claim.api_version,
                "metadata": {"name": claim.name, "uid": claim.metadata.uid}}

    def _count(self, controller: str, method: str, err: Exception) -> None:
        self._metrics.cloudprovider_errors.labels(controller, method, self.name, type(err).__name__).inc()

    def supported_node_classes(self) -> Sequence[NodeClassKind]:
        return self._inner.supported_node_classes()

    def instance_types(self, nodepool: NodePool | None = None) -> list[InstanceType]:
        try:
            return self._inner.instance_types(nodepool)
        except Exception as err:
            self._count("provisioner", "GetInstanceTypes", err)
            raise

    def create(self, claim: NodeClaim) -> Launched:
        try:
            launched = self._inner.create(claim)
        except Exception as err:
            self._count("nodeclaim.lifecycle", "Create", err)
            self._events.warning(self._raw(claim), "LaunchFailed", f"Failed to launch: {err}")
            raise
        labels = launched.claim.metadata.labels
        status = launched.claim.status
        where = f"node {status.node_name}" if status.node_name else status.provider_id
        self._events.normal(self._raw(claim), "Launched",
                            f"Launched {labels.get(wk.INSTANCE_TYPE, '?')} in {labels.get(wk.ZONE, '?')} "
                            f"({labels.get(wk.CAPACITY_TYPE, '?')}) as {where}")
        return launched

    def delete(self, claim: NodeClaim) -> None:
        try:
            self._inner.delete(claim)
        except NodeClaimNotFoundError:
            raise  # the instance is gone: the answer termination waits for, not an error
        except Exception as err:
            self._count("nodeclaim.termination", "Delete", err)
            raise

    def get(self, provider_id: str) -> NodeClaim:
        return self._inner.get(provider_id)

    def list(self) -> list[NodeClaim]:
        try:
            return [c for c in self._inner.list() if self._owns(c.metadata.labels.get(wk.NODEPOOL, ""))]
        except Exception as err:
            self._count("nodeclaim.garbagecollection", "List", err)
            raise

    def is_drifted(self, claim: NodeClaim) -> str:
        try:
            return self._inner.is_drifted(claim)
        except Exception as err:
            self._count("nodeclaim.disruption", "IsDrifted", err)
            raise

    def repair_policies(self) -> Sequence[RepairPolicy]:
        return self._inner.repair_policies()


class Controller:
    def __init__(self, api: client.ApiClient, options: ControllerOptions | None = None,
                 catalog: Sequence[InstanceType] | None = None, provider: CloudProvider | None = None) -> None:
        """``provider`` defaults to KWOK over ``catalog``; with a provider and no catalog, its instance types."""
        self.options = options or ControllerOptions()
        self.identity = self.options.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        if catalog is None:
            catalog = provider.instance_types() if provider is not None else kwok_catalog()
        #: the instance types every planner reads; ``use_catalog`` replaces them in place (the periodic refresh)
        self.catalog: list[InstanceType] = list(catalog)
        catalog = self.catalog
        if self.options.shadow and self.options.leader_elect:
            raise ValueError("shadow mode elects no leader: a Lease is a write")
        self.cache = ClusterCache(resources(api, dra=self.options.provisioner.dra))
        self.synced = threading.Event()
        self.metrics = Metrics(self.cache, self.synced.is_set)
        self.metrics.instrument(api)
        self._throttle = throttle.installed(api)
        self.events = EventRecorder(api, instance=self.identity, dedup_window=self.options.event_dedup_window)
        self.events.on_record = lambda kind, reason: self.metrics.events.labels(kind, reason).inc()
        self.unavailable = UnavailableOfferings()
        self.metrics.watch_offerings(lambda: self.unavailable.apply(catalog))
        inner = provider or KwokProvider(api, catalog)
        # a provider may say why a node class cannot launch now (AWS: selectors that match nothing, IAM)
        self.ownership = Ownership(self.options.nodepool_selector, tuple(inner.supported_node_classes()),
                                   getattr(inner, "nodeclass_problem", None))
        #: what the writing parts see: only the NodeClaims of the NodePools this nodeplan owns
        self.owned = FilteredCache(self.cache, self._owned_object)
        self.provisioner = Provisioner(api, self.cache, catalog, self.options.provisioner,
                                       unavailable=self.unavailable, owns=self.ownership.provisions)
        self.provider = ObservedProvider(inner, self.events, self.metrics, self._owned_pool)
        self.lifecycle = Lifecycle(api, self.owned, self.provider, bind_grace=self.options.provisioner.bind_grace,
                                   unavailable=self.unavailable, metrics=self.metrics,
                                   deciding=self.provisioner.deciding, gathering=self._gathering,
                                   decide_now=self._decide_now)
        self.garbage = GarbageCollector(api, self.owned, self.provider, grace=self.options.gc_grace,
                                        interval=self.options.gc_interval)
        self.nodepool_status = NodePoolStatusWriter(api, self.cache, self.events, self.ownership)
        self.disruption = for_controller(api, self.owned, self.provisioner, catalog, self.unavailable, self.events,
                                         self.metrics, self.options.disruption)
        self.shadow: Shadow | None = None
        if self.options.shadow:
            shadow_options = self.options.shadow_options
            self.shadow = Shadow(self.cache, self.provisioner, catalog, shadow_options, self.metrics,
                                 snapshot_source(lambda: self.provisioner.snapshot_objects({}), self.cache,
                                                 lambda: self.unavailable.apply(catalog)))
        self.window = BatchWindow(self.options.batch_idle, self.options.batch_max)
        self.elector: LeaderElector | None = None
        if self.options.leader_elect:
            self.elector = LeaderElector(
                KubeLeaseStore(api, self.options.lease_namespace, self.options.lease_name), self.identity,
                lease_duration=self.options.lease_duration, renew_deadline=self.options.renew_deadline,
                retry_period=self.options.retry_period)
        self.stopped = threading.Event()
        #: set when the HTTP endpoints listen (``ports`` is filled then)
        self.serving = threading.Event()
        self.ports: dict[str, int] = {}
        self.lost_leadership = False
        #: set when a worker loop died of an unexpected exception (``run`` then returns; the CLI exits 1)
        self.crashed = False
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._ticks: dict[str, float] = {}
        #: when each paced loop last started a pass (``_pace``)
        self._passes: dict[str, float] = {}
        self._claims_seen: dict[str, tuple[str, ...]] | None = None
        #: periodic tasks the leader runs beside the loops (``add_task``): a provider's interruption queue,
        #: node class status, catalog refresh
        self.tasks: list[PeriodicTask] = []

    def add_task(self, task: PeriodicTask) -> None:
        self.tasks.append(task)

    def use_catalog(self, catalog: Sequence[InstanceType]) -> None:
        """Plan, consolidate and compare with these instance types from now on."""
        self.catalog[:] = list(catalog)
        self.provisioner.use_catalog(self.catalog)

    # -- probes -------------------------------------------------------------------------------------------
    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.leading

    def healthy(self) -> tuple[bool, str]:
        """Live unless a worker loop has not come round for a long time (a wedged solve or API call)."""
        stall = max(120.0, 4 * self.options.provisioner.solve_time_limit)
        now = time.monotonic()
        stuck = [name for name, tick in self._ticks.items() if now - tick > stall]
        if stuck:
            return False, f"{', '.join(sorted(stuck))} loop stalled for more than {stall:.0f}s"
        return True, "leader" if self.leading and self.synced.is_set() else "running"

    def ready(self) -> tuple[bool, str]:
        if not self.synced.is_set():
            return False, "cache not synced"
        return True, "cache synced; " + ("leader" if self.leading else "standby, waiting for the Lease")

    # -- running ------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set or leadership is lost; returns once the worker loops have finished."""
        servers = self._serve()
        self.cache.start()
        if not self.options.shadow:
            self.events.start()  # in shadow mode no Event is ever sent (Events are writes)
        elector_thread: threading.Thread | None = None
        elector_stop = threading.Event()
        workers: list[threading.Thread] = []
        try:
            while not self.cache.wait_synced(5.0):
                if stop.is_set():
                    return
                log.info("waiting for the cache to sync (are the CRDs installed?)")
            self.synced.set()
            if self.options.freeze_heap_after_sync:
                log.info("cache synced; %d objects frozen out of the collector's walks", freeze_survivors())
            else:
                log.info("cache synced")
            if self.elector is not None:
                # its own stop: it keeps renewing until the workers have finished, then the Lease is released
                elector_thread = threading.Thread(target=self.elector.run, args=(elector_stop,),
                                                  name="leader-election", daemon=True)
                elector_thread.start()
                log.info("waiting to acquire Lease %s/%s as %s", self.options.lease_namespace,
                         self.options.lease_name, self.identity)
                while not stop.is_set() and not self.elector.leading:
                    stop.wait(0.1)
                if stop.is_set():
                    return
            self.metrics.leader.set(1)
            log.info("controller running")
            loops: tuple[tuple[str, Callable[[], None]], ...] = (
                (("shadow", self._shadow_loop),) if self.options.shadow else
                (("provisioning", self._provisioning_loop), ("lifecycle", self._lifecycle_loop),
                 ("disruption", self._disruption_loop)))
            if not self.options.shadow:
                loops += tuple((task.name, partial(self._task_loop, task)) for task in self.tasks)
            workers = [threading.Thread(target=self._guard, args=(loop,), name=name, daemon=True)
                       for name, loop in loops if name != "disruption" or self.options.disruption.enabled]
            for worker in workers:
                worker.start()
            while not stop.is_set() and not self._halt.is_set():
                if self.elector is not None and self.elector.lost.is_set():
                    self.lost_leadership = True
                    log.error("leader election lost; stopping work")
                    break
                stop.wait(0.1)
        finally:
            self._halt.set()
            if self._throttle is not None:  # a worker waiting out a Retry-After is not held up: it stops now
                self._throttle.close()
            for worker in workers:
                worker.join(30.0)
            self.metrics.leader.set(0)
            elector_stop.set()
            if elector_thread is not None:
                elector_thread.join(10.0)
            if self.elector is not None and not self.lost_leadership:
                self.elector.release()
            if not self.options.shadow:
                self.events.stop()
            self.cache.stop()
            if servers is not None:
                servers.stop()
            self.stopped.set()
            log.info("controller stopped")

    def _serve(self) -> Servers | None:
        if self.options.metrics_port is None and self.options.health_port is None:
            return None
        servers = Servers(Endpoints(self.healthy, self.ready, self.metrics.render),
                          metrics_port=self.options.metrics_port, health_port=self.options.health_port,
                          bind=self.options.bind_address)
        servers.start()
        self.ports = servers.ports
        self.serving.set()
        return servers

    def _guard(self, loop: Any) -> None:
        """A worker loop that dies stops the controller (and so the leader role) instead of idling silently."""
        try:
            loop()
        except Exception as err:
            log.exception("worker loop crashed; stopping")
            self.errors.append(f"{type(err).__name__}: {err}")
            self.crashed = True
            self._halt.set()

    def _provisioning_loop(self) -> None:
        generation = -1
        pools_version = ""
        while not self._halt.is_set():
            self._ticks["provisioning"] = time.monotonic()
            deadline = self.window.deadline()
            timeout = 1.0 if deadline is None else max(0.01, min(1.0, deadline - time.monotonic()))
            generation = self.cache.wait_for_change(generation, timeout)
            self._pace("provisioning")
            # spec changes only (metadata.generation): our own status writes must not reopen every batch
            pools = ",".join(sorted(_spec_version(p) for p in self.cache.items("NodePool")))
            if pools != pools_version:
                pools_version = pools
                self.window.forget()
            pending = self.provisioner.pending()
            self.metrics.queue_depth.labels(CONTROLLER).set(len(pending))
            self.window.observe({k: str((p.get("metadata") or {}).get("resourceVersion")) for k, p in pending.items()},
                                time.monotonic())
            if not self.window.ready(time.monotonic()):
                continue
            if not self.leading:
                return  # the Lease was lost since the last step: no new NodeClaims from this replica
            started = time.monotonic()
            try:
                record = self.provisioner.provision(pending)
            except Exception as err:
                self.metrics.reconciled(CONTROLLER, time.monotonic() - started, error=True, depth=len(pending))
                log.exception("provisioning failed; retrying the batch")
                self.errors.append(f"{type(err).__name__}: {err}")
                self._halt.wait(1.0)
                continue
            self.metrics.scheduling_duration.labels(CONTROLLER).observe(time.monotonic() - started)
            self.metrics.reconciled(CONTROLLER, time.monotonic() - started, depth=len(pending))
            self._observe_batch(record, pending)
            # pods the plan could not place, or placed in room left on existing nodes (the scheduler binds
            # them there), reopen the window only once they change (e.g. the scheduler reports them again)
            unplaced = {item.pod for item in record.plan.unschedulable}
            unplaced |= {pod for node in record.plan.existing_nodes for pod in node.pods}
            self.window.close({k: str((p.get("metadata") or {}).get("resourceVersion"))
                               for k, p in pending.items() if k in unplaced})

    def _shadow_loop(self) -> None:
        """Shadow mode: batch as the provisioner does, decide without writing, compare once the other
        provisioner has acted (``controller.shadow``)."""
        assert self.shadow is not None
        shadow = self.shadow
        generation = -1
        while not self._halt.is_set():
            self._ticks["shadow"] = time.monotonic()
            deadline = self.window.deadline()
            timeout = 1.0 if deadline is None else max(0.01, min(1.0, deadline - time.monotonic()))
            generation = self.cache.wait_for_change(generation, timeout)
            shadow.settle()
            pending = shadow.pending()
            self.metrics.queue_depth.labels(CONTROLLER).set(len(pending))
            self.window.observe(batch_keys(pending), time.monotonic())
            if self.window.ready(time.monotonic()) and not pending:
                self.window.close({})  # the pods were bound or deleted before the window closed: nothing to decide
            elif self.window.ready(time.monotonic()):
                try:
                    shadow.decide(pending)
                except Exception as err:
                    log.exception("shadow decision failed; retrying the batch")
                    self.errors.append(f"{type(err).__name__}: {err}")
                    self._halt.wait(1.0)
                    continue
                self.window.close({})
            elif not self.window.open and self.options.disruption.enabled:
                try:
                    shadow.consolidation()
                except Exception as err:
                    log.exception("shadow consolidation failed")
                    self.errors.append(f"{type(err).__name__}: {err}")

    def _owned_pool(self, name: str) -> bool:
        pools = self.cache.items("NodePool")
        if name in self.ownership.owned_pools(pools):
            return True
        # a deleted NodePool's NodeClaims and instances still have to be terminated: ours, unless a selector says
        # another provisioner shares the cluster (whose deleted pools are not ours to clean up)
        return self.options.nodepool_selector is None and name not in {
            str((p.get("metadata") or {}).get("name")) for p in pools}

    def _owned_object(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """NodeClaims of NodePools this nodeplan owns; everything else as it is."""
        if kind != "NodeClaim":
            return True
        return self._owned_pool(((obj.get("metadata") or {}).get("labels") or {}).get(wk.NODEPOOL, ""))

    def _gathering(self) -> float | None:
        """Seconds the open batch window has been gathering pods (the lifecycle's registration barrier)."""
        return self.window.age(time.monotonic())

    def _decide_now(self) -> None:
        """Close the open batch window now and wake the provisioning loop: nodes wait to register for it."""
        self.window.decide_now()
        self.cache.wake()

    def _observe_batch(self, record: BatchRecord, pending: Mapping[str, dict[str, Any]]) -> None:
        """Metrics and Events for one solved batch: what was created, where each pod should go, and why a pod
        cannot go anywhere."""
        plan = record.plan
        self.metrics.batches.labels(plan.solver.status).inc()
        self.metrics.plan_rejected_pods.inc(plan.solver.rejected_pods)
        self.metrics.unschedulable.labels(CONTROLLER).set(len(plan.unschedulable))
        self.metrics.plan_cost.set(plan.cost.total)
        self.metrics.plan_lower_bound.set(plan.cost.lower_bound)
        self.metrics.plan_cost_sum.inc(plan.cost.total)
        if plan.cost.greedy is not None:
            self.metrics.plan_greedy_cost.set(plan.cost.greedy)
            self.metrics.plan_greedy_cost_sum.inc(plan.cost.greedy)
        for name in record.created:
            self.metrics.nodeclaims_created.labels("provisioning", record.claims[name].node_pool, "false").inc()
        for name, planned in record.claims.items():
            for key in planned.pods:
                if key in pending:
                    self.events.normal(pending[key], "Nominated", f"Pod should schedule on: nodeclaim/{name}")
        for node in plan.existing_nodes:
            for key in node.pods:
                if key in pending:
                    self.events.normal(pending[key], "Nominated", f"Pod should schedule on: node/{node.name}")
        for item in plan.unschedulable:
            if item.pod in pending:
                self.events.warning(pending[item.pod], "FailedScheduling", f"Failed to schedule pod: {item.reason}")

    def _disruption_loop(self) -> None:
        """Consolidation passes (``controller.disruption``); a failed pass is logged and retried, not fatal."""
        def heartbeat() -> None:
            self._ticks["disruption"] = time.monotonic()

        self.disruption.run(self._halt, heartbeat, lambda err: self.errors.append(f"{type(err).__name__}: {err}"))

    def _lifecycle_loop(self) -> None:
        generation = -1
        while not self._halt.is_set():
            self._ticks["lifecycle"] = time.monotonic()
            generation = self._wait_for_change(generation, self.options.resync)
            self._pace("lifecycle")
            if self._halt.is_set():
                return
            started = time.monotonic()
            try:
                self.lifecycle.reconcile_all()
                if self.garbage.due():
                    self.garbage.collect()
                self.nodepool_status.reconcile()
                self.metrics.nodepools_invalid.set(len(self.nodepool_status.invalid))
                self._count_terminated()
                if self.metrics.state is not None:
                    self.metrics.state.refresh(at_most_every=5.0)  # pod startup and bind transitions, scraped or not
                self.metrics.reconciled("nodeclaim.lifecycle", time.monotonic() - started,
                                        depth=self.lifecycle.unfinished())
            except Exception as err:
                self.metrics.reconciled("nodeclaim.lifecycle", time.monotonic() - started, error=True)
                log.exception("NodeClaim lifecycle pass failed")
                self.errors.append(f"{type(err).__name__}: {err}")
                self._halt.wait(1.0)

    def _task_loop(self, task: PeriodicTask) -> None:
        """One periodic task: a failed step is logged and retried at the next interval, never fatal (a cloud
        API that throttles or refuses must not stop provisioning)."""
        if getattr(task, "initial_delay", False) and self._halt.wait(task.interval):
            return
        while not self._halt.is_set():
            self._ticks[task.name] = time.monotonic()  # a step that wedges shows in /healthz; the wait does not
            try:
                task.step()
            except Exception as err:
                self._ticks.pop(task.name, None)
                log.warning("%s failed: %s: %s", task.name, type(err).__name__, err)
                self.errors.append(f"{type(err).__name__}: {err}")
                self._halt.wait(max(1.0, min(task.interval, 30.0)))
                continue
            self._ticks.pop(task.name, None)
            self._halt.wait(max(0.05, task.interval))

    def _pace(self, loop: str) -> None:
        """Start ``loop``'s next pass no sooner than ``PASS_INTERVAL`` after its previous one started."""
        now = time.monotonic()
        wait = self._passes.get(loop, 0.0) + PASS_INTERVAL - now
        if wait > 0:
            self._halt.wait(wait)
        self._passes[loop] = time.monotonic()

    def _wait_for_change(self, generation: int, timeout: float) -> int:
        """The cache's wait, in short slices so a stop (or a lost Lease) is noticed within half a second."""
        deadline = time.monotonic() + timeout
        while not self._halt.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return generation
            changed = self.cache.wait_for_change(generation, min(0.5, remaining))
            if changed != generation:
                return changed
        return generation

    def _count_terminated(self) -> None:
        """NodeClaims that were in the cache last pass and are gone now were terminated."""
        current = {str((c.get("metadata") or {}).get("name")):
                   tuple(((c.get("metadata") or {}).get("labels") or {}).get(key, "")
                         for key in (wk.NODEPOOL, wk.CAPACITY_TYPE, wk.ZONE))
                   for c in self.cache.items("NodeClaim")}
        if self._claims_seen is not None:
            for name, where in self._claims_seen.items():
                if name not in current:
                    self.metrics.nodeclaims_terminated.labels(*where).inc()
        self._claims_seen = current


def _spec_version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('name')}@{meta.get('generation') or meta.get('resourceVersion')}"
