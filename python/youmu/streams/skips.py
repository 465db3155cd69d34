"""Rows a transform finds bad: located (Parquet file, row in that file, stream
position) and either raised or — where the transform's policy says skip — dropped,
counted and reported with the sample delivered next to them, so exactly-once
accounting stays exact across DataLoader worker processes.

A transform signals a bad row with a :class:`youmu.errors.RowError` marked ``skip``
(its ``on_error="skip"`` policy): a per-row transform raises it
(:class:`youmu.vision.VisionTransform`'s :class:`~youmu.errors.ImageError`), a batched
one returns the errors of the rows it skipped beside the good rows of its batch
(:mod:`youmu.streams.batched`; :class:`youmu.text.Tokenize` and
:class:`youmu.text.ChatTemplate`'s :class:`~youmu.errors.TextError`), so a bad row
never takes its good neighbours with it. A skipped row's position counts like any
other (the stream's state moves past it, so a resumed stream skips the same rows and
reports each once); its report is a dict ``{"position", "file", "row", "reason",
"column", ...}`` plus its error's own fields (``"image"``, ``"path"`` of an image,
``"message"`` of a chat) in the ``"skipped"`` list of a delivered sample: the last
sample before it in the worker's shard, or the first one after it where none came
before. Under a skip policy every delivered sample has that list (empty where no row
was skipped next to it): counting the reports of the samples a DataLoader delivers
counts every skipped row once, whichever worker skipped it.

A pass with no good row at all is not quiet: a whole pass (from the start of the
worker's shard) whose every row was skipped raises the error's kind
(:class:`~youmu.errors.ImageError`, :class:`~youmu.errors.TextError`) with the
count and the first reason — a skip policy is there to drop the rare bad row, and a
shard where not one row is good is a wrong column or wrong data, which training on
zero samples would only hide. A resumed pass that only saw bad rows (the tail of a
shard) warns with the count (:class:`youmu.errors.YoumuWarning`) instead.

A row that raises is delivered after the good sample before it: that sample is
yielded first, then the error surfaces (in a DataLoader worker with its fields
carried through the message: :meth:`~youmu.errors.RowError.for_worker`).

Example:
    >>> from youmu.streams.skips import SkipLog
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

from youmu._internal.redaction import redact
from youmu.errors import RowError, YoumuWarning
from youmu.order.shuffle import global_rows
from youmu.streams.core import SKIP, in_worker_process

__all__ = ["ON_ERROR", "SkipLog", "locate", "report_skips", "reporting_pass"]

#: What a transform does with a bad row: raise its error, or skip it (reported).
ON_ERROR = ("raise", "skip")

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
    pages, offsets = index.locate_rows(global_rows(plan, page_rows, [position]))
    page, r = int(pages[0]), int(offsets[0])
    info = index.page_info(page)
    first = index.page_info(int(index.file_page_starts()[int(info["file_index"])]))["global_first_row"]
    return {"file": info["file"], "row": int(info["global_first_row"]) + r - int(first), "position": position}


def reporting_pass(rows: Iterator[Any], transform: Callable[[Any], Any], start: int,
                   where: Callable[[int], dict[str, Any]], log: SkipLog, *,
                   whole: bool = True) -> Iterator[tuple[int, Any]]:
    """``(position after, item or SKIP)`` of ``rows`` (from position ``start``) through a
    per-row ``transform``: a :class:`RowError` it raises is located and raised, or,
    marked ``skip``, reported (:func:`report_skips`)."""
    return report_skips(_outcomes(rows, transform, start, where), start, log, whole=whole)


def _outcomes(rows: Iterator[Any], transform: Callable[[Any], Any], start: int,
              where: Callable[[int], dict[str, Any]]) -> Iterator[tuple[int, Any]]:
    """``(position after, item, SKIP or the located RowError of a row to skip)``."""
    pos = start
    for row in rows:
        pos += 1
        try:
            item = transform(row)
        except RowError as e:
            located = e.located(**where(pos - 1))
            if not e.skip:
                raise (located.for_worker() if in_worker_process() else located) from None
            item = located
        yield pos, SKIP if item is None else item


def report_skips(outcomes: Iterator[tuple[int, Any]], start: int, log: SkipLog, *,
                 whole: bool = True) -> Iterator[tuple[int, Any]]:
    """``(position after, item or SKIP)`` of ``outcomes``, a pass from position ``start``
    whose items are samples, ``SKIP`` (a row dropped on purpose) or the located
    :class:`RowError` of a row to skip: that row is logged and reported in the
    ``"skipped"`` list of the sample delivered with it (every delivered mapping gets
    one). The last good sample is held until the next row is done, so the rows skipped
    after it travel with it (and its position covers them); an error the outcomes
    raise comes after that sample. ``whole=False``: the outcomes are a few rows of a
    pass read again (``ParquetStream.rows_at``), not a pass: none good among them is no
    error."""
    held: tuple[int, Any] | None = None
    reports: list[dict[str, Any]] = []

    def deliver(pos_item: tuple[int, Any]) -> tuple[int, Any]:
        item = pos_item[1]
        if isinstance(item, MutableMapping):
            item["skipped"] = list(item.get("skipped") or []) + reports
            reports.clear()
        return pos_item

    pos = start
    skipped = 0
    first: RowError | None = None
    delivered = False
    try:
        for pos, item in outcomes:
            if isinstance(item, RowError):
                skipped += 1
                first = first or item
                report = _report(item)
                log.add(report)
                reports.append(report)
                item = SKIP
            if item is SKIP:
                if held is not None:
                    held = (pos, held[1])
                else:
                    yield pos, SKIP  # reports wait for the first good sample
                continue
            if held is not None:
                yield deliver(held)
            held = (pos, item)
            delivered = True
    except Exception:
        if held is not None:  # the good sample before a raised row is not lost with it
            yield deliver(held)
        raise
    if held is not None:
        yield deliver(held)
    if first is not None and not delivered and whole:
        _no_good_row(first, skipped, start, pos)


def _report(e: RowError) -> dict[str, Any]:
    """The report of a skipped row: where it is, why, and where in the row (its error's
    fields: ``column``, and ``image``/``path`` of an image, ``message`` of a chat)."""
    report = {"position": e.position, "file": _shown(e.file), "row": e.row, "reason": _shown(e.reason)}
    for k in e._FIELDS:
        if k not in report and k not in ("batch_row", "skip"):
            v = getattr(e, k)
            report[k] = _shown(v) if isinstance(v, str) else v
    return report


def _shown(text: str | None) -> str | None:
    # reports are logged and delivered with samples: never a credential in them
    return None if text is None else redact(text)


def _no_good_row(first: RowError, skipped: int, start: int, end: int) -> None:
    """A pass that skipped rows and delivered none: an error for a whole pass, a
    warning for the tail a resumed pass saw (see the module doc)."""
    what = (f"on_error='skip' skipped all {skipped} rows of this {'pass' if start == 0 else 'resumed pass'} "
            f"(stream positions {start}-{end - 1}) and delivered none")
    if start > 0:
        warnings.warn(f"{what}; first: {_shown(first.reason)}", YoumuWarning, stacklevel=3)
        return
    column = f"the {first.column!r} column" if first.column is not None else "the column"
    e = first.located(skip=False)
    e = type(first)(f"{what}: {column} or its data is likely wrong; the first: {first.reason}",
                    **{k: getattr(e, k) for k in e._FIELDS})
    raise e.for_worker() if in_worker_process() else e
