"""Credentials never leave youmu: the Python side of the one redaction (the Rust core's
``redact``), for every string Python builds — messages, reprs, skip reports.

:func:`redact` blanks user info in URLs, the query and fragment values of URLs (a
presigned or SAS URL's query is its credential), signature and token parameters, and
the secret ``storage_options`` values this process has seen. :func:`redact_options`
blanks the values of secret keys (:func:`is_secret_key`, the same rule as the core's),
for options shown before any store saw them.

Example:
    >>> redact("cannot read http://admin:pw@host/a.parquet?sig=abc")
    'cannot read http://***@host/a.parquet?sig=***'
    >>> redact_options({"endpoint": "http://127.0.0.1:9000", "aws_secret_access_key": "abc"})
    {'endpoint': 'http://127.0.0.1:9000', 'aws_secret_access_key': '***'}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from youmu import _core

__all__ = ["MASK", "redact", "is_secret_key", "redact_options", "redacted_repr"]

#: What a secret is replaced with.
MASK = "***"


def redact(text: Any) -> str:
    """``str(text)`` with every credential it holds blanked out."""
    return _core.redact(str(text))


def is_secret_key(key: Any) -> bool:
    """Whether the ``storage_options`` key ``key`` names a secret."""
    return isinstance(key, str) and _core.is_secret_key(key)


def redact_options(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``options`` with the values of secret keys blanked out (``None`` stays ``None``)."""
    if options is None:
        return None
    return {k: MASK if is_secret_key(k) else v for k, v in options.items()}


def redacted_repr(obj: Any) -> str:
    """A dataclass's repr with its ``storage_options`` blanked by key and every field
    through :func:`redact` (URLs with user info or signatures among its paths)."""
    parts = []
    for f in dataclasses.fields(obj):
        if not f.repr:
            continue
        value = getattr(obj, f.name)
        if f.name == "storage_options" and isinstance(value, Mapping):
            value = redact_options(value)
        parts.append(f"{f.name}={value!r}")
    return redact(f"{type(obj).__qualname__}({', '.join(parts)})")
