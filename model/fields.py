"""Typed access to raw Kubernetes objects, raising InputError that names the offending field path."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from model.errors import InputError

T = TypeVar("T")


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
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, (dict, list)):
            raise InputError(f"expected a string, got {type(value).__name__}", field=self._field(key))
        return str(value)

    def int(self, key: builtins.str, default: builtins.int | None = None) -> builtins.int | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                return int(str(value))
            except ValueError:
                raise InputError(f"expected an integer, got {value!r}", field=self._field(key)) from None
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
        return {str(k): "" if v is None else str(v) for k, v in value.items()}

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
