"""Producer: the one read-ahead thread skeleton. ``on_end`` runs last however the thread
ended, after the END or the failure is queued; ``failure`` keeps the source's exception;
``depth=0`` leaves the bound to the source; an END the source yields itself ends the
consumer's iteration while the thread runs on."""

from __future__ import annotations

import threading
import time

import pytest

from youmu.distributed.producer import END, Failure, Producer
from youmu.errors import PrefetchError


def _ended(source, **kw):
    """Run a producer to its end; what was queued when ``on_end`` ran, and the producer."""
    seen: list = []
    p: Producer = Producer(source, name="youmu-test-producer", on_end=lambda: seen.append(list(p.queue.queue)), **kw)
    p.start().thread.join(10)
    assert not p.thread.is_alive()
    return seen, p


def test_on_end_runs_after_the_end_is_queued() -> None:
    seen, p = _ended(lambda: iter(range(3)), depth=0)
    assert seen == [[0, 1, 2, END]]
    assert p.failure is None


def test_on_end_runs_after_the_failure_is_queued_and_failure_keeps_it() -> None:
    def source():
        yield 1
        raise RuntimeError("boom")

    seen, p = _ended(source, depth=0)
    assert len(seen) == 1 and seen[0][0] == 1 and isinstance(seen[0][1], Failure)
    assert isinstance(p.failure, RuntimeError) and seen[0][1].exc is p.failure
    assert p.get() == 1
    with pytest.raises(PrefetchError, match="boom"):
        p.get()


def test_on_end_runs_when_the_source_cannot_even_start() -> None:
    def source():
        raise RuntimeError("no lease")

    seen, p = _ended(source, depth=0)
    assert len(seen) == 1 and isinstance(seen[0][0], Failure)
    assert str(p.failure) == "no lease"


def test_on_end_runs_when_stopped() -> None:
    ended = threading.Event()
    p = Producer(lambda: iter(range(10**9)), depth=1, name="youmu-test-producer", on_end=ended.set).start()
    assert p.get(timeout=10) == 0
    p.stop(timeout=10)
    assert ended.is_set() and not p.thread.is_alive()


def test_depth_zero_is_unbounded_and_an_early_end_lets_the_thread_run_on() -> None:
    release = threading.Event()

    def source():
        yield from range(1000)  # far past any bound: depth=0 never blocks the source
        yield END  # the consumer's iteration ends here ...
        release.wait(10)  # ... while the thread goes on (the aligner serving its peers)
        yield "after"

    p = Producer(source, depth=0, name="youmu-test-producer").start()
    assert list(iter(p.get, END)) == list(range(1000))
    assert p.thread.is_alive()
    release.set()
    p.thread.join(10)
    assert not p.thread.is_alive()
    assert list(p.queue.queue) == ["after", END]


def test_an_unwatched_source_is_never_reported_stalled() -> None:
    release = threading.Event()

    def source():
        release.wait(10)
        yield 1

    watched = Producer(source, depth=1, name="youmu-test-producer").start()
    unwatched = Producer(source, depth=1, name="youmu-test-producer", watch=False).start()
    time.sleep(0.3)
    assert watched.stalled_for() > 0.1 and unwatched.stalled_for() == 0.0
    release.set()
    assert watched.get(timeout=10) == 1 and unwatched.get(timeout=10) == 1
