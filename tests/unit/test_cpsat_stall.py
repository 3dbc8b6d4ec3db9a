"""``solver.cpsat.solve_stopping``: a search is stopped from a watcher thread, never from its solution callback
(OR-Tools 9.15 aborts the process when a callback stops an interleaved search at a solution loaded from a
complete hint); a search that stops finding better plans ends long before its time limit with the best plan it
found; one that ends by itself is not reported as stopped."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import time

from ortools.sat.python import cp_model

from solver.cpsat import solve_stopping


def _market_split(seed: int, hinted: bool = False, rows: int = 4, items: int = 36) -> cp_model.CpModel:
    """Cornuéjols–Dawande market split: rows of random weights, each to be hit exactly by one 0/1 choice, as an
    objective of total absolute miss. Plans come at once; proving the best takes CP-SAT minutes. ``hinted``:
    a complete hint (every variable, a feasible plan)."""
    rng = random.Random(seed)
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{i}") for i in range(items)]
    chosen = [rng.random() < 0.5 for _ in x]
    misses = []
    for r in range(rows):
        weights = [rng.randint(0, 99) for _ in range(items)]
        target = sum(weights) // 2
        miss = model.new_int_var(0, sum(weights), f"miss{r}")
        model.add_abs_equality(miss, sum(w * v for w, v in zip(weights, x, strict=True)) - target)
        if hinted:
            model.add_hint(miss, abs(sum(w for w, c in zip(weights, chosen, strict=True) if c) - target))
        misses.append(miss)
    if hinted:
        for v, c in zip(x, chosen, strict=True):
            model.add_hint(v, c)
    model.minimize(sum(misses))
    return model


def _interleaved(time_limit: float) -> cp_model.CpSolver:
    """As the consolidation model runs: deterministic interleaved subsolvers on four workers."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 4
    solver.parameters.interleave_search = True
    return solver


def test_stopping_at_a_hinted_plan_does_not_abort_the_process() -> None:
    """The hint's own plan is already enough: the search ends there, and the process lives (run apart, so an
    abort fails this test instead of ending the test run)."""
    script = textwrap.dedent("""
        from tests.unit.test_cpsat_stall import _interleaved, _market_split
        from solver.cpsat import solve_stopping
        solver = _interleaved(30.0)
        status, stop = solve_stopping(solver, _market_split(seed=3, hinted=True), lambda value: True)
        print(solver.status_name(status), stop.reason)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["FEASIBLE", "enough"]


def test_a_stalled_search_stops_well_before_its_time_limit_with_its_best_plan() -> None:
    solver = _interleaved(120.0)
    began = time.monotonic()
    status, stop = solve_stopping(solver, _market_split(seed=3), stall=0.3)
    assert stop.reason == "stalled"
    assert status == cp_model.FEASIBLE
    assert time.monotonic() - began < 60.0  # a fraction of the limit, however loaded the machine


def test_a_search_that_ends_by_itself_is_not_reported_as_stopped() -> None:
    model = cp_model.CpModel()
    x = model.new_int_var(0, 10, "x")
    model.maximize(x)
    solver = cp_model.CpSolver()
    status, stop = solve_stopping(solver, model, lambda value: value >= 11, stall=0.3)
    assert status == cp_model.OPTIMAL and solver.value(x) == 10
    assert stop.reason is None
