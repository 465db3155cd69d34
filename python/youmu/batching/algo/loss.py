"""Loss scaling (ODB, Eq. 2) and loss-token counting.

DDP averages gradients over ``W`` ranks. With dynamic batches the ranks hold different
token counts ``t_r``, so averaging per-rank mean losses is biased. Multiplying rank r's
per-token mean loss by ``W * t_r / T_tok`` makes the average equal the per-token mean
over the whole step: ``(1/W) * sum_r (W t_r / T_tok) * (1/t_r) sum l = (1/T_tok) sum l``.

Modes:
    ``"exact"``: ``t_r`` and ``T_tok`` of the aligned groups (a second all_gather when
    alignment changed any rank's groups). ``"approx"``: the same formula with the
    aligned groups' tokens estimated from the pre-alignment counts (no second
    gather). ``"sample"``: ``W * n_r / N_step`` (exact only if tokens per sample are
    equal across ranks). ``"none"``: 1.

Example:
    >>> loss_scale("exact", world_size=2, local_tokens=30, global_tokens=40,
    ...            local_samples=1, global_samples=3)
    1.5
"""

from __future__ import annotations

from typing import Any

from youmu.errors import InvalidArgumentError

__all__ = ["LOSS_SCALING_MODES", "loss_scale", "scaled_token_loss", "label_token_count"]

LOSS_SCALING_MODES = ("exact", "approx", "sample", "none")


def loss_scale(
    scaling: str,
    world_size: int,
    local_tokens: float,
    global_tokens: float,
    local_samples: int,
    global_samples: int,
) -> float:
    """The factor for this rank's mean loss (0 when this rank contributes nothing)."""
    if scaling in ("exact", "approx"):
        return world_size * local_tokens / global_tokens if global_tokens > 0 else 0.0
    if scaling == "sample":
        return world_size * local_samples / global_samples if global_samples > 0 else 0.0
    if scaling == "none":
        return 1.0 if local_samples > 0 else 0.0
    raise InvalidArgumentError(f"loss_scaling must be one of {LOSS_SCALING_MODES}, got {scaling!r}")


def scaled_token_loss(token_loss_sum: Any, info: Any) -> Any:
    """``sum of per-token losses * W / T_tok``: ODB, Eq. 2 without dividing by ``t_r``.

    Equal to ``mean_loss * info.loss_scale`` but finite when this rank has no loss
    tokens (``t_r = 0``), where the per-rank mean would be 0/0.

    >>> from youmu.batching.algo.step_info import StepInfo
    >>> info = StepInfo(step=0, num_samples=1, num_tokens=3, global_num_samples=2,
    ...                 global_num_tokens=6, loss_scale=1.0, world_size=2)
    >>> scaled_token_loss(1.5, info)
    0.5
    """
    if info.global_num_tokens <= 0:
        return token_loss_sum * 0.0
    return token_loss_sum * (info.world_size / info.global_num_tokens)


class label_token_count:
    """A picklable ``token_count_fn`` counting the tokens that enter a causal LM's loss.

    With ``shift=True`` (Hugging Face causal LMs) the first label never has a
    prediction, so it is not counted.

    >>> count = label_token_count()
    >>> count({"labels": [-100, -100, 5, 6, 7]})
    3
    >>> count({"labels": [5, 6, -100, 7]})
    2
    """

    def __init__(self, key: str = "labels", ignore_index: int = -100, shift: bool = True) -> None:
        self.key = key
        self.ignore_index = ignore_index
        self.shift = shift

    def __call__(self, sample: Any) -> int:
        labels = sample[self.key]
        values = labels.tolist() if hasattr(labels, "tolist") else list(labels)
        if values and isinstance(values[0], list):  # a [1, seq] tensor
            values = values[0]
        if self.shift:
            values = values[1:]
        return sum(1 for x in values if x != self.ignore_index)

    def __repr__(self) -> str:
        return f"label_token_count(key={self.key!r}, ignore_index={self.ignore_index}, shift={self.shift})"
