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
came before.

A pass with no good row at all is not quiet: a whole pass (from the start of the
worker's shard) whose every row was skipped raises an :class:`ImageError` with the
count and the first reason — a skip policy is there to drop the rare bad row, and a
shard where not one image decodes is a wrong column or wrong data, which training on
zero samples would only hide. A resumed pass that only saw bad rows (the tail of a
shard) warns with the count (:class:`youmu.errors.YoumuWarning`) instead.

A row that raises is delivered after the good sample before it: that sample is
yielded first, then the error surfaces (in a DataLoader worker with its fields
carried through the message: :meth:`ImageError.for_worker`).

Example:
    >>> from youmu.skips import SkipLog
    >>> SkipLog().count
    0
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from youmu.errors import ImageError, YoumuWarning
from youmu.positional import SKIP, in_worker_process
from youmu.redaction import redact
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
    if plan.mode.permutes_rows:
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
    skipped = 0
    delivered = False
    for row in rows:
        pos += 1
        try:
            item = transform(row)
        except ImageError as e:
            located = e.located(**where(pos - 1))
            if not e.skip:
                if held is not None:  # the good sample before it is not lost with it
                    yield deliver(held)
                    held = None
                raise (located.for_worker() if in_worker_process() else located) from None
            skipped += 1
            report = {"position": located.position, "file": _shown(located.file), "row": located.row,
                      "reason": _shown(located.reason), "column": located.column, "image": located.image,
                      "path": _shown(located.path)}
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
        delivered = True
    if held is not None:
        yield deliver(held)
    if skipped and not delivered:
        _no_good_row(reports, skipped, start, pos)


def _shown(text: str | None) -> str | None:
    # reports are logged and delivered with samples: never a credential in them
    return None if text is None else redact(text)


def _no_good_row(reports: list[dict[str, Any]], skipped: int, start: int, end: int) -> None:
    """A pass that skipped rows and delivered none: an error for a whole pass, a
    warning for the tail a resumed pass saw (see the module doc)."""
    first = reports[0] if reports else {}
    what = (f"on_error='skip' skipped all {skipped} rows of this {'pass' if start == 0 else 'resumed pass'} "
            f"(stream positions {start}-{end - 1}) and delivered none")
    if start > 0:
        warnings.warn(f"{what}; first: {first.get('reason')}", YoumuWarning, stacklevel=3)
        return
    e = ImageError(f"{what}: the image column or its data is likely wrong; the first: {first.get('reason')}",
                   column=first.get("column"), image=first.get("image"), path=first.get("path"),
                   file=first.get("file"), row=first.get("row"), position=first.get("position"))
    raise e.for_worker() if in_worker_process() else e
