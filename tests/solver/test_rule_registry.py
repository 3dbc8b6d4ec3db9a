"""The rule interface (``solver/rules/base.py``): every family is one registered ``Rule``, and
``compile_problem`` knows rules only through the registry."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import solver.rules
from bench.workloads import linux_pool, pod
from solver.problem import compile_problem
from solver.rules.base import Rule
from solver.rules.ports import HostPorts
from solver.rules.registry import RULES
from tests.conftest import snapshot_of


def _families() -> list[type[Rule]]:
    out = []
    for info in pkgutil.iter_modules(solver.rules.__path__):
        module = importlib.import_module(f"solver.rules.{info.name}")
        out.extend(obj for _, obj in inspect.getmembers(module, inspect.isclass)
                   if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__)
    return out


def test_every_family_is_registered_once_with_a_name() -> None:
    registered = [type(rule) for rule in RULES]
    assert sorted(f.__name__ for f in _families()) == sorted(r.__name__ for r in registered)
    assert len(set(registered)) == len(registered)
    names = [rule.name for rule in RULES]
    assert all(names) and len(set(names)) == len(names)


def test_families_that_add_counters_name_them() -> None:
    snapshot = snapshot_of([linux_pool(), pod("a", spec_extra={"containers": [
        {"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
         "resources": {"requests": {"cpu": "100m"}}}]})])
    problem = compile_problem(snapshot)
    counter_axes = problem.axes[problem.resource_axes:]
    assert counter_axes == ("hostPort:TCP/8080",)
    assert any("hostPort" in rule.counter_names for rule in RULES)


def test_compiling_without_a_family_drops_exactly_its_part() -> None:
    snapshot = snapshot_of([linux_pool(), pod("a", spec_extra={"containers": [
        {"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
         "resources": {"requests": {"cpu": "100m"}}}]})])
    without = compile_problem(snapshot, rules=[r for r in RULES if not isinstance(r, HostPorts)])
    assert without.axes[without.resource_axes:] == ()
    assert without.template_ok.tolist() == compile_problem(snapshot).template_ok.tolist()
