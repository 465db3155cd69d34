"""Compute-cost models of packed sequences: ``a·Σl² + b·Σl + c``.

A *packed sequence* is a list of document lengths ``[l_1, ..., l_k]`` trained as one
row with a block-diagonal (per-document) attention mask, as varlen/FlashAttention
kernels do. Its cost per transformer layer is

* a **quadratic** attention term ``Σ l_i²`` — the score matrix ``QKᵀ`` and the
  weighted sum ``AV`` are computed per document, so two 50-token documents cost
  ``2·50² = 5000`` units while 30 + 70 costs ``30² + 70² = 5800`` (1.16×, the
  MegaScale-Data example);
* **linear** terms ``Σ l_i = s``: the QKV/O projections, the MLP (times the experts
  per token of an MoE) and the LM head.

Every model here is of the form ``a·Σl² + b·Σl + c`` per packed sequence, with
``c`` a fixed per-micro-batch overhead (kernel launches, optimizer hooks). The
coefficients come either from a transformer description (:class:`ModelConfig`, in
FLOPs) or from measured step times (:meth:`CostModel.fit`). MegaScale-Data gives no
formula; the FLOPs accounting is the standard one of Megatron-LM, with the causal-mask saving of FlashAttention-style
kernels made explicit.

Example:
    >>> from youmu.planning import attention_cost, ModelConfig, CostModel
    >>> cfg = ModelConfig()
    >>> c = attention_cost([[30, 70], [50, 50]], cfg)
    >>> bool(c[0] > c[1])
    True
    >>> q = CostModel.from_config(cfg).terms([[30, 70], [50, 50]])[0]
    >>> round(float(q[0] / q[1]), 2)
    1.16
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from youmu._internal.args import bool_arg, float_arg, float_array, int_arg, int_array
from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["ModelConfig", "CostModel", "attention_cost", "as_csr", "segment_sums", "PRESETS"]

# A packed sequence: its document lengths. A batch of them: a list of those.
Seqs = Sequence[Sequence[int]]


def as_csr(seqs: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(doc_lengths, offsets)`` of a list of packed sequences (CSR layout).

    Sequence ``i`` holds ``doc_lengths[offsets[i]:offsets[i + 1]]``. Accepts a list of
    lists (``[[30, 70], [100]]``), a pair already in CSR form, or an object with
    ``doc_lengths`` and ``doc_offsets`` attributes (:class:`~youmu.planning.engine.meta.SampleMeta`).

    >>> as_csr([[30, 70], [5]])
    (array([30, 70,  5]), array([0, 2, 3]))
    """
    if hasattr(seqs, "doc_lengths") and hasattr(seqs, "doc_offsets"):
        return np.asarray(seqs.doc_lengths, dtype=np.int64), np.asarray(seqs.doc_offsets, dtype=np.int64)
    if isinstance(seqs, tuple) and len(seqs) == 2 and all(isinstance(x, np.ndarray) for x in seqs):
        lengths, offsets = int_array(seqs[0], "doc_lengths"), int_array(seqs[1], "offsets")
    else:
        if isinstance(seqs, (str, bytes)) or not isinstance(seqs, Iterable):
            raise ArgumentTypeError("seqs must be a list of packed sequences, each a list of document lengths "
                            f"(a lone sample of length l is [[l]]), got {type(seqs).__name__}")
        counts: list[int] = []
        flat: list[int] = []
        for k, s in enumerate(seqs):
            # checks kept off the per-sequence fast path (isinstance against numpy's
            # abstract scalar types or the Iterable ABC would double this loop's cost)
            if type(s) is str or type(s) is bytes:
                raise ArgumentTypeError(f"sequence {k} must be a list of document lengths, got {type(s).__name__}")
            try:
                docs = list(s)
            except TypeError:
                if isinstance(s, (int, np.integer, float, np.floating)):
                    raise ArgumentTypeError(f"sequence {k} is a bare number ({s!r}); a lone sample of length l "
                                            "is [[l]], "
                                    "so a list of lengths [l1, l2] must be written [[l1], [l2]]") from None
                raise ArgumentTypeError(
                    f"sequence {k} must be a list of document lengths, got {type(s).__name__}"
                ) from None
            counts.append(len(docs))
            flat.extend(docs)
        lengths = int_array(flat, "document lengths")
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
    if lengths.size and lengths.min() < 0:
        raise InvalidArgumentError("document lengths must be >= 0")
    if offsets.size == 0 or offsets[0] != 0 or offsets[-1] != lengths.size or (np.diff(offsets) < 0).any():
        raise InvalidArgumentError("offsets must start at 0, be non-decreasing and end at len(doc_lengths)")
    return lengths, offsets


def segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-sequence sums of a CSR array (empty sequences sum to 0): int64 for integer
    values, float64 otherwise.

    >>> segment_sums(np.array([1, 2, 3]), np.array([0, 2, 2, 3])).tolist()
    [3, 0, 3]
    """
    dtype = np.int64 if np.issubdtype(values.dtype, np.integer) else np.float64
    csum = np.zeros(values.size + 1, dtype=dtype)
    np.cumsum(values, out=csum[1:])
    return csum[offsets[1:]] - csum[offsets[:-1]]


@dataclass(frozen=True)
class ModelConfig:
    """A transformer, as far as its per-token and per-token-pair compute goes.

    Attributes:
        hidden: model width ``h``.
        num_layers: transformer blocks.
        num_heads: attention heads (only the head count matters for the KV width).
        num_kv_heads: key/value heads for GQA/MQA (default: ``num_heads``).
        ffn_hidden: MLP inner width (default: Llama's ``8h/3`` rounded up to a multiple
            of 256 when ``gated``, else ``4h``).
        gated: SwiGLU-style MLP (three matrices) instead of two.
        experts_per_token: active experts per token (MoE top-k; 1 for dense).
        vocab_size: LM head width (0 for an encoder without a head, e.g. a ViT).
        causal: only the lower triangle of each document's score matrix is computed
            (FlashAttention skips masked blocks), halving the quadratic term.
        training: forward + backward (3× the forward FLOPs) instead of forward only.

    Defaults describe a ~1.3B Llama-style decoder.

    >>> ModelConfig(hidden=1024, num_layers=2).ffn
    2816
    """

    hidden: int = 2048
    num_layers: int = 24
    num_heads: int = 16
    num_kv_heads: int | None = None
    ffn_hidden: int | None = None
    gated: bool = True
    experts_per_token: int = 1
    vocab_size: int = 32000
    causal: bool = True
    training: bool = True

    def __post_init__(self) -> None:
        for name in ("hidden", "num_layers", "num_heads", "experts_per_token"):
            int_arg(f"ModelConfig.{name}", getattr(self, name), minimum=1)
        kv = self.num_kv_heads
        if kv is not None and not 1 <= int_arg("ModelConfig.num_kv_heads", kv) <= self.num_heads:
            raise InvalidArgumentError(
                f"ModelConfig.num_kv_heads must be in [1, num_heads={self.num_heads}], got {kv!r}"
            )
        if self.ffn_hidden is not None:
            int_arg("ModelConfig.ffn_hidden", self.ffn_hidden, minimum=1)
        int_arg("ModelConfig.vocab_size", self.vocab_size, minimum=0)
        for name in ("gated", "causal", "training"):
            bool_arg(f"ModelConfig.{name}", getattr(self, name))

    @property
    def ffn(self) -> int:
        """The MLP inner width actually used."""
        if self.ffn_hidden is not None:
            return int(self.ffn_hidden)
        if self.gated:
            return int(math.ceil(8 * self.hidden / 3 / 256) * 256)
        return 4 * self.hidden

    @classmethod
    def preset(cls, name: str) -> ModelConfig:
        """A named architecture (see :data:`PRESETS`; MegaScale-Data Table 1 models).

        >>> ModelConfig.preset("llama-12b").hidden
        4608
        """
        if not isinstance(name, str):
            raise ArgumentTypeError(f"preset name must be a string, got {type(name).__name__}")
        if name not in PRESETS:
            raise InvalidArgumentError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
        return PRESETS[name]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# MegaScale-Data Table 1 gives layers / heads / hidden only. The FFN widths, KV heads
# and vocabularies below are assumptions (Mixtral's are its published ones); they move
# the linear terms, not the Σl² term.
PRESETS: dict[str, ModelConfig] = {
    "llama-12b": ModelConfig(hidden=4608, num_layers=45, num_heads=36, vocab_size=32000),
    "tmoe-25b": ModelConfig(hidden=2048, num_layers=42, num_heads=16, experts_per_token=2, vocab_size=64000),
    "mixtral-8x7b": ModelConfig(hidden=4096, num_layers=32, num_heads=32, num_kv_heads=8, ffn_hidden=14336,
                                experts_per_token=2, vocab_size=32000),
    # ViT encoders: bidirectional attention over patches, plain 4h MLP, no LM head.
    "vit-1b": ModelConfig(hidden=1408, num_layers=39, num_heads=16, gated=False, vocab_size=0, causal=False),
    "vit-2b": ModelConfig(hidden=1664, num_layers=48, num_heads=16, gated=False, vocab_size=0, causal=False),
}


@dataclass(frozen=True)
class CostModel:
    """``cost(seq) = a·Σl² + b·Σl + c`` for each packed sequence (list of doc lengths).

    Use :meth:`from_config` for modelled FLOPs or :meth:`fit` to calibrate on measured
    step times. Instances are picklable callables: ``model(seqs) -> np.ndarray``.

    Attributes:
        a, b, c: coefficients (non-negative).
        r2, mape: goodness of fit when made by :meth:`fit` (``None`` otherwise).
        source: where the coefficients come from (for reports).

    >>> m = CostModel(a=1.0, b=0.0)
    >>> m([[30, 70], [50, 50]]).tolist()
    [5800.0, 5000.0]
    """

    a: float
    b: float = 0.0
    c: float = 0.0
    r2: float | None = None
    mape: float | None = None
    source: str = "manual"
    config: ModelConfig | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            float_arg(f"CostModel.{name}", getattr(self, name), non_negative=True)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: ModelConfig | str | None = None) -> CostModel:
        """The FLOPs of one training step of ``config`` on a packed sequence.

        Per layer, for a packed sequence of ``s = Σl`` tokens (``h`` hidden, ``f`` FFN,
        ``kv = h·num_kv_heads/num_heads``, ``k`` experts per token):

        * projections: ``2·s·(2h² + 2h·kv)`` (Q and O full width, K and V at ``kv``);
        * MLP: ``2·s·h·f·(3 if gated else 2)·k``;
        * attention: ``4·h·Σl²`` (``QKᵀ`` and ``AV``, ``2·l²·h`` each), halved for
          causal masks;

        plus the LM head ``2·s·h·V`` once, and ×3 for forward + backward.
        """
        if config is None:
            config = ModelConfig()
        elif isinstance(config, str):
            config = ModelConfig.preset(config)
        elif not isinstance(config, ModelConfig):
            raise ArgumentTypeError(f"config must be a ModelConfig, a preset name or None, got {type(config).__name__}")
        h, f = float(config.hidden), float(config.ffn)
        kv = h * (config.num_kv_heads or config.num_heads) / config.num_heads
        proj = 2.0 * (2 * h * h + 2 * h * kv)
        mlp = 2.0 * h * f * (3 if config.gated else 2) * config.experts_per_token
        attn = 4.0 * h * (0.5 if config.causal else 1.0)
        mult = 3.0 if config.training else 1.0
        a = mult * config.num_layers * attn
        b = mult * (config.num_layers * (proj + mlp) + 2.0 * h * config.vocab_size)
        return cls(a=a, b=b, c=0.0, source="flops", config=config)

    @classmethod
    def fit(cls, seqs: Any, times: Sequence[float] | np.ndarray, *, intercept: bool = True) -> CostModel:
        """Least-squares calibration of ``a, b, c`` on measured times (non-negative
        coefficients; the unconstrained fit is used when it is already non-negative).

        ``seqs[i]`` is the packed sequence (or micro-batch: all its documents) whose
        step took ``times[i]``. ``r2`` and ``mape`` describe the fit on these points.

        >>> seqs = [[n] for n in (128, 256, 512, 1024)]
        >>> t = [2e-6 * n * n + 1e-3 * n + 0.01 for n in (128, 256, 512, 1024)]
        >>> m = CostModel.fit(seqs, t)
        >>> round(m.a * 1e6, 3), round(m.b * 1e3, 3), round(m.c, 3)
        (2.0, 1.0, 0.01)
        """
        intercept = bool_arg("intercept", intercept)
        lengths, offsets = as_csr(seqs)
        y = float_array(times, "times")
        n = offsets.size - 1
        if y.size != n:
            raise InvalidArgumentError(f"got {n} sequences but {y.size} times")
        if not np.isfinite(y).all():
            raise InvalidArgumentError("times must be finite")
        lf = lengths.astype(np.float64)
        cols = [segment_sums(lf**2, offsets), segment_sums(lf, offsets)]
        if intercept:
            cols.append(np.ones(n))
        x = np.stack(cols, axis=1)
        if n < x.shape[1]:
            raise InvalidArgumentError(
                f"need at least {x.shape[1]} measurements to fit {x.shape[1]} coefficients, got {n}"
            )
        coef = _nnls_small(x, y)
        a, b = float(coef[0]), float(coef[1])
        c = float(coef[2]) if intercept else 0.0
        pred = x @ coef
        ss_res = float(((y - pred) ** 2).sum())
        ss_tot = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
        nz = y != 0
        mape = float(np.mean(np.abs((y[nz] - pred[nz]) / y[nz]))) if nz.any() else float("nan")
        return cls(a=a, b=b, c=c, r2=r2, mape=mape, source="fit")

    # -- evaluation -----------------------------------------------------------------------
    def terms(self, seqs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(a·Σl², b·Σl, c)`` per sequence, as three float arrays."""
        lengths, offsets = as_csr(seqs)
        lf = lengths.astype(np.float64)
        quad = self.a * segment_sums(lf * lf, offsets)
        lin = self.b * segment_sums(lf, offsets)
        const = np.full(offsets.size - 1, float(self.c))
        return quad, lin, const

    def __call__(self, seqs: Any) -> np.ndarray:
        """Cost of every packed sequence in ``seqs`` (float64 array)."""
        quad, lin, const = self.terms(seqs)
        return quad + lin + const

    def of_lengths(self, lengths: Sequence[int] | np.ndarray) -> np.ndarray:
        """Cost of lone samples (each its own single-document sequence), vectorised."""
        lf = float_array(lengths, "lengths")  # real lengths are fine here (e.g. averages)
        if lf.size and (not np.isfinite(lf).all() or lf.min() < 0):
            raise InvalidArgumentError("lengths must be finite and >= 0")
        return self.a * lf * lf + self.b * lf + self.c

    def scaled(self, factor: float) -> CostModel:
        """The same model in other units (e.g. FLOPs → seconds at a given throughput)."""
        float_arg("factor", factor, positive=True)
        return replace(self, a=self.a * factor, b=self.b * factor, c=self.c * factor)

    def describe(self) -> Mapping[str, Any]:
        return {"a": self.a, "b": self.b, "c": self.c, "r2": self.r2, "mape": self.mape, "source": self.source}


def _nnls_small(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of columns: the best unconstrained fit
    over every subset of columns whose solution is non-negative (exact for ≤ 4 columns,
    2^k tiny solves)."""
    k = x.shape[1]
    best, best_res = np.zeros(k), float(((y) ** 2).sum())
    # scale columns so lstsq is well conditioned (Σl² is ~1e7 while 1 is 1)
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(xs[:, cols], y, rcond=None)
        if (sol < 0).any():
            continue
        full = np.zeros(k)
        full[cols] = sol
        res = float(((y - xs @ full) ** 2).sum())
        if res < best_res - 1e-15 * max(best_res, 1.0):
            best, best_res = full, res
    return best / scale


def attention_cost(seqs: Any, config: ModelConfig | str | None = None) -> np.ndarray:
    """Modelled compute cost (training FLOPs) of each packed sequence.

    Args:
        seqs: a list of packed sequences, each a list of document lengths; a lone
            sample of length ``l`` is ``[[l]]``.
        config: a :class:`ModelConfig`, a preset name (``"llama-12b"``, ``"vit-2b"``
            …) or ``None`` for the default ~1.3B decoder.

    Returns:
        float64 array, one cost per sequence: ``a·Σl² + b·Σl`` with ``a, b`` from
        :meth:`CostModel.from_config`.

    >>> c = attention_cost([[30, 70], [50, 50], [100]])
    >>> bool(c[0] > c[1]) and bool(c[2] > c[0])
    True
    """
    return CostModel.from_config(config)(seqs)
