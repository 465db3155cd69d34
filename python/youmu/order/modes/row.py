"""``shuffle="row"``: every row placed independently by one keyed permutation over all
rows, read in chunks of positions (one page read per distinct page in a chunk), with
no page windows.

Example:
    >>> from youmu.order.modes import ShuffleMode
    >>> sorted(ShuffleMode("row").position_order(6, 0, 0).range(0, 6).tolist())
    [0, 1, 2, 3, 4, 5]
"""

from __future__ import annotations

from typing import Any

from youmu.order.modes.base import ShuffleMode, permutation, register

__all__ = ["Row"]


@register
class Row(ShuffleMode):
    """One permutation over all rows."""

    name = "row"
    listed = 1
    permutes_rows = True

    def position_order(self, n_rows: int, seed: int, epoch: int) -> Any:
        return permutation(n_rows, seed, epoch, "rows")
