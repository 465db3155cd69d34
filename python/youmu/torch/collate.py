"""Collate functions for variable-length token rows.

Batching inside DataLoader workers matters: every tensor that crosses from a worker to
the trainer gets its own shared-memory segment, so one padded tensor per batch is far
cheaper than one tensor per row.

Example:
    >>> import torch
    >>> from youmu.torch import collate_pad
    >>> b = collate_pad([{"ids": torch.tensor([1, 2, 3])}, {"ids": torch.tensor([4])}])
    >>> b["ids"].tolist(), b["ids_lengths"].tolist()
    ([[1, 2, 3], [4, 0, 0]], [3, 1])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def collate_pad(rows: list[dict[str, Any]], pad_id: int = 0) -> dict[str, Any]:
    """Pad 1-D tensor/array columns to the longest row (adds ``<col>_lengths``), stack
    scalar columns, keep anything else as a list."""
    if not rows:
        return {}
    out: dict[str, Any] = {}
    for key in rows[0]:
        vals = [r[key] for r in rows]
        first = vals[0]
        if isinstance(first, np.ndarray):
            vals = [torch.from_numpy(np.asarray(v)) for v in vals]
            first = vals[0]
        if isinstance(first, torch.Tensor) and first.dim() == 1:
            lengths = torch.tensor([len(v) for v in vals], dtype=torch.int64)
            padded = torch.full((len(vals), int(lengths.max()) if len(vals) else 0), pad_id, dtype=first.dtype)
            for i, v in enumerate(vals):
                padded[i, : len(v)] = v
            out[key] = padded
            out[f"{key}_lengths"] = lengths
        elif isinstance(first, torch.Tensor) and first.dim() == 0:
            out[key] = torch.stack(vals)
        elif isinstance(first, (int, float, np.integer, np.floating)):
            out[key] = torch.tensor(vals)
        else:
            out[key] = vals
    return out
