"""A forked child must not run the parent's finalisers on what it inherited.

A fork-based DataLoader worker inherits the parent's memory, its unreachable objects
included, but none of its threads. When the child's garbage collector later finalises
one of those objects (a dropped :class:`~youmu.batching.DynamicBatchLoader`, a
suspended generator's ``finally``), the parent's shutdown code runs in the child: it
takes a lock that one of the parent's threads (an aligner, a fetcher) held at the
instant of the fork, and that lock is never released there. The worker hangs for
good and the training process sees a data stall, long after the fork, at whichever
sample happened to trigger a full collection.

So once youmu starts a thread of its own (:func:`install`, called where youmu's
threads are made), every child forked from the process freezes what it inherited
(``gc.freeze()``, as the ``gc`` module's documentation advises for a fork without
exec): the parent's objects stay out of the child's collections (reference counting
still frees what the child drops), while the child's own objects are collected as
usual. A side effect is welcome: collections in the child no longer write to the
inherited objects' headers, which copies their pages (copy on write).

Example:
    >>> install()          # idempotent; the hook is registered once per process
    >>> made_here(os.getpid())
    True
"""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["install", "made_here"]

_installed = False
_lock = threading.Lock()


def _freeze_inherited() -> None:
    gc.freeze()


def install() -> None:
    """Make every child forked from now on keep its garbage collector off the objects it
    inherited (see the module doc)."""
    global _installed
    if _installed:
        return
    with _lock:
        if not _installed and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_freeze_inherited)
        _installed = True


def made_here(pid: int) -> bool:
    """Whether an object made in process ``pid`` is in that process (not in a fork of it,
    where its threads do not exist)."""
    return os.getpid() == pid
