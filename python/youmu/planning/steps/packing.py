"""Pack a balanced micro-batch into one varlen row.

With ``capacity=L``, a :class:`~youmu.planning.balanced_loader.BalancedLoader` micro-batch holds
at most ``L`` tokens, so its samples concatenate into one row with per-document
boundaries — the packed format of :func:`youmu.torch.pack` (``input_ids``,
``position_ids`` restarting at every document, flat int32 ``cu_seqlens``,
``max_seqlen``), here with a leading batch dimension of 1. Samples that are already
packed (they carry ``cu_seqlens``) keep their document boundaries.

Example:
    >>> b = pack_microbatch([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    >>> b["input_ids"].tolist(), b["position_ids"].tolist(), b["cu_seqlens"].tolist()
    ([[5, 6, 7, 8, 9]], [[0, 1, 2, 0, 1]], [0, 3, 5])
    >>> b["labels"].tolist()     # no prediction across a document boundary
    [[-100, 6, 7, -100, 9]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from youmu._internal.args import int_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["pack_microbatch"]


def _array(x: Any) -> np.ndarray:
    if hasattr(x, "numpy") and callable(x.numpy):
        x = x.detach().cpu().numpy() if hasattr(x, "detach") else x.numpy()
    return np.asarray(x).reshape(-1)


def pack_microbatch(samples: Sequence[Mapping[str, Any]], key: str = "input_ids", labels_key: str = "labels",
                    ignore_index: int = -100) -> dict[str, Any]:
    """Concatenate the samples' ``key`` tokens into one ``[1, n]`` row.

    Returns ``input_ids``, ``position_ids`` (``[1, n]`` int64), ``cu_seqlens`` (int32
    document boundaries), ``max_seqlen`` and ``labels``: the samples' own
    ``labels_key`` column when they have one, else ``input_ids`` with the first token
    of every document set to ``ignore_index`` (a shifted causal-LM loss then never
    predicts one document's first token from the previous document).

    >>> b = pack_microbatch([{"input_ids": [5, 6, 7], "cu_seqlens": [0, 1, 3]}, {"input_ids": [8, 9]}])
    >>> b["cu_seqlens"].tolist(), int(b["max_seqlen"])      # packed samples keep their documents
    ([0, 1, 3, 5], 2)
    """
    import torch

    for name, value in (("key", key), ("labels_key", labels_key)):
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{name} must be a column name (a string), got {type(value).__name__}")
    ignore_index = int_arg("ignore_index", ignore_index)
    if not samples:
        raise InvalidArgumentError("cannot pack an empty micro-batch")
    ids, labels, docs = [], [], []
    own_labels = all(isinstance(s, Mapping) and labels_key in s for s in samples)
    for s in samples:
        if not isinstance(s, Mapping) or key not in s:
            raise ArgumentTypeError(f"pack_microbatch needs mappings with a {key!r} column")
        toks = _array(s[key]).astype(np.int64)
        if "cu_seqlens" in s:
            cu = _array(s["cu_seqlens"]).astype(np.int64)
            if cu[0] != 0 or cu[-1] != toks.size:
                raise InvalidArgumentError("a sample's cu_seqlens does not cover its tokens")
            d = np.diff(cu)
        else:
            d = np.array([toks.size], dtype=np.int64)
        docs.append(d[d > 0])
        ids.append(toks)
        if own_labels:
            labels.append(_array(s[labels_key]).astype(np.int64))
    flat = np.concatenate(ids)
    lens = np.concatenate(docs)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    pos = np.concatenate([np.arange(n) for n in lens]).astype(np.int64) if lens.size else np.zeros(0, np.int64)
    if own_labels:
        lab = np.concatenate(labels)
    else:
        lab = flat.copy()
        lab[cu[:-1]] = ignore_index
    return {
        "input_ids": torch.from_numpy(flat)[None],
        "position_ids": torch.from_numpy(pos)[None],
        "cu_seqlens": torch.from_numpy(cu),
        "max_seqlen": torch.tensor(int(lens.max()) if lens.size else 0),
        "labels": torch.from_numpy(lab)[None],
    }
