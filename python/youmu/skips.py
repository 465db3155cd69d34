"""Rows a transform finds bad: located (Parquet file, row in that file, stream
position) and either raised or — where the transform's policy says skip — dropped,
counted and reported with the sample delivered next to them, so exactly-once
accounting stays exact across DataLoader worker processes.

A transform signals a bad row by raising :class:`youmu.errors.ImageError`
(:class:`youmu.vision.VisionTransform` does, ``skip=True`` under
``on_error="skip"``). A skipped row's position counts like any other (the stream's
state moves past it); its report is a dict ``{"position", "file", "row", "reason",
"column", "image", "path"}`` in the ``"skipped"`` list of a delivered sample: the
last sample before it in the worker's shard, or the first one after it where none
came before. Only a pass with no good row at all leaves its reports solely in the
worker's own :attr:`SkipLog.rows`.

Example:
    >>> from youmu.skips import SkipLog
    >>> SkipLog().count
    0
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from youmu.errors import ImageError
from youmu.positional import SKIP
from youmu.shuffle import positions_to_rows

__all__ = ["SkipLog", "locate", "reporting_pass"]

#: Reports a process keeps (the count is exact; the oldest reports are dropped).
KEEP_REPORTS = 1000


@dataclass
class SkipLog:
    """Rows skipped by this process: how many, and the latest reports."""

    count: int = 0
    rows: deque = field(default_factory=lambda: deque(maxlen=KEEP_REPORTS))

    def add(self, report: dict[str, Any]) -> None:
        self.count += 1
        self.rows.append(report)


def locate(index: Any, plan: Any, page_rows: np.ndarray, position: int) -> dict[str, Any]:
    """``{"file", "row", "position"}`` of stream ``position`` of ``plan``: the Parquet
    file and the row within it."""
    if plan.mode == "row":
        i, off = plan.window_at(position)
        pages, offsets = index.locate_rows(np.asarray(plan.rows_of(i)[off:off + 1], dtype=np.int64))
        page, r = int(pages[0]), int(offsets[0])
    else:
        page, r = positions_to_rows(plan, page_rows, [position])[0]
    info = index.page_info(page)
    first = index.page_info(int(index.file_page_starts()[int(info["file_index"])]))["global_first_row"]
    return {"file": info["file"], "row": int(info["global_first_row"]) + r - int(first), "position": position}


def reporting_pass(rows: Iterator[Any], transform: Callable[[Any], Any], start: int,
                   where: Callable[[int], dict[str, Any]], log: SkipLog) -> Iterator[tuple[int, Any]]:
    """``(position after, item or SKIP)`` of ``rows`` (from position ``start``) through
    ``transform``: an :class:`ImageError` is located and raised, or, marked ``skip``,
    logged and reported in the ``"skipped"`` list of the sample delivered with it. The
    last good sample is held until the next row is done, so the rows skipped after it
    travel with it (and its position covers them)."""
    held: tuple[int, Any] | None = None
    reports: list[dict[str, Any]] = []

    def deliver(pos_item: tuple[int, Any]) -> tuple[int, Any]:
        item = pos_item[1]
        if reports and isinstance(item, MutableMapping):
            item["skipped"] = list(item.get("skipped") or []) + reports
            reports.clear()
        return pos_item

    pos = start
    for row in rows:
        pos += 1
        try:
            item = transform(row)
        except ImageError as e:
            located = e.located(**where(pos - 1))
            if not e.skip:
                raise located from None
            report = {"position": located.position, "file": located.file, "row": located.row,
                      "reason": located.reason, "column": located.column, "image": located.image,
                      "path": located.path}
            log.add(report)
            reports.append(report)
            item = SKIP
        if item is None or item is SKIP:
            if held is not None:
                held = (pos, held[1])
            else:
                yield pos, SKIP  # reports wait for the first good sample
            continue
        if held is not None:
            yield deliver(held)
        held = (pos, item)
    if held is not None:
        yield deliver(held)
