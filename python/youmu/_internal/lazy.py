"""Lazy attributes of a package: names whose modules pull in heavy optional
dependencies (torch, Ray, trainers) are imported on first access, so ``import youmu``
stays light and never imports them (PEP 562 module ``__getattr__``).

Example:
    >>> table = {"sqrt": "math"}
    >>> getattr_, dir_ = lazy_attributes("demo", table, {})
    >>> getattr_("sqrt")(9.0), "sqrt" in dir_()
    (3.0, True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, table: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``table`` maps a public name
    to the module defining it; a name, once imported, is cached in ``namespace`` (the
    package's ``globals()``) so later lookups skip this hook."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
