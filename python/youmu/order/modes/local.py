"""``shuffle="local"``: pages in file order, the rows of each window shuffled
together — the streaming shuffle-buffer baseline other loaders use.

Example:
    >>> from youmu.order.modes import ShuffleMode
    >>> ShuffleMode("local").page_order(5, 0, 0, 1) is None
    True
"""

from __future__ import annotations

from typing import Any

from youmu.order.modes.base import ShuffleMode, permutation, register

__all__ = ["Local"]


@register
class Local(ShuffleMode):
    """File order, each window's rows shuffled."""

    name = "local"
    listed = 2

    def window_order(self, n_rows: int, seed: int, epoch: int, window: int) -> Any:
        return permutation(n_rows, seed, epoch, f"window-{self}-{window}")
