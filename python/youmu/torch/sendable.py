"""What a DataLoader worker hands to the training process, pickled where a failure can
still travel.

A DataLoader worker puts each batch on a ``multiprocessing`` queue, whose *feeder
thread* pickles it later. When that pickling fails (a transform returned a generator,
a lambda, an open file, a lock), CPython's feeder prints the traceback to the worker's
stderr and drops the batch; the training process then waits for it forever — torch's
DataLoader has no timeout by default, and a youmu loader waiting on it only reports a
stall long after. :class:`SendCollate` pickles the batch itself, in the worker, with
the same pickler the queue uses (torch's tensor reducers included: large tensors
still travel as shared memory), so a failure is an ordinary exception of the worker: torch
raises it in the training process at that batch, with the worker's traceback and the
original error, and the message names the field that could not be pickled. The queue
then only copies the pickled bytes, and the training process rebuilds the batch while
unpickling them (nothing to unwrap there). In the training process itself
(``num_workers=0``) the batch is returned as is.

Small tensors travel inside those bytes. torch's own reducer moves every tensor into a
shared-memory segment and passes its file descriptor through a connection to the
worker's resource-sharer thread; that costs about a millisecond of CPU per tensor, on
each side, whatever its size — more than tokenizing a document. A contiguous CPU tensor
of at most :data:`INLINE_TENSOR_BYTES` is copied into the pickle instead (the same
dtype, shape and values; a fresh, writable tensor on the training side); a view is
copied alone, not the storage it looks into. Larger ones, tensors that require grad
and subclasses keep torch's shared memory.

A conjugated or negated view (``t.conj()``, ``t._neg_view()``) is a lazy flag on the
tensor, not on its storage, and torch's reducer sends the storage alone: the flag would
be dropped and the training process would see the values unconjugated or unnegated.
Such a tensor is materialized first (``resolve_conj`` / ``resolve_neg``), so every
batch arrives with the values the worker saw.

Example:
    >>> send = SendCollate(list)
    >>> send([1, 2])                      # in the training process: untouched
    [1, 2]
    >>> unpicklable_field({"ids": [1, 2], "gen": (x for x in ())})
    "['gen']"
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Mapping
from multiprocessing.reduction import ForkingPickler
from typing import Any

from youmu.errors import LoaderError

__all__ = ["INLINE_TENSOR_BYTES", "SendCollate", "SendPickler", "unpicklable_field"]

# How deep the search for the unpicklable field goes (it runs only after a failure).
_MAX_DEPTH = 16

#: Tensors up to this many bytes cross inside the pickled batch rather than through
#: shared memory: up to about 256 KiB the copy costs the training process less CPU
#: than torch's segment and descriptor hand-off; at 1 MiB it costs more
#: (benches/RESULTS.md, "Online tokenization").
INLINE_TENSOR_BYTES = 256 << 10


def _inline_tensor(data: bytearray, dtype: Any, shape: tuple[int, ...]) -> Any:
    """The tensor :class:`SendPickler` copied into the pickle (rebuilt on its bytes)."""
    import torch

    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)


def _same(value: Any) -> Any:
    """What a materialized conjugate or negative view is rebuilt by: itself."""
    return value


class _Pickled:
    """A batch already pickled in the worker: the queue pickles it as "unpickle these
    bytes", so the receiving process gets the batch itself."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Callable[[bytes], Any], tuple[bytes]]:
        return pickle.loads, (self.data,)


class SendPickler(ForkingPickler):
    """The pickler of a DataLoader worker's queue (torch's reducers included), with
    small tensors copied into the pickle (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import torch

        self._tensor = torch.Tensor
        self._strided = torch.strided
        self._uint8 = torch.uint8

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, self._tensor) and (obj.is_conj() or obj.is_neg()):
            # the lazy bit lives on the view, not the storage torch's reducer sends
            return _same, (obj.resolve_conj().resolve_neg(),)
        if type(obj) is not self._tensor or not self._inlinable(obj):
            return NotImplemented
        raw = obj.detach().reshape(-1).view(self._uint8).numpy()
        return _inline_tensor, (pickle.PickleBuffer(raw.data), obj.dtype, tuple(obj.shape))

    def _inlinable(self, t: Any) -> bool:
        # a plain contiguous CPU tensor: its bytes alone say all of it (a view is copied
        # alone, not the storage it looks into)
        return (t.device.type == "cpu" and t.layout == self._strided and not t.requires_grad and not t.is_nested
                and not t.is_quantized and t.is_contiguous()
                and t.nbytes <= INLINE_TENSOR_BYTES)


def _children(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [(f"[{k!r}]", v) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    return []


def _pickles(value: Any) -> bool:
    try:
        ForkingPickler.dumps(value)
    except Exception:  # noqa: BLE001 - any failure means "this one does not pickle"
        return False
    return True


def unpicklable_field(value: Any) -> str:
    """The path of the innermost dict key / list index under which ``value`` holds
    something that does not pickle (``""``: ``value`` itself), searched only after a
    failure (each level is pickled once more)."""
    path = ""
    seen: set[int] = set()
    for _ in range(_MAX_DEPTH):
        if id(value) in seen:  # a structure holding itself: pickle copes, the search stops
            break
        seen.add(id(value))
        bad = next(((p, v) for p, v in _children(value) if not _pickles(v)), None)
        if bad is None:
            break
        path += bad[0]
        value = bad[1]
    return path


class SendCollate:
    """``collate_fn`` for a DataLoader with workers: collates, then (in a worker) pickles
    the batch so that a batch that cannot leave the worker raises
    :class:`~youmu.errors.LoaderError` there, naming the field, with the pickling
    error as its cause (see the module doc)."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        batch = self.collate_fn(samples)
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is None:
            return batch
        buf = io.BytesIO()
        try:
            SendPickler(buf, pickle.HIGHEST_PROTOCOL).dump(batch)
        except Exception as e:
            field = unpicklable_field(batch)
            where = f"the batch's field {field} holds" if field else "the batch is"
            raise LoaderError(
                f"DataLoader worker {info.id} cannot send its batch to the training process: {where} a value that "
                f"cannot be pickled ({type(e).__name__}: {e}). Everything a dataset's transform or collate_fn "
                "returns crosses a process boundary with workers: return tensors, arrays, numbers, strings, "
                "lists and dicts (or use num_workers=0)"
            ) from e
        return _Pickled(buf.getvalue())

    def __repr__(self) -> str:
        return f"SendCollate({self.collate_fn!r})"
