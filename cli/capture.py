"""``nodeplan snapshot``: capture a live cluster into a snapshot file the other commands read.

Every kind the snapshot contract names is listed once (Pods, Nodes, NodePools and NodeClaims, DaemonSets,
PodDisruptionBudgets, Namespaces, PVCs / PVs / StorageClasses / CSINodes, the DRA kinds) and written as a
multi-document YAML stream, each object with its ``kind`` and ``apiVersion`` as ``kubectl get -o yaml`` prints them.

Only what the rules read leaves the cluster (``cli.scrub``, an allow-list per kind): Secrets and ConfigMaps
are never read; of a pod, its scheduling fields, containers' resources and ports (never env / envFrom,
command / args, probes, lifecycle hooks), volumes' claim names and drivers (never CSI attributes or flex
options); annotations only where nodeplan or Kubernetes' scheduling reads them; no ``managedFields``, node
images or StorageClass parameters. A kind the API server does not serve (no Karpenter CRDs installed) is
skipped with a warning.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from cli.output import DataFormat, emit, format_option, output_file_option
from cli.scrub import scrub
from model.errors import InputError
from reports.atomic import check_writable

Object = dict[str, Any]
#: ``lister(**kwargs)`` — a generated kubernetes-client list call, called with ``_preload_content=False``
Lister = Callable[..., Any]


@dataclass(frozen=True)
class CapturedKind:
    kind: str
    api_version: str
    lister: Lister


def kinds(api: Any) -> list[CapturedKind]:
    """What a snapshot holds — every kind the controller reads (``controller.kinds.READ``) — as
    kubernetes-client list calls on ``api`` (a ``kubernetes.client.ApiClient``)."""
    from controller.kinds import READ

    return [CapturedKind(k.kind, k.api_version, k.lister(api)) for k in READ]


def capture(captured: Iterable[CapturedKind]) -> tuple[list[Object], list[str]]:
    """List every kind; returns the scrubbed objects and a warning per kind the server does not serve."""
    from kubernetes.client.exceptions import ApiException

    objects: list[Object] = []
    warnings: list[str] = []
    for entry in captured:
        try:
            response = entry.lister(_preload_content=False, _request_timeout=60)
        except ApiException as err:
            if err.status == 404:
                warnings.append(f"skipped {entry.kind}: the API server does not serve {entry.api_version} "
                                f"{entry.kind} (CRD not installed?)")
                continue
            raise
        data = json.loads(response.data)
        items = sorted(data.get("items") or [], key=lambda o: (
            (o.get("metadata") or {}).get("namespace") or "", (o.get("metadata") or {}).get("name") or ""))
        for item in items:
            item["apiVersion"] = entry.api_version
            item["kind"] = entry.kind
            objects.append(scrub(item))
    return objects, warnings


def to_yaml(objects: list[Object], *, header: str = "") -> str:
    head = "".join(f"# {line}\n" for line in header.splitlines())
    return head + yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)


def snapshot_cmd(
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, "
                                                    "then ~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option("--context", help="Kubeconfig context (default: current).")] = None,
    fmt: Annotated[DataFormat, format_option(DataFormat, "yaml: a multi-document stream; json: one List")
                   ] = DataFormat.yaml,
    output_file: Annotated[Path | None, output_file_option("the snapshot")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warnings on stderr.")] = False,
) -> None:
    """Capture a live cluster into a snapshot file (no Secrets, no environment values, no command lines).

    Example: nodeplan snapshot --kubeconfig ~/.kube/config --output-file snap.yaml && nodeplan solve snap.yaml
    """
    from kubernetes import config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        check_writable(output_file, "--output-file")
    except InputError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    try:
        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None, context=context)
    except (config.ConfigException, OSError, yaml.YAMLError) as err:
        typer.echo(f"error: {kubeconfig or 'kubeconfig'}: {str(err).splitlines()[0] if str(err) else err!r}",
                   err=True)
        raise typer.Exit(2) from None
    server = api.configuration.host
    try:
        with api:
            objects, warnings = capture(kinds(api))
    except ApiException as err:
        typer.echo(f"error: {server}: HTTP {err.status} {err.reason}", err=True)
        raise typer.Exit(2) from None
    except HTTPError as err:
        typer.echo(f"error: {server}: cannot reach the API server ({type(err).__name__})", err=True)
        raise typer.Exit(2) from None
    for warning in () if quiet else warnings:
        typer.echo(f"warning: {warning}", err=True)
    if fmt is DataFormat.json:
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    else:
        text = to_yaml(objects, header=f"nodeplan snapshot of {server}: {len(objects)} objects")
    emit(text, output_file)
