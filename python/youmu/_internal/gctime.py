"""Seconds each thread has spent in garbage collection, so a data-stall check does not
blame a data source for a collection that ran on its thread.

A collection runs on whichever thread happens to trigger it, and it runs the
finalisers of all the garbage it finds there. Some of them are slow: a torch
DataLoader iterator dropped after a worker raised (kept in a reference cycle by its
exception's traceback) shuts its workers down in ``__del__``, waiting up to 5 s per
worker; five such iterators held one ``gc.collect()`` for a minute (measured). When that
happens on a loader's fetcher thread, the source has not stalled: the thread was
borrowed. :func:`spent` lets :meth:`youmu.distributed.Producer.stalled_for` subtract it.

Example:
    >>> install()
    >>> import gc, threading; before = spent(threading.get_ident()); _ = gc.collect()
    >>> spent(threading.get_ident()) >= before
    True
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any

__all__ = ["install", "spent", "forget"]

_started: dict[int, float] = {}  # thread id -> when its collection in progress began
_total: dict[int, float] = {}  # thread id -> seconds of its finished collections
# thread id -> the thread those seconds belong to: ids are reused once a thread ends, and a
# thread that never called forget() must not hand its seconds to the next one with its id
_owner: dict[int, weakref.ref[threading.Thread]] = {}
_lock = threading.Lock()
_installed = False


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    # runs on the collecting thread, with the GIL held; collections do not nest
    tid = threading.get_ident()
    if phase == "start":
        me = threading.current_thread()
        owner = _owner.get(tid)
        if owner is None or owner() is not me:
            _owner[tid] = weakref.ref(me)
            _total.pop(tid, None)
        _started[tid] = time.monotonic()
    else:
        began = _started.pop(tid, None)
        if began is not None:
            _total[tid] = _total.get(tid, 0.0) + time.monotonic() - began


def install() -> None:
    """Start counting (idempotent): one callback per collection, about a microsecond."""
    global _installed
    if _installed:
        return
    with _lock:
        if not _installed:
            gc.callbacks.append(_on_collection)
            _installed = True


def spent(thread_id: int | None) -> float:
    """Seconds thread ``thread_id`` has spent in collections since :func:`install`,
    the one it may be in now included."""
    if thread_id is None:
        return 0.0
    owner = _owner.get(thread_id)
    thread = owner() if owner is not None else None
    # the calling thread is alive (a loader's read-ahead thread asks for itself once per
    # item, and is_alive() takes a lock)
    if thread is None or (thread is not threading.current_thread() and not thread.is_alive()):
        return 0.0  # nothing counted yet, or what is kept belongs to an ended thread
    began = _started.get(thread_id)
    ongoing = time.monotonic() - began if began is not None else 0.0
    return _total.get(thread_id, 0.0) + ongoing


def forget(thread_id: int | None) -> None:
    """Drop what is kept for a thread that ends (thread ids are reused)."""
    if thread_id is not None:
        _total.pop(thread_id, None)
        _started.pop(thread_id, None)
        _owner.pop(thread_id, None)
