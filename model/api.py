"""Helpers for API-shaped pydantic models (camelCase on the wire, like Kubernetes)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from model.errors import InputError

M = TypeVar("M", bound=BaseModel)


class ApiModel(BaseModel):
    """Base of every model that mirrors a Kubernetes API object: camelCase aliases, immutable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part.startswith("function-") and "[" not in part:
            out += f".{part}" if out else part
    return out


def validate_api(model: type[M], data: Any, *, field_prefix: str = "") -> M:
    """Validate ``data`` into ``model``; the first problem becomes one InputError naming its field."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = _loc(tuple(first["loc"]))
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        ctx_error = (first.get("ctx") or {}).get("error")
        message = ctx_error.message if isinstance(ctx_error, InputError) else first["msg"].removeprefix("Value error, ")
        if isinstance(ctx_error, InputError) and ctx_error.field:
            field = f"{field}.{ctx_error.field}" if field else ctx_error.field
        raise InputError(message, field=field or None) from None
