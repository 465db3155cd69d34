"""Mixtures over any map-style datasets (``len`` + indexing), as pure index maps.

* :class:`FlatMixture` — the children concatenated under one global keyed permutation:
  behaves as if all data had been tokenized into one dataset, while every child keeps
  its own files. Over youmu Parquet sources it also exposes one page space
  (:meth:`FlatMixture.page_index`), so ``YoumuDataset(flat_mixture)`` streams it at
  page-shuffle speed.
* :class:`MixtureDataset` — weighted, block-deterministic mixing with an exact
  allocation: every positive weight is sampled at its exact long-run rate, however
  small; weight stages (curricula) switch at exact indices; finite children restart
  in a fresh order per pass or stop the mixture.

Both are pure functions of the index (``locate(i)`` needs no state), so resuming is
setting the index and every rank computes the same answer. The index math runs in
Rust (``youmu._core.FlatMap`` / ``MixtureMap``); these classes own the children and
fetch the items.

Allocation of :class:`MixtureDataset` (details in ``rust/mixture.rs``): the samples of a
stage are dealt to the children by a binary tree whose nodes split their samples
with mechanical sequences ``floor((k·p + φ) / 2^64)`` — exact integer arithmetic, so
every block holds exactly ``block_size`` samples, every child's count is monotone, and
a child's count in any window of whole blocks is within :meth:`MixtureDataset.window_bounds`
of ``blocks · block_size · weight`` (below 1 for two children, about 1–2.5 for many;
below 1 for all children at once is impossible in general with exact block sizes).
No weight is rounded to zero: a 1e-6 child with ``block_size=64`` appears once per
~10^6 samples, on schedule, where Levanter's ``int(weight · block_size)`` never
samples it. Inside a block the slots are in a keyed random order.

Example:
    >>> from youmu.mixture import FlatMixture, MixtureDataset
    >>> web, math, code = list(range(1000)), list(range(10)), list(range(300))
    >>> flat = FlatMixture({"math": math, "code": code}, seed=1)   # 310 items, shuffled
    >>> mix = MixtureDataset({"web": web, "rest": flat}, weights={"web": 0.9, "rest": 0.1},
    ...                      block_size=64, length=6400)
    >>> mix.counts(6400)
    {'web': 5760, 'rest': 640}
    >>> name, index = mix.locate(0)
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from youmu._args import bool_arg, choice_arg, int_arg, int_array, opt_int_arg, seed_arg
from youmu._core import FlatMap, MixtureMap
from youmu.errors import ArgumentTypeError, InvalidArgumentError, PageOutOfRangeError, UnknownNameError
from youmu.stateful import describe_data

POLICIES = ("restart", "stop")

Weights = Union[Mapping[str, float], Sequence[tuple[int, Mapping[str, float]]]]  # noqa: UP007 - a runtime alias on 3.10


def _as_child(name: str, ds: Any) -> Any:
    """A youmu source given as a ``PageIndex`` or a path becomes a ``RowDataset`` (with a
    small page cache, which chunk-local pass orders make effective); anything else must
    be map-style already."""
    from youmu._core import PageIndex

    if isinstance(ds, (PageIndex, str, os.PathLike)):
        from youmu.rows import RowDataset

        return RowDataset(ds, cache_pages=4)
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise ArgumentTypeError(f"child {name!r} ({type(ds).__name__}) needs len() and indexing")
    return ds


def _children(children: Mapping[str, Any], what: str) -> dict[str, Any]:
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


def _length(name: str, ds: Any) -> int:
    n = int(len(ds))
    if n < 0:
        raise InvalidArgumentError(f"child {name!r} has a negative length")
    return n


#: indices, lengths and block sizes are int64 in the Rust maps
_MAX_INDEX = (1 << 63) - 1


def _seed(seed: int) -> int:
    return seed_arg(seed)


def _rows_per_page(ds: Any) -> int:
    """Typical rows per page of a youmu Parquet source (``RowDataset``), else 1."""
    from youmu._core import PageIndex

    index = getattr(ds, "index", None)
    if isinstance(index, PageIndex) and len(index):
        return max(1, int(np.median(index.page_num_rows())))
    return 1


def _get_many(ds: Any, idx: list[int]) -> list[Any]:
    get = getattr(ds, "__getitems__", None)
    if get is not None:
        return list(get(idx))
    return [ds[i] for i in idx]


class _MapMixture:
    """Item access shared by the mixtures. Subclasses set ``names``, ``children`` and
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
            items = _get_many(self.children[self.names[int(c)]], local[pos].tolist())
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

    def _child_draw(self, name: str, value: Any) -> int:
        """A position in a child (a draw or item number): an int in ``[0, 2**63)``."""
        return int_arg(name, value, minimum=0, maximum=_MAX_INDEX)

    def _state_fingerprint(self) -> dict[str, Any]:
        """What identifies this mixture for stream states (:func:`youmu.stateful.data_fingerprint`):
        its settings and every child's own description."""
        return {"type": type(self).__name__, "len": len(self), **self._settings_description(),
                "children": {n: describe_data(c) for n, c in self.children.items()}}

    def _settings_description(self) -> dict[str, Any]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        n, step = len(self), 1024
        for lo in range(0, n, step):
            yield from self.__getitems__(range(lo, min(lo + step, n)))


# --------------------------------------------------------------------------------------
# FlatMixture
# --------------------------------------------------------------------------------------
class FlatMixture(_MapMixture):
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
        self.children = _children(children, "FlatMixture")
        self.names = list(self.children)
        self.seed = _seed(seed)
        self.shuffle = bool_arg("shuffle", shuffle)
        self._map = FlatMap([_length(n, c) for n, c in self.children.items()], seed=self.seed, shuffle=self.shuffle)

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

    def _child_number(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise UnknownNameError(f"no child named {name!r}") from None

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


# --------------------------------------------------------------------------------------
# MixtureDataset
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stage:
    """One weight stage: indices ``[start, end)`` (``end=None``: open-ended)."""

    start: int
    end: int | None
    children: np.ndarray  # child numbers with a positive weight
    weights: np.ndarray  # their normalised weights, aligned with `children`

    def as_dict(self, names: Sequence[str]) -> dict[str, float]:
        return {names[int(c)]: float(w) for c, w in zip(self.children, self.weights)}


class MixtureDataset(_MapMixture):
    """Weighted, block-deterministic mixture with an exact allocation.

    Args:
        children: ``{name: dataset}`` (``len`` + indexing; a ``youmu.PageIndex`` or a
            path is read as a ``youmu.RowDataset``). Mixtures nest both ways.
        weights: ``{name: weight}`` (any non-negative scale; missing names get 0), or a
            curriculum: a list of ``(start_index, {name: weight})``, the first starting
            at 0 and starts strictly increasing. The mix changes exactly at each start.
        seed: key of every order (block slots, allocation phases, child passes).
        block_size: samples per block; every block holds exactly this many (the last
            block of a stage holds what is left of the stage).
        policy: when a child runs out: ``"restart"`` (a fresh keyed order of the child
            for every pass) or ``"stop"`` (the mixture ends where the allocation first
            asks a child for more than it has; every draw before that point is made,
            so the exhausted child is used exactly once, and later stages are dropped).
        length: number of indices (default: the sum of the children's lengths under
            ``"restart"``, the exhaustion point under ``"stop"``). The map does not
            depend on it: a longer mixture starts with the shorter one.
        child_chunk: order of each pass over a child. 1: uniform over the child. ``R
            > 1``: chunk-local — runs of ``R`` consecutive items in a keyed order, the
            items of a run shuffled among themselves — so consecutive draws of a child
            read neighbouring rows (the same Parquet pages; pair it with
            ``RowDataset(cache_pages=...)``) instead of one page per row. ``"auto"``
            (default): the typical rows per page for youmu Parquet children
            (``RowDataset``), 1 for any other child. An int applies to every child; a
            ``{name: R}`` mapping sets some (others 1). The allocation is the same.

    ``locate(i)`` → ``(child_name, child_index)`` is a pure function of ``i``;
    :meth:`passes` and :meth:`locate_passes` tell which pass over a child an index
    belongs to (for logging epochs of small sources).

    Example:
        >>> mix = MixtureDataset({"web": list(range(1000)), "math": list(range(10))},
        ...                      weights=[(0, {"web": 1.0}), (640, {"web": 0.99, "math": 0.01})],
        ...                      block_size=64, length=64_640)
        >>> mix.locate(639)[0], mix.counts(640)
        ('web', {'web': 640, 'math': 0})
        >>> mix.counts(64_640)["math"]           # 1% of the 64,000 indices of stage 1
        640
        >>> mix.passes(64_640)["math"]           # its 10 items were seen in 64 passes
        64
    """

    def __init__(
        self,
        children: Mapping[str, Any],
        weights: Weights,
        seed: int = 0,
        block_size: int = 2048,
        policy: str = "restart",
        length: int | None = None,
        child_chunk: int | Mapping[str, int] | str = "auto",
    ) -> None:
        self.children = _children(children, "MixtureDataset")
        self.names = list(self.children)
        choice_arg("policy", policy, POLICIES)
        int_arg("block_size", block_size, minimum=1, maximum=_MAX_INDEX)
        opt_int_arg("length", length, minimum=0, maximum=_MAX_INDEX)
        self.seed, self.block_size, self.policy = _seed(seed), int(block_size), policy
        raw = self._stage_list(weights)
        self._length = None if length is None else int(length)
        # the weights as given (a state replays them: the Rust map quantises each stage's
        # weights over their own sum, so normalised copies could round differently)
        self.raw_stages = [(start, {n: float(w.get(n, 0.0)) for n in self.names}) for start, w in raw]
        self._chunk_list = self._chunks(child_chunk)
        self._map = MixtureMap(
            self.names,
            [_length(n, c) for n, c in self.children.items()],
            [(start, [float(w.get(n, 0.0)) for n in self.names]) for start, w in raw],
            block_size=self.block_size,
            seed=self.seed,
            policy=policy,
            length=None if length is None else int(length),
            chunks=self._chunk_list,
        )
        self.stages = self._describe(raw)

    def _settings_description(self) -> dict[str, Any]:
        stages = [[st.start, st.end, [int(k) for k in st.children], [float(w) for w in st.weights]]
                  for st in self.stages]
        return {"seed": self.seed, "block_size": self.block_size, "policy": self.policy, "stages": stages,
                "child_chunk": self._chunk_list}

    # -- construction helpers -----------------------------------------------------------
    def _stage_list(self, weights: Weights) -> list[tuple[int, Mapping[str, float]]]:
        if isinstance(weights, Mapping):
            stages = [(0, weights)]
        else:
            try:
                stages = [(s, w) for s, w in weights]
            except (TypeError, ValueError):
                raise ArgumentTypeError(
                    "weights must be {name: weight} or a list of (start_index, {name: weight})"
                ) from None
        if not stages:
            raise InvalidArgumentError("weights must not be empty")
        for k, (start, w) in enumerate(stages):
            if not isinstance(start, (int, np.integer)) or isinstance(start, bool) or not 0 <= start <= _MAX_INDEX:
                raise InvalidArgumentError(f"stage {k}: start must be a non-negative int, got {start!r}")
            if not isinstance(w, Mapping):
                raise ArgumentTypeError(f"stage {k}: weights must be a mapping {{name: weight}}")
            unknown = sorted(set(w) - set(self.names))
            if unknown:
                raise InvalidArgumentError(f"stage {k} names unknown children: {unknown} (children: {self.names})")
            for name, x in w.items():
                if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
                    raise ArgumentTypeError(f"stage {k}: weight of {name!r} must be a number, got {x!r}")
        return [(int(s), w) for s, w in stages]

    def _chunks(self, spec: int | Mapping[str, int] | str) -> list[int]:
        """Run length of every child's chunk-local pass order (1 = uniform)."""
        if isinstance(spec, str):
            if spec != "auto":
                raise InvalidArgumentError(f"child_chunk must be 'auto', an int or {{name: int}}, got {spec!r}")
            return [_rows_per_page(c) for c in self.children.values()]
        if isinstance(spec, Mapping):
            unknown = sorted(set(spec) - set(self.names))
            if unknown:
                raise InvalidArgumentError(f"child_chunk names unknown children: {unknown}")
            values = [spec.get(n, 1) for n in self.names]
        else:
            values = [spec] * len(self.names)
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= _MAX_INDEX:
                raise InvalidArgumentError(f"child_chunk values must be ints >= 1, got {v!r}")
        return [int(v) for v in values]

    def _describe(self, raw: list[tuple[int, Mapping[str, float]]]) -> list[Stage]:
        """The stages in force (under "stop" the ones after the exhaustion point are gone
        and the last ends there)."""
        out = []
        for (start, end), (_, w) in zip(self._map.stage_bounds, raw):
            vals = np.array([float(w.get(n, 0.0)) for n in self.names])
            kids = np.flatnonzero(vals > 0)
            out.append(Stage(int(start), None if end is None else int(end), kids, vals[kids] / vals.sum()))
        return out

    def _child_number(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise UnknownNameError(f"no child named {name!r}") from None

    def with_stages(self, stages: Sequence[tuple[int, Mapping[str, float]]], *,
                    length: int | None | str = "same") -> MixtureDataset:
        """The same children, seed, block size, policy, length (or ``length``) and child
        orders under other weight ``stages`` (children are shared, not copied). Resuming
        a stream after a weight change builds one (:mod:`youmu.mixture_change`)."""
        return MixtureDataset(self.children, weights=list(stages), seed=self.seed, block_size=self.block_size,
                              policy=self.policy, length=self._length if length == "same" else length,  # type: ignore[arg-type]
                              child_chunk=dict(zip(self.names, self._chunk_list)))

    @property
    def child_chunks(self) -> dict[str, int]:
        """Run length of each child's chunk-local pass order (1 = uniform)."""
        return dict(zip(self.names, self._chunk_list))

    @property
    def lengths(self) -> dict[str, int]:
        return dict(zip(self.names, self._map.lengths))

    # -- maps -----------------------------------------------------------------------------
    def locate_many(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(child numbers, indices in child)`` as int64 arrays (one Rust call)."""
        child, index, _ = self._map.locate_many(int_array(indices, "indices"))
        return child, index

    def locate_passes(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(child numbers, indices in child, passes)``: pass 0 is the first pass over
        the child; under ``"restart"`` each pass visits the child in a new order."""
        return self._map.locate_many(int_array(indices, "indices"))

    def child_samples(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(child numbers, draw numbers)``: index ``i`` is its child's draw number
        ``k`` (0-based, over all passes; pass = ``k // len(child)``)."""
        return self._map.samples_many(int_array(indices, "indices"))

    def position(self, name: str, draw: int) -> int | None:
        """Global index of draw number ``draw`` of child ``name`` (inverse of
        :meth:`child_samples`), or ``None`` if the mixture never makes that draw."""
        p = self._map.position(self._child_number(name), self._child_draw("draw", draw))
        return None if p is None else int(p)

    # -- counters -------------------------------------------------------------------------
    def counts(self, i: int) -> dict[str, int]:
        """Samples each child contributes among the first ``i`` indices (0 <= i <= len)."""
        return dict(zip(self.names, self._map.counts(self._in_range("i", i, upto=True))))

    def passes(self, i: int) -> dict[str, int]:
        """Passes over each child started among the first ``i`` indices (1 = the first
        pass is in progress or complete; for logging how often small sources repeat)."""
        return {n: math.ceil(v / ln) if ln else 0 for (n, v), ln in zip(self.counts(i).items(), self._map.lengths)}

    def stage_of(self, i: int) -> int:
        """Weight stage in force at index ``i``."""
        return int(self._map.stage_of(int_arg("i", i, minimum=0, maximum=_MAX_INDEX)))

    def block_start(self, b: int, stage: int = 0) -> int:
        """Global index where block ``b`` of ``stage`` begins."""
        return self.stages[self._stage_number(stage)].start + int_arg("b", b, minimum=0) * self.block_size

    def block_counts(self, b: int, stage: int = 0) -> dict[str, int]:
        """Samples of each child in block ``b`` of ``stage`` (they sum to the block size)."""
        stage = self._stage_number(stage)
        return dict(zip(self.names, self._map.block_counts(stage, int_arg("b", b, minimum=0, maximum=_MAX_INDEX))))

    def _stage_number(self, stage: Any) -> int:
        stage = int_arg("stage", stage, minimum=0)
        if stage >= len(self.stages):
            raise PageOutOfRangeError(f"stage={stage}: this mixture has {len(self.stages)} stage(s)")
        return stage

    def window_bounds(self) -> list[dict[str, float]]:
        """Per stage, each positive-weight child's bound on
        ``|samples in any run of whole blocks − blocks · block_size · weight|``."""
        return [{n: float(x) for n, x in zip(self.names, row) if not math.isnan(x)}
                for row in self._map.window_bounds()]

    def __repr__(self) -> str:
        return (f"MixtureDataset({len(self.names)} children, {len(self.stages)} stage(s), "
                f"block_size={self.block_size}, policy={self.policy!r}, len={len(self)})")


__all__ = ["FlatMixture", "MixtureDataset", "Stage"]
