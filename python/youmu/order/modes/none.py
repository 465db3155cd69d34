"""``shuffle="none"``: file order (every order is the default one).

Example:
    >>> from youmu.order.modes import ShuffleMode
    >>> ShuffleMode("none").window_order(5, 0, 0, 0) is None
    True
"""

from __future__ import annotations

from youmu.order.modes.base import ShuffleMode, register

__all__ = ["NoShuffle"]


@register
class NoShuffle(ShuffleMode):
    """File order."""

    name = "none"
    listed = 3
