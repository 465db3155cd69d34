"""``MixtureDataset``: weighted, block-deterministic mixing with an exact allocation.

Every positive weight is sampled at its exact long-run rate, however small; weight
stages (curricula) switch at exact indices; finite children restart in a fresh order
per pass or stop the mixture. The index math is ``youmu._core.MixtureMap``.

Allocation (details in ``rust/order/mixture/``): the samples of a stage are dealt to the
children by a binary tree whose nodes split their samples with mechanical sequences
``floor((k·p + φ) / 2^64)`` — exact integer arithmetic, so every block holds exactly
``block_size`` samples, every child's count is monotone, and a child's count in any
window of whole blocks is within :meth:`MixtureDataset.window_bounds` of ``blocks ·
block_size · weight`` (below 1 for two children, about 1–2.5 for many; below 1 for
all children at once is impossible in general with exact block sizes). No weight is
rounded to zero: a 1e-6 child with ``block_size=64`` appears once per ~10^6 samples,
on schedule, where Levanter's ``int(weight · block_size)`` never samples it. Inside a
block the slots are in a keyed random order.

Example:
    >>> mix = MixtureDataset({"web": list(range(1000)), "rest": list(range(310))},
    ...                      weights={"web": 0.9, "rest": 0.1}, block_size=64, length=6400)
    >>> mix.counts(6400), mix.block_counts(0)
    ({'web': 5760, 'rest': 640}, {'web': 58, 'rest': 6})
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from youmu._core import MixtureMap
from youmu._internal.args import choice_arg, int_arg, int_array, opt_int_arg, seed_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError, PageOutOfRangeError
from youmu.mixture.children import MAX_INDEX, MapMixture, child_length, mixture_children, rows_per_page

__all__ = ["MixtureDataset", "Stage", "POLICIES", "Weights"]

#: What a ``MixtureDataset`` does when a child runs out (see its ``policy``).
POLICIES = ("restart", "stop")

#: ``{name: weight}``, or a curriculum: a list of ``(start_index, {name: weight})``.
Weights = Union[Mapping[str, float], Sequence[tuple[int, Mapping[str, float]]]]  # noqa: UP007 - a runtime alias on 3.10


@dataclass(frozen=True)
class Stage:
    """One weight stage: indices ``[start, end)`` (``end=None``: open-ended)."""

    start: int
    end: int | None
    children: np.ndarray  # child numbers with a positive weight
    weights: np.ndarray  # their normalised weights, aligned with `children`

    def as_dict(self, names: Sequence[str]) -> dict[str, float]:
        return {names[int(c)]: float(w) for c, w in zip(self.children, self.weights)}


class MixtureDataset(MapMixture):
    """Weighted, block-deterministic mixture with an exact allocation.

    Args:
        children: ``{name: dataset}`` (``len`` + indexing; a ``youmu.PageIndex`` or a
            path is read as a ``youmu.RowDataset``). Mixtures nest both ways.
        weights: ``{name: weight}`` (any non-negative scale; missing names get 0), or a
            curriculum: a list of ``(start_index, {name: weight})``, the first starting
            at 0 and starts strictly increasing. The mix changes exactly at each start.
        seed: key of every order (block slots, allocation phases, child passes).
        block_size: samples per block; every block holds exactly this many (the last
            block of a stage holds what is left of the stage).
        policy: when a child runs out: ``"restart"`` (a fresh keyed order of the child
            for every pass) or ``"stop"`` (the mixture ends where the allocation first
            asks a child for more than it has; every draw before that point is made,
            so the exhausted child is used exactly once, and later stages are dropped).
        length: number of indices (default: the sum of the children's lengths under
            ``"restart"``, the exhaustion point under ``"stop"``). The map does not
            depend on it: a longer mixture starts with the shorter one.
        child_chunk: order of each pass over a child. 1: uniform over the child. ``R
            > 1``: chunk-local — runs of ``R`` consecutive items in a keyed order, the
            items of a run shuffled among themselves — so consecutive draws of a child
            read neighbouring rows (the same Parquet pages; pair it with
            ``RowDataset(cache_pages=...)``) instead of one page per row. ``"auto"``
            (default): the typical rows per page for youmu Parquet children
            (``RowDataset``), 1 for any other child. An int applies to every child; a
            ``{name: R}`` mapping sets some (others 1). The allocation is the same.

    ``locate(i)`` → ``(child_name, child_index)`` is a pure function of ``i``;
    :meth:`passes` and :meth:`locate_passes` tell which pass over a child an index
    belongs to (for logging epochs of small sources).

    Example:
        >>> mix = MixtureDataset({"web": list(range(1000)), "math": list(range(10))},
        ...                      weights=[(0, {"web": 1.0}), (640, {"web": 0.99, "math": 0.01})],
        ...                      block_size=64, length=64_640)
        >>> mix.locate(639)[0], mix.counts(640)
        ('web', {'web': 640, 'math': 0})
        >>> mix.counts(64_640)["math"]           # 1% of the 64,000 indices of stage 1
        640
        >>> mix.passes(64_640)["math"]           # its 10 items were seen in 64 passes
        64
    """

    def __init__(
        self,
        children: Mapping[str, Any],
        weights: Weights,
        seed: int = 0,
        block_size: int = 2048,
        policy: str = "restart",
        length: int | None = None,
        child_chunk: int | Mapping[str, int] | str = "auto",
    ) -> None:
        self.children = mixture_children(children, "MixtureDataset")
        self.names = list(self.children)
        choice_arg("policy", policy, POLICIES)
        int_arg("block_size", block_size, minimum=1, maximum=MAX_INDEX)
        opt_int_arg("length", length, minimum=0, maximum=MAX_INDEX)
        self.seed, self.block_size, self.policy = seed_arg(seed), int(block_size), policy
        raw = self._stage_list(weights)
        self._length = None if length is None else int(length)
        # the weights as given (a state replays them: the Rust map quantises each stage's
        # weights over their own sum, so normalised copies could round differently)
        self.raw_stages = [(start, {n: float(w.get(n, 0.0)) for n in self.names}) for start, w in raw]
        self._chunk_list = self._chunks(child_chunk)
        self._map = MixtureMap(
            self.names,
            [child_length(n, c) for n, c in self.children.items()],
            [(start, [float(w.get(n, 0.0)) for n in self.names]) for start, w in raw],
            block_size=self.block_size,
            seed=self.seed,
            policy=policy,
            length=None if length is None else int(length),
            chunks=self._chunk_list,
        )
        self.stages = self._describe(raw)

    def _settings_description(self) -> dict[str, Any]:
        stages = [[st.start, st.end, [int(k) for k in st.children], [float(w) for w in st.weights]]
                  for st in self.stages]
        return {"seed": self.seed, "block_size": self.block_size, "policy": self.policy, "stages": stages,
                "child_chunk": self._chunk_list}

    # -- construction helpers -----------------------------------------------------------
    def _stage_list(self, weights: Weights) -> list[tuple[int, Mapping[str, float]]]:
        if isinstance(weights, Mapping):
            stages = [(0, weights)]
        else:
            try:
                stages = [(s, w) for s, w in weights]
            except (TypeError, ValueError):
                raise ArgumentTypeError(
                    "weights must be {name: weight} or a list of (start_index, {name: weight})"
                ) from None
        if not stages:
            raise InvalidArgumentError("weights must not be empty")
        for k, (start, w) in enumerate(stages):
            if not isinstance(start, (int, np.integer)) or isinstance(start, bool) or not 0 <= start <= MAX_INDEX:
                raise InvalidArgumentError(f"stage {k}: start must be a non-negative int, got {start!r}")
            if not isinstance(w, Mapping):
                raise ArgumentTypeError(f"stage {k}: weights must be a mapping {{name: weight}}")
            unknown = sorted(set(w) - set(self.names))
            if unknown:
                raise InvalidArgumentError(f"stage {k} names unknown children: {unknown} (children: {self.names})")
            for name, x in w.items():
                if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
                    raise ArgumentTypeError(f"stage {k}: weight of {name!r} must be a number, got {x!r}")
        return [(int(s), w) for s, w in stages]

    def _chunks(self, spec: int | Mapping[str, int] | str) -> list[int]:
        """Run length of every child's chunk-local pass order (1 = uniform)."""
        if isinstance(spec, str):
            if spec != "auto":
                raise InvalidArgumentError(f"child_chunk must be 'auto', an int or {{name: int}}, got {spec!r}")
            return [rows_per_page(c) for c in self.children.values()]
        if isinstance(spec, Mapping):
            unknown = sorted(set(spec) - set(self.names))
            if unknown:
                raise InvalidArgumentError(f"child_chunk names unknown children: {unknown}")
            values = [spec.get(n, 1) for n in self.names]
        else:
            values = [spec] * len(self.names)
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_INDEX:
                raise InvalidArgumentError(f"child_chunk values must be ints >= 1, got {v!r}")
        return [int(v) for v in values]

    def _describe(self, raw: list[tuple[int, Mapping[str, float]]]) -> list[Stage]:
        """The stages in force (under "stop" the ones after the exhaustion point are gone
        and the last ends there)."""
        out = []
        for (start, end), (_, w) in zip(self._map.stage_bounds, raw):
            vals = np.array([float(w.get(n, 0.0)) for n in self.names])
            kids = np.flatnonzero(vals > 0)
            out.append(Stage(int(start), None if end is None else int(end), kids, vals[kids] / vals.sum()))
        return out

    def with_stages(self, stages: Sequence[tuple[int, Mapping[str, float]]], *,
                    length: int | None | str = "same") -> MixtureDataset:
        """The same children, seed, block size, policy, length (or ``length``) and child
        orders under other weight ``stages`` (children are shared, not copied). Resuming
        a stream after a weight change builds one (:mod:`youmu.mixture.change`)."""
        return MixtureDataset(self.children, weights=list(stages), seed=self.seed, block_size=self.block_size,
                              policy=self.policy, length=self._length if length == "same" else length,  # type: ignore[arg-type]
                              child_chunk=dict(zip(self.names, self._chunk_list)))

    @property
    def child_chunks(self) -> dict[str, int]:
        """Run length of each child's chunk-local pass order (1 = uniform)."""
        return dict(zip(self.names, self._chunk_list))

    @property
    def lengths(self) -> dict[str, int]:
        return dict(zip(self.names, self._map.lengths))

    # -- maps -----------------------------------------------------------------------------
    def locate_many(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(child numbers, indices in child)`` as int64 arrays (one Rust call)."""
        child, index, _ = self._map.locate_many(int_array(indices, "indices"))
        return child, index

    def locate_passes(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(child numbers, indices in child, passes)``: pass 0 is the first pass over
        the child; under ``"restart"`` each pass visits the child in a new order."""
        return self._map.locate_many(int_array(indices, "indices"))

    def child_samples(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(child numbers, draw numbers)``: index ``i`` is its child's draw number
        ``k`` (0-based, over all passes; pass = ``k // len(child)``)."""
        return self._map.samples_many(int_array(indices, "indices"))

    def position(self, name: str, draw: int) -> int | None:
        """Global index of draw number ``draw`` of child ``name`` (inverse of
        :meth:`child_samples`), or ``None`` if the mixture never makes that draw."""
        p = self._map.position(self._child_number(name), self._child_draw("draw", draw))
        return None if p is None else int(p)

    # -- counters -------------------------------------------------------------------------
    def counts(self, i: int) -> dict[str, int]:
        """Samples each child contributes among the first ``i`` indices (0 <= i <= len)."""
        return dict(zip(self.names, self._map.counts(self._in_range("i", i, upto=True))))

    def passes(self, i: int) -> dict[str, int]:
        """Passes over each child started among the first ``i`` indices (1 = the first
        pass is in progress or complete; for logging how often small sources repeat)."""
        return {n: math.ceil(v / ln) if ln else 0 for (n, v), ln in zip(self.counts(i).items(), self._map.lengths)}

    def stage_of(self, i: int) -> int:
        """Weight stage in force at index ``i``."""
        return int(self._map.stage_of(int_arg("i", i, minimum=0, maximum=MAX_INDEX)))

    def block_start(self, b: int, stage: int = 0) -> int:
        """Global index where block ``b`` of ``stage`` begins."""
        return self.stages[self._stage_number(stage)].start + int_arg("b", b, minimum=0) * self.block_size

    def block_counts(self, b: int, stage: int = 0) -> dict[str, int]:
        """Samples of each child in block ``b`` of ``stage`` (they sum to the block size)."""
        stage = self._stage_number(stage)
        return dict(zip(self.names, self._map.block_counts(stage, int_arg("b", b, minimum=0, maximum=MAX_INDEX))))

    def _stage_number(self, stage: Any) -> int:
        stage = int_arg("stage", stage, minimum=0)
        if stage >= len(self.stages):
            raise PageOutOfRangeError(f"stage={stage}: this mixture has {len(self.stages)} stage(s)")
        return stage

    def window_bounds(self) -> list[dict[str, float]]:
        """Per stage, each positive-weight child's bound on
        ``|samples in any run of whole blocks − blocks · block_size · weight|``."""
        return [{n: float(x) for n, x in zip(self.names, row) if not math.isnan(x)}
                for row in self._map.window_bounds()]

    def __repr__(self) -> str:
        return (f"MixtureDataset({len(self.names)} children, {len(self.stages)} stage(s), "
                f"block_size={self.block_size}, policy={self.policy!r}, len={len(self)})")
