"""Steps per epoch without counting by hand.

A trainer needs the number of optimizer steps of an epoch for ``max_steps``, schedules
and epoch boundaries. For fixed-size batches over a sized youmu stream it is
``len(TrainerLoader)``. For dynamic batches it depends on every sample's length and on
how DGAP aligned the ranks' rounds: :func:`odb_steps_per_epoch` replays the loader's
grouping and alignment for the epoch in one process (the same code path as
:func:`youmu.batching.simulate_ranks`), reading every sample's length once — no
collective, no training.

Example:
    >>> from youmu.batching import DynamicBatchLoader
    >>> data = [{"input_ids": list(range(n))} for n in (5, 9, 3, 7, 2, 8, 4, 6)]
    >>> loader = DynamicBatchLoader(data, token_budget=16, length_fn=lambda s: len(s["input_ids"]),
    ...                             pool_size=4, num_workers=0)
    >>> odb_steps_per_epoch(loader) == sum(1 for _ in loader)
    True
"""

from __future__ import annotations

import math
from typing import Any

from youmu._internal.args import instance_arg
from youmu.errors import InvalidArgumentError

__all__ = ["odb_steps_per_epoch", "stream_batches_per_epoch"]


def odb_steps_per_epoch(loader: Any, epoch: int | None = None) -> int:
    """Steps every rank takes in ``epoch`` (default: the loader's) of a
    ``DynamicBatchLoader`` over a map-style dataset, in join mode — the longest rank's
    count, which ``uneven="pad"`` gives every rank (``uneven="stop"``: the last rank to
    finish).

    Costs one ``length_fn`` (and ``token_count_fn``) per sample of the dataset: it reads
    the data, so cache the answer for long runs. The count belongs to one epoch: another
    epoch's shuffle groups the samples differently and may take a step more or less, so
    for several dynamic-batch epochs give the trainer ``max_steps`` (or the sum of each
    epoch's count) rather than ``epochs × steps_per_epoch``.
    """
    from youmu.batching import DynamicBatchLoader
    from youmu.batching.algo.sampling import rank_indices
    from youmu.batching.algo.simulation import simulate_ranks
    from youmu.state.contract import check_epoch

    instance_arg("loader", loader, DynamicBatchLoader, "a youmu DynamicBatchLoader")
    cfg = loader.config
    if cfg.kind != "map":
        raise InvalidArgumentError(
            "odb_steps_per_epoch needs a DynamicBatchLoader over a map-style dataset (an iterable's lengths are only "
            "known by reading it); pass steps_per_epoch or max_steps to the trainer instead"
        )
    if not cfg.join:
        raise InvalidArgumentError("odb_steps_per_epoch counts join-mode epochs; non-join mode stops at quota")
    epoch = loader.epoch if epoch is None else check_epoch(epoch)
    ds = cfg.dataset
    lengths: list[list[int]] = []
    tokens: list[list[int]] = []
    for r in range(cfg.world_size):
        idx = rank_indices(len(ds), cfg.world_size, r, seed=cfg.seed, epoch=epoch, shuffle=cfg.shuffle,
                           pad=cfg.pad_sampler)
        samples = [ds[i] for i in idx]
        lengths.append([int(cfg.length_fn(s)) for s in samples])
        tokens.append([int(cfg.token_count_fn(s)) for s in samples])
    res = simulate_ranks(lengths, cfg.token_budget, cfg.pool_size, join=True, loss_scaling=cfg.loss_scaling,
                         rank_tokens=tokens, seed=cfg.seed, epoch=epoch, shuffle_steps=cfg.shuffle_steps)
    return max(res.steps_per_rank) if res.steps_per_rank else 0


def stream_batches_per_epoch(source: Any, batch_size: int, num_workers: int) -> int | None:
    """Batches a ``StatefulDataLoader`` forms from the stream ``source`` in one epoch on
    this rank, or ``None`` when only reading would tell. Each DataLoader worker batches its
    own share, so with workers the count is the sum of every worker's batches (the
    stream's ``shard_length`` of each worker), not ``len / batch_size``."""
    if not hasattr(source, "__len__"):
        return None
    if num_workers == 0:
        return math.ceil(len(source) / batch_size)
    shard_length = getattr(source, "shard_length", None)
    if shard_length is None:
        return None
    return sum(math.ceil(shard_length(w, num_workers) / batch_size) for w in range(num_workers))
