"""``FlatMixture``: the children concatenated under one global keyed permutation.

It behaves as if all data had been tokenized into one dataset, while every child keeps
its own files. Over youmu Parquet sources it also exposes one page space
(:meth:`FlatMixture.page_index`), so ``YoumuDataset(flat_mixture)`` streams it at
page-shuffle speed. The index math is ``youmu._core.FlatMap``.

Example:
    >>> fm = FlatMixture({"math": list(range(10)), "code": list(range(300))}, seed=1)
    >>> len(fm), fm.lengths
    (310, {'math': 10, 'code': 300})
    >>> fm.locate(fm.position("math", 7))
    ('math', 7)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from youmu._core import FlatMap
from youmu._internal.args import bool_arg, int_array, seed_arg
from youmu.errors import ArgumentTypeError
from youmu.mixture.children import MapMixture, child_length, mixture_children

__all__ = ["FlatMixture"]


class FlatMixture(MapMixture):
    """Children concatenated (in the given order) under one keyed permutation.

    Args:
        children: ``{name: dataset}``; a dataset needs ``len`` and indexing (a
            ``youmu.PageIndex`` or a path is read as a ``youmu.RowDataset``). Empty
            children are allowed.
        seed: permutation key (``[0, 2^64)``).
        shuffle: ``False`` keeps plain concatenation order.

    ``len`` is the sum of the children's lengths; ``fm[i]`` is the item at
    ``fm.locate(i)``; nothing is copied. The order is exactly
    ``youmu.Permutation(len(fm), seed=seed, purpose="flat-mixture")`` applied to the
    concatenation ("concatenate, then shuffle").

    Example:
        >>> fm = FlatMixture({"a": ["a0", "a1"], "b": ["b0", "b1", "b2"]}, seed=3)
        >>> sorted(fm[i] for i in range(len(fm)))
        ['a0', 'a1', 'b0', 'b1', 'b2']
        >>> fm[fm.position("b", 2)]
        'b2'
    """

    def __init__(self, children: Mapping[str, Any], seed: int = 0, shuffle: bool = True) -> None:
        self.children = mixture_children(children, "FlatMixture")
        self.names = list(self.children)
        self.seed = seed_arg(seed)
        self.shuffle = bool_arg("shuffle", shuffle)
        self._map = FlatMap([child_length(n, c) for n, c in self.children.items()], seed=self.seed,
                            shuffle=self.shuffle)

    @property
    def lengths(self) -> dict[str, int]:
        return dict(zip(self.names, self._map.lengths))

    def locate_many(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(child numbers, indices in child)`` as int64 arrays for many global
        indices (one Rust call; ``self.names[c]`` names child ``c``)."""
        return self._map.locate_many(int_array(indices, "indices"))

    def position(self, name: str, local: int) -> int:
        """Global index where item ``local`` of child ``name`` appears (inverse of
        :meth:`locate`)."""
        return int(self._map.position(self._child_number(name), self._child_draw("local", local)))

    def _settings_description(self) -> dict[str, Any]:
        return {"seed": self.seed, "shuffle": self.shuffle}

    def page_index(self) -> Any:
        """One ``youmu.PageIndex`` over all children, when every child is a youmu
        Parquet source (``RowDataset``, ``PageIndex`` or a ``FlatMixture`` of them).

        ``YoumuDataset(flat_mixture)`` uses it to shuffle pages and windows across all
        sources at page-read speed, with no per-source buffer: the stream is a
        different (page-granular) shuffle of the same rows, not ``fm[0], fm[1], …``.
        Raises ``TypeError`` naming the first child that is not a Parquet source."""
        from youmu._core import PageIndex

        parts = []
        for name, c in self.children.items():
            if isinstance(c, PageIndex):
                parts.append(c)
            elif isinstance(c, FlatMixture):
                parts.append(c.page_index())
            elif isinstance(getattr(c, "index", None), PageIndex):
                parts.append(c.index)
            else:
                raise ArgumentTypeError(f"child {name!r} ({type(c).__name__}) is not a youmu Parquet source")
        return PageIndex.concat(parts)

    def __repr__(self) -> str:
        return f"FlatMixture({len(self.names)} children, {len(self)} items, seed={self.seed})"
