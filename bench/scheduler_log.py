"""``python -m bench.scheduler_log LOG...``: what the kube-scheduler did during a bench-controller run.

Reads a kube-scheduler log written with ``bench.controller_perf --scheduler-log`` (klog text at the verbosity of
``SCHEDULER_LOG_ARGS``) and reports, per log:

- scheduling attempts, failed ones and binds. kube-scheduler 1.36 writes a failed pod's PodScheduled condition
  (when its message changed: the node counts in it change with every Node event) and clears its nomination
  synchronously in the scheduling loop unless ``SchedulerAsyncAPICalls`` is on (beta, off by default), so each
  such write holds up every pod queued behind it;
- the pods moved back to the active or backoff queue, by the event that moved them (``NodeAdd``,
  ``AssignedPodDelete`` — which a moved or cleared nomination raises too —, ``BackoffComplete``...);
- how long new pods waited for their first attempt, by the 10 s in which they were created: the delay before a
  pod can be reported Unschedulable, which Karpenter and nodeplan both wait for before they provision it;
- cascades: each burst of ``AssignedPodDelete`` moves (a bound pod deleted, or a nomination moved or cleared:
  kube-scheduler then requeues every pending pod), with the pod whose failed attempt came just before it and the
  event that had queued that pod. In bench-controller's scale-outs some start while nodeplan writes a
  registration round's nominations (``controller.lifecycle``), with a pod the scheduler still had queued.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

#: a klog text line: severity, MMDD, time, thread, file:line, the quoted message, then key="value" pairs
_LINE = re.compile(r'^[IWE](\d{4}) (\d\d:\d\d:\d\d\.\d+)\s+\d+ (\S+)\] "((?:[^"\\]|\\.)*)"(.*)$')
_FIELD = re.compile(r'(\w[\w ]*?)="((?:[^"\\]|\\.)*)"')
#: moves closer together than this are one cascade (a MoveAll logs one line per pod within milliseconds)
CASCADE_GAP = 0.05
#: new pods are grouped by the span of this many seconds they were created in
WAIT_BUCKET = 10


@dataclass(frozen=True)
class Line:
    at: float
    message: str
    fields: dict[str, str]

    @property
    def pod(self) -> str:
        return self.fields.get("pod", "")


def lines(text: Iterable[str]) -> Iterator[Line]:
    """The log's klog lines as (seconds since the first day's midnight, message, fields); others are skipped."""
    first: datetime | None = None
    for raw in text:
        match = _LINE.match(raw)
        if match is None:
            continue
        when = datetime.strptime(f"2000{match.group(1)} {match.group(2)}", "%Y%m%d %H:%M:%S.%f")
        if first is None:
            first = when.replace(hour=0, minute=0, second=0, microsecond=0)
        yield Line((when - first).total_seconds(), match.group(4), dict(_FIELD.findall(match.group(5))))


@dataclass
class Cascade:
    at: float
    moved: int
    cleared_by: str = ""
    queued_by: str = ""


@dataclass
class Report:
    attempts: int = 0
    failed: int = 0
    bound: int = 0
    moves: Counter[str] = field(default_factory=Counter)
    #: creation bucket start → each new pod's wait for its first attempt (s)
    first_waits: dict[int, list[float]] = field(default_factory=dict)
    cascades: list[Cascade] = field(default_factory=list)


def analyse(log: Iterable[Line]) -> Report:
    report = Report()
    added: dict[str, float] = {}
    queued_by: dict[str, str] = {}  # pod → the event that last moved it to the active or backoff queue
    queued_at_attempt: dict[str, str] = {}  # pod → that event, as it stood at the pod's last attempt
    last_failure = ""
    for line in log:
        pod, message = line.pod, line.message
        if message == "Add event for unscheduled pod":
            added.setdefault(pod, line.at)
        elif message == "Attempting to schedule pod":
            report.attempts += 1
            queued_at_attempt[pod] = queued_by.get(pod, "")
            if pod in added:
                created = added.pop(pod)
                bucket = int(created // WAIT_BUCKET) * WAIT_BUCKET
                report.first_waits.setdefault(bucket, []).append(line.at - created)
        elif message.startswith("Unable to schedule pod"):
            report.failed += 1
            last_failure = pod
        elif message == "Successfully bound pod to node":
            report.bound += 1
        elif message.startswith("Pod moved to an internal scheduling queue"):
            event, queue = line.fields.get("event", ""), line.fields.get("queue", "")
            if queue == "Unschedulable":
                continue
            report.moves[event] += 1
            queued_by[pod] = event
            if event == "AssignedPodDelete":
                cascade = report.cascades[-1] if report.cascades else None
                if cascade is None or line.at - cascade.at > CASCADE_GAP:
                    report.cascades.append(Cascade(line.at, 0, last_failure, queued_at_attempt.get(last_failure, "")))
                report.cascades[-1].moved += 1
                report.cascades[-1].at = line.at
    return report


def render(name: str, report: Report) -> str:
    out = [f"## {name}",
           f"attempts {report.attempts}, failed {report.failed}, bound {report.bound}",
           "pods moved to the active or backoff queue, by event: "
           + ", ".join(f"{event} {n}" for event, n in report.moves.most_common())]
    out.append("new pods' wait for a first attempt, by when they were created:")
    out += [f"  {_clock(start)} {len(v)} pods: median {statistics.median(v):.2f} s, max {max(v):.2f} s"
            for start, v in sorted(report.first_waits.items())]
    out.append(f"cascades (AssignedPodDelete bursts): {len(report.cascades)}")
    out += [f"  {_clock(c.at)} moved {c.moved} pods; the failed attempt before it: {c.cleared_by or '?'}, queued by "
            f"{c.queued_by or '?'}" for c in report.cascades]
    return "\n".join(out)


def _clock(seconds: float) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{int(hours):02d}:{int(minutes):02d}:{secs:06.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.logs:
        try:
            with path.open(errors="replace") as text:
                report = analyse(lines(text))
        except OSError as err:
            print(f"error: {path}: {err.strerror}", file=sys.stderr)
            return 2
        print(render(path.name, report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
