"""The shuffle modes: their names, and what each means for a stream.

The one place the modes are named (``"page"``, ``"row"``, ``"local"``, ``"none"``;
:mod:`youmu.order.shuffle` says what each order is). Every other module asks a
:class:`ShuffleMode` whether it permutes rows, permutes pages, shuffles a window's rows
or slices pages, and never compares its name (``tests/test_layering.py`` holds them to
it), so a new mode is a member here with its answers, and the order it gives in
:class:`youmu.order.shuffle.ShardPlan`.

Example:
    >>> from youmu.order.modes import ShuffleMode
    >>> [m for m in ShuffleMode if m.shuffles_windows]
    ['page', 'local']
"""

from __future__ import annotations

from enum import Enum

__all__ = ["ShuffleMode", "SHUFFLE_MODES"]


class ShuffleMode(str, Enum):
    """A shuffle mode, and what it means for a stream: the only place the modes are
    named. Callers ask a mode's properties, never compare its name, so a new mode is a
    member here, its answers below and the page order it gives in
    :class:`youmu.order.shuffle.ShardPlan`.

    A mode *is* its name (a ``str``): settings, saved states, fingerprints and reprs
    hold the word (``'page'``), and ``shuffle="page"`` is what users write.

    >>> mode = ShuffleMode("local")
    >>> mode, mode == "local", mode.shuffles_windows, mode.permutes_pages
    ('local', True, True, False)
    """

    PAGE = "page"
    ROW = "row"
    LOCAL = "local"
    NONE = "none"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        # the word in f-strings (a permutation key, ``window-page-3``) on every Python
        return format(str(self.value), spec)

    def __repr__(self) -> str:
        return repr(self.value)

    @property
    def permutes_rows(self) -> bool:
        """Every row placed independently by one keyed permutation over all rows, read
        in chunks of positions (:meth:`~youmu.order.shuffle.ShardPlan.rows_of`): no page windows."""
        return self is ShuffleMode.ROW

    @property
    def permutes_pages(self) -> bool:
        """Pages in keyed-permuted order (otherwise in file order, or none at all)."""
        return self is ShuffleMode.PAGE

    @property
    def shuffles_windows(self) -> bool:
        """The rows of a page window shuffled together (:meth:`~youmu.order.shuffle.ShardPlan.row_order`)."""
        return self in (ShuffleMode.PAGE, ShuffleMode.LOCAL)

    @property
    def slices_pages(self) -> bool:
        """May cut pages into ``page_slices`` row slices and permute those."""
        return self is ShuffleMode.PAGE


#: The modes' names, in the order errors list them.
SHUFFLE_MODES: tuple[str, ...] = tuple(m.value for m in ShuffleMode)
