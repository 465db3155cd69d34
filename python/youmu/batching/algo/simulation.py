"""Run the round protocol for ``W`` virtual ranks in one process (no torch.distributed).

The simulation uses the same :class:`~youmu.batching.algo.protocol.RankProtocol` as the
real loader, with a list standing in for the all_gather. Because a real round fires
only when buffers are full (or the data is exhausted), a simulation over the same
per-rank sample order yields exactly the real loader's batches, so it doubles as a
what-if tool: batch shape, padding and samples per update for a length distribution
before launching a job.

Example:
    >>> res = simulate_ranks([[100, 200, 500, 800], [300, 300]], token_budget=1000, pool_size=4)
    >>> res.steps, res.samples, sorted(res.emitted_keys[0]), sorted(res.emitted_keys[1])
    (3, 6, [0, 1, 2, 3], [0, 1])
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from youmu.batching.algo.alignment import plan_round
from youmu.batching.algo.protocol import EmittedStep, Item, RankProtocol
from youmu.errors import InvalidArgumentError, LoaderError, ProtocolError

__all__ = ["SimulationResult", "simulate_ranks", "simulate", "fixed_batch_padding"]


@dataclass
class SimulationResult:
    """Outcome of a simulated epoch (global figures unless named per rank)."""

    world_size: int
    steps: int = 0  # aligned steps (optimizer updates without accumulation)
    samples: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    loss_tokens: int = 0
    rounds: int = 0  # exchanges (emit + terminal/stop rounds; a synchronous run never skips)
    emit_rounds: int = 0
    second_gathers: int = 0
    iterations: int = 1  # logical iterations (non-join chaining)
    steps_per_rank: list[int] = field(default_factory=list)
    emitted_keys: list[list[int]] = field(default_factory=list)  # per rank, per logical iteration concatenated
    emitted_indices: list[list[int]] = field(default_factory=list)
    undelivered_at_stop: list[list[int]] = field(default_factory=list)  # per non-join stop, per rank
    step_samples: list[int] = field(default_factory=list)  # global samples of each step
    trace: list[list[EmittedStep]] = field(default_factory=list)  # per rank, if kept

    @property
    def padding_ratio(self) -> float:
        """``1 - real / padded`` over all emitted batches."""
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def samples_per_step(self) -> float:
        return self.samples / self.steps if self.steps else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.real_tokens / self.steps if self.steps else 0.0


def _run_iteration(
    protos: list[RankProtocol],
    queues: list[list[Item]],
    res: SimulationResult,
    join: bool,
    quota: int | None,
    keep_trace: bool,
    max_rounds: int,
) -> str:
    """Drive one logical iteration; returns ``"finish"``, ``"stop"`` or ``"quota"``."""
    W = len(protos)
    pos = [0] * W
    while True:
        for r, p in enumerate(protos):
            take = min(p.room, len(queues[r]) - pos[r])
            for it in queues[r][pos[r] : pos[r] + take]:
                p.add(it)
            pos[r] += take
            p.exhausted = pos[r] >= len(queues[r])
        plan = plan_round([p.report() for p in protos], join=join)
        res.rounds += 1
        if res.rounds > max_rounds:
            raise ProtocolError(f"simulation exceeded {max_rounds} rounds (protocol bug?)")
        if plan.action == "finish":
            return "finish"
        if plan.action == "stop":
            res.undelivered_at_stop.append([len(p.buffer) for r, p in enumerate(protos)])
            return "stop"
        if plan.action != "emit":  # a synchronous run is always ready
            raise ProtocolError(f"unexpected round action {plan.action!r}")
        res.emit_rounds += 1
        kept = [p.align(plan) for p in protos]
        gathered = None
        if protos[0].needs_token_gather(plan):
            res.second_gathers += 1
            T = plan.target
            gathered = [RankProtocol.post_tokens(k) if k else [0] * T for k in kept]
        per_rank = [p.steps(plan, kept[r], gathered) for r, p in enumerate(protos)]
        for j in range(plan.target):
            n_all = per_rank[0][j].info.global_num_samples
            res.steps += 1
            res.step_samples.append(n_all)
            for r in range(W):
                st = per_rank[r][j]
                if st.items:
                    res.steps_per_rank[r] += 1
                    res.samples += st.info.num_samples
                    res.real_tokens += st.info.real_tokens
                    res.padded_tokens += st.info.padded_tokens
                    res.loss_tokens += sum(it.tokens for it in st.items)
                    res.emitted_keys[r].extend(it.key for it in st.items)
                    res.emitted_indices[r].extend(it.index for it in st.items if it.index is not None)
                    if keep_trace:
                        res.trace[r].append(st)
            if quota is not None and sum(res.step_samples) >= quota:
                return "quota"


def simulate_ranks(
    rank_lengths: Sequence[Sequence[int]],
    token_budget: int,
    pool_size: int,
    *,
    join: bool = True,
    loss_scaling: str = "exact",
    rank_tokens: Sequence[Sequence[int]] | None = None,
    rank_indices: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
    epoch: int = 0,
    shuffle_steps: bool = True,
    keep_trace: bool = False,
    max_rounds: int | None = None,
    rank_extra: Sequence[Sequence[int]] | None = None,
    extra_budget: int | None = None,
) -> SimulationResult:
    """One logical iteration over given per-rank arrival orders of sample lengths.

    Args:
        rank_lengths: ``rank_lengths[r][k]`` is the length of rank r's k-th sample.
        rank_tokens: loss tokens per sample (default: the lengths).
        rank_indices: dataset index per sample (default: none recorded).
        keep_trace: keep every emitted step (items and info) per rank.
        rank_extra, extra_budget: the second budget (``encoder_budget`` of the
            loader): each sample's count (encoder patches or images) and the budget.
    """
    W = len(rank_lengths)
    if (rank_extra is None) != (extra_budget is None):
        raise InvalidArgumentError("pass rank_extra= and extra_budget= together")
    if W < 1:
        raise InvalidArgumentError("need at least one rank")
    res = _new_result(W, keep_trace)
    protos = [
        _proto(r, W, token_budget, pool_size, join, loss_scaling, seed, epoch, 0, shuffle_steps) for r in range(W)
    ]
    for p in protos:
        p.extra_budget = extra_budget
    queues = [
        [
            Item(
                k,
                rank_indices[r][k] if rank_indices is not None else None,
                None,
                int(n),
                int(rank_tokens[r][k]) if rank_tokens is not None else int(n),
                extra=int(rank_extra[r][k]) if rank_extra is not None else 0,
            )
            for k, n in enumerate(rank_lengths[r])
        ]
        for r in range(W)
    ]
    limit = max_rounds if max_rounds is not None else 10 * (sum(map(len, rank_lengths)) + W * pool_size + 10)
    _run_iteration(protos, queues, res, join, None, keep_trace, limit)
    return res


def simulate(
    lengths: Sequence[int],
    world_size: int,
    token_budget: int,
    pool_size: int,
    *,
    join: bool = True,
    quota: int | None = None,
    loss_scaling: str = "exact",
    tokens: Sequence[int] | None = None,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    shuffle_steps: bool = True,
    keep_trace: bool = False,
    sharder: Callable[[int, int, int, int], list[int]] | None = None,
    pad_sampler: bool = False,
) -> SimulationResult:
    """An epoch of a map-style dataset with per-sample ``lengths``, as the loader runs it.

    Ranks draw indices as the loader does (see
    :func:`~youmu.batching.algo.sampling.rank_indices`; shuffling needs torch unless a
    ``sharder(n, world_size, rank, iteration)`` is given; ``pad_sampler`` as the
    loader's: no tail padding by default). In non-join mode logical
    iterations are chained until ``quota`` samples (default ``len(lengths)``) are emitted.
    """
    from youmu.batching.algo.sampling import rank_indices as _rank_indices

    n = len(lengths)
    if sharder is None:

        def sharder(n_: int, w: int, r: int, it: int) -> list[int]:
            return _rank_indices(n_, w, r, seed=seed, epoch=epoch, iteration=it, shuffle=shuffle, pad=pad_sampler)

    res = _new_result(world_size, keep_trace)
    target = (n if quota is None else quota) if not join else None
    iteration = 0
    while True:
        protos = [
            _proto(r, world_size, token_budget, pool_size, join, loss_scaling, seed, epoch, iteration, shuffle_steps)
            for r in range(world_size)
        ]
        base_step = res.steps
        for p in protos:
            p.step = base_step
        queues = []
        for r in range(world_size):
            idx = sharder(n, world_size, r, iteration)
            queues.append([
                Item(k, i, None, int(lengths[i]), int(tokens[i]) if tokens is not None else int(lengths[i]))
                for k, i in enumerate(idx)
            ])
        limit = 10 * (n + world_size * pool_size + 10)
        outcome = _run_iteration(protos, queues, res, join, target, keep_trace, limit)
        if outcome != "stop" or target is None or n == 0:
            break
        iteration += 1
        res.iterations += 1
        if iteration > 1000 + 10 * n:
            raise LoaderError("non-join chaining made no progress (a rank has no data?)")
    return res


def fixed_batch_padding(lengths: Sequence[int], batch_size: int, seed: int = 0) -> float:
    """Padding ratio of fixed-size batches over a random order (the Standard baseline).

    >>> fixed_batch_padding([10, 10, 10, 10], 2)
    0.0
    """
    if batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}")
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    real = padded = 0
    for i in range(0, len(order), batch_size):
        b = [lengths[j] for j in order[i : i + batch_size]]
        real += sum(b)
        padded += len(b) * max(b)
    return 1.0 - real / padded if padded else 0.0


def _new_result(W: int, keep_trace: bool) -> SimulationResult:
    return SimulationResult(
        world_size=W,
        steps_per_rank=[0] * W,
        emitted_keys=[[] for _ in range(W)],
        emitted_indices=[[] for _ in range(W)],
        trace=[[] for _ in range(W)] if keep_trace else [],
    )


def _proto(
    r: int, W: int, budget: int, buf: int, join: bool, mode: str, seed: int, epoch: int, it: int, shuffle_steps: bool
) -> RankProtocol:
    return RankProtocol(
        rank=r, world_size=W, token_budget=budget, pool_size=buf, join=join, loss_scaling=mode,
        seed=seed, epoch=epoch, iteration=it, shuffle_steps=shuffle_steps,
    )
