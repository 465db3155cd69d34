"""The aligner's handshake before its first round (ODB's DGAP protocol): every rank
puts its settings, epoch and counters in one fixed-length row, the rows are gathered
(one all_gather), and every rank reads the same answer from them — refused with a
typed error naming what differs, or the counters the epoch starts from (a resume on
some ranks may be a round or a step ahead of others: the furthest wins).

Example:
    >>> start = {"iteration": 0, "round": 2, "step": 5, "emitted": 40, "done": False}
    >>> rows = [handshake_row(7, 0, start), handshake_row(7, 0, dict(start, round=3, done=True))]
    >>> agreed_start(rows, done=False)
    {'iteration': 0, 'round': 3, 'step': 5, 'emitted': 40, 'done': False}
    >>> agreed_start([rows[0], handshake_row(8, 0, start)], done=False)
    Traceback (most recent call last):
    ...
    youmu.errors.LoaderError: ranks use different DynamicBatchLoader settings ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from youmu.errors import LoaderError, ProtocolError

__all__ = ["HANDSHAKE_MAGIC", "handshake_row", "agreed_start"]

#: "YOUMU": the first entry of the handshake row (a peer that is no youmu aligner of this version)
HANDSHAKE_MAGIC = 0x594F554D55


def handshake_row(fingerprint: int, epoch: int, start: Mapping[str, Any]) -> list[int]:
    """This rank's row: the settings' ``fingerprint``, the ``epoch`` and the counters of
    the state it starts from (``start``: iteration, round, step, emitted, done)."""
    return [HANDSHAKE_MAGIC, fingerprint, epoch, int(start["iteration"]), int(start["round"]), int(start["step"]),
            int(start["emitted"]), int(bool(start["done"]))]


def agreed_start(rows: Sequence[Sequence[int]], done: bool) -> dict[str, Any]:
    """The counters every rank starts from, read from every rank's row (``done``: this
    rank's data already ran out); refuses rows of another version, other settings,
    another epoch or another logical iteration."""
    if any(r[0] != HANDSHAKE_MAGIC for r in rows):
        raise ProtocolError("a peer is not a youmu DynamicBatchLoader of this version (handshake mismatch)")
    if len({r[1] for r in rows}) != 1:
        raise LoaderError(
            "ranks use different DynamicBatchLoader settings (token_budget, pool_size, join, loss_scaling, "
            "seed, dataset size, ...); they must match on every rank"
        )
    if len({r[2] for r in rows}) != 1:
        raise LoaderError(f"ranks iterate different epochs: {[r[2] for r in rows]} (call set_epoch on every rank)")
    live = [r for r in rows if not r[7]] or rows
    if len({r[3] for r in live}) != 1:
        raise LoaderError("ranks resumed from different logical iterations (states from different steps?)")
    return {
        "iteration": live[0][3],
        "round": max(r[4] for r in rows),
        "step": max(r[5] for r in rows),
        "emitted": max(r[6] for r in rows),
        "done": done,
    }
