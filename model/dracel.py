"""DRA CEL device selectors, compiled and evaluated as the kube-scheduler's allocator does (Kubernetes 1.36).

A DeviceClass's and a DeviceRequest's ``selectors[].cel.expression`` decide which devices a claim may get. The
kube-scheduler evaluates them with ``k8s.io/dynamic-resource-allocation/cel``; this module does the same with
``cel-expr-python`` (cel-cpp) in the same environment, and ``tests/model/test_dracel_differential.py`` checks
every case of a corpus against the Go package (``hack/dra-cel``).

The environment (``dra:cel/compile.go`` and ``apiserver:pkg/cel/environment/base.go`` at v0.36.3):

- ``device.driver`` (string), ``device.allowMultipleAllocations`` (bool; DRAConsumableCapacity is on by default
  in 1.36), ``device.attributes`` and ``device.capacity``: maps from domain to maps from id. An attribute or
  capacity name without ``/`` belongs to the driver's domain. Looking up an unknown domain gives an empty map;
  a missing attribute inside a domain is a runtime error.
- attribute values: int, bool, string, or ``version`` as a Semver; capacities are Quantities.
- Kubernetes' quantity library (``quantity``, ``isQuantity``, global ``sign(q)``, members ``isInteger,
  asInteger, asApproximateFloat, add, sub, isGreaterThan, isLessThan, compareTo``) and semver library
  (``semver(s[, normalize])``, ``isSemver``, ``major, minor, patch, isGreaterThan, isLessThan, compareTo``),
  strings extension v2 (``lowerAscii``, ``split``, ``format`` ...), ``cel.bind``, optionals, regex ``matches``,
  the standard macros, ``sets.contains / intersects / equivalent``.
- the result must be bool: a statically non-bool expression does not compile, a dynamically non-bool result is
  a runtime error. Any runtime error aborts the pod's scheduling in the kube-scheduler (callers must do the same).

How the Kubernetes-only types are carried: Quantity and Semver are small protobuf messages (exact rational
``num/den`` in lowest terms; ``major, minor, patch, pre``), so the checker types them exactly like Go does and
message equality is value equality (``quantity("1") == quantity("1000m")``, build metadata ignored by Semver).

Cost limit: the scheduler runs each selector with a runtime cost limit of 1,000,000 (cel-go cost units). cel-cpp
has no cost tracker, so each selector gets a static upper bound of cel-go's runtime cost when it is compiled
(every node costs 1, list/map literals 10/30, a comprehension costs its range plus the size bound of the range
times its loop body; sizes come from literals and the API's limits: at most 32 attributes per device, strings
of at most 64 characters). ``Selector.matches`` raises ``SelectorEvalError`` when that bound exceeds the limit.
Because the bound ignores short-circuits, a selector whose worst case is above the limit errors even when the
scheduler's actual run would have stayed below it. The apiserver rejects such selectors at admission anyway
(its own estimate must stay below the limit), so in a real cluster neither path is reached.

Deviations from the Go implementation that remain (each checked or documented by the tests):

1. ``"dom" in device.attributes``, ``size(device.attributes)`` and iteration over the outer maps see the domains
   the selector indexes by a literal (and the driver's, when it indexes by a computed key) as present-but-empty:
   the empty-map default is emulated by filling those domains in. Go reports only the device's real domains.
2. A domain indexed by a computed key other than the driver's is not filled in: indexing it is a runtime error
   here, an empty map in Go.
3. ``isInteger()`` / ``asInteger()`` follow the value (integral and within int64). Go's follow the internal
   representation: ``quantity("1000m").isInteger()``, ``quantity("1.5Gi").isInteger()`` and the sum of two
   fractional quantities are false/errors there even when the value is integral.
4. ``a == b.add(x)`` (an add()/sub() result on the right of ``==``/``!=``) is a runtime "no such overload" in Go
   (the result is a pointer type); here it is detected statically and raised on every evaluation, also when a
   short-circuit would have skipped it.
5. Not available (compile errors here, valid in Go): the lists extension and Kubernetes' list library
   (``lists.range``, ``sort``, ``sum``, ``min``, ``max``, ``indexOf``, ``isSorted`` ...), regex ``find``/``findAll``,
   the URL, IP and CIDR libraries, two-variable comprehensions, ``has(device.<field>)``; list-type attributes
   (DRAListTypeAttributes, alpha and off in 1.36) are rejected as input, and cross-type numeric
   comparisons (``1 < 1.5``, ``cel.CrossTypeNumericComparisons`` in Go): cel-cpp's checker has no switch for
   them and refuses extra overloads of ``_<_``.
6. A ``version`` attribute compared with a string (``attributes["d"].driverVersion == "1.2.3"``) is false here;
   in Go it is a "no such overload" runtime error (attributes are dynamically typed, Semver.Equal refuses).
7. cel-cpp stops an evaluation after 10,000 comprehension iterations in total (a runtime error); cel-go allows
   as many as the cost limit does (e.g. 20 x 1,000 iterations). Selectors over a device's at most 32 attributes
   stay far below either limit.
8. Compile and runtime error messages are cel-cpp's, not cel-go's; only the outcome (match, no match, compile
   error, runtime error) is meant to agree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from model.errors import InputError
from model.quantity import parse_quantity

#: ``resourceapi.CELSelectorExpressionMaxCost``: the runtime cost limit of one selector evaluation.
COST_LIMIT = 1_000_000
# API limits the cost bound relies on (``api:resource/v1/types.go``).
_MAX_ATTRIBUTES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_MAX_VALUE_LENGTH = 64  # DeviceAttributeMaxValueLength
_MAX_ID_LENGTH = 32
_MAX_DOMAIN_LENGTH = 63
_INT64 = 2**63


class SelectorCompileError(InputError):
    """A selector that does not compile, or whose type is not bool (the apiserver rejects it)."""

    def __init__(self, expression: str, cel_message: str) -> None:
        super().__init__(f"CEL selector {expression!r} does not compile: {cel_message}", field="cel.expression")
        self.expression = expression
        self.cel_message = cel_message


class SelectorEvalError(Exception):
    """A runtime error of a selector on one device; the kube-scheduler aborts the pod's scheduling on it."""

    def __init__(self, expression: str, driver: str, cel_message: str) -> None:
        super().__init__(f"CEL selector {expression!r} failed on a device of driver {driver}: {cel_message}")
        self.expression = expression
        self.driver = driver
        self.cel_message = cel_message


# --------------------------------------------------------------------------------------------------------------
# Quantity and Semver as protobuf messages (value equality for free, distinct types for the checker)


def _message_classes() -> tuple[descriptor_pool.DescriptorPool, Any, Any]:
    string, uint64 = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_UINT64
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    proto = descriptor_pb2.FileDescriptorProto(name="nodeplan/dracel.proto", package="kubernetes", syntax="proto3")
    quantity = proto.message_type.add(name="Quantity")
    quantity.field.add(name="num", number=1, type=string, label=optional)
    quantity.field.add(name="den", number=2, type=string, label=optional)
    semver = proto.message_type.add(name="Semver")
    for number, name in enumerate(("major", "minor", "patch"), start=1):
        semver.field.add(name=name, number=number, type=uint64, label=optional)
    semver.field.add(name="pre", number=4, type=string, label=optional)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (pool, message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver")))


_POOL, _Quantity, _Semver = _message_classes()
_QUANTITY = cel.Type("kubernetes.Quantity")
_SEMVER = cel.Type("kubernetes.Semver")
_NANO = Fraction(1, 10**9)


def _quantity_message(value: Fraction) -> Any:
    return _Quantity(num=str(value.numerator), den=str(value.denominator))


@lru_cache(maxsize=4096)
def _fraction(num: str, den: str) -> Fraction:
    return Fraction(int(num), int(den))


def _value(q: Any) -> Fraction:
    return _fraction(q.num, q.den)


def _parse_k8s_quantity(text: str) -> Fraction:
    """``resource.ParseQuantity``: exact, magnitudes rounded up to the next nano-unit as Kubernetes does."""
    if text != text.strip():
        raise ValueError(f"quantities must match the regular expression (got {text!r})")
    try:
        value = parse_quantity(text)
    except InputError as err:
        raise ValueError(err.message) from None
    if (value * 10**9).denominator != 1:
        magnitude = math.ceil(abs(value) / _NANO) * _NANO
        value = magnitude if value > 0 else -magnitude
    return value


_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?$"
)


def parse_semver(text: str) -> Any:
    """``semver.Parse`` (blang/semver v4, strict SemVer 2.0): a Semver message (build metadata dropped)."""
    match = _SEMVER_RE.match(text)
    if not match:
        raise ValueError(f"invalid semantic version {text!r}")
    major, minor, patch = (int(part) for part in match.groups()[:3])
    if max(major, minor, patch) >= 2**64:
        raise ValueError(f"invalid semantic version {text!r}: number out of range")
    return _Semver(major=major, minor=minor, patch=patch, pre=match[4] or "")


def _normalize_semver(text: str) -> Any:
    """``semver(s, true)``: a leading ``v``, leading zeros and a missing minor/patch are tolerated."""
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or not part[0].isdigit():
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


def _semver_cmp(a: Any, b: Any) -> int:
    for x, y in ((a.major, b.major), (a.minor, b.minor), (a.patch, b.patch)):
        if x != y:
            return 1 if x > y else -1
    if a.pre == b.pre:
        return 0
    if not a.pre or not b.pre:
        return 1 if not a.pre else -1
    left, right = a.pre.split("."), b.pre.split(".")
    for x, y in zip(left, right, strict=False):
        if x == y:
            continue
        xn, yn = x.isdigit(), y.isdigit()
        if xn and yn:
            return 1 if int(x) > int(y) else -1
        if xn != yn:
            return -1 if xn else 1
        return 1 if x > y else -1
    return (len(left) > len(right)) - (len(left) < len(right))


def _cmp(a: Fraction, b: Fraction) -> int:
    return (a > b) - (a < b)


def _as_int64(q: Any) -> int:
    value = _value(q)
    if value.denominator != 1 or not -_INT64 <= value.numerator < _INT64:
        raise ValueError("cannot convert value to integer")
    return value.numerator


def _is_int64(q: Any) -> bool:
    value = _value(q)
    return value.denominator == 1 and -_INT64 <= value.numerator < _INT64


def _is_quantity(text: str) -> bool:
    try:
        _parse_k8s_quantity(text)
    except ValueError:
        return False
    return True


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        (_normalize_semver if normalize else parse_semver)(text)
    except ValueError:
        return False
    return True


def _cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality on plain values (bool is not a number; ints and doubles compare by value)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(any(_cel_equal(k, k2) and _cel_equal(v, b[k2]) for k2 in b)
                                        for k, v in a.items())
    return type(a) is type(b) and bool(a == b)


def _contains_all(a: list[Any], b: list[Any]) -> bool:
    return all(any(_cel_equal(x, y) for y in a) for x in b)


def _compare(a: Any, b: Any) -> int:
    """compareTo of two Quantities or two Semvers (the checker guarantees both are of one type)."""
    if a.DESCRIPTOR.name == "Semver":
        return _semver_cmp(a, b)
    return _cmp(_value(a), _value(b))


def _overload(name: str, result: cel.Type, params: list[cel.Type], impl: Callable[..., Any] | None,
              member: bool = False) -> cel.Overload:
    if impl is None:  # declared for the checker; the implementation is registered with another overload
        return cel.Overload(name, result, params, is_member=member)
    return cel.Overload(name, result, params, is_member=member, impl=impl)


def _functions() -> list[cel.FunctionDecl]:
    q, s, b, i, d, string = _QUANTITY, _SEMVER, cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE, cel.Type.STRING
    dyn_list = cel.Type.List(cel.Type.DYN)
    declarations: dict[str, list[cel.Overload]] = {
        "quantity": [_overload("string_to_quantity", q, [string],
                               lambda t: _quantity_message(_parse_k8s_quantity(t)))],
        "isQuantity": [_overload("is_quantity_string", b, [string], _is_quantity)],
        "sign": [_overload("quantity_sign", i, [q], lambda a: _cmp(_value(a), Fraction(0)))],
        "isInteger": [_overload("quantity_is_integer", b, [q], _is_int64, member=True)],
        "asInteger": [_overload("quantity_get_int", i, [q], _as_int64, member=True)],
        "asApproximateFloat": [_overload("quantity_get_float", d, [q], lambda a: float(_value(a)), member=True)],
        "add": [
            _overload("quantity_add", q, [q, q], lambda a, c: _quantity_message(_value(a) + _value(c)), member=True),
            _overload("quantity_add_int", q, [q, i], lambda a, c: _quantity_message(_value(a) + c), member=True),
        ],
        "sub": [
            _overload("quantity_sub", q, [q, q], lambda a, c: _quantity_message(_value(a) - _value(c)), member=True),
            _overload("quantity_sub_int", q, [q, i], lambda a, c: _quantity_message(_value(a) - c), member=True),
        ],
        # Quantity and Semver are both messages at run time, so each of these has one implementation for both.
        "isGreaterThan": [
            _overload("quantity_is_greater_than", b, [q, q], lambda a, c: _compare(a, c) > 0, member=True),
            _overload("semver_is_greater_than", b, [s, s], None, member=True),
        ],
        "isLessThan": [
            _overload("quantity_is_less_than", b, [q, q], lambda a, c: _compare(a, c) < 0, member=True),
            _overload("semver_is_less_than", b, [s, s], None, member=True),
        ],
        "compareTo": [
            _overload("quantity_compare_to", i, [q, q], _compare, member=True),
            _overload("semver_compare_to", i, [s, s], None, member=True),
        ],
        "semver": [
            _overload("string_to_semver", s, [string], parse_semver),
            _overload("string_bool_to_semver", s, [string, b],
                      lambda t, n: _normalize_semver(t) if n else parse_semver(t)),
        ],
        "isSemver": [
            _overload("is_semver_string", b, [string], _is_semver),
            _overload("is_semver_string_bool", b, [string, b], _is_semver),
        ],
        "major": [_overload("semver_major", i, [s], lambda v: v.major, member=True)],
        "minor": [_overload("semver_minor", i, [s], lambda v: v.minor, member=True)],
        "patch": [_overload("semver_patch", i, [s], lambda v: v.patch, member=True)],
        "sets.contains": [_overload("list_sets_contains_list", b, [dyn_list, dyn_list], _contains_all)],
        "sets.equivalent": [_overload("list_sets_equivalent_list", b, [dyn_list, dyn_list],
                                      lambda x, y: _contains_all(x, y) and _contains_all(y, x))],
        "sets.intersects": [_overload("list_sets_intersects_list", b, [dyn_list, dyn_list],
                                      lambda x, y: any(_cel_equal(a, c) for a in x for c in y))],
    }
    return [cel.FunctionDecl(name, overloads) for name, overloads in declarations.items()]


_MAP = cel.Type.Map
_ENV = cel.NewEnv(
    _POOL,
    variables={
        "device.driver": cel.Type.STRING,
        "device.allowMultipleAllocations": cel.Type.BOOL,
        "device.attributes": _MAP(cel.Type.STRING, _MAP(cel.Type.STRING, cel.Type.DYN)),
        "device.capacity": _MAP(cel.Type.STRING, _MAP(cel.Type.STRING, _QUANTITY)),
    },
    extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(2), ext_optional.ExtOptional()],
    functions=_functions(),
)

# --------------------------------------------------------------------------------------------------------------
# Device input


_ATTRIBUTE_KINDS = ("int", "bool", "string", "version")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _split_name(name: Any, driver: str, what: str) -> tuple[str, str]:
    """``parseQualifiedName``: ``domain/id``, or the driver's domain for a bare id (validated like the API)."""
    if not isinstance(name, str) or not name:
        raise InputError(f"{what} name {name!r} must be a non-empty string", field=what)
    domain, sep, ident = name.partition("/")
    if not sep:
        domain, ident = driver, name
    elif len(domain) > _MAX_DOMAIN_LENGTH or not _DNS_SUBDOMAIN.match(domain):
        raise InputError(f"{what} {name!r}: domain {domain!r} is not a DNS subdomain of at most 63 characters",
                         field=f"{what}.{name}")
    if len(ident) > _MAX_ID_LENGTH or not _C_IDENTIFIER.match(ident):
        raise InputError(f"{what} {name!r}: {ident!r} is not a C identifier of at most 32 characters",
                         field=f"{what}.{name}")
    return domain, ident


def _attribute_value(name: str, attribute: Any) -> Any:
    where = f"attributes.{name}"
    if not isinstance(attribute, Mapping):
        raise InputError(f"attribute {name!r} must be a mapping with one of {', '.join(_ATTRIBUTE_KINDS)}",
                         field=where)
    kinds = [kind for kind in attribute if attribute[kind] is not None]
    if len(kinds) != 1 or kinds[0] not in _ATTRIBUTE_KINDS:
        raise InputError(f"attribute {name!r} must have exactly one of {', '.join(_ATTRIBUTE_KINDS)} "
                         f"(got {', '.join(map(str, kinds)) or 'none'})", field=where)
    kind, value = kinds[0], attribute[kinds[0]]
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not -_INT64 <= value < _INT64:
            raise InputError(f"attribute {name!r}: int must be a 64-bit integer, got {value!r}", field=where)
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise InputError(f"attribute {name!r}: bool must be true or false, got {value!r}", field=where)
        return value
    if not isinstance(value, str) or len(value) > _MAX_VALUE_LENGTH:
        raise InputError(f"attribute {name!r}: {kind} must be a string of at most 64 characters", field=where)
    if kind == "version":
        try:
            return parse_semver(value)
        except ValueError as err:
            raise InputError(f"attribute {name!r}: {err}", field=where) from None
    return value


def _capacity_value(name: str, capacity: Any) -> Any:
    where = f"capacity.{name}"
    if not isinstance(capacity, Mapping) or "value" not in capacity:
        raise InputError(f"capacity {name!r} must be a mapping with a value", field=where)
    unknown = set(capacity) - {"value", "requestPolicy"}
    if unknown:
        raise InputError(f"capacity {name!r}: unknown fields {', '.join(sorted(map(str, unknown)))}", field=where)
    raw = capacity["value"]
    try:
        value = _parse_k8s_quantity(raw) if isinstance(raw, str) else parse_quantity(raw)
    except (ValueError, InputError) as err:
        raise InputError(f"capacity {name!r}: invalid quantity {raw!r} ({err})", field=where) from None
    return _quantity_message(value)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True)
class DeviceInput:
    """One device as a selector sees it: the ResourceSlice's driver and the device's attributes and capacity.

    ``attributes`` and ``capacity`` use the API shapes (``{"model": {"string": "H100"}}``, ``{"memory":
    {"value": "80Gi"}}``), names qualified or not, exactly as a ResourceSlice lists them. Hashable, so the solver
    can use devices of one type as a table key.
    """

    driver: str
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    _key: tuple[Any, ...] = field(init=False, repr=False, compare=False)
    _data: dict[str, Any] = field(init=False, repr=False, compare=False)
    _activations: dict[tuple[str, ...], Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.driver, str) or not self.driver:
            raise InputError(f"driver must be a non-empty string, got {self.driver!r}", field="driver")
        if not isinstance(self.allow_multiple_allocations, bool):
            raise InputError("allowMultipleAllocations must be true or false", field="allowMultipleAllocations")
        for what, table in (("attributes", self.attributes), ("capacity", self.capacity)):
            if not isinstance(table, Mapping):
                raise InputError(f"{what} must be a mapping from name to value", field=what)
        attributes: dict[str, dict[str, Any]] = {}
        for name, attribute in self.attributes.items():
            domain, ident = _split_name(name, self.driver, "attributes")
            attributes.setdefault(domain, {})[ident] = _attribute_value(name, attribute)
        capacity: dict[str, dict[str, Any]] = {}
        for name, entry in self.capacity.items():
            domain, ident = _split_name(name, self.driver, "capacity")
            capacity.setdefault(domain, {})[ident] = _capacity_value(name, entry)
        set_ = object.__setattr__
        set_(self, "attributes", MappingProxyType(dict(self.attributes)))
        set_(self, "capacity", MappingProxyType(dict(self.capacity)))
        set_(self, "_key", (self.driver, _freeze(self.attributes), _freeze(self.capacity),
                            self.allow_multiple_allocations))
        set_(self, "_data", {
            "device.driver": self.driver,
            "device.allowMultipleAllocations": self.allow_multiple_allocations,
            "device.attributes": attributes,
            "device.capacity": capacity,
        })
        set_(self, "_activations", {})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceInput) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def _activation(self, domains: tuple[str, ...]) -> Any:
        """The evaluation input with the selector's looked-up domains present (Go's empty-map default)."""
        cached = self._activations.get(domains)
        if cached is None:
            data = self._data
            if domains:
                data = dict(data)
                for var in ("device.attributes", "device.capacity"):
                    table = dict(data[var])
                    for domain in domains:
                        table.setdefault(self.driver if domain == _DRIVER_DOMAIN else domain, {})
                    data[var] = table
            cached = _ENV.Activation(data)
            self._activations[domains] = cached
        return cached


# --------------------------------------------------------------------------------------------------------------
# The checked AST (cel.expr.CheckedExpr, decoded from the protobuf wire format: no generated code needed)


_DRIVER_DOMAIN = "\x00driver"
_MAPS = frozenset({"device.attributes", "device.capacity"})


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, value


@dataclass
class _Node:
    """One ``cel.expr.Expr``: kind is const, ident, select, call, list, struct or comprehension."""

    id: int = 0
    kind: str = ""
    name: str = ""  # ident name, select field, call function
    const: Any = None
    test_only: bool = False
    children: list[_Node] = field(default_factory=list)  # select operand / call target+args / list elements
    has_target: bool = False
    loop: dict[str, _Node] = field(default_factory=dict)  # comprehension parts


_EXPR_KINDS = {3: "const", 4: "ident", 5: "select", 6: "call", 7: "list", 8: "struct", 9: "comprehension"}
_COMPREHENSION_PARTS = {2: "range", 4: "init", 5: "condition", 6: "step", 7: "result"}


def _decode_expr(buf: bytes) -> _Node:
    node = _Node()
    for number, value in _fields(buf):
        if number == 2:
            assert isinstance(value, int)
            node.id = value
        elif number in _EXPR_KINDS:
            assert isinstance(value, bytes)
            node.kind = _EXPR_KINDS[number]
            _decode_kind(node, value)
    return node


def _decode_kind(node: _Node, buf: bytes) -> None:
    for number, value in _fields(buf):
        if node.kind == "const":
            node.const = value.decode() if number == 6 and isinstance(value, bytes) else value
        elif node.kind == "ident" and number == 1:
            node.name = bytes(value).decode() if isinstance(value, bytes) else ""
        elif node.kind == "select":
            if number == 1 and isinstance(value, bytes):
                node.children.append(_decode_expr(value))
            elif number == 2 and isinstance(value, bytes):
                node.name = value.decode()
            elif number == 3:
                node.test_only = bool(value)
        elif node.kind == "call":
            if number == 1 and isinstance(value, bytes):
                node.children.insert(0, _decode_expr(value))
                node.has_target = True
            elif number == 2 and isinstance(value, bytes):
                node.name = value.decode()
            elif number == 3 and isinstance(value, bytes):
                node.children.append(_decode_expr(value))
        elif node.kind == "list" and number == 1 and isinstance(value, bytes):
            node.children.append(_decode_expr(value))
        elif node.kind == "struct" and number == 2 and isinstance(value, bytes):
            for entry_number, entry_value in _fields(value):  # map literal entries: key (3) and value (4)
                if entry_number in (3, 4) and isinstance(entry_value, bytes):
                    node.children.append(_decode_expr(entry_value))
        elif node.kind == "comprehension" and number in _COMPREHENSION_PARTS and isinstance(value, bytes):
            node.loop[_COMPREHENSION_PARTS[number]] = _decode_expr(value)


def _decode_checked(serialized: bytes) -> tuple[_Node, dict[int, bytes]]:
    """The root expression and the type of each node id (raw ``cel.expr.Type`` bytes) of a serialized
    ``google.protobuf.Any`` holding a ``cel.expr.CheckedExpr`` (expr is field 4) or ``ParsedExpr`` (field 2)."""
    envelope = dict(_fields(serialized))
    payload, type_url = envelope.get(2, b""), envelope.get(1, b"")
    assert isinstance(payload, bytes) and isinstance(type_url, bytes)
    expr_field = 2 if type_url.endswith(b".ParsedExpr") else 4
    root, types = _Node(), {}
    for number, value in _fields(payload):
        if number == expr_field and isinstance(value, bytes):
            root = _decode_expr(value)
        elif number == 3 and isinstance(value, bytes):
            entry = dict(_fields(value))
            key, typ = entry.get(1), entry.get(2, b"")
            if isinstance(key, int) and isinstance(typ, bytes):
                types[key] = typ
    return root, types


def _walk(node: _Node) -> Iterator[_Node]:
    yield node
    for child in node.children:
        yield from _walk(child)
    for part in node.loop.values():
        yield from _walk(part)


_DYN_TYPE = b"\n\x00"


def _message_type(raw: bytes) -> str:
    for number, value in _fields(raw):
        if number == 9 and isinstance(value, bytes):
            return value.decode()
    return ""


@dataclass(frozen=True)
class _Analysis:
    domains: tuple[str, ...]
    cost_bound: int
    static_error: str | None


def _size_bound(node: _Node) -> int:
    """An upper bound of the number of elements a comprehension's range can have."""
    if node.kind in ("list", "struct"):
        return len(node.children) // (2 if node.kind == "struct" else 1)
    if node.kind == "comprehension":  # map()/filter() results are as large as their range
        return _size_bound(node.loop["range"]) if "range" in node.loop else _MAX_ATTRIBUTES
    if node.kind == "call" and node.name == "_+_":
        return sum(_size_bound(child) for child in node.children)
    if node.kind == "call" and node.name == "split":
        return _MAX_VALUE_LENGTH + 1
    return max(_MAX_ATTRIBUTES, _MAX_VALUE_LENGTH)


_TRAVERSAL = math.ceil(0.1 * max(_MAX_VALUE_LENGTH, _MAX_ATTRIBUTES)) + 1
_TRAVERSING = frozenset({
    "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_", "@in", "size", "contains", "startsWith", "endsWith",
    "lowerAscii", "upperAscii", "split", "join", "replace", "substring", "trim", "indexOf", "lastIndexOf", "charAt",
    "format", "quote", "quantity", "isQuantity", "semver", "isSemver", "sets.contains", "sets.equivalent",
    "sets.intersects",
})


def _cost_bound(node: _Node) -> int:
    """An upper bound of cel-go's runtime cost (see the module docstring)."""
    if node.kind == "const":
        return 0
    if node.kind == "comprehension":
        parts = {name: _cost_bound(part) for name, part in node.loop.items()}
        iterations = _size_bound(node.loop["range"]) if "range" in node.loop else 1
        return (parts.get("range", 0) + parts.get("init", 0) + parts.get("result", 0)
                + iterations * (parts.get("condition", 0) + parts.get("step", 0)))
    if node.kind == "ident":  # ``device.driver`` is one qualified identifier here, a variable and a select in Go
        return 2 if node.name.startswith("device.") else 1
    base = {"list": 10, "struct": 30}.get(node.kind, 1)
    if node.kind == "call":  # string and list traversals cost 0.1 per element in cel-go; regexes more
        base += {"matches": 10 * _TRAVERSAL}.get(node.name, _TRAVERSAL if node.name in _TRAVERSING else 0)
    return base + sum(_cost_bound(child) for child in node.children)


def _analyse(expression: str, root: _Node, types: dict[int, bytes]) -> _Analysis:
    domains: set[str] = set()
    static_error = None
    # cel-go exempts the arguments of the strings extension's format() from the homogeneity rule.
    exempt = {id(arg) for node in _walk(root) if node.kind == "call" and node.name == "format"
              for arg in node.children}
    for node in _walk(root):
        if node.kind == "call" and node.name in ("_[_]", "_[?_]") and len(node.children) == 2:
            key = node.children[1]
            if key.kind == "const" and isinstance(key.const, str):
                domains.add(key.const)
            else:
                domains.add(_DRIVER_DOMAIN)
        elif node.kind == "select" and node.children:
            operand = node.children[0]
            if operand.kind == "ident" and operand.name in _MAPS:
                domains.add(node.name)
            if _message_type(types.get(operand.id, b"")) in ("kubernetes.Quantity", "kubernetes.Semver"):
                raise SelectorCompileError(expression, f"undefined field '{node.name}'")
        elif node.kind in ("list", "struct") and id(node) not in exempt:
            step = 2 if node.kind == "struct" else 1
            for offset in range(step):  # HomogeneousAggregateLiterals: elements (keys, values) of one type
                kinds = {types.get(child.id, b"") for child in node.children[offset::step]} - {_DYN_TYPE}
                if len(kinds) > 1:
                    raise SelectorCompileError(expression, "aggregate literal elements must have one type")
        elif node.kind == "call" and node.name == "_?_:_" and len(node.children) == 3:
            branches = {types.get(child.id, b"") for child in node.children[1:]} - {_DYN_TYPE}
            if len(branches) > 1:
                raise SelectorCompileError(expression, "no matching overload for '_?_:_' (branches differ in type)")
        if (node.kind == "call" and node.name in ("_==_", "_!=_") and len(node.children) == 2
                and node.children[1].kind == "call" and node.children[1].name in ("add", "sub")
                and _message_type(types.get(node.children[1].id, b"")) == "kubernetes.Quantity"):
            static_error = "no such overload (an add()/sub() result on the right of a comparison)"
    return _Analysis(tuple(sorted(domains)), _cost_bound(root), static_error)


def _has_on_device(node: _Node) -> bool:
    return any(n.kind == "select" and n.test_only and n.children and n.children[0].kind == "ident"
               and n.children[0].name == "device" for n in _walk(node))


def _clean(message: str) -> str:
    message = re.sub(r"^[A-Z_]+: ", "", message.strip())
    return re.sub(r" \[[A-Z_]+\]$", "", message)


# --------------------------------------------------------------------------------------------------------------
# Selectors


class Selector:
    """A compiled selector; ``matches`` evaluates it on one device."""

    def __init__(self, expression: str, program: Any, analysis: _Analysis) -> None:
        self.expression = expression
        self._program = program
        self._domains = analysis.domains
        #: Static upper bound of cel-go's runtime cost (compared with COST_LIMIT on evaluation).
        self.cost_bound = analysis.cost_bound
        self._static_error = analysis.static_error
        if self.cost_bound > COST_LIMIT:
            self._static_error = (f"operation cancelled: actual cost limit exceeded (worst case {self.cost_bound} "
                                  f"> {COST_LIMIT})")

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"

    def matches(self, device: DeviceInput) -> bool:
        """True/False, or SelectorEvalError on a runtime error (the scheduler then aborts the pod)."""
        if self._static_error is not None:
            raise SelectorEvalError(self.expression, device.driver, self._static_error)
        try:
            result = self._program.eval(device._activation(self._domains))
        except RuntimeError as err:  # cel-cpp's comprehension iteration budget (deviation 7)
            raise SelectorEvalError(self.expression, device.driver, _clean(str(err))) from None
        value = result.value()
        if value is True or value is False:
            return value
        if result.type() == cel.Type.ERROR:
            raise SelectorEvalError(self.expression, device.driver, _clean(str(value)))
        raise SelectorEvalError(self.expression, device.driver,
                                f"CEL result of type {result.type().name().lower()} could not be converted to bool")


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector:
    """Compile ``expression`` in the DRA environment (cached); SelectorCompileError if it is not a bool selector."""
    if not isinstance(expression, str):
        raise SelectorCompileError(repr(expression), "the expression must be a string")
    try:
        parsed = _ENV.compile(expression, disable_check=True)
    except RuntimeError as err:
        raise SelectorCompileError(expression, _clean(str(err))) from None
    if _has_on_device(_decode_checked(parsed.serialize())[0]):
        raise SelectorCompileError(expression, "has() on a device field is not supported (the fields always exist)")
    try:
        program = _ENV.compile(expression)
    except RuntimeError as err:
        raise SelectorCompileError(expression, _clean(str(err))) from None
    result_type = program.return_type()
    if result_type not in (cel.Type.BOOL, cel.Type.DYN):
        raise SelectorCompileError(expression, f"must evaluate to bool or the unknown type, not "
                                               f"{result_type.name().lower()}")
    root, types = _decode_checked(program.serialize())
    return Selector(expression, program, _analyse(expression, root, types))
