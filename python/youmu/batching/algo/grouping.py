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

A second budget (multimodal samples): each sample may also carry a count of another
resource — the vision encoder's patches, or its images — with a budget per group.
The walk then also closes the current group *before* a sample whose count would take
the group's real total past that budget (the reference package of ODB does this with
``max_patches``). Closing early only shrinks groups and the threshold still comes
from the shortest sample added, so the padded-area bound above still holds, and every
group of two or more samples holds at most ``extra_budget`` of the second resource.
Only a singleton can exceed it, and only when its own count does. Encoder work
(patches) is not padded: a ViT over variable-resolution images packs them, so the
second budget counts real units, not ``size * max``.

Example (ODB, App. D):
    >>> lengths = [500, 100, 800, 200]
    >>> groups = form_groups(lengths, token_budget=1000)
    >>> [[lengths[i] for i in g] for g in groups]
    [[100, 200], [500], [800]]
    >>> form_groups([100, 100, 100, 100], 1000, extra=[900, 0, 400, 300], extra_budget=1000)
    [[0], [1, 2], [3]]
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


def _check_extra(n: int, extra: Sequence[int] | None, extra_budget: int | None) -> None:
    if (extra is None) != (extra_budget is None):
        raise InvalidArgumentError("pass extra= (a count per sample) and extra_budget= together")
    if extra is None:
        return
    if extra_budget is not None and extra_budget < 1:
        raise InvalidArgumentError(f"extra_budget must be >= 1, got {extra_budget}")
    if len(extra) != n:
        raise InvalidArgumentError(f"extra has {len(extra)} counts for {n} samples")
    for x in extra:
        if x < 0:
            raise InvalidArgumentError(f"a sample's second-budget count must be >= 0, got {x}")


def trace_groups(
    lengths: Sequence[int],
    token_budget: int,
    extra: Sequence[int] | None = None,
    extra_budget: int | None = None,
) -> tuple[list[list[int]], list[GroupTrace]]:
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
    _check_extra(len(lengths), extra, extra_budget)
    # Stable ascending sort: equal lengths keep arrival order, so the result is a pure
    # function of the buffer's contents and order.
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups_desc: list[list[int]] = []  # built longest-first, reversed at the end
    current: list[int] = []
    threshold = 1
    walk: list[GroupTrace] = []
    used = 0  # the current group's real second-budget count
    limit = extra_budget if extra_budget is not None else 0
    for i in reversed(order):
        if extra is not None and current and used + extra[i] > limit:
            # close before the sample that would break the second budget; the
            # threshold is already B of the group's shortest sample (set below when
            # a group closes on size, or kept from before)
            groups_desc.append(current[::-1])
            threshold = batch_size_for(lengths[current[-1]], token_budget)
            current, used = [], 0
        current.append(i)
        if extra is not None:
            used += extra[i]
        closed = len(current) >= threshold
        seen = threshold
        if closed:
            groups_desc.append(current[::-1])  # ascending within the group
            threshold = batch_size_for(lengths[i], token_budget)
            current, used = [], 0
        size = len(current) if not closed else len(groups_desc[-1])
        walk.append(GroupTrace(i, lengths[i], size, seen, closed, threshold))
    if current:
        # Trailing partial group (the shortest samples): smaller than its threshold,
        # so the padded-area bound still holds.
        groups_desc.append(current[::-1])
    return groups_desc[::-1], walk


def form_groups(
    lengths: Sequence[int],
    token_budget: int,
    extra: Sequence[int] | None = None,
    extra_budget: int | None = None,
) -> list[list[int]]:
    """Group a buffer by length; returns lists of indices into ``lengths``.

    Args:
        lengths: realised length of each buffered sample (after preprocessing; for a
            VLM, the backbone tokens: merged image tokens plus text).
        token_budget: ``L_max``, the padded-token budget of one group.
        extra: optional second count per sample (encoder patches, or images).
        extra_budget: the most ``extra`` one group of two or more samples may hold
            (real units, not padded).

    Returns:
        Groups ordered from the shortest samples to the longest, each ascending by
        length. Every index appears exactly once.

    >>> form_groups([3, 3, 3, 3, 9], token_budget=10)
    [[0, 1, 2], [3], [4]]
    """
    return trace_groups(lengths, token_budget, extra, extra_budget)[0]


def padded_tokens(group_lengths: Sequence[int]) -> int:
    """Tokens a group occupies once padded to its longest sample.

    >>> padded_tokens([100, 200])
    400
    """
    return len(group_lengths) * max(group_lengths, default=0)
