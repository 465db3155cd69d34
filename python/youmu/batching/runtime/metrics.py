"""Per-step and cumulative batching metrics. Pure, no torch.

The consumer side (the trainer's thread) records every delivered step; the aligner
side records rounds, exchanged bytes and alignment time. ``snapshot()`` gives rates
over the iteration so far; ``summary()`` a dict for logs and ``format_summary()`` a
few human-readable lines.

Example:
    >>> from youmu.batching.algo.step_info import StepInfo
    >>> m = BatchingMetrics()
    >>> m.start(now=0.0)
    >>> m.record_step(StepInfo(step=0, num_samples=2, num_tokens=10, global_num_samples=4,
    ...     global_num_tokens=20, loss_scale=1.0, real_tokens=10, padded_tokens=12), now=0.5, waited=0.1)
    >>> round(m.snapshot(now=1.0).padding_ratio, 3)
    0.167
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from youmu.batching.algo.step_info import StepInfo

__all__ = ["BatchingMetrics", "MetricsSnapshot"]


@dataclass(frozen=True)
class MetricsSnapshot:
    """Cumulative figures of this rank since the iteration started, plus the last step.

    Rates are per second of wall time since ``start``; ``*_global`` counts are over all
    ranks (each step's global figures, counted once).
    """

    elapsed_s: float
    steps: int
    padding_steps: int
    samples: int
    samples_global: int
    real_tokens: int
    padded_tokens: int
    loss_tokens: float
    loss_tokens_global: float
    samples_per_s: float
    real_tokens_per_s: float
    padded_tokens_per_s: float
    padding_ratio: float
    idle_slots: int
    mean_imbalance: float
    max_imbalance: float
    rounds: int
    emit_rounds: int
    skip_rounds: int
    second_gathers: int
    exchange_bytes: int
    exchange_s: float
    group_s: float
    align_s: float
    collate_s: float
    wait_s: float
    splits: int
    recirculated: int
    max_outstanding: int
    last_step_samples: int
    last_step_padding_ratio: float
    last_step_wait_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class BatchingMetrics:
    """Thread-safe counters shared by the loader's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._t0: float | None = None
            self.steps = 0
            self.padding_steps = 0
            self.samples = 0
            self.samples_global = 0
            self.real_tokens = 0
            self.padded_tokens = 0
            self.loss_tokens: float = 0
            self.loss_tokens_global: float = 0
            self.idle_slots = 0
            self._imbalance_sum = 0.0
            self.max_imbalance = 1.0
            self.rounds = 0
            self.emit_rounds = 0
            self.skip_rounds = 0
            self.second_gathers = 0
            self.exchange_bytes = 0
            self.exchange_s = 0.0
            self.group_s = 0.0
            self.align_s = 0.0
            self.collate_s = 0.0
            self.wait_s = 0.0
            self.splits = 0
            self.recirculated = 0
            self.max_outstanding = 0
            self._last: StepInfo | None = None
            self._last_wait = 0.0

    def start(self, now: float | None = None) -> None:
        with self._lock:
            if self._t0 is None:
                self._t0 = time.perf_counter() if now is None else now

    # -- consumer side --------------------------------------------------------------------
    def record_step(self, info: StepInfo, now: float | None = None, waited: float = 0.0) -> None:
        with self._lock:
            self.steps += 1
            self.wait_s += waited
            self._last_wait = waited
            self._last = info
            if info.is_padding:
                self.padding_steps += 1
                return
            self.samples += info.num_samples
            self.samples_global += info.global_num_samples
            self.real_tokens += info.real_tokens
            self.padded_tokens += info.padded_tokens
            self.loss_tokens += info.num_tokens
            self.loss_tokens_global += info.global_num_tokens
            self._imbalance_sum += info.imbalance
            self.max_imbalance = max(self.max_imbalance, info.imbalance)

    def record_idle(self, n: int = 1) -> None:
        with self._lock:
            self.idle_slots += n

    # -- aligner side ---------------------------------------------------------------------
    def record_round(
        self,
        action: str,
        exchange_bytes: int,
        exchange_s: float,
        align_s: float = 0.0,
        second_gather: bool = False,
        splits: int = 0,
        recirculated: int = 0,
    ) -> None:
        with self._lock:
            self.rounds += 1
            if action == "emit":
                self.emit_rounds += 1
            elif action == "skip":
                self.skip_rounds += 1
            self.second_gathers += int(second_gather)
            self.exchange_bytes += exchange_bytes
            self.exchange_s += exchange_s
            self.align_s += align_s
            self.splits += splits
            self.recirculated += recirculated

    def record_grouping(self, seconds: float) -> None:
        with self._lock:
            self.group_s += seconds

    def record_collate(self, seconds: float) -> None:
        with self._lock:
            self.collate_s += seconds

    def record_outstanding(self, held: int) -> None:
        with self._lock:
            if held > self.max_outstanding:
                self.max_outstanding = held

    # -- reading --------------------------------------------------------------------------
    def snapshot(self, now: float | None = None) -> MetricsSnapshot:
        with self._lock:
            t = time.perf_counter() if now is None else now
            elapsed = max(t - self._t0, 1e-12) if self._t0 is not None else 0.0
            real_steps = self.steps - self.padding_steps
            last = self._last

            def rate(x: float) -> float:
                return x / elapsed if elapsed > 0 else 0.0

            return MetricsSnapshot(
                elapsed_s=elapsed,
                steps=self.steps,
                padding_steps=self.padding_steps,
                samples=self.samples,
                samples_global=self.samples_global,
                real_tokens=self.real_tokens,
                padded_tokens=self.padded_tokens,
                loss_tokens=self.loss_tokens,
                loss_tokens_global=self.loss_tokens_global,
                samples_per_s=rate(self.samples),
                real_tokens_per_s=rate(self.real_tokens),
                padded_tokens_per_s=rate(self.padded_tokens),
                padding_ratio=1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0,
                idle_slots=self.idle_slots,
                mean_imbalance=self._imbalance_sum / real_steps if real_steps else 1.0,
                max_imbalance=self.max_imbalance,
                rounds=self.rounds,
                emit_rounds=self.emit_rounds,
                skip_rounds=self.skip_rounds,
                second_gathers=self.second_gathers,
                exchange_bytes=self.exchange_bytes,
                exchange_s=self.exchange_s,
                group_s=self.group_s,
                align_s=self.align_s,
                collate_s=self.collate_s,
                wait_s=self.wait_s,
                splits=self.splits,
                recirculated=self.recirculated,
                max_outstanding=self.max_outstanding,
                last_step_samples=last.num_samples if last else 0,
                last_step_padding_ratio=(1.0 - last.real_tokens / last.padded_tokens)
                if last and last.padded_tokens
                else 0.0,
                last_step_wait_s=self._last_wait,
            )

    def summary(self) -> dict[str, Any]:
        """The snapshot as a dict, plus per-round averages."""
        s = self.snapshot()
        d = s.as_dict()
        d["exchange_ms_per_round"] = 1000.0 * s.exchange_s / s.rounds if s.rounds else 0.0
        # grouping + plan + split/overflow, without the exchange (which includes waiting for peers)
        d["compute_ms_per_round"] = 1000.0 * (s.group_s + s.align_s) / s.rounds if s.rounds else 0.0
        d["align_ms_per_round"] = 1000.0 * (s.group_s + s.exchange_s + s.align_s) / s.rounds if s.rounds else 0.0
        d["bytes_per_round"] = s.exchange_bytes / s.rounds if s.rounds else 0.0
        real_steps = s.steps - s.padding_steps
        d["samples_per_step_global"] = s.samples_global / real_steps if real_steps > 0 else 0.0
        return d

    def format_summary(self) -> str:
        """A few lines for the end of an epoch."""
        d = self.summary()
        return (
            f"steps {d['steps']} ({d['padding_steps']} filler), samples {d['samples']} local / "
            f"{d['samples_global']} global ({d['samples_per_step_global']:.1f} per step), "
            f"{d['samples_per_s']:.1f} samples/s\n"
            f"tokens/s real {d['real_tokens_per_s']:.0f} padded {d['padded_tokens_per_s']:.0f}, "
            f"padding {100 * d['padding_ratio']:.2f}%, idle slots {d['idle_slots']}, "
            f"imbalance mean {d['mean_imbalance']:.3f} max {d['max_imbalance']:.3f}\n"
            f"rounds {d['rounds']} (emit {d['emit_rounds']}, skip {d['skip_rounds']}, 2nd gathers "
            f"{d['second_gathers']}), exchanged {d['exchange_bytes'] / 1024:.1f} KiB "
            f"({d['bytes_per_round']:.0f} B/round), grouping+alignment {d['compute_ms_per_round']:.2f} ms/round "
            f"(+ exchange incl. waiting for peers {d['exchange_ms_per_round']:.2f}), "
            f"data wait {d['wait_s']:.2f} s"
        )
