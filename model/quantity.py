"""Kubernetes resource quantities as exact numbers.

Kubernetes accepts a signed decimal with a binary suffix (Ki … Ei), a decimal SI suffix (n u m k M G T P E)
or a decimal exponent (e3, E-2). Constraints need exact integers, so every quantity becomes a Fraction
and then an integer in the resource's base unit: milli-units for cpu, whole units (bytes, pods, devices)
for everything else, rounded up as Kubernetes' ``Value()`` / ``MilliValue()`` do.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

from model.errors import InputError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE])?)$"
)

#: Resources whose base unit is the milli-unit (Kubernetes reports them with MilliValue()).
MILLI_RESOURCES = frozenset({"cpu"})
#: The largest quantity in base units (2**53: 9,007 TB of memory, 9 billion cpus). The solver's matrices are
#: int64 and add up many pods' requests; 2**53 keeps those sums exact and survives a JSON (float) round trip.
MAX_BASE_UNITS = 2**53
#: Longest number text read (Kubernetes' own limit is 2**63-1 with 3 decimals, far shorter than this).
MAX_DIGITS = 64


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity exactly; raise InputError on anything Kubernetes would reject."""
    if isinstance(text, bool):
        raise InputError(f"invalid quantity {text!r}")
    if isinstance(text, int):
        if abs(text) >= 10**MAX_DIGITS:
            raise InputError(f"invalid quantity: {len(str(abs(text)))} digits (at most {MAX_DIGITS})")
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise InputError(f"invalid quantity {text!r}")
        return Fraction(str(text))
    if not isinstance(text, str):
        raise InputError(f"invalid quantity {text!r}: expected a string or number")
    if len(text) > MAX_DIGITS + 8:
        raise InputError(f"invalid quantity: {len(text)} characters (at most {MAX_DIGITS + 8})")
    match = _PATTERN.match(text.strip())
    if not match:
        raise InputError(f"invalid quantity {text!r}")
    number = Fraction(match["num"])
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 30:
            raise InputError(f"invalid quantity {text!r}: exponent out of range")
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[match["dec"] or ""]


def to_base_units(resource: str, value: Fraction, *, saturate: bool = False) -> int:
    """Convert a quantity to the integer base unit used in every constraint (rounding up). ``saturate``: a
    larger one becomes ``MAX_BASE_UNITS`` instead of an error (a cap no batch can reach is no cap)."""
    scaled = math.ceil(value * 1000 if resource in MILLI_RESOURCES else value)
    if saturate and scaled > MAX_BASE_UNITS:
        return MAX_BASE_UNITS
    if abs(scaled) > MAX_BASE_UNITS:
        unit = "milli-units" if resource in MILLI_RESOURCES else "units"
        raise InputError(f"quantity of {resource} is too large: {_magnitude(scaled)} {unit}, at most 2^53 "
                         f"({MAX_BASE_UNITS:.3g})")
    return scaled


def _magnitude(value: int) -> str:
    """``1.8e+308``-style, also for integers past what a float holds."""
    try:
        return f"{float(value):.3g}"
    except OverflowError:
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


def quantity_int(resource: str, text: str | int | float, *, saturate: bool = False) -> int:
    """Parse ``text`` as a quantity of ``resource`` and return integer base units. Clusters repeat a few
    spellings (``100m``, ``1Gi``) tens of thousands of times, so results are memoised (errors are not)."""
    if type(text) is str:
        return _quantity_int(resource, text, saturate)
    return to_base_units(resource, parse_quantity(text), saturate=saturate)


@lru_cache(maxsize=65536)
def _quantity_int(resource: str, text: str, saturate: bool) -> int:
    return to_base_units(resource, parse_quantity(text), saturate=saturate)


def format_quantity(resource: str, value: int) -> str:
    """Human form of a base-unit integer: ``1500m``/``2`` for cpu, ``Gi``/``Mi`` for bytes-like resources."""
    if resource in MILLI_RESOURCES:
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value and value % factor == 0:
                return f"{value // factor}{suffix}"
    return str(value)
