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
import operator
import os
import pickle
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from youmu.errors import ArgumentTypeError, InvalidArgumentError, TextError

__all__ = ["TokenizerRef", "encode_texts", "fit_offsets", "flat_ids", "list_column", "row_offsets", "token_column",
           "tokenizer_kind", "tokenizer_path"]


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


#: A Hugging Face Hub repo id (``gpt2``, ``org/name``): the one kind of tokenizer
#: argument that is not a local path, and the only one ever looked up on the network.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
#: Endings of files that are no tokenizer: data given where the tokenizer goes.
_DATA_SUFFIXES = (".parquet", ".pq", ".arrow", ".jsonl", ".csv", ".txt", ".gz", ".zst")


def tokenizer_path(tokenizer: str | os.PathLike) -> str:
    """The tokenizer argument ``tokenizer`` as a path to load from: an existing local
    file or directory, or a Hub repo id (``org/name``: the only form
    ``transformers`` may fetch). Anything else that does not exist — a ``Path``, an
    absolute or ``./`` path, a name with a file ending — is an
    :class:`~youmu.errors.InvalidArgumentError` naming it, at once and without the
    network (``transformers`` would ask the Hub for it and fail minutes later)."""
    path = os.fspath(tokenizer)
    if os.path.exists(path):
        return path
    hub = (not isinstance(tokenizer, os.PathLike) and _HUB_ID.fullmatch(path) is not None
           and ".." not in path and not path.endswith((".json", *_DATA_SUFFIXES)))
    if not hub:
        raise InvalidArgumentError(f"tokenizer path {path!r} does not exist (pass the path of a tokenizer.json, of a "
                                   "saved tokenizer directory, or a Hub repo id 'org/name')")
    return path


def _optional(module: str, name: str, path: str, extra: str) -> Any:
    """``module``, imported on first use; without it, an ``ImportError`` naming the extra
    that installs it (the pages' first run in a fresh venv met a bare
    ``ModuleNotFoundError`` here, from inside a DataLoader worker)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"loading the tokenizer at {path!r} needs {module} ({name}): "
                          f"pip install 'youmu[{extra}]' (or pip install {module})") from e


def _load(path: str) -> Any:
    """The tokenizer at ``path`` (:func:`tokenizer_path`): whatever it holds that is no
    tokenizer is an :class:`~youmu.errors.InvalidArgumentError` naming it."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic == b"PAR1" or path.endswith(_DATA_SUFFIXES):
            kind = "a Parquet file" if magic == b"PAR1" else "a data file"
            raise InvalidArgumentError(f"tokenizer path {path!r} is {kind}, not a tokenizer: pass the path of a "
                                       "tokenizer.json or of a saved tokenizer directory")
        Tokenizer = _optional("tokenizers", "Tokenizer", path, "text").Tokenizer
        try:
            return Tokenizer.from_file(path)
        except Exception as e:  # whatever tokenizers raises for a file it cannot read
            raise InvalidArgumentError(f"tokenizer path {path!r} is not a tokenizer.json tokenizers can read "
                                       f"({type(e).__name__}: {e})") from None
    AutoTokenizer = _optional("transformers", "AutoTokenizer", path, "hf").AutoTokenizer
    local = os.path.isdir(path)
    try:
        # a directory is read where it is: never a Hub lookup of its name
        return AutoTokenizer.from_pretrained(path, local_files_only=True) if local else \
            AutoTokenizer.from_pretrained(path)
    except Exception as e:  # OSError, ValueError, ...: whatever transformers raises for it
        what = "directory" if local else "Hub repo id"
        raise InvalidArgumentError(f"tokenizer {what} {path!r} holds no tokenizer transformers can load "
                                   f"({type(e).__name__}: {e})") from None


class TokenizerRef:
    """A tokenizer as a transform holds it: the object itself, or a path loaded on first
    use in each process (the form that always reaches worker processes)."""

    def __init__(self, tokenizer: Any) -> None:
        self.kind = tokenizer_kind(tokenizer)
        self.path = tokenizer_path(tokenizer) if self.kind == "path" else None
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
    try:
        rows = list(out["input_ids"])
    except (TypeError, KeyError, IndexError):
        raise ArgumentTypeError(f"the tokenizer returned {type(out).__name__} for a list of texts, not a mapping "
                                "whose 'input_ids' hold a list of token ids per text") from None
    if len(rows) != len(texts):
        raise ArgumentTypeError(f"the tokenizer returned {len(rows)} rows of input_ids for {len(texts)} texts")
    return rows


def token_column(ids: Sequence[Sequence[int]] | Sequence[np.ndarray], who: str = "the tokenizer", *,
                 ints: bool = False) -> pa.Array:
    """Rows of token ids (lists of ints, or int arrays) as one Arrow ``list<int64>``
    array, built in one pass over the ids (no per-row Arrow arrays); ``who`` made
    them (named by the errors: ids that are not integers, see :func:`flat_ids`;
    ``ints``: lists known to hold Python ints, as ``tokenizers``' ``Encoding.ids`` do)."""
    offsets = fit_offsets(row_offsets(ids, who))  # before flattening them
    if len(ids) and isinstance(ids[0], np.ndarray):
        for row in ids:
            if not (isinstance(row, np.ndarray) and row.dtype.kind in "iu"):
                raise ArgumentTypeError(f"{who} returned token ids of type "
                                        f"{getattr(row, 'dtype', type(row).__name__)}, not integers")
        values = np.concatenate(ids) if len(ids) else np.zeros(0, dtype=np.int64)
        if values.dtype == np.uint64 and values.size and int(values.max()) > np.iinfo(np.int64).max:
            raise ArgumentTypeError(f"{who} returned token id {int(values.max())}, beyond int64")
        values = values.astype(np.int64, copy=False)
    else:
        values = flat_ids(ids, int(offsets[-1]), who, ints=ints)
    return list_column(offsets, values)


def fit_offsets(offsets: np.ndarray) -> np.ndarray:
    """``offsets`` if their total fits Arrow's 32-bit list offsets — checked before
    anything that size is allocated: one row longer than that is a
    :class:`~youmu.errors.TextError` naming it (``batch_row``), a batch of rows
    together an :class:`~youmu.errors.InvalidArgumentError` (lower ``batch_rows``)."""
    total = int(offsets[-1])
    if total > _INT32_MAX:
        lengths = np.diff(offsets)
        i = int(np.argmax(lengths))
        if lengths[i] > _INT32_MAX:
            raise TextError(f"{int(lengths[i])} token ids for one row, more than a list<int64> column holds "
                            f"({_INT32_MAX})", batch_row=i)
        raise InvalidArgumentError(f"{total} tokens in one batch of {len(offsets) - 1} rows; lower batch_rows")
    return offsets


_INT32_MAX = int(np.iinfo(np.int32).max)


def row_offsets(rows: Sequence[Sequence[Any]] | Sequence[np.ndarray], who: str = "the tokenizer") -> np.ndarray:
    """Where each of ``rows`` begins in their concatenation, and the total at the end
    (``int64``, ``len(rows) + 1``). A row that is not a sequence of ids (``None``, a
    number) is a :class:`~youmu.errors.TextError` naming it (``batch_row``) and
    ``who`` returned it."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    try:
        np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)), out=offsets[1:])
    except TypeError:
        i, row = next((i, r) for i, r in enumerate(rows) if not hasattr(r, "__len__"))
        raise TextError(f"{who} returned {type(row).__name__} for this row, not a list of token ids",
                        batch_row=i) from None
    return offsets


def flat_ids(rows: Sequence[Sequence[int]] | Sequence[np.ndarray], total: int,
             who: str = "the tokenizer", *, ints: bool = False) -> np.ndarray:
    """``rows`` of token ids (Python or numpy integers) concatenated into one ``int64``
    array of ``total`` ids, in one pass. Integers only: an id that is a float (``1.7``)
    or anything else is an :class:`~youmu.errors.ArgumentTypeError` naming ``who``
    returned it, never an id cut to ``1``. ``ints``: the rows are lists of Python ints
    (``tokenizers``' ``Encoding.ids``), so the per-id check is skipped (half the time).

    >>> flat_ids([[1, 2], [3]], 3).tolist()
    [1, 2, 3]
    """
    if ints:
        return np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=total)
    try:
        # operator.index: integers pass, a float raises (np.fromiter alone would cut it)
        return np.fromiter(map(operator.index, itertools.chain.from_iterable(rows)), dtype=np.int64, count=total)
    except (TypeError, ValueError, OverflowError) as e:
        bad = next((x for x in itertools.chain.from_iterable(rows) if not _is_id(x)), None)
        what = f"token id {bad!r} ({type(bad).__name__})" if bad is not None else f"token ids ({e})"
        raise ArgumentTypeError(f"{who} returned {what}: token ids must be integers in the int64 range") from None


def _is_id(x: Any) -> bool:
    try:
        return -(2**63) <= operator.index(x) < 2**63
    except TypeError:
        return False


def list_column(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """A ``list<int64>`` Arrow array of the rows ``values[offsets[i]:offsets[i + 1]]``
    (Arrow's 32-bit list offsets: more than 2³¹ ids is an
    :class:`~youmu.errors.InvalidArgumentError`).

    >>> list_column(np.array([0, 2, 2, 3]), np.array([7, 8, 9])).to_pylist()
    [[7, 8], [], [9]]
    """
    return pa.ListArray.from_arrays(pa.array(fit_offsets(offsets).astype(np.int32)),
                                    pa.array(values.astype(np.int64, copy=False)))
