"""One epoch's iteration of a ``DynamicBatchLoader``: the aligner thread (buffer, Gloo
exchange, alignment, collation, output slots) and the trainer-facing iterator.

The aligner drives a :class:`~youmu.batching.protocol.RankProtocol` with one all_gather
per round on the loader's channel; the trainer's thread consumes the output queue:
IDLE slots hand credits back, batches come with their :class:`StepInfo`. Every
failure, local or remote, reaches the trainer as an exception.

Shutdown. The aligner thread holds a snapshot of the loader's settings, never the
loader itself, so a loader the program dropped mid-epoch is garbage-collected and its
finaliser stops the iteration (peers learn it at the next round). At interpreter
exit, :func:`_drain_at_exit` gives every live iteration a bounded chance to finish
(join mode's tail: this rank's data is done but its peers still exchange), then closes
what is left and parks any thread still waiting on a peer inside a collective (see
:func:`~youmu.dist.abandon_collectives`), so no C++ frame is unwound by
the finalising interpreter ("terminate called without an active exception").
"""

from __future__ import annotations

import atexit
import copy
import logging
import queue
import threading
import time
import weakref
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from torch.utils.data import DataLoader

from youmu.batching.alignment import (
    CLOSED,
    FAILED,
    RankReport,
    decode_report,
    encode_report,
    message_bytes,
    plan_round,
    second_gather_bytes,
)
from youmu.dist.channel import abandon_collectives
from youmu.batching.errors import BatchingError, DataStallError, PeerClosedError, RankFailedError
from youmu.batching.fetch import _END, _Credits, _Failure, _Fetcher, _keep, _measure, _MeasuredIterable, _MeasuredMap
from youmu.batching.info import IDLE, StepInfo
from youmu.batching.metrics import BatchingMetrics
from youmu.batching.protocol import EmittedStep, Item, RankProtocol
from youmu.batching.sampling import rank_indices

if TYPE_CHECKING:  # pragma: no cover
    from youmu.batching.loader import DynamicBatchLoader

__all__: list[str] = []

_MAGIC = 0x594F554D55  # "YOUMU": the first entry of the handshake row
_ROUNDS_LOGGED = 100_000  # rounds_log keeps the most recent ones (heartbeat rounds never stop)

log = logging.getLogger("youmu.batching")


class _PeerClosed:
    """Marks where a peer's early close ends this rank's iteration."""


_PEER_CLOSED = _PeerClosed()


class _Filler:
    """A step on which this rank contributes nothing (``uneven="pad"``)."""

    def __init__(self, info: StepInfo) -> None:
        self.info = info


class _RoundRecord:
    """What a resume needs about one emitting round (kept until the trainer passes it)."""

    __slots__ = ("iteration", "round", "steps", "overflow", "position", "source_state", "emitted_before", "round_after", "step_after")

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


# ----------------------------------------------------------------------------------------
# interpreter exit: let aligners that still serve their peers finish
# ----------------------------------------------------------------------------------------
_LIVE: "weakref.WeakSet[_EpochIterator]" = weakref.WeakSet()


# Poll interval while waiting for threads to park at exit.
_PARK_POLL_S = 0.01
# How long the exit hook waits for abandoned collectives to park (they poll every <= 2 ms).
_PARK_WAIT_S = 2.0


def _close_grace(it: "_EpochIterator") -> float:
    """How long a closing aligner may take at exit: one close round needs every peer's
    aligner to answer, which a live peer does within about a heartbeat; a peer that
    does not answer in this time is not going to help by waiting for the full timeout."""
    return min(it.L.timeout, max(10.0, 20 * it.L.heartbeat))


@atexit.register
def _drain_at_exit() -> None:
    """Shut every live iteration down before the interpreter finalises, in bounded time.

    1. A rank whose own data ended may still owe its peers the last rounds (join mode):
       wait for that, up to the loader's ``timeout`` (``loader.wait_finished()`` waits
       without a bound).
    2. Close whatever still runs (an abandoned loop, a tail that outlived step 1); the
       peers learn it at the next round and raise :class:`PeerClosedError` if they
       wanted more, instead of seeing a connection reset.
    3. Park aligners still blocked on a peer that does not answer, so none returns from
       a collective into the finalising interpreter (a C++ abort).
    """
    try:
        live = [it for it in list(_LIVE) if it._thread.is_alive()]
        if not live:
            return
        t0 = time.monotonic()
        for it in live:
            if it._end_sent and not it._closing.is_set():
                it._thread.join(max(t0 + it.L.timeout - time.monotonic(), 0.0))
        running = [it for it in live if it._thread.is_alive()]
        for it in running:
            it._leave()
        t1 = time.monotonic()
        for it in running:
            it._thread.join(max(t1 + _close_grace(it) - time.monotonic(), 0.0))
        stuck = [it for it in running if it._thread.is_alive()]
        if not stuck:
            return
        abandon_collectives()
        deadline = time.monotonic() + _PARK_WAIT_S
        while time.monotonic() < deadline and any(
            it._thread.is_alive() and not it.L.channel.parked.is_set() for it in stuck
        ):
            time.sleep(_PARK_POLL_S)
        log.warning(
            "youmu.batching: at exit, %d loader iteration(s) still waited for peers and were abandoned",
            len(stuck),
        )
    except Exception:  # noqa: BLE001 - never fail interpreter shutdown
        pass


class _Settings:
    """The loader's settings as one epoch sees them (a snapshot taken by ``iter()``).

    The aligner thread holds this, never the loader, so a loader the program dropped
    without closing can be garbage-collected (its finaliser then closes the epoch).
    Attributes mirror the loader's; a ``callback`` that references the loader keeps it
    alive until the epoch ends.
    """

    def __init__(self, loader: "DynamicBatchLoader") -> None:
        skip = ("_current", "_resume", "metrics")
        self.__dict__.update({k: v for k, v in vars(loader).items() if k not in skip})
        self.kind: str = loader.kind
        self._fingerprint = loader.config_fingerprint()
        self._fresh = loader._fresh_state(0)

    def config_fingerprint(self) -> int:
        return self._fingerprint

    def _fresh_state(self, epoch: int) -> dict[str, Any]:
        st = copy.deepcopy(self._fresh)
        st["epoch"] = epoch
        return st


class _EpochHandle:
    """What ``iter(loader)`` returns: the trainer's side of one epoch.

    It keeps the loader alive while it is iterated (``for b, i in DynamicBatchLoader(...)``
    drops the loader itself at once) and forwards everything else to the epoch.
    """

    __slots__ = ("_loader", "_epoch")

    def __init__(self, loader: "DynamicBatchLoader", epoch: "_EpochIterator") -> None:
        self._loader = loader
        self._epoch = epoch

    def __iter__(self) -> "_EpochHandle":
        return self

    def __next__(self) -> tuple[Any, StepInfo]:
        return self._epoch.__next__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._epoch, name)


# ----------------------------------------------------------------------------------------
# one epoch's iteration: aligner thread + consumer side
# ----------------------------------------------------------------------------------------
class _EpochIterator:
    """Iterator over one epoch; owns the fetcher and aligner threads."""

    def __init__(self, loader: DynamicBatchLoader, epoch: int, resume: dict[str, Any] | None) -> None:
        self.L = _Settings(loader)
        loader = self.L  # the rest of set-up reads the snapshot too
        self.epoch = epoch
        self._resume = resume
        self.metrics = BatchingMetrics()
        self._credits = _Credits(loader.max_outstanding)
        self._out: "queue.Queue[Any]" = queue.Queue()
        self._fetchq: "queue.Queue[Any]" = queue.Queue()
        self._fetcher: _Fetcher | None = None
        self._preloaded: deque[Item] = deque()
        self._failure: BaseException | None = None
        self._peer_closed: tuple[tuple[int, ...], int] | None = None
        self._closing = threading.Event()
        self._leaving = False  # interpreter exit: report CLOSED even in the join tail
        self._local_end = False  # the consumer received END
        self._end_sent = False
        self._records: deque[_RoundRecord] = deque()
        self._records_lock = threading.Lock()
        self._consumed: tuple[int, int, int] | None = None  # (iteration, round, step_in_round)
        self._steps_consumed = 0  # global step index + 1 of the last delivered step
        self._last_batch: Any = None
        self._have_batch = False
        self._start_state = resume if resume is not None else loader._fresh_state(epoch)
        self._final_state: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name=f"youmu-aligner-r{loader.rank}", daemon=True)
        # aligner-side bookkeeping
        self._drained = 0  # items taken by the aligner in the current logical iteration
        self._n_pre = 0  # of which replay/overflow items (resume)
        self._position_base = 0
        self._source_state: Any = None
        self._emitted = 0  # global samples emitted (non-join quota)
        self.collectives = 0  # primary exchanges (for tests of the uniform-call invariant)
        self.second_gathers = 0
        # (action, target, changed, second gather) of the most recent rounds
        self.rounds_log: deque[tuple[str, int, bool, bool]] = deque(maxlen=_ROUNDS_LOGGED)
        self.undelivered_at_stop: list[int] = []

    # -- thread lifecycle -----------------------------------------------------------------
    def _start(self) -> None:
        self.metrics.start()
        _LIVE.add(self)
        self._thread.start()

    def _retire(self, timeout: float | None = None) -> None:
        """Before a new iteration: stop this one if unfinished and wait for its thread."""
        if not self._local_end and self._failure is None:
            self.close()
        wait = timeout if timeout is not None else self.L.timeout + 10 * self.L.heartbeat
        self._thread.join(wait)
        if self._thread.is_alive():
            raise BatchingError(
                f"the previous iteration's aligner on rank {self.L.rank} did not finish within {wait:.0f}s "
                "(another rank is still iterating the previous epoch?)"
            )

    def close(self, timeout: float | None = None) -> None:
        """Stop early. Peers learn it at the next round (and raise if they still wanted
        batches this rank never consumed). After this rank's last batch (join mode) the
        aligner keeps serving its peers until they finish, so this does not block."""
        if self._local_end or not self._thread.is_alive():
            return
        self._closing.set()
        wait = timeout if timeout is not None else self.L.timeout + 10 * self.L.heartbeat
        self._thread.join(wait)

    def _abandon(self) -> None:
        """The program dropped the loader (garbage collection): stop, unless this rank's
        data is done and the aligner only serves its peers' last rounds (join mode; the
        exit hook bounds that). Never blocks: a finaliser may run on any thread,
        this epoch's own included."""
        if not self._local_end and not self._end_sent and self._failure is None:
            self._closing.set()

    def _leave(self) -> None:
        """Interpreter exit: close at the next round even if only peers still need us."""
        self._leaving = True
        self._closing.set()

    def wait_finished(self, timeout: float | None = None) -> bool:
        """Block until the aligner has exchanged its last round; returns whether it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- consumer side --------------------------------------------------------------------
    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> tuple[Any, StepInfo]:
        t0 = time.perf_counter()
        idle = 0
        while True:
            if self._failure is not None:
                raise self._failure
            if self._local_end:
                raise StopIteration
            try:
                x = self._out.get(timeout=0.2)
            except queue.Empty:
                if self._peer_closed is not None and self._out.empty():
                    self._raise_peer_closed()
                if not self._thread.is_alive() and self._out.empty():
                    if self._failure is not None:
                        raise self._failure
                    raise BatchingError("the aligner thread ended without finishing the iteration")
                continue
            if x is IDLE:
                self._credits.release(1)
                idle += 1
                continue
            if idle:
                self.metrics.record_idle(idle)
                idle = 0
            if x is _END:
                self._local_end = True
                self._final_state = self._done_state()
                # the end-of-iteration summary (also loader.metrics.summary())
                log.info("rank %d, epoch %d done: %s", self.L.rank, self.epoch, self.metrics.format_summary())
                raise StopIteration
            if isinstance(x, _Failure):
                raise x.exc
            if x is _PEER_CLOSED:
                self._raise_peer_closed()
            if isinstance(x, _Filler):
                info = x.info
                if self._peer_closed is not None and info.step >= self._peer_closed[1]:
                    self._raise_peer_closed()
                batch = self._filler_batch()
            else:
                batch, info = x
                self._credits.release(1)
                if self._peer_closed is not None and info.step >= self._peer_closed[1]:
                    self._raise_peer_closed()
                self._last_batch = batch
                self._have_batch = True
            self._consumed = (info.iteration, info.round, info.step_in_round)
            self._steps_consumed = info.step + 1
            self._trim_records()
            now = time.perf_counter()
            self.metrics.record_step(info, now=now, waited=now - t0)
            if self.L.callback is not None:
                self.L.callback(info, self.metrics.snapshot(now))
            return batch, info

    def _filler_batch(self) -> Any:
        if self.L.pad_batch is not None:
            return self.L.pad_batch()
        if not self._have_batch:
            raise BatchingError(
                f"rank {self.L.rank} has no batch to repeat as a filler step (it received no data); "
                "pass pad_batch=... to DynamicBatchLoader"
            )
        return self._last_batch

    def _raise_peer_closed(self) -> None:
        assert self._peer_closed is not None
        ranks, steps = self._peer_closed
        raise PeerClosedError(
            f"rank(s) {list(ranks)} stopped iterating after {steps} steps, but rank {self.L.rank} asked for more "
            "(a training loop exited early on some ranks only, or a process exited before its peers finished? "
            "In join mode call loader.wait_finished() before a rank's process exits)",
            ranks,
        )

    # -- state ----------------------------------------------------------------------------
    def _trim_records(self) -> None:
        with self._records_lock:
            while len(self._records) > 1:
                r0 = self._records[0]
                if self._consumed is not None and (r0.iteration, r0.round) < self._consumed[:2]:
                    self._records.popleft()
                else:
                    break

    def _done_state(self) -> dict[str, Any]:
        st = self.L._fresh_state(self.epoch)
        st.update(done=True, step=self._steps_consumed, emitted=self._emitted)
        with self._records_lock:
            if self._records:
                rec = self._records[-1]
                st.update(iteration=rec.iteration, round=rec.round_after, step=max(rec.step_after, self._steps_consumed))
        return st

    def state_dict(self) -> dict[str, Any]:
        if self._final_state is not None:
            return dict(self._final_state)
        if self._consumed is None:
            return dict(self._start_state)
        if self.L.kind == "iterable" and (self.L.num_workers > 0 or not hasattr(self.L.dataset, "state_dict")):
            raise BatchingError(
                "a mid-epoch state of an iterable dataset needs num_workers=0 and a dataset with "
                "state_dict()/load_state_dict() (e.g. YoumuDataset); map-style datasets resume with any num_workers"
            )
        with self._records_lock:
            rec = next((r for r in self._records if (r.iteration, r.round) == self._consumed[:2]), None)
        if rec is None:  # pragma: no cover - records are appended before their steps are queued
            raise BatchingError("internal error: no record for the current round")
        j = self._consumed[2]
        done_steps = rec.steps[: j + 1]
        replay = rec.steps[j + 1 :]
        st = self.L._fresh_state(self.epoch)
        st.update(
            iteration=rec.iteration,
            round=rec.round_after,
            step=rec.step_after,
            emitted=rec.emitted_before + sum(info.global_num_samples for _, info in done_steps),
            replay=[{"keys": [it.key for it in items], "info": info.as_dict()} for items, info in replay],
            overflow=[it.key for it in rec.overflow],
            position=rec.position,
            source_state=rec.source_state,
        )
        if self.L.kind == "iterable":
            payload_items = [it for items, _ in replay for it in items] + list(rec.overflow)
            st["payloads"] = {it.key: (it.sample, it.length, it.tokens) for it in payload_items}
        return st

    # -- aligner thread -------------------------------------------------------------------
    def _run(self) -> None:
        channel = self.L.channel
        wait = self.L.timeout
        if not channel.lease(wait):
            self._fail(BatchingError(f"the loader's channel stayed busy for {wait:.0f}s (another iteration on it?)"))
            return
        try:
            self._run_leased()
        finally:
            channel.release_lease()

    def _run_leased(self) -> None:
        try:
            start = self._handshake()
            iteration = start["iteration"]
            resume = self._resume if not start["done"] else None
            if start["done"]:
                self._run_done(start)
            else:
                while True:
                    first_step = int(start["step"])
                    outcome = self._run_iteration(iteration, start, resume)
                    resume = None
                    if outcome != "stop":
                        break
                    if self._last_step == first_step:
                        # the same on every rank: chaining again could never reach the quota
                        raise BatchingError(
                            "non-join mode: a logical iteration ended before any step (a rank has no data?); "
                            "use join=True when ranks may hold no samples"
                        )
                    iteration += 1
                    start = dict(start, round=0, step=self._last_step, emitted=self._emitted)
            if self._peer_closed is not None:
                self._out.put(_PEER_CLOSED)
            elif self._failure is None and not self._end_sent:
                self._end_sent = True
                self._out.put(_END)
        except BaseException as e:  # noqa: BLE001 - every failure reaches the trainer
            self._fail(e)
        finally:
            self._stop_fetcher(release=True)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._out.put(_Failure(exc))

    def _exchange(self, row: list[int]) -> list[list[int]]:
        rows = self.L.channel.all_gather_rows(row)
        return rows

    def _handshake(self) -> dict[str, Any]:
        """Check that every rank runs the same settings and epoch; agree on counters."""
        s = self._start_state
        row = [
            _MAGIC,
            self.L.config_fingerprint(),
            self.epoch,
            int(s["iteration"]),
            int(s["round"]),
            int(s["step"]),
            int(s["emitted"]),
            int(bool(s["done"])),
        ]
        rows = self._exchange(row)
        if any(r[0] != _MAGIC for r in rows):
            raise BatchingError("a peer is not a youmu DynamicBatchLoader of this version (handshake mismatch)")
        if len({r[1] for r in rows}) != 1:
            raise BatchingError(
                "ranks use different DynamicBatchLoader settings (token_budget, buffer_size, join, loss_scaling, "
                "seed, dataset size, ...); they must match on every rank"
            )
        if len({r[2] for r in rows}) != 1:
            raise BatchingError(f"ranks iterate different epochs: {[r[2] for r in rows]} (call set_epoch on every rank)")
        live = [r for r in rows if not r[7]] or rows
        if len({r[3] for r in live}) != 1:
            raise BatchingError("ranks resumed from different logical iterations (states from different steps?)")
        return {
            "iteration": live[0][3],
            "round": max(r[4] for r in rows),
            "step": max(r[5] for r in rows),
            "emitted": max(r[6] for r in rows),
            "done": bool(s["done"]),
        }

    # -- sources --------------------------------------------------------------------------
    def _map_pairs(self, iteration: int, resume: dict[str, Any] | None) -> tuple[list[tuple[int, int]], int]:
        L = self.L
        indices = rank_indices(
            len(L.dataset), L.world_size, L.rank, seed=L.seed, epoch=self.epoch, iteration=iteration, shuffle=L.shuffle,
            pad=L.pad_sampler,
        )
        if resume is None:
            return list(enumerate(indices)), 0
        pre = [k for step in resume["replay"] for k in step["keys"]] + list(resume["overflow"])
        start = int(resume["position"])
        if any(not 0 <= k < len(indices) for k in pre) or not 0 <= start <= len(indices):
            raise ValueError("the resume state does not fit this dataset (positions out of range)")
        return [(k, indices[k]) for k in pre] + [(k, indices[k]) for k in range(start, len(indices))], len(pre)

    def _make_source(self, iteration: int, resume: dict[str, Any] | None) -> Callable[[], Iterator[Item]]:
        L = self.L
        measured_kw = dict(length_fn=L.length_fn, token_fn=L.token_count_fn)
        if L.kind == "map":
            pairs, n_pre = self._map_pairs(iteration, resume)
            self._n_pre = n_pre
            self._position_base = int(resume["position"]) if resume is not None else 0
            measured = _MeasuredMap(L.dataset, **measured_kw)

            def make_map() -> Iterator[Item]:
                if L.num_workers == 0:
                    rows: Iterator[Any] = (measured[p] for p in pairs)
                else:
                    rows = iter(self._dataloader(measured, sampler=pairs))
                return (Item(pos, idx, sample, length, tokens) for pos, idx, sample, length, tokens in rows)

            return make_map

        # iterable
        self._n_pre = 0
        start_count = 0
        if resume is not None:
            payloads = resume.get("payloads") or {}
            keys = [k for step in resume["replay"] for k in step["keys"]] + list(resume["overflow"])
            for k in keys:
                sample, length, tokens = payloads[k]
                self._preloaded.append(Item(k, None, sample, length, tokens))
            self._n_pre = len(keys)
            start_count = int(resume["position"])
            if resume.get("source_state") is not None:
                L.dataset.load_state_dict(resume["source_state"])
        self._position_base = start_count
        self._source_state = resume.get("source_state") if resume is not None else None
        stateful = L.num_workers == 0 and hasattr(L.dataset, "state_dict")
        ds = L.dataset

        def make_iterable() -> Iterator[Item]:
            if L.num_workers == 0:

                def gen() -> Iterator[Item]:
                    k = start_count
                    for sample in ds:
                        state = ds.state_dict() if stateful else None
                        yield Item(
                            k, None, sample,
                            _measure(L.length_fn, sample, "length_fn"),
                            _measure(L.token_count_fn, sample, "token_count_fn"),
                            state,
                        )
                        k += 1

                return gen()
            rows = iter(self._dataloader(_MeasuredIterable(ds, **measured_kw)))
            return (Item(k, None, s, n, t) for k, (s, n, t) in enumerate(rows, start=start_count))

        return make_iterable

    def _dataloader(self, dataset: Any, sampler: Sequence[Any] | None = None) -> DataLoader:
        L = self.L
        kw: dict[str, Any] = dict(
            batch_size=None,
            collate_fn=_keep,
            num_workers=L.num_workers,
            worker_init_fn=L.worker_init_fn,
            multiprocessing_context=L.multiprocessing_context,
        )
        if L.prefetch_factor is not None:
            kw["prefetch_factor"] = L.prefetch_factor
        if sampler is not None:
            kw["sampler"] = sampler
        return DataLoader(dataset, **kw)

    def _start_fetcher(self, make_iter: Callable[[], Iterator[Item]]) -> None:
        self._fetchq = queue.Queue()
        self._fetcher = _Fetcher(make_iter, self._credits, self._fetchq, name=f"youmu-fetcher-r{self.L.rank}")
        self._fetcher.start()

    def _stop_fetcher(self, release: bool) -> None:
        """Stop the fetcher; with ``release``, hand back the credits of what it fetched."""
        f = self._fetcher
        if f is None:
            return
        f.stop_event.set()
        f.join(timeout=5.0)
        if release:
            n = 0
            while True:
                try:
                    x = self._fetchq.get_nowait()
                except queue.Empty:
                    break
                if isinstance(x, Item):
                    n += 1
            self._credits.release(n)
        self._fetcher = None

    def _take(self, timeout: float) -> Any:
        """Next fetched item (replay/overflow of a resume first), or None on timeout."""
        if self._preloaded:
            return self._preloaded.popleft()
        try:
            return self._fetchq.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None

    def _note_drained(self, item: Item) -> None:
        """Track where a resume would restart the source (only items past the
        replay/overflow of a previous resume advance it)."""
        self._drained += 1
        if self._drained > self._n_pre:
            self._position_base = item.key + 1
            if item.state is not None:
                self._source_state = item.state

    # -- one logical iteration ------------------------------------------------------------
    def _run_done(self, start: dict[str, Any]) -> None:
        """A rank resumed after its data ran out (join mode): serve peers until all finish."""
        self._end_sent = True
        self._out.put(_END)
        proto = self._protocol(start["iteration"], start)
        proto.exhausted = True
        while self._round(proto) is None:
            pass

    def _protocol(self, iteration: int, start: dict[str, Any]) -> RankProtocol:
        L = self.L
        return RankProtocol(
            rank=L.rank, world_size=L.world_size, token_budget=L.token_budget, buffer_size=L.buffer_size,
            join=L.join, loss_scaling=L.loss_scaling, seed=L.seed, epoch=self.epoch, iteration=iteration,
            shuffle_steps=L.shuffle_steps, round_id=int(start["round"]), step=int(start["step"]),
        )

    def _run_iteration(self, iteration: int, start: dict[str, Any], resume: dict[str, Any] | None) -> str:
        proto = self._protocol(iteration, start)
        self._emitted = int(start["emitted"])
        self._last_step = proto.step
        self._drained = 0
        self._preloaded.clear()
        self._start_fetcher(self._make_source(iteration, resume))
        if resume is not None:
            self._replay(proto, resume, iteration)
        while True:
            outcome = self._round(proto)
            if outcome is not None:
                return outcome

    def _replay(self, proto: RankProtocol, resume: dict[str, Any], iteration: int) -> None:
        """Emit the rest of the round a checkpoint interrupted, exactly as planned."""
        replay = resume["replay"]
        steps: list[EmittedStep] = []
        for entry in replay:
            items = tuple(self._take_item() for _ in entry["keys"])
            info = StepInfo(**{**entry["info"], "sample_indices": tuple(entry["info"]["sample_indices"])})
            steps.append(EmittedStep(items, info))
        for _ in resume["overflow"]:
            proto.add(self._take_item())
        if steps:
            rec = _RoundRecord(
                iteration=iteration, round=steps[0].info.round, steps=[(s.items, s.info) for s in steps],
                overflow=list(proto.buffer), position=self._position_base, source_state=self._source_state,
                emitted_before=self._emitted, round_after=proto.round_id, step_after=proto.step,
            )
            with self._records_lock:
                self._records.append(rec)
            for st in steps:
                self._emit_step(st)
                if not self.L.join:
                    self._emitted += st.info.global_num_samples

    def _take_item(self) -> Item:
        deadline = time.monotonic() + self.L.data_timeout
        while True:
            x = self._take(min(self.L.heartbeat, max(deadline - time.monotonic(), 0.0)))
            if isinstance(x, Item):
                self._note_drained(x)
                return x
            if isinstance(x, _Failure):
                raise x.exc
            if x is _END:
                raise BatchingError("the data source ended while restoring a checkpoint (dataset changed?)")
            if time.monotonic() > deadline:
                raise DataStallError(f"no sample within {self.L.data_timeout:.0f}s while restoring a checkpoint")

    def _fill(self, proto: RankProtocol) -> BaseException | None:
        """Drain fetched items into the buffer until ready or the heartbeat expires."""
        deadline = time.monotonic() + self.L.heartbeat
        while not proto.ready and not self._closing.is_set():
            x = self._take(deadline - time.monotonic())
            if x is None:
                f = self._fetcher
                if f is not None and f.stalled_for() > self.L.data_timeout:
                    return DataStallError(
                        f"rank {self.L.rank}: the data source produced nothing for {f.stalled_for():.0f}s "
                        f"(data_timeout {self.L.data_timeout:.0f}s)"
                    )
                if time.monotonic() >= deadline:
                    break
                continue
            if x is _END:
                proto.exhausted = True
            elif isinstance(x, _Failure):
                return x.exc
            else:
                self._note_drained(x)
                proto.add(x)
        self.metrics.record_outstanding(self._credits.held)
        return None

    def _round(self, proto: RankProtocol) -> str | None:
        """One exchange. Returns an outcome when the logical iteration ends, else None."""
        L = self.L
        local_error: BaseException | None = None
        if not proto.finished:
            local_error = self._fill(proto)
        self._maybe_local_end(proto)
        if local_error is not None:
            report = RankReport(0, FAILED)
        elif self._leaving or (self._closing.is_set() and not self._local_end and not self._end_sent):
            report = RankReport(self._steps_consumed, CLOSED)
        else:
            tg = time.perf_counter()
            report = proto.report()
            self.metrics.record_grouping(time.perf_counter() - tg)
        row = encode_report(report, L.buffer_size)
        t0 = time.perf_counter()
        rows = self._exchange(row)
        t1 = time.perf_counter()
        self.collectives += 1
        plan = plan_round([decode_report(r, L.buffer_size) for r in rows], join=L.join)
        bytes_primary = message_bytes(L.world_size, L.buffer_size)

        if plan.action == "fail":
            self.metrics.record_round("fail", bytes_primary, t1 - t0)
            self.rounds_log.append(("fail", 0, False, False))
            log.error("rank %d: round failed on rank(s) %s", L.rank, list(plan.ranks))
            if local_error is not None:
                raise local_error
            raise RankFailedError(f"rank(s) {list(plan.ranks)} failed (their own error is raised there)", plan.ranks)
        if plan.action == "close":
            self.metrics.record_round("close", bytes_primary, t1 - t0)
            self.rounds_log.append(("close", 0, False, False))
            if L.rank not in plan.ranks:
                steps = max(plan.reports[r].capacity for r in plan.ranks)
                self._peer_closed = (plan.ranks, steps)
                log.warning("rank %d: rank(s) %s closed the loader after %d steps", L.rank, list(plan.ranks), steps)
            self._closing.set()
            return "close"
        if plan.action == "finish":
            self.metrics.record_round("finish", bytes_primary, t1 - t0)
            self.rounds_log.append(("finish", 0, False, False))
            return "finish"
        if plan.action == "stop":
            self.metrics.record_round("stop", bytes_primary, t1 - t0)
            self.rounds_log.append(("stop", 0, False, False))
            # Lemma 4: fetched but not delivered in this logical iteration (buffer + fetch queue)
            self.undelivered_at_stop.append(len(proto.buffer) + self._fetchq.qsize() + len(self._preloaded))
            self._credits.release(len(proto.buffer) + len(self._preloaded))
            proto.buffer = []
            self._preloaded.clear()
            self._stop_fetcher(release=True)
            self._last_step = proto.step
            return "stop"
        if plan.action == "skip":
            self.metrics.record_round("skip", bytes_primary, t1 - t0)
            self.rounds_log.append(("skip", 0, False, False))
            return None

        # emit
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
        bytes_total = bytes_primary + (second_gather_bytes(L.world_size, plan.target) if second else 0)
        own = plan.reports[L.rank].n_groups
        self.metrics.record_round(
            "emit", bytes_total, (t1 - t0) + (t3 - t2), align_s=(t2 - t1) + (time.perf_counter() - t3),
            second_gather=second, splits=max(plan.target - own, 0) if own > 0 else 0,
            recirculated=len(proto.buffer) if own > plan.target else 0,
        )
        self.rounds_log.append(("emit", plan.target, plan.changed, second))
        quota_hit = False
        if not L.join:
            quota = L.quota if L.quota is not None else len(L.dataset)
            for j, st in enumerate(steps):
                self._emitted += st.info.global_num_samples
                if self._emitted >= quota:
                    steps = steps[: j + 1]
                    quota_hit = True
                    break
        rec = _RoundRecord(
            iteration=proto.iteration, round=proto.round_id - 1, steps=[(s.items, s.info) for s in steps],
            overflow=list(proto.buffer), position=self._position_base, source_state=self._source_state,
            emitted_before=self._emitted - sum(s.info.global_num_samples for s in steps) if not L.join else 0,
            round_after=proto.round_id, step_after=proto.step,
        )
        with self._records_lock:
            self._records.append(rec)
        for st in steps:
            self._emit_step(st)
        self._last_step = proto.step
        if quota_hit:
            return "quota"
        self._maybe_local_end(proto)
        return None

    def _maybe_local_end(self, proto: RankProtocol) -> None:
        """Join mode, ``uneven="stop"``: end the local iteration as soon as this rank has
        nothing left; the aligner keeps serving its peers."""
        if self.L.join and self.L.uneven == "stop" and proto.finished and not self._end_sent:
            self._end_sent = True
            self._out.put(_END)

    def _emit_step(self, st: EmittedStep) -> None:
        L = self.L
        if not st.items:
            if L.join and L.uneven == "pad":
                self._out.put(_Filler(replace(st.info, is_padding=True)))
            return
        t0 = time.perf_counter()
        samples = [it.sample for it in st.items]
        batch = L.collate_fn(samples) if L.collate_fn is not None else samples
        self.metrics.record_collate(time.perf_counter() - t0)
        for _ in range(len(st.items) - 1):
            self._out.put(IDLE)
        self._out.put((batch, st.info))

