"""Every declared state format, found from one list of where each is declared.

:func:`youmu.merge_states` takes a format's merge from its declaration
(:attr:`~youmu.state.formats.StateFormat.merger`) through this catalog, and the promise
tests walk it (each format's fields forged, each declaration found here): a new loader
state is its :class:`~youmu.state.formats.StateFormat` plus one line in :data:`HOMES`.
The homes are named, not imported, because the loaders declaring them sit in layers
above this one; :func:`declared` imports them on use.

Example:
    >>> fmt = format_tagged("youmu.batching/1")
    >>> fmt.owner, fmt.tag, fmt.merger
    ('DynamicBatchLoader', 'youmu.batching/2', 'youmu.batching.merge:merge_loader_states')
    >>> format_tagged("youmu.NoSuchThing/1") is None
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from youmu.state.formats import StateFormat

__all__ = ["HOMES", "declared", "format_tagged", "merger_of"]

#: ``"module:attribute"`` of every declaration: a :class:`StateFormat`, or a dict of them.
HOMES = (
    "youmu.state.stream:STREAM_FORMATS",
    "youmu.batching.state:LOADER_STATE",
    "youmu.planning.state.checkpoint:BALANCED_LOADER_STATE",
    "youmu.ray.state:CLIENT_STATE",
    "youmu.integrations.trainer.states:TRAINER_STATE",
    "youmu.integrations.trainer.states:GATHERED_STATE",
    "youmu.batching.algo.loss:TOKEN_UPDATES_STATE",
)


def _resolve(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@cache
def declared() -> tuple[StateFormat, ...]:
    """Every declared format, in :data:`HOMES`' order."""
    out: list[StateFormat] = []
    for home in HOMES:
        found = _resolve(home)
        out.extend(found.values() if isinstance(found, Mapping) else [found])
    return tuple(out)


@cache
def _by_tag() -> dict[str, StateFormat]:
    return {tag: fmt for fmt in declared() for tag in fmt.tags}


def format_tagged(tag: Any) -> StateFormat | None:
    """The declared format that loads states tagged ``tag`` (``None`` for no format)."""
    return _by_tag().get(tag) if isinstance(tag, str) else None


def merger_of(tag: Any) -> Callable[..., dict[str, Any]] | None:
    """The merge of states tagged ``tag`` its declaration names (``None``: no declared
    format, or one merged as a row stream)."""
    fmt = format_tagged(tag)
    return None if fmt is None or fmt.merger is None else _resolve(fmt.merger)
