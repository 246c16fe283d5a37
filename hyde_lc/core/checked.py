"""`CheckedModel`: settings checked when made and when assigned, in the package's words.

The package's configurable classes (`hyde_lc.HyDERetriever`, `hyde_lc.HyDEEmbeddings`, ...)
are pydantic models. Made from this base, an invalid setting raises
`hyde_lc.errors.InvalidSettingError` (one line per setting, `settings_error`) both when the
object is made and when a field is assigned later; a refused assignment leaves the object
as it was, so it never runs with settings that were refused.

Example:
    >>> from pydantic import field_validator
    >>> class Window(CheckedModel):
    ...     size: int = 1
    ...     @field_validator("size")
    ...     @classmethod
    ...     def _positive(cls, value: int) -> int:
    ...         if value < 1:
    ...             raise ValueError("size must be at least 1")
    ...         return value
    >>> window = Window()
    >>> window.size = 0
    Traceback (most recent call last):
    ...
    hyde_lc.errors.InvalidSettingError: invalid Window settings: size must be at least 1
    >>> window.size
    1

"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from hyde_lc.errors import settings_error


class CheckedModel(BaseModel):
    """A pydantic model whose settings are checked when made and when assigned (see module)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise settings_error(type(self), exc) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in type(self).model_fields:
            super().__setattr__(name, value)
            return
        before = self.__dict__.get(name)
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            self.__dict__[name] = before  # a check of the whole failed after the assignment
            raise settings_error(type(self), exc) from None
