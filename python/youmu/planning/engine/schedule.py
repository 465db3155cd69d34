"""Mixing schedules: per-step source weights, and exact per-step sample counts.

A schedule answers two questions for every training step:

* ``weights(step)`` — the target mixture, ``{source: weight}`` (normalised);
* ``counts(step, batch_size)`` — how many of the step's ``batch_size`` samples each
  source provides: integers summing to ``batch_size`` exactly, whose running totals
  track the cumulative targets ``Σ_t batch_size·w(t)`` (a weight of 1e-4 in a batch
  of 512 still gets a sample every ~20 steps, where rounding each step on its own
  would never give it one). A source at weight 0 gets nothing that step, so a
  fraction of a sample it is owed (or overdrawn) when it switches off is handed to
  the active sources in proportion to their weights. Measured worst gap between a
  running total and its target over 20 000 random schedules (1–11 sources, batch
  1–40, 100 steps): 0.98 samples for constant weights, 1.07 for weights that change
  every step, 1.20 with sources switching on and off; the tests assert < 2.

Schedules:

* :class:`MixingSchedule` from a constant ``{name: weight}``, from stages
  ``[(start_step, {name: weight}), ...]`` (warm-up, curricula) or from a function of
  the step (loss-driven mixing reads the trainer's metrics inside the function; it
  must return the same weights for the same step on every rank).
* :class:`MixtureSchedule` from a :class:`~youmu.mixture.MixtureDataset`: the counts
  are the mixture's own exact allocation of the indices ``[step·B, (step+1)·B)``, so a
  plan and the dataset agree sample for sample.

Counts are a pure function of ``(schedule, batch_size, step)``. Computing them walks
the steps in order (the apportionment carries each source's rounding deficit to the
next step); the walk is memoised with checkpoints, so sequential use is O(1) per
step and a jump (resume) costs one pass from the nearest checkpoint; at most 256
checkpoints are kept (further apart as the steps go on), so memory does not grow
with the step.

Example:
    >>> s = MixingSchedule([(0, {"web": 1.0}), (100, {"web": 0.9, "code": 0.1})])
    >>> s.weights(150)
    {'web': 0.9, 'code': 0.1}
    >>> s.counts(0, 32), s.counts(100, 32)
    ({'web': 32, 'code': 0}, {'web': 29, 'code': 3})
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

import numpy as np

from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["MixingSchedule", "MixtureSchedule", "as_schedule", "ScheduleSpec"]

Weights = Mapping[str, float]
ScheduleSpec = Union[  # noqa: UP007 - a runtime alias (3.10 cannot `|` a string forward reference)
    Weights, Sequence[tuple[int, Weights]], Callable[[int], Weights], "MixingSchedule", "MixtureSchedule"
]

# the walk keeps its state every _CHECKPOINT_EVERY steps, and at most _MAX_CHECKPOINTS
# of them: past that, every other one is dropped and the spacing doubles, so memory
# stays bounded however far the steps go (a jump then costs at most one spacing)
_CHECKPOINT_EVERY = 4096
_MAX_CHECKPOINTS = 256


def _check_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise InvalidArgumentError(f"step must be an int >= 0, got {step!r}")
    return int(step)


def _check_batch(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be a positive int, got {batch_size!r}")
    return int(batch_size)


class MixingSchedule:
    """Source weights per step, from constants, stages or a function.

    Args:
        spec: ``{name: weight}``; or stages ``[(start_step, {name: weight}), ...]``
            with the first at step 0 and starts strictly increasing (names missing
            from a stage weigh 0); or ``fn(step) -> {name: weight}``.
        names: every source name, in a fixed order (required with a function unless
            ``fn(0)`` names them all; a function may not name a source outside it).

    Weights are non-negative with a positive sum; they are normalised.

    >>> MixingSchedule(lambda step: {"a": 1.0, "b": step / 10}, names=["a", "b"]).weights(10)
    {'a': 0.5, 'b': 0.5}
    """

    def __init__(self, spec: Weights | Sequence[tuple[int, Weights]] | Callable[[int], Weights],
                 names: Sequence[str] | None = None) -> None:
        self._fn: Callable[[int], Weights] | None = None
        self._stages: list[tuple[int, np.ndarray]] = []
        if isinstance(spec, (str, bytes)) or not (callable(spec) or isinstance(spec, (Mapping, Sequence))):
            raise ArgumentTypeError("schedule must be {name: weight}, stages [(start_step, {name: weight}), ...] or "
                            f"fn(step) -> {{name: weight}}, got {type(spec).__name__}")
        if names is not None and (isinstance(names, (str, bytes)) or not isinstance(names, Sequence)):
            raise ArgumentTypeError(f"names must be a sequence of source names, got {type(names).__name__}")
        if callable(spec) and not isinstance(spec, Mapping):
            self._fn = spec
            if names is None:
                names = list(spec(0))
            self.names = [str(n) for n in names]
        elif isinstance(spec, Mapping):
            self.names = [str(n) for n in (names if names is not None else spec)]
            self._stages = [(0, self._vector(spec, "weights"))]
        else:
            stages = list(spec)
            if not stages:
                raise InvalidArgumentError("stages must not be empty")
            for k, st in enumerate(stages):
                if not (isinstance(st, Sequence) and len(st) == 2 and isinstance(st[1], Mapping)):
                    raise ArgumentTypeError(f"stage {k} must be (start_step, {{name: weight}}), got {st!r}")
            if names is None:
                seen: dict[str, None] = {}
                for _, w in stages:
                    if not isinstance(w, Mapping):
                        raise ArgumentTypeError("each stage is (start_step, {name: weight})")
                    seen.update(dict.fromkeys(str(n) for n in w))
                names = list(seen)
            self.names = [str(n) for n in names]
            starts = [int(s) for s, _ in stages]
            if starts[0] != 0:
                raise InvalidArgumentError(f"the first stage must start at step 0, got {starts[0]}")
            if any(b <= a for a, b in zip(starts, starts[1:])):
                raise InvalidArgumentError(f"stage starts must be strictly increasing, got {starts}")
            self._stages = [(s, self._vector(w, f"stage {k}")) for k, (s, w) in enumerate(stages)]
        if not self.names:
            raise InvalidArgumentError("a schedule needs at least one source")
        if len(set(self.names)) != len(self.names):
            raise InvalidArgumentError(f"source names must be unique, got {self.names}")
        self._memo: dict[int, _Walk] = {}

    # -- weights --------------------------------------------------------------------------
    def _vector(self, w: Weights, what: str) -> np.ndarray:
        if not isinstance(w, Mapping):
            raise ArgumentTypeError(f"{what} must be a mapping {{name: weight}}, got {type(w).__name__}")
        unknown = set(map(str, w)) - set(self.names)
        if unknown:
            raise InvalidArgumentError(f"{what} names unknown sources {sorted(unknown)}; sources are {self.names}")
        v = np.array([float(w.get(n, 0.0)) for n in self.names], dtype=np.float64)
        if not np.isfinite(v).all() or (v < 0).any():
            raise InvalidArgumentError(f"{what}: weights must be finite and >= 0")
        total = v.sum()
        if not total > 0:
            raise InvalidArgumentError(f"{what}: at least one weight must be positive")
        return v / total

    def weight_vector(self, step: int) -> np.ndarray:
        """Normalised weights at ``step`` as an array aligned with :attr:`names`."""
        step = _check_step(step)
        if self._fn is not None:
            return self._vector(self._fn(step), f"weights at step {step}")
        k = 0
        for i, (start, _) in enumerate(self._stages):
            if start <= step:
                k = i
        return self._stages[k][1]

    def weights(self, step: int) -> dict[str, float]:
        """Normalised ``{name: weight}`` at ``step``."""
        return {n: float(w) for n, w in zip(self.names, self.weight_vector(step))}

    # -- counts ---------------------------------------------------------------------------
    def count_vector(self, step: int, batch_size: int) -> np.ndarray:
        """:meth:`counts` as an int64 array aligned with :attr:`names`."""
        step, batch_size = _check_step(step), _check_batch(batch_size)
        walk = self._memo.get(batch_size)
        if walk is None:
            walk = self._memo[batch_size] = _Walk(len(self.names), batch_size)
        return walk.counts(step, self.weight_vector)

    def counts(self, step: int, batch_size: int) -> dict[str, int]:
        """Samples per source at ``step`` (they sum to ``batch_size``)."""
        return {n: int(c) for n, c in zip(self.names, self.count_vector(step, batch_size))}

    def totals(self, step: int, batch_size: int) -> dict[str, int]:
        """Samples per source in steps ``0 .. step - 1`` (what a resumed loader has
        consumed)."""
        step, batch_size = _check_step(step), _check_batch(batch_size)
        if step == 0:
            return {n: 0 for n in self.names}
        self.count_vector(step - 1, batch_size)
        walk = self._memo[batch_size]
        return {n: int(c) for n, c in zip(self.names, walk.realised_before(step, self.weight_vector))}

    def content(self) -> list[Any]:
        """What decides the weights, for fingerprints: ``["fn", fn, names]`` or
        ``["stages", names, [[start, weights], ...]]``.

        >>> MixingSchedule({"a": 1, "b": 3}).content()
        ['stages', ['a', 'b'], [[0, [0.25, 0.75]]]]
        """
        if self._fn is not None:
            return ["fn", self._fn, self.names]
        return ["stages", self.names, [[start, w.tolist()] for start, w in self._stages]]

    def __repr__(self) -> str:
        kind = "function" if self._fn is not None else f"{len(self._stages)} stage(s)"
        return f"MixingSchedule({kind}, sources={self.names})"


class _Walk:
    """Sequential apportionment of ``B`` samples per step with carried deficits.

    State after step ``s``: realised counts ``A`` and cumulative targets ``T``. Step
    ``s`` gives each active source (weight > 0) ``floor(d)`` of its deficit
    ``d = T + B·w − A``, then hands the remaining samples to the largest fractional
    parts (ties: source order). Sources with weight 0 get nothing that step.
    """

    def __init__(self, k: int, batch: int) -> None:
        self.k, self.batch = k, batch
        self.step = 0  # next step to compute
        self.realised = np.zeros(k, dtype=np.int64)
        self.target = np.zeros(k, dtype=np.float64)
        self.last: np.ndarray | None = None
        self.every = _CHECKPOINT_EVERY
        self.checkpoints: dict[int, tuple[np.ndarray, np.ndarray]] = {0: (self.realised.copy(), self.target.copy())}

    def _rewind(self, step: int) -> None:
        base = max(s for s in self.checkpoints if s <= step)
        a, t = self.checkpoints[base]
        self.step, self.realised, self.target, self.last = base, a.copy(), t.copy(), None

    def _advance(self, weight_of: Callable[[int], np.ndarray]) -> np.ndarray:
        w = weight_of(self.step)
        active = w > 0
        # A source at weight 0 gets nothing, so a fractional residual it carries
        # (owed or overdrawn) cannot be settled by it: hand it to the active sources
        # in proportion to their weights. Without this, several switched-off sources'
        # residuals pile onto the active ones and the one-sample bound breaks.
        target = self.target.copy()
        if not active.all():
            carry = float((target - self.realised)[~active].sum())
            target[~active] = self.realised[~active]
            target[active] += carry * w[active] / w[active].sum()
        target += self.batch * w
        deficit = np.where(active, target - self.realised, 0.0)
        n = np.where(active, np.floor(np.maximum(deficit, 0.0)), 0.0).astype(np.int64)
        rem = self.batch - int(n.sum())
        frac = deficit - n
        idx = np.arange(self.k)
        if rem > 0:
            order = np.lexsort((idx, -frac))
            order = order[active[order]]
            # more than one round only when rem exceeds the active sources (cannot
            # happen with Σ deficit = B, kept for safety)
            for r in range(rem):
                n[order[r % order.size]] += 1
        elif rem < 0:
            # Overdrawn sources (negative deficit) made the floors sum past B: take
            # the surplus back one sample at a time, smallest fraction first, so no
            # single source falls a whole extra sample behind while others keep theirs.
            while rem < 0:
                order = np.lexsort((idx, deficit - n))
                order = order[n[order] > 0]
                for i in order[: -rem].tolist():
                    n[i] -= 1
                    rem += 1
        self.realised = self.realised + n
        self.target = target
        self.step += 1
        if self.step % self.every == 0:
            self.checkpoints[self.step] = (self.realised.copy(), self.target.copy())
            if len(self.checkpoints) > _MAX_CHECKPOINTS:
                self.every *= 2
                self.checkpoints = {s: v for s, v in self.checkpoints.items() if s % self.every == 0}
        self.last = n
        return n

    def counts(self, step: int, weight_of: Callable[[int], np.ndarray]) -> np.ndarray:
        if step + 1 == self.step and self.last is not None:
            return self.last.copy()
        if step < self.step:
            self._rewind(step)
        n = np.zeros(self.k, dtype=np.int64)
        while self.step <= step:
            n = self._advance(weight_of)
        return n.copy()

    def realised_before(self, step: int, weight_of: Callable[[int], np.ndarray]) -> np.ndarray:
        self.counts(step - 1, weight_of)
        return self.realised.copy()


class MixtureSchedule:
    """The schedule of a :class:`~youmu.mixture.MixtureDataset` read ``batch_size``
    samples per step: step ``s`` is indices ``[s·B, (s+1)·B)``.

    ``counts`` are the mixture's exact per-child counts in that range (not a
    re-rounding of the weights), so a plan over it selects exactly the samples the
    mixture's index map would produce.

    >>> from youmu.mixture import MixtureDataset
    >>> mix = MixtureDataset({"a": range(100), "b": range(100)}, {"a": 3, "b": 1}, block_size=8)
    >>> MixtureSchedule(mix, batch_size=8).counts(0)
    {'a': 6, 'b': 2}
    """

    def __init__(self, mixture: Any, batch_size: int) -> None:
        for needed in ("names", "counts", "stages"):
            if not hasattr(mixture, needed):
                raise ArgumentTypeError(f"MixtureSchedule needs a youmu MixtureDataset, got {type(mixture).__name__}")
        self.mixture = mixture
        self.batch_size = _check_batch(batch_size)
        self.names = [str(n) for n in mixture.names]

    def _steps(self) -> int | None:
        n = len(self.mixture)
        return math.ceil(n / self.batch_size) if n else 0

    def count_vector(self, step: int, batch_size: int | None = None) -> np.ndarray:
        step = _check_step(step)
        if batch_size is not None and int(batch_size) != self.batch_size:
            raise InvalidArgumentError(
                f"this MixtureSchedule was built for batch_size={self.batch_size}, got {batch_size}"
            )
        lo = step * self.batch_size
        hi = min(lo + self.batch_size, len(self.mixture))
        if lo >= len(self.mixture):
            return np.zeros(len(self.names), dtype=np.int64)
        a, b = self.mixture.counts(lo), self.mixture.counts(hi)
        return np.array([b[n] - a[n] for n in self.names], dtype=np.int64)

    def counts(self, step: int, batch_size: int | None = None) -> dict[str, int]:
        """Samples of each child among the step's indices (the last step may be short)."""
        return {n: int(c) for n, c in zip(self.names, self.count_vector(step, batch_size))}

    def weight_vector(self, step: int) -> np.ndarray:
        """The mixture's stage weights in force at the step's first index."""
        step = _check_step(step)
        i = step * self.batch_size
        st = self.mixture.stages[0]
        for s in self.mixture.stages:
            if s.start <= i:
                st = s
        w = np.zeros(len(self.names))
        w[np.asarray(st.children)] = st.weights
        return w

    def weights(self, step: int) -> dict[str, float]:
        return {n: float(x) for n, x in zip(self.names, self.weight_vector(step))}

    def totals(self, step: int, batch_size: int | None = None) -> dict[str, int]:
        c = self.mixture.counts(min(_check_step(step) * self.batch_size, len(self.mixture)))
        return {n: int(c[n]) for n in self.names}

    def __repr__(self) -> str:
        return f"MixtureSchedule({self.mixture!r}, batch_size={self.batch_size})"


def as_schedule(
    spec: Any, batch_size: int | None = None, names: Sequence[str] | None = None
) -> MixingSchedule | MixtureSchedule:
    """Normalise a schedule argument: a schedule object, a ``MixtureDataset`` (needs
    ``batch_size``), a ``{name: weight}`` mapping, a stage list or a function.

    >>> as_schedule({"web": 3, "code": 1}).counts(0, 8)
    {'web': 6, 'code': 2}
    >>> as_schedule(lambda step: {"web": 1, "code": step}, names=["web", "code"]).weights(3)
    {'web': 0.25, 'code': 0.75}
    """
    if isinstance(spec, (MixingSchedule, MixtureSchedule)):
        return spec
    if hasattr(spec, "stages") and hasattr(spec, "counts") and hasattr(spec, "names"):
        if batch_size is None:
            raise InvalidArgumentError("a MixtureDataset schedule needs the global batch size")
        return MixtureSchedule(spec, batch_size)
    return MixingSchedule(spec, names=names)
