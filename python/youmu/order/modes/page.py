"""``shuffle="page"``: pages in keyed-permuted order, cut into windows of
``window_pages`` consecutive permuted pages, the rows of each window shuffled together
by a second keyed permutation (the aggressive buffer shuffle, made stateless). With
``page_slices = k > 1`` the permuted units are page slices (every page cut into ``k``
row ranges), so a window of about the same rows draws from ``k`` times as many pages.

Example:
    >>> from youmu.order.modes import ShuffleMode
    >>> ShuffleMode("page").page_order(5, 0, 0, 1).range(0, 5).tolist() != [0, 1, 2, 3, 4]
    True
"""

from __future__ import annotations

from typing import Any

from youmu.order.modes.base import ShuffleMode, permutation, register

__all__ = ["Page"]


@register
class Page(ShuffleMode):
    """Permuted pages (or page slices), each window's rows shuffled."""

    name = "page"
    listed = 0
    slices_pages = True

    def page_order(self, n_units: int, seed: int, epoch: int, page_slices: int) -> Any:
        # whole pages keep the key "pages", so page_slices=1 is the stream it always was
        return permutation(n_units, seed, epoch, "pages" if page_slices == 1 else "page-slices")

    def window_order(self, n_rows: int, seed: int, epoch: int, window: int) -> Any:
        return permutation(n_rows, seed, epoch, f"window-{self}-{window}")
