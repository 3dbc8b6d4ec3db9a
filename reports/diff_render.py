"""How a PlanDiff reads: a rich terminal report and a Markdown PR comment (verdict first, detail folded).

The Markdown stays far below GitHub's 65,536-character comment limit: every folded list shows at most
``max_rows`` rows and says how many more the JSON report has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Console
from rich.table import Table

from model.plandiff import PlanDiff, PodChange, SideSummary
from reports.text import markdown, terminal

ICONS = {"unchanged": "✅", "changed": "🔁", "cheaper": "📉", "costlier": "📈", "regression": "❌"}
STYLES = {"unchanged": "green", "changed": "cyan", "cheaper": "green", "costlier": "yellow", "regression": "red"}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _pp(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.1f} pp"


def _gap(side: SideSummary) -> str:
    return "–" if side.gap is None else f"{side.gap:.2%}"


def _placed(value: str | None) -> str:
    return "unschedulable" if value is None else value


def summary_rows(diff: PlanDiff) -> list[tuple[str, str, str, str]]:
    """(metric, base, head, change) — the table both formats open with."""
    b, h = diff.base, diff.head
    percent = f" ({diff.cost.percent:+.1f} %)" if diff.cost.percent is not None else ""
    return [
        ("cost $/h", f"{b.cost_per_hour:.4f}", f"{h.cost_per_hour:.4f}", f"{diff.cost.per_hour:+.4f}{percent}"),
        ("cost $/month", f"{b.cost_per_month:.2f}", f"{h.cost_per_month:.2f}", f"{diff.cost.per_month:+.2f}"),
        ("new nodes", str(b.nodes), str(h.nodes), f"+{diff.nodes_added} / −{diff.nodes_removed}"),
        ("pending pods scheduled", f"{b.scheduled}/{b.pods}", f"{h.scheduled}/{h.pods}",
         f"{h.scheduled - b.scheduled:+d}"),
        ("unschedulable pods", str(b.unschedulable), str(h.unschedulable), f"{h.unschedulable - b.unschedulable:+d}"),
        ("cpu utilisation", _pct(b.cpu_utilisation), _pct(h.cpu_utilisation), _pp(diff.utilisation.cpu.delta)),
        ("memory utilisation", _pct(b.memory_utilisation), _pct(h.memory_utilisation),
         _pp(diff.utilisation.memory.delta)),
        ("lower bound $/h", f"{b.lower_bound:.4f}", f"{h.lower_bound:.4f}", f"{h.lower_bound - b.lower_bound:+.4f}"),
        ("gap to bound", _gap(b), _gap(h), ""),
        ("solver status", b.status, h.status, ""),
    ]


# ------------------------------------------------------------------------------------------------ terminal


def render_diff_terminal(diff: PlanDiff, console: Console) -> None:
    style = STYLES[diff.verdict]
    console.print(f"[bold {style}]{diff.headline}[/]")
    if diff.catalog_mismatch:
        console.print(f"[bold yellow]Catalogs differ:[/] {terminal(diff.catalog_mismatch)}")
    for failure in diff.gate_failures:
        console.print(f"[bold red]Gate failed:[/] {terminal(failure)}")
    table = Table(title="Summary")
    for column, justify in (("", "left"), ("base", "right"), ("head", "right"), ("change", "right")):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in summary_rows(diff):
        table.add_row(*(terminal(cell) for cell in row))
    console.print(table)
    if diff.nodes:
        nodes = Table(title="Node changes")
        for column in ("NodePool", "instance type", "zone", "capacity", "base", "head", "change", "$/h change"):
            nodes.add_column(column, justify="left" if column in ("NodePool", "instance type", "zone") else "right",
                             overflow="fold")
        for c in diff.nodes:
            colour = "green" if c.delta < 0 else "red"
            nodes.add_row(terminal(c.node_pool), terminal(c.instance_type), terminal(c.zone),
                          terminal(c.capacity_type), str(c.base), str(c.head),
                          f"[{colour}]{c.delta:+d}[/]", f"{c.cost_delta_per_hour:+.4f}")
        console.print(nodes)
    _pod_section(console, "Pods that become unschedulable", diff.newly_unschedulable, reason=True)
    _pod_section(console, "Pods that become schedulable", diff.newly_schedulable, reason=False)
    _pod_section(console, "Pods that change NodePool", diff.pool_changes, reason=False)
    if diff.added_pods or diff.removed_pods:
        console.print(f"Pending pods only in head: {len(diff.added_pods)}; only in base: {len(diff.removed_pods)}")
    for name, side in (("base", diff.base), ("head", diff.head)):
        console.print(f"{name}: {terminal(side.source)} ({side.input}, catalog {terminal(side.catalog)})")


def _pod_section(console: Console, title: str, changes: Sequence[PodChange], *, reason: bool) -> None:
    if not changes:
        return
    console.print(f"[bold]{title}: {len(changes)}[/]")
    for c in changes:
        detail = c.reason if reason else f"{_placed(c.base)} → {_placed(c.head)}"
        console.print(f"  {terminal(c.pod)}: {terminal(detail)}", highlight=False)


# ------------------------------------------------------------------------------------------------ markdown


def _cell(text: str) -> str:
    return markdown(text)


def _code(text: str) -> str:
    """Text for a code span, where Markdown, HTML and mentions are inert: only a backtick could end it."""
    return markdown(text) if "`" in text or "\n" in text else text


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> list[str]:
    """A GitHub table; the columns in ``right`` (numbers) right-aligned."""
    aligns = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join(aligns) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>", ""]


def _capped(rows: Sequence[PodChange], max_rows: int, fmt: Callable[[PodChange], list[str]]) -> list[list[str]]:
    out = [fmt(r) for r in rows[:max_rows]]
    if len(rows) > max_rows:
        out.append([f"… and {len(rows) - max_rows} more (see the JSON report)"] + [""] * (len(out[0]) - 1))
    return out


def render_diff_markdown(diff: PlanDiff, *, max_rows: int = 50) -> str:
    """A PR comment: verdict and summary table first, every list folded in ``<details>``."""
    lines = [f"### {ICONS[diff.verdict]} nodeplan: {diff.headline}", ""]
    if diff.catalog_mismatch:
        lines += [f"> [!WARNING]\n> **Catalogs differ:** {_cell(diff.catalog_mismatch)}", ""]
    if diff.gate_failures:
        lines += ["> [!CAUTION]"] + [f"> **Gate failed:** {_cell(f)}  " for f in diff.gate_failures] + [""]
    lines += [*_table(["", "base", "head", "change"], summary_rows(diff), right=(1, 2, 3)), ""]
    if diff.nodes:
        rows = [[c.node_pool, c.instance_type, c.zone, c.capacity_type, str(c.base), str(c.head), f"{c.delta:+d}",
                 f"{c.cost_delta_per_hour:+.4f}"] for c in diff.nodes[:max_rows]]
        if len(diff.nodes) > max_rows:
            rows.append([f"… and {len(diff.nodes) - max_rows} more groups", "", "", "", "", "", "", ""])
        lines += _details(f"Node changes: +{diff.nodes_added} / −{diff.nodes_removed} nodes in "
                          f"{len(diff.nodes)} group(s)",
                          _table(["NodePool", "instance type", "zone", "capacity", "base", "head", "change",
                                  "$/h change"], rows, right=(4, 5, 6, 7)))
    if diff.newly_unschedulable:
        lines += _details(f"Pods that become unschedulable: {len(diff.newly_unschedulable)}",
                          _table(["pod", "was", "reason"],
                                 _capped(diff.newly_unschedulable, max_rows,
                                         lambda c: [c.pod, _placed(c.base), c.reason or ""])))
    if diff.newly_schedulable:
        lines += _details(f"Pods that become schedulable: {len(diff.newly_schedulable)}",
                          _table(["pod", "NodePool", "was unschedulable because"],
                                 _capped(diff.newly_schedulable, max_rows,
                                         lambda c: [c.pod, _placed(c.head), c.reason or ""])))
    if diff.pool_changes:
        lines += _details(f"Pods that change NodePool: {len(diff.pool_changes)}",
                          _table(["pod", "base", "head"],
                                 _capped(diff.pool_changes, max_rows,
                                         lambda c: [c.pod, _placed(c.base), _placed(c.head)])))
    if diff.added_pods or diff.removed_pods:
        body = []
        for title, pods in (("Only in head", diff.added_pods), ("Only in base", diff.removed_pods)):
            if pods:
                shown = ", ".join(f"`{_code(p)}`" for p in pods[:max_rows])
                more = f" … and {len(pods) - max_rows} more" if len(pods) > max_rows else ""
                body.append(f"**{title} ({len(pods)}):** {shown}{more}")
        lines += _details(f"Pending pods on one side only: +{len(diff.added_pods)} / −{len(diff.removed_pods)}",
                          "\n\n".join(body).splitlines())
    sides = [[name, s.source, s.input, s.catalog, s.catalog_fingerprint or "–", s.status]
             for name, s in (("base", diff.base), ("head", diff.head))]
    lines += _details("Inputs and solver", _table(["side", "source", "input", "catalog", "fingerprint", "status"],
                                                  sides))
    return "\n".join(lines).rstrip() + "\n"
