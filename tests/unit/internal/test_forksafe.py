"""A forked child (a fork-based DataLoader worker) never runs the parent's finalisers on
what it inherited: a lock one of youmu's threads held at the fork stays held in the
child, and a finaliser that takes it hangs the worker for good (seen as a
``DataStallError`` mid-epoch, at whichever sample triggered a full collection).

Each case holds the lock from another thread across the fork, so the hazard is
certain instead of a matter of timing (CPython's ``threading.Event`` guards its flag
with ``Event._cond``).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from youmu.batching import DynamicBatchLoader
from youmu.distributed.producer import Producer

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


class Rows(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, int]:
        return {"n": 1 + i % 7}


class Collecting(Dataset):
    """A worker's dataset that runs a full collection per sample."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        gc.collect()
        return i


def length(s: dict[str, int]) -> int:
    return s["n"]


@contextlib.contextmanager
def held(lock: Any) -> Iterator[None]:
    """``lock`` held by another thread for the duration."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(60)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert taken.wait(10)
    try:
        yield
    finally:
        release.set()
        t.join(10)


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No automatic collection in this process meanwhile (it would run the finaliser
    here, on a thread waiting for the held lock)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def fork_and_collect(timeout: float = 20.0) -> int | None:
    """Fork a child that runs a full collection and exits; its exit code, or None when
    it hung (killed after ``timeout`` s)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        gc.collect()
        os._exit(0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_a_worker_forked_while_a_dropped_loaders_aligner_held_its_lock_does_not_hang() -> None:
    with no_collection():
        dbl = DynamicBatchLoader(
            Rows(10**6), token_budget=64, length_fn=length, collate_fn=None, pool_size=16, heartbeat=0.05
        )
        it = iter(dbl)
        next(it)
        closing = dbl._current._aligner.closing  # type: ignore[union-attr]
        dbl.cycle = dbl  # type: ignore[attr-defined]  # unreachable, but only a collection finalises it
        del dbl, it
        with held(closing._cond):  # type: ignore[attr-defined]
            loader = DataLoader(Collecting(), batch_size=4, num_workers=2, multiprocessing_context="fork", timeout=20)
            got = [int(x) for batch in loader for x in batch]
    assert got == list(range(8))
    gc.collect()  # the parent finalises it: the epoch stops
    assert closing.is_set()


def test_a_child_forked_while_a_producers_consumer_held_its_lock_does_not_hang() -> None:
    with no_collection():
        producer = Producer(lambda: iter(range(10**6)), depth=2, name="youmu-test-producer").start()
        consumer = iter(producer)
        next(consumer)  # suspended inside its try/finally, which sets stop_event
        cycle: list[Any] = [consumer]
        cycle.append(cycle)
        stop_event = producer.stop_event
        del consumer, cycle
        with held(stop_event._cond):  # type: ignore[union-attr]
            code = fork_and_collect()
    assert code == 0, "the child hung finalising the parent's generator"
    gc.collect()
    assert stop_event.is_set()
    producer.stop(5)


def test_only_a_process_that_started_youmu_threads_freezes_its_childrens_inheritance() -> None:
    probe = (
        "import gc, os, sys\n"
        "import youmu\n"
        "def child_frozen():\n"
        "    r, w = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.write(w, str(gc.get_freeze_count()).encode()); os._exit(0)\n"
        "    os.waitpid(pid, 0); return int(os.read(r, 64))\n"
        "before = child_frozen()\n"
        "from youmu.distributed.producer import Producer\n"
        "list(Producer(lambda: iter(range(3)), depth=1, name='p').start())\n"
        "print(before, child_frozen())\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    before, after = map(int, out.stdout.split())
    assert before == 0  # importing youmu changes nothing about forks
    assert after > 0
    assert "torch" in sys.modules and torch is not None  # the cases above ran with torch loaded
