"""Balancing a vision-language model's two modules: the image encoder and the backbone.

A VLM step has two workloads with different shapes (MegaScale-Data §2, "inter-module
imbalance"): the image encoder (a ViT) runs over each image's *patches*, with
attention per image, so its cost is ``Σ_images (a_e·p² + b_e·p)``; the LLM backbone
runs over the *merged* image tokens plus the text, so its cost is ``a·Σl² + b·Σl``
of the sequence. A plan that balances one leaves the other skewed: a short caption
over a 2000-patch image is cheap for the backbone and expensive for the encoder.
Both cost models are :class:`~youmu.planning.engine.cost.CostModel` s (presets
``"vit-1b"``/``"vit-2b"`` for the encoder, ``"llama-12b"`` … for the backbone).

Two strategies, both pure functions of their inputs (every rank computes the same
plan from the same gathered metadata):

* :func:`balance_hybrid` — MegaScale-Data's **hybrid balance** (§3.3 Fig. 9, §7.3):
  the backbone balance of :func:`~youmu.planning.engine.balance.balance` over the samples,
  combined with "interleaved balancing (directly balancing sampled images across
  ranks)" for the encoder. The encoder is data parallel over every rank
  (``distribute(axis='WORLD')``, encoder DP), so an image need not be encoded on the
  rank whose sequence consumes it: for each micro-batch slot ``j``, the images of
  every rank's slot-``j`` micro-batch are balanced over the encoder ranks by encoder
  cost, and the trainer's all-to-all moves each feature to its backbone rank (the
  result lists the routes). Each slot is balanced on its own because the all-to-all
  synchronises the ranks at every micro-batch (MegaScale-Data, Fig. 14: "the maximum
  sequence length parameter only constrains the token count for the LLM backbone; it
  does not regulate the number of visual tokens produced by the encoder").
* :func:`balance_colocated` — for trainers without that all-to-all, where each image
  is encoded on its sample's rank (youmu's addition; MegaScale-Data does not describe
  it): samples are packed by a two-dimensional greedy (LPT on the larger of the two
  normalised costs, each sample to the bin whose larger normalised load grows
  least), so neither module's bins drift apart.

:func:`module_imbalance` reports both modules' statistics for any assignment (e.g.
the single-cost balancers, to compare).

Example:
    >>> from youmu.planning.engine.hybrid import balance_hybrid, balance_colocated, module_imbalance
    >>> backbone = [10, 10, 10, 10]                  # equal sequences ...
    >>> images = [[100], [1], [1], [1]]              # ... one of them over a large image
    >>> r = balance_hybrid(backbone, images, num_buckets=2)
    >>> r.backbone.stats.bucket_costs.tolist(), r.encoder.bucket_costs.tolist()
    ([20.0, 20.0], [100.0, 3.0])
    >>> c = balance_colocated(backbone, [100, 1, 1, 1], num_buckets=2)
    >>> c.backbone.bucket_costs.tolist(), c.encoder.bucket_costs.tolist()
    ([10.0, 30.0], [100.0, 3.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from youmu._internal.args import choice_arg, float_array, int_arg, opt_int_arg
from youmu.errors import ArgumentTypeError, CapacityError, InvalidArgumentError
from youmu.planning.engine.balance import balance_detailed, sizes_and_capacity
from youmu.planning.engine.metrics import BalanceResult, Imbalance, check_grid, imbalance

__all__ = ["HybridResult", "ColocatedResult", "balance_hybrid", "balance_colocated", "module_imbalance",
           "image_lists"]


def image_lists(images: Any, name: str = "images") -> tuple[np.ndarray, np.ndarray]:
    """``(values, owner)``: every image's value (cost or patches) and the sample it
    belongs to, from one list per sample (``[[p1, p2], [], [p3]]``) or one number per
    sample (one image each).

    >>> v, o = image_lists([[4, 9], [], [16]])
    >>> v.tolist(), o.tolist()
    ([4.0, 9.0, 16.0], [0, 0, 2])
    """
    if isinstance(images, (str, bytes)):
        raise ArgumentTypeError(f"{name} must be a list of per-sample image lists, got {type(images).__name__}")
    arr = np.asarray(images, dtype=object) if not isinstance(images, np.ndarray) else images
    if arr.dtype != object and arr.ndim == 1:
        v = float_array(arr, name)
        owner = np.arange(v.size, dtype=np.int64)
    else:
        vals: list[float] = []
        own: list[int] = []
        for i, s in enumerate(images):
            if isinstance(s, (int, float, np.integer, np.floating)):
                vals.append(float(s))
                own.append(i)
                continue
            if isinstance(s, (str, bytes)) or not hasattr(s, "__iter__"):
                raise ArgumentTypeError(f"{name}[{i}] must be a number or a list of numbers, got {type(s).__name__}")
            for x in s:
                if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
                    raise ArgumentTypeError(f"{name}[{i}] must hold numbers, got {type(x).__name__}")
                vals.append(float(x))
                own.append(i)
        v = float_array(np.asarray(vals, dtype=np.float64), name)
        owner = np.asarray(own, dtype=np.int64)
    if v.size and (not np.isfinite(v).all() or v.min() < 0):
        raise InvalidArgumentError(f"{name} must be finite and >= 0")
    return v, owner


def _costs(x: Any, name: str) -> np.ndarray:
    c = float_array(x, name)
    if c.size and (not np.isfinite(c).all() or c.min() < 0):
        raise InvalidArgumentError(f"{name} must be finite and >= 0")
    return c


def module_imbalance(
    backbone_costs: Sequence[float] | np.ndarray,
    encoder_costs: Sequence[float] | np.ndarray,
    assignment: Sequence[tuple[int, int] | None],
    num_buckets: int,
    num_bins: int = 1,
) -> tuple[Imbalance, Imbalance]:
    """Both modules' :class:`~youmu.planning.engine.metrics.Imbalance` when every sample's
    images are encoded on the sample's own ``(rank, micro-batch)``.

    >>> bb, enc = module_imbalance([1, 1], [5, 1], [(0, 0), (1, 0)], num_buckets=2)
    >>> bb.bucket_max_over_min, enc.bucket_max_over_min
    (1.0, 5.0)
    """
    return (imbalance(backbone_costs, assignment, num_buckets, num_bins),
            imbalance(encoder_costs, assignment, num_buckets, num_bins))


@dataclass(frozen=True)
class HybridResult:
    """What :func:`balance_hybrid` computed.

    Attributes:
        backbone: the samples' :class:`~youmu.planning.engine.metrics.BalanceResult`
            (``(rank, micro-batch)`` per sample, deferred samples, backbone stats).
        image_sample: the sample each image belongs to.
        image_rank: the encoder rank that encodes each image (``-1``: its sample
            was deferred).
        image_slot: the micro-batch slot of each image (its sample's).
        encoder: :class:`~youmu.planning.engine.metrics.Imbalance` of the encoder's
            ``(encoder rank, slot)`` grid.
        step_time: ``Σ_j max_r encoder(r, j) + Σ_j max_r backbone(r, j)``: the
            virtual-clock step when every micro-batch's encoder phase, its
            all-to-all and its backbone phase synchronise the ranks.

    >>> r = balance_hybrid([3, 1], [[], [4, 4]], num_buckets=2)
    >>> r.image_sample.tolist(), r.image_rank.tolist(), r.encode_on(0, 0).tolist()
    ([1, 1], [0, 1], [0])
    """

    backbone: BalanceResult
    image_sample: np.ndarray
    image_rank: np.ndarray
    image_slot: np.ndarray
    encoder: Imbalance
    step_time: float

    def routes(self) -> list[tuple[int, int, int, int]]:
        """``(image, encoder rank, backbone rank, slot)`` of every placed image: where
        the all-to-all sends each feature.

        >>> balance_hybrid([2, 1, 1], [[], [5], [5]], num_buckets=2).routes()   # rank 1's 2 images
        [(0, 0, 1, 0), (1, 1, 1, 0)]
        """
        b = self.backbone.buckets[self.image_sample]
        ok = self.image_rank >= 0
        return [(int(i), int(e), int(r), int(j)) for i, e, r, j in
                zip(np.nonzero(ok)[0], self.image_rank[ok], b[ok], self.image_slot[ok])]

    def encode_on(self, rank: int, slot: int) -> np.ndarray:
        """Images that ``rank`` encodes in micro-batch ``slot``."""
        return np.nonzero((self.image_rank == rank) & (self.image_slot == slot))[0]


def balance_hybrid(
    backbone_costs: Sequence[float] | np.ndarray,
    image_costs: Any,
    num_buckets: int,
    num_bins: int = 1,
    *,
    method: str = "greedy",
    capacity: float | None = None,
    sizes: Sequence[float] | np.ndarray | None = None,
    num_encoder_ranks: int | None = None,
    placement: str | None = None,
    on_overflow: str = "error",
) -> HybridResult:
    """MegaScale-Data's hybrid balance: the backbone over samples, the encoder over
    images (see the module docstring).

    Args:
        backbone_costs: backbone cost per sample (e.g. ``CostModel.from_config(
            "llama-12b")`` of its merged image tokens plus text).
        image_costs: encoder cost of each image, one list per sample (``[]`` for a
            text-only sample) or one number per sample.
        num_buckets, num_bins: backbone ranks × micro-batches per rank.
        method: ``"greedy"`` (LPT) or ``"kk"``, for both modules.
        capacity, sizes, placement, on_overflow: the backbone balance's (see
            :func:`~youmu.planning.engine.balance.balance`); a deferred sample's images
            are not placed.
        num_encoder_ranks: the encoder's data-parallel ranks (default
            ``num_buckets``; MegaScale-Data's ``distribute('WORLD')`` uses every GPU).

    >>> r = balance_hybrid([4, 4, 4, 4], [[8, 8], [], [], [8, 8]], num_buckets=2)
    >>> r.encoder.bucket_costs.tolist(), r.backbone.stats.bucket_costs.tolist()
    ([16.0, 16.0], [8.0, 8.0])
    """
    c = _costs(backbone_costs, "backbone_costs")
    v, owner = image_lists(image_costs, "image_costs")
    if owner.size and owner.max() >= c.size:
        raise InvalidArgumentError(f"image_costs has {int(owner.max()) + 1} samples' images for {c.size} samples")
    check_grid(num_buckets, num_bins)
    e = int(num_buckets) if num_encoder_ranks is None else int_arg("num_encoder_ranks", num_encoder_ranks, minimum=1)
    check_grid(e, num_bins, ("num_encoder_ranks", "num_bins"))
    choice_arg("method", method, ("greedy", "kk"))
    bb = balance_detailed(c, num_buckets, num_bins, method, capacity, sizes=sizes, on_overflow=on_overflow,
                          placement=placement)
    slot = bb.bins[owner] if owner.size else np.zeros(0, dtype=np.int64)
    rank = np.full(v.size, -1, dtype=np.int64)
    grid = np.zeros((e, int(num_bins)))
    for j in range(int(num_bins)):
        mine = np.nonzero(slot == j)[0]
        if mine.size == 0:
            continue
        # interleaved balancing: this slot's images over every encoder rank ...
        res = balance_detailed(v[mine], e, 1, method)
        load = res.stats.bin_costs[:, 0]
        # ... and the slot's heaviest part to the rank with the least encoder work so
        # far, so the ranks' step totals stay even too (the slot's maximum is unchanged)
        to_rank = np.empty(e, dtype=np.int64)
        to_rank[np.lexsort((np.arange(e), -load))] = np.lexsort((np.arange(e), grid.sum(axis=1)))
        rank[mine] = to_rank[res.buckets]
        grid[to_rank, j] = load
    enc = _grid_stats(grid)
    return HybridResult(
        backbone=bb, image_sample=owner, image_rank=rank, image_slot=np.where(rank >= 0, slot, -1),
        encoder=enc, step_time=enc.step_time + bb.stats.step_time,
    )


def _grid_stats(grid: np.ndarray) -> Imbalance:
    n, m = grid.shape
    flat = [(r, j) for r in range(n) for j in range(m)]
    return imbalance(grid.reshape(-1), flat, n, m)


@dataclass(frozen=True)
class ColocatedResult:
    """What :func:`balance_colocated` computed.

    Attributes:
        buckets, bins: ``(rank, micro-batch)`` per sample (``-1``: deferred).
        deferred: samples that fit in no micro-batch (``capacity``).
        backbone, encoder: each module's :class:`~youmu.planning.engine.metrics.Imbalance`.
        step_time: ``Σ_j max_r encoder(r, j) + Σ_j max_r backbone(r, j)``.

    >>> r = balance_colocated([1, 1, 1], [9, 0, 0], num_buckets=2, on_overflow="defer")
    >>> r.assignment, r.deferred.tolist()
    ([(0, 0), (1, 0), (1, 0)], [])
    """

    buckets: np.ndarray
    bins: np.ndarray
    deferred: np.ndarray
    backbone: Imbalance
    encoder: Imbalance
    step_time: float

    @property
    def assignment(self) -> list[tuple[int, int] | None]:
        return [None if b < 0 else (b, j) for b, j in zip(self.buckets.tolist(), self.bins.tolist())]


def balance_colocated(
    backbone_costs: Sequence[float] | np.ndarray,
    encoder_costs: Sequence[float] | np.ndarray,
    num_buckets: int,
    num_bins: int = 1,
    *,
    capacity: float | None = None,
    sizes: Sequence[float] | np.ndarray | None = None,
    on_overflow: str = "error",
) -> ColocatedResult:
    """Balance both modules when images are encoded on their sample's rank.

    Each cost is normalised by its ideal per-bin load (``total / bins``); samples go,
    by decreasing larger normalised cost, to the bin whose larger normalised load
    after adding them is least (ties: smaller summed load, then lower bin), among the
    bins with room for their ``sizes`` under ``capacity``. The ``num_buckets ×
    num_bins`` bins are then dealt to (rank, slot) by
    :func:`~youmu.planning.engine.balance.balance`'s ``"interleave"`` placement on the
    summed normalised load, so slot ``j`` holds similar work on every rank.

    Args:
        backbone_costs, encoder_costs: per sample (``encoder_costs``: the sum over
            its images, e.g. ``CostModel.from_config("vit-1b")(image_patch_lists)``).
        num_buckets, num_bins: ranks × micro-batches per rank.
        capacity, sizes: backbone tokens per micro-batch and per sample.
        on_overflow: ``"error"`` (:class:`~youmu.errors.CapacityError`) or
            ``"defer"`` for samples that fit nowhere.

    >>> r = balance_colocated([4, 4, 1, 1], [0, 0, 6, 6], num_buckets=2)
    >>> r.assignment, r.backbone.bucket_costs.tolist(), r.encoder.bucket_costs.tolist()
    ([(0, 0), (1, 0), (0, 0), (1, 0)], [5.0, 5.0], [6.0, 6.0])
    """
    c1 = _costs(backbone_costs, "backbone_costs")
    c2 = _costs(encoder_costs, "encoder_costs")
    if c2.size != c1.size:
        raise InvalidArgumentError(f"encoder_costs has {c2.size} entries for {c1.size} samples")
    check_grid(num_buckets, num_bins)
    choice_arg("on_overflow", on_overflow, ("error", "defer"))
    n, m = int(num_buckets), int(num_bins)
    s, cap = sizes_and_capacity(sizes, capacity, c1.size, "samples")
    opt_int_arg("num_bins", num_bins, minimum=1)
    k = n * m
    x1 = c1 / (c1.sum() / k) if c1.sum() > 0 else np.zeros_like(c1)
    x2 = c2 / (c2.sum() / k) if c2.sum() > 0 else np.zeros_like(c2)
    big = np.maximum(x1, x2)
    order = np.lexsort((np.arange(c1.size), -(x1 + x2), -big))
    load1, load2 = np.zeros(k), np.zeros(k)
    free = np.full(k, np.inf if cap is None else cap)
    unit = np.full(c1.size, -1, dtype=np.int64)
    ids = np.arange(k)
    for i in order.tolist():
        after = np.maximum(load1 + x1[i], load2 + x2[i])
        if s is not None:
            after = np.where(free >= s[i], after, np.inf)
        b = int(np.lexsort((ids, load1 + load2, after))[0])
        if after[b] == np.inf:
            continue
        unit[i] = b
        load1[b] += x1[i]
        load2[b] += x2[i]
        if s is not None:
            free[b] -= s[i]
    unplaced = np.nonzero(unit < 0)[0]
    if unplaced.size and on_overflow == "error":
        raise CapacityError(f"{unplaced.size} sample(s) fit in no micro-batch of capacity {cap:g} tokens",
                            unplaced.tolist())
    # the bins in use, dealt to (rank, slot) as whole micro-batches
    used = np.unique(unit[unit >= 0])
    place = balance_detailed((load1 + load2)[used], n, m, "interleave", reorder_only=True)
    bucket_of, bin_of = np.full(k, -1, dtype=np.int64), np.full(k, -1, dtype=np.int64)
    bucket_of[used], bin_of[used] = place.buckets, place.bins
    buckets = np.where(unit >= 0, bucket_of[np.maximum(unit, 0)], -1)
    bins = np.where(unit >= 0, bin_of[np.maximum(unit, 0)], -1)
    assignment = [None if b < 0 else (b, j) for b, j in zip(buckets.tolist(), bins.tolist())]
    bb, enc = module_imbalance(c1, c2, assignment, n, m)
    return ColocatedResult(buckets=buckets, bins=bins, deferred=unplaced, backbone=bb, encoder=enc,
                           step_time=bb.step_time + enc.step_time)
