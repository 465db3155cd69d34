"""Sequence packing for pretraining: token rows concatenated into fixed-length
sequences with document boundaries (``cu_seqlens``, ``position_ids``) for varlen
attention. Deterministic and resumable like the stream it wraps.

Example:
    >>> from youmu.torch import YoumuDataset, pack, collate_packed
    >>> ds = YoumuDataset("data/", columns=["input_ids"])                 # doctest: +SKIP
    >>> packed = pack(ds, seq_len=2048, eos_id=0)                          # doctest: +SKIP
    >>> loader = DataLoader(packed, batch_size=8, collate_fn=collate_packed)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset


class PackedDataset(IterableDataset):
    """Fixed-length sequences packed from a stream of token rows: a
    :class:`YoumuDataset` or a :class:`~youmu.torch.MapStream` (over a mixture, say).

    Each item is ``{"input_ids": LongTensor[seq_len], "position_ids": LongTensor[seq_len],
    "cu_seqlens": IntTensor[pieces + 1]}``. A *piece* is the part of one document inside
    one sequence: long documents continue into the next sequence as a new piece.
    ``position_ids`` restart at 0 at every piece, in step with ``cu_seqlens`` (varlen
    kernels, and trainers that derive boundaries from position resets, see the same
    segments). The last partial sequence is
    dropped unless ``pad_id`` is given (it is then padded and its padding forms a final
    pseudo-document).

    State: rows consumed and tokens already taken from the next row, per worker.
    """

    def __init__(
        self,
        dataset: Any,
        seq_len: int,
        column: str = "input_ids",
        eos_id: int | None = None,
        pad_id: int | None = None,
    ) -> None:
        super().__init__()
        if seq_len < 1:
            raise ValueError("seq_len must be >= 1")
        for needed in ("iter_positions", "state_dict", "load_state_dict", "_worker", "_positions"):
            if not hasattr(dataset, needed):
                raise TypeError(f"pack() needs a YoumuDataset or MapStream, got {type(dataset).__name__}")
        index = getattr(dataset, "index", None)
        # with a transform the column may be made on the fly (e.g. tokenized text)
        if index is not None and getattr(dataset, "transform", None) is None and column not in index.columns:
            raise ValueError(f"column {column!r} is not one of {index.columns}")
        self.dataset = dataset
        self.seq_len = int(seq_len)
        self.column = column
        self.eos_id = eos_id
        self.pad_id = pad_id
        self._resume: dict[int, tuple[int, int]] = {}
        self._current: dict[int, tuple[int, int]] = {}
        self._done: set[int] = set()  # workers whose iteration reached the end

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)
        self._resume, self._current, self._done = {}, {}, set()

    def state_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset.state_dict() | {"positions": {}}, "packing": dict(self._current)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state["dataset"])
        self._resume = {int(k): (int(v[0]), int(v[1])) for k, v in state["packing"].items()}
        self._current = dict(self._resume)
        self._done = set()

    def _tokens(self, row: Any) -> np.ndarray:
        t = row[self.column] if isinstance(row, dict) else row
        arr = t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        if self.eos_id is not None:
            arr = np.concatenate([arr, np.array([self.eos_id], dtype=arr.dtype)])
        return arr

    def _emit(self, pieces: list[np.ndarray]) -> dict[str, torch.Tensor]:
        ids = np.concatenate(pieces).astype(np.int64)
        lens = [len(p) for p in pieces]
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        pos = np.concatenate([np.arange(n) for n in lens]).astype(np.int64)
        return {
            "input_ids": torch.from_numpy(ids),
            "position_ids": torch.from_numpy(pos),
            "cu_seqlens": torch.from_numpy(cu),
        }

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        ds = self.dataset
        worker, _ = ds._worker()
        if worker in self._done:  # the previous iteration finished: start over
            self._done.discard(worker)
            self._current.pop(worker, None)
        row_pos, skip = self._resume.pop(worker, self._current.get(worker, (0, 0)))
        ds._positions[worker] = row_pos
        pieces: list[np.ndarray] = []
        have = 0
        end = row_pos
        for pos, row in ds.iter_positions():
            end = pos + 1
            if getattr(ds, "transform", None) is not None:
                # the wrapped dataset's transform (tokenize, filter) runs before packing
                row = ds.transform(row)
                if row is None:
                    continue
            toks = self._tokens(row)
            off = skip if pos == row_pos else 0
            while off < len(toks):
                take = min(self.seq_len - have, len(toks) - off)
                pieces.append(toks[off : off + take])
                have += take
                off += take
                if have == self.seq_len:
                    self._current[worker] = (pos, off) if off < len(toks) else (pos + 1, 0)
                    yield self._emit(pieces)
                    pieces, have = [], 0
        if have and self.pad_id is not None:
            pieces.append(np.full(self.seq_len - have, self.pad_id, dtype=pieces[0].dtype))
            self._current[worker] = (end, 0)
            yield self._emit(pieces)
        # Keep the end position (a state saved now resumes to the empty rest of the epoch);
        # a partial last sequence without pad_id is dropped, as documented.
        self._current[worker] = (end, 0)
        self._done.add(worker)


def pack(
    dataset: Any, seq_len: int, column: str = "input_ids", eos_id: int | None = None, pad_id: int | None = None
) -> PackedDataset:
    """Pack a dataset's token rows into ``seq_len`` sequences (see :class:`PackedDataset`)."""
    return PackedDataset(dataset, seq_len, column=column, eos_id=eos_id, pad_id=pad_id)


def collate_packed(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack packed sequences; ``cu_seqlens`` become one flat boundary list over the
    concatenated batch (the form flash-attention's varlen kernels take), with
    ``max_seqlen`` the longest document piece."""
    ids = torch.stack([x["input_ids"] for x in items])
    pos = torch.stack([x["position_ids"] for x in items])
    seq_len = ids.shape[1]
    cus = [items[0]["cu_seqlens"]] + [x["cu_seqlens"][1:] + i * seq_len for i, x in enumerate(items) if i > 0]
    cu = torch.cat(cus).to(torch.int32)
    max_len = int((cu[1:] - cu[:-1]).max()) if len(cu) > 1 else 0
    return {"input_ids": ids, "position_ids": pos, "cu_seqlens": cu, "max_seqlen": torch.tensor(max_len)}
