"""One place for CP-SAT solver parameters, so every model in nodeplan runs the same way."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ortools.sat.python import cp_model


class CpModel(cp_model.CpModel):
    """A CP-SAT model without OR-Tools' camelCase aliases. ``CpModel.__init__`` binds a deprecated alias for each
    of its add_/new_/clear_ methods on every instance (0.2 ms a model here), and column generation builds a
    pricing model per bin type and round: about 0.3 s of the controller's CPU in a 1,000-pod scale-out.
    nodeplan calls only the snake_case names."""

    def _add_pre_pep8_methods(self) -> None:
        pass


def make_solver(time_limit: float, seed: int, workers: int, deterministic: bool) -> cp_model.CpSolver:
    """A CP-SAT solver. ``deterministic`` runs one search worker: same input and options give the same
    answer whenever the search ends before its time limit (racing workers would not). On five 100-pod
    batches one worker proved optimality within 2x of two racing workers and faster than two interleaved
    ones; the second core goes to column generation's pricing threads instead."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.05)
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = 1 if deterministic else max(workers, 1)
    return solver


#: a stalled search waits this many times as long as its best plan took (``SearchStop``). Once was too little:
#: a consolidation target whose plans came at 0.96 s and 2.09 s stopped at 1.96 s, 4.8 % dearer after the move
STALL_PATIENCE = 2.0
#: ... and at least this many seconds. Searches that accept a decision gap (the consolidation model, the pattern
#: master, the large-neighbourhood search) stall this way; exact runs keep their time limit
STALL_SECONDS = 1.5


def stalled(started: float, last: float, now: float, stall: float) -> bool:
    """Has a search that began at ``started`` and last improved at ``last`` gone without a better plan for
    ``STALL_PATIENCE`` times as long as that took, and at least ``stall`` seconds?"""
    return now - last >= max(stall, STALL_PATIENCE * (last - started))


class SearchStop:
    """Stops an interleaved CP-SAT search from a watcher thread, not from its solution callback: OR-Tools 9.15
    aborts the whole process (``Check failed: solution->size() == postsolve_mapping.size()``) when
    ``stop_search`` is called from the callback of a solution found while loading a complete hint with
    ``interleave_search`` on (seen once in the controller: a consolidation warm start already within the
    decision gap).

    The callback calls ``improved()`` on every solution, ``enough=True`` when that plan ends the search. With
    ``stall`` (seconds), the search also stops once it has gone ``STALL_PATIENCE`` times as long without a
    better plan as it took to find its best one, and at least ``stall`` seconds (before its first plan only
    the time limit applies): a search that finds nothing more in that time rarely does later, and running to
    the time limit was most of the controller's CPU (the budget-free consolidation target of the
    bench-controller scale-down: best plan at 1.1 s, then 4.7 s more of two cores on nothing). The stall is
    wall-clock, as the time limit is, so it is only for decisions that accept a gap (``--decision-gap``);
    exact runs keep their limit.

    A search without interleaved subsolvers (one worker, or racing ones) is stopped in its callback, at once
    (``solve_stopping``): a deterministic single-worker search then keeps its same-input, same-plan guarantee
    (a watcher's stop lands a few solutions later, when it lands).

    Use as a context manager around ``solver.solve``."""

    def __init__(self, solver: cp_model.CpSolver, stall: float | None = None) -> None:
        self._solver, self._stall = solver, stall
        self._started = self._last = 0.0  # set on entry
        self._found = False
        self._wake = threading.Event()
        self._over = False
        self._thread = threading.Thread(target=self._watch, name="cp-sat-stop", daemon=True)
        #: why the search was stopped: "enough", "stalled" or None (it ended by itself or at its limit)
        self.reason: str | None = None

    def improved(self, enough: bool = False) -> None:
        self._last, self._found = time.monotonic(), True
        if enough and self.reason is None:
            self.reason = "enough"
            self._wake.set()

    def __enter__(self) -> SearchStop:
        self._started = self._last = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._over = True
        self._wake.set()
        self._thread.join()

    def _watch(self) -> None:
        while True:
            self._wake.wait(0.05 if self._stall is not None else None)
            if self._over:
                return
            if self.reason == "enough":
                self._solver.stop_search()
                return
            now, last = time.monotonic(), self._last
            if self._stall is not None and self._found and stalled(self._started, last, now, self._stall):
                self.reason = "stalled"
                self._solver.stop_search()
                return


class _Reporter(cp_model.CpSolverSolutionCallback):
    def __init__(self, stop: SearchStop, enough: Callable[[float], bool] | None, at_once: bool) -> None:
        super().__init__()
        self._stop, self._enough, self._at_once = stop, enough, at_once

    def on_solution_callback(self) -> None:
        enough = self._enough is not None and self._enough(self.objective_value)
        self._stop.improved(enough=enough)
        if enough and self._at_once:
            self.stop_search()


def solve_stopping(solver: cp_model.CpSolver, model: cp_model.CpModel, enough: Callable[[float], bool] | None = None,
                   stall: float | None = None) -> tuple[cp_model.CpSolverStatus, SearchStop]:
    """``solver.solve(model)``, stopped (by ``SearchStop``) at the first solution whose objective value
    ``enough`` accepts, or once the search stalls. Returns the status and why it stopped."""
    with SearchStop(solver, stall=stall) as stop:
        status = solver.solve(model, _Reporter(stop, enough, at_once=not solver.parameters.interleave_search))
    return status, stop
