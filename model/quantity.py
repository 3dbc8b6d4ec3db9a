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


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity exactly; raise InputError on anything Kubernetes would reject."""
    if isinstance(text, bool):
        raise InputError(f"invalid quantity {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise InputError(f"invalid quantity {text!r}")
        return Fraction(str(text))
    if not isinstance(text, str):
        raise InputError(f"invalid quantity {text!r}: expected a string or number")
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


def to_base_units(resource: str, value: Fraction) -> int:
    """Convert a quantity to the integer base unit used in every constraint (rounding up)."""
    scaled = value * 1000 if resource in MILLI_RESOURCES else value
    return math.ceil(scaled)


def quantity_int(resource: str, text: str | int | float) -> int:
    """Parse ``text`` as a quantity of ``resource`` and return integer base units."""
    return to_base_units(resource, parse_quantity(text))


def format_quantity(resource: str, value: int) -> str:
    """Human form of a base-unit integer: ``1500m``/``2`` for cpu, ``Gi``/``Mi`` for bytes-like resources."""
    if resource in MILLI_RESOURCES:
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value and value % factor == 0:
                return f"{value // factor}{suffix}"
    return str(value)
