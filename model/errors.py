"""Typed user-facing errors: every problem with input names where it is (file, object, field)."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input. The CLI prints ``str(err)`` as one line and exits 2."""

    def __init__(self, message: str, *, file: str | None = None, obj: str | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.obj = obj
        self.field = field

    def located(self, *, file: str | None = None, obj: str | None = None,
                field_prefix: str | None = None) -> InputError:
        """Return a copy with missing location parts filled in (inner code knows the field, outer the file)."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return InputError(self.message, file=self.file or file, obj=self.obj or obj, field=field)

    def __str__(self) -> str:
        where = [part for part in (self.file, self.obj) if part]
        if self.field:
            where.append(f"field {self.field}")
        return f"{': '.join(where)}: {self.message}" if where else self.message
