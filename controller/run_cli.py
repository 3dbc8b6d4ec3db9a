"""``nodeplan run`` (the in-cluster controller) and ``nodeplan crds`` (write the generated CRDs)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from controller import crds
from controller.provisioner import ProvisionerOptions
from controller.run import Controller, ControllerOptions, api_client, configure_logging
from model.errors import InputError
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog


def run_cmd(
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: in-cluster "
                                                    "service account, else $KUBECONFIG / ~/.kube/config).")] = None,
    catalog: Annotated[Path | None, typer.Option("--catalog", help="Instance catalog (default: built-in KWOK).")
                       ] = None,
    batch_idle: Annotated[float, typer.Option("--batch-idle", min=0.05, help="Close a batch after this many "
                                              "seconds without a new pending pod.")] = 1.0,
    batch_max: Annotated[float, typer.Option("--batch-max", min=0.05, help="Close a batch at the latest after "
                                             "this many seconds.")] = 10.0,
    solve_time_limit: Annotated[float, typer.Option("--solve-time-limit", min=0.1,
                                                    help="Seconds the solver may spend on one batch.")] = 10.0,
    bind_grace: Annotated[float, typer.Option("--bind-grace", min=0.0, help="Seconds after a NodeClaim is "
                                              "initialized during which its pods stay reserved for it.")] = 15.0,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the provisioning controller until SIGINT / SIGTERM (JSON logs on stderr).

    Example: nodeplan run --kubeconfig /tmp/nodeplan-cluster/kubeconfig
    """
    if batch_max < batch_idle:
        typer.echo("error: --batch-max must be at least --batch-idle", err=True)
        raise typer.Exit(2)
    try:
        instance_types = load_catalog(catalog) if catalog else kwok_catalog()
    except InputError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    configure_logging(log_level)
    options = ControllerOptions(batch_idle=batch_idle, batch_max=batch_max, provisioner=ProvisionerOptions(
        solve_time_limit=solve_time_limit, bind_grace=bind_grace))
    controller = Controller(api_client(str(kubeconfig) if kubeconfig else None), options, instance_types)
    stop = threading.Event()

    def shutdown(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    controller.run(stop)


def crds_cmd(
    directory: Annotated[Path, typer.Argument(help="Where to write the CRDs.")] = crds.DEFAULT_DIR,
) -> None:
    """Write the NodePool, NodeClaim and KWOKNodeClass CRDs generated from the pydantic models."""
    for path in crds.write(directory):
        typer.echo(str(path))
