"""``cutoff_len`` as LLaMA-Factory applies it to a supervised example: the conversation
as (source, target) turn pairs — the prompt tokens before an assistant answer, and
the answer — kept in order while the budget lasts, each pair cut by
:func:`infer_seqlen`.

How the budget is split (LLaMA-Factory's ``infer_seqlen``, applied turn by turn with
the budget that the earlier turns left): a short answer (under half the budget) is
kept whole and the prompt cut; otherwise a short prompt (under half) is kept whole
and the answer cut; otherwise both are cut in proportion to their lengths. A pair is
reached only while budget is left, so the last turns go first. Pairs come from the
tokenizer's own chat template here: a pair's target is a run of tokens
``transformers`` marks as the assistant's (``{% generation %}``), its source the
tokens before it; tokens after the last answer form a last pair with no target.

Example:
    >>> infer_seqlen(100, 20, 50)       # a short answer: the prompt is cut
    (30, 20)
    >>> infer_seqlen(10, 100, 50)       # a short prompt: the answer is cut
    (10, 40)
    >>> infer_seqlen(60, 40, 50)        # both long: cut in proportion
    (30, 20)
    >>> keep_lengths([(5, 10), (5, 10), (5, 10)], 28)
    [(5, 10), (5, 8)]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["infer_seqlen", "keep_lengths", "turn_pairs"]


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """``(source kept, target kept)`` of one pair within ``cutoff_len`` tokens."""
    if target_len * 2 < cutoff_len:  # a short target: keep it, cut the source
        max_target_len = cutoff_len
    elif source_len * 2 < cutoff_len:  # a short source: keep it, cut the target
        max_target_len = cutoff_len - source_len
    else:  # both long: in proportion
        max_target_len = int(cutoff_len * (target_len / (source_len + target_len)))
    new_target_len = min(max_target_len, target_len)
    new_source_len = min(max(cutoff_len - new_target_len, 0), source_len)
    return new_source_len, new_target_len


def keep_lengths(pairs: Sequence[tuple[int, int]], cutoff_len: int) -> list[tuple[int, int]]:
    """Tokens kept of each ``(source, target)`` pair, in order, while the budget lasts
    (pairs past it are left out)."""
    kept: list[tuple[int, int]] = []
    total = 0
    for source, target in pairs:
        if total >= cutoff_len:
            break
        s, t = infer_seqlen(source, target, cutoff_len - total)
        kept.append((s, t))
        total += s + t
    return kept


def turn_pairs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(source, target)`` lengths of a sequence whose assistant tokens ``mask`` marks:
    each run of marked tokens is a target, the unmarked tokens before it its source;
    unmarked tokens after the last run are a last pair with an empty target.

    >>> turn_pairs(np.array([0, 0, 1, 1, 0, 1, 0, 0], dtype=bool))
    [(2, 2), (1, 1), (2, 0)]
    """
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    pairs, prev = [], 0
    for s, e in zip(starts.tolist(), ends.tolist()):
        pairs.append((s - prev, e - s))
        prev = e
    if prev < len(mask):
        pairs.append((len(mask) - prev, 0))
    return pairs
