"""Resource quantities, checked against the Kubernetes quantity grammar.

Rules (k8s.io/apimachinery/pkg/api/resource/quantity.go and
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):

    <quantity>        ::= <signedNumber><suffix>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= m | "" | k | M | G | T | P | E      (plus n and u)
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

cpu is accounted in milli-units (``MilliValue()``), everything else in whole units (``Value()``); both
round *up* to the next integer.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from model.errors import InputError
from model.quantity import format_quantity, parse_quantity, quantity_int
from model.resources import Resources

GI = 2**30


# --- every suffix ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    # decimalSI: n=1e-9, u=1e-6, m=1e-3, k=1e3, M=1e6, G=1e9, T=1e12, P=1e15, E=1e18
    ("1n", Fraction(1, 10**9)),
    ("1u", Fraction(1, 10**6)),
    ("1m", Fraction(1, 1000)),
    ("1", Fraction(1)),
    ("1k", Fraction(10**3)),
    ("1M", Fraction(10**6)),
    ("1G", Fraction(10**9)),
    ("1T", Fraction(10**12)),
    ("1P", Fraction(10**15)),
    ("1E", Fraction(10**18)),
    # binarySI: Ki=2^10 ... Ei=2^60
    ("1Ki", Fraction(2**10)),
    ("1Mi", Fraction(2**20)),
    ("1Gi", Fraction(2**30)),
    ("1Ti", Fraction(2**40)),
    ("1Pi", Fraction(2**50)),
    ("1Ei", Fraction(2**60)),
])
def test_every_suffix_has_its_kubernetes_multiplier(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # decimalExponent: "e" or "E" followed by a signed integer; 1e3 == 1k, 1E-3 == 1m
    ("1e3", Fraction(1000)),
    ("1E3", Fraction(1000)),
    ("1e+3", Fraction(1000)),
    ("1E-3", Fraction(1, 1000)),
    ("1.5e3", Fraction(1500)),
    ("12e-1", Fraction(6, 5)),
])
def test_decimal_exponent(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


def test_capital_e_alone_is_the_exa_suffix_not_an_exponent() -> None:
    # "E" with no digits after it is the decimalSI suffix exa (10^18); "E3" is an exponent
    assert parse_quantity("2E") == 2 * 10**18
    assert parse_quantity("2E3") == 2000


@pytest.mark.parametrize(("text", "expected"), [
    # <number> ::= <digits> | <digits>.<digits> | <digits>. | .<digits>, with an optional sign
    ("0.5", Fraction(1, 2)),
    (".5", Fraction(1, 2)),
    ("5.", Fraction(5)),
    ("+2", Fraction(2)),
    ("-2", Fraction(-2)),
    ("1.5Gi", Fraction(3, 2) * GI),
    ("0.25Ki", Fraction(256)),
])
def test_signed_and_fractional_numbers(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


def test_yaml_numbers_are_quantities_too() -> None:
    # `cpu: 2` and `cpu: 0.5` in YAML decode to int/float; the API server accepts both forms
    assert parse_quantity(2) == 2
    assert parse_quantity(0.5) == Fraction(1, 2)
    assert quantity_int("cpu", 0.5) == 500


def test_surrounding_whitespace_is_trimmed_like_quantity_unmarshal_json() -> None:
    # Quantity.UnmarshalJSON calls ParseQuantity(strings.TrimSpace(...))
    assert parse_quantity(" 1Gi ") == GI


# --- base units and rounding -----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "millicores"), [
    ("1", 1000),
    ("0.5", 500),          # "0.5" cpu is 500 millicores (docs: "CPU resource units")
    ("100m", 100),
    ("1.5", 1500),
    ("1e-3", 1),           # 1E-3 cores == 1m
    ("1E-3", 1),
    ("2k", 2_000_000),
    ("1e-4", 1),           # 0.1m rounds UP to 1m (MilliValue rounds up)
    ("1n", 1),             # 1 nanocore is still charged as 1m
    ("1001u", 2),          # 1.001m -> 2m
])
def test_cpu_is_counted_in_millicores_rounded_up(text: str, millicores: int) -> None:
    assert quantity_int("cpu", text) == millicores


@pytest.mark.parametrize(("text", "value"), [
    ("1Gi", GI),
    ("1.5Gi", 3 * GI // 2),
    ("128974848", 128974848),     # docs example: 128974848, 129e6, 129M, 123Mi
    ("129e6", 129_000_000),
    ("129M", 129_000_000),
    ("123Mi", 123 * 2**20),
    ("1m", 1),                    # 0.001 byte rounds up to 1 byte (Value() rounds up)
    ("400m", 1),                  # docs warn "400m" of memory is 0.4 bytes: still 1 whole byte
    ("1.0001k", 1001),            # 1000.1 -> 1001
    ("0", 0),
])
def test_other_resources_are_counted_in_whole_units_rounded_up(text: str, value: int) -> None:
    assert quantity_int("memory", text) == value


def test_non_cpu_resources_are_not_milli_scaled() -> None:
    assert quantity_int("pods", "110") == 110
    assert quantity_int("nvidia.com/gpu", "2") == 2
    assert quantity_int("ephemeral-storage", "20Gi") == 20 * GI


# --- invalid input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "abc",
    "1.2.3",
    "5Gb",       # not a suffix: only Ki Mi Gi ... or k M G ...
    "",
    "1 Gi",      # no space allowed between number and suffix
    "1K",        # kilo is lower-case k
    "1ki",       # binary suffixes are case sensitive
    "1Kib",
    "Gi",        # a suffix needs a number
    "1e",        # an exponent needs digits
    "1e1.5",     # ... an integer exponent
    "--1",
    "1Gi1",
    ".",
])
def test_invalid_strings_raise_input_error(text: str) -> None:
    with pytest.raises(InputError, match="invalid quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, [1], {"cpu": 1}, float("nan"), float("inf")])
def test_non_quantity_values_raise_input_error(value: object) -> None:
    with pytest.raises(InputError):
        parse_quantity(value)  # type: ignore[arg-type]


def test_resources_parse_names_the_bad_resource_as_the_field() -> None:
    with pytest.raises(InputError) as info:
        Resources.parse({"cpu": "1", "memory": "5Gb"})
    assert info.value.field == "memory"
    assert "field memory" in str(info.value)
    assert "5Gb" in str(info.value)


def test_resources_parse_uses_base_units() -> None:
    parsed = Resources.parse({"cpu": "250m", "memory": "64Mi", "pods": "3"})
    assert dict(parsed) == {"cpu": 250, "memory": 64 * 2**20, "pods": 3}


# --- formatting ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("resource", "value", "text"), [
    ("memory", 1024**3, "1Gi"),
    ("memory", 2**40, "1Ti"),
    ("memory", 3 * 2**40, "3Ti"),
    ("memory", 1536 * 2**20, "1536Mi"),
    ("memory", 2**10, "1Ki"),
    ("memory", 1000, "1000"),          # not a multiple of 1Ki: plain bytes
    ("memory", 0, "0"),
    ("ephemeral-storage", 20 * GI, "20Gi"),
    ("hugepages-2Mi", 4 * 2**20, "4Mi"),
    ("cpu", 1500, "1500m"),
    ("cpu", 2000, "2"),
    ("cpu", 1, "1m"),
    ("cpu", 0, "0"),
    ("pods", 110, "110"),
    ("pods", 1024, "1024"),            # a count, never rendered with a binary suffix
])
def test_format_quantity(resource: str, value: int, text: str) -> None:
    assert format_quantity(resource, value) == text


@pytest.mark.parametrize(("resource", "value"), [
    ("memory", 1024**3),
    ("memory", 2**40),
    ("memory", 7 * 2**20 + 1),
    ("cpu", 1500),
    ("cpu", 2000),
    ("cpu", 1),
    ("ephemeral-storage", 5 * 2**10),
])
def test_format_then_parse_round_trips(resource: str, value: int) -> None:
    assert quantity_int(resource, format_quantity(resource, value)) == value


def test_a_quantity_past_what_a_float_holds_is_one_clear_error() -> None:
    """The largest double as a cpu request is 1.8e311 milli-cpus: an input error saying so, not an overflow."""
    from model.errors import InputError
    from model.quantity import quantity_int
    with pytest.raises(InputError, match=r"too large: 1\.79e\+311 milli-units"):
        quantity_int("cpu", 1.7976931348623157e308)
