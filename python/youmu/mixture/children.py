"""What the mixtures share: their children and the items behind a global index.

A mixture is a pure map from a global index to ``(child, index in child)`` (computed in
Rust); :class:`MapMixture` turns that map into a map-style dataset — ``len``,
``m[i]``, batched ``__getitems__`` (one call per child touched, so nested mixtures and
Parquet children stay batched), the range checks and the description a stream state
records. :func:`mixture_children` checks the ``{name: dataset}`` a mixture is built
over (a ``youmu.PageIndex`` or a path becomes a ``RowDataset``).

Example:
    >>> kids = mixture_children({"a": [10, 11], "b": ["x"]}, "demo")
    >>> {n: child_length(n, c) for n, c in kids.items()}
    {'a': 2, 'b': 1}
    >>> get_many(kids["a"], [1, 0])
    [11, 10]
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from youmu._internal.args import int_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError, PageOutOfRangeError, UnknownNameError
from youmu.state.contract import describe_data

__all__ = ["MAX_INDEX", "MapMixture", "child_length", "get_many", "mixture_children", "rows_per_page"]


def _as_child(name: str, ds: Any) -> Any:
    """A youmu source given as a ``PageIndex`` or a path becomes a ``RowDataset`` (with a
    small page cache, which chunk-local pass orders make effective); anything else must
    be map-style already."""
    from youmu._core import PageIndex

    if isinstance(ds, (PageIndex, str, os.PathLike)):
        from youmu.streams.rows import RowDataset

        return RowDataset(ds, cache_pages=4)
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise ArgumentTypeError(f"child {name!r} ({type(ds).__name__}) needs len() and indexing")
    return ds


def mixture_children(children: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``children`` checked: a non-empty mapping of str names to map-style datasets."""
    if not isinstance(children, Mapping):
        raise ArgumentTypeError(f"{what} children must be a mapping {{name: dataset}}, got {type(children).__name__}")
    if not children:
        raise InvalidArgumentError(f"{what} needs at least one child")
    out = {}
    for name, ds in children.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(f"child names must be str, got {name!r}")
        out[name] = _as_child(name, ds)
    return out


def child_length(name: str, ds: Any) -> int:
    """The length of child ``name`` (never negative)."""
    n = int(len(ds))
    if n < 0:
        raise InvalidArgumentError(f"child {name!r} has a negative length")
    return n


#: indices, lengths and block sizes are int64 in the Rust maps
MAX_INDEX = (1 << 63) - 1


def rows_per_page(ds: Any) -> int:
    """Typical rows per page of a youmu Parquet source (``RowDataset``), else 1."""
    from youmu._core import PageIndex

    index = getattr(ds, "index", None)
    if isinstance(index, PageIndex) and len(index):
        return max(1, int(np.median(index.page_num_rows())))
    return 1


def get_many(ds: Any, idx: list[int]) -> list[Any]:
    """Items ``idx`` of ``ds``, batched when it has ``__getitems__``."""
    get = getattr(ds, "__getitems__", None)
    if get is not None:
        return list(get(idx))
    return [ds[i] for i in idx]


class MapMixture:
    """Item access shared by the mixtures (see the module doc). Subclasses set ``names``, ``children`` and
    ``_map`` and define ``locate_many(indices) -> (child numbers, child indices)``."""

    names: list[str]
    children: dict[str, Any]

    def __len__(self) -> int:
        return len(self._map)  # type: ignore[attr-defined]

    def locate(self, i: int) -> tuple[str, int]:
        """``(child_name, index_in_child)`` of global index ``i`` (negative counts from
        the end): a pure function of ``i``."""
        c, local = self._map.locate(int_arg("i", i))[:2]  # type: ignore[attr-defined]
        return self.names[c], int(local)

    def locate_many(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def __getitem__(self, i: int) -> Any:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise ArgumentTypeError(f"{type(self).__name__} indices must be integers, got {type(i).__name__}")
        name, local = self.locate(i)
        return self.children[name][local]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Batch access: one ``__getitems__`` call per child touched, so nested
        mixtures and Parquet children stay batched all the way down."""
        child, local = self.locate_many(indices)
        out: list[Any] = [None] * len(child)
        for c in np.unique(child):
            pos = np.flatnonzero(child == c)
            items = get_many(self.children[self.names[int(c)]], local[pos].tolist())
            for p, item in zip(pos.tolist(), items):
                out[p] = item
        return out

    def _in_range(self, name: str, i: Any, *, upto: bool) -> int:
        """``i`` as an index in ``[0, len]`` (``upto``: a count of indices) or ``[0, len)``."""
        i = int_arg(name, i, minimum=0)
        n = len(self)
        if i > n or (i == n and not upto):
            span = f"[0, {n}]" if upto else f"[0, {n})"
            raise PageOutOfRangeError(f"{name}={i} is outside {span}: the mixture has {n} indices")
        return i

    def _child_number(self, name: str) -> int:
        """The number of child ``name`` (its position in ``names``)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise UnknownNameError(f"no child named {name!r}") from None

    def _child_draw(self, name: str, value: Any) -> int:
        """A position in a child (a draw or item number): an int in ``[0, 2**63)``."""
        return int_arg(name, value, minimum=0, maximum=MAX_INDEX)

    def _state_fingerprint(self) -> dict[str, Any]:
        """What identifies this mixture for stream states (:func:`youmu.state.contract.data_fingerprint`):
        its settings and every child's own description."""
        return {"type": type(self).__name__, "len": len(self), **self._settings_description(),
                "children": {n: describe_data(c) for n, c in self.children.items()}}

    def _settings_description(self) -> dict[str, Any]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        n, step = len(self), 1024
        for lo in range(0, n, step):
            yield from self.__getitems__(range(lo, min(lo + step, n)))
