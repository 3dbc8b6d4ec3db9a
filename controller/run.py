"""``nodeplan run``: the in-cluster controller. Wires the cache, the batch window, the provisioner and the
NodeClaim lifecycle together; every piece gets its clients passed in, so tests run it in a thread."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config

from controller.batch import BatchWindow
from controller.cache import ClusterCache, resources
from controller.lifecycle import Lifecycle
from controller.offerings import UnavailableOfferings
from controller.provisioner import Provisioner, ProvisionerOptions
from model.instancetype import InstanceType
from providers.kwok import kwok_catalog
from providers.kwok_nodes import KwokProvider

log = logging.getLogger(__name__)


@dataclass
class ControllerOptions:
    batch_idle: float = 1.0
    batch_max: float = 10.0
    #: lifecycle re-checks every NodeClaim at least this often even without events
    resync: float = 5.0
    provisioner: ProvisionerOptions = field(default_factory=ProvisionerOptions)


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client from ``kubeconfig``, else the in-cluster service account, else the default kubeconfig."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = 16
    return client.ApiClient(configuration)


class Controller:
    def __init__(self, api: client.ApiClient, options: ControllerOptions | None = None,
                 catalog: Sequence[InstanceType] | None = None) -> None:
        self.options = options or ControllerOptions()
        catalog = tuple(catalog if catalog is not None else kwok_catalog())
        self.cache = ClusterCache(resources(api))
        self.unavailable = UnavailableOfferings()
        self.provisioner = Provisioner(api, self.cache, catalog, self.options.provisioner,
                                       unavailable=self.unavailable)
        self.lifecycle = Lifecycle(api, self.cache, KwokProvider(api, catalog),
                                   bind_grace=self.options.provisioner.bind_grace, unavailable=self.unavailable)
        self.window = BatchWindow(self.options.batch_idle, self.options.batch_max)
        self.stopped = threading.Event()
        self.errors: list[str] = []

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set; returns after the worker threads have finished their current step."""
        self.cache.start()
        try:
            while not self.cache.wait_synced(5.0):
                if stop.is_set():
                    return
                log.info("waiting for the cache to sync (are the CRDs installed?)")
            log.info("cache synced; controller running")
            lifecycle = threading.Thread(target=self._lifecycle_loop, args=(stop,), name="lifecycle", daemon=True)
            lifecycle.start()
            self._provisioning_loop(stop)
            lifecycle.join(10.0)
        finally:
            self.cache.stop()
            self.stopped.set()
            log.info("controller stopped")

    def _provisioning_loop(self, stop: threading.Event) -> None:
        generation = -1
        pools_version = ""
        while not stop.is_set():
            deadline = self.window.deadline()
            timeout = 1.0 if deadline is None else max(0.01, min(1.0, deadline - time.monotonic()))
            generation = self.cache.wait_for_change(generation, timeout)
            pools = ",".join(sorted(str((p.get("metadata") or {}).get("resourceVersion"))
                                    for p in self.cache.items("NodePool")))
            if pools != pools_version:
                pools_version = pools
                self.window.forget()
            pending = self.provisioner.pending()
            self.window.observe({k: str((p.get("metadata") or {}).get("resourceVersion")) for k, p in pending.items()},
                                time.monotonic())
            if not self.window.ready(time.monotonic()):
                continue
            try:
                record = self.provisioner.provision(pending)
            except Exception as err:
                log.exception("provisioning failed; retrying the batch")
                self.errors.append(f"{type(err).__name__}: {err}")
                stop.wait(1.0)
                continue
            # pods the plan could not place, or placed in room left on existing nodes (the scheduler binds
            # them there), reopen the window only once they change (e.g. the scheduler reports them again)
            unplaced = {item.pod for item in record.plan.unschedulable}
            unplaced |= {pod for node in record.plan.existing_nodes for pod in node.pods}
            self.window.close({k: str((p.get("metadata") or {}).get("resourceVersion"))
                               for k, p in pending.items() if k in unplaced})

    def _lifecycle_loop(self, stop: threading.Event) -> None:
        generation = -1
        while not stop.is_set():
            generation = self.cache.wait_for_change(generation, self.options.resync)
            try:
                self.lifecycle.reconcile_all()
            except Exception as err:
                log.exception("NodeClaim lifecycle pass failed")
                self.errors.append(f"{type(err).__name__}: {err}")
                stop.wait(1.0)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out)


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
