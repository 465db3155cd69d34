"""A declarative per-step plan: ``mix → distribute → cost → balance → plan``.

The shape of MegaScale-Data's orchestration API (§3.3), computed locally: every rank
all-gathers the step's sample *metadata* (a few integers per sample: id, source,
document lengths, loss tokens) and runs the same pure planning function on it, so
all ranks agree on the plan without a central planner process.

* ``mix(schedule, global_batch_size)`` — which buffered samples the step uses: the
  schedule's exact per-source counts (:mod:`youmu.planning.engine.schedule`), taken from
  each source's candidates in buffer order (or a seeded random choice); the rest
  stay buffered for later steps.
* ``distribute(num_buckets, num_microbatches, capacity=, group_size=)`` — the grid:
  buckets (ranks of the distribute axis: DP, DP×CP or every rank — see :class:`Mesh`)
  × micro-batches, and the token capacity of one micro-batch.
* ``cost(fn)`` — the cost of a sample from its document lengths
  (:class:`~youmu.planning.engine.cost.CostModel`, a :class:`~youmu.planning.engine.cost.ModelConfig`
  or preset name, or any ``fn(seqs) -> costs``).
* ``balance(method, reorder_only=)`` — :func:`~youmu.planning.engine.balance.balance`.
* ``encoder(fn, balance=)`` — vision-language samples: an image-encoder cost model
  over each sample's image patches (``SampleMeta.image_patches``; the cost model above
  is then the backbone's), and both modules balanced together:
  ``"colocated"`` (:func:`~youmu.planning.engine.hybrid.balance_colocated`: each image encoded
  on its sample's rank) or ``"hybrid"`` (MegaScale-Data's hybrid balance,
  :func:`~youmu.planning.engine.hybrid.balance_hybrid`: the images of each micro-batch slot
  balanced over every rank, encoder data parallel over the world, and
  :attr:`StepPlan.image_ranks` says which rank encodes each image).
* ``plan(step, meta)`` → :class:`StepPlan`, a pure function of (seed, step, meta).

Each builder call returns a new :class:`Planner` (the object is immutable, so a
half-configured planner can be shared and extended).

Example:
    >>> import numpy as np
    >>> from youmu.planning import Planner, SampleMeta
    >>> meta = SampleMeta.build(ids=range(8), lengths=[900, 100, 120, 880, 500, 510, 60, 930])
    >>> planner = Planner(seed=0).distribute(2, num_microbatches=2, capacity=1024).cost("llama-12b").balance("greedy")
    >>> p = planner.plan(step=0, meta=meta)
    >>> [[meta.ids[rows].tolist() for rows in p.microbatches(b)] for b in range(2)]
    [[[4, 5], [6, 7]], [[0, 1], [2, 3]]]
    >>> p.tokens.tolist()                # tokens per (rank, micro-batch), all <= 1024
    [[1010, 990], [1000, 1000]]
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from youmu._internal.args import bool_arg, choice_arg, int_arg, opt_int_arg, seed_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError, PlanError
from youmu.planning.engine.balance import METHODS, balance_detailed
from youmu.planning.engine.cost import segment_sums
from youmu.planning.engine.hybrid import balance_colocated, balance_hybrid
from youmu.planning.engine.meta import SampleMeta, gather_metadata
from youmu.planning.engine.metrics import BalanceResult, Imbalance, check_grid
from youmu.planning.engine.sample_cost import cost_function, encoder_cost_function, image_cost_function
from youmu.planning.engine.schedule import MixingSchedule, MixtureSchedule, as_schedule

__all__ = ["Mesh", "Planner", "StepPlan", "AXES", "ENCODER_BALANCES"]

AXES = ("DP", "CP", "WORLD")
#: how :meth:`Planner.encoder` places images: on their sample's rank, or over every rank
ENCODER_BALANCES = ("colocated", "hybrid")


# --------------------------------------------------------------------------------------
# mesh
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mesh:
    """A trainer's device mesh (Megatron order: TP fastest, then CP, DP, PP).

    ``rank = ((pp·DP + dp)·CP + cp)·TP + tp``. Buckets per axis: ``"DP"`` → DP
    (TP, CP and PP ranks of one DP replica read the same data), ``"CP"`` → DP×CP
    (hybrid DP over context-parallel ranks), ``"WORLD"`` → every rank (e.g. a ViT
    encoder data-parallel over all GPUs).

    >>> mesh = Mesh(dp=2, cp=2, tp=2)
    >>> mesh.num_buckets("DP"), mesh.num_buckets("CP"), mesh.bucket_of(5, "DP"), mesh.bucket_of(5, "CP")
    (2, 4, 1, 2)
    """

    dp: int
    cp: int = 1
    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "cp", "tp", "pp"):
            int_arg(f"Mesh.{name}", getattr(self, name), minimum=1)

    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    def num_buckets(self, axis: str) -> int:
        if axis == "DP":
            return self.dp
        if axis == "CP":
            return self.dp * self.cp
        if axis == "WORLD":
            return self.world_size
        raise InvalidArgumentError(f"axis must be one of {AXES}, got {axis!r}")

    def bucket_of(self, rank: int, axis: str) -> int:
        """The bucket whose data global ``rank`` consumes."""
        rank = int_arg("rank", rank)
        if not 0 <= rank < self.world_size:
            raise InvalidArgumentError(f"rank {rank} outside a mesh of {self.world_size}")
        # TP ranks (the fastest index) share their bucket: they need identical input
        cp = rank // self.tp % self.cp
        dp = rank // (self.tp * self.cp) % self.dp
        if axis == "DP":
            return dp
        if axis == "CP":
            return dp * self.cp + cp
        if axis == "WORLD":
            return rank
        raise InvalidArgumentError(f"axis must be one of {AXES}, got {axis!r}")


# --------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepPlan:
    """The plan of one step.

    Attributes:
        step: the step.
        meta: the candidates the plan was computed from.
        selected: rows of ``meta`` in this step's global batch.
        buckets, bins: per row of ``meta``: ``(bucket, bin)``; ``-1`` for rows not
            in the step (unselected by ``mix`` or deferred for capacity).
        deferred: selected rows that fit in no bin (carry them to the next step).
        unselected: rows ``mix`` left in the buffer.
        costs: modelled cost per row of ``meta`` (0 for unselected rows).
        method: the balancing method used (after fallbacks).
        stats: :class:`~youmu.planning.engine.metrics.Imbalance` of the placement.
        num_buckets, num_bins: the grid.
        source_counts: samples per source in the step (``{source number: count}``).
        encoder_costs, encoder_stats: with an encoder cost model, the encoder cost
            per row of ``meta`` and the encoder's :class:`~youmu.planning.engine.metrics.Imbalance`
            over ``(encoder rank, slot)`` (``None`` otherwise).
        image_ranks: with ``encoder(..., balance="hybrid")``, the rank that encodes
            each image of ``meta`` (in ``meta.image_patches`` order; ``-1``: its sample
            is not in the step); ``None`` otherwise (each image on its sample's rank).

    >>> meta = SampleMeta.build(ids=range(6), lengths=[900, 100, 120, 880, 500, 510])
    >>> plan = Planner().distribute(2).cost("llama-12b").balance("greedy").plan(0, meta)
    >>> plan.ids(0), plan.ids(1), plan.tokens.tolist()     # per rank: its micro-batches
    ([[2, 3, 5]], [[0, 1, 4]], [[1510], [1500]])
    >>> round(plan.loss_scale(0, 0), 4)                    # W·t/T for exact gradients
    1.0033
    """

    step: int
    meta: SampleMeta
    selected: np.ndarray
    buckets: np.ndarray
    bins: np.ndarray
    deferred: np.ndarray
    unselected: np.ndarray
    costs: np.ndarray
    method: str
    stats: Imbalance
    num_buckets: int
    num_bins: int
    source_counts: dict[int, int] = field(default_factory=dict)
    encoder_costs: np.ndarray | None = None
    encoder_stats: Imbalance | None = None
    image_ranks: np.ndarray | None = None

    def microbatches(self, bucket: int) -> list[np.ndarray]:
        """Rows of ``meta`` in each of ``bucket``'s micro-batches, slot order; within a
        micro-batch rows keep their order in ``meta``."""
        bucket = int_arg("bucket", bucket)
        if not 0 <= bucket < self.num_buckets:
            raise InvalidArgumentError(f"bucket {bucket} outside range({self.num_buckets})")
        rows = np.nonzero(self.buckets == bucket)[0]
        rows = rows[np.argsort(self.bins[rows], kind="stable")]  # by slot, then meta order
        counts = np.bincount(self.bins[rows], minlength=self.num_bins)
        return np.split(rows, np.cumsum(counts)[:-1])

    def ids(self, bucket: int) -> list[list[int]]:
        """Sample ids of ``bucket``'s micro-batches."""
        return [self.meta.ids[rows].tolist() for rows in self.microbatches(bucket)]

    @property
    def tokens(self) -> np.ndarray:
        """``(num_buckets, num_bins)`` loss tokens per micro-batch."""
        grid = np.zeros((self.num_buckets, self.num_bins), dtype=np.int64)
        ok = self.buckets >= 0
        np.add.at(grid, (self.buckets[ok], self.bins[ok]), self.meta.tokens[ok])
        return grid

    @property
    def global_tokens(self) -> int:
        return int(self.meta.tokens[self.buckets >= 0].sum())

    def loss_scale(self, bucket: int, bin: int) -> float:
        """Factor for micro-batch ``(bucket, bin)``'s mean per-token loss so that the
        gradients summed over micro-batches and averaged over the ``num_buckets``
        ranks equal the per-token mean over the whole step:
        ``num_buckets · t(bucket, bin) / T``."""
        total = self.global_tokens
        return self.num_buckets * float(self.tokens[bucket, bin]) / total if total else 0.0

    @property
    def fingerprint(self) -> str:
        """Hash of (step, ids, assignment): equal on ranks that computed the same plan."""
        h = hashlib.blake2b(digest_size=16)
        h.update(np.int64(self.step).tobytes())
        for a in (self.meta.ids, self.buckets, self.bins):
            h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        return h.hexdigest()


def _check_group(num_buckets: int | None, group_size: int | None) -> None:
    if group_size is not None and num_buckets is not None and num_buckets % group_size:
        raise InvalidArgumentError(f"group_size must divide num_buckets={num_buckets}, got {group_size!r}")


def _check_interleave(method: str, reorder_only: bool) -> None:
    if method == "interleave" and not reorder_only:
        raise InvalidArgumentError("'interleave' places formed micro-batches: use it with reorder_only=True")


@dataclass(frozen=True)
class Planner:
    """Builder for per-step plans; see the module docstring.

    Args:
        seed: seeds ``mix(select="random")``; every other stage is deterministic.

    >>> planner = (Planner(seed=0).mix({"web": 3, "code": 1}, global_batch_size=4)
    ...            .distribute(2, num_microbatches=1).cost("llama-12b").balance("kk"))
    >>> meta = SampleMeta.build(ids=range(8), lengths=[50, 400, 60, 300, 70, 80, 90, 500],
    ...                         sources=[0, 0, 0, 0, 0, 1, 1, 1])
    >>> plan = planner.plan(step=0, meta=meta)
    >>> plan.source_counts, plan.ids(0), plan.ids(1)   # first 3 web + 1 code; 400 | 50+60+80
    ({0: 3, 1: 1}, [[1]], [[0, 2, 5]])
    """

    seed: int = 0
    schedule: MixingSchedule | MixtureSchedule | None = None
    global_batch_size: int | None = None
    select: str = "fifo"
    num_buckets: int | None = None
    num_bins: int = 1
    capacity: int | None = None
    group_size: int | None = None
    cost_fn: Any = None
    method: str = "greedy"
    reorder_only: bool = False
    on_overflow: str = "defer"
    placement: str | None = None
    encoder_cost_fn: Any = None
    encoder_balance: str | None = None

    def __post_init__(self) -> None:
        # the builder stages check their own arguments; the seed is only read when a
        # step selects at random, so check it here rather than at that step (a stage
        # copies the planner with _with, which does not run this again)
        seed_arg(self.seed)

    def _with(self, **changes: Any) -> Planner:
        """A copy with ``changes`` (the calling stage checked them; the rest were checked)."""
        new = copy.copy(self)
        for name, value in changes.items():
            object.__setattr__(new, name, value)
        return new

    @classmethod
    def _from_checked(cls, **values: Any) -> Planner:
        """The planner of settings :class:`~youmu.planning.PlanSettings` checked one by
        one; only what ties them together is checked here."""
        planner = object.__new__(cls)
        planner.__dict__.update({f.name: f.default for f in fields(cls)}, **values)
        _check_group(planner.num_buckets, planner.group_size)
        _check_interleave(planner.method, planner.reorder_only)
        return planner

    # -- builder stages -------------------------------------------------------------------
    def mix(self, schedule: Any, global_batch_size: int | None = None, *, select: str = "fifo",
            names: Sequence[str] | None = None) -> Planner:
        """Select the step's samples from the candidates by the schedule's per-source
        counts. ``schedule``: a :class:`MixingSchedule`, ``MixtureDataset``, weights,
        stages or ``fn(step)``. ``select``: ``"fifo"`` (buffer order) or ``"random"``
        (seeded by ``(seed, step)``)."""
        choice_arg("select", select, ("fifo", "random"))
        opt_int_arg("global_batch_size", global_batch_size, minimum=1)
        sched = as_schedule(schedule, global_batch_size, names)
        if isinstance(sched, MixtureSchedule):
            global_batch_size = global_batch_size or sched.batch_size
        if global_batch_size is None:
            raise InvalidArgumentError("mix needs global_batch_size (samples per step), a positive int")
        return self._with(schedule=sched, global_batch_size=int(global_batch_size), select=select)

    def distribute(self, num_buckets: int | None = None, num_microbatches: int = 1, *, axis: str | None = None,
                   mesh: Mesh | None = None, capacity: int | None = None, group_size: int | None = None) -> Planner:
        """Set the grid: ``num_buckets`` ranks (or ``mesh.num_buckets(axis)``) ×
        ``num_microbatches``; ``capacity`` tokens per micro-batch; ``group_size``
        buckets per balancing subgroup."""
        if mesh is not None or axis is not None:
            if mesh is None or axis is None:
                raise InvalidArgumentError("pass both axis= and mesh=, or num_buckets=")
            n = mesh.num_buckets(axis)
            if num_buckets is not None and num_buckets != n:
                raise InvalidArgumentError(f"num_buckets={num_buckets} disagrees with mesh axis {axis!r} ({n})")
            num_buckets = n
        if num_buckets is None:
            raise InvalidArgumentError("distribute needs num_buckets= (or mesh= and axis=)")
        check_grid(num_buckets, num_microbatches, ("num_buckets", "num_microbatches"))
        opt_int_arg("capacity", capacity, minimum=1)  # tokens per micro-batch
        _check_group(int(num_buckets), opt_int_arg("group_size", group_size, minimum=1))
        return self._with( num_buckets=int(num_buckets), num_bins=int(num_microbatches), capacity=capacity,
                       group_size=group_size)

    def cost(self, fn: Any) -> Planner:
        """Per-sample cost from metadata (default: :class:`CostModel` of the default
        :class:`ModelConfig`)."""
        cost_function(fn)  # validate now, not at the first step
        return self._with(cost_fn=fn)

    def balance(self, method: str = "greedy", *, reorder_only: bool = False, on_overflow: str = "defer",
                placement: str | None = None) -> Planner:
        """Balancing method (``"greedy"``, ``"kk"``; ``"interleave"`` with
        ``reorder_only``). ``reorder_only``: every candidate is a formed micro-batch,
        placed whole. ``on_overflow``: ``"defer"`` carries samples that fit in no bin
        to the next step; ``"error"`` raises. ``placement``: see
        :func:`~youmu.planning.engine.balance.balance`."""
        choice_arg("method", method, METHODS)
        if placement is not None:
            choice_arg("placement", placement, METHODS)
        choice_arg("on_overflow", on_overflow, ("defer", "error"))
        _check_interleave(method, bool_arg("reorder_only", reorder_only))
        return self._with( method=method, reorder_only=reorder_only, on_overflow=on_overflow, placement=placement)

    def encoder(self, fn: Any, balance: str = "colocated") -> Planner:
        """Balance an image encoder too: ``fn`` is its cost model over each sample's
        image patches (a :class:`CostModel`, ``ModelConfig``, preset name such as
        ``"vit-1b"``, or ``fn(image_patch_lists) -> costs``); :meth:`cost` stays the
        backbone's. ``balance``: ``"colocated"`` — plans from
        :func:`~youmu.planning.engine.hybrid.balance_colocated`, each image encoded on its
        sample's rank — or ``"hybrid"`` — :func:`~youmu.planning.engine.hybrid.balance_hybrid`,
        the backbone balanced over samples and each slot's images over every rank
        (:attr:`StepPlan.image_ranks`). Not with ``reorder_only`` or ``group_size``.

        >>> meta = SampleMeta.build(ids=range(4), lengths=[40, 40, 10, 10], images=[[], [], [900], [900]])
        >>> p = Planner().distribute(2).cost("llama-12b").encoder("vit-1b").plan(0, meta)
        >>> p.ids(0), p.ids(1), p.method
        ([[0, 2]], [[1, 3]], 'colocated')
        >>> meta = SampleMeta.build(ids=range(2), lengths=[40, 40], images=[[], [900, 900]])
        >>> h = Planner().distribute(2).cost("llama-12b").encoder("vit-1b", balance="hybrid").plan(0, meta)
        >>> h.ids(0), h.ids(1), h.image_ranks.tolist(), h.method   # sample 1's two images on both ranks
        ([[0]], [[1]], [0, 1], 'hybrid')
        """
        encoder_cost_function(fn)
        choice_arg("balance", balance, ENCODER_BALANCES)
        # None: colocated, the setting's value before hybrid existed (config fingerprints)
        return self._with(encoder_cost_fn=fn, encoder_balance=None if balance == "colocated" else balance)

    # -- planning -------------------------------------------------------------------------
    def _select(self, step: int, meta: SampleMeta) -> tuple[np.ndarray, dict[int, int]]:
        if self.schedule is None:
            rows = np.arange(len(meta))
            return rows, {int(s): int(c) for s, c in zip(*np.unique(meta.sources, return_counts=True))}
        assert self.global_batch_size is not None
        want = self.schedule.count_vector(step, self.global_batch_size)
        chosen = []
        if meta.sources.size and meta.sources.max() >= len(want):
            raise PlanError(f"metadata names source {int(meta.sources.max())}, the schedule has {len(want)}")
        rng = np.random.default_rng([self.seed, step]) if self.select == "random" else None
        for src, n in enumerate(want.tolist()):
            if n == 0:
                continue
            cand = np.nonzero(meta.sources == src)[0]
            if cand.size < n:
                name = self.schedule.names[src]
                raise PlanError(f"step {step}: source {name!r} needs {n} samples but only {cand.size} are buffered")
            chosen.append(cand[:n] if rng is None else np.sort(rng.choice(cand, size=n, replace=False)))
        rows = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
        return rows, {s: int(c) for s, c in enumerate(want.tolist()) if c}

    def plan(self, step: int, meta: SampleMeta) -> StepPlan:
        """The plan of ``step`` from the candidates ``meta`` (a pure function of
        ``(self, step, meta)``: equal inputs give equal plans on every rank and run)."""
        if self.num_buckets is None:
            raise InvalidArgumentError("call distribute(...) before plan()")
        int_arg("step", step, minimum=0)
        if not isinstance(meta, SampleMeta):
            raise ArgumentTypeError(f"meta must be a SampleMeta (see SampleMeta.build), got {type(meta).__name__}")
        rows, counts = self._select(int(step), meta)
        sub = meta.take(rows)
        costs = cost_function(self.cost_fn)(sub)
        if costs.shape != (len(sub),):
            raise InvalidArgumentError(f"the cost function returned shape {costs.shape} for {len(sub)} samples")
        enc: np.ndarray | None = None
        enc_stats: Imbalance | None = None
        sub_ranks: np.ndarray | None = None
        if self.encoder_cost_fn is not None:
            if self.reorder_only or self.group_size is not None:
                raise InvalidArgumentError("encoder balancing places samples: not with reorder_only or group_size")
            enc = encoder_cost_function(self.encoder_cost_fn)(sub)
            if enc.shape != (len(sub),):
                raise InvalidArgumentError(f"the encoder cost function returned shape {enc.shape} for {len(sub)} "
                                           "samples")
            if self.encoder_balance == "hybrid":
                img = image_cost_function(self.encoder_cost_fn)(sub)
                p, o = sub.image_csr()
                if img.shape != p.shape:
                    raise InvalidArgumentError(f"the encoder cost function returned shape {img.shape} for "
                                               f"{p.size} images")
                hyb = balance_hybrid(costs, [img[o[i]:o[i + 1]] for i in range(len(sub))], self.num_buckets,
                                     self.num_bins, method=self.method, capacity=self.capacity, sizes=sub.sizes,
                                     placement=self.placement, on_overflow=self.on_overflow)
                res = replace(hyb.backbone, method="hybrid")
                enc = segment_sums(img, o)
                enc_stats = hyb.encoder
                sub_ranks = hyb.image_rank
            else:
                col = balance_colocated(costs, enc, self.num_buckets, self.num_bins, capacity=self.capacity,
                                        sizes=sub.sizes, on_overflow=self.on_overflow)
                res = BalanceResult(buckets=col.buckets, bins=col.bins, num_buckets=self.num_buckets,
                                    num_bins=self.num_bins, method="colocated", deferred=col.deferred,
                                    stats=col.backbone)
                enc_stats = col.encoder
        else:
            res = balance_detailed(
                costs, self.num_buckets, self.num_bins, self.method, self.capacity,
                sizes=sub.sizes, reorder_only=self.reorder_only, group_size=self.group_size,
                on_overflow="error" if self.reorder_only else self.on_overflow, placement=self.placement,
            )
        n = len(meta)
        buckets = np.full(n, -1, dtype=np.int64)
        bins = np.full(n, -1, dtype=np.int64)
        buckets[rows], bins[rows] = res.buckets, res.bins
        full_costs = np.zeros(n)
        full_costs[rows] = costs
        full_enc = None
        if enc is not None:
            full_enc = np.zeros(n)
            full_enc[rows] = enc
        image_ranks = None
        if sub_ranks is not None:
            # back from the selected rows' images to every image of `meta`
            p, o = meta.image_csr()
            image_ranks = np.full(p.size, -1, dtype=np.int64)
            at = np.concatenate([np.arange(o[r], o[r + 1]) for r in rows] or [np.zeros(0, dtype=np.int64)])
            image_ranks[at.astype(np.int64)] = sub_ranks
        unselected = np.setdiff1d(np.arange(n), rows)
        return StepPlan(
            step=int(step), meta=meta, selected=rows, buckets=buckets, bins=bins, deferred=rows[res.deferred],
            unselected=unselected, costs=full_costs, method=res.method, stats=res.stats,
            num_buckets=self.num_buckets, num_bins=self.num_bins, source_counts=counts,
            encoder_costs=full_enc, encoder_stats=enc_stats, image_ranks=image_ranks,
        )

    def plan_distributed(self, step: int, local: SampleMeta, channel: Any) -> StepPlan:
        """All-gather the ranks' candidates over ``channel``, then :meth:`plan`."""
        return self.plan(step, gather_metadata(channel, local))
