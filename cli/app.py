"""``nodeplan`` — the command line.

Exit codes: 0 success; 1 the verifier found violations; 2 bad input (one line naming file, object, field).
Data goes to stdout (or ``--output-file``; ``-o`` is the format, as in kubectl); progress and warnings go to stderr.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console

from cli import command_started
from cli.capture import snapshot_cmd
from cli.catalog import app as catalog_app
from cli.diff import diff_cmd, solve_progress
from cli.output import Format, PlanFileOpt, VerifyFormat, emit, format_option, output_file_option
from cli.run import crds_cmd, run_cmd
from cli.settings import COMMAND as RUN_COMMAND
from cli.shadow_report import shadow_report_cmd
from model.disruption import DisruptionPlan
from model.durations import parse_time
from model.errors import InputError
from model.instancetype import InstanceType
from model.manifests import load_input
from model.plan import ProvisioningPlan
from model.snapshot import Snapshot, read_documents
from providers.catalog_file import load_catalog
from providers.kwok import kwok_catalog
from reports.atomic import check_writable, interruptible, write_atomic
from reports.html import render_html
from reports.terminal import render_disruption, render_plan
from solver.disruption.consolidate import ConsolidateOptions
from solver.disruption.plan import ConsolidationResult, consolidate
from solver.disruption.verify import verify_disruption
from solver.gcpause import paused_collection
from solver.provision import SolveOptions, solve
from solver.rules.preferences import PreferencePolicy
from solver.verify import verify
from solver.verify.replay import replay

app = typer.Typer(help="Kubernetes node provisioning decided by an exact CP-SAT model.",
                  no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None)
stderr = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from controller.metrics import build_commit, build_version  # only here: it loads prometheus_client

        typer.echo(f"nodeplan {build_version()} (commit {build_commit()})")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and source commit, then exit.")] = False,
) -> None:
    """Kubernetes node provisioning decided by an exact CP-SAT model."""
    interruptible()  # SIGINT/SIGTERM: one line, exit 130/143, no partial output file


class Compare(StrEnum):
    greedy = "greedy"


def _fail_input(err: InputError) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(2)


def _catalog(path: Path | None) -> tuple[InstanceType, ...]:
    return load_catalog(path) if path else kwok_catalog()


def _load(snapshot: Path, catalog: Path | None, *, quiet: bool = False) -> Snapshot:
    loaded = load_input(snapshot)[0].with_catalog(_catalog(catalog))  # a snapshot file or manifests
    for warning in () if quiet else loaded.warnings:
        typer.echo(f"warning: {warning}", err=True)
    return loaded


def _write(data: dict[str, Any], fmt: Format, output_file: Path | None) -> None:
    """A plan as YAML (``-o yaml``) or JSON (every other format) to ``output_file``, else stdout."""
    emit(yaml.safe_dump(data, sort_keys=False) if fmt is Format.yaml else json.dumps(data, indent=2) + "\n",
         output_file)


def _console() -> Console:
    """stdout for tables: the terminal's width, 160 columns into a pipe or file (rich would pick 80)."""
    return Console(width=None if sys.stdout.isatty() else 160)


SnapshotArg = Annotated[Path, typer.Argument(
    metavar="SNAPSHOT", help="Cluster snapshot (kubectl get -o yaml|json output), or manifests: a directory or "
    "helm template output.")]
CatalogOpt = Annotated[Path | None, typer.Option("--catalog", help="Instance catalog file (default: built-in KWOK).")]


@app.command()
def solve_cmd(
    snapshot: SnapshotArg,
    catalog: CatalogOpt = None,
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.1,
                                              help="Seconds for the whole command, loading included.")] = 10.0,
    seed: Annotated[int, typer.Option(help="CP-SAT random seed (same input + seed ⇒ same plan).")] = 0,
    workers: Annotated[int, typer.Option(min=1, help="CP-SAT workers.")] = 2,
    gap: Annotated[float, typer.Option(min=0.0, help="Stop once within this relative gap of the bound.")] = 0.0,
    fmt: Annotated[Format, format_option(Format, "table and wide print nodes, json and yaml the plan")
                   ] = Format.table,
    output_file: PlanFileOpt = None,
    compare: Annotated[Compare | None, typer.Option("--compare", help="Also show greedy's cost.")] = None,
    preference_policy: Annotated[PreferencePolicy, typer.Option(
        "--preference-policy", help="Respect: preferred node affinity outranks cost (Karpenter's default); "
        "Ignore: cost only; Price: each unit of preference weight is worth --preference-price $/h per pod."
    )] = PreferencePolicy.RESPECT,
    preference_price: Annotated[float, typer.Option("--preference-price", min=0.0,
                                                    help="$/h per unit of preference weight (Price).")] = 0.0,
    report: Annotated[Path | None, typer.Option("--report", help="Also write a self-contained HTML report "
                                                "(node bars, cost breakdown, bound, unschedulable pods).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warnings or progress on stderr.")] = False,
) -> None:
    """Plan new nodes for a snapshot's pending pods and print the plan.

    Example: nodeplan solve fixtures/snapshots/example.yaml --compare greedy --output-file plan.json
    """
    started = command_started()  # the process start: imports and loading count against --time-limit
    try:
        check_writable(output_file, "--output-file")
        check_writable(report, "--report")
        with paused_collection():  # a large snapshot is millions of objects: ``solver.gcpause``
            snap = _load(snapshot, catalog, quiet=quiet)
    except InputError as err:
        raise _fail_input(err) from None
    with solve_progress(f"solving {snapshot} (≤ {time_limit:g} s)",
                        enabled=not quiet and sys.stderr.isatty()) as progress:
        result = solve(snap, SolveOptions(time_limit=time_limit, seed=seed, workers=workers, gap=gap,
                                          started_at=started, preference_policy=preference_policy,
                                          preference_price=preference_price, on_progress=progress))
    data = result.plan.to_json_dict()
    if report:
        write_atomic(report, render_html(result.plan, snap, title=f"nodeplan plan: {snapshot.name}"))
    if fmt in (Format.table, Format.wide):
        if output_file:
            _write(data, Format.json, output_file)
        render_plan(result.plan, _console(), compare_greedy=compare is Compare.greedy, wide=fmt is Format.wide)
    else:
        _write(data, fmt, output_file)


def _now(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    parsed = parse_time(value)
    if parsed is None:
        raise InputError(f"--now expects an RFC 3339 time such as 2026-11-29T09:00:00Z, got {value!r}")
    return parsed


def _explain(result: ConsolidationResult) -> list[tuple[str, str]]:
    out = []
    for s in result.state.nodes:
        if s.candidate:
            out.append((s.name, f"candidate ({s.reason}{': ' + s.detail if s.detail else ''})"))
        else:
            out.append((s.name, s.blocked or "not a candidate"))
    return out


@app.command("consolidate")
def consolidate_cmd(
    snapshot: SnapshotArg,
    catalog: CatalogOpt = None,
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.5,
                                              help="Seconds for the whole command, loading included.")] = 10.0,
    now: Annotated[str | None, typer.Option("--now", help="Evaluate budgets, consolidateAfter, expireAfter and "
                                            "do-not-disrupt durations at this RFC 3339 time (default: now).")] = None,
    eviction_price: Annotated[float, typer.Option("--eviction-price", min=0.0, help="$/h one unit of Karpenter "
                                                  "eviction cost is worth (0: any saving justifies a move).")] = 0.0,
    spot_to_spot: Annotated[bool, typer.Option("--spot-to-spot", help="Allow replacing spot nodes with spot "
                                               "nodes (Karpenter's SpotToSpotConsolidation).")] = False,
    yardstick: Annotated[bool, typer.Option("--yardstick/--no-yardstick", help="Also run the Karpenter-style "
                                            "decision (warm start; its savings are reported).")] = True,
    seed: Annotated[int, typer.Option(help="CP-SAT random seed.")] = 0,
    fmt: Annotated[Format, format_option(Format, "wide adds every move; json and yaml print the plan")
                   ] = Format.table,
    output_file: PlanFileOpt = None,
    explain: Annotated[bool, typer.Option("--explain", help="List every node and why it is or is not a "
                                          "candidate.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warnings on stderr.")] = False,
) -> None:
    """Plan consolidation: which nodes to remove, what replaces them, where every evicted pod goes.

    Example: nodeplan consolidate cluster.yaml --now 2026-11-29T09:00:00Z --output-file disruption.json
    """
    started = command_started()  # the process start: imports and loading count against --time-limit
    try:
        check_writable(output_file, "--output-file")
        snap = _load(snapshot, catalog, quiet=quiet)
        result = consolidate(snap, ConsolidateOptions(time_limit=time_limit, now=_now(now), seed=seed,
                                                      eviction_price=eviction_price, spot_to_spot=spot_to_spot,
                                                      yardstick=yardstick, started_at=started))
    except InputError as err:
        raise _fail_input(err) from None
    data = result.plan.to_json_dict()
    if fmt in (Format.table, Format.wide):
        if output_file:
            _write(data, Format.json, output_file)
        render_disruption(result.plan, _console(), _explain(result) if explain else None, wide=fmt is Format.wide)
    else:
        _write(data, fmt, output_file)
    for problem in result.budget_errors:
        typer.echo(f"error: {problem.located(file=str(snapshot))} (the NodePool's disruptions are frozen)", err=True)
    if result.budget_errors:
        raise typer.Exit(2)


@app.command("verify")
def verify_cmd(
    snapshot: SnapshotArg,
    plan: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan file written by nodeplan solve or consolidate "
                                         "--output-file.")],
    catalog: CatalogOpt = None,
    now: Annotated[str | None, typer.Option("--now", help="For a DisruptionPlan: the time it was planned for "
                                            "(RFC 3339; default now).")] = None,
    spot_to_spot: Annotated[bool, typer.Option("--spot-to-spot", help="For a DisruptionPlan: spot-to-spot was "
                                               "allowed.")] = False,
    replay_orders: Annotated[int, typer.Option("--replay", min=0, help="For a ProvisioningPlan: also bind its pods "
                                               "one at a time as the kube-scheduler would, in the planned order and "
                                               "N random ones; exit 1 if an order strands a pod.")] = 0,
    replay_seed: Annotated[int, typer.Option("--replay-seed", help="Seed of the random bind orders.")] = 0,
    fmt: Annotated[VerifyFormat, format_option(VerifyFormat, "table lists each violation; json and yaml a "
                                               "Verification document")] = VerifyFormat.table,
    output_file: Annotated[Path | None, output_file_option("the violations")] = None,
) -> None:
    """Check a plan (ProvisioningPlan or DisruptionPlan) against a snapshot independently of the solver;
    exit 1 listing each violation.

    Example: nodeplan verify fixtures/snapshots/example.yaml plan.json --replay 20
    """
    try:
        check_writable(output_file, "--output-file")
        snap = _load(snapshot, catalog)
        docs = read_documents(plan)
        if len(docs) != 1 or not isinstance(docs[0], dict):
            raise InputError("expected one ProvisioningPlan or DisruptionPlan document", file=str(plan))
        kind = docs[0].get("kind", "ProvisioningPlan")
        model: type[ProvisioningPlan] | type[DisruptionPlan] = (
            DisruptionPlan if kind == "DisruptionPlan" else ProvisioningPlan)
        try:
            parsed = model.model_validate(docs[0])
        except ValidationError as err:
            first = err.errors()[0]
            raise InputError(first["msg"], file=str(plan), obj=model.__name__,
                             field=".".join(str(p) for p in first["loc"])) from None
        at = _now(now)
    except InputError as err:
        raise _fail_input(err) from None
    if isinstance(parsed, DisruptionPlan):
        violations = verify_disruption(snap, parsed, at, spot_to_spot=spot_to_spot)
    else:
        violations = verify(snap, parsed)
    replayed = replay(snap, parsed, orders=replay_orders, seed=replay_seed) \
        if replay_orders and isinstance(parsed, ProvisioningPlan) else None
    lines = [*violations, *(replayed.summary() if replayed else ())]
    if fmt is VerifyFormat.table:
        emit("".join(f"{line}\n" for line in lines), output_file)
    else:
        document = {"kind": "Verification", "plan": str(plan), "valid": not violations and (not replayed or
                                                                                          replayed.ok),
                    "violations": list(violations)}
        if replayed:
            document["replay"] = {"ordersTried": replayed.orders_tried,
                                  "ordersStranding": replayed.orders_stranding, "summary": replayed.summary()}
        _write(document, Format(fmt.value), output_file)
    if violations:
        stderr.print(f"{len(violations)} violation(s)")
    if replayed and not replayed.ok:
        stderr.print(f"{replayed.orders_stranding} of {replayed.orders_tried} bind orders strand a pod")
    if violations or (replayed and not replayed.ok):
        raise typer.Exit(1)
    stderr.print("plan is valid" + (f" in all {replayed.orders_tried} bind orders tried" if replayed else ""))


app.command("diff")(diff_cmd)
app.add_typer(catalog_app, name="catalog")
app.command("snapshot")(snapshot_cmd)
app.command("run", **RUN_COMMAND)(run_cmd)
app.command("crds")(crds_cmd)
app.command("shadow-report")(shadow_report_cmd)

# typer names commands after functions; keep the user-facing name "solve"
app.registered_commands[0].name = "solve"

#: one line per command for ``nodeplan --help``, short enough for 80 columns (click cuts longer ones with "...")
SHORT_HELP = {
    "solve": "Plan new nodes for a snapshot's pending pods.",
    "consolidate": "Plan which nodes to remove or replace.",
    "verify": "Check a plan against a snapshot.",
    "diff": "Compare the plans of two cluster states.",
    "snapshot": "Capture a live cluster into a snapshot file.",
    "run": "Run the in-cluster controller.",
    "crds": "Write the CRDs generated from the models.",
    "shadow-report": "Summarise shadow mode's comparisons.",
}
for _command in app.registered_commands:
    _command.short_help = SHORT_HELP.get(str(_command.name), _command.short_help)


def main() -> None:
    app()
