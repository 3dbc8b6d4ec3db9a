"""``nodeplan snapshot``: capture a live cluster into a snapshot file the other commands read.

Every kind the snapshot contract names is listed once (Pods, Nodes, NodePools and NodeClaims, DaemonSets,
PodDisruptionBudgets, Namespaces, PVCs / PVs / StorageClasses / CSINodes) and written as a multi-document
YAML stream, each object with its ``kind`` and ``apiVersion`` as ``kubectl get -o yaml`` prints them.

Nothing secret leaves the cluster: Secrets and ConfigMaps are never read; every container's environment
values (``env[].value`` / ``valueFrom``; names kept), ``command`` and ``args`` are dropped, and so are
``metadata.managedFields`` and the ``kubectl.kubernetes.io/last-applied-configuration`` annotation (a
copy of the whole object as applied, env values included). Node image lists are dropped for size.
A kind the API server does not serve (no Karpenter CRDs installed) is skipped with a warning.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

Object = dict[str, Any]
#: ``lister(**kwargs)`` — a generated kubernetes-client list call, called with ``_preload_content=False``
Lister = Callable[..., Any]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
REDACTED_FIELDS = ("command", "args")


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


def _scrub_pod_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    for key in CONTAINER_LISTS:
        for container in spec.get(key) or []:
            if not isinstance(container, dict):
                continue
            for field in REDACTED_FIELDS:
                container.pop(field, None)
            if isinstance(container.get("env"), list):
                container["env"] = [{"name": e.get("name")} for e in container["env"] if isinstance(e, dict)]


def scrub(obj: Object) -> Object:
    """A copy of ``obj`` without secrets, environment values or bookkeeping (see the module docstring)."""
    out = copy.deepcopy(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED, None)
            if not annotations:
                meta.pop("annotations")
    kind = out.get("kind")
    spec = out.get("spec")
    if kind == "Pod":
        _scrub_pod_spec(spec)
    elif isinstance(spec, dict) and isinstance(spec.get("template"), dict):  # DaemonSet and other templates
        _scrub_pod_spec(spec["template"].get("spec"))
    if kind == "Node" and isinstance(out.get("status"), dict):
        out["status"].pop("images", None)
    return out


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
            ordered = {"apiVersion": item.pop("apiVersion"), "kind": item.pop("kind"), **item}
            objects.append(scrub(ordered))
    return objects, warnings


def to_yaml(objects: list[Object], *, header: str = "") -> str:
    head = "".join(f"# {line}\n" for line in header.splitlines())
    return head + yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)


def snapshot_cmd(
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, "
                                                    "then ~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option("--context", help="Kubeconfig context (default: current).")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the snapshot here, not stdout.")]
    = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warnings on stderr.")] = False,
) -> None:
    """Capture a live cluster into a snapshot file (no Secrets, no environment values, no command lines).

    Example: nodeplan snapshot --kubeconfig ~/.kube/config -o snap.yaml && nodeplan solve snap.yaml
    """
    from kubernetes import config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

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
    text = to_yaml(objects, header=f"nodeplan snapshot of {server}: {len(objects)} objects")
    if output:
        output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
