"""Prefetcher: batches in order, errors where they happened, exact state for
checkpoints while reading ahead, the thread stops when the loop breaks."""

from __future__ import annotations

import time

import pytest
import torch

from youmu.torch import Prefetcher


class Counting:
    """A stateful loader: yields 0..n-1, state = batches handed out."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.pos, self.fetched = n, fail_at, 0, 0

    def __iter__(self):
        while self.pos < self.n:
            if self.pos == self.fail_at:
                raise RuntimeError(f"bad batch {self.pos}")
            self.pos += 1
            self.fetched += 1
            yield torch.tensor([self.pos - 1])

    def state_dict(self) -> dict:
        return {"pos": self.pos}

    def load_state_dict(self, s: dict) -> None:
        self.pos = s["pos"]


def test_batches_arrive_in_order_and_all_of_them() -> None:
    assert [int(b) for b in Prefetcher(Counting(50), depth=3)] == list(range(50))


def test_state_describes_what_the_loop_consumed_not_what_was_read_ahead() -> None:
    src = Counting(40)
    p = Prefetcher(src, depth=4)
    it = iter(p)
    got = [int(next(it)) for _ in range(10)]
    time.sleep(0.2)  # let the thread run ahead
    assert src.fetched > 10  # it did read ahead...
    assert p.state_dict() == {"pos": 10}  # ...but the checkpoint is at the consumed batch
    resumed = Counting(40)
    q = Prefetcher(resumed)
    q.load_state_dict(p.state_dict())
    assert got + [int(b) for b in q] == list(range(40))


def test_a_loader_error_is_raised_in_the_loop_at_its_batch() -> None:
    seen = []
    with pytest.raises(RuntimeError, match="bad batch 7"):
        for b in Prefetcher(Counting(20, fail_at=7)):
            seen.append(int(b))
    assert seen == list(range(7))


def test_breaking_out_stops_the_thread() -> None:
    src = Counting(10_000)
    p = Prefetcher(src, depth=2)
    for i, _ in enumerate(p):
        thread = p._producer.thread if p._producer is not None else None
        if i == 3:
            break
    p.close()
    assert thread is not None and not thread.is_alive()
    assert src.fetched < 10  # depth bounds the read-ahead


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        Prefetcher([], depth=0)
    with pytest.raises(TypeError):
        Prefetcher([1, 2], track_state=True)
