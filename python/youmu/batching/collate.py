"""A padding collate for dict samples of 1-D sequences (optional convenience).

Example:
    >>> import torch
    >>> batch = pad_collate([{"input_ids": torch.tensor([1, 2, 3])}, {"input_ids": torch.tensor([4])}])
    >>> batch["input_ids"].tolist(), batch["attention_mask"].tolist()
    ([[1, 2, 3], [4, 0, 0]], [[1, 1, 1], [1, 0, 0]])
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["pad_collate", "PadCollate"]

_DEFAULT_PADS = {"input_ids": 0, "labels": -100, "attention_mask": 0, "position_ids": 0}


class PadCollate:
    """Right-pad every 1-D sequence field to the batch's longest; stack the rest.

    Args:
        pad_values: padding value per key (default: ``input_ids`` 0, ``labels`` -100,
            ``attention_mask`` 0, others 0).
        attention_mask: add an ``attention_mask`` from ``input_ids`` when missing.
    """

    def __init__(self, pad_values: Mapping[str, int | float] | None = None, attention_mask: bool = True) -> None:
        self.pad_values = dict(_DEFAULT_PADS)
        if pad_values:
            self.pad_values.update(pad_values)
        self.attention_mask = attention_mask

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        import torch

        if not samples:
            raise ValueError("cannot collate an empty batch")
        out: dict[str, Any] = {}
        keys = list(samples[0].keys())
        for key in keys:
            values = [s[key] for s in samples]
            if all(isinstance(v, (int, float)) for v in values):
                out[key] = torch.tensor(values)
                continue
            tensors = [torch.as_tensor(v) for v in values]
            if all(t.dim() == 1 for t in tensors):
                longest = max(t.shape[0] for t in tensors)
                pad = self.pad_values.get(key, 0)
                batch = torch.full((len(tensors), longest), pad, dtype=tensors[0].dtype)
                for i, t in enumerate(tensors):
                    batch[i, : t.shape[0]] = t
                out[key] = batch
            else:
                out[key] = torch.stack(tensors)
        if self.attention_mask and "input_ids" in out and "attention_mask" not in out:
            mask = torch.zeros(out["input_ids"].shape, dtype=torch.long)
            for i, s in enumerate(samples):
                mask[i, : len(s["input_ids"])] = 1
            out["attention_mask"] = mask
        return out


#: ``PadCollate()`` with the default pad values.
pad_collate = PadCollate()
