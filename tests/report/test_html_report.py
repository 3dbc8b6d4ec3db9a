"""``nodeplan solve --report``: a self-contained HTML page, rendered in headless Chromium and looked at.

The screenshot test needs Debian's ``chromium`` (``hack/install-chromium.sh``, which ``make test`` runs
when it is missing); without it that one test is skipped, never faked.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from model.snapshot import Snapshot
from reports.html import DAEMON_COLOUR, node_bars, render_html
from solver.provision import SolveOptions, SolveResult, solve
from tests.conftest import EXAMPLE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def solved(example_snapshot: Snapshot) -> SolveResult:
    return solve(example_snapshot, SolveOptions(time_limit=10.0))


@pytest.fixture(scope="module")
def html(solved: SolveResult, example_snapshot: Snapshot) -> str:
    return render_html(solved.plan, example_snapshot, title="example")


def test_page_is_self_contained(html: str) -> None:
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html
    for external in ("<script", "<link", "src=", "url(", "@import", "http://", "https://"):
        assert external not in html


def test_page_shows_every_node_cost_bound_greedy_and_unschedulable(solved: SolveResult, html: str) -> None:
    plan = solved.plan
    for claim in plan.node_claims:
        assert f'<div class="name">{claim.name}</div>' in html
    assert html.count('<div class="bar">') == 2 * (len(plan.node_claims) + len(plan.existing_nodes))
    assert f"{plan.cost.total:.4f} $/h" in html and f"{plan.cost.lower_bound:.4f} $/h" in html
    assert plan.cost.greedy is not None and f"{plan.cost.greedy:.4f} $/h" in html
    assert "Cost breakdown" in html and "Plan vs greedy vs lower bound" in html
    assert "default/mainframe-report" in html and "kubernetes.io/arch=s390x" in html


def test_bars_add_up_to_what_the_plan_requests(solved: SolveResult, example_snapshot: Snapshot) -> None:
    bars, colours = node_bars(solved.plan, example_snapshot)
    for bar, claim in zip(bars, solved.plan.node_claims, strict=False):
        assert sorted(k for s in bar.segments for k in s.pods) == claim.pods  # every pod, once
        # node-exporter's overhead, hatched, where it runs (it does not tolerate gpu-batch's taint)
        assert any(s.colour == DAEMON_COLOUR for s in bar.segments) == (claim.node_pool == "general")
        for resource in ("cpu", "memory"):
            assert sum(s.amount[resource] for s in bar.segments) <= bar.allocatable[resource]
    assert len(set(colours.values())) == min(len(colours), 16)


def test_cli_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["solve", str(EXAMPLE), "--time-limit", "5", "-o", "json",
                                      "--report", str(out)])
    assert result.exit_code == 0
    text = out.read_text()
    assert "<title>nodeplan plan: example.yaml</title>" in text and "general-00000" in text


# ------------------------------------------------------------------------------------------ screenshot


def read_png(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into (width, height, pixels)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and interlace == 0 and colour_type in (2, 6)
            channels = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    pixels: list[tuple[int, int, int]] = []
    prev = bytearray(stride)
    for y in range(height):
        filt = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if filt == 1:
                line[i] = (line[i] + a) & 255
            elif filt == 2:
                line[i] = (line[i] + b) & 255
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        pixels.extend(tuple(line[x * channels:x * channels + 3]) for x in range(width))  # type: ignore[misc]
        prev = line
    return width, height, pixels


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (hack/install-chromium.sh installs it)")
def test_screenshot_shows_the_node_bars(solved: SolveResult, example_snapshot: Snapshot, html: str,
                                        tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(html)
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    profile.mkdir()
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
         f"--screenshot={shot}", "--window-size=1280,1800", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert shot.exists(), proc.stderr[-2000:]
    width, height, pixels = read_png(shot)
    assert (width, height) == (1280, 1800)
    counts = Counter(pixels)
    assert len(counts) > 50, "blank screenshot"
    assert counts[(255, 255, 255)] < 0.95 * len(pixels)
    # every workload's colour fills some bar: a node's bar is 520 px wide, so a pod is at least a few pixels
    _, colours = node_bars(solved.plan, example_snapshot)
    for workload, colour in colours.items():
        assert counts[_rgb(colour)] >= 20, f"{workload}'s colour {colour} not on screen"
    # the bars themselves: rows whose pixels in the bar column are mostly bar colours
    bar_colours = {_rgb(c) for c in colours.values()}
    rows_with_bars = sum(1 for y in range(height)
                         if sum(1 for x in range(440, 960) if pixels[y * width + x] in bar_colours) > 50)
    assert rows_with_bars >= 10 * len(solved.plan.node_claims), rows_with_bars


def test_solve_report_names_match_html_ids(html: str) -> None:
    # every bar segment carries a tooltip naming its pod and amount: hovering tells who fills a node
    titles = re.findall(r'title="([^"]+)"', html)
    assert any(t.startswith("shop/") or t.startswith("default/") for t in titles)
    assert all(re.search(r": \S+ (cpu|memory)$", t) for t in titles)
