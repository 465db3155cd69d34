"""Sequence packing: token rows concatenated into fixed-length sequences with document
boundaries (``cu_seqlens``, ``position_ids``) for varlen attention — for pretraining,
and for supervised fine-tuning with ``label_column`` (the rows' ``labels`` packed in
step, as Hugging Face's ``DataCollatorWithFlattening`` packs them). Deterministic and
resumable like the stream it wraps. Torch-free: sequences are numpy arrays (a Ray
source loader packs without importing torch); :func:`youmu.torch.pack` is the same
stream as a torch ``IterableDataset`` of tensors.

Example:
    >>> from youmu.mixture.mapstream import MapStream
    >>> from youmu.streams.packing import pack
    >>> rows = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}, {"input_ids": [6, 7, 8, 9]}]
    >>> seqs = list(pack(MapStream(rows), seq_len=4, eos_id=0))
    >>> [s["input_ids"].tolist() for s in seqs], seqs[0]["cu_seqlens"].tolist()
    ([[1, 2, 3, 0], [4, 5, 0, 6], [7, 8, 9, 0]], [0, 4])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from youmu._internal.args import int_arg, opt_int_arg
from youmu.errors import ArgumentTypeError, ColumnNotFoundError, InvalidArgumentError, StateError, ValueOverflowError
from youmu.state.jobs import is_merged
from youmu.state.stream import PACK_FORMAT, PACK_POSITION_WIDTH, WRAPPED, decode_merged
from youmu.streams.core import SKIP, ShardedStream

__all__ = ["PackedStream", "pack"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_IGNORE = -100  # the label a loss ignores (PyTorch's cross-entropy ignore_index)


def _token_column_type(name: str, typ: Any) -> None:
    """Refuse, at construction, a column that cannot hold token rows: packed sequences
    are int64 token ids, so a float list would be truncated and a scalar has no tokens."""
    import pyarrow as pa

    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        value = typ.value_type
        if pa.types.is_integer(value):
            return
        raise ArgumentTypeError(f"pack() column {name!r} holds lists of {value}, not integer token ids")
    raise ArgumentTypeError(f"pack() column {name!r} is {typ}, not a list of integer token ids per row")


class PackedStream(ShardedStream[dict[str, Any], tuple[int, int]]):
    """Fixed-length sequences packed from a stream of token rows: a
    :class:`~youmu.streams.parquet.ParquetStream` or a
    :class:`~youmu.mixture.mapstream.MapStream` (over a mixture, say), or their torch views.

    Each item is ``{"input_ids": int64[seq_len], "position_ids": int64[seq_len],
    "cu_seqlens": int32[pieces + 1]}`` (numpy arrays; tensors in
    :class:`youmu.torch.PackedDataset`). A *piece* is the part of one document inside
    one sequence: long documents continue into the next sequence as a new piece.
    ``position_ids`` restart at 0 at every piece, in step with ``cu_seqlens`` (varlen
    kernels, and trainers that derive boundaries from position resets, see the same
    segments). With ``label_column`` (an SFT stream's ``labels``, e.g. from
    :class:`youmu.text.ChatTemplate`) each item also has ``"labels": int64[seq_len]``,
    the rows' labels in step with their ids (``eos_id``'s label is ``eos_id``) and
    ``-100`` at the first token of every piece: a causal LM that shifts labels (as
    ``transformers`` models do) then never learns a piece's first token from the end of
    the document before it. The last partial sequence is
    dropped unless ``pad_id`` is given (it is then padded and its padding forms a final
    pseudo-document, labelled ``-100``). Rows that come with a ``"skipped"`` list (an
    ``on_error="skip"`` transform's reports, :mod:`youmu.streams.skips`) give each item one:
    the reports travel with the sequence that holds the first token of the row they
    came with, once across resumes (those of a dropped partial last sequence are lost
    with it).

    State (:mod:`youmu.state.contract`): per worker, the row the next sequence starts in and
    the tokens of it already taken, with the wrapped stream's own state nested under
    ``"dataset"`` (as torchdata's nodes nest their source's). Packing reads the wrapped
    stream through the public methods of a positional stream
    (:class:`youmu.streams.core.PositionalStream`) only: ``iter_with_heads``,
    ``shard_length``, ``column_types`` and the stream contract.
    """

    state_format = PACK_FORMAT
    position_width = PACK_POSITION_WIDTH

    def __init__(
        self,
        dataset: Any,
        seq_len: int,
        column: str = "input_ids",
        eos_id: int | None = None,
        pad_id: int | None = None,
        label_column: str | None = None,
    ) -> None:
        super().__init__()
        self.seq_len = int_arg("seq_len", seq_len, minimum=1, maximum=_INT64_MAX)
        # ids are emitted as int64 whatever the column's type, so that is their range
        self.eos_id = opt_int_arg("eos_id", eos_id, minimum=_INT64_MIN, maximum=_INT64_MAX)
        self.pad_id = opt_int_arg("pad_id", pad_id, minimum=_INT64_MIN, maximum=_INT64_MAX)
        if not isinstance(column, str):
            raise ArgumentTypeError(f"column must be a str, got {type(column).__name__} {column!r}")
        if label_column is not None and (not isinstance(label_column, str) or label_column in ("", column)):
            raise ArgumentTypeError(f"label_column must be None or a column name other than {column!r}, got "
                                    f"{label_column!r}")
        for needed in ("iter_with_heads", "shard_length", "column_types", "state_dict", "load_state_dict",
                       "set_epoch"):
            if not callable(getattr(dataset, needed, None)):
                raise ArgumentTypeError(
                    f"pack() needs a positional youmu stream with iter_positions() (a YoumuDataset or MapStream), "
                    f"got {type(dataset).__name__}"
                )
        types = dataset.column_types()  # None: made on the fly (e.g. tokenized text)
        if types is not None:
            for name in (column, label_column):
                if name is None:
                    continue
                if name not in types:
                    raise InvalidArgumentError(f"pack() column {name!r} is not one of {list(types)}")
                _token_column_type(name, types[name])
        self.dataset = dataset
        self.column = column
        self.label_column = label_column

    # -- the stream contract ----------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        settings = {"seq_len": self.seq_len, "column": self.column, "eos_id": self.eos_id, "pad_id": self.pad_id}
        if self.label_column is not None:  # states saved without labels keep their settings
            settings["label_column"] = self.label_column
        return settings

    def _start(self) -> tuple[int, int]:
        return (0, 0)

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
        super().set_epoch(epoch)

    def _state_fields(self) -> dict[str, Any]:
        return {WRAPPED: self.dataset.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if is_merged(state):
            # youmu.merge_states: the wrapped stream holds the resumed chain (with the
            # tokens of partly packed rows); every worker of this job packs afresh
            st, epoch, _ = decode_merged(state, self.state_format, owner="PackedDataset", expect=self._settings(),
                                         wrapped=True)
            self.dataset.load_state_dict(st[WRAPPED])
            self._install(st, epoch, None, lambda: None)
            return
        inner = state.get(WRAPPED) if isinstance(state, Mapping) else None
        if isinstance(state, Mapping) and state.get("format") == self.state_format and not isinstance(inner, Mapping):
            raise StateError(f"PackedDataset state has no {WRAPPED!r} state (got {type(inner).__name__})")
        if isinstance(inner, Mapping):
            # the wrapped stream first: its data and shard must be this one's before
            # the packing positions (rows of it) can mean anything
            self.dataset.load_state_dict(inner)
        super().load_state_dict(state)

    def _check_positions(self, positions: dict[int, Any], epoch: int, num_workers: int) -> None:
        for worker, (row, skip) in positions.items():
            total = self.dataset.shard_length(worker, num_workers, epoch)
            if row > total or (skip and row >= total):
                raise StateError(
                    f"PackedDataset state field 'positions'[{worker}]=({row}, {skip}) is past the end of worker "
                    f"{worker}'s shard ({total} rows in epoch {epoch})"
                )

    # -- packing ------------------------------------------------------------------------------
    def _column(self, row: Any, column: str) -> np.ndarray:
        """One of the row's token columns as int64 (plus ``eos_id``); anything that is
        not a 1-d run of integers is refused, naming the column, rather than cast."""
        if isinstance(row, dict):
            if column not in row:
                raise ColumnNotFoundError(f"pack() column {column!r} is not in the row (it has {sorted(row)})")
            t = row[column]
        elif column != self.column:
            raise ArgumentTypeError(f"pack() label_column {column!r} needs rows that are dicts, got "
                                    f"{type(row).__name__}")
        else:
            t = row
        arr = self._as_array(t)
        if arr.ndim != 1:
            raise ArgumentTypeError(f"pack() column {column!r} must hold a 1-d list of token ids per row, got "
                                    f"{'a scalar' if arr.ndim == 0 else f'shape {arr.shape}'}")
        if arr.dtype.kind not in "iu":
            if arr.size or arr.dtype.kind not in "fO":
                raise ArgumentTypeError(f"pack() column {column!r} must hold integer token ids, got {arr.dtype}")
            arr = arr.astype(np.int64)  # an empty row of unknown type (a python [])
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) > _INT64_MAX:
            raise ValueOverflowError(f"pack() column {column!r} holds token id {int(arr.max())}, beyond the "
                                     "int64 range of packed input_ids")
        arr = arr.astype(np.int64, copy=False)
        if self.eos_id is not None:
            arr = np.concatenate([arr, np.array([self.eos_id], dtype=np.int64)])
        return arr

    def _as_array(self, value: Any) -> np.ndarray:
        """A row's token column as an array (the torch view takes tensors without a copy)."""
        return np.asarray(value)

    def _out(self, array: np.ndarray) -> Any:
        """One field of a packed sequence as this stream delivers it (the torch view: a tensor)."""
        return array

    def _tokens(self, row: Any) -> np.ndarray:
        """The row's tokens as a ``(channels, n)`` int64 array: its ids, and its labels
        in step with them when packing ``label_column``."""
        ids = self._column(row, self.column)
        if self.label_column is None:
            return ids[None, :]
        labels = self._column(row, self.label_column)
        if len(labels) != len(ids):
            raise InvalidArgumentError(f"pack() row has {len(ids)} {self.column!r} but {len(labels)} "
                                       f"{self.label_column!r}: labels must be in step with the ids")
        return np.stack([ids, labels])

    def _emit(self, pieces: list[np.ndarray], reports: list[Any] | None = None) -> dict[str, Any]:
        tokens = np.concatenate(pieces, axis=1).astype(np.int64)
        lens = [p.shape[1] for p in pieces]
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        pos = np.concatenate([np.arange(n) for n in lens]).astype(np.int64)
        out: dict[str, Any] = {
            "input_ids": self._out(np.ascontiguousarray(tokens[0])),
            "position_ids": self._out(pos),
            "cu_seqlens": self._out(cu),
        }
        if self.label_column is not None:
            labels = np.ascontiguousarray(tokens[1])
            labels[cu[:-1]] = _IGNORE  # no piece's first token is learnt from another document
            out["labels"] = self._out(labels)
        if reports is not None:
            out["skipped"] = reports
        return out

    def _pass(self, worker: int, num_workers: int, start: tuple[int, int]) -> Iterator[tuple[tuple[int, int], Any]]:
        row_pos, skip = start
        pieces: list[np.ndarray] = []
        have = 0
        end = row_pos
        first = True
        reports: list[Any] | None = None  # rows an on_error="skip" transform skipped, for the next sequence
        # head: tokens of a row that a job before a resume on another topology already
        # packed and delivered (youmu.order.resume); they are skipped
        for at, row, head in self.dataset.iter_with_heads(row_pos):
            end = at + 1
            pos, skipped = _own_position(at, row)
            toks = self._tokens(row)
            n = toks.shape[1]
            if first and skip and (pos != row_pos or skip >= n):
                # "tokens into row r" only means something for a row r with more tokens
                raise StateError(
                    f"PackedDataset state field 'positions'[{worker}]=({row_pos}, {skip}) is past the end of row "
                    f"{row_pos}" + (f" ({n} tokens)" if pos == row_pos else " (that row yields nothing)")
                )
            first = False
            off = skip if pos == row_pos and skip else head
            if skipped is not None:
                # reported with the sequence that holds the row's first token (a row
                # resumed part-way had them delivered with an earlier one)
                reports = (reports or []) + (skipped if not off else [])
            if off >= n and off and not (pos == row_pos and skip):
                # a merged state's tokens of a partly packed row: as checked as a direct
                # load's (the rest of the row must exist), else the row would vanish
                raise StateError(f"PackedDataset merged state field 'tokens' says {off} tokens of row {pos} were "
                                 f"packed, but that row has {n}: an edited state or other data")
            while off < n:
                take = min(self.seq_len - have, n - off)
                pieces.append(toks[:, off : off + take])
                have += take
                off += take
                if have == self.seq_len:
                    yield ((pos, off) if off < n else (end, 0)), self._emit(pieces, reports)
                    pieces, have = [], 0
                    reports = None if reports is None else []
        if first and skip:
            raise StateError(f"PackedDataset state field 'positions'[{worker}]=({row_pos}, {skip}) is past the end "
                             "of the shard")
        if have and self.pad_id is not None:
            pad = np.full((len(pieces[0]), self.seq_len - have), self.pad_id, dtype=np.int64)
            pad[1:] = _IGNORE
            pieces.append(pad)
            yield (end, 0), self._emit(pieces, reports)
        # The end position: a state saved now resumes to the empty rest of the epoch; a
        # partial last sequence without pad_id is dropped, as documented.
        yield (end, 0), SKIP


def _own_position(at: int, row: Any) -> tuple[int, list[Any] | None]:
    """``(the row's own position, the reports it carries)`` of a row the stream gives
    at position ``at``: a sample carrying the reports of rows an ``on_error="skip"``
    transform skipped right after it stands at the last of them (:mod:`youmu.streams.skips`:
    its position covers them), and a row resumed part-way must be found at its own."""
    skipped = row.get("skipped") if isinstance(row, dict) else None
    if not isinstance(skipped, list):
        return at, None
    covered = {r.get("position") for r in skipped if isinstance(r, Mapping)}
    pos = at
    while pos in covered:
        pos -= 1
    return pos, skipped


def pack(
    dataset: Any, seq_len: int, column: str = "input_ids", eos_id: int | None = None, pad_id: int | None = None,
    label_column: str | None = None,
) -> PackedStream:
    """Pack a stream's token rows into ``seq_len`` sequences of numpy arrays (see
    :class:`PackedStream`); ``label_column="labels"`` packs an SFT stream's labels in step."""
    return PackedStream(dataset, seq_len, column=column, eos_id=eos_id, pad_id=pad_id, label_column=label_column)
