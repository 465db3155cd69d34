"""Sequence packing for torch: :func:`pack` — the torch-free packing of
:mod:`youmu.streams.packing` as an ``IterableDataset`` whose sequences are tensors
(numpy's arrays taken without a copy) — and :func:`collate_packed`, which batches them
in the form flash-attention's varlen kernels take.

Example:
    >>> from youmu.torch import YoumuDataset, pack, collate_packed
    >>> ds = YoumuDataset("data/", columns=["input_ids"])                 # doctest: +SKIP
    >>> packed = pack(ds, seq_len=2048, eos_id=0)                          # doctest: +SKIP
    >>> loader = DataLoader(packed, batch_size=8, collate_fn=collate_packed)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from youmu.errors import ArgumentTypeError, InvalidArgumentError
from youmu.streams.packing import PackedStream
from youmu.torch.sharded import ShardedStream

__all__ = ["PackedDataset", "pack", "collate_packed"]


class PackedDataset(PackedStream, ShardedStream[dict[str, torch.Tensor], tuple[int, int]]):
    """A :class:`youmu.streams.packing.PackedStream` as a torch ``IterableDataset``: the
    same sequences, states and checks (see there), each field a tensor —
    ``{"input_ids": LongTensor[seq_len], "position_ids": LongTensor[seq_len],
    "cu_seqlens": IntTensor[pieces + 1]}``, and ``"labels": LongTensor[seq_len]`` when
    packed with ``label_column``.
    """

    def _as_array(self, value: Any) -> np.ndarray:
        return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)

    def _out(self, array: np.ndarray) -> Any:
        return torch.from_numpy(array)


def pack(
    dataset: Any, seq_len: int, column: str = "input_ids", eos_id: int | None = None, pad_id: int | None = None,
    label_column: str | None = None,
) -> PackedDataset:
    """Pack a dataset's token rows into ``seq_len`` sequences (see :class:`PackedDataset`);
    ``label_column="labels"`` packs an SFT stream's labels in step."""
    return PackedDataset(dataset, seq_len, column=column, eos_id=eos_id, pad_id=pad_id, label_column=label_column)


def collate_packed(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack packed sequences (and their ``labels``, when packed with them);
    ``cu_seqlens`` become one flat boundary list over the concatenated batch (the form
    flash-attention's varlen kernels take), with ``max_seqlen`` the longest document
    piece."""
    if not items:
        raise InvalidArgumentError("collate_packed got an empty batch")
    for x in items:
        if not isinstance(x, Mapping) or not all(k in x for k in ("input_ids", "position_ids", "cu_seqlens")):
            raise ArgumentTypeError("collate_packed collates PackedDataset items (dicts of input_ids, position_ids "
                                    f"and cu_seqlens), got {type(x).__name__}")
    ids = torch.stack([x["input_ids"] for x in items])
    pos = torch.stack([x["position_ids"] for x in items])
    seq_len = ids.shape[1]
    cus = [items[0]["cu_seqlens"]] + [x["cu_seqlens"][1:] + i * seq_len for i, x in enumerate(items) if i > 0]
    cu = torch.cat(cus).to(torch.int32)
    max_len = int((cu[1:] - cu[:-1]).max()) if len(cu) > 1 else 0
    out: dict[str, Any] = {"input_ids": ids, "position_ids": pos, "cu_seqlens": cu,
                           "max_seqlen": torch.tensor(max_len)}
    if all("labels" in x for x in items):  # packed with label_column
        out["labels"] = torch.stack([x["labels"] for x in items])
    if all("skipped" in x for x in items):  # rows an on_error="skip" transform skipped: one list a batch
        out["skipped"] = [r for x in items for r in x["skipped"]]
    return out
