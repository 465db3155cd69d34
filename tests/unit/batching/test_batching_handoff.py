"""How DynamicBatchLoader's samples leave its DataLoader workers: in chunks (a
DataLoader item carries many samples, not one), yet in exactly the order one sample
per item would bring them — map-style sources in sampler order, iterable ones
round-robin over workers of any lengths — and a sample that fails arrives as the
same error, after the samples before it.

The references are torch's own DataLoader handing over one sample per item
(``batch_size=None``), which is what the loader did before and what its states and
golden streams pin.
"""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data.dataloader import _BaseDataLoaderIter

from youmu.batching import DynamicBatchLoader
from youmu.batching.runtime.feed import MeasuredMap, measured_iterable
from youmu.batching.runtime.handoff import CHUNK_CAP, Chunk, ChunkCollate, ChunkedPairs, flatten, round_robin
from youmu.errors import LoaderError

pytestmark = pytest.mark.timeout(120)


def length(sample: dict[str, Any]) -> int:
    return sample["n"]


class Uneven(IterableDataset):
    """Worker ``w`` yields ``counts[w]`` samples (``{"w", "i", "n"}``); the sample
    ``fail`` (``(worker, i)``) raises instead."""

    def __init__(self, counts: tuple[int, ...], fail: tuple[int, int] | None = None) -> None:
        self.counts = counts
        self.fail = fail

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        w = 0 if info is None else info.id
        for i in range(self.counts[w]):
            if (w, i) == self.fail:
                raise ValueError(f"sample {i} of worker {w} is broken")
            yield {"w": w, "i": i, "n": 1 + (7 * w + 3 * i) % 11}


def keep(x: Any) -> Any:
    return x


def per_item(dataset: Any, workers: int, **kw: Any) -> tuple[list[Any], BaseException | None]:
    """What torch hands over one sample per item, up to its error (the reference)."""
    got: list[Any] = []
    try:
        for x in DataLoader(dataset, batch_size=None, num_workers=workers, multiprocessing_context="fork",
                            collate_fn=keep, **kw):
            got.append(x)
    except Exception as e:  # noqa: BLE001 - compared with the chunked hand-off's
        return got, e
    return got, None


def ends(err: BaseException | None, any_worker: bool = False) -> tuple[str, str] | None:
    """An error's first and last lines: torch's "Caught ValueError in DataLoader worker
    process w" (``any_worker``: whichever ``w``), then (after the worker's traceback,
    whose frames may differ) the error."""
    lines = str(err).splitlines()
    first = re.sub(r"process \d+", "process w", lines[0]) if any_worker else lines[0]
    return None if err is None else (first, lines[-1])


def chunked(rows: Any) -> tuple[list[Any], BaseException | None]:
    got: list[Any] = []
    try:
        for x in rows:
            got.append(x)
    except Exception as e:  # noqa: BLE001 - compared with the reference's
        return got, e
    return got, None


def chunked_iterable(dataset: Any, workers: int) -> tuple[list[Any], BaseException | None]:
    loader = DataLoader(measured_iterable(dataset, length, length), batch_size=None, num_workers=workers,
                        collate_fn=ChunkCollate(), multiprocessing_context="fork")
    return chunked(round_robin(loader, workers))


def measured(samples: list[Any]) -> list[Any]:
    """Rows as the workers measure them: a dataset without state_dict() has no states."""
    return [(s, length(s), length(s), 0, None) for s in samples]


# Workers of unequal lengths: none, one, and either side of the chunks' edges (1, 2, 4, 8,
# 16 samples: edges after 1, 3, 7, 15, 31 and every 16 after).
UNEVEN = [(0,), (1,), (3,), (40,), (0, 5), (1, 2), (7, 8), (15, 16, 0), (31, 1, 32, 6), (0, 0, 47, 48)]


@pytest.mark.parametrize("counts", UNEVEN, ids=[",".join(map(str, c)) for c in UNEVEN])
def test_an_iterable_source_arrives_in_the_order_of_one_sample_per_item(counts: tuple[int, ...]) -> None:
    want, err = per_item(Uneven(counts), len(counts))
    assert err is None and len(want) == sum(counts)
    got, err = chunked_iterable(Uneven(counts), len(counts))
    assert err is None
    assert got == measured(want)


@pytest.mark.parametrize("counts, fail", [((9, 9), (0, 5)), ((9, 9), (1, 0)), ((20, 3, 20), (2, 16)), ((1, 30), (1, 29)),
                                          pytest.param((4, 4, 4, 4), (3, 3), marks=pytest.mark.slow)])  # 4 workers: 25 s
def test_a_failing_sample_raises_after_the_samples_before_it(counts: tuple[int, ...], fail: tuple[int, int]) -> None:
    want, want_err = per_item(Uneven(counts, fail), len(counts))
    got, err = chunked_iterable(Uneven(counts, fail), len(counts))
    assert got == measured(want)
    assert type(err) is type(want_err) is ValueError
    assert ends(err) == ends(want_err)
    assert f"sample {fail[1]} of worker {fail[0]} is broken" in str(err)


class Rows:
    """A map-style dataset whose index ``bad`` raises a KeyError."""

    def __init__(self, n: int, bad: int | None = None) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.bad:
            raise KeyError(f"row {i}")
        return {"i": i, "n": 1 + i % 13}


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("bad", [None, 0, 6, 37])
def test_a_map_source_arrives_in_sampler_order_and_fails_at_its_sample(workers: int, bad: int | None) -> None:
    pairs = list(enumerate(torch.randperm(60, generator=torch.Generator().manual_seed(workers)).tolist()))
    measured_map = MeasuredMap(Rows(60, bad), length, length)
    want, want_err = per_item(measured_map, workers, sampler=pairs)
    loader = DataLoader(measured_map, batch_sampler=ChunkedPairs(pairs, workers), collate_fn=ChunkCollate(),
                        num_workers=workers, multiprocessing_context="fork")
    got, err = chunked(flatten(loader))
    assert got == want
    # which worker reads a map-style sample depends on how the sampler is cut: not its message
    assert type(err) is type(want_err) and ends(err, any_worker=True) == ends(want_err, any_worker=True)
    assert (bad is None) == (err is None)
    assert [idx for _, idx, *_ in got] == [idx for _, idx in pairs][:len(got)]
    assert len(got) == (60 if bad is None else next(pos for pos, idx in pairs if idx == bad))


def test_the_batch_sampler_cuts_the_pairs_into_consecutive_chunks_growing_per_round() -> None:
    pairs = list(range(100))
    chunks = list(ChunkedPairs(pairs, workers=3))
    assert list(itertools.chain.from_iterable(chunks)) == pairs
    assert [len(c) for c in chunks][:9] == [1, 1, 1, 2, 2, 2, 4, 4, 4]
    assert max(len(c) for c in chunks) == CHUNK_CAP and len(ChunkedPairs(pairs, workers=3)) == len(chunks)
    assert list(ChunkedPairs([], workers=2)) == [] and len(ChunkedPairs([], workers=2)) == 0


class Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("Unpicklable objects stay in their process")


class WithUnpicklable(Rows):
    """Rows whose index ``unpicklable`` carries a value that cannot be pickled."""

    def __init__(self, n: int, unpicklable: int) -> None:
        super().__init__(n)
        self.unpicklable = unpicklable

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = super().__getitem__(i)
        return {**row, "handle": Unpicklable()} if i == self.unpicklable else row


def test_a_sample_that_cannot_leave_its_worker_fails_after_the_samples_before_it_naming_its_field() -> None:
    pairs = list(enumerate(range(40)))
    loader = DataLoader(MeasuredMap(WithUnpicklable(40, unpicklable=20), length, length), batch_sampler=ChunkedPairs(pairs, 2),
                        collate_fn=ChunkCollate(), num_workers=2, multiprocessing_context="fork")
    got, err = chunked(flatten(loader))
    assert [x[1] for x in got] == list(range(20))
    assert isinstance(err, LoaderError)
    assert "cannot send its batch" in str(err) and "[2]['handle']" in str(err) and "Unpicklable objects" in str(err)


def test_round_robin_refuses_a_stream_that_ends_before_a_workers_last_chunk() -> None:
    with pytest.raises(LoaderError, match="worker 1"):
        list(round_robin([Chunk(0, [1], True), Chunk(1, [2], False)], 2))
    with pytest.raises(LoaderError, match="unexpected worker"):
        list(round_robin([Chunk(3, [1], True)], 2))


# -- through DynamicBatchLoader ---------------------------------------------------------------
@pytest.fixture
def items(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the items torch's DataLoader iterators hand over (in the training process)."""
    seen: list[int] = []
    original = _BaseDataLoaderIter.__next__

    def counting(self: Any) -> Any:
        x = original(self)
        seen.append(1)
        return x

    monkeypatch.setattr(_BaseDataLoaderIter, "__next__", counting)
    return seen


def dbl(dataset: Any, workers: int, **kw: Any) -> DynamicBatchLoader:
    return DynamicBatchLoader(dataset, token_budget=64, length_fn=length, collate_fn=None, pool_size=16,
                              num_workers=workers, multiprocessing_context="fork" if workers else None,
                              timeout=30, heartbeat=0.1, **kw)


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_samples_cross_from_the_workers_many_per_item(items: list[int], kind: str) -> None:
    dataset = Rows(300) if kind == "map" else Uneven((150, 150))
    steps = [(batch, info.sample_indices) for batch, info in dbl(dataset, 2)]
    assert sum(len(b) for b, _ in steps) == 300
    assert len(items) <= 300 // 4  # one sample per item would be 300


def test_the_loader_emits_the_same_batches_with_chunked_workers_as_in_the_process() -> None:
    reference = [(b, i.sample_indices) for b, i in dbl(Rows(200), 0)]
    for workers in (1, 3):
        assert [(b, i.sample_indices) for b, i in dbl(Rows(200), workers, prefetch_factor=1)] == reference


def test_an_iterable_loader_numbers_its_samples_in_the_order_of_one_per_item() -> None:
    counts = (31, 0, 47, 2)
    want, _ = per_item(Uneven(counts), len(counts))
    arrival = {}
    for batch, info in dbl(Uneven(counts), len(counts)):
        arrival.update({k: (s["w"], s["i"]) for k, s in zip(info.sample_indices, batch)})
    assert [arrival[k] for k in range(len(want))] == [(s["w"], s["i"]) for s in want]


def test_a_failing_sample_in_a_worker_fails_the_loader_naming_its_own_error() -> None:
    loader = dbl(Uneven((40, 40), fail=(1, 20)), 2, data_timeout=100)
    with pytest.raises(LoaderError, match="sample 20 of worker 1 is broken") as e:
        for _ in loader:
            pass
    assert isinstance(e.value.__cause__, ValueError)  # the worker's own error, as torch raised it
    loader.close()


@pytest.mark.slow  # a multi-process job of 15-45 s: make test-system
def test_spawned_workers_hand_over_chunks_in_the_same_order() -> None:
    counts = (5, 0, 18)
    want, _ = per_item(Uneven(counts), len(counts))
    arrival = {}
    loader = DynamicBatchLoader(Uneven(counts), token_budget=64, length_fn=length, collate_fn=None, pool_size=16,
                                num_workers=len(counts), multiprocessing_context="spawn", timeout=60, heartbeat=0.1)
    for batch, info in loader:
        arrival.update({k: (s["w"], s["i"]) for k, s in zip(info.sample_indices, batch)})
    assert [arrival[k] for k in range(len(want))] == [(s["w"], s["i"]) for s in want]


class Slow(IterableDataset):
    """Samples that take ``seconds`` each to make (a video's frames, a remote call)."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n, self.seconds = n, seconds

    def __iter__(self) -> Any:
        for i in range(self.n):
            time.sleep(self.seconds)
            yield {"i": i, "n": 1}


def test_a_slow_iterable_sample_is_sent_without_waiting_for_a_full_chunk() -> None:
    from youmu.batching.runtime.handoff import CHUNK_SECONDS, worker_chunks

    assert 0 < CHUNK_SECONDS <= 1  # a sample waits that long at most for the rest of its chunk, plus one sample
    sizes = [len(c.samples) for c in worker_chunks(Slow(24, 0.03), first=16, seconds=0.05)]
    assert sum(sizes) == 24 and max(sizes) <= 2  # not 16
    assert [len(c.samples) for c in worker_chunks(Slow(24, 0), first=16)] == [16, 8]
