"""A bounded background producer: one daemon thread drains an iterator into a queue,
so the consumer's ``next()`` finds items ready.

Used wherever youmu reads ahead of a training loop: the torch ``Prefetcher`` (batches
received from DataLoader workers while the step runs), ``BalancedLoader`` (steps
planned ahead), ``DynamicBatchLoader``'s fetcher (samples drawn ahead of the
aligner) and its aligner (batches aligned across ranks, round by round). One
implementation of the parts that are easy to get subtly wrong:

* **bounded** — either ``depth`` items queued (the thread holds at most one more
  while it waits to put it), or a shared :class:`Credits` pool: one credit per item
  fetched and not yet consumed, released by the consumer, so the bound can span
  several stages (the fetcher's samples stay counted until the trainer consumes the
  batch they went into); ``depth=0`` leaves the bound to the source (the aligner's
  batches are made of samples whose credits the fetcher already holds);
* **errors travel** — an exception in the source is handed over in order and raised
  by the consumer at the item where it happened, as a
  :class:`~youmu.errors.PrefetchError` naming the thread's loader (``what``) chained
  from it (a youmu error as it is; :attr:`Producer.failure` keeps it for a consumer
  that must raise it before the items queued ahead of it); the thread never dies
  silently;
* **stoppable** — :meth:`Producer.stop` ends the thread at its next item boundary
  (``on_stop`` then runs on the thread, e.g. to tell peers), and a consumer that
  leaves its loop stops it; ``on_end`` runs last however the thread ended (releasing
  what the source held); a source may yield :data:`END` itself to end the consumer's
  iteration early while the thread runs on (the aligner serving its peers in join
  mode's tail; the END after its last item then goes unread);
* **observable** — :meth:`Producer.stalled_for` says how long the source has been
  blocked (data-stall detection).

Example:
    >>> p = Producer(lambda: iter(range(5)), depth=2, name="demo").start()
    >>> list(p)
    [0, 1, 2, 3, 4]
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from youmu._internal import gctime
from youmu._internal.forksafe import install as forksafe
from youmu.errors import InvalidArgumentError, PrefetchError, YoumuError

__all__ = ["Producer", "Credits", "END", "Failure"]

T = TypeVar("T")


class _End:
    def __repr__(self) -> str:
        return "END"


#: Put on the queue after the source's last item.
END: Any = _End()


class Failure:
    """An exception handed from one thread to another, raised where it is received."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Credits:
    """A pool of ``total`` credits: one per item fetched and not yet consumed.

    >>> c = Credits(1)
    >>> c.acquire(0.0), c.acquire(0.0)
    (True, False)
    >>> c.release(); c.held
    0
    """

    def __init__(self, total: int) -> None:
        self._cv = threading.Condition()
        self.total = total
        self.held = 0

    def acquire(self, timeout: float) -> bool:
        with self._cv:
            if self.held >= self.total and not self._cv.wait_for(lambda: self.held < self.total, timeout):
                return False
            self.held += 1
            return True

    def release(self, n: int = 1) -> None:
        if n <= 0:
            return
        with self._cv:
            self.held = max(self.held - n, 0)
            self._cv.notify_all()


class Producer(Generic[T]):
    """Iterate ``source()`` on a daemon thread (see the module doc).

    Args:
        source: called on the thread; returns the iterator to drain (so set-up such as
            starting DataLoader workers also happens off the consumer's thread).
        depth: queue bound (items ready for the consumer; 0: unbounded, the source
            bounds itself), or
        credits: a shared :class:`Credits` pool instead (the queue is then unbounded;
            whoever consumes the items' results releases the credits).
        name: the thread's name.
        stamp: called right after each item is fetched, on the thread; its result is
            handed over with the item (``get_with_stamp``) — e.g. the source's
            ``state_dict()`` as of that item.
        on_stop: called on the thread when :meth:`stop` ended it before the source
            was exhausted.
        on_end: called on the thread last, however it ended (exhausted, stopped or
            failed), after the :data:`END` or failure was queued.
        what: who reads ahead and what, for the :class:`~youmu.errors.PrefetchError` a
            failure of the source is raised as (default: the thread's name).
        watch: whether :meth:`stalled_for` measures each item (its clock reads cost about
            a microsecond an item; the aligner, whose stalls its fetcher measures, skips them).
    """

    def __init__(
        self,
        source: Callable[[], Iterator[T]],
        *,
        depth: int | None = None,
        credits: Credits | None = None,
        name: str,
        stamp: Callable[[], Any] | None = None,
        on_stop: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
        what: str | None = None,
        watch: bool = True,
    ) -> None:
        if (depth is None) == (credits is None):
            raise InvalidArgumentError("Producer needs exactly one of depth= or credits=")
        self._source = source
        self._credits = credits
        self._stamp = stamp
        self._on_stop = on_stop
        self._on_end = on_end
        self._watch = watch
        #: the source's exception, once it failed (also queued, in order, as a :class:`Failure`)
        self.failure: BaseException | None = None
        self.what = what or "a read-ahead"
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth or 0)
        self.stop_event = threading.Event()
        self._source_wait_since: float | None = None
        self._gc_at_wait = 0.0  # this thread's collection time when the wait began
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- producer side ----------------------------------------------------------------------
    def start(self) -> Producer[T]:
        forksafe()  # a worker forked while this thread holds a lock must not finalise its objects
        gctime.install()  # collections that borrow this thread are not the source's stall
        self.thread.start()
        return self

    def _put(self, x: Any) -> bool:
        """Put ``x``, giving up when stopped; whether it was put."""
        if self._credits is not None or self.queue.maxsize <= 0:  # unbounded: never blocks
            self.queue.put(x)
            return True
        while not self.stop_event.is_set():
            try:
                self.queue.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        it: Iterator[T] | None = None
        try:
            self._gc_at_wait = gctime.spent(threading.get_ident())
            self._source_wait_since = time.monotonic()
            it = self._source()
            self._source_wait_since = None
            while not self.stop_event.is_set():
                if self._credits is not None:
                    if not self._credits.acquire(timeout=0.1):
                        continue
                    if self.stop_event.is_set():
                        self._credits.release()
                        break
                if self._watch:
                    self._gc_at_wait = gctime.spent(threading.get_ident())
                    self._source_wait_since = time.monotonic()
                try:
                    item = next(it)
                except StopIteration:
                    if self._credits is not None:
                        self._credits.release()
                    self._put(END)
                    return
                finally:
                    self._source_wait_since = None
                if self.stop_event.is_set():  # stopped while reading: nobody will take it
                    if self._credits is not None:
                        self._credits.release()
                    break
                payload = (item, self._stamp()) if self._stamp is not None else item
                if not self._put(payload):
                    break
            if self._on_stop is not None:
                self._on_stop()
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised at its item
            self.failure = e
            self._put(Failure(e))
        finally:
            self._source_wait_since = None
            it = None  # drops the source's iterator here (shuts DataLoader workers down)
            try:
                if self._on_end is not None:
                    self._on_end()
            finally:
                gctime.forget(threading.get_ident())

    # -- consumer side ----------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> Any:
        """The next item (with its stamp when ``stamp`` is set), :data:`END`, or ``None``
        when nothing came within ``timeout``; raises the source's exception in order."""
        try:
            x = self.queue.get(timeout=timeout) if timeout is None or timeout > 0 else self.queue.get_nowait()
        except queue.Empty:
            return None
        if isinstance(x, Failure):
            self._raise(x.exc)
        return x

    def _raise(self, exc: BaseException) -> None:
        """Raise the source's failure in the consumer's thread, typed (see the module doc)."""
        if isinstance(exc, YoumuError) or not isinstance(exc, Exception):
            raise exc
        raise PrefetchError(f"{self.what} failed on its background thread {self.thread.name!r}: "
                            f"{type(exc).__name__}: {exc}") from exc

    def __iter__(self) -> Iterator[Any]:
        """Consume every item in order (with stamps when ``stamp`` is set); leaving the
        loop stops the thread."""
        try:
            while True:
                x = self.get(timeout=0.5)
                if x is None:
                    if self.thread.is_alive() or not self.queue.empty():
                        continue
                    return  # stopped from elsewhere
                if x is END:
                    return
                yield x
        finally:
            self.stop_event.set()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the thread to end at its next item boundary; wait up to ``timeout``."""
        self.stop_event.set()
        if timeout is None or timeout > 0:
            if self.thread is not threading.current_thread() and self.thread.ident is not None:
                self.thread.join(timeout)

    def drain(self) -> int:
        """Discard what is queued; the number of items discarded (their credits, if
        any, are the caller's to release)."""
        n = 0
        while True:
            try:
                x = self.queue.get_nowait()
            except queue.Empty:
                return n
            if x is not END and not isinstance(x, Failure):
                n += 1

    def stalled_for(self) -> float:
        """Seconds the source has been blocked producing its current item (0 when not),
        less what garbage collections took on the thread meanwhile: a collection runs the
        finalisers of whatever garbage it finds on the thread that triggered it (a dropped
        DataLoader iterator's can take seconds per worker), which is no stall of the
        source (:mod:`youmu._internal.gctime`)."""
        at = self._gc_at_wait
        since = self._source_wait_since
        if since is None:
            return 0.0
        borrowed = gctime.spent(self.thread.ident) - at
        return max(time.monotonic() - since - borrowed, 0.0)
