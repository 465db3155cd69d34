"""Synthetic workloads and unbalanced baselines for the virtual-clock simulations.

Bench and test support, not part of the installed package: ``bench_planning.py``,
``bench_vlm.py`` and the planning tests draw their workloads here.

MegaScale-Data's datasets (coyo700M, the production ``navit_data``) are not public
in a form we can use, so the benchmarks draw lengths from distributions calibrated to
what MegaScale-Data states (Fig. 2): in coyo700M, 98.23% of captions have ≤ 64 text tokens
while the longer ones hold 9.3% of all text tokens (its "top 1.62%" leaves
0.15% unaccounted; we use 1 − 0.9823 = 1.77%). Image sizes are not given; we draw
native-resolution sides from a log-normal and count 16×16 (coyo) or 14×14 (navit)
patches. Everything is seeded.

Baselines:

* :func:`arrival_assignment` — what a per-rank DataLoader does: each rank takes a
  contiguous run of the step's samples and cuts it into equal-count micro-batches.
* :func:`next_fit_pack` — sequence packing in arrival order (the usual packer).

Example:
    >>> import numpy as np
    >>> from workloads import coyo_like, arrival_assignment
    >>> w = coyo_like(1000, seed=0)
    >>> bool((w.text <= 64).mean() > 0.97)
    True
    >>> arrival_assignment(6, num_buckets=2, num_bins=3)
    [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from youmu._internal.args import float_arg, int_arg

__all__ = ["Workload", "coyo_like", "navit_like", "lognormal_lengths", "arrival_assignment", "next_fit_pack"]

#: coyo700M (MegaScale-Data Fig. 2): share of captions with <= 64 text tokens, and the
#: share of text tokens held by the longer captions.
COYO_SHORT_SHARE = 0.9823
COYO_LONG_TOKEN_SHARE = 0.093


@dataclass(frozen=True)
class Workload:
    """Per-sample token counts of an image-text workload.

    Attributes:
        text: text tokens per sample.
        patches: image patches per sample (encoder tokens).
        patch_merge: patches per backbone token (e.g. 4 for a 2×2 merger).
    """

    text: np.ndarray
    patches: np.ndarray
    patch_merge: int = 1

    @property
    def backbone(self) -> np.ndarray:
        """Backbone tokens per sample: merged image tokens + text."""
        return -(-self.patches // self.patch_merge) + self.text

    def __len__(self) -> int:
        return int(self.text.size)


def lognormal_lengths(n: int, median: float, sigma: float, cap: int, seed: int = 0, minimum: int = 1) -> np.ndarray:
    """``n`` integer lengths, log-normal around ``median``, clipped to ``[minimum, cap]``.

    >>> x = lognormal_lengths(1000, 100, 1.0, cap=150, seed=1)
    >>> int(x.min()) >= 1, int(x.max()), bool(np.array_equal(x, lognormal_lengths(1000, 100, 1.0, cap=150, seed=1)))
    (True, 150, True)
    """
    n = int_arg("n", n, minimum=0)
    minimum = int_arg("minimum", minimum)
    cap = int_arg("cap", cap, minimum=minimum)
    median = float_arg("median", median, positive=True)
    sigma = float_arg("sigma", sigma, non_negative=True)
    rng = np.random.default_rng(seed)
    x = rng.lognormal(np.log(median), sigma, size=n)
    return np.clip(np.rint(x), minimum, cap).astype(np.int64)


def _coyo_text(n: int, rng: np.random.Generator) -> np.ndarray:
    short = rng.random(n) < COYO_SHORT_SHARE
    s = np.clip(np.rint(rng.lognormal(np.log(12.0), 0.55, size=n)), 1, 64).astype(np.int64)
    # long captions: 65 + exponential, its mean set so they hold 9.3% of the tokens
    mean_short = float(s[short].mean()) if short.any() else 12.0
    p_long = 1.0 - COYO_SHORT_SHARE
    mean_long = COYO_LONG_TOKEN_SHARE / (1 - COYO_LONG_TOKEN_SHARE) * COYO_SHORT_SHARE * mean_short / p_long
    tail = 65 + np.rint(rng.exponential(max(mean_long - 65, 1.0), size=n)).astype(np.int64)
    return np.where(short, s, tail)


def _patches(
    n: int, rng: np.random.Generator, patch: int, median_side: float, sigma: float, max_side: int
) -> np.ndarray:
    h = np.clip(rng.lognormal(np.log(median_side), sigma, size=n), patch, max_side)
    w = np.clip(h * rng.lognormal(0.0, 0.35, size=n), patch, max_side)  # aspect ratios
    return (np.ceil(h / patch) * np.ceil(w / patch)).astype(np.int64)


def coyo_like(n: int, seed: int = 0, *, median_side: float = 320.0, sigma: float = 0.5, max_side: int = 1024,
              patch_merge: int = 1) -> Workload:
    """coyo700M-like samples: captions calibrated to MegaScale-Data's Fig. 2, images at native
    resolution in 16×16 patches."""
    rng = np.random.default_rng(seed)
    n = int_arg("n", n, minimum=0)
    return Workload(_coyo_text(n, rng), _patches(n, rng, 16, median_side, sigma, max_side), patch_merge)


def navit_like(n: int, seed: int = 0, *, median_side: float = 448.0, sigma: float = 0.6, max_side: int = 1792,
               text_median: float = 120.0, text_sigma: float = 1.2, max_text: int = 8192,
               patch_merge: int = 1) -> Workload:
    """navit_data-like samples: larger images in 14×14 patches and longer, heavy-tailed
    texts (the production set's distribution is not published; this is a stand-in)."""
    rng = np.random.default_rng(seed)
    n = int_arg("n", n, minimum=0)
    text = np.clip(np.rint(rng.lognormal(np.log(text_median), text_sigma, size=n)), 1, max_text).astype(np.int64)
    return Workload(text, _patches(n, rng, 14, median_side, sigma, max_side), patch_merge)


def _split(position: np.ndarray, total: np.ndarray | int, parts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where item ``position`` of ``range(total)`` lands when ``np.array_split`` cuts it
    into ``parts`` runs: ``(run, offset in the run, run length)`` — computed per item, so
    nothing is allocated per (possibly empty) run."""
    q, r = np.divmod(total, parts)
    big = r * (q + 1)  # the first r runs hold q + 1 items
    run = np.where(position < big, position // (q + 1), r + (position - big) // np.maximum(q, 1))
    start = np.where(run < r, run * (q + 1), big + (run - r) * q)
    return run, position - start, np.where(run < r, q + 1, q)


def arrival_assignment(num_items: int, num_buckets: int, num_bins: int = 1) -> list[tuple[int, int]]:
    """The unbalanced baseline: rank ``r`` takes the ``r``-th contiguous run of the
    step's samples (as a sharded per-rank loader would) and cuts it into ``num_bins``
    micro-batches of (nearly) equal sample count (both cuts as ``np.array_split``).

    >>> arrival_assignment(3, num_buckets=4)       # more ranks than samples: the last rank gets none
    [(0, 0), (1, 0), (2, 0)]
    """
    num_items = int_arg("num_items", num_items, minimum=0)
    num_buckets = int_arg("num_buckets", num_buckets, minimum=1)
    num_bins = int_arg("num_bins", num_bins, minimum=1)
    rank, offset, length = _split(np.arange(num_items), num_items, num_buckets)
    micro, _, _ = _split(offset, length, num_bins)
    return list(zip(rank.tolist(), micro.tolist()))


def next_fit_pack(lengths: np.ndarray, capacity: int) -> list[np.ndarray]:
    """Pack samples in arrival order into sequences of at most ``capacity`` tokens
    (a sample longer than ``capacity`` gets a sequence of its own).

    >>> [p.tolist() for p in next_fit_pack(np.array([3, 4, 2, 5, 1]), 6)]
    [[0], [1, 2], [3, 4]]
    """
    capacity = int_arg("capacity", capacity, minimum=1)
    packs: list[list[int]] = []
    used = capacity + 1
    for i, n in enumerate(np.asarray(lengths, dtype=np.int64).tolist()):
        if used + n > capacity:
            packs.append([])
            used = 0
        packs[-1].append(i)
        used += n
    return [np.asarray(p, dtype=np.int64) for p in packs]
