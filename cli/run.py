"""``nodeplan run`` (the in-cluster controller) and ``nodeplan crds`` (write the generated CRDs)."""

from __future__ import annotations

import logging
import signal
import threading
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from kubernetes import client, config
from urllib3.exceptions import HTTPError

from cli.settings import NO_GATES, Duration, FeatureGates, LogLevel, Positive, envvars
from controller import crds, permissions, throttle
from controller.disruption import DisruptionOptions
from controller.leader import DEFAULT_LEASE_NAME
from controller.logs import LogFormat
from controller.logs import configure as configure_logging
from controller.nodepool_status import parse_nodepool_selector
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions, api_client, in_cluster, own_namespace
from controller.shadow import ShadowOptions
from model.errors import InputError
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog
from solver.rules.preferences import PreferencePolicy

log = logging.getLogger(__name__)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


class Provider(StrEnum):
    """``nodeplan run --provider``: where nodes come from."""

    kwok = "kwok"
    aws = "aws"


def preflight(api: client.ApiClient, namespace: str, leader_elect: bool, *, shadow: bool = False,
              dra: bool = True, lease_name: str = DEFAULT_LEASE_NAME) -> None:
    """Every permission the controller uses (shadow mode: the read-only ones; DRA off: none of the DRA ones),
    checked before anything starts: one line and exit 2 otherwise."""
    try:
        missing = permissions.check(api, namespace, permissions.required(shadow, dra), leases=leader_elect,
                                    lease_name=lease_name)
    except client.ApiException as err:
        raise _fail(f"the API server refused the permission check: HTTP {err.status} {err.reason}") from None
    except (HTTPError, OSError) as err:
        detail = str(getattr(err, "reason", None) or err).rsplit(": ", 1)[-1].strip("()'\" ")
        raise _fail(f"cannot reach the API server at {api.configuration.host}: {detail}") from None
    if missing:
        raise _fail(str(permissions.MissingPermissions(
            missing, "deploy/shadow.yaml" if shadow else "deploy/controller.yaml")))


def run_cmd(
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: in-cluster "
                                                    "service account, else $KUBECONFIG / ~/.kube/config).")] = None,
    catalog: Annotated[Path | None, typer.Option("--catalog", help="Instance catalog (default: built-in KWOK).")
                       ] = None,
    batch_idle: Annotated[float, typer.Option("--batch-idle", parser=Duration(0.05), envvar=envvars("batch_idle"),
                                              metavar="DURATION", show_default="1s", help="Close a batch after "
                                              "this long without a new pending pod.")] = 1.0,
    batch_max: Annotated[float, typer.Option("--batch-max", parser=Duration(0.05), envvar=envvars("batch_max"),
                                             metavar="DURATION", show_default="10s", help="Close a batch at the "
                                             "latest after this long.")] = 10.0,
    solve_time_limit: Annotated[float, typer.Option("--solve-time-limit", parser=Duration(0.1), metavar="DURATION",
                                                    show_default="10s",
                                                    help="How long the solver may spend on one batch.")] = 10.0,
    decision_gap: Annotated[float, typer.Option("--decision-gap", min=0.0, max=1.0, help="Decide a batch (and a "
                                                "consolidation decision) as soon as its plan is certified within "
                                                "this relative gap of the lower bound (0.02: 2 %), not at the time "
                                                "limit; 0: prove optimal or use the time.")] = 0.02,
    bind_grace: Annotated[float, typer.Option("--bind-grace", parser=Duration(), metavar="DURATION",
                                              show_default="15s", help="How long after a NodeClaim is "
                                              "initialized its pods stay reserved for it.")] = 15.0,
    solver_workers: Annotated[int, typer.Option("--solver-workers", min=1, help="CP-SAT workers per solve "
                                                "(provisioning and consolidation).")] = 2,
    preference_policy: Annotated[PreferencePolicy, typer.Option(
        "--preference-policy", envvar=envvars("preference_policy"), help="Respect: preferred node affinity "
        "outranks cost (Karpenter's default); Ignore: cost only; Price: each unit of preference weight is worth "
        "--preference-price $/h per pod.")] = PreferencePolicy.RESPECT,
    preference_price: Annotated[float, typer.Option("--preference-price", min=0.0,
                                                    help="$/h per unit of preference weight (Price).")] = 0.0,
    metrics_port: Annotated[int, typer.Option("--metrics-port", min=0, max=65535, envvar=envvars("metrics_port"),
                                              help="Serve Prometheus /metrics here (0: any free port).")] = 8080,
    health_port: Annotated[int, typer.Option("--health-port", min=0, max=65535, envvar=envvars("health_port"),
                                             help="Serve /healthz and /readyz here (may equal --metrics-port)."
                                             )] = 8081,
    bind_address: Annotated[str, typer.Option("--bind-address", help="Address the HTTP endpoints listen on.")
                            ] = "0.0.0.0",
    kube_client_qps: Annotated[float, typer.Option(
        "--kube-client-qps", parser=Positive(), envvar=envvars("kube_client_qps"), metavar="QPS",
        show_default=str(int(throttle.DEFAULT_QPS)), help="The smoothed rate of requests a second to the API "
        "server: the client's token bucket refills this fast (client-go's QPS).")] = throttle.DEFAULT_QPS,
    kube_client_burst: Annotated[int, typer.Option(
        "--kube-client-burst", parser=Positive(integer=True), envvar=envvars("kube_client_burst"), metavar="N",
        show_default=str(throttle.DEFAULT_BURST), help="The most requests sent at once before --kube-client-qps "
        "paces them (the bucket's size, client-go's Burst).")] = throttle.DEFAULT_BURST,
    leader_elect: Annotated[bool | None, typer.Option("--leader-elect/--no-leader-elect", help="Provision only "
                                                      "while holding a Lease (default: on in-cluster, off with "
                                                      "--kubeconfig).", show_default=False)] = None,
    leader_election_namespace: Annotated[str | None, typer.Option(
        "--leader-election-namespace", envvar=envvars("leader_election_namespace"), help="Namespace of the Lease "
        "(default: $POD_NAMESPACE, else the service account's, else default).", show_default=False)] = None,
    leader_election_name: Annotated[str, typer.Option("--leader-election-name", envvar=envvars(
        "leader_election_name"), help="Name of the Lease.")] = "nodeplan-leader-election",
    consolidation: Annotated[bool, typer.Option("--consolidation/--no-consolidation", help="Remove and replace "
                                                "nodes to lower cost when the cluster is quiet.")] = True,
    consolidation_interval: Annotated[float, typer.Option("--consolidation-interval", parser=Duration(0.1),
                                                          metavar="DURATION", show_default="10s",
                                                          help="Time between consolidation passes.")] = 10.0,
    consolidation_time_limit: Annotated[float, typer.Option("--consolidation-time-limit", parser=Duration(0.5),
                                                            metavar="DURATION", show_default="15s", help="How long "
                                                            "the solver may spend on one consolidation decision.")
                                        ] = 15.0,
    consolidation_validation_wait: Annotated[float, typer.Option(
        "--consolidation-validation-wait", parser=Duration(), metavar="DURATION", show_default="15s",
        help="Time between a consolidation decision and its re-check against the cluster (Karpenter: 15s).")
    ] = 15.0,
    steered_eviction: Annotated[bool, typer.Option(
        "--steered-eviction/--no-steered-eviction", help="Evict a consolidation decision's pods one destination at "
        "a time, the other nodes tainted nodeplan.io/steering:PreferNoSchedule meanwhile, so the kube-scheduler "
        "binds them where the decision packed them (off: the drain evicts them all at once, as Karpenter).")
    ] = True,
    spot_to_spot: Annotated[bool | None, typer.Option(
        "--spot-to-spot/--no-spot-to-spot", show_default=False, help="Consolidation may replace spot nodes with "
        "spot nodes (default: the SpotToSpotConsolidation feature gate, off).")] = None,
    feature_gates: Annotated[FeatureGates, typer.Option(
        "--feature-gates", parser=FeatureGates.parse, envvar=envvars("feature_gates"), metavar="GATES",
        show_default=False, help="Karpenter's feature gates, e.g. SpotToSpotConsolidation=true, and Kubernetes' "
        "DynamicResourceAllocation (the two nodeplan implements; the others are accepted and ignored).")
    ] = NO_GATES,
    dra: Annotated[bool | None, typer.Option(
        "--dra/--no-dra", show_default=False, help="Provision for pods with DRA resource claims (default: the "
        "DynamicResourceAllocation feature gate, on). --no-dra: the DRA kinds are not read (no resource.k8s.io "
        "RBAC needed), pods with claims get a FailedScheduling Event and are left to others (Karpenter's "
        "--ignore-dra-requests), new nodes publish no devices.")] = None,
    log_level: Annotated[LogLevel, typer.Option("--log-level", envvar=envvars("log_level"), case_sensitive=False,
                                                help="debug, info, warning or error.")] = LogLevel.info,
    log_format: Annotated[LogFormat, typer.Option("--log-format", case_sensitive=False, help="json: one JSON "
                                                  "object per line (time, level, logger, message, pod / node / "
                                                  "nodeclaim / nodepool); console: for a terminal.")
                          ] = LogFormat.json,
    shadow: Annotated[bool, typer.Option("--shadow", help="Shadow mode: decide as nodeplan would beside the "
                                         "provisioner that acts and compare, write nothing to the cluster "
                                         "(read-only RBAC, deploy/shadow.yaml; no leader election).")] = False,
    shadow_record: Annotated[Path | None, typer.Option("--shadow-record", help="Append every shadow comparison "
                                                       "to this JSON-lines file (read by nodeplan "
                                                       "shadow-report).")] = None,
    record_batches: Annotated[Path | None, typer.Option("--record-batches", help="Write each batch's snapshot "
                                                        "to this directory as batch-NNNNN.json (replay: nodeplan "
                                                        "solve FILE --catalog ...).")] = None,
    shadow_settle_timeout: Annotated[float, typer.Option(
        "--shadow-settle-timeout", parser=Duration(1.0), metavar="DURATION", show_default="10m",
        help="Compare a shadow batch after this long even if not all its pods are bound (the unbound ones "
        "count as left pending by the other provisioner).")] = 600.0,
    nodepool_selector: Annotated[str | None, typer.Option(
        "--nodepool-selector", metavar="SELECTOR", help="Label selector (kubectl -l syntax) of the NodePools "
        "this nodeplan provisions and consolidates; the others' nodes are existing capacity (default: every "
        "NodePool).")] = None,
    provider: Annotated[Provider, typer.Option("--provider", help="Cloud provider: kwok (KWOK Nodes in this "
                                               "cluster) or aws (EC2 instances; EC2NodeClasses).")] = Provider.kwok,
    cluster_name: Annotated[str | None, typer.Option("--cluster-name", envvar=envvars("cluster_name"), help="aws: "
                                                     "the EKS cluster's name (tags, node join).")] = None,
    cluster_endpoint: Annotated[str | None, typer.Option("--cluster-endpoint", envvar=envvars("cluster_endpoint"),
                                                         help="aws: the API server URL nodes join.")] = None,
    cluster_cidr: Annotated[str, typer.Option("--cluster-cidr", help="aws: the cluster's service CIDR (nodeadm)."
                                              )] = "10.100.0.0/16",
    aws_region: Annotated[str | None, typer.Option("--aws-region", envvar=["NODEPLAN_AWS_REGION", "AWS_REGION"],
                                                   help="aws: the region (default $AWS_REGION).")] = None,
    aws_endpoint_url: Annotated[str | None, typer.Option("--aws-endpoint-url", help="aws: one endpoint for every "
                                                         "AWS API (a test API; boto3 also reads $AWS_ENDPOINT_URL "
                                                         "itself).")] = None,
    interruption_queue: Annotated[str, typer.Option("--interruption-queue", envvar=envvars("interruption_queue"),
                                                    help="aws: SQS queue (name or URL) of EC2 interruption events "
                                                    "(default: none, interruption handling off).")] = "",
    catalog_refresh: Annotated[float, typer.Option("--catalog-refresh", parser=Duration(60.0), metavar="DURATION",
                                                   show_default="12h", help="aws: rebuild instance types and prices "
                                                   "from the EC2 and Pricing APIs this often.")] = 43200.0,
) -> None:
    """Run the provisioning controller until SIGINT / SIGTERM (JSON logs on stderr).

    Checks every RBAC permission it needs first (exit 2 naming what is missing). Exit 1 if leadership is lost
    or a worker loop crashed (Kubernetes restarts the pod). Every option is also the environment variable
    NODEPLAN_<OPTION> (NODEPLAN_BATCH_MAX=10s); Karpenter's names are accepted where the meaning is the same
    (BATCH_MAX_DURATION, BATCH_IDLE_DURATION, LOG_LEVEL, METRICS_PORT, HEALTH_PROBE_PORT, FEATURE_GATES,
    PREFERENCE_POLICY, LEADER_ELECTION_NAME, LEADER_ELECTION_NAMESPACE, KUBE_CLIENT_QPS, KUBE_CLIENT_BURST); a flag
    wins over both.

    Example: nodeplan run --kubeconfig /tmp/nodeplan-cluster/kubeconfig --metrics-port 0 --health-port 0
    """
    if batch_max < batch_idle:
        raise _fail("--batch-max must be at least --batch-idle")
    try:
        selector = parse_nodepool_selector(nodepool_selector) if nodepool_selector is not None else None
    except InputError as err:
        raise _fail(str(err)) from None
    if shadow and leader_elect:
        raise _fail("--shadow writes nothing, and leader election writes a Lease: drop --leader-elect")
    for gate in feature_gates.ignored():
        typer.echo(f"warning: feature gate {gate} has no effect in nodeplan", err=True)
    spot = spot_to_spot if spot_to_spot is not None else feature_gates.enabled("SpotToSpotConsolidation")
    use_dra = dra if dra is not None else feature_gates.enabled("DynamicResourceAllocation")
    try:
        instance_types = load_catalog(catalog) if catalog else kwok_catalog()
    except InputError as err:
        raise _fail(str(err)) from None
    if not use_dra:
        typer.echo("warning: DRA is disabled: ResourceClaims, DeviceClasses and ResourceSlices are not read, and "
                   "pods with resource claims are left to others", err=True)
        # the KWOK provider plays the DRA driver from these inventories: with DRA off it publishes nothing
        instance_types = tuple(it.model_copy(update={"resource_slices": ()}) for it in instance_types)
    try:
        api = api_client(str(kubeconfig) if kubeconfig else None, qps=kube_client_qps, burst=kube_client_burst)
    except (config.ConfigException, OSError, ValueError) as err:
        raise _fail(f"unusable kubeconfig: {err}") from None
    elect = False if shadow else leader_elect if leader_elect is not None else (kubeconfig is None and in_cluster())
    namespace = leader_election_namespace or own_namespace()
    mode: dict[str, Any] = {"shadow": True} if shadow else {}  # only what differs from the defaults
    if not use_dra:
        mode["dra"] = False
    if elect and leader_election_name != DEFAULT_LEASE_NAME:  # the Lease rows are checked by its name
        mode["lease_name"] = leader_election_name
    preflight(api, namespace, elect, **mode)
    configure_logging(log_level, log_format=log_format)
    options = ControllerOptions(batch_idle=batch_idle, batch_max=batch_max, provisioner=ProvisionerOptions(
        solve_time_limit=solve_time_limit, decision_gap=decision_gap, bind_grace=bind_grace, workers=solver_workers,
        preference_policy=preference_policy, preference_price=preference_price, dra=use_dra,
        record_batches=record_batches),
        metrics_port=metrics_port,
        health_port=health_port, bind_address=bind_address, leader_elect=elect, lease_namespace=namespace,
        lease_name=leader_election_name, disruption=DisruptionOptions(
            enabled=consolidation, interval=consolidation_interval, time_limit=consolidation_time_limit,
            validation_wait=consolidation_validation_wait, workers=solver_workers, spot_to_spot=spot,
            decision_gap=decision_gap, steer=steered_eviction),
        shadow=shadow, shadow_options=ShadowOptions(
            record=shadow_record, settle_timeout=shadow_settle_timeout,
            consolidation_interval=consolidation_interval if consolidation else 0.0,
            consolidation_time_limit=consolidation_time_limit, workers=solver_workers, spot_to_spot=spot),
        nodepool_selector=selector, freeze_heap_after_sync=True)
    extra: dict[str, Any] = {}
    operator = None
    if provider is Provider.aws:
        operator = _aws_operator(api, namespace, shadow, catalog, instance_types, cluster_name, cluster_endpoint,
                                 cluster_cidr, aws_region, aws_endpoint_url, interruption_queue, catalog_refresh)
        extra["provider"], instance_types = operator.build_or_exit()
    controller = Controller(api, options, instance_types, **extra)
    if operator is not None:
        operator.attach(controller)
    stop = threading.Event()

    def shutdown(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    try:
        controller.run(stop)
    except OSError as err:  # the HTTP endpoints bind before anything else starts: a port in use
        raise _fail(f"cannot listen on {bind_address}: {err}") from None
    if controller.lost_leadership or controller.crashed:
        raise typer.Exit(1)


class _Operator:
    """The AWS operator with start-up failures as one line and exit 2."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def build_or_exit(self) -> tuple[Any, Any]:
        from providers.protocol import CloudProviderError

        try:
            return self.inner.build()  # type: ignore[no-any-return]
        except (CloudProviderError, InputError) as err:
            raise _fail(f"--provider aws: {err}") from None
        except client.ApiException as err:
            raise _fail(f"--provider aws: reading the API server's version: HTTP {err.status} {err.reason}"
                        ) from None

    def attach(self, controller: Any) -> None:
        self.inner.attach(controller)


def _aws_operator(api: client.ApiClient, namespace: str, shadow: bool, catalog: Path | None, instance_types: Any,
                  cluster_name: str | None, cluster_endpoint: str | None, cluster_cidr: str, region: str | None,
                  endpoint_url: str | None, queue: str, refresh: float) -> _Operator:
    """Check what --provider aws needs (settings, RBAC for EC2NodeClasses), then build its operator."""
    from providers.aws.cluster import PERMISSIONS
    from providers.aws.operator import AWSOperator, AWSOptions

    if shadow:
        raise _fail("--shadow writes nothing, and --provider aws writes EC2NodeClass status: drop one of them")
    for flag, value in (("--cluster-name (CLUSTER_NAME)", cluster_name),
                        ("--cluster-endpoint (CLUSTER_ENDPOINT)", cluster_endpoint),
                        ("--aws-region (AWS_REGION)", region)):
        if not value:
            raise _fail(f"--provider aws needs {flag}")
    try:
        missing = permissions.check(api, namespace, PERMISSIONS, leases=False)
    except (client.ApiException, HTTPError, OSError) as err:
        raise _fail(f"the API server refused the permission check: {err}") from None
    if missing:
        raise _fail(str(permissions.MissingPermissions(missing, "deploy/aws/values.yaml")))
    options = AWSOptions(region=str(region), cluster_name=str(cluster_name), cluster_endpoint=str(cluster_endpoint),
                         cluster_cidr=cluster_cidr, endpoint_url=endpoint_url, interruption_queue=queue,
                         catalog_refresh=refresh, only={it.name for it in instance_types} if catalog else None)
    return _Operator(AWSOperator(api, options))


def crds_cmd(
    directory: Annotated[Path, typer.Argument(help="Where to write the CRDs.")] = crds.DEFAULT_DIR,
) -> None:
    """Write the NodePool, NodeClaim and KWOKNodeClass CRDs generated from the pydantic models."""
    for path in crds.write(directory):
        typer.echo(str(path))
