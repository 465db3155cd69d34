"""Collate functions: one padding collate for variable-length rows (:class:`PadCollate`),
and :func:`~youmu.torch.pack.collate_packed` for packed sequences.

Batching inside DataLoader workers matters: every tensor that crosses from a worker to
the trainer gets its own shared-memory segment from torch (about a millisecond of CPU on
each side), so one padded tensor per batch is far cheaper than one tensor per row; and
``collate_fn=SendCollate(lm_collate)`` (:class:`~youmu.torch.SendCollate`) hands even
those over inside the pickled batch, as youmu's own loaders do.

Two ready-made configurations of the one collate:

* :func:`collate_pad` — pad every 1-D column with ``pad_id`` and add its lengths
  (``<col>_lengths``): generic rows, e.g. ``YoumuDataset`` output;
* :data:`lm_collate` — language-model batches: ``input_ids`` padded with 0,
  ``labels`` with -100, and an ``attention_mask`` added (the online dynamic
  batching examples use it).

Example:
    >>> import torch
    >>> b = collate_pad([{"ids": torch.tensor([1, 2, 3])}, {"ids": torch.tensor([4])}])
    >>> b["ids"].tolist(), b["ids_lengths"].tolist()
    ([[1, 2, 3], [4, 0, 0]], [3, 1])
    >>> b = lm_collate([{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}, {"input_ids": [4], "labels": [4]}])
    >>> b["labels"].tolist(), b["attention_mask"].tolist()
    ([[1, 2, 3], [4, -100, -100]], [[1, 1, 1], [1, 0, 0]])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from youmu.errors import ArgumentTypeError

__all__ = ["PadCollate", "collate_pad", "lm_collate", "LM_PAD_VALUES"]

#: Pad values of language-model batches (``labels`` -100: ignored by the loss).
LM_PAD_VALUES: dict[str, int | float] = {"input_ids": 0, "labels": -100, "attention_mask": 0, "position_ids": 0}


def _as_tensor(value: Any) -> torch.Tensor | None:
    """A tensor view of a row value, or None when it is not numeric data."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.asarray(value))
    if isinstance(value, (list, tuple)):
        try:
            return torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def _pad_arrays(values: Sequence[Any], pad: int | float) -> np.ndarray | None:
    """``values`` padded into one ``[rows, longest]`` array when they are 1-D numpy
    arrays of one signed-integer or float dtype (what a stream with ``output="numpy"``
    yields): one allocation and a copy per row, no per-row tensors (about half the
    collate's CPU on tokenized rows). ``None`` for anything else, which the general
    path pads."""
    first = values[0]
    if not (isinstance(first, np.ndarray) and first.ndim == 1 and first.dtype.kind in "if"):
        return None
    dtype = first.dtype
    for v in values:
        if not (isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype == dtype):
            return None
    out = np.full((len(values), max(v.shape[0] for v in values)), pad, dtype=dtype)
    for i, v in enumerate(values):
        out[i, : v.shape[0]] = v
    return out


class PadCollate:
    """Right-pad every 1-D sequence field to the batch's longest; stack the rest.

    Per field: numbers become one tensor; 1-D sequences (tensors, numpy arrays, lists
    of numbers) are padded into ``[batch, longest]``; other tensors of one shape are
    stacked; anything else (strings, dicts) stays a list. ``"skipped"`` (the reports
    of rows an ``on_error="skip"`` transform skipped, :mod:`youmu.streams.skips`) becomes one
    list of the batch's reports.

    Args:
        pad_values: padding value per field; fields not named pad with ``pad_id``.
        pad_id: padding of fields not in ``pad_values``.
        attention_mask: add ``attention_mask`` (1 on real tokens) from ``input_ids``
            when the rows have none.
        lengths: add ``<field>_lengths`` (int64) for every padded field.
    """

    def __init__(
        self,
        pad_values: Mapping[str, int | float] | None = None,
        *,
        pad_id: int | float = 0,
        attention_mask: bool = True,
        lengths: bool = False,
    ) -> None:
        self.pad_values = dict(pad_values or {})
        self.pad_id = pad_id
        self.attention_mask = attention_mask
        self.lengths = lengths

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not rows:
            return {}
        for r in rows:
            if not isinstance(r, Mapping):
                raise ArgumentTypeError(f"{type(self).__name__} collates rows that are dicts of fields, got a "
                                        f"{type(r).__name__}")
        out: dict[str, Any] = {}
        for key in rows[0]:
            values = [r[key] for r in rows]
            if key == "skipped" and all(isinstance(v, list) for v in values):
                # the reports of rows an on_error="skip" transform skipped (youmu.streams.skips): one list a batch
                out[key] = [report for v in values for report in v]
                continue
            if all(isinstance(v, (int, float, np.integer, np.floating, np.bool_)) for v in values):
                out[key] = torch.tensor(values)
                continue
            padded_np = _pad_arrays(values, self.pad_values.get(key, self.pad_id))
            if padded_np is not None:
                out[key] = torch.from_numpy(padded_np)
                if self.lengths:
                    out[f"{key}_lengths"] = torch.tensor([v.shape[0] for v in values], dtype=torch.int64)
                continue
            tensors = [_as_tensor(v) for v in values]
            if any(t is None for t in tensors):
                out[key] = values
                continue
            ts: list[torch.Tensor] = tensors  # type: ignore[assignment]
            if all(t.dim() == 1 for t in ts):
                lens = torch.tensor([t.shape[0] for t in ts], dtype=torch.int64)
                pad = self.pad_values.get(key, self.pad_id)
                padded = torch.full((len(ts), int(lens.max())), pad, dtype=ts[0].dtype)
                for i, t in enumerate(ts):
                    padded[i, : t.shape[0]] = t
                out[key] = padded
                if self.lengths:
                    out[f"{key}_lengths"] = lens
            elif all(t.shape == ts[0].shape for t in ts):
                out[key] = torch.stack(ts)
            else:
                out[key] = values
        if self.attention_mask and "input_ids" in out and "attention_mask" not in out:
            ids = out["input_ids"]
            if isinstance(ids, torch.Tensor) and ids.dim() == 2:  # one comparison, not a write per row
                lens = torch.tensor([len(r["input_ids"]) for r in rows], dtype=torch.long)
                out["attention_mask"] = (torch.arange(ids.shape[1]) < lens[:, None]).long()
            else:
                mask = torch.zeros(ids.shape, dtype=torch.long)
                for i, r in enumerate(rows):
                    mask[i, : len(r["input_ids"])] = 1
                out["attention_mask"] = mask
        return out


def collate_pad(rows: list[dict[str, Any]], pad_id: int = 0) -> dict[str, Any]:
    """Pad 1-D tensor/array columns to the longest row (adds ``<col>_lengths``), stack
    scalar columns, keep anything else as a list: ``PadCollate(pad_id=pad_id,
    attention_mask=False, lengths=True)``."""
    return PadCollate(pad_id=pad_id, attention_mask=False, lengths=True)(rows)


#: ``PadCollate(LM_PAD_VALUES)``: language-model batches with an attention mask.
lm_collate = PadCollate(LM_PAD_VALUES)
