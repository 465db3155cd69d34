"""Single-process behaviour of DynamicBatchLoader: arguments, batches, IDLE slots,
metrics, epochs, workers, resume, early exit. (Multi-rank behaviour: the
``test_batching_distributed/failures/resume/training`` files.)"""

from __future__ import annotations

import pickle
from collections import Counter

import pytest
import torch
from batching_mp import (
    LengthDataset,
    RankIterable,
    StatefulRankIterable,
    collate_ids,
    sample_len,
    sample_tok,
    token_counts,
)
from synthetic import synthetic_lengths

from youmu.batching import IDLE, DynamicBatchLoader, StepInfo, label_token_count, simulate
from youmu.distributed import GlooChannel
from youmu.errors import ArgumentTypeError, LoaderError
from youmu.torch import lm_collate

LENGTHS = synthetic_lengths("uniform-wide", 300, seed=3)


def _loader(ds=None, **kw):
    args = dict(token_budget=4096, length_fn=sample_len, token_count_fn=sample_tok, collate_fn=collate_ids,
                pool_size=32, num_workers=0, timeout=20, heartbeat=0.1)
    args.update(kw)
    return DynamicBatchLoader(ds if ds is not None else LengthDataset(LENGTHS, token_counts(LENGTHS)), **args)


def _epoch(loader):
    return [(b, i) for b, i in loader]


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(token_budget=0), "token_budget"),
        (dict(pool_size=0), "pool_size"),
        (dict(num_workers=-1), "num_workers"),
        (dict(prefetch_factor=4), "prefetch_factor"),
        (dict(loss_scaling="token"), "loss_scaling"),
        (dict(uneven="drop"), "uneven"),
        (dict(timeout=0), "timeout"),
        (dict(heartbeat=50), "heartbeat"),
        (dict(max_outstanding=8), "max_outstanding"),
        (dict(quota=10), "quota applies to non-join"),
        (dict(join=False, quota=0), "quota"),
    ],
)
def test_bad_arguments(kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        _loader(**kw)


@pytest.mark.parametrize(
    "kw,match",
    [
        # floats are never truncated: a wrong type is a TypeError naming the argument
        (dict(token_budget=1.5), "token_budget"),
        (dict(pool_size=32.0), "pool_size"),
        (dict(seed=1.5), "seed"),
        (dict(join=1), "join"),
        (dict(timeout="60"), "timeout"),
    ],
)
def test_arguments_of_the_wrong_type(kw, match) -> None:
    with pytest.raises(ArgumentTypeError, match=match):
        _loader(**kw)


def test_bad_callables_and_datasets() -> None:
    with pytest.raises(TypeError, match="length_fn"):
        _loader(length_fn=None)
    with pytest.raises(TypeError, match="map-style"):
        _loader(ds=object())
    with pytest.raises(ValueError, match="quota"):
        _loader(ds=StatefulRankIterable([[1, 2]], 0), join=False)


def test_length_fn_errors_surface() -> None:
    loader = _loader(length_fn=lambda s: "long")
    with pytest.raises(TypeError, match="length_fn must return an integer"):
        _epoch(loader)
    loader = _loader(length_fn=lambda s: -1)
    with pytest.raises(ValueError, match="negative"):
        _epoch(loader)


def test_single_process_epoch() -> None:
    seen = []
    loader = _loader(callback=lambda info, snap: seen.append((info.step, snap.steps)))
    steps = _epoch(loader)
    ids = [x for b, _ in steps for x in b]
    assert sorted(ids) == list(range(len(LENGTHS)))  # exactly once
    for b, info in steps:
        assert isinstance(info, StepInfo) and info.world_size == 1 and info.active_ranks == 1
        ls = [LENGTHS[x] for x in b]
        assert info.num_samples == len(b) == info.global_num_samples
        if len(b) >= 2:
            assert len(b) * max(ls) <= 4096
        assert info.real_tokens == sum(ls) and info.padded_tokens == len(b) * max(ls)
        assert info.loss_scale == pytest.approx(1.0)  # W * t / T with W = 1
        assert list(info.sample_indices) == b
    assert [s for s, _ in seen] == list(range(len(steps)))
    assert seen[-1][1] == len(steps)
    m = loader.metrics.summary()
    assert m["idle_slots"] == len(LENGTHS) - len(steps)  # a k-sample batch answers k slots: 1 batch + k-1 IDLE
    assert m["samples"] == len(LENGTHS) and m["steps"] == len(steps)
    assert "padding" in loader.metrics.format_summary()
    # the same batches as the pure model of the protocol
    sim = simulate(LENGTHS, 1, 4096, 32, tokens=token_counts(LENGTHS), keep_trace=True)
    assert [b for b, _ in steps] == [list(s.info.sample_indices) for s in sim.trace[0]]


def test_epochs_reshuffle_and_repeat() -> None:
    loader = _loader()
    a = [b for b, _ in _epoch(loader)]
    b = [b for b, _ in _epoch(loader)]
    assert a == b  # same epoch, same batches
    loader.set_epoch(1)
    c = [b for b, _ in _epoch(loader)]
    assert c != a and sorted(x for y in c for x in y) == sorted(x for y in a for x in y)
    unshuffled = _epoch(_loader(shuffle=False))
    assert {x for b, i in unshuffled if i.round == 0 for x in b} == set(range(32))  # the first buffer, in order


def test_workers_do_not_change_batches() -> None:
    base = [b for b, _ in _epoch(_loader())]
    with_workers = [b for b, _ in _epoch(_loader(num_workers=2, prefetch_factor=4))]
    assert with_workers == base


def test_iterable_dataset_with_workers() -> None:
    class Sharded(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
            for i in range(wid, 200, nw):
                yield {"id": i, "len": 10 + i % 50, "tok": 10 + i % 50}

    steps = _epoch(_loader(ds=Sharded(), num_workers=2))
    assert sorted(x for b, _ in steps for x in b) == list(range(200))


def test_break_then_new_epoch() -> None:
    loader = _loader()
    for k, _ in enumerate(loader):
        if k == 2:
            break
    full = _epoch(loader)  # a new iter() retires the abandoned one
    assert sorted(x for b, _ in full for x in b) == list(range(len(LENGTHS)))
    loader.close()


def test_resume_single_process_map_and_iterable() -> None:
    for make in (lambda: _loader(), lambda: _loader(ds=StatefulRankIterable([LENGTHS], 0))):
        full = [(b, i.step) for b, i in _epoch(make())]
        first = make()
        it = iter(first)
        head = [(b, i.step) for _, (b, i) in zip(range(5), it)]
        state = pickle.loads(pickle.dumps(first.state_dict()))
        first.close()
        second = make()
        second.load_state_dict(state)
        rest = [(b, i.step) for b, i in second]
        assert head + rest == full
        # a fresh epoch after the resumed one starts from the beginning
        assert [(b, i.step) for b, i in second] == full


def test_state_dict_rules() -> None:
    loader = _loader()
    st = loader.state_dict()
    assert st["epoch"] == 0 and st["position"] == 0 and not st["replay"]
    other = _loader(token_budget=2048)
    with pytest.raises(ValueError, match="settings"):
        other.load_state_dict(st)
    with pytest.raises(ValueError, match="format"):
        loader.load_state_dict({"format": "x"})
    loader.load_state_dict(st)
    loader.set_epoch(0)  # the same epoch keeps the loaded state
    assert loader.state_dict()["config"] == st["config"]
    # an iterable dataset with workers checkpoints mid-epoch: its worker's own state
    it_loader = _loader(ds=StatefulRankIterable([LENGTHS], 0), num_workers=1)
    it = iter(it_loader)
    next(it)
    assert it_loader.state_dict()["workers"]["states"][0]["pos"] > 0
    it_loader.close()
    # one without state_dict() cannot, with or without workers
    for workers in (0, 1):
        bare = _loader(ds=RankIterable([LENGTHS], 0), num_workers=workers)
        it = iter(bare)
        next(it)
        with pytest.raises(LoaderError, match="RankIterable has none"):
            bare.state_dict()
        bare.close()


def test_label_token_count_and_pad_collate() -> None:
    samples = [
        {"input_ids": torch.tensor([5, 6, 7, 8]), "labels": torch.tensor([-100, -100, 7, 8])},
        {"input_ids": torch.tensor([1, 2]), "labels": torch.tensor([1, 2])},
        {"input_ids": torch.arange(9), "labels": torch.arange(9)},  # the longest closes a group alone
    ]
    count = label_token_count()
    loader = DynamicBatchLoader(
        samples, token_budget=64, length_fn=lambda s: len(s["input_ids"]), token_count_fn=count,
        collate_fn=lm_collate, pool_size=4, num_workers=0, shuffle=False,
    )
    steps = {info.num_samples: (batch, info) for batch, info in loader}
    assert sorted(steps) == [1, 2]
    batch, info = steps[2]
    assert batch["input_ids"].tolist() == [[1, 2, 0, 0], [5, 6, 7, 8]]
    assert batch["labels"].tolist() == [[1, 2, -100, -100], [-100, -100, 7, 8]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert info.num_tokens == 1 + 2  # shifted label tokens


def test_idle_marker_and_local_channel() -> None:
    assert repr(IDLE) == "IDLE" and pickle.loads(pickle.dumps(IDLE)) is IDLE
    ch = GlooChannel.local()
    assert ch.all_gather_rows([3, 4]) == [[3, 4]]
    assert [t.tolist() for t in ch.all_gather_int64(torch.tensor([1, 2]))] == [[1, 2]]


def test_info_counts_are_consistent_with_tokens() -> None:
    steps = _epoch(_loader(loss_scaling="exact"))
    tok = token_counts(LENGTHS)
    c = Counter()
    for b, info in steps:
        assert info.num_tokens == sum(tok[x] for x in b) == info.global_num_tokens
        c[info.round] += 1
    assert sum(c.values()) == len(steps)


@pytest.mark.parametrize(
    "module",
    ["algo.grouping", "algo.alignment", "algo.protocol", "algo.simulation", "algo.sampling", "algo.loss",
     "algo.step_info", "runtime.metrics", "dynamic_loader", "config", "runtime.feed", "runtime.aligner",
     "runtime.epoch", "runtime.shutdown", "__init__"],
)
def test_docstring_examples(module: str) -> None:
    import doctest
    import importlib

    mod = importlib.import_module("youmu.batching" if module == "__init__" else f"youmu.batching.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
