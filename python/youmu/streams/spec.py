"""``StreamSpec``: the settings of a Parquet source's stream, checked once, and what
follows from them — the window layout, each epoch's shard plans, the
:class:`~youmu.streams.rowstream.RowStream` of any (rank, worker, epoch) and the description
that states and fingerprints compare.

A spec is torch-free and Ray-free. :class:`youmu.streams.parquet.ParquetStream` reads a spec's
rows — adapted for torch as :class:`~youmu.torch.YoumuDataset` (rows in DataLoader
workers), served by :mod:`youmu.ray`'s ``Source`` (rows in a loader actor,
MegaScale-Data's disaggregated source loaders) — so the same settings read the same
windows of the same pages in the same order wherever they are read (Youmu's page-level
shuffle, :mod:`youmu.order.shuffle`).

* :class:`StreamSpec` — the settings (``shuffle``, ``buffer_size``, ``seed``,
  ``page_slices``, ``memory_budget``, ``read_ahead``, ``drop_last``, ``output``,
  ``transform``, ``columns``, ``storage_options``), validated with
  :mod:`youmu._internal.args` when the spec is built; :meth:`StreamSpec.open` resolves where
  the rows are (paths, URLs, a ``PageIndex``, a ``FlatMixture`` of Parquet sources, a
  ``RowDataset``) to a page index.
* :class:`StreamLayout` — a spec over one index for one world size: the window
  layout (:func:`youmu.streams.rowstream.window_layout`, computed once), the ``RowStream`` of a
  (rank, worker, epoch) — or of the units a resumed epoch left
  (:func:`youmu.order.resume.shard_plan`) — and the settings part of a stream's state.

Example:
    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"x": list(range(12))}), path, row_group_size=3)   # 4 pages
    >>> layout = StreamSpec(shuffle="none", buffer_size=3).layout(path, world_size=2)
    >>> layout.window_pages, [t.column("x").to_pylist() for t in layout.stream(rank=1).iter_tables()]
    (1, [[3, 4, 5], [9, 10, 11]])
    >>> StreamSpec(shuffle="row", page_slices=2)
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: page_slices=2 needs shuffle='page' (got shuffle='row')
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from youmu._internal.args import bool_arg, callable_arg, choice_arg, int_arg, opt_int_arg, seed_arg, storage_options_arg
from youmu._internal.redaction import is_secret_key, redacted_repr
from youmu.distributed.fingerprint import describe
from youmu.errors import ArgumentTypeError, ColumnNotFoundError, InvalidArgumentError, YoumuWarning
from youmu.order.modes import ShuffleMode
from youmu.order.resume import Origin, Units, shard_plan
from youmu.order.sharding import Shard
from youmu.order.shuffle import ShardPlan, all_window_rows, dropped_rows, row_chunk_rows, shuffle_args
from youmu.state.contract import data_fingerprint
from youmu.streams.convert import OUTPUTS
from youmu.streams.page_grid import dominant_columns, warn_small_page_column
from youmu.streams.rowstream import DEFAULT_BUFFER_SIZE, RowStream, window_layout

__all__ = ["StreamSpec", "StreamLayout", "SpecAttributes", "SETTINGS", "describe_paths"]



@dataclass(frozen=True)
class StreamSpec:
    """The settings of one Parquet source's stream, validated once, here.

    The fields are :class:`~youmu.torch.YoumuDataset`'s arguments of the same names
    (see there for what each means), less the data (``paths``) and the topology
    (``rank``, ``world_size``), which a spec is laid out over (:meth:`layout`).
    A value of the wrong type raises :class:`~youmu.errors.ArgumentTypeError`, one
    out of range :class:`~youmu.errors.InvalidArgumentError`, naming the setting.
    ``columns`` is kept as a tuple, ``storage_options`` as a dict.

    >>> StreamSpec(columns=["input_ids"], seed=3).columns
    ('input_ids',)
    >>> StreamSpec(buffer_size=0)
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: buffer_size must be a positive int, got 0
    """

    columns: Sequence[str] | None = None
    shuffle: str = "page"
    buffer_size: int | None = DEFAULT_BUFFER_SIZE
    seed: int = 0
    transform: Callable[[Any], Any] | None = None
    drop_last: bool = False
    output: str = "torch"
    memory_budget: int | None = None
    read_ahead: int | None = None
    page_slices: int = 1
    storage_options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        shuffle, page_slices = shuffle_args(self.shuffle, self.page_slices)
        checked = {
            "columns": _columns_arg(self.columns),
            "shuffle": shuffle,
            "buffer_size": opt_int_arg("buffer_size", self.buffer_size, minimum=1),
            "seed": seed_arg(self.seed),
            "transform": callable_arg("transform", self.transform, optional=True),
            "drop_last": bool_arg("drop_last", self.drop_last),
            "output": choice_arg("output", self.output, OUTPUTS),
            "memory_budget": opt_int_arg("memory_budget", self.memory_budget, minimum=1),
            "read_ahead": opt_int_arg("read_ahead", self.read_ahead, minimum=0),
            "page_slices": page_slices,
            "storage_options": storage_options_arg(self.storage_options),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def shuffle_mode(self) -> ShuffleMode:
        """``shuffle`` as the :class:`~youmu.order.modes.ShuffleMode` it was parsed to (the
        field keeps the ``str`` annotation users pass, ``shuffle="row"``).

        >>> StreamSpec(shuffle="row").shuffle_mode.permutes_rows
        True
        """
        return cast(ShuffleMode, self.shuffle)

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> StreamSpec:
        """A spec from keyword settings; a name that is not a setting is an
        :class:`~youmu.errors.ArgumentTypeError` listing the ones there are.

        >>> StreamSpec.of({"shuffle": "row"}).shuffle
        'row'
        """
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ArgumentTypeError(f"unknown stream setting(s) {unknown}; the settings are {', '.join(SETTINGS)}")
        return cls(**settings)

    @classmethod
    def given(cls, spec: Any, settings: Mapping[str, Any], owner: str) -> StreamSpec:
        """The spec of an object built with ``spec=`` (a ready spec) or with keyword
        ``settings`` (checked by :meth:`of`), never both; ``owner`` names it in errors.

        >>> StreamSpec.given(None, {"seed": 2}, "a Source").seed
        2
        """
        if spec is None:
            return cls.of(settings)
        if not isinstance(spec, StreamSpec):
            raise ArgumentTypeError(f"spec must be a youmu.streams.spec.StreamSpec, got {type(spec).__name__}")
        if settings:
            raise InvalidArgumentError(f"pass {owner}'s settings as spec= or as keywords, not both (got spec= and "
                                       f"{sorted(settings)})")
        return spec

    # -- where the rows are -----------------------------------------------------------
    def check_paths(self, paths: Any, *, portable: bool = False) -> str:
        """What ``paths`` is — ``"paths"`` (files, directories, globs, URLs or a
        non-empty list of them), ``"index"`` (a ``PageIndex``), ``"mixture"`` (a
        ``FlatMixture`` of Parquet sources), ``"rows"`` (a ``RowDataset``), or
        ``"none"`` for ``None`` (rows that come from elsewhere, a Ray ``Source``'s
        stream function) — checked against the settings: ``storage_options`` apply to
        paths and URLs only. ``portable``: only paths or a ``PageIndex``, what a Ray
        loader can be sent and a fingerprint describes by value.

        >>> StreamSpec().check_paths(["a.parquet", "b.parquet"])
        'paths'
        """
        kind = _kind(paths)
        if self.storage_options is not None and kind != "paths":
            why = "a stream function opens its own data" if kind == "none" else \
                f"a {type(paths).__name__} was built with its own (pass them where it was built)"
            raise InvalidArgumentError(f"storage_options apply to paths and URLs; {why}")
        if portable and kind not in ("paths", "index", "none"):
            raise ArgumentTypeError("paths must be a path, URL or glob, a non-empty list of them, or a PageIndex; "
                                    f"got {type(paths).__name__}")
        return kind

    def open(self, paths: Any, *, first_column_grid: bool = False) -> Any:
        """The page index of ``paths`` (see :meth:`check_paths`): built from the files'
        footers with ``columns`` and ``storage_options``, or the one given (whose
        columns must then be ``columns``, where set). Built here with ``columns=None``,
        its pages are the dominant column's (:func:`youmu.streams.page_grid.dominant_columns`)
        unless ``first_column_grid`` (the grid of streams before that default)."""
        from youmu._core import PageIndex

        kind = self.check_paths(paths)
        if kind == "none":
            raise ArgumentTypeError("paths must be a path, URL or glob, a non-empty list of them, or a PageIndex; "
                                    "got None")
        if kind == "index":
            index = paths
        elif kind == "mixture":
            index = paths.page_index()  # a FlatMixture: pages shuffled across all its sources
        elif kind == "rows":
            index = paths.index  # a RowDataset: the same files, streamed by pages
        else:
            where = [os.fspath(p) for p in paths] if isinstance(paths, (list, tuple)) else os.fspath(paths)
            index = PageIndex(where, columns=list(self.columns) if self.columns else None,
                              storage_options=self.storage_options)
            dominant = None if self.columns is not None or first_column_grid else dominant_columns(index)
            if dominant is not None:  # the same files, paged by the column that holds the data
                index = PageIndex(index.files, columns=dominant, storage_options=self.storage_options)
        if self.columns is not None and list(self.columns) != index.columns:
            raise InvalidArgumentError(f"columns={list(self.columns)} but the given index reads {index.columns}; "
                                       "build the PageIndex with those columns (or omit columns=)")
        return index

    # -- streams ----------------------------------------------------------------------
    def layout(self, paths: Any, world_size: int = 1) -> StreamLayout:
        """This spec over ``paths`` (opened with :meth:`open`; a ready index is taken
        as is) for ``world_size`` ranks: its windows, computed once."""
        return self._layout(paths, int_arg("world_size", world_size, minimum=1))

    def _layout(self, paths: Any, world_size: int, *, first_column_grid: bool = False) -> StreamLayout:
        """:meth:`layout` for a world size its owner checked (a stream's, from
        :func:`youmu.distributed.world.rank_and_world`); ``first_column_grid``: see
        :meth:`open`."""
        index = self.open(paths, first_column_grid=first_column_grid)
        if self.columns is None and not first_column_grid:  # said where the first column's pages hold little
            warn_small_page_column(index, stacklevel=3)
        self._check_transform_columns(index.columns)
        window_pages, read_ahead = window_layout(index, self.buffer_size, world_size,
                                                 memory_budget=self.memory_budget, read_ahead=self.read_ahead,
                                                 page_slices=self.page_slices, checked=True)
        return StreamLayout(self, index, world_size, index.page_num_rows(), window_pages, read_ahead)

    def _check_transform_columns(self, have: list[str]) -> None:
        """A transform that names the columns it reads (``required_columns``, e.g.
        :class:`youmu.vision.VisionTransform`) is checked against the data's columns
        here, before any worker starts, rather than at its first row."""
        needed = getattr(self.transform, "required_columns", None)
        missing = [c for c in (needed or ()) if c not in have]
        if missing:
            where = " (columns= leaves them out)" if self.columns is not None else ""
            raise ColumnNotFoundError(f"{type(self.transform).__name__} reads column(s) {missing} that the rows do "
                                      f"not have{where}; they have {have}")

    # -- descriptions -----------------------------------------------------------------
    def __repr__(self) -> str:
        return redacted_repr(self)  # storage_options hold credentials

    def describe(self, where: Any) -> dict[str, Any]:
        """The settings that shape the stream, by value, with ``where`` the data is
        (:func:`describe_paths`): what a Ray deployment's fingerprint holds. Storage
        options keep the endpoint and region, not the credentials."""
        out = {k: getattr(self, k) for k in ("shuffle", "buffer_size", "seed", "drop_last", "output",
                                               "memory_budget", "page_slices")}
        # credentials are left out (a rotated key reads the same source)
        opts = {k: str(v) for k, v in sorted((self.storage_options or {}).items()) if not is_secret_key(k)}
        out.update(paths=where, columns=list(self.columns) if self.columns else None, storage=opts,
                   transform=None if self.transform is None else describe(self.transform))
        return out


#: The names of a :class:`StreamSpec`'s settings, in order.
SETTINGS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StreamSpec))


@dataclass(frozen=True, eq=False)
class StreamLayout:
    """A :class:`StreamSpec` over one page index for ``world_size`` ranks: pages per
    window and windows read ahead (:func:`youmu.streams.rowstream.window_layout`, a pure
    function of the files, the world size and the settings), and the streams of its
    shards."""

    spec: StreamSpec
    index: Any
    world_size: int
    page_rows: np.ndarray = field(repr=False)
    window_pages: int
    read_ahead: int
    # rows of every window of one (epoch, window pages): a resumed epoch's units index them
    _rows: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def data(self) -> str:
        """The data's fingerprint (:func:`youmu.state.contract.data_fingerprint`), computed once."""
        return data_fingerprint(self.index)

    def settings(self, rank: int, window_pages: int | None = None) -> dict[str, Any]:
        """The settings part of rank ``rank``'s stream state (``YoumuDataset.state_dict``):
        what ``load_state_dict`` checks and :func:`youmu.merge_states` compares across
        ranks. ``window_pages``: a resumed epoch's (default: this layout's)."""
        s = self.spec
        return {"seed": s.seed, "shuffle": s.shuffle_mode.value, "world_size": self.world_size, "rank": rank,
                "window_pages": window_pages or self.window_pages, "drop_last": s.drop_last,
                "page_slices": s.page_slices, "data": self.data}

    def window_rows(self, epoch: int, window_pages: int | None = None) -> np.ndarray:
        """Rows of every window of ``epoch`` (page modes; the last one asked is kept)."""
        s, key = self.spec, (epoch, window_pages or self.window_pages)
        if key not in self._rows:
            self._rows.clear()
            self._rows[key] = all_window_rows(self.page_rows, s.shuffle_mode, key[1], s.seed, epoch,
                                              page_slices=s.page_slices)
        return self._rows[key]

    def origin(self, epoch: int, window_pages: int | None = None) -> Origin:
        """How the first job of ``epoch`` dealt its units (:mod:`youmu.order.resume`)."""
        if self.spec.shuffle_mode.permutes_rows:
            return Origin(np.array([self.index.num_rows], dtype=np.int64),
                          "block-balanced" if self.spec.drop_last else "block")
        return Origin(self.window_rows(epoch, window_pages), "balanced" if self.spec.drop_last else "rr")

    def stream(self, rank: int = 0, worker: int = 0, num_workers: int = 1, epoch: int = 0, *,
               window_pages: int | None = None, units: Units | None = None) -> RowStream:
        """The rows of (``rank``, ``worker`` of ``num_workers``) in ``epoch``; with
        ``units``, the rows of those units of a resumed epoch (:mod:`youmu.order.resume`),
        read with ``window_pages`` (a resumed epoch keeps its first job's windows)."""
        return self._stream(Shard(rank, self.world_size, worker, num_workers), epoch, window_pages=window_pages,
                            units=units)

    def _stream(self, shard: Shard, epoch: int, *, window_pages: int | None = None,
                units: Units | None = None) -> RowStream:
        """:meth:`stream` of a shard its owner checked: the spec's settings were checked
        when it was built and laid out here, so nothing is checked again."""
        s, wp = self.spec, window_pages or self.window_pages
        if units is not None:
            plan = shard_plan(
                units, None if s.shuffle_mode.permutes_rows else self.window_rows(epoch, wp), mode=s.shuffle_mode,
                page_rows=self.page_rows, window_pages=wp, seed=s.seed, epoch=epoch, shard=shard,
                drop_last=s.drop_last, page_slices=s.page_slices)
        else:
            plan = ShardPlan._from_checked(
                self.page_rows, s.shuffle_mode, shard, window_pages=wp, window_rows=row_chunk_rows(wp),
                seed=s.seed, epoch=epoch, balanced=s.drop_last, page_slices=s.page_slices)
        return RowStream._from_checked(self.index, self.page_rows, wp, self.read_ahead, plan)

    def dropped_rows(self) -> int:
        """Rows ``drop_last`` leaves out of each epoch (0 without it)."""
        return dropped_rows(self.index.num_rows, self.world_size) if self.spec.drop_last else 0

    def check_rank_gets_rows(self, rank: int, stacklevel: int = 2) -> None:
        """A rank with no rows would leave its DDP peers waiting in their collectives:
        refused with ``drop_last`` (every rank would get none), warned about without.
        ``rank``: one of this layout's ranks, checked by the stream that asks."""
        rows = self.index.num_rows
        if self.spec.drop_last and rows < self.world_size:
            raise InvalidArgumentError(f"drop_last=True with {rows} rows over world_size={self.world_size} ranks "
                                       "leaves every rank with nothing")
        if not self.spec.drop_last and rows and len(self._stream(Shard._from_checked(rank, self.world_size, 0, 1),
                                                                  0)) == 0:
            warnings.warn(
                f"rank {rank} of {self.world_size} gets no rows ({rows} rows in {len(self.index)} pages): a DDP job "
                "would wait for it; use drop_last=True (every rank the same number of rows) or fewer ranks",
                YoumuWarning,
                stacklevel=stacklevel + 1,
            )


class SpecAttributes:
    """A wrapper's ``spec`` settings read as its attributes (``ds.shuffle``,
    ``source.seed``): the wrapper keeps no copy of them.

    >>> class Wrapper(SpecAttributes):
    ...     def __init__(self): self.spec = StreamSpec(seed=5)
    >>> Wrapper().seed
    5
    """

    def __getattr__(self, name: str) -> Any:
        # only for names not found otherwise; self.__dict__, not self.spec, so an
        # object being unpickled (no attributes yet) raises AttributeError, not recursion
        spec = self.__dict__.get("spec")
        if spec is None or name not in SETTINGS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(spec, name)


def describe_paths(paths: Any) -> Any:
    """Where a source's rows are, by value (for fingerprints): its paths, or a
    ``PageIndex``'s files, columns and rows.

    >>> describe_paths(["a.parquet", "b.parquet"])
    ['a.parquet', 'b.parquet']
    """
    if _is_index(paths):
        return ["index", paths.files, paths.columns, paths.num_rows]
    return [os.fsdecode(p) for p in paths] if isinstance(paths, (list, tuple)) else os.fsdecode(paths)


def _is_index(x: Any) -> bool:
    # by name: telling paths from an index does not load the native core
    return type(x).__name__ == "PageIndex" and hasattr(x, "page_num_rows")


def _is_path(x: Any) -> bool:
    return isinstance(x, (str, bytes, os.PathLike))


def _kind(paths: Any) -> str:
    """What ``paths`` is (see :meth:`StreamSpec.check_paths`)."""
    if paths is None:
        return "none"
    if _is_index(paths):
        return "index"
    if callable(getattr(paths, "page_index", None)):
        return "mixture"
    if _is_index(getattr(paths, "index", None)):
        return "rows"
    if _is_path(paths) or (isinstance(paths, (list, tuple)) and paths and all(map(_is_path, paths))):
        return "paths"
    if hasattr(paths, "__len__") and hasattr(paths, "__getitem__") and not isinstance(paths, (list, tuple)):
        # A weighted MixtureDataset (or any map-style dataset) has no page space to
        # shuffle: its order is already the mixture's. Say what to use instead.
        raise ArgumentTypeError(
            f"a Parquet stream reads Parquet files, a PageIndex or a FlatMixture of Parquet sources; got a map-style "
            f"{type(paths).__name__}. Stream it with youmu.torch.MixtureStream (runs of indices, page-friendly) or "
            "youmu.torch.MapStream (index by index)"
        )
    raise ArgumentTypeError("paths must be a path, URL or glob, a non-empty list of them, or a PageIndex; "
                            f"got {type(paths).__name__}")


def _columns_arg(columns: Any) -> tuple[str, ...] | None:
    """Column names as a tuple (a string is one name, not a list of letters)."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence) or \
            not all(isinstance(c, str) for c in columns):
        raise ArgumentTypeError(f"columns must be a list of column names, got {type(columns).__name__} {columns!r}")
    if not columns:
        raise InvalidArgumentError("columns must name at least one column (None: all of them)")
    return tuple(columns)
