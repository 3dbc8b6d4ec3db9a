"""``bench.scheduler_log`` on a kube-scheduler 1.36 log excerpt (klog text, the lines and fields its queue and
scheduling loop write at ``bench.controller_perf.SCHEDULER_LOG_ARGS``' verbosity)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scheduler_log import analyse, lines, main

#: kube-scheduler 1.36.3 lines of one nomination cleared in a failed attempt (bench-controller, aws-like), the pod
#: names shortened, with one line that is not klog's
LOG = (Path(__file__).parents[2] / "fixtures" / "logs" / "kube-scheduler-1.36-excerpt.log").read_text()


def test_the_report_counts_attempts_moves_waits_and_cascades() -> None:
    report = analyse(lines(LOG.splitlines()))
    assert (report.attempts, report.failed, report.bound) == (4, 3, 1)
    assert dict(report.moves) == {"UnschedulablePodAdd": 1, "NodeAdd": 1, "AssignedPodDelete": 3,
                                  "BackoffComplete": 1}  # moves to Unschedulable are not requeues
    assert report.first_waits == {9_810: [pytest.approx(0.000163), pytest.approx(3.000179)]}  # 02:43:30-40
    first, second = report.cascades  # two bursts: two moves 18 µs apart, then one two seconds later
    assert (first.moved, first.cleared_by, first.queued_by) == (2, "perf/web-a", "NodeAdd")
    assert (second.moved, second.cleared_by, second.queued_by) == (1, "perf/web-a", "BackoffComplete")


def test_the_command_reports_each_log_and_names_a_missing_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    log = tmp_path / "aws-like-nodeplan-1000-scheduler.log"
    log.write_text(LOG)
    assert main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "## aws-like-nodeplan-1000-scheduler.log" in out and "cascades (AssignedPodDelete bursts): 2" in out
    assert main([str(tmp_path / "missing.log")]) == 2
    assert "missing.log" in capsys.readouterr().err
