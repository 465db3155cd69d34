"""What youmu's loaders share between passes (youmu.state.contract's loader contract), kept
once:

* :class:`PassCursor` — the pass bookkeeping: the epoch of the next pass and of the
  pass in progress, a loaded resume point waiting for the next pass, the one epoch
  rule (``set_epoch(e)`` on the epoch the point was saved in keeps it, another epoch
  clears it) and where the trainer is, the next ``(step, micro-batch)``;
* :class:`PassLoader` — ``epoch``, ``close(timeout=None)`` and the context manager,
  one signature for every loader (``DynamicBatchLoader``, ``BalancedLoader``, the Ray
  client);
* :class:`StepLoader` — a loader whose passes are steps of micro-batches planned
  ahead (``BalancedLoader`` in :mod:`youmu.planning`, ``RayBalancedLoader`` in
  :mod:`youmu.ray.client`): the producer thread (or none, ``prefetch=0``) and the walk
  that hands the steps to the trainer micro-batch by micro-batch (:func:`microbatches`)
  while the cursor keeps where the trainer is.

Example:
    >>> cursor = PassCursor()
    >>> cursor.load("resume here", epoch=2, step=7, microbatch=1)
    >>> cursor.set_epoch(2), cursor.delivered               # the point's epoch: kept
    (False, (7, 1))
    >>> cursor.begin(), cursor.pass_epoch, cursor.begin()   # the next pass takes it
    ('resume here', 2, None)
    >>> from types import SimpleNamespace as Step
    >>> seen = []
    >>> steps = [Step(step=4, items=["c"]), Step(step=5, items=["a", "b"])]   # step 4 resumed at its 2nd
    >>> [(x, at) for x in microbatches(steps, 2, lambda s, at: seen.append(at)) for at in seen[-1:]]
    [('c', (5, 0)), ('a', (5, 1)), ('b', (6, 0))]
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from youmu.distributed.producer import Producer
from youmu.state.contract import check_epoch, keeps_resume_point

__all__ = ["CLOSE_TIMEOUT", "PassCursor", "PassLoader", "StepLoader", "microbatches"]

#: Seconds ``close()`` waits by default for a pass's producer thread to stop.
CLOSE_TIMEOUT = 5.0

_Closing = TypeVar("_Closing", bound="PassLoader")


class PassCursor:
    """One loader's passes and epochs (youmu.state.contract's loader contract).

    ``epoch`` is the epoch of the next pass; ``pass_epoch`` the epoch of the pass in
    progress or the last one (``None``: no pass since construction or the last
    :meth:`load`); ``point`` a loaded resume point that the next pass takes (the
    loader's own object: a state, a planner state, ...; ``None``: the epoch's start);
    ``delivered`` the next ``(step, micro-batch)`` the trainer gets and ``step`` the
    step after the last one it got from (what ``state_dict()`` describes);
    ``passes`` how many passes began."""

    __slots__ = ("epoch", "pass_epoch", "point", "point_epoch", "delivered", "step", "passes")

    def __init__(self) -> None:
        self.epoch = 0
        self.pass_epoch: int | None = None
        self.point: Any = None
        self.point_epoch: int | None = None  # the epoch the point was saved in (None: the state does not say)
        self.delivered: tuple[int, int] = (0, 0)
        self.step = 0
        self.passes = 0

    @property
    def state_epoch(self) -> int:
        """The epoch ``state_dict()`` describes: the pass in progress or the last one;
        before any (since a load), the next."""
        return self.epoch if self.pass_epoch is None else self.pass_epoch

    def set_epoch(self, epoch: Any) -> bool:
        """Use ``epoch`` from the next pass on (checked: :func:`youmu.state.contract.check_epoch`)
        under the one epoch rule; returns whether that cleared a loaded resume point
        (then the trainer is at the epoch's start).

        >>> c = PassCursor(); c.load("p", epoch=1, step=3, microbatch=0)
        >>> c.set_epoch(2), c.point, c.delivered, c.epoch
        (True, None, (0, 0), 2)
        """
        epoch = check_epoch(epoch)
        cleared = self.point is not None and not keeps_resume_point(self.point_epoch, epoch)
        if cleared:
            self.point = self.point_epoch = None
            self.delivered, self.step = (0, 0), 0
        self.epoch = epoch
        return cleared

    def load(self, point: Any, *, epoch: int | None, step: int = 0, microbatch: int = 0) -> None:
        """A loaded state: the next pass resumes at ``point``, the trainer being at
        ``(step, microbatch)`` of ``epoch`` (``None``: the state does not say; the epoch
        stays)."""
        self.point, self.point_epoch = point, epoch
        if epoch is not None:
            self.epoch = epoch
        self.pass_epoch = None
        self.delivered, self.step = (step, microbatch), step

    def begin(self) -> Any:
        """Start a pass at ``epoch``: its resume point (``None``: the epoch's start).
        The pass after it starts at the epoch's start unless a state is loaded
        meanwhile."""
        point, self.point, self.point_epoch = self.point, None, None
        if point is None:
            self.delivered, self.step = (0, 0), 0
        self.passes += 1
        self.pass_epoch = self.epoch
        return point

    def deliver(self, step: int, at: tuple[int, int]) -> None:
        """The trainer got a micro-batch of ``step``; ``at`` is the next it gets."""
        self.step = step + 1
        self.delivered = at


class PassLoader:
    """The loader contract's shared face (:class:`youmu.state.contract.Loader`): ``epoch``,
    the epoch of the next pass (an ``int``, read-only: :meth:`set_epoch` changes it);
    ``close(timeout=None)``, which stops the pass in progress, waiting at most
    ``timeout`` seconds for its thread (``None``: the loader's default); and ``with
    loader: ...``, which closes it on the way out, however the block is left (a
    ``break``, an exception). A subclass keeps a :class:`PassCursor` as ``_pass``."""

    _pass: PassCursor

    @property
    def epoch(self) -> int:
        """The epoch of the next pass (:meth:`set_epoch`, or a loaded state's; 0 until either)."""
        return self._pass.epoch

    def set_epoch(self, epoch: int) -> None:
        raise NotImplementedError

    def close(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def __enter__(self: _Closing) -> _Closing:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Step(Protocol):
    """A step of a pass: its number and the micro-batches of it still to deliver."""

    @property
    def step(self) -> int: ...

    @property
    def items(self) -> Sequence[Any]: ...


_S = TypeVar("_S", bound=_Step)


def microbatches(steps: Iterable[_S], num_microbatches: int,
                 delivered: Callable[[_S, tuple[int, int]], None]) -> Iterator[Any]:
    """The micro-batches of ``steps`` in order. Before each is yielded, ``delivered(step,
    at)`` says where the trainer is once it has it: ``at`` is the next ``(step,
    micro-batch)`` (``(s + 1, 0)`` after a step's last). A resumed step holds only its
    last micro-batches: they are counted from where it was resumed."""
    m = num_microbatches
    for out in steps:
        first = m - len(out.items)  # > 0 in a resumed step
        for j, item in enumerate(out.items, start=first + 1):
            delivered(out, (out.step, j) if j < m else (out.step + 1, 0))
            yield item


class StepLoader(PassLoader, Generic[_S]):
    """A loader whose passes are steps of ``num_microbatches`` micro-batches, each a
    ``(batch, info)`` pair, computed ``prefetch`` steps ahead on a background thread
    (:class:`~youmu.distributed.Producer`; ``prefetch=0``: in the trainer's thread).

    A subclass says how a pass begins (:meth:`_begin_pass`: close the last one, take
    the cursor's resume point, return the generator of the pass's steps) and may
    extend :meth:`_delivered` (what it keeps once the trainer has a micro-batch) and
    :meth:`_stopping` (what the thread does when the trainer leaves before the steps
    ran out)."""

    #: what each pass yields: ``(batch, info)`` pairs (see youmu.state.contract.Loader)
    yields_pairs = True
    #: the producer thread's name, before ``-r<rank>``
    thread_name = "youmu-steps"

    rank: int
    num_microbatches: int
    prefetch: int
    _producer: Producer[_S] | None = None
    _inline: Iterator[_S] | None = None  # prefetch=0: the pass's steps, run in the trainer's thread

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(batch, info)`` from the resume point (a loaded state, or the epoch's
        start), micro-batch by micro-batch."""
        return microbatches(self._steps(), self.num_microbatches, self._delivered)

    def iter_steps(self) -> Iterator[Sequence[Any]]:
        """Whole steps: a list of ``num_microbatches`` ``(batch, info)`` pairs each."""
        for out in self._steps():
            self._delivered(out, (out.step + 1, 0))
            yield out.items

    @property
    def step(self) -> int:
        """The step after the last one the trainer got a micro-batch of (after a load:
        the loaded step)."""
        return self._pass.step

    def _delivered(self, out: _S, at: tuple[int, int]) -> None:
        self._pass.deliver(out.step, at)

    def _begin_pass(self) -> Iterator[_S]:
        raise NotImplementedError

    def _stopping(self, steps: Iterator[_S]) -> Callable[[], None] | None:
        return None

    def _steps(self) -> Iterator[_S]:
        steps = self._begin_pass()
        if self.prefetch == 0:
            self._inline = steps
            yield from steps
            return
        self._producer = Producer(lambda: steps, depth=self.prefetch, name=f"{self.thread_name}-r{self.rank}",
                                  on_stop=self._stopping(steps),
                                  what=f"{type(self).__name__} (rank {self.rank}) computing its steps ahead").start()
        yield from self._producer

    def close(self, timeout: float | None = None) -> None:
        """Stop the pass in progress, if any (its thread, waited for at most ``timeout``
        seconds, default :data:`CLOSE_TIMEOUT`); idempotent. The loader stays usable:
        the next ``iter()`` starts a new pass (youmu.state.contract's loader contract)."""
        if self._producer is not None:
            self._producer.stop(CLOSE_TIMEOUT if timeout is None else timeout)
            self._producer = None
        gen, self._inline = self._inline, None
        if gen is not None and inspect.getgeneratorstate(gen) == inspect.GEN_SUSPENDED:  # type: ignore[arg-type]
            gen.close()  # type: ignore[attr-defined]  # its GeneratorExit runs the pass's own farewell
