"""Output options as kubectl spells them: ``-o/--output`` is the format, ``--output-file`` the file.

Every command that prints a plan or a report takes both. ``-o`` once named the file, so ``solve snap -o json``
silently wrote a file called ``json``; a value that is not a format now fails at once, and a value that looks
like a file name is told about ``--output-file``.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from reports.atomic import write_atomic


class Format(StrEnum):
    """A plan's formats: ``table`` and ``wide`` (more columns) for people, ``json`` and ``yaml`` for tools."""

    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


class DiffFormat(StrEnum):
    """``nodeplan diff``: ``markdown`` is the pull-request comment."""

    table = "table"
    markdown = "markdown"
    json = "json"
    yaml = "yaml"


class VerifyFormat(StrEnum):
    """``nodeplan verify``: ``table`` lists each violation."""

    table = "table"
    json = "json"
    yaml = "yaml"


class ReportFormat(StrEnum):
    markdown = "markdown"
    json = "json"
    yaml = "yaml"


class DataFormat(StrEnum):
    """Files other commands read back (snapshots, catalogs)."""

    yaml = "yaml"
    json = "json"


class FormatParser:
    """A ``typer.Option`` parser for a format enum whose error says that the file option is ``--output-file``
    (what ``-o`` used to be)."""

    def __init__(self, choices: type[StrEnum]) -> None:
        self.choices = choices

    def __call__(self, value: str) -> StrEnum:
        names = [c.value for c in self.choices]
        if isinstance(value, self.choices):
            return value
        if value in names:
            return self.choices(value)
        hint = f"; to write a file, use --output-file {value}" if any(c in value for c in "./\\") else ""
        raise typer.BadParameter(f"{value!r} is not an output format (one of {', '.join(names)}){hint}")


def format_option(choices: type[StrEnum], what: str) -> Any:
    """The ``-o/--output`` option over ``choices``."""
    names = [c.value for c in choices]
    return typer.Option("-o", "--output", parser=FormatParser(choices), metavar="|".join(names),
                        help=f"Output format: {', '.join(names[:-1])} or {names[-1]} ({what}).")


def output_file_option(what: str) -> Any:
    return typer.Option("--output-file", metavar="FILE", help=f"Write {what} to FILE (atomically).")


PlanFileOpt = Annotated[Path | None, output_file_option(
    "the plan (JSON, or YAML with -o yaml; the table still prints)")]


def emit(text: str, output_file: Path | None) -> None:
    """``text`` to ``output_file`` (temporary file + rename), else stdout."""
    if output_file:
        write_atomic(output_file, text)
    else:
        sys.stdout.write(text)
