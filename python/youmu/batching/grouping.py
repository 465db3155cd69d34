"""Per-rank length grouping (ODB, Eq. 1). Pure Python, no torch.

A rank's grouping buffer is sorted by realised length and walked from the longest
sample to the shortest with a running group-size threshold ``t`` (initially 1). Each
sample joins the current group; when the group reaches ``t`` samples it is closed and
``t`` becomes ``B(l) = max(floor(L_max / l), 1)`` of the sample just added, the
shortest one so far. Because each group's size is ``B`` of a sample at least as long
as every sample in it, every group of two or more samples satisfies
``size * max_len <= L_max`` (the padded-area bound). Only a singleton can exceed
``L_max``, and only when its own length does.

Groups are returned ordered short to long, each ascending by length, which is the
order the alignment rules (``alignment.py``) rely on: "the last sample of a group" is
its longest, and "the last group" holds the longest samples.

Example (ODB, App. D):
    >>> lengths = [500, 100, 800, 200]
    >>> groups = form_groups(lengths, token_budget=1000)
    >>> [[lengths[i] for i in g] for g in groups]
    [[100, 200], [500], [800]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from youmu.errors import InvalidArgumentError

__all__ = ["batch_size_for", "form_groups", "GroupTrace", "trace_groups", "padded_tokens"]


def batch_size_for(length: int, token_budget: int) -> int:
    """Target group size ``B(l) = max(floor(token_budget / l), 1)`` (ODB, Eq. 1).

    A zero length counts as one token: empty samples cost nothing to pad, so they
    may fill a whole budget's worth of slots, but they still take part (ODB's
    reference package silently drops them, which breaks exactly-once delivery).

    >>> batch_size_for(100, 1000), batch_size_for(800, 1000), batch_size_for(5000, 1000)
    (10, 1, 1)
    """
    if length < 0:
        raise InvalidArgumentError(f"sample length must be >= 0, got {length}")
    if token_budget < 1:
        raise InvalidArgumentError(f"token_budget must be >= 1, got {token_budget}")
    return max(token_budget // max(length, 1), 1)


class GroupTrace(NamedTuple):
    """One step of the greedy walk (used to reproduce the table of ODB, App. D)."""

    index: int  # type: ignore[assignment]  # position of the sample (shadows tuple.index by design: a public field)
    length: int
    group_size: int  # size of the current group after adding the sample
    threshold: int  # threshold the group was compared with
    closed: bool  # whether the group was closed on this step
    next_threshold: int  # threshold in force for the next sample


def trace_groups(lengths: Sequence[int], token_budget: int) -> tuple[list[list[int]], list[GroupTrace]]:
    """``form_groups`` plus the per-sample walk, longest sample first.

    >>> _, walk = trace_groups([100, 200, 500, 800], 1000)
    >>> [(t.length, t.group_size, t.threshold, t.closed, t.next_threshold) for t in walk]
    [(800, 1, 1, True, 1), (500, 1, 1, True, 2), (200, 1, 2, False, 2), (100, 2, 2, True, 10)]
    """
    if token_budget < 1:
        raise InvalidArgumentError(f"token_budget must be >= 1, got {token_budget}")
    for length in lengths:
        if length < 0:
            raise InvalidArgumentError(f"sample length must be >= 0, got {length}")
    # Stable ascending sort: equal lengths keep arrival order, so the result is a pure
    # function of the buffer's contents and order.
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups_desc: list[list[int]] = []  # built longest-first, reversed at the end
    current: list[int] = []
    threshold = 1
    walk: list[GroupTrace] = []
    for i in reversed(order):
        current.append(i)
        closed = len(current) >= threshold
        seen = threshold
        if closed:
            groups_desc.append(current[::-1])  # ascending within the group
            threshold = batch_size_for(lengths[i], token_budget)
            current = []
        size = len(current) if not closed else len(groups_desc[-1])
        walk.append(GroupTrace(i, lengths[i], size, seen, closed, threshold))
    if current:
        # Trailing partial group (the shortest samples): smaller than its threshold,
        # so the padded-area bound still holds.
        groups_desc.append(current[::-1])
    return groups_desc[::-1], walk


def form_groups(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Group a buffer by length; returns lists of indices into ``lengths``.

    Args:
        lengths: realised length of each buffered sample (after preprocessing).
        token_budget: ``L_max``, the padded-token budget of one group.

    Returns:
        Groups ordered from the shortest samples to the longest, each ascending by
        length. Every index appears exactly once.

    >>> form_groups([3, 3, 3, 3, 9], token_budget=10)
    [[0, 1, 2], [3], [4]]
    """
    return trace_groups(lengths, token_budget)[0]


def padded_tokens(group_lengths: Sequence[int]) -> int:
    """Tokens a group occupies once padded to its longest sample.

    >>> padded_tokens([100, 200])
    400
    """
    return len(group_lengths) * max(group_lengths, default=0)
