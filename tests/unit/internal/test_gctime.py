"""A garbage collection that borrows a loader's fetcher thread is no stall of the data
source: the data-stall check subtracts it, and still sees a source that blocks.

A collection runs the finalisers of all the garbage it finds on whichever thread
triggered it. torch's DataLoader iterator dropped after a worker raised (kept in a
cycle by its exception's traceback) shuts its workers down in ``__del__`` (up to 5 s
per worker); on a ``DynamicBatchLoader``'s fetcher thread that became a
``DataStallError`` blaming the dataset. Here a finaliser that sleeps stands in for it.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from youmu._internal import gctime
from youmu.batching import DynamicBatchLoader
from youmu.distributed.producer import Producer
from youmu.errors import DataStallError


class SlowFinaliser:
    """Garbage (a cycle) whose finaliser takes ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.me = self

    def __del__(self) -> None:
        time.sleep(self.seconds)


def collect_slow_garbage(seconds: float) -> None:
    SlowFinaliser(seconds)  # unreachable at once, freed only by a collection
    gc.collect()


def test_the_time_a_thread_spends_collecting_is_counted_for_that_thread_only() -> None:
    gctime.install()
    me = threading.get_ident()
    before = gctime.spent(me)
    other: list[float] = []
    t = threading.Thread(target=lambda: other.append(gctime.spent(threading.get_ident())))
    collect_slow_garbage(0.3)
    t.start()
    t.join()
    assert gctime.spent(me) - before >= 0.3
    assert other == [0.0]
    assert gctime.spent(None) == 0.0


def test_a_new_thread_does_not_inherit_the_seconds_of_an_ended_thread_with_its_id() -> None:
    """Thread ids are reused once a thread ends; a thread that collected and ended without
    ``forget`` must not lend its seconds to the next thread given its id."""
    gctime.install()
    ended: list[int] = []

    def collect_and_end() -> None:
        collect_slow_garbage(0.05)
        ended.append(threading.get_ident())

    seen: dict[int, float] = {}
    for _ in range(20):  # ids are reused quickly; make sure one is
        t = threading.Thread(target=collect_and_end)
        t.start()
        t.join()
        r = threading.Thread(target=lambda: seen.__setitem__(threading.get_ident(), gctime.spent(threading.get_ident())))
        r.start()
        r.join()
        if any(tid in ended for tid in seen):  # one reuse is the case; each round is a full collection
            break
    reused = [tid for tid in seen if tid in ended]
    assert reused, "no thread id was reused; the check did not run"
    assert all(seen[tid] == 0.0 for tid in reused)


def test_a_collection_on_the_fetcher_thread_is_not_counted_as_the_source_blocking() -> None:
    def source() -> Iterator[int]:
        yield 0
        collect_slow_garbage(1.5)
        yield 1

    def blocked() -> Iterator[int]:
        yield 0
        time.sleep(1.5)
        yield 1

    for make, stalls in ((source, False), (blocked, True)):
        p = Producer(make, depth=1, name="youmu-test-gctime").start()
        seen = 0.0
        deadline = time.monotonic() + 10
        got = []
        while len(got) < 2 and time.monotonic() < deadline:
            seen = max(seen, p.stalled_for())
            x = p.get(timeout=0.02)
            if isinstance(x, int):
                got.append(x)
        p.stop(5)
        assert got == [0, 1]
        assert (seen > 1.0) if stalls else (seen < 0.5), (make.__name__, seen)


class Rows:
    """A map-style dataset whose sample ``slow_at`` triggers a collection that runs a
    slow finaliser (on whichever thread reads it)."""

    def __init__(self, n: int, slow_at: int, seconds: float) -> None:
        self.n, self.slow_at, self.seconds = n, slow_at, seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.slow_at:
            collect_slow_garbage(self.seconds)
        return {"n": 1 + i % 5}


def length(s: dict[str, Any]) -> int:
    return int(s["n"])


def test_a_loader_whose_fetcher_thread_collects_slow_garbage_does_not_report_a_data_stall() -> None:
    loader = DynamicBatchLoader(Rows(40, slow_at=7, seconds=2.5), token_budget=16, length_fn=length,
                                collate_fn=None, pool_size=8, data_timeout=1.0, heartbeat=0.05, shuffle=False, num_workers=0)
    samples = sum(len(batch) for batch, _ in loader)
    assert samples == 40


def test_a_source_that_blocks_is_still_a_data_stall() -> None:
    class Blocked(Rows):
        def __getitem__(self, i: int) -> dict[str, Any]:
            if i == self.slow_at:
                time.sleep(self.seconds)
            return {"n": 1 + i % 5}

    loader = DynamicBatchLoader(Blocked(40, slow_at=7, seconds=4.0), token_budget=16, length_fn=length,
                                collate_fn=None, pool_size=8, data_timeout=1.0, heartbeat=0.05, shuffle=False, num_workers=0)
    with pytest.raises(DataStallError, match="produced nothing"):
        sum(len(batch) for batch, _ in loader)
