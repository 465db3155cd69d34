"""One rank's side of the round protocol, without any I/O. Pure, no torch.

:class:`RankProtocol` holds the grouping buffer and turns gathered reports into the
steps this rank emits. The real loader's aligner thread (:mod:`youmu.batching.runtime.aligner`)
drives it with a Gloo all_gather; :mod:`youmu.batching.algo.simulation` drives ``W`` of them in one process
with a list in place of the all_gather. Both therefore produce the same batches.

Buffer discipline (the "hold" accounting): a sample stays in the buffer, holding its
output slot, until it is emitted in an aligned group; overflow goes back into the
buffer. A rank reports :data:`~youmu.batching.algo.alignment.FINISHED` only when its source
is exhausted *and* its buffer is empty, so nothing is stranded at the end of data.

A round fires when the buffer holds ``pool_size`` samples or the source is
exhausted, never on a timer, so the batches are a pure function of the samples'
arrival order and do not depend on timing.

Example:
    >>> p = [RankProtocol(rank=r, world_size=2, token_budget=100, pool_size=4) for r in range(2)]
    >>> for r, lengths in enumerate([[10, 20, 30, 60], [50, 50, 50, 50]]):
    ...     for k, n in enumerate(lengths):
    ...         p[r].add(Item(key=k, index=k, sample=None, length=n, tokens=n))
    >>> from youmu.batching.algo.alignment import plan_round
    >>> plan = plan_round([q.report() for q in p], join=True)
    >>> plan.target, [[len(g) for g in q.align(plan)] for q in p]
    (3, [[2, 1, 1], [1, 2, 1]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from youmu.batching.algo.alignment import (
    FINISHED,
    NOT_READY,
    RankReport,
    RoundPlan,
    align_groups,
    step_order,
)
from youmu.batching.algo.grouping import form_groups
from youmu.batching.algo.loss import LOSS_SCALING_MODES, loss_scale
from youmu.batching.algo.step_info import StepInfo
from youmu.errors import InvalidArgumentError, ProtocolError

__all__ = ["Item", "RankProtocol", "EmittedStep"]


class Item:
    """A buffered sample: its key (sampler position or arrival number), dataset index,
    payload, realised length (grouping), loss-token count (loss scaling) and its count
    of the second budget (``extra``: encoder patches or images; 0 without one)."""

    __slots__ = ("key", "index", "sample", "length", "tokens", "state", "extra", "worker", "packed")

    def __init__(self, key: int, index: int | None, sample: Any, length: int, tokens: int, state: Any = None,
                 extra: int = 0, worker: int = -1) -> None:
        self.key = key
        self.index = index
        self.sample = sample
        self.length = length
        self.tokens = tokens
        # the source's resume state just after this item (stateful iterables): the
        # dataset's own, or with DataLoader workers its copy's in the worker that made it
        self.state = state
        self.extra = extra
        self.worker = worker  # the DataLoader worker that made it (iterable sources; -1: none)
        self.packed: Any = None  # the sample as a state carries it, once a state did (youmu.batching.payloads)

    def __repr__(self) -> str:
        return f"Item(key={self.key}, length={self.length})"


class EmittedStep(NamedTuple):
    """A step this rank emits: its local group (empty when inactive) and its info."""

    items: tuple[Item, ...]
    info: StepInfo


class RankProtocol:
    """Grouping buffer plus round bookkeeping of one rank.

    Args:
        rank, world_size: this rank and ``W``.
        token_budget: ``L_max`` of ODB, Eq. 1.
        pool_size: samples grouped per round; also the most groups a rank can
            report, so the message length is fixed.
        join: join mode (drain every rank) or non-join (first finished rank stops).
        loss_scaling: one of ``"exact"``, ``"approx"``, ``"sample"``, ``"none"``.
        seed, epoch, iteration: seed the per-round step order.
        shuffle_steps: shuffle the order of a round's steps (the same on every rank).
        round_id, step: counters to start from (resume).
        extra_budget: the second budget (encoder patches or images per group; see
            :func:`~youmu.batching.algo.grouping.form_groups`), ``None`` for none.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        token_budget: int,
        pool_size: int,
        join: bool = True,
        loss_scaling: str = "exact",
        seed: int = 0,
        epoch: int = 0,
        iteration: int = 0,
        shuffle_steps: bool = True,
        round_id: int = 0,
        step: int = 0,
        extra_budget: int | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise InvalidArgumentError(f"rank {rank} is not in range(world_size={world_size})")
        if token_budget < 1:
            raise InvalidArgumentError(f"token_budget must be >= 1, got {token_budget}")
        if pool_size < 1:
            raise InvalidArgumentError(f"pool_size must be >= 1, got {pool_size}")
        if loss_scaling not in LOSS_SCALING_MODES:
            raise InvalidArgumentError(f"loss_scaling must be one of {LOSS_SCALING_MODES}, got {loss_scaling!r}")
        self.rank = rank
        self.world_size = world_size
        self.token_budget = token_budget
        self.pool_size = pool_size
        self.extra_budget = extra_budget
        self.join = join
        self.loss_scaling = loss_scaling
        self.seed = seed
        self.epoch = epoch
        self.iteration = iteration
        self.shuffle_steps = shuffle_steps
        self.round_id = round_id  # emitting rounds so far (seeds the step order)
        self.step = step  # global steps so far
        self.buffer: list[Item] = []
        self.exhausted = False
        self._groups: list[list[Item]] | None = None
        # counters for metrics and tests
        self.splits = 0  # singletons created by splitting
        self.recirculated = 0  # samples sent back to the buffer by overflow

    # -- buffer ---------------------------------------------------------------------------
    def add(self, item: Item) -> None:
        """Put a sample in the buffer (the caller respects :attr:`room`)."""
        self.buffer.append(item)
        self._groups = None

    @property
    def room(self) -> int:
        """Samples the buffer can still take before the round fires."""
        return max(self.pool_size - len(self.buffer), 0)

    @property
    def ready(self) -> bool:
        return len(self.buffer) >= self.pool_size or self.exhausted

    @property
    def finished(self) -> bool:
        return self.exhausted and not self.buffer

    def groups(self) -> list[list[Item]]:
        """Candidate groups of the current buffer (cached until the buffer changes)."""
        if self._groups is None:
            extra = None if self.extra_budget is None else [it.extra for it in self.buffer]
            idx = form_groups([it.length for it in self.buffer], self.token_budget, extra, self.extra_budget)
            self._groups = [[self.buffer[i] for i in g] for g in idx]
        return self._groups

    # -- round ----------------------------------------------------------------------------
    def report(self) -> RankReport:
        """This rank's message for the next exchange."""
        if self.finished:
            return RankReport(0, FINISHED)
        if not self.ready:
            return RankReport(len(self.buffer), NOT_READY)
        groups = self.groups()
        return RankReport(
            len(self.buffer),
            len(groups),
            tuple(len(g) for g in groups),
            tuple(sum(it.tokens for it in g) for g in groups),
        )

    def align(self, plan: RoundPlan) -> list[list[Item]]:
        """Apply an ``emit`` plan locally; returns this rank's ``T_grp`` groups in
        short-to-long order (empty if inactive) and keeps the overflow buffered."""
        if plan.action != "emit" or self.rank not in plan.active:
            return []
        kept, overflow = align_groups(self.groups(), plan.target)
        if len(kept) != plan.target:  # cannot happen when T_grp <= S_min+
            raise ProtocolError(f"rank {self.rank}: aligned to {len(kept)} groups, target {plan.target}")
        own = plan.reports[self.rank].n_groups
        if own < plan.target:
            self.splits += plan.target - own
        self.recirculated += len(overflow)
        self.buffer = overflow
        self._groups = None
        return kept

    @staticmethod
    def post_tokens(kept: Sequence[Sequence[Item]]) -> list[int]:
        """Exact token count of each aligned group (the second gather's payload)."""
        return [sum(it.tokens for it in g) for g in kept]

    def needs_token_gather(self, plan: RoundPlan) -> bool:
        """Whether this round needs the exact-mode second all_gather (same on every rank)."""
        return plan.action == "emit" and self.loss_scaling == "exact" and plan.changed

    def steps(
        self,
        plan: RoundPlan,
        kept: Sequence[Sequence[Item]],
        gathered_tokens: Sequence[Sequence[int]] | None = None,
    ) -> list[EmittedStep]:
        """The round's steps in emission order, with metadata, on this rank.

        ``gathered_tokens`` is the second all_gather's result (per rank, per aligned
        group) and is required exactly when :meth:`needs_token_gather` says so.
        """
        if plan.action != "emit":
            return []
        T = plan.target
        W = self.world_size
        need = self.needs_token_gather(plan)
        if need and gathered_tokens is None:
            raise InvalidArgumentError("this round needs the post-alignment token counts of every rank")
        exact = (not plan.changed) or need
        per_rank: list[list[float] | None] = []
        for r in range(W):
            a = plan.aligned[r]
            if a is None:
                per_rank.append(None)
            elif need:
                assert gathered_tokens is not None
                per_rank.append(list(gathered_tokens[r][:T]))
            elif not plan.changed:
                per_rank.append(list(plan.reports[r].tokens))
            else:
                # approx: scale each origin group's tokens by the share of it kept
                rep = plan.reports[r]
                per_rank.append([rep.tokens[i] * k / rep.sizes[i] for i, k in a.origins])
        order = step_order(
            T, seed=self.seed, epoch=self.epoch, iteration=self.iteration, round_id=self.round_id,
            shuffle=self.shuffle_steps,
        )
        active = self.rank in plan.active
        out: list[EmittedStep] = []
        for j, p in enumerate(order):
            g_samples = sum(a.sizes[p] for a in plan.aligned if a is not None)
            g_tokens = sum(t[p] for t in per_rank if t is not None)
            items = tuple(kept[p]) if active else ()
            local_tokens = per_rank[self.rank][p] if active else 0  # type: ignore[index]
            if exact:
                g_tokens = int(g_tokens)
                local_tokens = int(local_tokens)
            lengths = [it.length for it in items]
            # token imbalance across the ranks that contribute to this step
            rank_t = [t[p] for t in per_rank if t is not None]
            mean_t = sum(rank_t) / len(rank_t)
            imbalance = max(rank_t) / mean_t if mean_t > 0 else 1.0
            info = StepInfo(
                step=self.step + j,
                num_samples=len(items),
                num_tokens=local_tokens,
                global_num_samples=g_samples,
                global_num_tokens=g_tokens,
                loss_scale=loss_scale(self.loss_scaling, W, local_tokens, g_tokens, len(items), g_samples)
                if active
                else 0.0,
                world_size=W,
                rank=self.rank,
                epoch=self.epoch,
                iteration=self.iteration,
                round=self.round_id,
                step_in_round=j,
                active_ranks=len(plan.active),
                real_tokens=sum(lengths),
                padded_tokens=len(lengths) * max(lengths, default=0),
                tokens_exact=exact,
                imbalance=imbalance,
                sample_indices=tuple(it.index if it.index is not None else it.key for it in items),
            )
            out.append(EmittedStep(items, info))
        self.step += T
        self.round_id += 1
        return out
