"""``Tokenize``: a text column tokenized in the DataLoader workers, a page's rows at a
time (a batched transform, :mod:`youmu.streams.batched`), for pretraining corpora published
as text (FineWeb, DCLM: a ``text`` column) — into :func:`youmu.torch.pack`, or into
``DynamicBatchLoader`` / ``BalancedLoader`` as it is.

Example:
    >>> import pyarrow as pa
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> tok = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    >>> tok.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> out = Tokenize(tok)(pa.table({"text": ["hello world", "", "hi"], "id": [7, 8, 9]}))
    >>> out.column_names, out.column("input_ids").to_pylist()
    (['id', 'input_ids'], [[0, 1], [], [2]])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from youmu._internal.args import bool_arg, choice_arg, int_arg
from youmu.errors import ArgumentTypeError, ColumnNotFoundError, TextError
from youmu.streams.batched import BATCH_ROWS
from youmu.streams.skips import ON_ERROR
from youmu.text.tokenizer import TokenizerRef, encode_texts, token_column, tokenizer_kind

__all__ = ["Tokenize", "text_rows", "text_values"]


def text_values(table: pa.Table, column: str) -> list[str]:
    """The strings of ``table``'s ``column``; a missing column, a column that does not
    hold strings or a null row is a typed error naming the column (and the row)."""
    return text_rows(table, column, skip=False)[0]


def text_rows(table: pa.Table, column: str, *, skip: bool) -> tuple[list[str], np.ndarray | None, list[TextError]]:
    """``(texts, keep, errors)`` of ``table``'s ``column``: the strings of its good rows,
    which rows those are (``None``: all) and the :class:`~youmu.errors.TextError` of
    each null row, marked ``skip`` (``skip=False``: the first is raised). A missing
    column or one that does not hold strings is an error of the whole column."""
    if column not in table.column_names:
        raise ColumnNotFoundError(f"text column {column!r} is not in the rows (they have {table.column_names}; "
                                  "read it with columns=[...] that include it)")
    col = table.column(column)
    typ = col.type
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ)):
        raise TextError(f"text column holds {col.type}, not strings", column=column)
    if not col.null_count:
        return col.to_pylist(), None, []
    nulls = pc.is_null(col)
    if not skip:
        raise TextError("text is null", column=column, batch_row=int(pc.index(nulls, True).as_py()))
    keep = ~nulls.to_numpy(zero_copy_only=False)
    errors = [TextError("text is null", column=column, batch_row=int(i), skip=True) for i in np.flatnonzero(~keep)]
    return pc.filter(col, pa.array(keep)).to_pylist(), keep, errors


class Tokenize:
    """Tokenize a text column into ``input_ids`` (a batched transform: pass it as
    ``YoumuDataset(..., transform=Tokenize(tok))``).

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (encoded with its Rust batch encoder), any
            ``transformers`` tokenizer (called on the batch's texts), or the path of a
            ``tokenizer.json`` or a saved tokenizer directory (loaded once per worker
            process: what to pass when workers are spawned and the tokenizer does not
            pickle).
        column: the text column (strings; a null is a :class:`~youmu.errors.TextError`
            naming the file and row).
        output_column: where the token ids go (``list<int64>``).
        add_special_tokens: BOS/EOS as the tokenizer defines them (its post-processor;
            ``transformers``' ``add_special_tokens``). A tokenizer that adds no EOS
            (most LLaMA-style ones) gets one from ``pack(..., eos_id=...)``.
        keep_columns: keep the row's other columns (the text column is dropped).
        batch_rows: the most rows tokenized per call (default
            :data:`youmu.streams.batched.BATCH_ROWS`; a pass's first calls take fewer,
            :func:`youmu.streams.batched.chunk_sizes`).
        on_error: a bad row (a null text, a row the tokenizer returns no ids for):
            ``"raise"`` (default) its :class:`~youmu.errors.TextError` naming the
            column, file and row; ``"skip"``: the row is dropped and the rest of its
            batch kept, counted and reported in the ``"skipped"`` list of a delivered
            sample, as :class:`~youmu.vision.VisionTransform` reports its rows
            (:mod:`youmu.streams.skips`: every row delivered or reported once, across workers
            and resumes; a pass in which no row was good is an error). A column that
            holds no strings, or a tokenizer that returns ids that are not integers,
            is an error whatever the policy.

    The result is exactly what the tokenizer gives for each text on its own: the batch
    only decides how many texts its threads share. The stream's state counts rows,
    so a resume re-tokenizes from the first row not delivered.

    Threads: in ``fork`` workers of a process that already ran the tokenizer's threads,
    ``tokenizers`` encodes on one thread (its guard against waiting on threads the
    fork did not copy); ``TOKENIZERS_PARALLELISM=true`` turns that guard off, and such
    workers then hang. Parallelism across workers comes from ``num_workers``.

    Hand-off: a worker tokenizes as fast as the tokenizer alone, but a row handed to the
    training process alone costs torch a shared-memory segment per tensor, more than
    tokenizing it. Hand rows over in batches (``DataLoader(ds, batch_size=8,
    collate_fn=youmu.torch.SendCollate(lm_collate))``, :func:`~youmu.torch.pack`, or
    ``TrainerLoader``), as ``benches/bench_text.py`` measures.
    """

    #: called with a table of rows (youmu.streams.batched)
    batched = True

    def __init__(self, tokenizer: Any, column: str = "text", *, output_column: str = "input_ids",
                 add_special_tokens: bool = True, keep_columns: bool = True, batch_rows: int = BATCH_ROWS,
                 on_error: str = "raise") -> None:
        for name, value in (("column", column), ("output_column", output_column)):
            if not isinstance(value, str) or not value:
                raise ArgumentTypeError(f"{name} must be a column name, got {value!r}")
        self.tokenizer = TokenizerRef(tokenizer)
        self.column = column
        self.output_column = output_column
        self.add_special_tokens = bool_arg("add_special_tokens", add_special_tokens)
        self.keep_columns = bool_arg("keep_columns", keep_columns)
        self.batch_rows = int_arg("batch_rows", batch_rows, minimum=1)
        self.on_error = choice_arg("on_error", on_error, ON_ERROR)

    @property
    def reports_rows(self) -> bool:
        """Whether the stream reports the rows this transform skips (``on_error="skip"``)."""
        return self.on_error == "skip"

    def __repr__(self) -> str:
        return f"Tokenize({self.tokenizer.path or type(self.tokenizer.get()).__name__}, column={self.column!r})"

    def __call__(self, table: pa.Table) -> pa.Table | tuple[pa.Table, np.ndarray, list[TextError]]:
        skip = self.on_error == "skip"
        texts, keep, errors = text_rows(table, self.column, skip=skip)
        who = f"the tokenizer of Tokenize(column {self.column!r})"
        tok = self.tokenizer.get()
        rows = encode_texts(tok, texts, add_special_tokens=self.add_special_tokens)
        nones = [i for i, r in enumerate(rows) if isinstance(r, (str, bytes)) or not hasattr(r, "__len__")]
        if nones:  # rows it returned no ids for: those rows' errors
            good = np.arange(table.num_rows) if keep is None else np.flatnonzero(keep)
            found = [TextError(f"{who} returned {type(rows[i]).__name__} for this row, not a list of token ids",
                               column=self.column, batch_row=int(good[i]), skip=skip) for i in nones]
            if not skip:
                raise found[0]
            keep = np.ones(table.num_rows, dtype=bool) if keep is None else keep.copy()
            keep[good[nones]] = False
            dropped = set(nones)
            rows = [r for i, r in enumerate(rows) if i not in dropped]
            errors = sorted(errors + found, key=lambda e: int(e.batch_row or 0))
        if keep is not None:  # the rows skipped hold no ids: one row out per row in
            full: list[Any] = [[] for _ in range(table.num_rows)]
            for i, r in zip(np.flatnonzero(keep).tolist(), rows):
                full[i] = r
            rows = full
        # tokenizers' Encoding.ids are Python ints: no per-id type check
        ids = token_column(rows, who, ints=tokenizer_kind(tok) == "tokenizers")
        rest = table.drop_columns([self.column]) if self.keep_columns else pa.table({})
        if self.output_column in rest.column_names:
            rest = rest.drop_columns([self.output_column])
        out = pa.table({self.output_column: ids}) if not rest.num_columns else rest.append_column(self.output_column,
                                                                                                     ids)
        return out if keep is None else (out, keep, errors)
