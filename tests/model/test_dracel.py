"""DRA CEL selectors as the kube-scheduler evaluates them (Kubernetes DRA docs; dra:cel/compile.go v0.36.3)."""

from __future__ import annotations

import pytest

from model.dracel import (
    COST_LIMIT,
    DeviceInput,
    SelectorCompileError,
    SelectorEvalError,
    compile_selector,
)
from model.errors import InputError

DRIVER = "gpu.kwok.nodeplan.io"
H100 = DeviceInput(
    driver=DRIVER,
    attributes={"model": {"string": "H100"}, f"{DRIVER}/numa": {"int": 1}, "driverVersion": {"version": "1.2.3"},
                "x": {"bool": True}},
    capacity={"memory": {"value": "80Gi"}},
)


def matches(expression: str, device: DeviceInput = H100) -> bool:
    return compile_selector(expression).matches(device)


def test_realistic_class_and_request_selectors() -> None:
    assert matches(f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "H100"')
    assert matches(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0')
    assert not matches(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("81Gi")) >= 0')


def test_qualified_and_unqualified_names_share_the_driver_domain() -> None:
    assert matches(f'device.attributes["{DRIVER}"].numa == 1 && device.attributes["{DRIVER}"].x')


def test_unknown_domain_is_an_empty_map_but_a_missing_attribute_is_an_error() -> None:
    assert matches('device.attributes["other.example.com"].size() == 0')
    assert matches('size(device.capacity["other.example.com"]) == 0')
    with pytest.raises(SelectorEvalError) as err:
        matches(f'device.attributes["{DRIVER}"].vendor == "x"')
    assert err.value.expression.endswith('.vendor == "x"')
    assert not matches(f'"vendor" in device.attributes["{DRIVER}"] && device.attributes["{DRIVER}"].vendor == "x"')


def test_quantities_compare_by_value() -> None:
    assert matches('quantity("1") == quantity("1000m")')
    assert matches('quantity("1Ki").compareTo(quantity("1024")) == 0')
    assert matches(f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("79Gi"))')
    assert matches(f'device.capacity["{DRIVER}"].memory.sub(quantity("80Gi")).compareTo(quantity("0")) == 0')
    assert matches('quantity("1.5").add(1).isLessThan(quantity("3")) && sign(quantity("-2")) == -1')
    assert matches('isQuantity("80Gi") && !isQuantity("80 GB")')
    with pytest.raises(SelectorEvalError):
        matches('quantity("80 GB") == quantity("1")')
    with pytest.raises(SelectorCompileError):  # Quantity and string are different types
        compile_selector(f'device.capacity["{DRIVER}"].memory == "80Gi"')


def test_version_attributes_are_semvers() -> None:
    assert matches(f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("1.2.0"))')
    assert matches(f'device.attributes["{DRIVER}"].driverVersion.major() == 1')
    assert matches('semver("1.0.0-rc.2").isLessThan(semver("1.0.0-rc.10")) && semver("1.0.0") == semver("1.0.0+b")')
    assert matches('semver("v1.2", true) == semver("1.2.0") && !isSemver("v1.2.0")')


def test_bind_strings_regex_and_macros() -> None:
    assert matches(f'cel.bind(d, device.attributes["{DRIVER}"], d.model.lowerAscii() == "h100" && d.numa > 0)')
    assert matches(f'device.attributes["{DRIVER}"].model.matches("^H[0-9]+$")')
    assert matches(f'device.attributes["{DRIVER}"].exists(k, k == "numa")')
    assert matches('sets.contains(["H100", "A100"], ["H100"])')


def test_result_type_rules() -> None:
    with pytest.raises(SelectorCompileError) as err:
        compile_selector("1 + 1")
    assert "bool" in err.value.cel_message and err.value.expression == "1 + 1"
    assert isinstance(err.value, InputError)
    # A dynamically typed non-bool result compiles but errors on evaluation.
    with pytest.raises(SelectorEvalError):
        matches(f'device.attributes["{DRIVER}"].model')


def test_compile_errors_carry_the_expression_and_the_compiler_message() -> None:
    with pytest.raises(SelectorCompileError) as err:
        compile_selector("device.driver ==")
    assert err.value.expression == "device.driver =="
    assert "Syntax error" in err.value.cel_message
    with pytest.raises(SelectorCompileError):
        compile_selector('device.drivers == "x"')


def test_cost_limit_is_a_runtime_error() -> None:
    numbers = "[" + ",".join(str(i) for i in range(1000)) + "]"
    selector = compile_selector(f"{numbers}.all(a, {numbers}.all(b, a + b >= 0))")
    assert selector.cost_bound > COST_LIMIT
    with pytest.raises(SelectorEvalError, match="cost limit"):
        selector.matches(H100)


def test_compilation_is_cached() -> None:
    assert compile_selector('device.driver == "a"') is compile_selector('device.driver == "a"')


def test_device_inputs_are_hashable_values() -> None:
    same = DeviceInput(DRIVER, dict(H100.attributes), dict(H100.capacity))
    assert same == H100 and hash(same) == hash(H100)
    assert DeviceInput(DRIVER, {}, {}, allow_multiple_allocations=True) != DeviceInput(DRIVER, {}, {})


@pytest.mark.parametrize(("attributes", "capacity", "needle"), [
    ({"model": {"string": "a", "int": 1}}, {}, "exactly one"),
    ({"model": {"float": 1.0}}, {}, "exactly one"),
    ({"v": {"version": "1.2"}}, {}, "semantic version"),
    ({"n": {"int": True}}, {}, "64-bit integer"),
    ({"bad name": {"int": 1}}, {}, "C identifier"),
    ({}, {"memory": {"value": "80 GB"}}, "invalid quantity"),
    ({}, {"memory": "80Gi"}, "mapping with a value"),
])
def test_malformed_devices_are_input_errors(attributes: dict, capacity: dict, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        DeviceInput(DRIVER, attributes, capacity)
