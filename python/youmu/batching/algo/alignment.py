"""Cross-rank group alignment (DGAP): message layout, target, split/overflow, round plan.

Everything here is a pure function of the gathered per-rank reports, so every rank
computes the same plan from the same all_gather result, and each rule can be
property-tested without processes. No torch.

Protocol summary (one round):

1. Each rank reports ``[capacity, n_groups, sizes..., tokens...]`` (one fixed-length
   int64 row, see :func:`encode_report`). ``n_groups`` is the number of candidate
   groups (> 0), or a status: :data:`NOT_READY` (0, buffer still filling),
   :data:`FINISHED` (-1, no data left on this rank), and two extensions of ODB's
   encoding: :data:`FAILED` (-2, a local error: every rank raises) and
   :data:`CLOSED` (-3, the local consumer stopped early; ``capacity`` then carries the
   number of steps it consumed).
2. :func:`plan_round` decides: emit, skip, finish (join), stop (non-join), fail, close.
3. On emit every active rank aligns to ``T_grp`` groups (ODB, Eq. 3, Alg. 1): ranks below
   split singletons off their longest multi-sample groups, ranks above keep the
   ``T_grp`` largest groups and recirculate the rest into their next buffer.

Example:
    >>> reports = [RankReport(6, 3, (4, 1, 1)), RankReport(6, 2, (5, 1)), RankReport(2, 1, (2,))]
    >>> plan = plan_round(reports, join=True)
    >>> plan.action, plan.target, [a.sizes for a in plan.aligned]
    ('emit', 2, [(4, 1), (5, 1), (1, 1)])
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from youmu.distributed.status import CLOSED, FAILED, stopped_peers
from youmu.errors import InvalidArgumentError, ProtocolError

__all__ = [
    "NOT_READY",
    "FINISHED",
    "RankReport",
    "AlignedSizes",
    "RoundPlan",
    "target_group_count",
    "split_groups",
    "keep_largest_groups",
    "align_groups",
    "align_sizes",
    "plan_round",
    "step_order",
    "message_length",
    "INITIAL_MAX_GROUPS",
    "initial_max_groups",
    "encode_oversized",
    "grown_max_groups",
    "message_bytes",
    "second_gather_bytes",
    "encode_report",
    "decode_report",
]

T = TypeVar("T")

#: ``n_groups`` status codes (ODB's 0 and -1, plus two extensions).
NOT_READY = 0
FINISHED = -1
_STATUS = (NOT_READY, FINISHED, FAILED, CLOSED)


@dataclass(frozen=True)
class RankReport:
    """What one rank contributes to a round.

    Attributes:
        capacity: output slots this rank can fill this round (``idx_budget``). Samples
            keep their slot until emitted, so this is the number of buffered samples.
            For :data:`CLOSED` it is the number of steps the consumer took.
        n_groups: candidate group count, or a status code.
        sizes: samples per candidate group, ordered short to long.
        tokens: token count per candidate group (for loss scaling and metrics).
    """

    capacity: int
    n_groups: int
    sizes: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()

    @property
    def samples(self) -> int:
        """Buffered samples ``S_r`` (0 unless the rank reports groups)."""
        return sum(self.sizes) if self.n_groups > 0 else 0


class AlignedSizes(NamedTuple):
    """Group sizes of one rank after alignment, and where each group came from.

    ``origins[j] = (i, k)``: aligned group ``j`` holds ``k`` samples of candidate group
    ``i`` (all of it unless ``i`` was split). ``overflow`` samples are recirculated.
    """

    sizes: tuple[int, ...]
    origins: tuple[tuple[int, int], ...]
    overflow: int


@dataclass(frozen=True)
class RoundPlan:
    """The decision of one round, identical on every rank.

    ``action`` is one of ``"emit"``, ``"skip"`` (someone is not ready: nobody emits,
    buffers are kept), ``"finish"`` (join mode: every rank is finished),
    ``"stop"`` (non-join mode: some rank finished, the logical iteration ends with
    no emission), ``"fail"`` and ``"close"`` (``ranks`` lists who).
    """

    action: str
    target: int = 0
    active: tuple[int, ...] = ()
    aligned: tuple[AlignedSizes | None, ...] = ()
    changed: bool = False
    ranks: tuple[int, ...] = ()
    reports: tuple[RankReport, ...] = field(default=(), repr=False)

    def step_samples(self, order: Sequence[int]) -> list[int]:
        """Global samples of each emitted step (``order[j]`` = group position)."""
        return [sum(a.sizes[p] for a in self.aligned if a is not None) for p in order]


def target_group_count(
    n_groups: Sequence[int], capacities: Sequence[int], sample_counts: Sequence[int]
) -> int | None:
    """``T_grp = max(min(max_{r in A} G_r, C_min+, S_min+), 1)`` (ODB, Eq. 3).

    Only active ranks (``n_groups > 0``) count, and the minima are over positive values
    only, so an empty or finished rank cannot collapse the target to zero. Returns
    ``None`` when no rank is active.

    >>> target_group_count([-1, 4, 6], [0, 10, 10], [0, 10, 10])
    6
    >>> target_group_count([3, 2, 1], [6, 6, 2], [6, 6, 2])
    2
    """
    if not len(n_groups) == len(capacities) == len(sample_counts):
        raise InvalidArgumentError("n_groups, capacities and sample_counts must have one entry per rank")
    active = [r for r, n in enumerate(n_groups) if n > 0]
    if not active:
        return None
    terms = [max(n_groups[r] for r in active)]
    caps = [capacities[r] for r in active if capacities[r] > 0]
    if caps:
        terms.append(min(caps))
    samples = [sample_counts[r] for r in active if sample_counts[r] > 0]
    if samples:
        terms.append(min(samples))
    return max(min(terms), 1)


def split_groups(groups: Sequence[Sequence[T]], target: int) -> list[list[T]]:
    """Split upward to ``target`` groups (ODB, Alg. 1, lines 3-5).

    Repeatedly takes the last (longest) sample of the last group holding two or more
    samples and places it as a singleton right after that group. This is the O(n)
    equivalent of rescanning from the end after every extraction. Stops early if
    every group is already a singleton.

    >>> split_groups([[1, 2, 3], [4], [5, 6]], 5)
    [[1, 2], [3], [4], [5], [6]]
    """
    need = target - len(groups)
    if need <= 0:
        return [list(g) for g in groups]
    out_reversed: list[list[T]] = []
    for g in reversed(groups):
        if need > 0 and len(g) >= 2:
            m = min(len(g) - 1, need)
            # the m longest samples become singletons, in ascending order, after the rest
            out_reversed.extend([x] for x in reversed(g[len(g) - m :]))
            out_reversed.append(list(g[: len(g) - m]))
            need -= m
        else:
            out_reversed.append(list(g))
    return out_reversed[::-1]


def keep_largest_groups(groups: Sequence[Sequence[T]], target: int) -> tuple[list[list[T]], list[T]]:
    """Overflow downward to ``target`` groups (ODB, Alg. 1, lines 7-8).

    Keeps the ``target`` groups with the most samples (ties: the earlier, shorter
    group), in their original short-to-long order, and returns the other groups'
    samples for recirculation.

    >>> keep_largest_groups([[1, 2], [3], [4, 5, 6], [7]], 2)
    ([[1, 2], [4, 5, 6]], [3, 7])
    """
    if target >= len(groups):
        return [list(g) for g in groups], []
    order = sorted(range(len(groups)), key=lambda j: -len(groups[j]))  # stable
    keep = set(order[:target])
    kept = [list(g) for j, g in enumerate(groups) if j in keep]
    overflow = [x for j, g in enumerate(groups) if j not in keep for x in g]
    return kept, overflow


def align_groups(groups: Sequence[Sequence[T]], target: int) -> tuple[list[list[T]], list[T]]:
    """Bring a rank's groups to ``target``: split if below, keep-largest if above.

    Returns ``(kept, overflow)``; ``kept`` has ``target`` groups whenever the rank holds
    at least ``target`` samples (guaranteed by ``T_grp <= S_min+``).
    """
    if target < 1:
        raise InvalidArgumentError(f"target must be >= 1, got {target}")
    if len(groups) < target:
        return split_groups(groups, target), []
    return keep_largest_groups(groups, target)


def align_sizes(sizes: Sequence[int], target: int) -> AlignedSizes:
    """:func:`align_groups` on group sizes alone.

    Every rank runs this for every other rank, so each knows all ranks' aligned group
    sizes (and so each step's global sample count) without another exchange.

    >>> align_sizes((5, 1), 3)
    AlignedSizes(sizes=(4, 1, 1), origins=((0, 4), (0, 1), (1, 1)), overflow=0)
    """
    if target < 1:
        raise InvalidArgumentError(f"target must be >= 1, got {target}")
    n = len(sizes)
    if n < target:
        need = target - n
        rev: list[tuple[int, int]] = []
        for i in range(n - 1, -1, -1):
            s = sizes[i]
            if need > 0 and s >= 2:
                m = min(s - 1, need)
                rev.extend([(i, 1)] * m)
                rev.append((i, s - m))
                need -= m
            else:
                rev.append((i, s))
        origins = tuple(rev[::-1])
        return AlignedSizes(tuple(k for _, k in origins), origins, 0)
    if n == target:
        return AlignedSizes(tuple(sizes), tuple((i, s) for i, s in enumerate(sizes)), 0)
    order = sorted(range(n), key=lambda j: -sizes[j])
    keep = sorted(order[:target])
    origins = tuple((i, sizes[i]) for i in keep)
    return AlignedSizes(tuple(sizes[i] for i in keep), origins, sum(sizes) - sum(sizes[i] for i in keep))


def plan_round(reports: Sequence[RankReport], join: bool) -> RoundPlan:
    """Decide a round from every rank's report (the same decision on every rank).

    Order of precedence: a failure anywhere, then an early close, then termination
    (join: every rank finished; non-join: any rank finished), then skip (a live rank
    is not ready or has no capacity), then emit.
    """
    reports = tuple(reports)
    if not reports:
        raise InvalidArgumentError("plan_round needs at least one report")
    for r, rep in enumerate(reports):
        _check_report(r, rep)
    failed, closed = stopped_peers([rep.n_groups for rep in reports])
    if failed:
        return RoundPlan("fail", ranks=failed, reports=reports)
    if closed:
        return RoundPlan("close", ranks=closed, reports=reports)
    finished = [rep.n_groups == FINISHED for rep in reports]
    if join and all(finished):
        return RoundPlan("finish", reports=reports)
    if not join and any(finished):
        return RoundPlan("stop", ranks=tuple(r for r, f in enumerate(finished) if f), reports=reports)
    live = [rep for rep in reports if rep.n_groups != FINISHED]
    if any(rep.n_groups == NOT_READY or rep.capacity <= 0 for rep in live):
        return RoundPlan("skip", reports=reports)
    target = target_group_count(
        [rep.n_groups for rep in reports], [rep.capacity for rep in reports], [rep.samples for rep in reports]
    )
    assert target is not None  # some live rank exists and has groups
    aligned = tuple(align_sizes(rep.sizes, target) if rep.n_groups > 0 else None for rep in reports)
    active = tuple(r for r, rep in enumerate(reports) if rep.n_groups > 0)
    changed = any(reports[r].n_groups != target for r in active)
    return RoundPlan("emit", target, active, aligned, changed, reports=reports)


def _check_report(rank: int, rep: RankReport) -> None:
    n = rep.n_groups
    if n < 0 and n not in _STATUS:
        raise ProtocolError(f"rank {rank} sent unknown status n_groups={n}")
    if n > 0:
        if len(rep.sizes) != n or any(s < 1 for s in rep.sizes):
            raise ProtocolError(f"rank {rank} sent n_groups={n} with sizes {rep.sizes[:8]}...")
        if rep.tokens and len(rep.tokens) != n:
            raise ProtocolError(f"rank {rank} sent {len(rep.tokens)} token counts for {n} groups")


def step_order(target: int, *, seed: int, epoch: int, iteration: int, round_id: int, shuffle: bool = True) -> list[int]:
    """Emission order of a round's ``target`` aligned groups, the same on every rank.

    Step ``j`` of the round carries group ``order[j]`` on every active rank. The order
    is a stateless function of its arguments (ODB's reference package keeps a stateful RNG
    that drifts when a rank emits nothing), so it survives resume and empty ranks.

    >>> step_order(4, seed=0, epoch=0, iteration=0, round_id=0, shuffle=False)
    [0, 1, 2, 3]
    >>> sorted(step_order(5, seed=1, epoch=2, iteration=0, round_id=3))
    [0, 1, 2, 3, 4]
    """
    order = list(range(target))
    if shuffle and target > 1:
        random.Random(f"youmu.batching:{seed}:{epoch}:{iteration}:{round_id}").shuffle(order)
    return order


def message_length(max_groups: int, with_tokens: bool = True) -> int:
    """Entries of one rank's row: ``2 + max_groups`` (+ ``max_groups`` with tokens)."""
    return 2 + max_groups * (2 if with_tokens else 1)


def message_bytes(world_size: int, max_groups: int, with_tokens: bool = True) -> int:
    """Bytes gathered by one primary all_gather: ``(2 + 2*max_groups) * W * 8``.

    >>> message_bytes(8, 1024)
    131200
    """
    return message_length(max_groups, with_tokens) * world_size * 8


def second_gather_bytes(world_size: int, target: int) -> int:
    """Bytes of the exact-mode second gather: one token count per aligned group.

    ODB sends a ``max_groups``-long vector; every rank knows ``T_grp``, so a
    ``T_grp``-long one carries the same information.
    """
    return target * world_size * 8


def encode_report(report: RankReport, max_groups: int, with_tokens: bool = True) -> list[int]:
    """Fixed-length row ``[capacity, n_groups, sizes (padded), tokens (padded)]``.

    >>> encode_report(RankReport(3, 2, (2, 1), (10, 9)), max_groups=3)
    [3, 2, 2, 1, 0, 10, 9, 0]
    """
    n = max(report.n_groups, 0)
    if n > max_groups:
        raise InvalidArgumentError(f"{n} groups do not fit max_groups={max_groups}")
    row = [report.capacity, report.n_groups]
    row += list(report.sizes[:n]) + [0] * (max_groups - n)
    if with_tokens:
        tokens = list(report.tokens[:n]) if report.tokens else [0] * n
        row += tokens + [0] * (max_groups - n)
    return row


#: Groups a primary row has room for until some rank reports more. Up to this buffer
#: size the row is ODB's fixed ``2 + 2 * pool_size`` entries; beyond it, rows
#: grow with the groups ranks actually report, so a huge ``pool_size`` costs memory
#: and bytes only once the data fills it.
INITIAL_MAX_GROUPS = 4096


def initial_max_groups(pool_size: int) -> int:
    """Room of the first primary row of a logical iteration.

    >>> initial_max_groups(1024), initial_max_groups(10**7)
    (1024, 4096)
    """
    return min(pool_size, INITIAL_MAX_GROUPS)


def encode_oversized(report: RankReport, max_groups: int, with_tokens: bool = True) -> list[int]:
    """The row of a rank whose groups do not fit ``max_groups``: only the header
    (``capacity``, ``n_groups``), which tells every rank how much room to make.

    >>> encode_oversized(RankReport(9, 5, (1,) * 5), max_groups=2)
    [9, 5, 0, 0, 0, 0]
    """
    return [report.capacity, report.n_groups] + [0] * (message_length(max_groups, with_tokens) - 2)


def grown_max_groups(rows: Sequence[Sequence[int]], max_groups: int, pool_size: int) -> int | None:
    """``None`` when every gathered row fits ``max_groups``; otherwise the room to
    exchange the round again with (at least double, at most ``pool_size``). Every
    rank computes the same from the same rows.

    >>> grown_max_groups([[4, 2], [9, 5]], max_groups=4, pool_size=100)
    8
    >>> grown_max_groups([[4, 2], [9, 5]], max_groups=8, pool_size=100) is None
    True
    """
    needed = max(int(r[1]) for r in rows)
    if needed <= max_groups:
        return None
    if needed > pool_size:
        raise ProtocolError(f"a rank reported {needed} groups, more than pool_size={pool_size}")
    return min(pool_size, max(needed, 2 * max_groups))


def decode_report(row: Sequence[int], max_groups: int, with_tokens: bool = True) -> RankReport:
    """Inverse of :func:`encode_report`.

    >>> decode_report([3, 2, 2, 1, 0, 10, 9, 0], max_groups=3)
    RankReport(capacity=3, n_groups=2, sizes=(2, 1), tokens=(10, 9))
    """
    if len(row) != message_length(max_groups, with_tokens):
        raise ProtocolError(f"row of {len(row)} entries, expected {message_length(max_groups, with_tokens)}")
    capacity, n = int(row[0]), int(row[1])
    k = max(n, 0)
    if k > max_groups:
        raise ProtocolError(f"n_groups={n} exceeds max_groups={max_groups}")
    sizes = tuple(int(x) for x in row[2 : 2 + k])
    tokens = tuple(int(x) for x in row[2 + max_groups : 2 + max_groups + k]) if with_tokens else ()
    return RankReport(capacity, n, sizes, tokens)
