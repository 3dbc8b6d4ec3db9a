"""One place for CP-SAT solver parameters, so every model in nodeplan runs the same way."""

from __future__ import annotations

from ortools.sat.python import cp_model


def make_solver(time_limit: float, seed: int, workers: int, deterministic: bool) -> cp_model.CpSolver:
    """A CP-SAT solver. ``deterministic`` interleaves the workers in one fixed order (same input, same
    options ⇒ same plan, as long as the search ends before the time limit) instead of racing threads."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.05)
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = max(workers, 1)
    if deterministic and workers > 1:
        solver.parameters.interleave_search = True
    return solver
