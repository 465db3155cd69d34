"""The samples a ``DynamicBatchLoader`` state carries (an iterable dataset's pool: the
round's undelivered steps and its overflow), in a compact form that gives back the same
samples.

A tokenized sample is mostly integer sequences (``input_ids``, ``labels``) held as
int64: 8 bytes a token, and a torch tensor that views a page's column pickles the
whole page's storage with it (150 MB for a 256-sample pool of the SFT recipe, against
the 0.5 MB its tokens take). :func:`pack_sample` stores each 1-D integer sequence of a
dict sample — a CPU tensor, a numpy array or a list of ints — as a numpy array of the
narrowest integer type that holds its values (2 bytes a token for a vocabulary under
32,768, 4 for larger ones), with what it was; :func:`unpack_sample` makes it again
(same type, dtype and values). Other values are kept (a tensor that views a larger
storage is copied, so it pickles alone). The form is tagged, so a state of an earlier
version, whose samples are stored as they were, loads as it did.

Example:
    >>> import numpy as np
    >>> s = {"input_ids": np.array([5, 300, 7]), "labels": [-100, 300, 7], "id": 4}
    >>> p = pack_sample(s)
    >>> p["fields"]["input_ids"].dtype, p["fields"]["labels"].dtype
    (dtype('int16'), dtype('int16'))
    >>> t = unpack_sample(p, where="payload 0")
    >>> t["input_ids"].dtype == s["input_ids"].dtype and t["labels"] == s["labels"] and t["id"] == 4
    True
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from youmu.errors import StateError

__all__ = ["PACKED", "pack_sample", "unpack_sample"]

#: The tag of a packed sample (its version).
PACKED = "youmu.batching.sample/1"

# the integer dtypes a packed field may be stored in or restored to (never "O": objects are code)
_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_NARROW = (np.int8, np.int16, np.int32, np.int64)


def _narrow(values: np.ndarray) -> np.ndarray:
    """``values`` (1-D, integer) in the narrowest signed type that holds them."""
    if values.size == 0 or values.dtype == np.uint64:
        return np.ascontiguousarray(values)
    lo, hi = int(values.min()), int(values.max())
    for t in _NARROW:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return values.astype(t)
    return np.ascontiguousarray(values)  # pragma: no cover - int64 holds every signed value


def _field(value: Any) -> tuple[np.ndarray, str, str] | None:
    """``(narrow array, kind, dtype)`` of a 1-D integer sequence, else ``None``."""
    torch = sys.modules.get("torch")  # a tensor exists only where torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        if value.ndim != 1 or value.device.type != "cpu" or value.dtype.is_floating_point or value.is_complex() \
                or value.dtype == torch.bool:
            return None
        arr = value.numpy()
        return _narrow(arr), "torch", str(arr.dtype)
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.dtype.kind not in "iu":
            return None
        return _narrow(value), "numpy", str(value.dtype)
    if isinstance(value, list) and value and all(type(v) is int for v in value):
        arr = np.asarray(value)
        if arr.dtype.kind != "i":  # ints past int64
            return None
        return _narrow(arr), "list", "int64"
    return None


def _alone(value: Any) -> Any:
    """A tensor that views part of a larger storage, copied (pickled, a view takes the
    whole storage with it); anything else as is."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and value.device.type == "cpu" \
            and value.untyped_storage().nbytes() > value.nbytes:
        return value.clone()
    return value


def pack_sample(sample: Any) -> Any:
    """``sample`` as a state carries it (see the module doc): a dict's 1-D integer
    sequences packed, anything else as it is."""
    if not isinstance(sample, dict) or not all(isinstance(k, str) for k in sample):
        return _alone(sample)
    fields: dict[str, Any] = {}
    kinds: dict[str, list[str]] = {}
    for k, v in sample.items():
        got = _field(v)
        if got is None:
            fields[k] = _alone(v)
        else:
            fields[k], kind, dtype = got
            kinds[k] = [kind, dtype]
    if not kinds:
        return fields
    return {"format": PACKED, "fields": fields, "kinds": kinds}


def unpack_sample(packed: Any, *, where: str) -> Any:
    """The sample :func:`pack_sample` packed (a sample saved as it was passes through);
    a :class:`~youmu.errors.StateError` names ``where`` for a packed form that does not fit."""
    if not isinstance(packed, Mapping) or packed.get("format") != PACKED:
        return packed
    fields, kinds = packed.get("fields"), packed.get("kinds")
    if not isinstance(fields, Mapping) or not isinstance(kinds, Mapping):
        raise StateError(f"DynamicBatchLoader state: {where} is a packed sample without 'fields' and 'kinds'")
    out = dict(fields)
    for k, spec in kinds.items():
        arr = fields.get(k)
        if not (isinstance(spec, (list, tuple)) and len(spec) == 2 and spec[0] in ("torch", "numpy", "list")
                and spec[1] in _INTS and isinstance(arr, np.ndarray) and arr.ndim == 1 and arr.dtype.kind in "iu"):
            raise StateError(f"DynamicBatchLoader state: {where} field {k!r} is not a packed integer sequence")
        values = arr.astype(spec[1])
        if spec[0] == "torch":
            import torch

            out[k] = torch.from_numpy(values)
        else:
            out[k] = values.tolist() if spec[0] == "list" else values
    return out
