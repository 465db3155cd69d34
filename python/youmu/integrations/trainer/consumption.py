"""Save what a trainer consumed, not what it fetched.

A trainer that fetches ahead of the batch it trains where it does not know the epoch's
length (Lightning's prefetching fetcher pulls one batch ahead of an unsized loader, to
learn that a batch is the last) would checkpoint a position past batches it never
trained. :class:`Consumption` keeps the loader's resume point as of each handed-out batch
(the last ``depth + 1``) and gives back the one after the last batch the trainer reported
consumed, so the batches fetched but not trained come again after a resume.

Example:
    >>> c = Consumption()
    >>> c.follow(depth=2)
    >>> for n in range(3):                      # three batches handed out ...
    ...     c.before_fetch(lambda: {"pos": c.fetched})
    ...     c.fetched += 1
    >>> c.mark()                                 # ... one of them trained
    >>> c.state(lambda: {"pos": c.fetched})
    {'pos': 1}
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from youmu._internal.args import int_arg
from youmu.errors import StateError

__all__ = ["Consumption"]


class Consumption:
    """Batches handed out and consumed since the last load, and the resume points between.

    ``fetched`` is counted by the loader; until :meth:`follow` is called consumption is
    not followed and :meth:`state` is the state after every batch handed out."""

    def __init__(self) -> None:
        self.fetched = 0  # batches handed out since the last load
        self.consumed: int | None = None  # batches the trainer reported consumed (None: = fetched)
        self._before: deque[tuple[int, dict[str, Any]]] = deque()  # (fetched, state) before each fetch
        self.depth = 0

    @property
    def following(self) -> bool:
        """Whether the trainer reports what it consumed."""
        return self.consumed is not None

    def follow(self, depth: int) -> None:
        """Keep resume points for up to ``depth`` batches fetched ahead of the one trained."""
        self.depth = int_arg("depth", depth, minimum=1, maximum=1 << 16)
        self.consumed = self.fetched
        self._before = deque(maxlen=self.depth + 1)

    def mark(self) -> None:
        """The trainer trained the next handed-out batch."""
        if self.consumed is not None and self.consumed < self.fetched:
            self.consumed += 1

    def restart(self) -> None:
        """A loaded state is the resume point: nothing handed out or consumed after it yet."""
        self.fetched = 0
        if self.consumed is not None:
            self.consumed = 0
            self._before.clear()

    def before_fetch(self, state: Callable[[], dict[str, Any]]) -> None:
        """Keep ``state()``, the resume point should the trainer stop after the batches
        handed out so far (called before each fetch of an epoch of unknown length)."""
        self._before.append((self.fetched, state()))

    def state(self, current: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The resume point after the last batch consumed (``current()`` when that is the
        last handed out)."""
        if self.consumed is not None and self.consumed < self.fetched:
            for fetched, state in self._before:
                if fetched == self.consumed:
                    return state
            raise StateError(
                f"the trainer consumed {self.consumed} batches but fetched {self.fetched}: more than the "
                f"{self.depth} batches ahead that follow_consumption(depth={self.depth}) keeps states for, or "
                "ahead of a loader of known length (for which no states are kept)"
            )
        return current()
