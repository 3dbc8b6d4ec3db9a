"""Output files written whole or not at all, and refused before the work when they cannot be written.

A plan or report is written to a temporary file beside its destination and renamed over it, so a reader
(or a CI step after an interrupted run) never sees half a file; ``check_writable`` runs before a solve so an
unwritable path costs nothing but an exit 2. ``interruptible`` turns SIGTERM into the same clean exit as
SIGINT: no traceback, temporary files removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import IO

from model.errors import InputError

#: exit status after SIGINT/SIGTERM, as a shell reports a signal (128 + signal number)
INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 143}


def check_writable(path: Path | None, option: str) -> None:
    """Refuse now what ``write_atomic`` would fail on later: a directory, a missing or read-only parent."""
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise InputError(f"{option}: is a directory", file=str(path))
    if not parent.is_dir():
        raise InputError(f"{option}: directory {parent} does not exist", file=str(path))
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{option}: not writable", file=str(path))
    try:  # the only sure test: create (and remove) a file where write_atomic will
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise InputError(f"{option}: cannot write there: {err.strerror or err}", file=str(path)) from None


@contextlib.contextmanager
def atomic_handle(path: Path) -> Iterator[IO[str]]:
    """A text handle on a temporary file that replaces ``path`` when the block ends without an error."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_atomic(path: Path, text: str) -> None:
    with atomic_handle(path) as handle:
        handle.write(text)


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    sys.stderr.write("\ninterrupted\n")
    raise SystemExit(INTERRUPTED.get(signal.Signals(signum), 1))


def interruptible() -> Callable[[int, FrameType | None], None]:
    """Make SIGINT and SIGTERM end the command with one line and 130/143 (``finally`` blocks run, so no
    temporary file stays). Only in the main thread; returns the handler installed."""
    for sig in INTERRUPTED:
        with contextlib.suppress(ValueError):  # not the main thread (tests): leave signals alone
            signal.signal(sig, _exit_on_signal)
    return _exit_on_signal
