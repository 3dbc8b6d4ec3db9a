"""The ``nodeplan diff`` command (registered on the app in ``cli/app.py``).

Exit codes: 0 the diff was reported; 1 a gate failed (one line on stderr saying why; the report is still
written); 2 bad input — one line naming the side (base/head), file, object and field.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from cli.output import DiffFormat, emit, format_option, output_file_option
from model.errors import InputError
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog
from reports.atomic import atomic_handle, check_writable
from reports.diff import Catalog, SideError, SideName, compute_diff, gate_failures, load_side
from reports.diff_render import render_diff_markdown, render_diff_terminal
from solver.provision import SolveOptions


@contextmanager
def _progress(*, enabled: bool, delay: float = 1.0) -> Iterator[Progress | None]:
    """A spinner with elapsed time on stderr while a side solves: only on a terminal, never with --quiet,
    and only once the work has taken ``delay`` seconds (quick solves print nothing)."""
    if not enabled:
        yield None
        return
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    lock = threading.Lock()
    finished = False

    def begin() -> None:
        with lock:
            if not finished:
                progress.start()

    timer = threading.Timer(delay, begin)
    timer.daemon = True
    timer.start()
    try:
        yield progress
    finally:
        with lock:
            finished = True
        timer.cancel()
        progress.stop()


ProgressUpdate = Callable[[str, float, float], None]


@contextmanager
def solve_progress(description: str, *, enabled: bool) -> Iterator[ProgressUpdate]:
    """A spinner with elapsed time on stderr around one solve (``nodeplan solve``); the callback it yields
    (``SolveOptions.on_progress``) shows the best plan's cost and the bound as stages finish."""
    with _progress(enabled=enabled) as progress:
        task = progress.add_task(description) if progress is not None else None

        def update(stage: str, cost: float, bound: float) -> None:
            if progress is not None and task is not None:
                progress.update(task, description=f"{description} — after {stage}: best {cost:.4f} $/h, "
                                                  f"bound {bound:.4f} $/h")

        yield update


def _catalog(path: Path | None, side: SideName | None = None) -> Catalog:
    if path is None:
        return Catalog(label="built-in KWOK", instance_types=kwok_catalog())
    try:
        return Catalog(label=str(path), instance_types=load_catalog(path))
    except InputError as err:
        if side is not None:
            raise SideError(side, err) from None
        raise


SideArg = ("Snapshot file (solved on the fly), saved plan JSON (nodeplan solve --output-file), or directory of "
           "manifests; REV:PATH reads it from a git revision.")


def diff_cmd(
    base: Annotated[Path, typer.Argument(metavar="BASE", help=f"Base side. {SideArg}")],
    head: Annotated[Path, typer.Argument(metavar="HEAD", help=f"Head side. {SideArg}")],
    catalog: Annotated[Path | None, typer.Option("--catalog", help="Instance catalog for both sides "
                                                 "(default: built-in KWOK).")] = None,
    base_catalog: Annotated[Path | None, typer.Option("--base-catalog", help="Catalog for the base side only.")]
    = None,
    head_catalog: Annotated[Path | None, typer.Option("--head-catalog", help="Catalog for the head side only.")]
    = None,
    fmt: Annotated[DiffFormat, format_option(DiffFormat, "markdown is the pull-request comment")] = DiffFormat.table,
    output_file: Annotated[Path | None, output_file_option("the report")] = None,
    fail_on_unschedulable: Annotated[bool, typer.Option(
        "--fail-on-unschedulable",
        help="Exit 1 if a pod is unschedulable in head but not in base (new pods included).")] = False,
    max_cost_increase: Annotated[float | None, typer.Option(
        "--max-cost-increase", metavar="PCT", min=0.0,
        help="Exit 1 if head costs more than PCT percent above base.")] = None,
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.1, help="Seconds to solve each side.")]
    = 10.0,
    seed: Annotated[int, typer.Option(help="CP-SAT random seed for both sides.")] = 0,
    width: Annotated[int | None, typer.Option(help="Terminal report width (default: the terminal's).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warnings or progress on stderr (errors and "
                                        "failed gates are still printed).")] = False,
) -> None:
    """Compare the plans for two states: cost, nodes, unschedulable pods, utilisation, gates for CI.

    Example: nodeplan diff main/ pr/ -o markdown --output-file diff.md --fail-on-unschedulable
    --max-cost-increase 10
    """
    try:
        check_writable(output_file, "--output-file")
        shared = _catalog(catalog)
        base_cat = _catalog(base_catalog, "base") if base_catalog else shared
        head_cat = _catalog(head_catalog, "head") if head_catalog else shared
        options = SolveOptions(time_limit=time_limit, seed=seed)
        with _progress(enabled=not quiet and sys.stderr.isatty()) as progress:
            sides = []
            order: list[tuple[SideName, Path, Catalog]] = [("base", base, base_cat), ("head", head, head_cat)]
            for name, path, cat in order:
                task = progress.add_task(f"solving {name} ({path}, ≤ {time_limit:g} s)") if progress else None
                sides.append(load_side(name, path, cat, options))
                if progress and task is not None:
                    progress.remove_task(task)
    except InputError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    for side in sides:
        for warning in () if quiet else side.warnings:
            typer.echo(f"warning: {side.name}: {warning}", err=True)
    diff = compute_diff(*sides)
    failures = gate_failures(diff, fail_on_unschedulable=fail_on_unschedulable, max_cost_increase=max_cost_increase)
    diff = diff.model_copy(update={"gate_failures": failures})
    if diff.catalog_mismatch and not quiet:
        typer.echo(f"warning: catalogs differ: {diff.catalog_mismatch}", err=True)
    data = diff.model_dump(mode="json", by_alias=True)
    if fmt is DiffFormat.table:
        if output_file:
            with atomic_handle(output_file) as handle:
                render_diff_terminal(diff, Console(file=handle, width=width or 120, color_system=None))
        else:
            render_diff_terminal(diff, Console(width=width if width else (None if sys.stdout.isatty() else 120)))
    elif fmt is DiffFormat.markdown:
        emit(render_diff_markdown(diff), output_file)
    else:
        emit(yaml.safe_dump(data, sort_keys=False) if fmt is DiffFormat.yaml else json.dumps(data, indent=2) + "\n",
             output_file)
    if failures:
        typer.echo("gate failed: " + "; ".join(failures), err=True)
        raise typer.Exit(1)
