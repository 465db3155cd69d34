"""What the trainer gets with each micro-batch (:class:`MicroBatchInfo`, and with
MegaScale-Data's hybrid balance a :class:`HybridBatch`), how a rank's micro-batches are
put together from a step's plan (:class:`Assembler`), and how a sample is measured
when the user gives no function for it (:func:`default_docs`).

Hybrid balance (``BalancedLoader(encoder_balance="hybrid")``): the images of each
micro-batch slot are balanced over every rank for the image encoder (encoder data
parallel over the world), independently of which rank's backbone sequence consumes
them (MegaScale-Data §3.3, §7.3). Who moves what:

* the **loader** decides the placement and moves the *inputs*: each image's payload
  (pixels, or whatever ``split_images_fn`` returns for it) goes once, over the
  loader's Gloo channel, from the rank that read the sample to the rank that encodes
  it, and the sample's backbone part (without its images) to its backbone rank;
* the **trainer** moves the *features*: after its encoder ran, one all-to-all per
  micro-batch sends each feature to the backbone rank that consumes it, as
  MegaScale-Data's trainer does (Fig. 14: "All-to-All communication collective to
  transfer features from the ViT encoder to the LLM backbone").

Why not move the features in the loader, or the images to the backbone rank: features
exist only on the GPU after the encoder's forward pass (and its backward pass needs
the all-to-all's gradient in reverse), which a CPU-side loader cannot do; and the
encoder must see the images the plan gave it, not those of its own samples. So each
:class:`HybridBatch` carries the images this rank encodes plus the routes of the
all-to-all: ``encode`` (for each image: the rank that consumes its feature, the sample
and the image's index in it) and ``receive`` (for each image of this rank's backbone
samples: the rank that encodes it). Both lists are in the all-to-all's order, so
:meth:`HybridBatch.send_counts` / :meth:`~HybridBatch.recv_counts` are the split
sizes of ``torch.distributed.all_to_all_single`` and :meth:`~HybridBatch.recv_order`
puts the received features in ``receive`` order.

Example:
    >>> default_docs({"input_ids": [1, 2, 3]})
    [3]
    >>> info = MicroBatchInfo(step=0, microbatch=1, num_microbatches=2, rank=0, world_size=1, num_samples=2,
    ...                       num_tokens=100, real_tokens=100, global_num_samples=4, global_num_tokens=200,
    ...                       loss_scale=0.5, cost=1.0, slot_max_cost=1.0, step_time=2.0, imbalance=1.0)
    >>> info.is_last
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from youmu._internal.args import callable_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["MicroBatchInfo", "Assembler", "HybridBatch", "check_split_images", "default_docs"]


@dataclass(frozen=True)
class MicroBatchInfo:
    """What the trainer gets with each micro-batch.

    Attributes:
        step: global step (the same on every rank).
        microbatch, num_microbatches: slot ``j`` of ``m``; ``is_last`` when ``j = m-1``
            (step the optimizer after it).
        rank, world_size: this rank (bucket) and the number of ranks ``W``.
        num_samples: samples in this micro-batch.
        num_tokens: its loss tokens ``t`` (``token_count_fn``).
        real_tokens: its total length (sum of document lengths).
        global_num_samples, global_num_tokens: the step's totals ``N`` and ``T``
            over all ranks and micro-batches.
        loss_scale: ``W · t / T``: multiply the micro-batch's *mean* per-token loss by
            it (or use :func:`youmu.batching.algo.loss.scaled_token_loss` on the summed
            loss, which reads ``world_size`` and ``global_num_tokens``).
        cost: modelled cost of this micro-batch; slot_max_cost: the largest over
            ranks of slot ``j`` (what the slot waits for).
        step_time: modelled ``Σ_j max_r cost(r, j)`` of the step.
        imbalance: max/mean of the ranks' step costs (1.0 = perfect).
        sample_ids: ids of the samples (``id_fn`` or arrival ids ``k·W + origin``).
        is_padding: an empty slot repeating another batch with ``loss_scale = 0``.
        deferred: samples of this step carried to the next (capacity).
        method: balancing method used; fingerprint: hash of the step's plan.
        source_counts: samples per source in the step (mixing).
        encoder_cost, slot_max_encoder_cost: with an encoder cost model, the image
            encoder's modelled cost of this micro-batch and the largest over ranks of
            slot ``j`` (0.0 otherwise).

    >>> from youmu.planning import BalancedLoader
    >>> loader = BalancedLoader([{"input_ids": [0] * n} for n in (30, 70, 50, 50)], num_microbatches=2,
    ...                         global_batch_size=4, prefetch=0)
    >>> [(i.microbatch, i.num_tokens, i.global_num_tokens, i.loss_scale, i.is_last) for _, i in loader]
    [(0, 100, 200, 0.5, False), (1, 100, 200, 0.5, True)]
    """

    step: int
    microbatch: int
    num_microbatches: int
    rank: int
    world_size: int
    num_samples: int
    num_tokens: int
    real_tokens: int
    global_num_samples: int
    global_num_tokens: int
    loss_scale: float
    cost: float
    slot_max_cost: float
    step_time: float
    imbalance: float
    sample_ids: tuple[int, ...] = ()
    is_padding: bool = False
    deferred: int = 0
    method: str = ""
    fingerprint: str = ""
    source_counts: dict[str, int] = field(default_factory=dict)
    encoder_cost: float = 0.0
    slot_max_encoder_cost: float = 0.0

    @property
    def is_last(self) -> bool:
        return self.microbatch == self.num_microbatches - 1


@dataclass(frozen=True)
class HybridBatch:
    """A micro-batch under MegaScale-Data's hybrid balance (see the module doc).

    Attributes:
        backbone: this rank's backbone samples, collated (``collate_fn``) — each the
            first part of ``split_images_fn(sample)``.
        images: the image payloads this rank encodes in this slot, for any rank.
        encode: per entry of ``images``: ``(rank, sample id, image index)`` — where
            its feature goes; ordered by rank, then by the sample's place in that
            rank's micro-batch, then image index (the all-to-all's send order).
        receive: per image of this rank's backbone samples, in sample order then
            image index: ``(sample id, image index, encoder rank)``. Empty in a
            padding slot (its repeated batch has ``loss_scale = 0``).

    >>> b = HybridBatch(backbone=["s7"], images=["img"], encode=((1, 9, 0),), receive=((7, 0, 1), (7, 1, 0)))
    >>> b.send_counts(2), b.recv_counts(2), b.recv_order()
    ([0, 1], [1, 1], [1, 0])
    """

    backbone: Any
    images: list[Any]
    encode: tuple[tuple[int, int, int], ...]
    receive: tuple[tuple[int, int, int], ...]

    def send_counts(self, world_size: int) -> list[int]:
        """Features this rank sends to each rank (``input_split_sizes``, in images)."""
        out = [0] * world_size
        for r, _, _ in self.encode:
            out[r] += 1
        return out

    def recv_counts(self, world_size: int) -> list[int]:
        """Features this rank receives from each rank (``output_split_sizes``)."""
        out = [0] * world_size
        for _, _, e in self.receive:
            out[e] += 1
        return out

    def recv_order(self) -> list[int]:
        """For the ``k``-th feature the all-to-all delivers (grouped by encoder rank),
        its index in :attr:`receive`."""
        return sorted(range(len(self.receive)), key=lambda i: self.receive[i][2])


def check_split_images(encoder_balance: str, split_images_fn: Any) -> None:
    """``split_images_fn`` is given exactly with ``encoder_balance="hybrid"``.

    >>> check_split_images("hybrid", None)
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: encoder_balance='hybrid' needs split_images_fn= ...
    """
    callable_arg("split_images_fn", split_images_fn, optional=True)
    if (encoder_balance == "hybrid") != (split_images_fn is not None):
        if split_images_fn is None:
            raise InvalidArgumentError("encoder_balance='hybrid' needs split_images_fn= (sample -> (backbone part, "
                                       "[image payload, ...]))")
        raise InvalidArgumentError("split_images_fn= is for encoder_balance='hybrid' (images encoded on another "
                                   "rank than their sample's)")


def default_docs(sample: Any) -> list[int]:
    """Document lengths of a sample: ``cu_seqlens`` of a packed sample
    (:func:`youmu.torch.pack`), else the length of ``input_ids``, else ``len(sample)``.

    >>> default_docs({"input_ids": [1, 2, 3]}), default_docs({"cu_seqlens": [0, 3, 7]})
    ([3], [3, 4])
    """
    if isinstance(sample, Mapping):
        if "cu_seqlens" in sample:
            cu = np.asarray(sample["cu_seqlens"]).reshape(-1)
            return np.diff(cu).astype(np.int64).tolist()
        if "input_ids" in sample:
            ids = sample["input_ids"]
            shape = getattr(ids, "shape", None)
            return [int(shape[-1])] if shape is not None and len(shape) else [len(ids)]
    try:
        return [len(sample)]
    except TypeError:
        raise ArgumentTypeError(
            f"cannot measure a {type(sample).__name__}: pass length_fn= (tokens) or docs_fn= (document lengths)"
        ) from None


class Assembler:
    """This rank's micro-batches of a step's plan, in slot order, collated, each with
    its :class:`MicroBatchInfo`.

    An empty slot (a tiny final step) repeats a real batch of the step — or the last
    one this rank yielded — with ``loss_scale = 0`` and ``is_padding = True``, so every
    rank runs the same number of forward/backward passes.

    >>> from youmu.planning import Planner, SampleMeta
    >>> plan = Planner().distribute(1, num_microbatches=2).plan(0, SampleMeta.build(ids=[5], lengths=[4]))
    >>> items = Assembler(rank=0, world_size=1, names=["default"]).assemble(plan, {5: "x"})
    >>> [(batch, info.num_samples, info.is_padding, info.loss_scale) for batch, info in items]
    [(['x'], 1, False, 1.0), (['x'], 0, True, 0.0)]
    """

    def __init__(self, *, rank: int, world_size: int, names: Sequence[str], reorder_only: bool = False,
                 id_fn: Callable[[Any], int] | None = None, collate_fn: Callable[[list[Any]], Any] | None = None,
                 split_images_fn: Callable[[Any], Any] | None = None) -> None:
        self.rank, self.world_size = rank, world_size
        self.names = list(names)
        self.reorder_only = reorder_only
        self.id_fn = id_fn
        self.collate_fn = collate_fn
        self.split_images_fn = split_images_fn
        self.last_batch: Any = None

    def deliver(self, plan: Any, held: Mapping[int, Any], exchange: Any) -> list[tuple[Any, MicroBatchInfo]]:
        """Move what the plan moves over ``exchange`` (a
        :class:`~youmu.planning.steps.exchange.StepExchange`) and :meth:`assemble` this
        rank's micro-batches; ``held``: this rank's payloads by sample id. With a hybrid
        plan each placed sample read here is split first: its backbone part goes to
        its backbone rank, each image to its encoder rank."""
        if getattr(plan, "image_ranks", None) is None:
            payloads = dict(held)
            payloads.update(exchange.move_samples(plan, payloads))
            return self.assemble(plan, payloads)
        meta = plan.meta
        _, o = meta.image_csr()
        backbone: dict[int, Any] = {}
        images: dict[tuple[int, int], Any] = {}
        placed = (plan.buckets >= 0) & (meta.origin == self.rank)
        for row in np.nonzero(placed)[0].tolist():
            sid = int(meta.ids[row])
            part, imgs = self._split(held[sid], int(o[row + 1] - o[row]))
            backbone[sid] = part
            images.update(((sid, k), x) for k, x in enumerate(imgs))
        backbone.update(exchange.move_samples(plan, backbone))
        images.update(exchange.move_images(plan, images))
        return self.assemble(plan, backbone, images)

    def _split(self, sample: Any, n_images: int) -> tuple[Any, list[Any]]:
        if self.split_images_fn is None:
            raise ArgumentTypeError("encoder_balance='hybrid' moves images apart from their samples: pass "
                                    "split_images_fn= (sample -> (backbone part, [image payload, ...]))")
        got = self.split_images_fn(sample)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ArgumentTypeError(f"split_images_fn must return (backbone part, [image payload, ...]), got "
                                    f"{type(got).__name__}")
        part, imgs = got
        if isinstance(imgs, (str, bytes)) or not hasattr(imgs, "__len__"):
            raise ArgumentTypeError(f"split_images_fn's images must be a list of payloads, got {type(imgs).__name__}")
        imgs = list(imgs)
        if len(imgs) != n_images:
            raise InvalidArgumentError(f"split_images_fn returned {len(imgs)} image(s) for a sample that images_fn "
                                       f"measured with {n_images}")
        return part, imgs

    def assemble(self, plan: Any, payloads: Mapping[int, Any],
                 images: Mapping[tuple[int, int], Any] | None = None) -> list[tuple[Any, MicroBatchInfo]]:
        """``(batch, info)`` for each of this rank's ``plan.num_bins`` slots;
        ``payloads`` holds every sample of the rank's micro-batches, by id; with a
        hybrid plan, ``images`` every image this rank encodes, by ``(sample id, image
        index)``, and each batch is a :class:`HybridBatch`."""
        meta, r = plan.meta, self.rank
        tokens = plan.tokens
        total_tokens = plan.global_tokens
        grid = plan.stats.bin_costs
        sizes = np.zeros((plan.num_buckets, plan.num_bins), dtype=np.int64)
        ok = plan.buckets >= 0
        np.add.at(sizes, (plan.buckets[ok], plan.bins[ok]), meta.sizes[ok])
        n_selected = int(ok.sum())
        src_counts = {self.names[s]: c for s, c in plan.source_counts.items() if s < len(self.names)}
        enc_grid = plan.encoder_stats.bin_costs if plan.encoder_stats is not None else np.zeros_like(grid)
        out: list[tuple[Any, MicroBatchInfo]] = []
        pending_pad: list[int] = []
        for j, rows in enumerate(plan.microbatches(r)):
            samples: list[Any] = []
            for i in meta.ids[rows].tolist():
                if self.reorder_only:
                    samples.extend(payloads[i])
                else:
                    samples.append(payloads[i])
            info = MicroBatchInfo(
                step=plan.step, microbatch=j, num_microbatches=plan.num_bins, rank=r, world_size=self.world_size,
                num_samples=len(samples), num_tokens=int(tokens[r, j]), real_tokens=int(sizes[r, j]),
                global_num_samples=n_selected, global_num_tokens=total_tokens,
                loss_scale=(self.world_size * float(tokens[r, j]) / total_tokens) if total_tokens else 0.0,
                cost=float(grid[r, j]), slot_max_cost=float(grid[:, j].max()), step_time=plan.stats.step_time,
                imbalance=plan.stats.bucket_max_over_mean, sample_ids=self._sample_ids(samples, meta.ids[rows]),
                deferred=int(plan.deferred.size), method=plan.method, fingerprint=plan.fingerprint,
                source_counts=src_counts, encoder_cost=float(enc_grid[r, j]),
                slot_max_encoder_cost=float(enc_grid[:, j].max()),
            )
            if rows.size == 0:
                pending_pad.append(len(out))
                out.append((None, info))
                continue
            batch = self.collate_fn(samples) if self.collate_fn is not None else samples
            self.last_batch = batch
            out.append((batch, info))
        for k in pending_pad:
            _, info = out[k]
            filler = next((b for b, i in out if i.num_samples), self.last_batch)
            out[k] = (filler, dataclasses.replace(info, is_padding=True, loss_scale=0.0))
        if getattr(plan, "image_ranks", None) is not None:
            out = self._hybrid(plan, out, images or {})
        return out

    def _hybrid(self, plan: Any, out: list[tuple[Any, MicroBatchInfo]],
                images: Mapping[tuple[int, int], Any]) -> list[tuple[Any, MicroBatchInfo]]:
        """Each slot's batch with the images this rank encodes and the routes."""
        meta, ranks, r = plan.meta, plan.image_ranks, self.rank
        _, o = meta.image_csr()
        owner = np.repeat(np.arange(len(meta)), np.diff(o))
        index = np.arange(ranks.size) - o[owner]
        slot = plan.bins[owner]
        res = []
        for j, (batch, info) in enumerate(out):
            # send order: by consuming rank, then sample (a micro-batch keeps meta
            # order), then image: what the consumer's `receive` lists from this rank
            mine = np.nonzero((ranks == r) & (slot == j))[0]
            mine = mine[np.lexsort((index[mine], owner[mine], plan.buckets[owner[mine]]))]
            encode = tuple((int(plan.buckets[owner[x]]), int(meta.ids[owner[x]]), int(index[x])) for x in mine)
            receive: tuple[tuple[int, int, int], ...] = ()
            if not info.is_padding:
                rows = plan.microbatches(r)[j]
                receive = tuple((int(meta.ids[row]), int(k), int(ranks[o[row] + k]))
                                for row in rows.tolist() for k in range(int(o[row + 1] - o[row])))
            backbone = batch.backbone if isinstance(batch, HybridBatch) else batch
            res.append((HybridBatch(backbone=backbone, images=[images[(s, k)] for _, s, k in encode],
                                    encode=encode, receive=receive), info))
        return res

    def _sample_ids(self, samples: list[Any], row_ids: np.ndarray) -> tuple[int, ...]:
        if self.reorder_only and self.id_fn is not None:
            return tuple(int(self.id_fn(x)) for x in samples)
        return tuple(row_ids.tolist())
