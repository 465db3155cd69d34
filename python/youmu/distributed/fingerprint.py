"""Fingerprints of the settings every rank (or every resume) must share.

A loader hashes the settings that decide what it emits; ranks compare the hashes
when they start (a clear error instead of mismatched collectives), and a saved state
carries it so a resume under other settings is refused. The hash must be the same in
every process of a job and across restarts, so settings are described by value:
functions by qualified name (their ``repr`` holds a per-process memory address).

Example:
    >>> fingerprint({"token_budget": 4096, "seed": 0}) == fingerprint({"seed": 0, "token_budget": 4096})
    True
    >>> describe(len)
    'builtins.len'
"""

from __future__ import annotations

import functools
import hashlib
import json
import types
from collections.abc import Mapping
from typing import Any

__all__ = ["fingerprint", "describe"]


def describe(value: Any) -> str:
    """A run-independent description of a setting: functions by qualified name,
    objects with a default ``repr`` by type, everything else by ``repr``."""
    if isinstance(value, functools.partial):
        return f"partial({describe(value.func)}, {value.args!r}, {sorted(value.keywords.items())!r})"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__name__)}"
    text = repr(value)
    if " at 0x" in text:  # default object repr: describe by type only
        return f"{type(value).__module__}.{type(value).__qualname__}"
    return text


def fingerprint(settings: Mapping[str, Any]) -> int:
    """63-bit hash of ``settings`` (a JSON-able mapping; other values by :func:`describe`)."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=describe).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
