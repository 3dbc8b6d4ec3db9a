"""Resource vectors: exact integer amounts keyed by resource name (cpu in millicores, memory in bytes)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic_core import core_schema

from model.errors import InputError
from model.quantity import format_quantity, quantity_int

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"


def quantities(raw: Mapping[str, Any] | None, *, saturate: bool = False) -> dict[str, int]:
    """A ``{resource: quantity}`` map in base units, zeros kept (an explicit ``cpu: 0`` request is not an
    absent one); errors name the resource as the field."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InputError(f"expected a map of resource quantities, got {type(raw).__name__}")
    out: dict[str, int] = {}
    for name, text in raw.items():
        try:
            out[str(name)] = quantity_int(str(name), text, saturate=saturate)
        except InputError as err:
            raise err.located(field_prefix=str(name)) from None
    return out


class Resources(Mapping[str, int]):
    """An immutable, hashable resource vector. Missing resources are zero."""

    __slots__ = ("_hash", "_items")

    def __init__(self, values: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = dict(values)
        self._items: dict[str, int] = {k: int(v) for k, v in sorted(items.items()) if v}
        self._hash: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, *, saturate: bool = False) -> Resources:
        """Parse a Kubernetes ``{resource: quantity}`` map; errors name the resource as the field.
        ``saturate``: quantities past what the solver holds become that maximum (for caps such as limits)."""
        return cls(quantities(raw, saturate=saturate))

    def __getitem__(self, key: str) -> int:
        return self._items.get(key, 0)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        return f"Resources({self.format()})"

    @classmethod
    def _of_ints(cls, items: dict[str, int]) -> Resources:
        """A vector of amounts that are ints already (the sum or difference of two vectors): skips the
        constructor's copy and conversion, which the per-node room sums and the solver's templates repeat
        thousands of times a batch."""
        out = cls.__new__(cls)
        out._items = {k: v for k, v in sorted(items.items()) if v}
        out._hash = None
        return out

    def __add__(self, other: Mapping[str, int]) -> Resources:
        out = dict(self._items)
        for k, v in _items(other):
            out[k] = out.get(k, 0) + v
        return Resources._of_ints(out) if isinstance(other, Resources) else Resources(out)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        out = dict(self._items)
        for k, v in _items(other):
            out[k] = out.get(k, 0) - v
        return Resources._of_ints(out) if isinstance(other, Resources) else Resources(out)

    def scaled(self, factor: int) -> Resources:
        return Resources({k: v * factor for k, v in self._items.items()})

    def fits_in(self, capacity: Mapping[str, int]) -> bool:
        """True when every amount here is at most the same resource in ``capacity`` (missing = 0)."""
        room = capacity._items if isinstance(capacity, Resources) else capacity
        return all(v <= room.get(k, 0) for k, v in self._items.items() if v > 0)

    def exceeding(self, capacity: Mapping[str, int]) -> list[str]:
        """Names of resources whose amount here is above ``capacity``."""
        return [k for k, v in self._items.items() if v > 0 and v > capacity.get(k, 0)]

    def clamp_nonnegative(self) -> Resources:
        return Resources({k: max(v, 0) for k, v in self._items.items()})

    @staticmethod
    def max_of(vectors: Iterable[Mapping[str, int]]) -> Resources:
        out: dict[str, int] = {}
        for vec in vectors:
            for k, v in vec.items():
                out[k] = max(out.get(k, 0), v)
        return Resources(out)

    def format(self) -> str:
        return ", ".join(f"{k}={format_quantity(k, v)}" for k, v in self._items.items())

    def to_quantities(self) -> dict[str, str]:
        return {k: format_quantity(k, v) for k, v in self._items.items()}

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        def validate(value: Any) -> Resources:
            return value if isinstance(value, Resources) else Resources.parse(value)

        return core_schema.no_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(
                lambda r: r.to_quantities()))


def _items(vector: Mapping[str, int]) -> Iterable[tuple[str, int]]:
    """A vector's (resource, amount) pairs; a ``Resources``' own dict's, not the generic Mapping view's."""
    return vector._items.items() if isinstance(vector, Resources) else vector.items()
