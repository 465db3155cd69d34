"""What youmu's step loaders share between passes: ``close`` with one signature and
the context manager (:class:`ClosingLoader`), and the walk that hands a pass's steps
to the trainer micro-batch by micro-batch while keeping where the trainer is — the
next ``(step, micro-batch)`` to deliver, what ``state_dict()`` describes
(:func:`microbatches`). ``BalancedLoader`` (:mod:`youmu.planning`) and the Ray client
(:mod:`youmu.ray.client`) deliver through it; ``DynamicBatchLoader`` closes through it.

Example:
    >>> from types import SimpleNamespace as Step
    >>> seen = []
    >>> steps = [Step(step=4, items=["c"]), Step(step=5, items=["a", "b"])]   # step 4 resumed at its 2nd
    >>> [(x, at) for x in microbatches(steps, 2, lambda s, at: seen.append(at)) for at in seen[-1:]]
    [('c', (5, 0)), ('a', (5, 1)), ('b', (6, 0))]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["CLOSE_TIMEOUT", "ClosingLoader", "microbatches"]

#: Seconds ``close()`` waits by default for a pass's producer thread to stop.
CLOSE_TIMEOUT = 5.0

_Closing = TypeVar("_Closing", bound="ClosingLoader")


class ClosingLoader:
    """The loader contract's ``close`` and context manager, one signature for every
    loader (:class:`youmu.stateful.Loader`): ``close(timeout=None)`` stops the pass in
    progress, waiting at most ``timeout`` seconds for its thread (``None``: the
    loader's default); ``with loader: ...`` closes it on the way out, however the block
    is left (a ``break``, an exception)."""

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
