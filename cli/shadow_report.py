"""``nodeplan shadow-report``: what shadow mode recorded over a time window, as Markdown or JSON.

The record file is the JSON-lines file ``nodeplan run --shadow --shadow-record FILE`` appends to
(``controller.shadow``): one ``batch`` record per batch of pending pods (what nodeplan would have launched, what
the other provisioner launched, the pods each left pending) and one ``consolidation`` record per quiet cluster
state (its cost and the cost nodeplan's consolidation decision would reach). Costs are $/h of new nodes; a batch
where either side left pods pending is counted but kept out of the like-for-like totals, since leaving a pod
pending is always cheaper.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from cli.output import ReportFormat, emit, format_option, output_file_option
from model.durations import parse_duration, parse_time
from model.errors import InputError
from reports.atomic import check_writable

NODEPLAN, KARPENTER = "nodeplan", "karpenter"


@dataclass(frozen=True)
class BatchRow:
    time: datetime
    pods: int
    nodeplan_cost: float
    karpenter_cost: float
    nodeplan_claims: int
    karpenter_claims: int
    nodeplan_pending: int
    karpenter_pending: int
    settled: str

    @property
    def comparable(self) -> bool:
        """Both placed every pod: the costs buy the same thing."""
        return self.nodeplan_pending == 0 and self.karpenter_pending == 0


@dataclass(frozen=True)
class ConsolidationRow:
    time: datetime
    cluster_cost: float
    nodeplan_cost: float
    remove: int


@dataclass
class Records:
    batches: list[BatchRow] = field(default_factory=list)
    consolidations: list[ConsolidationRow] = field(default_factory=list)


def _number(record: Mapping[str, Any], path: str, where: dict[str, str]) -> float:
    value: Any = record
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"expected a number, got {value!r}", field=path, **where)
    return float(value)


def _time(record: Mapping[str, Any], where: dict[str, str]) -> datetime:
    parsed = parse_time(str(record.get("time") or ""))
    if parsed is None:
        raise InputError(f"expected an RFC 3339 time, got {record.get('time')!r}", field="time", **where)
    return parsed


def read_records(path: Path, since: datetime | None = None, until: datetime | None = None) -> Records:
    """The records of ``path`` within [since, until]; a malformed line is an ``InputError`` naming it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=str(path)) from None
    out = Records()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = {"file": str(path), "obj": f"line {number}"}
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"not JSON: {err.msg}", **where) from None
        if not isinstance(record, dict):
            raise InputError("expected a JSON object", **where)
        when = _time(record, where)
        kind = record.get("type")
        if kind == "batch":
            row: BatchRow | ConsolidationRow = BatchRow(
                time=when, pods=int(_number(record, "pods", where)),
                nodeplan_cost=_number(record, "nodeplan.cost", where),
                karpenter_cost=_number(record, "karpenter.cost", where),
                nodeplan_claims=len(record[NODEPLAN].get("nodeClaims") or []),
                karpenter_claims=len(record[KARPENTER].get("nodeClaims") or []),
                nodeplan_pending=int(_number(record, "nodeplan.pending", where)),
                karpenter_pending=int(_number(record, "karpenter.pending", where)),
                settled=str(record.get("settled") or ""))
        elif kind == "consolidation":
            row = ConsolidationRow(time=when, cluster_cost=_number(record, "clusterCost", where),
                                   nodeplan_cost=_number(record, "nodeplan.cost", where),
                                   remove=len((record.get(NODEPLAN) or {}).get("remove") or []))
        else:
            raise InputError(f"unknown record type {kind!r} (expected batch or consolidation)", field="type",
                             **where)
        if (since is None or when >= since) and (until is None or when <= until):
            if isinstance(row, BatchRow):
                out.batches.append(row)
            else:
                out.consolidations.append(row)
    return out


def summary(records: Records) -> dict[str, Any]:
    """Totals over the window: like-for-like cost of both deciders, pods each left pending, consolidation."""
    batches = records.batches
    like = [b for b in batches if b.comparable]
    nodeplan, karpenter = sum(b.nodeplan_cost for b in like), sum(b.karpenter_cost for b in like)
    out: dict[str, Any] = {
        "batches": len(batches), "pods": sum(b.pods for b in batches),
        "timedOut": sum(1 for b in batches if b.settled == "timeout"),
        "comparableBatches": len(like),
        "cost": {NODEPLAN: round(nodeplan, 6), KARPENTER: round(karpenter, 6)},
        "saving": round(karpenter - nodeplan, 6),
        "savingPercent": round(100 * (karpenter - nodeplan) / karpenter, 2) if karpenter > 0 else None,
        "cheaper": {NODEPLAN: sum(1 for b in like if b.nodeplan_cost < b.karpenter_cost - 1e-9),
                    KARPENTER: sum(1 for b in like if b.karpenter_cost < b.nodeplan_cost - 1e-9),
                    "equal": sum(1 for b in like if abs(b.nodeplan_cost - b.karpenter_cost) <= 1e-9)},
        "leftPending": {NODEPLAN: sum(b.nodeplan_pending for b in batches),
                        KARPENTER: sum(b.karpenter_pending for b in batches)},
    }
    if records.consolidations:
        last = records.consolidations[-1]
        out["consolidation"] = {"records": len(records.consolidations), "clusterCost": last.cluster_cost,
                                "nodeplanCost": last.nodeplan_cost,
                                "saving": round(last.cluster_cost - last.nodeplan_cost, 6)}
    return out


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def markdown(records: Records, window: tuple[datetime | None, datetime | None]) -> str:
    s = summary(records)
    since, until = (_stamp(w) if w else "—" for w in window)
    pct = f" ({s['savingPercent']:+.2f} %)" if s["savingPercent"] is not None else ""
    lines = [
        "# nodeplan shadow report", "",
        f"Window: {since} to {until}. {s['batches']} batches, {s['pods']} pods "
        f"({s['timedOut']} batches compared before every pod was bound).", "",
        "| | nodeplan | Karpenter |", "|---|---:|---:|",
        f"| new nodes' $/h, {s['comparableBatches']} like-for-like batches | {s['cost'][NODEPLAN]:.4f} | "
        f"{s['cost'][KARPENTER]:.4f} |",
        f"| batches where it was cheaper | {s['cheaper'][NODEPLAN]} | {s['cheaper'][KARPENTER]} |",
        f"| pods left pending | {s['leftPending'][NODEPLAN]} | {s['leftPending'][KARPENTER]} |", "",
        f"nodeplan would have saved {s['saving']:.4f} $/h{pct} on the like-for-like batches "
        f"({s['cheaper']['equal']} cost the same).",
    ]
    if "consolidation" in s:
        c = s["consolidation"]
        lines += ["", f"Consolidation ({c['records']} quiet states): the cluster costs {c['clusterCost']:.4f} $/h; "
                  f"nodeplan's decision would bring it to {c['nodeplanCost']:.4f} $/h (saving {c['saving']:.4f})."]
    if records.batches:
        lines += ["", "| time | pods | nodeplan $/h (nodes) | Karpenter $/h (nodes) | saving | pending n / K |",
                  "|---|---:|---:|---:|---:|---:|"]
        for b in records.batches:
            lines.append(f"| {_stamp(b.time)} | {b.pods} | {b.nodeplan_cost:.4f} ({b.nodeplan_claims}) | "
                         f"{b.karpenter_cost:.4f} ({b.karpenter_claims}) | {b.karpenter_cost - b.nodeplan_cost:+.4f} "
                         f"| {b.nodeplan_pending} / {b.karpenter_pending} |")
    return "\n".join(lines) + "\n"


def _bound(value: str | None, option: str, now: datetime) -> datetime | None:
    """An RFC 3339 time, or a duration back from now (``24h``)."""
    if value is None:
        return None
    parsed = parse_time(value)
    if parsed is not None:
        return parsed
    try:
        seconds = parse_duration(value)
    except ValueError:
        seconds = None
    if seconds is None:
        raise InputError(f"expected an RFC 3339 time or a duration such as 24h, got {value!r}", field=option)
    return datetime.fromtimestamp(now.timestamp() - seconds, UTC)


def report_data(records: Records, window: tuple[datetime | None, datetime | None]) -> dict[str, Any]:
    rows: Iterable[BatchRow] = records.batches
    return {"since": _stamp(window[0]) if window[0] else None,
                       "until": _stamp(window[1]) if window[1] else None, **summary(records),
                       "batchRecords": [{"time": _stamp(b.time), "pods": b.pods, NODEPLAN: b.nodeplan_cost,
                                         KARPENTER: b.karpenter_cost, "pending": {NODEPLAN: b.nodeplan_pending,
                                                                                  KARPENTER: b.karpenter_pending}}
                                        for b in rows]}


def report_json(records: Records, window: tuple[datetime | None, datetime | None]) -> str:
    return json.dumps(report_data(records, window), indent=2) + "\n"


def shadow_report_cmd(
    record: Annotated[Path, typer.Argument(help="The shadow record file (nodeplan run --shadow-record).")],
    since: Annotated[str | None, typer.Option("--since", help="From this RFC 3339 time, or this long ago (24h).")
                     ] = None,
    until: Annotated[str | None, typer.Option("--until", help="Up to this RFC 3339 time, or this long ago.")] = None,
    fmt: Annotated[ReportFormat, format_option(ReportFormat, "markdown for people and pull requests")
                   ] = ReportFormat.markdown,
    output_file: Annotated[Path | None, output_file_option("the report")] = None,
) -> None:
    """Summarise shadow mode's comparisons with the other provisioner over a time window.

    Example: nodeplan shadow-report shadow.jsonl --since 24h -o markdown
    """
    now = datetime.now(UTC)
    try:
        check_writable(output_file, "--output-file")
        window = (_bound(since, "--since", now), _bound(until, "--until", now))
        records = read_records(record, *window)
    except InputError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if fmt is ReportFormat.markdown:
        emit(markdown(records, window), output_file)
    elif fmt is ReportFormat.yaml:
        emit(yaml.safe_dump(report_data(records, window), sort_keys=False), output_file)
    else:
        emit(report_json(records, window), output_file)
