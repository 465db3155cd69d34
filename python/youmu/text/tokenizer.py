"""The tokenizer a text transform holds: a Hugging Face ``tokenizers.Tokenizer``, any
``transformers`` tokenizer, or a path each process loads one from — and what it takes
for one to reach DataLoader worker processes.

Workers started by ``fork`` (Linux's default) inherit the tokenizer; workers started
by ``spawn`` or ``forkserver`` (macOS's and Windows' default, and what
``multiprocessing_context=`` may ask for) receive it pickled. A tokenizer that
cannot be pickled (one with a custom Python pre-tokenizer, normalizer or decoder)
is refused there with an :class:`~youmu.errors.ArgumentTypeError` that names the
fixes: pass its path instead (every worker loads it), or use ``fork`` workers.

Example:
    >>> from tokenizers import Tokenizer, models
    >>> ref = TokenizerRef(Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]")))
    >>> ref.kind, encode_texts(ref.get(), ["a", "b a c"], add_special_tokens=True)
    ('tokenizers', [[0], [2]])
"""

from __future__ import annotations

import itertools
import os
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["TokenizerRef", "encode_texts", "flat_ids", "list_column", "row_offsets", "token_column",
           "tokenizer_kind"]


def tokenizer_kind(tokenizer: Any) -> str:
    """``"tokenizers"`` (a ``tokenizers.Tokenizer``: ``encode_batch``), ``"transformers"``
    (a ``transformers`` tokenizer: called on a list of texts) or ``"path"``; anything
    else is an :class:`~youmu.errors.ArgumentTypeError`."""
    if isinstance(tokenizer, (str, os.PathLike)):
        return "path"
    if callable(getattr(tokenizer, "encode_batch", None)) and callable(getattr(tokenizer, "to_str", None)):
        return "tokenizers"
    if callable(tokenizer) and callable(getattr(tokenizer, "convert_tokens_to_ids", None)):
        return "transformers"
    raise ArgumentTypeError(
        f"tokenizer must be a tokenizers.Tokenizer, a transformers tokenizer or a path to one "
        f"(tokenizer.json or a saved tokenizer directory), got {type(tokenizer).__name__}"
    )


def _load(path: str) -> Any:
    if path.endswith(".json") and os.path.isfile(path):
        from tokenizers import Tokenizer

        return Tokenizer.from_file(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


class TokenizerRef:
    """A tokenizer as a transform holds it: the object itself, or a path loaded on first
    use in each process (the form that always reaches worker processes)."""

    def __init__(self, tokenizer: Any) -> None:
        self.kind = tokenizer_kind(tokenizer)
        self.path = os.fspath(tokenizer) if self.kind == "path" else None
        self._tok = None if self.kind == "path" else tokenizer

    def get(self) -> Any:
        """The tokenizer (loaded from its path the first time in this process)."""
        if self._tok is None:
            assert self.path is not None
            self._tok = _load(self.path)
            tokenizer_kind(self._tok)  # a path must hold something we can call
        return self._tok

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_tok"] = None
        if self.path is not None:
            return state  # each process loads its own
        # pickled here, once: the bytes both prove that it pickles and carry it (the
        # tokenizer is not serialised a second time by the pickler around us)
        try:
            state["_blob"] = pickle.dumps(self._tok, pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # whatever the tokenizer's own pickling raises
            raise ArgumentTypeError(
                f"the tokenizer ({type(self._tok).__name__}) cannot be pickled into DataLoader worker processes "
                f"started by 'spawn' or 'forkserver' ({e}). Pass the path of a saved copy instead "
                "(tokenizer.save('tokenizer.json') or tokenizer.save_pretrained(dir)): each worker loads it; or "
                "use fork workers (multiprocessing_context='fork'), which inherit it"
            ) from None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        blob = state.pop("_blob", None)
        self.__dict__.update(state)
        if blob is not None:
            self._tok = pickle.loads(blob)


def encode_texts(tokenizer: Any, texts: Sequence[str], *, add_special_tokens: bool) -> list[list[int]]:
    """Token ids of ``texts``, all at once: ``tokenizers``' batch encoding (Rust threads)
    or a ``transformers`` tokenizer
    called on the list; special tokens (BOS/EOS) as the tokenizer's post-processor or
    ``add_special_tokens`` defines them."""
    if not texts:
        return []
    texts = list(texts)
    if tokenizer_kind(tokenizer) == "tokenizers":
        # encode_batch, not encode_batch_fast: the latter skips the offsets yet measured
        # 8-25% slower per CPU second here (tokenizers 0.23, benches/bench_text.py)
        return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)]
    out = tokenizer(texts, add_special_tokens=add_special_tokens, return_attention_mask=False,
                    return_token_type_ids=False, verbose=False)
    return list(out["input_ids"])


def token_column(ids: Sequence[Sequence[int]] | Sequence[np.ndarray]) -> pa.Array:
    """Rows of token ids (lists of ints, or int arrays) as one Arrow ``list<int64>``
    array, built in one pass over the ids (no per-row Arrow arrays)."""
    offsets = _fit(row_offsets(ids))  # before flattening them
    if len(ids) and isinstance(ids[0], np.ndarray):
        values = np.concatenate(ids).astype(np.int64, copy=False)
    else:
        values = flat_ids(ids, int(offsets[-1]))
    return list_column(offsets, values)


def _fit(offsets: np.ndarray) -> np.ndarray:
    """``offsets`` if their total fits Arrow's 32-bit list offsets."""
    total = int(offsets[-1])
    if total > np.iinfo(np.int32).max:
        raise InvalidArgumentError(f"{total} tokens in one batch of {len(offsets) - 1} rows; lower batch_rows")
    return offsets


def row_offsets(rows: Sequence[Sequence[Any]] | Sequence[np.ndarray]) -> np.ndarray:
    """Where each of ``rows`` begins in their concatenation, and the total at the end
    (``int64``, ``len(rows) + 1``)."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)), out=offsets[1:])
    return offsets


def flat_ids(rows: Sequence[Sequence[int]] | Sequence[np.ndarray], total: int) -> np.ndarray:
    """``rows`` of token ids (Python ints) concatenated into one ``int64`` array of
    ``total`` ids, in one pass."""
    try:
        return np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=total)
    except (TypeError, ValueError, OverflowError) as e:
        raise ArgumentTypeError(f"the tokenizer returned token ids that are not integers ({e})") from None


def list_column(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """A ``list<int64>`` Arrow array of the rows ``values[offsets[i]:offsets[i + 1]]``
    (Arrow's 32-bit list offsets: more than 2³¹ ids is an
    :class:`~youmu.errors.InvalidArgumentError`).

    >>> list_column(np.array([0, 2, 2, 3]), np.array([7, 8, 9])).to_pylist()
    [[7, 8], [], [9]]
    """
    return pa.ListArray.from_arrays(pa.array(_fit(offsets).astype(np.int32)),
                                    pa.array(values.astype(np.int64, copy=False)))
