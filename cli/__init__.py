"""The nodeplan command line: one module per command group (typer); decisions live in solver/, output in reports/."""

from __future__ import annotations

import os
import sys
import time

#: the command names whose process ``--time-limit`` counts from (the console script, ``python -m cli.app``)
_PROGRAMS = frozenset({"nodeplan", "app.py"})


def _process_started() -> float | None:
    """``time.monotonic()`` when this process started, when the process is the ``nodeplan`` command itself:
    Python's start-up and the CLI's imports (a second or more on a busy machine) count against
    ``--time-limit``. None elsewhere (tests invoking commands in a long-lived process), or off Linux."""
    if os.path.basename(sys.argv[0] if sys.argv else "") not in _PROGRAMS:
        return None
    try:
        with open("/proc/self/stat", "rb") as stat:
            # fields after the parenthesised command name start at field 3; starttime is field 22
            ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])
        elapsed = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.monotonic() - max(elapsed, 0.0)


#: captured before the CLI's heavy imports (this package is imported first); None when not the command's process
NODEPLAN_STARTED: float | None = _process_started()
_START_TAKEN = False


def command_started() -> float:
    """When the running command started, for its time limit: the process start for the first command of a
    ``nodeplan`` process, now for any later one (or any command run inside another program)."""
    global _START_TAKEN
    if _START_TAKEN or NODEPLAN_STARTED is None:
        return time.monotonic()
    _START_TAKEN = True
    return NODEPLAN_STARTED
