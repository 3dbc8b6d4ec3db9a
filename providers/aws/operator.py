"""``nodeplan run --provider aws``: the AWS provider and its controller tasks, wired from the run options.

At start-up: boto3 clients (``providers.aws.clients``: adaptive retries, the endpoint override), the cluster's
join information (name, API endpoint, the CA bundle of the kubeconfig or service account, service CIDR), the
Kubernetes version from the API server (for the EKS-optimized AMI aliases), the instance catalog from the EC2
API (``providers.aws.catalog``; ``--catalog`` restricts it to that file's instance types), and EC2NodeClasses read
from the cluster. Then three periodic tasks for the leader: EC2NodeClass status (every minute), the catalog
refresh (``--catalog-refresh``), and, with ``--interruption-queue``, the interruption queue
(``controller.interruption``). Nothing registers Nodes: the kubelet does, with providerID ``aws:///zone/i-…``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client import Counter

from model.instancetype import InstanceType
from providers.aws.catalog import DEFAULT_REFRESH, RECORDED_PRICES, CatalogRefreshTask, LiveCatalog
from providers.aws.clients import AWSClients, make_clients
from providers.aws.cluster import ClusterNodeClasses, NodeClassStatusTask
from providers.aws.provider import AWSProvider, AWSSettings
from providers.aws.userdata import ClusterInfo

log = logging.getLogger(__name__)


@dataclass
class AWSOptions:
    region: str
    cluster_name: str
    cluster_endpoint: str
    cluster_cidr: str = "10.100.0.0/16"
    cluster_dns: Sequence[str] = ()
    endpoint_url: str | None = None
    interruption_queue: str = ""
    catalog_refresh: float = DEFAULT_REFRESH
    prices_file: Path = RECORDED_PRICES
    #: instance types to offer (``--catalog``'s); None: every priced type of the region
    only: Collection[str] | None = None
    #: seconds one receive waits for interruption messages (SQS long polling, at most 20)
    queue_wait: int = 20


def ca_bundle(api: client.ApiClient) -> str:
    """The API server's CA as nodeadm wants it (base64 PEM): the kubeconfig's or the service account's."""
    path = getattr(api.configuration, "ssl_ca_cert", None)
    if not path:
        return ""
    try:
        return base64.b64encode(Path(path).read_bytes()).decode()
    except OSError:
        return ""


def kubernetes_version(api: client.ApiClient) -> str:
    """``1.36`` from the API server's ``/version`` (the minor may carry a ``+``, as EKS's do)."""
    info = client.VersionApi(api).get_code()
    return f"{info.major}.{str(info.minor).rstrip('+')}"


class AWSOperator:
    """The provider and the tasks ``nodeplan run --provider aws`` adds to the controller."""

    def __init__(self, api: client.ApiClient, options: AWSOptions, clients: AWSClients | None = None) -> None:
        self.options = options
        self._api = api
        self._retries: Counter | None = None
        self.clients = clients or make_clients(options.region, endpoint_url=options.endpoint_url,
                                               on_retry=self._count_retry)
        self.catalog = LiveCatalog(self.clients.ec2, self.clients.pricing, options.region,
                                   prices_file=options.prices_file, only=options.only)
        self.nodeclasses = ClusterNodeClasses(api)
        self.provider: AWSProvider | None = None

    def _count_retry(self, service: str, operation: str, attempts: int) -> None:
        if self._retries is not None:
            self._retries.labels(service, operation).inc(attempts)

    def build(self) -> tuple[AWSProvider, list[InstanceType]]:
        """The provider and its first catalog (raises ``CloudProviderError`` when AWS cannot be read)."""
        types = self.catalog.build()
        info = ClusterInfo(self.options.cluster_name, self.options.cluster_endpoint, ca_bundle(self._api),
                           self.options.cluster_cidr)
        settings = AWSSettings(info, kubernetes_version(self._api), cluster_dns=tuple(self.options.cluster_dns))
        self.provider = AWSProvider(self.clients.ec2, self.clients.ssm, self.clients.iam, settings, types,
                                    self.nodeclasses)
        return self.provider, types

    def attach(self, controller: Any) -> None:
        """Add the periodic tasks to a ``controller.run.Controller`` built with ``self.provider``."""
        from controller.interruption import (
            Interruption,
            InterruptionMetrics,
            InterruptionQueue,
            KubeInterruptionWriter,
            replacement_planner,
        )

        assert self.provider is not None, "build() first"
        provider = self.provider
        self._retries = Counter("nodeplan_aws_api_retries", "AWS API calls botocore retried (throttling, 5xx), by "
                                "service and operation", ["service", "operation"], registry=controller.metrics.registry)

        def use(types: Sequence[InstanceType]) -> None:
            provider.update_catalog(types)
            controller.use_catalog(types)

        controller.add_task(NodeClassStatusTask(provider, self.nodeclasses))
        controller.add_task(CatalogRefreshTask(self.catalog, use, self.options.catalog_refresh))
        if self.options.interruption_queue:
            queue = InterruptionQueue(self.clients.sqs, self.options.interruption_queue, wait=self.options.queue_wait)
            controller.add_task(Interruption(
                queue, controller.cache, KubeInterruptionWriter(self._api, controller.cache),
                replacement_planner(controller.provisioner), events=controller.events,
                metrics=InterruptionMetrics(controller.metrics.registry), unavailable=controller.unavailable))
