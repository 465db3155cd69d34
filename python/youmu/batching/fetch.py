"""Fetching samples for the loader: worker-side measurement, output credits, and the
fetcher thread that draws samples in order, one credit each.

A credit is an output slot: a sample holds one from the moment it is fetched until the
trainer consumes the batch it went into (or skips the IDLE slot it answered), so at most
``max_outstanding`` samples per rank sit between the source and the trainer.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterator

from torch.utils.data import IterableDataset

from youmu.batching.protocol import Item

__all__: list[str] = []


def _keep(x: Any) -> Any:
    return x


def _measure(fn: Callable[[Any], Any], sample: Any, what: str) -> int:
    value = fn(sample)
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must return an integer, got {type(value).__name__}") from None
    if n < 0:
        raise ValueError(f"{what} returned a negative count ({n})")
    return n


class _MeasuredMap:
    """``dataset[index]`` plus its length and loss tokens, keyed by sampler position."""

    def __init__(self, dataset: Any, length_fn: Callable[[Any], Any], token_fn: Callable[[Any], Any]) -> None:
        self.dataset = dataset
        self.length_fn = length_fn
        self.token_fn = token_fn

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> tuple[int, int, Any, int, int]:
        pos, idx = key
        sample = self.dataset[idx]
        return pos, idx, sample, _measure(self.length_fn, sample, "length_fn"), _measure(self.token_fn, sample, "token_count_fn")


class _MeasuredIterable(IterableDataset):
    """An iterable dataset's samples plus their lengths and loss tokens (in workers)."""

    def __init__(self, dataset: Any, length_fn: Callable[[Any], Any], token_fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.dataset = dataset
        self.length_fn = length_fn
        self.token_fn = token_fn

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        for sample in self.dataset:
            yield sample, _measure(self.length_fn, sample, "length_fn"), _measure(self.token_fn, sample, "token_count_fn")


# ----------------------------------------------------------------------------------------
# plumbing between the threads
# ----------------------------------------------------------------------------------------
class _End:
    def __repr__(self) -> str:
        return "END"


_END = _End()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Credits:
    """Output credits: one per sample fetched and not yet consumed by the trainer."""

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


class _Fetcher(threading.Thread):
    """Draws items from a source iterator into the fetch queue, one credit each."""

    def __init__(self, make_iter: Callable[[], Iterator[Item]], credits: _Credits, out: "queue.Queue[Any]", name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._make_iter = make_iter
        self._credits = credits
        self._out = out
        self.stop_event = threading.Event()
        self.source_wait_since: float | None = None  # set while blocked on the source

    def run(self) -> None:
        it: Iterator[Item] | None = None
        try:
            self.source_wait_since = time.monotonic()
            it = self._make_iter()
            self.source_wait_since = None
            while not self.stop_event.is_set():
                if not self._credits.acquire(timeout=0.1):
                    continue
                if self.stop_event.is_set():
                    self._credits.release()
                    return
                self.source_wait_since = time.monotonic()
                try:
                    item = next(it)
                except StopIteration:
                    self._credits.release()
                    self._out.put(_END)
                    return
                finally:
                    self.source_wait_since = None
                if self.stop_event.is_set():  # stopped while reading: nobody will take it
                    self._credits.release()
                    return
                self._out.put(item)
        except BaseException as e:  # noqa: BLE001 - forwarded to the aligner, then every rank
            self._out.put(_Failure(e))
        finally:
            self.source_wait_since = None
            it = None  # shuts DataLoader workers down

    def stalled_for(self) -> float:
        since = self.source_wait_since
        return 0.0 if since is None else time.monotonic() - since


