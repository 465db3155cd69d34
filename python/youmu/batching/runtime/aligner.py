"""The aligner thread of one epoch on one rank: one algorithm, ODB's DGAP round protocol over the channel.

Each round (ODB's DGAP protocol) the aligner

1. **fills** the grouping buffer from the :class:`~youmu.batching.runtime.feed.SampleFeed`
   until it is full, the data ends, or a heartbeat passes (then it reports
   NOT_READY, a skip round that keeps the collective's timeout short without
   penalising slow preprocessing);
2. **exchanges** one fixed-length report per rank (one all_gather, the same number
   on every rank: ODB, Lemma 3);
3. **plans** the round from the gathered reports (:func:`~youmu.batching.algo.alignment.plan_round`,
   the same decision everywhere);
4. **emits** the aligned groups: collates each batch and answers its samples' output
   slots, one with the batch and the rest with IDLE; exact loss scaling may need a
   second all_gather of the aligned token counts (ODB, Eq. 2).

Before the first round a **handshake** (:mod:`~youmu.batching.runtime.handshake`) checks that
every rank runs the same settings and epoch and agrees on the counters to start from;
after a resume the aligner first **replays** the rest of the interrupted round exactly
as it was planned.

The rounds are the source of a :class:`~youmu.distributed.producer.Producer` (thread,
failure hand-off, end); the aligner adds the channel lease (released ``on_end``), an
early ``END`` while it serves its peers (join mode's tail), and after a peer's close an
``END`` with :attr:`Aligner.end_sent` unset (:attr:`Aligner.peer_closed` says why).

Everything the trainer needs crosses over in :attr:`Aligner.out` (batches, IDLE,
fillers, the end, failures) and :attr:`Aligner.records` (what each emitting round
emitted, from which a resume state is made); the trainer's progress comes back
through :attr:`Aligner.steps_consumed`, :attr:`Aligner.local_end` and
:attr:`Aligner.closing`. The aligner holds the loader's config, never the loader.

Example (one rank; ``DynamicBatchLoader`` does this, and consumes ``out`` for you):
    >>> from youmu.batching.state import fresh_state
    >>> from youmu.distributed import GlooChannel
    >>> cfg = LoaderConfig.build(dict(dataset=[3, 5, 4, 9], token_budget=16, length_fn=lambda s: s,
    ...                               pool_size=4, num_workers=0, shuffle=False), GlooChannel.local())
    >>> a = Aligner(cfg, 0, fresh_state(cfg, 0), None, credits=Credits(cfg.max_outstanding), metrics=BatchingMetrics())
    >>> _ = a.producer.start()
    >>> sorted(batch for batch, info in (x for x in iter(a.out.get, END) if x is not IDLE))
    [[3, 4], [5], [9]]
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any

from youmu.batching.algo.alignment import (
    CLOSED,
    FAILED,
    RankReport,
    RoundPlan,
    decode_report,
    encode_oversized,
    encode_report,
    grown_max_groups,
    initial_max_groups,
    message_bytes,
    plan_round,
    second_gather_bytes,
)
from youmu.batching.algo.protocol import EmittedStep, Item, RankProtocol
from youmu.batching.algo.step_info import IDLE, StepInfo
from youmu.batching.config import LoaderConfig
from youmu.batching.runtime.feed import SampleFeed
from youmu.batching.runtime.handshake import agreed_start, handshake_row
from youmu.batching.runtime.metrics import BatchingMetrics
from youmu.distributed.producer import END, Credits, Failure, Producer
from youmu.errors import DataStallError, LoaderError, RankFailedError

__all__ = ["Aligner", "RoundRecord", "Filler"]

#: What a round's code yields (batches, IDLE, fillers, an early END) and returns: how the
#: logical iteration ended, or None while it goes on.
_Rounds = Generator[Any, None, "str | None"]

log = logging.getLogger("youmu.batching")

_ROUNDS_LOGGED = 100_000  # rounds_log keeps the most recent ones (heartbeat rounds never stop)


class Filler:
    """A step on which this rank contributes nothing (``uneven="pad"``)."""

    __slots__ = ("info",)

    def __init__(self, info: StepInfo) -> None:
        self.info = info


@dataclass
class RoundRecord:
    """What a resume needs about one emitting round (kept until the trainer passes it):
    its steps, the buffer it left (overflow), where the source stood and the counters
    after it."""

    iteration: int
    round: int
    steps: list[tuple[tuple[Item, ...], StepInfo]]
    overflow: list[Item]
    position: int
    source_state: Any
    emitted_before: int
    round_after: int
    step_after: int
    #: an iterable source's DataLoader workers (:meth:`~youmu.batching.runtime.feed.SampleFeed.workers_state`)
    workers: Any = None


class Aligner:
    """One epoch's aligner thread on this rank (see the module doc).

    Args:
        config: the loader's settings as of ``iter()``.
        epoch: the epoch being iterated.
        start: the state to start from (a fresh one, or the loaded resume state).
        resume: the loaded state, if any (replayed before the first round).
        credits: the output credits shared with the trainer's side.
        metrics: the epoch's metrics.
    """

    def __init__(
        self, config: LoaderConfig, epoch: int, start: dict[str, Any], resume: dict[str, Any] | None,
        *, credits: Credits, metrics: BatchingMetrics,
    ) -> None:
        self.config = config
        self.epoch = epoch
        self.start = start
        self.resume = resume
        self.credits = credits
        self.metrics = metrics
        # to the trainer: the rounds' output, in order, on the producer's queue (unbounded:
        # every batch is made of samples whose credits the fetcher holds)
        self.producer: Producer[Any] = Producer(
            self._source, depth=0, name=f"youmu-aligner-r{config.rank}", on_end=self._release, what="the aligner",
            watch=False,
        )
        self.thread = self.producer.thread
        self.out = self.producer.queue
        self.records: deque[RoundRecord] = deque()
        self.records_lock = threading.Lock()
        self._leased = False
        self.peer_closed: tuple[tuple[int, ...], int] | None = None  # (ranks, steps they consumed)
        self.end_sent = False
        # from the trainer
        self.closing = threading.Event()
        self.leaving = False  # interpreter exit: report CLOSED even in the join tail
        self.local_end = False  # the trainer received END
        self.steps_consumed = 0  # global step index + 1 of the last delivered step
        # diagnostics (tests of the uniform-call invariant, ODB, Lemma 4)
        self.collectives = 0  # primary exchanges
        self.second_gathers = 0
        self.rounds_log: deque[tuple[str, int, bool, bool]] = deque(maxlen=_ROUNDS_LOGGED)
        self.undelivered_at_stop: list[int] = []
        # the round state
        self.feed: SampleFeed | None = None
        self.emitted = 0  # global samples emitted (non-join quota)
        self._last_step = 0
        self._max_groups = initial_max_groups(config.pool_size)

    @property
    def failure(self) -> BaseException | None:
        """The exception that ended the rounds, local or a peer's, once there is one."""
        return self.producer.failure

    # -- what the exit hook needs (youmu.batching.runtime.shutdown.ExitParticipant) ---------------------
    @property
    def aligner_thread(self) -> threading.Thread:
        return self.thread

    @property
    def timeout(self) -> float:
        return self.config.timeout

    @property
    def heartbeat(self) -> float:
        return self.config.heartbeat

    @property
    def parked(self) -> threading.Event:
        return self.config.channel.parked

    def serving_peers(self) -> bool:
        return self.end_sent and not self.closing.is_set()

    def leave(self) -> None:
        self.leaving = True
        self.closing.set()

    def stop_fetching(self) -> threading.Thread | None:
        feed = self.feed
        producer = feed.producer if feed is not None else None
        if producer is None:
            return None
        producer.stop_event.set()
        return producer.thread

    # -- the producer's source and end ----------------------------------------------------------
    def _source(self) -> Iterator[Any]:
        """On the thread: lease the channel, then the rounds' output."""
        wait = self.config.timeout
        if not self.config.channel.lease(wait):
            raise LoaderError(f"the loader's channel stayed busy for {wait:.0f}s (another iteration on it?)")
        self._leased = True
        return self._rounds()

    def _release(self) -> None:
        """On the thread, after the end or the failure was queued."""
        try:
            if self.feed is not None:
                self.feed.stop()
        finally:
            if self._leased:
                self.config.channel.release_lease()

    def _rounds(self) -> Iterator[Any]:
        start = self._handshake()
        iteration = start["iteration"]
        resume = self.resume if not start["done"] else None
        if start["done"]:
            yield from self._run_done(start)
        else:
            while True:
                first_step = int(start["step"])
                outcome = yield from self._run_iteration(iteration, start, resume)
                resume = None
                if outcome != "stop":
                    break
                if self._last_step == first_step:
                    # the same on every rank: chaining again could never reach the quota
                    raise LoaderError(
                        "non-join mode: a logical iteration ended before any step (a rank has no data?); "
                        "use join=True when ranks may hold no samples"
                    )
                iteration += 1
                start = dict(start, round=0, step=self._last_step, emitted=self.emitted)
        if self.peer_closed is None:
            # the producer's END follows; after a peer's close it comes with end_sent unset
            self.end_sent = True

    def _exchange(self, row: list[int]) -> list[list[int]]:
        return self.config.channel.all_gather_rows(row)

    def _handshake(self) -> dict[str, Any]:
        """Check that every rank runs the same settings and epoch; agree on counters."""
        rows = self._exchange(handshake_row(self.config.fingerprint, self.epoch, self.start))
        return agreed_start(rows, done=bool(self.start["done"]))

    def _protocol(self, iteration: int, start: dict[str, Any]) -> RankProtocol:
        c = self.config
        return RankProtocol(
            rank=c.rank, world_size=c.world_size, token_budget=c.token_budget, pool_size=c.pool_size,
            join=c.join, loss_scaling=c.loss_scaling, seed=c.seed, epoch=self.epoch, iteration=iteration,
            shuffle_steps=c.shuffle_steps, round_id=int(start["round"]), step=int(start["step"]),
            extra_budget=c.encoder_budget,
        )

    # -- logical iterations ---------------------------------------------------------------------
    def _run_done(self, start: dict[str, Any]) -> Iterator[Any]:
        """A rank resumed after its data ran out (join mode): serve peers until all finish."""
        self.end_sent = True
        yield END
        proto = self._protocol(start["iteration"], start)
        proto.exhausted = True
        while (yield from self._round(proto)) is None:
            pass

    def _run_iteration(
        self, iteration: int, start: dict[str, Any], resume: dict[str, Any] | None,
    ) -> _Rounds:
        proto = self._protocol(iteration, start)
        self.emitted = int(start["emitted"])
        self._last_step = proto.step
        self.feed = SampleFeed(self.config, self.epoch, iteration, resume, self.credits)
        if resume is not None:
            yield from self._replay(proto, resume, iteration)
        while True:
            outcome = yield from self._round(proto)
            if outcome is not None:
                return outcome

    def _replay(self, proto: RankProtocol, resume: dict[str, Any], iteration: int) -> Iterator[Any]:
        """Emit the rest of the round a checkpoint interrupted, exactly as planned."""
        c = self.config
        feed = self._feed()
        steps: list[EmittedStep] = []
        for entry in resume["replay"]:
            items = tuple(feed.take_item(c.heartbeat, c.data_timeout) for _ in entry["keys"])
            info = StepInfo(**{**entry["info"], "sample_indices": tuple(entry["info"]["sample_indices"])})
            steps.append(EmittedStep(items, info))
        for _ in resume["overflow"]:
            proto.add(feed.take_item(c.heartbeat, c.data_timeout))
        if steps:
            self._record(RoundRecord(
                iteration=iteration, round=steps[0].info.round, steps=[(s.items, s.info) for s in steps],
                overflow=list(proto.buffer), position=feed.position, source_state=feed.source_state,
                emitted_before=self.emitted, round_after=proto.round_id, step_after=proto.step,
                workers=feed.workers_state(),
            ))
            for st in steps:
                yield from self._emit_step(st)
                if not c.join:
                    self.emitted += st.info.global_num_samples

    def _feed(self) -> SampleFeed:
        assert self.feed is not None  # set by _run_iteration before any round that fills
        return self.feed

    def _fill(self, proto: RankProtocol) -> BaseException | None:
        """Take fetched samples into the buffer until it is ready or the heartbeat
        passes; a local failure to report instead of a round, if any."""
        c = self.config
        feed = self._feed()
        deadline = time.monotonic() + c.heartbeat
        while not proto.ready and not self.closing.is_set():
            x = feed.take(deadline - time.monotonic())
            if x is None:
                stalled = feed.stalled_for()
                if stalled > c.data_timeout:
                    where = (f"its {c.num_workers} DataLoader workers" if c.num_workers
                             else "the fetcher thread (num_workers=0)")
                    return DataStallError(
                        f"rank {c.rank}: the data source produced nothing for {stalled:.0f}s "
                        f"(data_timeout {c.data_timeout:.0f}s) while making the sample after position "
                        f"{feed.position} in {where}: the dataset's __getitem__/__iter__ or a transform is "
                        "blocked (storage, a lock, a worker waiting on another process); a failure would have "
                        "been raised instead"
                    )
                if time.monotonic() >= deadline:
                    break
                continue
            if x is END:
                proto.exhausted = True
            elif isinstance(x, Failure):
                return x.exc
            else:
                proto.add(x)
        self.metrics.record_outstanding(self.credits.held)
        return None

    # -- one round --------------------------------------------------------------------------------
    def _exchange_reports(self, report: RankReport) -> tuple[list[RankReport], int]:
        """Every rank's report of this round, and the bytes gathered for them.

        Rows have room for ``self._max_groups`` groups; a rank with more sends only its
        header, and every rank then makes room and exchanges the round again (the same
        on every rank, so the number of collectives stays uniform)."""
        c = self.config
        nbytes = 0
        while True:
            fits = max(report.n_groups, 0) <= self._max_groups
            row = encode_report(report, self._max_groups) if fits else encode_oversized(report, self._max_groups)
            rows = self._exchange(row)
            nbytes += message_bytes(c.world_size, self._max_groups)
            grown = grown_max_groups(rows, self._max_groups, c.pool_size)
            if grown is None:
                return [decode_report(r, self._max_groups) for r in rows], nbytes
            self._max_groups = grown

    def _round(self, proto: RankProtocol) -> _Rounds:
        """One exchange, yielding its output. Returns an outcome when the logical iteration
        ends, else None."""
        c = self.config
        local_error: BaseException | None = None
        if not proto.finished:
            local_error = self._fill(proto)
        yield from self._maybe_local_end(proto)
        if local_error is not None:
            report = RankReport(0, FAILED)
        elif self.leaving or (self.closing.is_set() and not self.local_end and not self.end_sent):
            report = RankReport(self.steps_consumed, CLOSED)
        else:
            tg = time.perf_counter()
            report = proto.report()
            self.metrics.record_grouping(time.perf_counter() - tg)
        t0 = time.perf_counter()
        reports, bytes_primary = self._exchange_reports(report)
        t1 = time.perf_counter()
        self.collectives += 1
        plan = plan_round(reports, join=c.join)

        if plan.action != "emit":
            self.metrics.record_round(plan.action, bytes_primary, t1 - t0)
            self.rounds_log.append((plan.action, 0, False, False))
        if plan.action == "fail":
            log.error("rank %d: round failed on rank(s) %s", c.rank, list(plan.ranks))
            if local_error is not None:
                raise local_error
            raise RankFailedError(f"rank(s) {list(plan.ranks)} failed (their own error is raised there)", plan.ranks)
        if plan.action == "close":
            if c.rank not in plan.ranks:
                steps = max(plan.reports[r].capacity for r in plan.ranks)
                self.peer_closed = (plan.ranks, steps)
                log.warning("rank %d: rank(s) %s closed the loader after %d steps", c.rank, list(plan.ranks), steps)
            self.closing.set()
            return "close"
        if plan.action == "finish":
            return "finish"
        if plan.action == "stop":
            feed = self._feed()
            # ODB, Lemma 4: fetched but not delivered in this logical iteration (buffer + fetch queue)
            self.undelivered_at_stop.append(len(proto.buffer) + feed.pending())
            self.credits.release(len(proto.buffer) + feed.drop_preloaded())
            proto.buffer = []
            feed.stop()
            self._last_step = proto.step
            return "stop"
        if plan.action == "skip":
            return None
        return (yield from self._emit_round(proto, plan, bytes_primary, t0, t1))

    def _emit_round(
        self, proto: RankProtocol, plan: RoundPlan, bytes_primary: int, t0: float, t1: float,
    ) -> _Rounds:
        """Align, collate and queue an ``emit`` round's steps (``t0``-``t1``: the exchange)."""
        c = self.config
        kept = proto.align(plan)
        gathered = None
        second = proto.needs_token_gather(plan)
        t2 = time.perf_counter()
        if second:
            vec = RankProtocol.post_tokens(kept) if kept else [0] * plan.target
            gathered = self._exchange(vec)
            self.second_gathers += 1
        t3 = time.perf_counter()
        steps = proto.steps(plan, kept, gathered)
        bytes_total = bytes_primary + (second_gather_bytes(c.world_size, plan.target) if second else 0)
        own = plan.reports[c.rank].n_groups
        self.metrics.record_round(
            "emit", bytes_total, (t1 - t0) + (t3 - t2), align_s=(t2 - t1) + (time.perf_counter() - t3),
            second_gather=second, splits=max(plan.target - own, 0) if own > 0 else 0,
            recirculated=len(proto.buffer) if own > plan.target else 0,
        )
        self.rounds_log.append(("emit", plan.target, plan.changed, second))
        quota_hit = False
        if not c.join:
            quota = c.quota if c.quota is not None else c.size
            for j, st in enumerate(steps):
                self.emitted += st.info.global_num_samples
                if self.emitted >= quota:  # type: ignore[operator]
                    steps = steps[: j + 1]
                    quota_hit = True
                    break
        feed = self.feed
        self._record(RoundRecord(
            iteration=proto.iteration, round=proto.round_id - 1, steps=[(s.items, s.info) for s in steps],
            overflow=list(proto.buffer),
            position=feed.position if feed is not None else 0,
            source_state=feed.source_state if feed is not None else None,
            emitted_before=self.emitted - sum(s.info.global_num_samples for s in steps) if not c.join else 0,
            round_after=proto.round_id, step_after=proto.step,
            workers=feed.workers_state() if feed is not None else None,
        ))
        for st in steps:
            yield from self._emit_step(st)
        self._last_step = proto.step
        if quota_hit:
            return "quota"
        yield from self._maybe_local_end(proto)
        return None

    def _record(self, rec: RoundRecord) -> None:
        # before the round's steps are queued: a state taken at any of them finds it
        with self.records_lock:
            self.records.append(rec)

    def _maybe_local_end(self, proto: RankProtocol) -> Iterator[Any]:
        """Join mode, ``uneven="stop"``: end the local iteration as soon as this rank has
        nothing left; the aligner keeps serving its peers."""
        c = self.config
        if c.join and c.uneven == "stop" and proto.finished and not self.end_sent:
            self.end_sent = True
            yield END

    def _emit_step(self, st: EmittedStep) -> Iterator[Any]:
        c = self.config
        if not st.items:
            if c.join and c.uneven == "pad":
                yield Filler(replace(st.info, is_padding=True))
            return
        t0 = time.perf_counter()
        samples = [it.sample for it in st.items]
        batch = c.collate_fn(samples) if c.collate_fn is not None else samples
        self.metrics.record_collate(time.perf_counter() - t0)
        for _ in range(len(st.items) - 1):
            yield IDLE
        yield batch, st.info
