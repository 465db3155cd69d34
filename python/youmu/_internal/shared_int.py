"""Integers in shared memory, so a change in the main process reaches DataLoader
workers that already run (``persistent_workers=True``), and the reverse: a stream's
epoch (:class:`SharedEpoch`, what ``set_epoch`` changes, as samplers' epochs do) and
the flag that its workers iterate it.

Example:
    >>> e = SharedEpoch(3)
    >>> e.value = 4
    >>> e.value, e
    (4, SharedEpoch(4))
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.sharedctypes
from typing import Any

__all__ = ["SharedInt", "SharedEpoch"]


class SharedInt:
    """An integer in shared memory, so a change in the main process reaches DataLoader
    workers that already run (``persistent_workers=True``), and the reverse.

    Workers inherit the memory when they are started (fork, or pickling while a
    process is being spawned); any other copy or pickle carries the value only.

    >>> e = SharedInt(3)
    >>> e.value = 4
    >>> e.value
    4
    """

    __slots__ = ("_shared", "_plain")

    def __init__(self, value: int = 0) -> None:
        self._shared: Any = None
        self._plain = int(value)
        try:
            self._shared = multiprocessing.sharedctypes.RawValue("q", int(value))
        except OSError:  # no shared memory (a sandbox without /dev/shm): epochs stay per process
            self._shared = None

    @property
    def value(self) -> int:
        return int(self._shared.value) if self._shared is not None else self._plain

    @value.setter
    def value(self, epoch: int) -> None:
        self._plain = int(epoch)
        if self._shared is not None:
            self._shared.value = int(epoch)

    def __getstate__(self) -> dict[str, Any]:
        spawning = multiprocessing.context.get_spawning_popen() is not None
        return {"shared": self._shared if spawning else None, "plain": self.value}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self._plain = int(st["plain"])
        self._shared = st["shared"]
        if self._shared is None:
            try:
                self._shared = multiprocessing.sharedctypes.RawValue("q", self._plain)
            except OSError:
                self._shared = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value})"


class SharedEpoch(SharedInt):
    """An epoch number in shared memory, so ``set_epoch`` in the main process reaches
    DataLoader workers that already run (``persistent_workers=True``), as samplers'
    epochs do."""

    __slots__ = ()
