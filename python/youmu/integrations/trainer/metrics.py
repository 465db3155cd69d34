"""What a :class:`~youmu.integrations.trainer_loader.TrainerLoader` reports to a trainer's
logger: tokens/s, samples/s, the padding ratio, the wait for data (p50/p99) and the
mixture's shares, counted from the batches it hands out.

A batch with step info (a ``DynamicBatchLoader``'s or ``BalancedLoader``'s) is counted
from the info; a plain batch from its ``input_ids`` and ``attention_mask``.

Example:
    >>> import torch
    >>> m = LoaderFigures(source_key="source")
    >>> m.record({"input_ids": torch.ones(2, 4), "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
    ...           "source": ["web", "code"]}, None, wait=0.001)
    >>> f = m.figures(epoch=0)
    >>> f["youmu/padding_ratio"], f["youmu/mixture/web"]
    (0.25, 0.5)
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

__all__ = ["LoaderFigures"]

# A sliding window of waits keeps the percentiles cheap over a long run.
_WAITS_KEPT = 4096


class LoaderFigures:
    """This rank's figures since the last reset (see the module doc).

    Args:
        source_key: batch field naming each sample's source, for the
            ``youmu/mixture/<name>`` shares (default: the step info's source counts).
    """

    def __init__(self, source_key: str | None = None) -> None:
        self.source_key = source_key
        self.reset()

    def reset(self) -> None:
        """Start counting afresh (the rates are over the time since now)."""
        self._t0 = time.perf_counter()
        self._waits: list[float] = []
        self._n_samples = self._n_real = self._n_padded = 0
        self._sources: Counter[str] = Counter()

    def record(self, batch: Any, info: Any, wait: float) -> None:
        """Count one handed-out ``batch`` (its step ``info``, or ``None``) that took ``wait``
        seconds to come."""
        self._waits.append(wait)
        if len(self._waits) > _WAITS_KEPT:
            del self._waits[: _WAITS_KEPT // 2]
        if info is not None and hasattr(info, "real_tokens"):
            self._n_samples += int(info.num_samples)
            self._n_real += int(info.real_tokens)
            # a BalancedLoader's micro-batches are packed or listed: no padding of their own
            self._n_padded += int(getattr(info, "padded_tokens", info.real_tokens))
            if self.source_key is None and getattr(info, "microbatch", 0) == 0:
                self._sources.update(getattr(info, "source_counts", None) or {})  # once per step
        elif isinstance(batch, dict) and "input_ids" in batch and hasattr(batch["input_ids"], "shape"):
            ids = batch["input_ids"]
            self._n_samples += int(ids.shape[0]) if ids.dim() > 1 else 1
            self._n_padded += int(ids.numel())
            mask = batch.get("attention_mask")
            self._n_real += int(mask.sum()) if mask is not None else int(ids.numel())
        if self.source_key is not None and isinstance(batch, dict) and self.source_key in batch:
            names = batch[self.source_key]
            self._sources.update(str(n) for n in (names.tolist() if hasattr(names, "tolist") else names))

    def figures(self, epoch: int, reset: bool = False) -> dict[str, float]:
        """``youmu/tokens_per_s``, ``youmu/samples_per_s``, ``youmu/padding_ratio``,
        ``youmu/data_wait_p50_ms`` and ``..._p99_ms``, ``youmu/epoch`` and
        ``youmu/mixture/<source>`` shares; ``reset`` starts counting afresh after."""
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        waits = sorted(self._waits)

        def pct(q: float) -> float:
            return 1000.0 * waits[min(len(waits) - 1, int(q * len(waits)))] if waits else 0.0

        out = {
            "youmu/epoch": float(epoch),
            "youmu/tokens_per_s": self._n_real / elapsed,
            "youmu/samples_per_s": self._n_samples / elapsed,
            "youmu/padding_ratio": 1.0 - self._n_real / self._n_padded if self._n_padded else 0.0,
            "youmu/data_wait_p50_ms": pct(0.50),
            "youmu/data_wait_p99_ms": pct(0.99),
        }
        total = sum(self._sources.values())
        for name, n in sorted(self._sources.items()):
            out[f"youmu/mixture/{name}"] = n / total
        if reset:
            self.reset()
        return out
