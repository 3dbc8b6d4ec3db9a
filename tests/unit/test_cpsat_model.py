"""``solver.cpsat.CpModel``: a CP-SAT model without OR-Tools' per-instance camelCase aliases, that solves as
``CpModel`` does."""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.cpsat import CpModel, make_solver


def test_the_model_skips_ortools_per_instance_aliases() -> None:
    # the hook nodeplan overrides must still exist, or every model pays for the aliases again after an upgrade
    assert callable(getattr(cp_model.CpModel, "_add_pre_pep8_methods", None))
    assert hasattr(cp_model.CpModel(), "NewIntVar")
    assert not hasattr(CpModel(), "NewIntVar")


def test_the_model_solves_as_cp_model_does() -> None:
    model = CpModel()
    x = model.new_int_var(0, 10, "x")
    y = model.new_int_var(0, 10, "y")
    model.add(x + 2 * y <= 14)
    model.add(x - y >= 1)
    model.maximize(3 * x + 4 * y)
    solver = make_solver(5.0, seed=1, workers=1, deterministic=True)
    assert solver.solve(model) == cp_model.OPTIMAL
    assert (solver.value(x), solver.value(y)) == (10, 2)
    assert solver.objective_value == 38
