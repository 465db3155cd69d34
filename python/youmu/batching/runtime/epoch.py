"""One epoch of a ``DynamicBatchLoader`` as the trainer sees it: the iterator over
``(batch, info)``, and the resume state of where it stands.

The epoch starts an :class:`~youmu.batching.runtime.aligner.Aligner` thread and consumes what
it queues: IDLE slots hand their credits back, batches come with their
:class:`~youmu.batching.algo.step_info.StepInfo`, and every failure, local or remote, is raised
here. The aligner keeps a :class:`~youmu.batching.runtime.aligner.RoundRecord` of each emitting
round until the trainer has moved past it; :meth:`EpochIterator.state_dict` is made
from the record of the round the trainer is in (its undelivered steps are replayed on
resume, its overflow re-buffered, and the source restarts where the round left it).

Example:
    >>> from youmu.batching import DynamicBatchLoader
    >>> loader = DynamicBatchLoader(list(range(1, 9)), token_budget=16, length_fn=lambda s: s,
    ...                             pool_size=4, num_workers=0, shuffle=False)
    >>> it = iter(loader)
    >>> batch, info = next(it)
    >>> it.state_dict()["step"] >= info.step + 1 and len(list(it)) >= 1
    True
"""

from __future__ import annotations

import logging
import os
import queue
import time
from typing import Any

from youmu._internal.forksafe import made_here
from youmu.batching.algo.step_info import IDLE, StepInfo
from youmu.batching.config import LoaderConfig, stateless_message
from youmu.batching.payloads import pack_sample
from youmu.batching.runtime.aligner import Aligner, Filler, RoundRecord
from youmu.batching.runtime.metrics import BatchingMetrics
from youmu.batching.runtime.shutdown import register
from youmu.batching.state import LOADER_STATE, fresh_state
from youmu.distributed.producer import END, Credits, Failure
from youmu.errors import LoaderError, PeerClosedError

__all__ = ["EpochIterator", "EpochHandle"]

log = logging.getLogger("youmu.batching")


class EpochIterator:
    """Iterator over one epoch on this rank (see the module doc).

    Attributes:
        epoch: the epoch iterated.
        metrics: this epoch's :class:`~youmu.batching.runtime.metrics.BatchingMetrics`.
    """

    def __init__(self, config: LoaderConfig, epoch: int, resume: dict[str, Any] | None) -> None:
        self.config = config
        self.epoch = epoch
        self.metrics = BatchingMetrics()
        self._credits = Credits(config.max_outstanding)
        self._start_state = resume if resume is not None else fresh_state(config, epoch)
        # the declared summed fields (counts a merge adds up) the loaded state holds: every
        # state this epoch writes carries them, whatever they count
        self._carried = LOADER_STATE.summed([self._start_state])
        self._aligner = Aligner(config, epoch, self._start_state, resume, credits=self._credits, metrics=self.metrics)
        self._consumed: tuple[int, int, int] | None = None  # (iteration, round, step_in_round)
        self._last_batch: Any = None
        self._have_batch = False
        self._final_state: dict[str, Any] | None = None
        self._pid = os.getpid()

    # -- diagnostics (tests of the uniform-call invariant and of ODB, Lemma 4) -----------------------
    @property
    def collectives(self) -> int:
        """Primary exchanges (rounds) so far."""
        return self._aligner.collectives

    @property
    def second_gathers(self) -> int:
        """Exact-mode second all_gathers so far."""
        return self._aligner.second_gathers

    @property
    def rounds_log(self) -> Any:
        """``(action, target, changed, second gather)`` of the most recent rounds."""
        return self._aligner.rounds_log

    @property
    def undelivered_at_stop(self) -> list[int]:
        """Per non-join logical stop: samples fetched and never delivered (ODB, Lemma 4)."""
        return self._aligner.undelivered_at_stop

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.metrics.start()
        register(self._aligner)
        # fork-safe (Producer.start): a worker forked while the thread holds a lock does not finalise this epoch
        self._aligner.producer.start()

    def _join_limit(self, timeout: float | None) -> float:
        return timeout if timeout is not None else self.config.timeout + 10 * self.config.heartbeat

    def retire(self, timeout: float | None = None) -> None:
        """Before a new iteration: stop this one if unfinished and wait for its thread."""
        a = self._aligner
        if not a.local_end and a.failure is None:
            self.close()
        wait = self._join_limit(timeout)
        a.thread.join(wait)
        if a.thread.is_alive():
            raise LoaderError(
                f"the previous iteration's aligner on rank {self.config.rank} did not finish within {wait:.0f}s "
                "(another rank is still iterating the previous epoch?)"
            )

    def close(self, timeout: float | None = None) -> None:
        """Stop early. Peers learn it at the next round (and raise if they still wanted
        batches this rank never consumed). After this rank's last batch (join mode) the
        aligner keeps serving its peers until they finish, so this does not block."""
        a = self._aligner
        if a.local_end or not a.thread.is_alive():
            return
        a.closing.set()
        a.thread.join(self._join_limit(timeout))

    def abandon(self) -> None:
        """The program dropped the loader (garbage collection): stop, unless this rank's
        data is done and the aligner only serves its peers' last rounds (join mode; the
        exit hook bounds that). Never blocks: a finaliser may run on any thread,
        this epoch's own included, and in a forked child, where the aligner does not
        exist and a lock its thread held at the fork stays held (:mod:`youmu._internal.forksafe`)."""
        if not made_here(self._pid):
            return
        a = self._aligner
        if not a.local_end and not a.end_sent and a.failure is None:
            a.closing.set()

    def wait_finished(self, timeout: float | None = None) -> bool:
        """Block until the aligner has exchanged its last round; returns whether it did."""
        self._aligner.thread.join(timeout)
        return not self._aligner.thread.is_alive()

    # -- the trainer's side ---------------------------------------------------------------------
    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self) -> tuple[Any, StepInfo]:
        a = self._aligner
        t0 = time.perf_counter()
        idle = 0
        while True:
            if a.failure is not None:
                raise a.failure
            if a.local_end:
                raise StopIteration
            try:
                x = a.out.get(timeout=0.2)
            except queue.Empty:
                if a.peer_closed is not None and a.out.empty():
                    self._raise_peer_closed()
                if not a.thread.is_alive() and a.out.empty():
                    if a.failure is not None:
                        raise a.failure from None
                    raise LoaderError("the aligner thread ended without finishing the iteration") from None
                continue
            if x is IDLE:
                self._credits.release(1)
                idle += 1
                continue
            if idle:
                self.metrics.record_idle(idle)
                idle = 0
            if x is END:
                if a.peer_closed is not None and not a.end_sent:  # the end a peer's close made
                    self._raise_peer_closed()
                a.local_end = True
                self._final_state = self._done_state()
                # the end-of-iteration summary (also loader.metrics.summary())
                log.info("rank %d, epoch %d done: %s", self.config.rank, self.epoch, self.metrics.format_summary())
                raise StopIteration
            if isinstance(x, Failure):
                raise x.exc
            if isinstance(x, Filler):
                info = x.info
                if a.peer_closed is not None and info.step >= a.peer_closed[1]:
                    self._raise_peer_closed()
                batch = self._filler_batch()
            else:
                batch, info = x
                self._credits.release(1)
                if a.peer_closed is not None and info.step >= a.peer_closed[1]:
                    self._raise_peer_closed()
                self._last_batch = batch
                self._have_batch = True
            self._consumed = (info.iteration, info.round, info.step_in_round)
            a.steps_consumed = info.step + 1
            self._trim_records()
            now = time.perf_counter()
            self.metrics.record_step(info, now=now, waited=now - t0)
            if self.config.callback is not None:
                self.config.callback(info, self.metrics.snapshot(now))
            return batch, info

    def _filler_batch(self) -> Any:
        if self.config.pad_batch is not None:
            return self.config.pad_batch()
        if not self._have_batch:
            raise LoaderError(
                f"rank {self.config.rank} has no batch to repeat as a filler step (it received no data); "
                "pass pad_batch=... to DynamicBatchLoader"
            )
        return self._last_batch

    def _raise_peer_closed(self) -> None:
        assert self._aligner.peer_closed is not None
        ranks, steps = self._aligner.peer_closed
        raise PeerClosedError(
            f"rank(s) {list(ranks)} stopped iterating after {steps} steps, but rank {self.config.rank} asked for more "
            "(a training loop exited early on some ranks only, or a process exited before its peers finished? "
            "In join mode call loader.wait_finished() before a rank's process exits)",
            ranks,
        )

    # -- state ------------------------------------------------------------------------------------
    def _trim_records(self) -> None:
        a = self._aligner
        with a.records_lock:
            while len(a.records) > 1:
                r0 = a.records[0]
                if self._consumed is not None and (r0.iteration, r0.round) < self._consumed[:2]:
                    a.records.popleft()
                else:
                    break

    def _fresh(self) -> dict[str, Any]:
        """A state of this epoch to fill in; a job resumed on another topology keeps the
        chain of the jobs before it (``resumed``: this rank's order depends on it)."""
        st = fresh_state(self.config, self.epoch, self._carried)
        if self._start_state.get("resumed") is not None:
            st["resumed"] = self._start_state["resumed"]
        return st

    def _done_state(self) -> dict[str, Any]:
        a = self._aligner
        st = self._fresh()
        st.update(done=True, step=a.steps_consumed, emitted=a.emitted)
        c = self.config
        if c.kind == "iterable" and hasattr(c.dataset, "state_dict"):
            # the dataset's end of pass: what a merge of this rank's state needs (unused by a plain resume)
            if c.num_workers == 0:
                st["source_state"] = c.dataset.state_dict()
            elif a.feed is not None:  # the workers' copies' ends, as of the last sample each made
                st["source_state"], st["workers"] = a.feed.source_state, a.feed.workers_state()
            else:  # resumed after its data ended: the ends it saved then
                start = self._start_state
                st["source_state"], st["workers"] = start.get("source_state"), start.get("workers")
        with a.records_lock:
            if a.records:
                rec = a.records[-1]
                st.update(iteration=rec.iteration, round=rec.round_after, step=max(rec.step_after, a.steps_consumed))
        return st

    def state_dict(self) -> dict[str, Any]:
        """Where this epoch stands (see ``DynamicBatchLoader.state_dict``)."""
        if self._final_state is not None:
            return dict(self._final_state)
        if self._consumed is None:
            return dict(self._start_state)
        c = self.config
        if c.kind == "iterable" and not hasattr(c.dataset, "state_dict"):
            raise LoaderError(stateless_message(c.dataset))
        a = self._aligner
        with a.records_lock:
            rec: RoundRecord | None = next(
                (r for r in a.records if (r.iteration, r.round) == self._consumed[:2]), None
            )
        if rec is None:  # pragma: no cover - records are appended before their steps are queued
            raise LoaderError("internal error: no record for the current round")
        j = self._consumed[2]
        done_steps = rec.steps[: j + 1]
        replay = rec.steps[j + 1 :]
        st = self._fresh()
        st.update(
            iteration=rec.iteration,
            round=rec.round_after,
            step=rec.step_after,
            emitted=rec.emitted_before + sum(info.global_num_samples for _, info in done_steps),
            replay=[{"keys": [it.key for it in items], "info": info.as_dict()} for items, info in replay],
            overflow=[it.key for it in rec.overflow],
            position=rec.position,
            source_state=rec.source_state,
            workers=rec.workers,
        )
        if c.kind == "iterable":
            payload_items = [it for items, _ in replay for it in items] + list(rec.overflow)
            for it in payload_items:  # packed once: an overflow sample stays in the pool for rounds
                if it.packed is None:
                    it.packed = pack_sample(it.sample)
            if self.config.encoder_budget is None:
                st["payloads"] = {it.key: (it.packed, it.length, it.tokens) for it in payload_items}
            else:
                st["payloads"] = {it.key: (it.packed, it.length, it.tokens, it.extra) for it in payload_items}
        return st


class EpochHandle:
    """What ``iter(loader)`` returns: the trainer's side of one epoch.

    It keeps the loader alive while it is iterated (``for b, i in DynamicBatchLoader(...)``
    drops the loader itself at once) and forwards everything else to the epoch.
    """

    __slots__ = ("_loader", "_epoch")

    def __init__(self, loader: Any, epoch: EpochIterator) -> None:
        self._loader = loader
        self._epoch = epoch

    def __iter__(self) -> EpochHandle:
        return self

    def __next__(self) -> tuple[Any, StepInfo]:
        return self._epoch.__next__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._epoch, name)
