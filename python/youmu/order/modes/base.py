"""What a shuffle mode is: a name (a ``str``) and the orders it gives, one small
strategy object per mode, registered by name (:data:`MODES`).

A mode answers one question about the stream's shape, :attr:`ShuffleMode.permutes_rows`
(rows read in chunks of one keyed permutation over all rows, instead of page windows),
and gives its orders, each written once: :meth:`~ShuffleMode.page_order` (the epoch's
order of pages or page slices: both the epoch's window sizes and each window's pages
are read from it), :meth:`~ShuffleMode.window_order` (a window's rows) and
:meth:`~ShuffleMode.position_order` (row modes). :class:`youmu.order.shuffle.ShardPlan`
asks these; no caller branches on which mode it holds.

Example:
    >>> from youmu.order.modes import ShuffleMode
    >>> mode = ShuffleMode("local")
    >>> mode, mode == "local", mode.shuffles_windows, mode.permutes_pages
    ('local', True, True, False)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["ShuffleMode", "MODES", "register", "permutation"]

#: The modes by name, in the order errors list them (see :func:`register`).
MODES: dict[str, ShuffleMode] = {}


def permutation(n: int, seed: int, epoch: int, purpose: str) -> Any:
    """A keyed permutation of ``range(n)`` (:class:`youmu._core.Permutation`: ``.range(lo, hi)``
    gives its positions ``lo..hi`` without building the rest)."""
    from youmu._core import Permutation

    return Permutation(n, seed=seed, epoch=epoch, purpose=purpose)


class _Registry(type):
    """``ShuffleMode``'s class: iterating it gives the registered modes, and
    ``ShuffleMode.PAGE`` is the mode named ``"page"`` (as an enum member was)."""

    def __iter__(cls) -> Iterator[ShuffleMode]:
        return iter(sorted(MODES.values(), key=lambda m: m.listed))

    def __getattr__(cls, name: str) -> ShuffleMode:
        if name.isupper() and name.lower() in MODES:
            return MODES[name.lower()]
        raise AttributeError(name)


class ShuffleMode(str, metaclass=_Registry):
    """A shuffle mode: its name, and the orders it gives.

    A mode *is* its name (a ``str``): settings, saved states, fingerprints, permutation
    keys and reprs hold the word (``'page'``), and ``shuffle="page"`` is what users
    write. ``ShuffleMode("page")`` is the registered mode of that name (one object per
    mode); a name not registered is an :class:`~youmu.errors.InvalidArgumentError` (a
    ``ValueError``, as an enum's was;
    :func:`youmu.order.shuffle.shuffle_args` checks users' words first).

    A mode is a subclass that sets :attr:`name` and the answers that differ from the
    defaults here (file order, rows in stream order), in a file of its own in this
    package, registered with :func:`register`.

    >>> ShuffleMode("page") is ShuffleMode.PAGE, ShuffleMode("row").permutes_rows
    (True, True)
    """

    #: the word users write and states hold
    name: ClassVar[str] = ""
    #: where errors list it among the modes (lower first)
    listed: ClassVar[int] = 100
    #: rows read in chunks of one keyed permutation over all rows
    #: (:meth:`position_order`), not in page windows
    permutes_rows: ClassVar[bool] = False
    #: may cut pages into ``page_slices`` row slices (:meth:`page_order` orders them)
    slices_pages: ClassVar[bool] = False

    def __new__(cls, value: Any = None) -> ShuffleMode:
        if cls is ShuffleMode:
            if isinstance(value, ShuffleMode):
                return value
            if isinstance(value, str) and value in MODES:
                return MODES[value]
            raise InvalidArgumentError(f"{value!r} is not a shuffle mode (one of {tuple(MODES)})")
        return super().__new__(cls, cls.name)

    @property
    def value(self) -> str:
        """The mode's name as a plain ``str`` (what an enum member's ``value`` was)."""
        return str.__str__(self)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        # the word in f-strings (a permutation key, ``window-page-3``) on every Python
        return format(self.value, spec)

    def __repr__(self) -> str:
        return repr(self.value)

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (DataLoader workers, Ray) as its name, unpickled to the registered mode
        return ShuffleMode, (self.value,)

    # -- the orders: each mode writes its own, once --------------------------------------
    def page_order(self, n_units: int, seed: int, epoch: int, page_slices: int) -> Any | None:
        """The epoch's order of its ``n_units`` units (pages, or ``page_slices`` slices
        per page): an object whose ``.range(lo, hi)`` gives the units at order positions
        ``lo..hi``, or ``None`` for file order. Windows are consecutive runs of it."""
        return None

    def window_order(self, n_rows: int, seed: int, epoch: int, window: int) -> Any | None:
        """The order of the ``n_rows`` rows of page window ``window`` (``.range(0,
        n_rows)``), or ``None``: the rows in page order."""
        return None

    def position_order(self, n_rows: int, seed: int, epoch: int) -> Any:
        """Row modes (:attr:`permutes_rows`): the epoch's order of all its rows."""
        raise NotImplementedError(f"shuffle mode {self.value!r} reads page windows, not permuted positions")

    # -- what the order means, for readers and tests (no caller branches on these) -------
    @property
    def permutes_pages(self) -> bool:
        """Pages in a keyed-permuted order (otherwise in file order, or none at all)."""
        return not self.permutes_rows and self.page_order(2, 0, 0, 1) is not None

    @property
    def shuffles_windows(self) -> bool:
        """The rows of a page window shuffled together (:meth:`window_order`)."""
        return not self.permutes_rows and self.window_order(2, 0, 0, 0) is not None


def register(mode: type[ShuffleMode]) -> type[ShuffleMode]:
    """Class decorator: the mode ``mode`` defines, registered under its :attr:`~ShuffleMode.name`
    (a name taken twice is an :class:`~youmu.errors.InvalidArgumentError`: two modes
    would give one saved state two meanings)."""
    if not (isinstance(mode, type) and issubclass(mode, ShuffleMode)) or not mode.name:
        raise ArgumentTypeError(f"a shuffle mode is a named ShuffleMode subclass, got {mode!r}")
    if mode.name in MODES:
        raise InvalidArgumentError(f"a shuffle mode named {mode.name!r} is already registered")
    listed = sorted([*MODES.items(), (mode.name, mode())], key=lambda kv: kv[1].listed)
    MODES.clear()
    MODES.update(listed)
    return mode
