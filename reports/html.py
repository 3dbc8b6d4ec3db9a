"""``nodeplan solve --report report.html``: one self-contained HTML page (inline CSS, no scripts, no assets).

It shows every node as two bars (cpu, memory), each filled segment by segment by the pods placed there
(one colour per workload, DaemonSet overhead hatched grey, pods already running on an existing node plain
grey); the cost breakdown by NodePool / instance type / zone / capacity type; the plan beside Karpenter's
greedy algorithm and the certified lower bound; and the unschedulable pods with their reasons.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from model.inflight import node_views
from model.plan import ProvisioningPlan
from model.plandiff import HOURS_PER_MONTH
from model.pod import Pod
from model.quantity import format_quantity, quantity_int
from model.resources import CPU, MEMORY, Resources
from model.snapshot import Snapshot

#: Workload colours, in order of first appearance (sorted workload names); saturated so a screenshot test
#: can find them. Colour i is PALETTE[i % len(PALETTE)].
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
DAEMON_COLOUR = "#9e9e9e"
RUNNING_COLOUR = "#c7c7c7"
RESOURCES = (CPU, MEMORY)

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:24px;color:#222;
background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.muted{color:#666}.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:130px}
.card b{display:block;font-size:20px}
table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.cmp{display:grid;grid-template-columns:150px 520px 150px;gap:6px 10px;align-items:center}
.cmpbar{height:18px;border-radius:3px}
.node{display:grid;grid-template-columns:330px 60px 520px 190px;gap:2px 10px;align-items:center;margin:0 0 10px}
.node .name{font-weight:600}.node .meta{font-size:12px;color:#666}
.bar{display:flex;height:16px;width:520px;background:#f1f1f1;border:1px solid #bbb;border-radius:3px;
overflow:hidden}
.seg{height:100%;box-sizing:border-box;border-right:1px solid #fff}
.daemon{background:repeating-linear-gradient(45deg,#9e9e9e 0 4px,#bdbdbd 4px 8px)}
.legend span{display:inline-block;margin:0 14px 4px 0}
.swatch{display:inline-block;width:12px;height:12px;vertical-align:-1px;margin-right:4px;border-radius:2px}
.bad{color:#b00020}
"""


@dataclass(frozen=True)
class Segment:
    """A stretch of a node's bar: one workload's pods on that node (or DaemonSet overhead, or running pods)."""

    label: str
    amount: dict[str, int]
    colour: str
    css_class: str = "seg"
    pods: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeBar:
    name: str
    meta: str
    allocatable: dict[str, int]
    segments: tuple[Segment, ...]


def _workload(pod: Pod | None, key: str) -> str:
    if pod is None:
        return key.rsplit("-", 1)[0]
    return f"{pod.namespace}/{pod.owner_name}" if pod.owner_name else pod.key


def _fmt(resource: str, value: int) -> str:
    return format_quantity(resource, value) if value else "0"


def workload_colours(workloads: Sequence[str]) -> dict[str, str]:
    return {w: PALETTE[i % len(PALETTE)] for i, w in enumerate(sorted(set(workloads)))}


def node_bars(plan: ProvisioningPlan, snapshot: Snapshot) -> tuple[list[NodeBar], dict[str, str]]:
    """Bars for the new nodes, then for existing nodes that receive pending pods."""
    pods = {p.key: p for p in snapshot.pods}
    placed = [k for c in plan.node_claims for k in c.pods] + [k for n in plan.existing_nodes for k in n.pods]
    colours = workload_colours([_workload(pods.get(k), k) for k in placed])
    bars = []
    for claim in plan.node_claims:
        allocatable = {r: quantity_int(r, claim.allocatable.get(r, "0")) for r in RESOURCES}
        requested = {r: quantity_int(r, claim.requests.get(r, "0")) for r in RESOURCES}
        segments = _pod_segments(claim.pods, pods, colours)
        daemon = {r: requested[r] - sum(s.amount[r] for s in segments) for r in RESOURCES}
        if any(v > 0 for v in daemon.values()):
            segments.insert(0, Segment("DaemonSet overhead", daemon, DAEMON_COLOUR, "seg daemon"))
        meta = (f"{claim.node_pool} · {claim.instance_type} · {claim.zone} · {claim.capacity_type} · "
                f"{claim.price:.4f} $/h")
        bars.append(NodeBar(claim.name, meta, allocatable, tuple(segments)))
    views = {v.node.name: v for v in node_views(snapshot)}  # in-flight NodeClaims included
    for assignment in plan.existing_nodes:
        view = views.get(assignment.name)
        if view is None:
            continue
        node = view.node
        running = Resources()
        for pod in snapshot.pods_on(node.name):
            running = running + pod.requests
        segments = _pod_segments(assignment.pods, pods, colours)
        if running:
            segments.insert(0, Segment("already running", {r: running[r] for r in RESOURCES}, RUNNING_COLOUR))
        kind = "in-flight NodeClaim" if view.inflight else "existing node"
        bars.append(NodeBar(node.name, f"{kind} · {node.nodepool or 'no NodePool'} · free capacity",
                            {r: node.allocatable[r] for r in RESOURCES}, tuple(segments)))
    return bars, colours


def _pod_segments(keys: Sequence[str], pods: Mapping[str, Pod], colours: Mapping[str, str]) -> list[Segment]:
    """One segment per workload on the node (a node may hold hundreds of pods: one sliver each would be
    unreadable), in workload order so equal colours sit together."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        groups[_workload(pods.get(key), key)].append(key)
    out = []
    for workload in sorted(groups):
        members = groups[workload]
        amount = {r: sum(pods[k].requests[r] for k in members if k in pods) for r in RESOURCES}
        label = members[0] if len(members) == 1 else f"{workload} ({len(members)} pods)"
        out.append(Segment(label, amount, colours[workload], pods=tuple(members)))
    return out


def _bar(bar: NodeBar, resource: str) -> tuple[str, str]:
    """The bar for one resource, and its ``used / allocatable (share)`` label."""
    total = bar.allocatable[resource]
    cells = []
    used = 0
    for seg in bar.segments:
        amount = seg.amount[resource]
        used += amount
        width = 100 * amount / total if total else 0
        if width <= 0:
            continue
        title = f"{seg.label}: {_fmt(resource, amount)} {resource}"
        cells.append(f'<div class="{seg.css_class}" style="width:{width:.3f}%;background-color:{seg.colour}" '
                     f'title="{escape(title)}"></div>')
    share = used / total if total else 0
    label = f"{_fmt(resource, used)} / {_fmt(resource, total)} ({share:.0%})"
    return f'<div class="bar">{"".join(cells)}</div>', f'<div class="meta">{escape(label)}</div>'


def _money(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f} $/h"


def render_html(plan: ProvisioningPlan, snapshot: Snapshot, *, title: str = "nodeplan plan") -> str:
    bars, colours = node_bars(plan, snapshot)
    cost = plan.cost
    gap = "–" if cost.gap is None else f"{cost.gap:.2%}"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{escape(title)}</h1>",
           f'<div class="muted">{escape(snapshot.source)} · status {plan.solver.status} · '
           f"{len(plan.node_claims)} new node(s) · solved in {plan.solver.wall_seconds:.2f} s</div>",
           '<div class="cards">']
    cards = [("cost", f"{cost.total:.4f} $/h"), ("per month", f"{cost.total * HOURS_PER_MONTH:.2f} $"),
             ("lower bound", _money(cost.lower_bound)), ("gap to bound", gap),
             ("greedy (Karpenter)", _money(cost.greedy)),
             ("unschedulable", str(len(plan.unschedulable)))]
    out += [f'<div class="card">{escape(k)}<b>{escape(v)}</b></div>' for k, v in cards]
    out.append("</div>")
    out += _comparison(plan)
    out += _breakdown(plan)
    out.append(f"<h2>Nodes ({len(bars)})</h2>")
    out.append('<div class="legend">' + "".join(
        f'<span><i class="swatch" style="background-color:{c}"></i>{escape(w)}</span>'
        for w, c in colours.items())
        + f'<span><i class="swatch daemon"></i>DaemonSet overhead</span>'
        f'<span><i class="swatch" style="background-color:{RUNNING_COLOUR}"></i>already running</span></div>')
    for bar in bars:
        for i, resource in enumerate(RESOURCES):
            head = (f'<div><div class="name">{escape(bar.name)}</div><div class="meta">{escape(bar.meta)}</div></div>'
                    if i == 0 else "<div></div>")
            bar_div, label_div = _bar(bar, resource)
            out.append(f'<div class="node">{head}<div class="meta">{resource}</div>{bar_div}{label_div}</div>')
    out += _unschedulable(plan)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _comparison(plan: ProvisioningPlan) -> list[str]:
    cost = plan.cost
    rows = [("this plan", cost.total, "#1f77b4"), ("lower bound", cost.lower_bound, "#2ca02c")]
    if cost.greedy is not None:
        rows.append(("greedy (Karpenter)", cost.greedy, "#ff7f0e"))
    top = max(v for _, v, _ in rows) or 1.0
    out = ["<h2>Plan vs greedy vs lower bound</h2>", '<div class="cmp">']
    for name, value, colour in rows:
        out.append(f"<div>{escape(name)}</div><div><div class=\"cmpbar\" style=\"width:{100 * value / top:.2f}%;"
                   f"background-color:{colour}\"></div></div><div class=\"n\">{value:.4f} $/h</div>")
    out.append("</div>")
    return out


def _breakdown(plan: ProvisioningPlan) -> list[str]:
    groups: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for c in plan.node_claims:
        groups[(c.node_pool, c.instance_type, c.zone, c.capacity_type)].append(c.price)
    total = plan.cost.total or 1.0
    out = ["<h2>Cost breakdown</h2>", "<table><tr><th>NodePool</th><th>instance type</th><th>zone</th>"
           "<th>capacity</th><th class=n>nodes</th><th class=n>$/h each</th><th class=n>$/h</th>"
           "<th class=n>$/month</th><th class=n>share</th></tr>"]
    for (pool, itype, zone, ctype), prices in sorted(groups.items()):
        subtotal = sum(prices)
        cells = [escape(pool), escape(itype), escape(zone), escape(ctype)]
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells)
                   + f"<td class=n>{len(prices)}</td><td class=n>{prices[0]:.4f}</td><td class=n>{subtotal:.4f}</td>"
                   f"<td class=n>{subtotal * HOURS_PER_MONTH:.2f}</td><td class=n>{subtotal / total:.1%}</td></tr>")
    out.append(f"<tr><th>total</th><th></th><th></th><th></th><th class=n>{len(plan.node_claims)}</th><th></th>"
               f"<th class=n>{plan.cost.total:.4f}</th><th class=n>{plan.cost.total * HOURS_PER_MONTH:.2f}</th>"
               "<th></th></tr></table>")
    return out


def _unschedulable(plan: ProvisioningPlan) -> list[str]:
    out = [f"<h2>Unschedulable pods ({len(plan.unschedulable)})</h2>"]
    if not plan.unschedulable:
        return [*out, '<p class="muted">Every pending pod has a node.</p>']
    out.append("<table><tr><th>pod</th><th>reason</th></tr>")
    out += [f'<tr><td class="bad">{escape(u.pod)}</td><td>{escape(u.reason)}</td></tr>' for u in plan.unschedulable]
    out.append("</table>")
    return out
