"""Typed access to raw Kubernetes objects, raising InputError that names the offending field path."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from model.errors import InputError

T = TypeVar("T")
INT64 = 2**63


def _describe(value: Any) -> builtins.str:
    """A value in an error message: its type, and the value itself when it is short."""
    kind = type(value).__name__
    if isinstance(value, (bool, int, float)) and len(repr(value)) <= 40:
        return f"{kind} {value!r}"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a {len(value)}-character string"
    return kind


class RawObject:
    """A view on a dict from ``kubectl get -o yaml`` that knows its own path for error messages."""

    def __init__(self, data: Any, path: builtins.str = "") -> None:
        if data is not None and not isinstance(data, Mapping):
            raise InputError(f"expected an object, got {type(data).__name__}", field=path or None)
        self.data: Mapping[str, Any] = data or {}
        self.path = path

    def _field(self, key: builtins.str) -> builtins.str:
        return f"{self.path}.{key}" if self.path else key

    def obj(self, key: builtins.str) -> RawObject:
        return RawObject(self.data.get(key), self._field(key))

    def str(self, key: builtins.str, default: builtins.str = "") -> builtins.str:
        """A string field. Numbers and booleans are refused as the API server refuses them (a plain ``yes``
        or ``1.0`` in YAML is not a string: quote it)."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise InputError(f"expected a string, got {_describe(value)}", field=self._field(key))
        return value

    def int_or_str(self, key: builtins.str) -> builtins.str:
        """An IntOrString field (``minAvailable: 2`` or ``"50%"``) as its text; "" when unset."""
        value = self.data.get(key)
        if isinstance(value, builtins.int) and not isinstance(value, bool):
            return builtins.str(self.int(key))
        return self.str(key)

    def int(self, key: builtins.str, default: builtins.int | None = None) -> builtins.int | None:
        """An integer field (int64, as Kubernetes' integer fields are at most); a string of digits is read
        as its number, anything else is refused."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            text = value.strip() if isinstance(value, str) else ""
            if not (text.lstrip("+-").isdigit() and len(text) <= 20):
                raise InputError(f"expected an integer, got {_describe(value)}", field=self._field(key))
            value = int(text)
        if not -INT64 <= value < INT64:
            raise InputError(f"integer {value} is out of range (int64)", field=self._field(key))
        return value

    def bool(self, key: builtins.str, default: builtins.bool = False) -> builtins.bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"expected true or false, got {value!r}", field=self._field(key))
        return value

    def string_map(self, key: builtins.str) -> dict[builtins.str, builtins.str]:
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise InputError("expected a map of strings", field=self._field(key))
        out = {}
        for k, v in value.items():
            if v is not None and not isinstance(v, str):
                raise InputError(f"expected a string, got {_describe(v)}", field=f"{self._field(key)}.{k}")
            out[str(k)] = v or ""
        return out

    def items(self, key: builtins.str) -> list[RawObject]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise InputError(f"expected a list, got {type(value).__name__}", field=self._field(key))
        return [RawObject(item, f"{self._field(key)}[{i}]") for i, item in enumerate(value)]

    def parse(self, key: builtins.str, parser: Callable[[Any], T]) -> T:
        """Run a model parser on a sub-value, prefixing the parser's field with this path."""
        try:
            return parser(self.data.get(key))
        except InputError as err:
            raise err.located(field_prefix=self._field(key)) from None

    def parse_each(self, key: builtins.str, parser: Callable[[Any], T]) -> list[T]:
        out = []
        for item in self.items(key):
            try:
                out.append(parser(item.data))
            except InputError as err:
                raise err.located(field_prefix=item.path) from None
        return out
