"""Manifests as input: workloads expanded into the pending pods their controllers would create.

CI has no cluster, only the YAML a pull request changes: a directory of manifests, or ``helm template`` /
``kustomize build`` output (multi-document YAML). This module turns that into a Snapshot:

- ``Deployment``, ``ReplicaSet``, ``StatefulSet``: ``spec.replicas`` pods (default 1; at most
  ``MAX_WORKLOAD_PODS``, 100,000, per workload, as for a Job's ``parallelism``);
- ``Job``: ``min(parallelism, completions)`` pods (parallelism defaults to 1, completions to parallelism),
  none when ``spec.suspend``; ``CronJob``: one run of ``spec.jobTemplate`` (none when suspended);
- plain ``Pod``s, ``DaemonSet``s, ``NodePool``s, ``PodDisruptionBudget``s and ``Namespace``s as in a
  snapshot; other kinds (Services, ConfigMaps, ...) are skipped with one warning per kind.

Pods are named ``<workload>-<index>`` (StatefulSet ordinals are exactly that), live in the workload's
namespace (``default`` when unset), carry the pod template's labels and the workload as owner, and
request what the scheduler would charge (``model.pod.effective_requests``: limits default requests).
Objects owned by a controller (``ownerReferences[].controller``) are skipped: their owner is expanded.
An error names the file, the workload and the template field (``spec.template.spec.containers[0]...``).
Volume topology (``model.volumes``) applies to plain Pods as in a snapshot, but not to expanded workload
pods: manifests rarely carry the cluster's StorageClasses and PersistentVolumes, and a StatefulSet's
``volumeClaimTemplates`` create their claims only at run time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from model.errors import InputError
from model.fields import RawObject
from model.pod import Pod
from model.snapshot import _PARSERS, RAW_KINDS, Snapshot, check_identity, parse_objects, read_documents

#: Kinds whose pods this module creates, and where their pod template lives.
WORKLOAD_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "Job", "CronJob"})
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
#: The most pods one workload expands to (``replicas``, a Job's ``parallelism``); more is an input error, not
#: minutes of expansion and gigabytes of pods.
MAX_WORKLOAD_PODS = 100_000
SNAPSHOT_KINDS = frozenset(_PARSERS) | RAW_KINDS


def manifest_files(directory: Path) -> list[Path]:
    """Every ``*.yaml``/``*.yml``/``*.json`` below ``directory`` (hidden directories skipped), sorted. A
    symbolic link is read only when it stays inside ``directory``: a manifests tree from a pull request must
    not make nodeplan read (and print in its errors) files from elsewhere on the machine."""
    inside = directory.resolve()
    files = [p for p in directory.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file()
             and not any(part.startswith(".") for part in p.relative_to(directory).parts)
             and p.resolve().is_relative_to(inside)]
    return sorted(files)


def _count(spec: RawObject, field: str, default: int) -> int:
    value = spec.int(field, default)
    assert value is not None
    if value < 0:
        raise InputError(f"must be non-negative, got {value}", field=f"{spec.path}.{field}")
    if value > MAX_WORKLOAD_PODS and field != "completions":
        raise InputError(f"{value:,} is more pods than nodeplan expands for one workload (at most "
                         f"{MAX_WORKLOAD_PODS:,})", field=f"{spec.path}.{field}")
    return value


def _pod_count(kind: str, spec: RawObject) -> int:
    if kind == "Job":
        if spec.bool("suspend"):
            return 0
        parallelism = _count(spec, "parallelism", 1)
        return min(parallelism, _count(spec, "completions", parallelism))
    return _count(spec, "replicas", 1)


def expand_workload(raw: Mapping[str, Any]) -> list[Pod]:
    """The pending pods a workload's controller would create (errors carry the workload's field path)."""
    obj = RawObject(raw)
    kind = obj.str("kind")
    meta = obj.obj("metadata")
    name = meta.str("name")
    namespace = meta.str("namespace", "default")
    spec = obj.obj("spec")
    if kind == "CronJob":
        if spec.bool("suspend"):
            return []
        spec = spec.obj("jobTemplate").obj("spec")
        job_kind = "Job"
    else:
        job_kind = kind
    count = _pod_count(job_kind, spec)
    template = spec.obj("template")
    if not template.data:
        raise InputError("a workload needs a pod template", field=template.path)
    pod_spec = template.obj("spec")
    if not pod_spec.items("containers"):
        raise InputError("a pod template needs at least one container", field=f"{pod_spec.path}.containers")
    fields = Pod.parse_spec(pod_spec)
    template_meta = template.obj("metadata")
    first = Pod(namespace=namespace, name=f"{name}-0", labels=template_meta.string_map("labels"),
                annotations=template_meta.string_map("annotations"), owner_kind=kind, owner_name=name,
                **fields)
    if count == 0:
        return []
    return [first] + [first.model_copy(update={"name": f"{name}-{i}"}) for i in range(1, count)]


def _controlled(obj: Mapping[str, Any]) -> bool:
    refs = RawObject(obj).obj("metadata").items("ownerReferences")
    return any(ref.bool("controller") for ref in refs)


def parse_manifests(objects: Iterable[tuple[str, Any]], *, source: str) -> Snapshot:
    """A Snapshot from ``(file, object)`` pairs: workloads expanded, the rest parsed as a snapshot."""
    passthrough: list[Any] = []
    pods: list[Pod] = []
    files: dict[int, str] = {}
    warnings: list[str] = []
    counts: dict[str, int] = {}
    for file, obj in objects:
        if not isinstance(obj, Mapping) or not obj.get("kind"):
            warnings.append(f"{file}: skipped a document that is not a Kubernetes object")
            continue
        counts[file] = counts.get(file, 0) + 1
        name = check_identity(obj, file=file, origin=f"object {counts[file]}")
        try:
            controlled = _controlled(obj)
        except InputError as err:
            raise err.located(file=file, obj=name) from None
        if controlled:
            continue
        if obj["kind"] in WORKLOAD_KINDS:
            try:
                pods.extend(expand_workload(obj))
            except InputError as err:
                raise err.located(file=file, obj=name) from None
        else:
            files[len(passthrough)] = file
            passthrough.append(obj)
    snap = _parse_each_file(passthrough, files, source=source)
    seen: dict[str, str] = {p.key: "Pod" for p in snap.pods}
    for pod in pods:
        if pod.key in seen:
            raise InputError(f"pod {pod.key} would exist twice (from {seen[pod.key]} and {pod.owner_kind} "
                             f"{pod.namespace}/{pod.owner_name})", file=source)
        seen[pod.key] = f"{pod.owner_kind} {pod.namespace}/{pod.owner_name}"
    return snap.model_copy(update={"pods": snap.pods + tuple(pods),
                                   "warnings": tuple(warnings) + snap.warnings})


def _parse_each_file(objects: list[Any], files: dict[int, str], *, source: str) -> Snapshot:
    """``parse_objects`` over every file's objects at once (a Pod in one file may use a claim from
    another), after a pass per file so that an error names the file it is in."""
    by_file: dict[str, list[Any]] = {}
    for i, obj in enumerate(objects):
        by_file.setdefault(files[i], []).append(obj)
    skipped: dict[str, int] = {}
    for file, objs in by_file.items():
        parse_objects(objs, source=file)
        for obj in objs:
            if obj["kind"] not in SNAPSHOT_KINDS:
                skipped[obj["kind"]] = skipped.get(obj["kind"], 0) + 1
    warnings = tuple(f"{source}: skipped {n} object(s) of kind {k} (not used for placement)"
                     for k, n in sorted(skipped.items()))
    return parse_objects(objects, source=source).model_copy(update={"warnings": warnings})


def load_manifests(path: str | Path) -> Snapshot:
    """Load a directory (recursively) or one multi-document file of manifests."""
    path = Path(path)
    if path.is_dir():
        files = manifest_files(path)
        if not files:
            raise InputError("no *.yaml, *.yml or *.json files in directory", file=str(path))
    else:
        files = [path]
    pairs = [(str(f), doc) for f in files for doc in read_documents(f)]
    return parse_manifests(pairs, source=str(path))


def looks_like_manifests(documents: list[Any]) -> bool:
    """Is a single file manifests (``helm template`` output) rather than ``kubectl get`` output?

    It is when it holds a workload to expand and nothing only a live cluster has: no Nodes, no
    NodeClaims, no Pod bound to a node or owned by a controller.
    """
    kinds = {d.get("kind") for d in documents if isinstance(d, Mapping) and isinstance(d.get("kind"), str)}
    if not kinds & WORKLOAD_KINDS or kinds & {"Node", "NodeClaim"}:
        return False
    for doc in documents:
        if isinstance(doc, Mapping) and doc.get("kind") == "Pod":
            spec, meta = doc.get("spec"), doc.get("metadata")
            if (isinstance(spec, Mapping) and spec.get("nodeName")) or (
                    isinstance(meta, Mapping) and meta.get("ownerReferences")):
                return False
    return True


def load_input(path: str | Path, documents: list[Any] | None = None) -> tuple[Snapshot, str]:
    """A snapshot or manifests, whichever ``path`` holds: ``(snapshot, "snapshot" | "manifests")``.

    A directory is manifests; a file is manifests when ``looks_like_manifests`` says so (``helm template``
    output), otherwise a snapshot exactly as ``model.snapshot.load_snapshot`` reads it. ``documents``:
    the file's documents when the caller has already read them.
    """
    path = Path(path)
    if path.is_dir():
        return load_manifests(path), "manifests"
    docs = read_documents(path) if documents is None else documents
    if looks_like_manifests(docs):
        return parse_manifests(((str(path), d) for d in docs), source=str(path)), "manifests"
    return parse_objects(docs, source=str(path)), "snapshot"
