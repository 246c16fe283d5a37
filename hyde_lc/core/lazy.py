"""Packages whose public names are imported on first use (PEP 562).

A package's ``__init__`` maps each public name to the module that defines it and takes
its ``__getattr__`` and ``__dir__`` from `lazy_exports`: importing the package then loads
none of those modules (nor the libraries they import) until one of the names is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is ``namespace``.

    ``exports`` maps each public name to the module that defines it. A name is imported on
    first use and kept in ``namespace``, so later lookups skip ``__getattr__``; any other
    name raises AttributeError. ``__dir__`` lists the namespace and the package's
    ``__all__``.

    Example:
        >>> namespace = {"__name__": "pkg", "__all__": ["sqrt"]}
        >>> getattr_, dir_ = lazy_exports(namespace, {"sqrt": "math"})
        >>> getattr_("sqrt")(4.0), "sqrt" in namespace, dir_()
        (2.0, True, ['__all__', '__name__', 'sqrt'])

    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        """Import a public name from its module on first use (PEP 562)."""
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace["__all__"]})

    return __getattr__, __dir__
