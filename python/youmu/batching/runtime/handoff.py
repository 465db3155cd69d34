"""How a :class:`~youmu.batching.DynamicBatchLoader`'s samples cross from its
DataLoader workers to the training process: in chunks, in exactly the order they
would arrive one at a time.

torch's DataLoader pays a round trip per item it hands over (an index sent to the
worker, the item pickled onto the queue and read back: about half a millisecond of
CPU across the two processes, a third of tokenizing a 500-token document online).
Handed over one sample per item, online tokenization through workers reached 0.77×
of the tokenizer alone per CPU second; in chunks it costs a few hundredths of a
millisecond per sample (``benches/RESULTS.md``, "Online tokenization").

The order does not change, so neither do saved states nor batches:

* **map-style** — the DataLoader's batch sampler cuts the sampler's ``(position,
  index)`` pairs into consecutive chunks (:class:`ChunkedPairs`); torch returns
  batches in sampler order, so the flattened chunks (:func:`flatten`) are the pairs'
  order;
* **iterable** — each worker sends its samples in chunks tagged with its worker id,
  the last one marked (:func:`worker_chunks`; a worker without samples sends one
  empty last chunk). One sample per item, torch delivers the workers' samples
  round-robin, a worker leaving the rotation when it runs out;
  :func:`round_robin` rebuilds that sequence from per-worker queues, pulling chunks
  only while the worker whose turn it is has nothing queued.

Chunk sizes ramp like a batched transform's calls (:func:`youmu.streams.batched.chunk_sizes`):
:data:`FIRST_CHUNK` sample first, so the first samples do not wait for a whole chunk,
doubling up to :data:`CHUNK_CAP`; an iterable source's worker also sends a chunk once
its first sample has waited :data:`CHUNK_SECONDS`. A map-style source's chunks are cut
in the training process (by count only: which worker reads which sample stays a
function of the sampler), so its samples arrive up to ``CHUNK_CAP`` at a time: a
``data_timeout`` must cover that many samples' preprocessing. A DataLoader keeps ``prefetch_factor`` items per
worker in flight, so up to ``prefetch_factor × num_workers × CHUNK_CAP`` samples sit
in the DataLoader beyond the loader's credits (and about one chunk per worker in
:func:`round_robin`'s queues).

A sample that fails in a worker (its dataset, transform or ``length_fn`` raised, or it
cannot be pickled) ends its worker's chunks: the samples before it arrive, then its
error is raised at its turn, the same type and message torch would raise for it.

Example:
    >>> chunks = [Chunk(0, ["a0", "a1"], False), Chunk(1, ["b0"], True), Chunk(0, ["a2"], True)]
    >>> list(round_robin(chunks, workers=2))          # one at a time, worker 1 ran out first
    ['a0', 'b0', 'a1', 'a2']
    >>> list(round_robin(chunks, workers=2, start=1, tagged=True))   # resumed: worker 1's turn first
    [(1, 'b0'), (0, 'a0'), (0, 'a1'), (0, 'a2')]
    >>> [len(c) for c in ChunkedPairs(list(range(12)), workers=2, first=1, cap=4)]
    [1, 1, 2, 2, 4, 2]
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from youmu.errors import LoaderError
from youmu.streams.batched import chunk_sizes

__all__ = ["FIRST_CHUNK", "CHUNK_CAP", "CHUNK_SECONDS", "Chunk", "ChunkCollate", "ChunkedPairs", "collect",
           "worker_chunks", "flatten", "round_robin"]

#: Samples in a worker's first chunk; each next one doubles, up to :data:`CHUNK_CAP`.
FIRST_CHUNK = 1
#: The most samples one DataLoader item carries: 16 brings the per-item round trip
#: under 0.05 ms a sample (``benches/RESULTS.md``, "Online tokenization").
CHUNK_CAP = 16
#: An iterable source's worker sends its chunk early once its first sample has waited
#: this long (seconds): slow samples (a second or more each) then cross one at a time,
#: as before, while fast ones (milliseconds, even on a loaded machine) fill whole chunks.
CHUNK_SECONDS = 0.5


class Chunk(NamedTuple):
    """Consecutive samples of one worker; ``last``: the worker sends nothing after it;
    ``error``: the failure that came after ``samples`` (torch's ``ExceptionWrapper``:
    its type and formatted traceback), which ends the worker's chunks."""

    worker: int
    samples: list[Any]
    last: bool
    error: Any = None


def _worker_id() -> int:
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return 0 if info is None else info.id


def _wrapped(worker: int, exc: BaseException | None = None) -> Any:
    """The current (or given) exception as torch's worker would send it."""
    from torch._utils import ExceptionWrapper

    exc_info = None if exc is None else (type(exc), exc, exc.__traceback__)
    return ExceptionWrapper(exc_info, where=f"in DataLoader worker process {worker}")


def collect(fn: Callable[[Any], Any], keys: Iterable[Any]) -> Chunk:
    """``[fn(k) for k in keys]`` as a chunk; the first key that raises ends it, with its
    error after the samples before it (a map-style dataset's ``__getitems__``)."""
    worker = _worker_id()
    out: list[Any] = []
    for k in keys:
        try:
            out.append(fn(k))
        except Exception:  # noqa: BLE001 - delivered after the good samples, raised at its turn
            return Chunk(worker, out, True, _wrapped(worker))
    return Chunk(worker, out, False)


def worker_chunks(samples: Iterable[Any], first: int = FIRST_CHUNK, cap: int = CHUNK_CAP,
                  seconds: float = CHUNK_SECONDS) -> Iterator[Chunk]:
    """A worker's samples in chunks of :func:`~youmu.streams.batched.chunk_sizes` (or fewer, once
    the first has waited ``seconds``), tagged with its worker id; the last is
    marked (an empty one when the samples end on a chunk's edge, or there are none), and
    an error ends them."""
    worker = _worker_id()
    it = iter(samples)
    for size in chunk_sizes(cap, first):
        got: list[Any] = []
        start = time.monotonic()
        try:
            # slow samples go as they are made: a chunk's first waits for the last at most `seconds`
            while len(got) < size and (not got or time.monotonic() - start < seconds):
                got.append(next(it))
        except StopIteration:
            yield Chunk(worker, got, True)
            return
        except Exception:  # noqa: BLE001 - delivered after the good samples, raised at its turn
            yield Chunk(worker, got, True, _wrapped(worker))
            return
        yield Chunk(worker, got, False)


class ChunkedPairs:
    """A DataLoader ``batch_sampler``: ``pairs`` cut into consecutive chunks, the same
    size for each worker's turn (``first`` each, doubling up to ``cap``)."""

    def __init__(self, pairs: Sequence[Any], workers: int, first: int = FIRST_CHUNK, cap: int = CHUNK_CAP) -> None:
        self.pairs = pairs
        self.workers = max(workers, 1)
        self.first = first
        self.cap = cap

    def _sizes(self) -> Iterator[int]:
        for size in chunk_sizes(self.cap, self.first):
            yield from itertools.repeat(size, self.workers)

    def __iter__(self) -> Iterator[Sequence[Any]]:
        lo = 0
        for size in self._sizes():
            if lo >= len(self.pairs):
                return
            yield self.pairs[lo:lo + size]
            lo += size

    def __len__(self) -> int:
        n = lo = 0
        sizes = self._sizes()  # endless: the last size repeats
        while lo < len(self.pairs):
            lo += next(sizes)
            n += 1
        return n


class ChunkCollate:
    """``collate_fn`` of a chunked DataLoader: the chunk pickled in the worker by
    :class:`~youmu.torch.sendable.SendCollate`. When it cannot be pickled, the samples
    before the first one that cannot are sent, then that sample's
    :class:`~youmu.errors.LoaderError` (naming its field) at its turn."""

    def __call__(self, chunk: Chunk) -> Any:
        from youmu.torch.sendable import SendCollate

        send = SendCollate(_keep)
        try:
            return send(chunk)
        except LoaderError:
            for i, sample in enumerate(chunk.samples):  # only after a failure: find the sample
                try:
                    send(sample)
                except LoaderError as e:
                    return send(Chunk(chunk.worker, chunk.samples[:i], True, _wrapped(chunk.worker, e)))
            raise  # the samples pickle; the error they came with does not

    def __repr__(self) -> str:
        return "ChunkCollate()"


def _keep(x: Any) -> Any:
    return x


def flatten(chunks: Iterable[Chunk]) -> Iterator[Any]:
    """The samples of ``chunks`` in order; a chunk's error is raised after its samples."""
    for chunk in chunks:
        yield from chunk.samples
        if chunk.error is not None:
            chunk.error.reraise()


def round_robin(chunks: Iterable[Chunk], workers: int, start: int = 0, tagged: bool = False) -> Iterator[Any]:
    """The samples of ``workers`` workers' chunks in the order torch delivers one sample
    per item: worker 0's first, worker 1's first, …, then each one's second; a worker
    whose samples ended leaves the rotation, one whose sample failed raises there.
    Chunks are pulled only while the worker whose turn it is has nothing queued.

    ``start``: the worker whose turn comes first (a resumed rotation: the worker after
    the one whose sample was taken last; workers that ran out before leave again at
    their turn, so the order is the uninterrupted one's); ``tagged``: yield
    ``(worker, sample)``."""
    source = iter(chunks)
    queued: list[deque[Any]] = [deque() for _ in range(workers)]
    ended = [False] * workers
    errors: list[Any] = [None] * workers
    turn = list(range(workers))
    at = start % workers if workers else 0
    while turn:
        w = turn[at]
        while not queued[w] and not ended[w]:
            chunk = next(source, None)
            if chunk is None:
                raise LoaderError(f"the DataLoader ended before worker {w} sent its last samples")
            if not 0 <= chunk.worker < workers or ended[chunk.worker]:
                raise LoaderError(f"a chunk of samples from an unexpected worker ({chunk.worker}) arrived")
            queued[chunk.worker].extend(chunk.samples)
            ended[chunk.worker] = chunk.last
            errors[chunk.worker] = chunk.error
        if queued[w]:
            yield (w, queued[w].popleft()) if tagged else queued[w].popleft()
            at = (at + 1) % len(turn)
        elif errors[w] is not None:
            errors[w].reraise()
        else:
            del turn[at]
            at = at % len(turn) if turn else 0
