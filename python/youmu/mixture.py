"""Mixtures over any map-style datasets (``len`` + indexing), as pure index maps.

* :class:`FlatMixture` — virtual concatenation of its children under one global keyed
  permutation: behaves as if all data had been tokenized into one dataset. Over youmu
  Parquet sources it also exposes one page space (:meth:`FlatMixture.page_index`) so
  ``YoumuDataset(flat_mixture)`` streams at page-shuffle speed.
* :class:`MixtureDataset` — weighted, block-deterministic mixing with an exact
  allocation: every positive weight is sampled at its exact long-run rate, however
  small, with weight stages (curricula) and per-child exhaustion policies.

Both are pure functions of the index: ``locate(i)`` needs no state, so resuming is
free and every rank computes the same answer.

Allocation (per stage, normalised weights ``w``, nominal block size ``B``): child *c*'s
count among the first *b* blocks is ``N_c(b) = floor(b·B·w_c + u_c) − floor(u_c)``
with a keyed offset ``u_c ∈ [0, 1)``. ``N_c`` is non-decreasing and within 1 of
``b·B·w_c`` for every *b*, so over any *m* consecutive blocks a child gets
``m·B·w_c`` samples ±1 — a weight of 1e-6 with ``B = 64`` still appears once per
~1e6 samples, on schedule (Levanter's ``int(w·B)`` rounding would never sample it).
Block *b* holds ``N_c(b+1) − N_c(b)`` samples of each child (so its size is ``B``
up to the rounding of the children) and its slots are ordered by a keyed permutation.

Example:
    >>> from youmu.mixture import MixtureDataset
    >>> mix = MixtureDataset({"web": list(range(1000)), "math": list(range(10))},
    ...                      weights={"web": 0.99, "math": 0.01}, block_size=64)
    >>> name, local = mix.locate(0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from youmu.plan import _permutation

POLICIES = ("restart", "stop")


def _u01(seed: int, *parts: Any) -> float:
    """A keyed uniform in [0, 1): position 0 of a permutation of 2^52 is a fine hash."""
    key = ":".join(str(p) for p in parts)
    return _permutation(1 << 52, seed, 0, key)[0] / float(1 << 52)


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ROUNDS = 6


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def batch_permute(x: np.ndarray, n: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Element-wise keyed permutation: ``x[i]`` mapped through a bijection of
    ``range(n[i])`` chosen by ``key[i]`` (Feistel network + cycle-walking, like
    ``youmu.Permutation`` but vectorised over many different domains at once).
    Requires ``0 <= x < n``."""
    x = np.asarray(x, dtype=np.uint64)
    n = np.asarray(n, dtype=np.uint64)
    key = np.asarray(key, dtype=np.uint64)
    bits = np.ceil(np.log2(np.maximum(n, 2).astype(np.float64))).astype(np.uint64)
    half = np.maximum((bits + np.uint64(1)) // np.uint64(2), np.uint64(1))
    mask = (np.uint64(1) << half) - np.uint64(1)
    with np.errstate(over="ignore"):
        keys = [_mix(key + np.uint64(r + 1) * _GOLDEN) for r in range(_ROUNDS)]

    def enc(v: np.ndarray, sel: np.ndarray) -> np.ndarray:
        h, m = half[sel], mask[sel]
        left, right = v >> h, v & m
        for k in keys:
            left, right = right, left ^ (_mix(right ^ k[sel]) & m)
        return (left << h) | right

    out = x.copy()
    live = n > np.uint64(1)
    idx = np.nonzero(live)[0]
    y = enc(x[idx], idx)
    while True:
        bad = y >= n[idx]
        if not bad.any():
            break
        y[bad] = enc(y[bad], idx[bad])
    out[idx] = y
    return out.astype(np.int64)


def _length(ds: Any) -> int:
    n = len(ds)
    if n < 0:
        raise ValueError("child datasets must have a non-negative length")
    return int(n)


def _get_many(ds: Any, idx: Sequence[int]) -> list[Any]:
    if hasattr(ds, "__getitems__"):
        return list(ds.__getitems__(list(idx)))
    return [ds[int(i)] for i in idx]


class _MapMixture:
    """Item access shared by the mixtures: subclasses provide ``names``, ``children``,
    ``__len__`` and ``locate_many(indices) -> (child numbers, child indices)``."""

    names: list[str]
    children: dict[str, Any]

    def locate(self, i: int) -> tuple[str, int]:
        """``(child_name, index_in_child)`` of global index ``i``: a pure function."""
        n = len(self)  # type: ignore[arg-type]
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"index {i} out of range for a {type(self).__name__} of length {n}")
        c, local = self.locate_many([j])  # type: ignore[attr-defined]
        return self.names[int(c[0])], int(local[0])

    def __getitem__(self, i: int) -> Any:
        name, local = self.locate(int(i))
        return self.children[name][local]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Batch access: one ``__getitems__`` call per child touched."""
        child, local = self.locate_many(indices)  # type: ignore[attr-defined]
        out: list[Any] = [None] * len(child)
        for c in np.unique(child):
            pos = np.nonzero(child == c)[0]
            for p, item in zip(pos, _get_many(self.children[self.names[int(c)]], local[pos].tolist())):
                out[int(p)] = item
        return out


# --------------------------------------------------------------------------------------
# FlatMixture
# --------------------------------------------------------------------------------------
class FlatMixture(_MapMixture):
    """Children concatenated (in the given order) under one keyed permutation.

    Args:
        children: ``{name: dataset}``; datasets need ``len`` and indexing. Empty
            children are allowed.
        seed: permutation key.
        shuffle: ``False`` keeps plain concatenation order.

    ``len`` is the sum of the children's lengths; ``fm[i]`` is the child's item at
    ``fm.locate(i)``; nothing is copied.
    """

    def __init__(self, children: Mapping[str, Any], seed: int = 0, shuffle: bool = True) -> None:
        if not children:
            raise ValueError("FlatMixture needs at least one child")
        self.children = dict(children)
        self.names = list(self.children)
        self.seed = int(seed)
        self.shuffle = shuffle
        lengths = [_length(c) for c in self.children.values()]
        self.offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        self._perm = _permutation(int(self.offsets[-1]), self.seed, 0, "flat-mixture") if shuffle else None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def locate_many(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(child number, index within child) for many global indices (vectorised)."""
        idx = np.asarray(indices, dtype=np.int64)
        n = len(self)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"index out of range for a FlatMixture of length {n}")
        flat = self._perm.take(idx) if self._perm is not None and idx.size else idx
        child = np.searchsorted(self.offsets, flat, side="right") - 1
        return child, flat - self.offsets[child]

    def page_index(self):
        """One ``youmu.PageIndex`` over all children, when every child is a youmu
        Parquet source (``PageIndex``, ``RowDataset`` or a ``FlatMixture`` of them).
        ``YoumuDataset(flat_mixture)`` uses it to shuffle pages and windows across all
        sources at page-read speed (the map-style row permutation is not used then)."""
        from youmu._core import PageIndex

        parts = []
        for name, c in self.children.items():
            if isinstance(c, PageIndex):
                parts.append(c)
            elif hasattr(c, "page_index") and callable(c.page_index):
                parts.append(c.page_index())
            elif hasattr(c, "index") and isinstance(c.index, PageIndex):
                parts.append(c.index)
            else:
                raise TypeError(f"child {name!r} ({type(c).__name__}) is not a youmu Parquet source")
        return PageIndex.concat(parts)

    def __repr__(self) -> str:
        return f"FlatMixture({len(self.names)} children, {len(self)} items, seed={self.seed})"


# --------------------------------------------------------------------------------------
# MixtureDataset
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Stage:
    start: int  # first global index of the stage
    end: int | None  # first index of the next stage (None: open-ended)
    children: np.ndarray  # child numbers with positive weight
    weights: np.ndarray  # normalised, aligned with `children`
    offsets: np.ndarray  # keyed u_c in [0, 1)
    floor_u: np.ndarray


class MixtureDataset(_MapMixture):
    """Weighted, block-deterministic mixture with exact allocation.

    Args:
        children: ``{name: dataset}`` (``len`` + indexing).
        weights: ``{name: weight}`` (any non-negative scale), or a curriculum: a list of
            ``(start_index, {name: weight})`` with the first stage starting at 0 and
            starts strictly increasing. Names missing from a stage get weight 0.
        seed: key of every permutation (block slots, child passes).
        block_size: nominal samples per block.
        policy: when a child runs out: ``"restart"`` (a fresh permutation of the child
            per pass) or ``"stop"`` (the mixture ends before the first sample the
            child cannot provide).
        length: number of samples (default: the sum of the children's lengths for
            ``"restart"``, the exhaustion point for ``"stop"``).

    ``locate(i)`` → ``(child_name, child_index)`` is a pure function of ``i``;
    ``passes(i)`` tells how many times each child has been started by index ``i``.
    """

    def __init__(
        self,
        children: Mapping[str, Any],
        weights: Mapping[str, float] | Sequence[tuple[int, Mapping[str, float]]],
        seed: int = 0,
        block_size: int = 2048,
        policy: str = "restart",
        length: int | None = None,
    ) -> None:
        if not children:
            raise ValueError("MixtureDataset needs at least one child")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.children = dict(children)
        self.names = list(self.children)
        self.lengths = np.array([_length(c) for c in self.children.values()], dtype=np.int64)
        self.seed, self.block_size, self.policy = int(seed), int(block_size), policy
        stages = [(0, weights)] if isinstance(weights, Mapping) else list(weights)
        self.stages = self._make_stages(stages)
        self._stage_keys = [int(_u01(self.seed, "mixture-block", k) * (1 << 52)) for k in range(len(self.stages))]
        self._child_keys = np.array([int(_u01(self.seed, "mixture-child", n) * (1 << 52)) for n in self.names],
                                    dtype=np.uint64)
        self._before: dict[int, np.ndarray] = {}  # stage number -> samples per child before it
        for s, st in enumerate(self.stages):
            for c in st.children:
                if self.lengths[c] == 0:
                    raise ValueError(f"child {self.names[c]!r} is empty but has a positive weight in stage {s}")
        if length is not None:
            if length < 0:
                raise ValueError("length must be >= 0")
            self._length = int(length)
        elif policy == "restart":
            self._length = int(self.lengths.sum())
        else:
            self._length = self._exhaustion_point()

    # -- stages -----------------------------------------------------------------------
    def _make_stages(self, stages: list) -> list[_Stage]:
        if not stages:
            raise ValueError("weights must not be empty")
        starts = [int(s) for s, _ in stages]
        if starts[0] != 0:
            raise ValueError("the first weight stage must start at index 0")
        if any(b <= a for a, b in zip(starts, starts[1:])):
            raise ValueError(f"stage starts must be strictly increasing, got {starts}")
        out = []
        for k, (start, w) in enumerate(stages):
            unknown = set(w) - set(self.names)
            if unknown:
                raise ValueError(f"stage {k} names unknown children: {sorted(unknown)}")
            vals = np.array([float(w.get(n, 0.0)) for n in self.names])
            if (vals < 0).any() or not np.isfinite(vals).all():
                raise ValueError(f"stage {k}: weights must be finite and >= 0")
            if vals.sum() <= 0:
                raise ValueError(f"stage {k}: at least one weight must be positive")
            kids = np.nonzero(vals > 0)[0]
            norm = vals[kids] / vals.sum()
            u = np.array([_u01(self.seed, "mixture-offset", k, self.names[c]) for c in kids])
            end = starts[k + 1] if k + 1 < len(starts) else None
            out.append(_Stage(start, end, kids, norm, u, np.floor(u)))
        return out

    def _stage_of(self, i: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.array([s.start for s in self.stages]), i, side="right") - 1

    # -- block arithmetic within a stage ------------------------------------------------
    def _n(self, st: _Stage, b: np.ndarray) -> np.ndarray:
        """N_c(b) for every block in `b` (rows) and child of the stage (columns)."""
        b = np.asarray(b, dtype=np.float64)[:, None]
        return (np.floor(b * self.block_size * st.weights[None, :] + st.offsets[None, :]) - st.floor_u).astype(np.int64)

    def _block_of(self, st: _Stage, r: np.ndarray) -> np.ndarray:
        """Block holding within-stage position `r` (start(b) <= r < start(b+1))."""
        b = r // self.block_size
        # |start(b) - b·B| < number of children, so a few steps always suffice
        for _ in range(64 + 2 * len(st.children)):
            start = self._n(st, b).sum(axis=1)
            nxt = self._n(st, b + 1).sum(axis=1)
            lo, hi = start > r, nxt <= r
            if not (lo.any() or hi.any()):
                return b
            b = b - lo + hi
        raise RuntimeError("block search did not converge")  # pragma: no cover - bounded by |start(b) - bB| < C

    def _within_stage(self, stage_no: int, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(child number, child sample number within the stage) for positions `r`.
        Fully vectorised: block search, then a keyed slot permutation per block."""
        st = self.stages[stage_no]
        r = np.asarray(r, dtype=np.int64)
        b = self._block_of(st, r)
        nb, nb1 = self._n(st, b), self._n(st, b + 1)
        counts = nb1 - nb
        size = counts.sum(axis=1)
        pos = r - nb.sum(axis=1)
        key = _mix(b.astype(np.uint64) ^ np.uint64(self._stage_keys[stage_no]))
        slot = batch_permute(pos, size, key)
        cum = np.cumsum(counts, axis=1)  # slot < cum[:, c] first holds for the slot's child
        c = (slot[:, None] >= cum).sum(axis=1)
        rows = np.arange(len(r))
        before = cum[rows, c] - counts[rows, c]
        return st.children[c], nb[rows, c] + slot - before

    def block_start(self, b: int, stage: int = 0) -> int:
        """Global index where block ``b`` of ``stage`` begins (blocks hold the exact
        per-child counts described in the module docstring)."""
        st = self.stages[stage]
        return st.start + int(self._n(st, np.array([b])).sum())

    def _stage_counts(self, stage_no: int, n: int) -> np.ndarray:
        """Samples of every child among the first `n` positions of a stage."""
        st = self.stages[stage_no]
        out = np.zeros(len(self.names), dtype=np.int64)
        if n <= 0:
            return out
        b = int(self._block_of(st, np.array([n - 1]))[0])
        nb = self._n(st, np.array([b]))[0]
        out[st.children] += nb
        start = int(nb.sum())
        # partial block: which children own the first (n - start) slots of its order
        c, _ = self._within_stage(stage_no, np.arange(start, n))
        out += np.bincount(c, minlength=len(self.names))
        return out

    def _samples_before_stage(self, stage_no: int) -> np.ndarray:
        if stage_no not in self._before:
            total = np.zeros(len(self.names), dtype=np.int64)
            for s in range(stage_no):
                st = self.stages[s]
                assert st.end is not None
                total += self._stage_counts(s, st.end - st.start)
            self._before[stage_no] = total
        return self._before[stage_no]

    # -- public maps ----------------------------------------------------------------------
    def child_samples(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(child number, k) where index i is child's k-th sample overall (0-based)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and idx.min() < 0:
            raise IndexError("indices must be >= 0")
        child = np.empty(len(idx), dtype=np.int64)
        k = np.empty(len(idx), dtype=np.int64)
        stage = self._stage_of(idx)
        for s in np.unique(stage):
            rows = np.nonzero(stage == s)[0]
            c, within = self._within_stage(int(s), idx[rows] - self.stages[int(s)].start)
            child[rows] = c
            k[rows] = within + self._samples_before_stage(int(s))[c]
        return child, k

    def locate_many(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(child number, index within the child) for many global indices."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"index out of range for a MixtureDataset of length {len(self)}")
        child, k = self.child_samples(idx)
        lengths = self.lengths[child]
        passes, within = np.divmod(k, lengths)
        if self.policy == "stop" and (passes > 0).any():  # pragma: no cover - guarded by __len__
            raise IndexError("a child is exhausted under policy='stop'")
        # a fresh keyed permutation of the child for every pass over it
        with np.errstate(over="ignore"):
            key = _mix(self._child_keys[child] ^ (passes.astype(np.uint64) * _GOLDEN))
        return child, batch_permute(within, lengths, key)

    def counts(self, i: int) -> dict[str, int]:
        """Samples each child has contributed among the first ``i`` indices."""
        i = int(i)
        s = int(self._stage_of(np.array([max(i - 1, 0)]))[0]) if i > 0 else 0
        total = self._samples_before_stage(s) + self._stage_counts(s, i - self.stages[s].start)
        return {n: int(v) for n, v in zip(self.names, total)}

    def passes(self, i: int) -> dict[str, int]:
        """How many passes over each child have started by global index ``i``
        (1 = the first pass is in progress; for logging)."""
        return {n: int(math.ceil(v / l)) if l else 0 for (n, v), l in zip(self.counts(i).items(), self.lengths)}

    def _exhaustion_point(self) -> int:
        """First index at which some child would need more samples than it has."""
        lo, hi = 0, 1
        while all(v <= l for v, l in zip(self.counts(hi).values(), self.lengths)):
            lo, hi = hi, hi * 2
            if hi > 1 << 62:  # pragma: no cover - every stage samples some finite child
                raise ValueError("mixture never exhausts")
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if all(v <= l for v, l in zip(self.counts(mid).values(), self.lengths)):
                lo = mid
            else:
                hi = mid
        return lo

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return (f"MixtureDataset({len(self.names)} children, {len(self.stages)} stage(s), "
                f"block_size={self.block_size}, policy={self.policy!r}, len={len(self)})")


__all__ = ["FlatMixture", "MixtureDataset"]
