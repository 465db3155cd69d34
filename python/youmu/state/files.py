"""Loader states as data, never code: the one codec every integration uses to put a
state into a file or a checkpoint blob.

A pickled checkpoint runs whatever its author wrote into it when it is loaded (a
``__reduce__`` names any callable), so youmu never unpickles a state. States are small
trees of ints and strings, with a few values JSON lacks: dicts with int keys (worker
positions), tuples, and — in a planning loader's carried samples — bytes, numpy arrays
and torch tensors. Those are written as tagged JSON objects (``{"__youmu__": "tuple",
...}``; an array as its dtype, shape and base64 bytes), so a state round-trips exactly
and loading one builds only plain data. Anything else in a state is refused when it is
saved, naming where it sits.

:func:`write_state`/:func:`read_state` store a state in a file (written atomically);
a missing, empty, truncated, foreign or pickled file is a
:class:`~youmu.errors.StateError` naming the file. :func:`to_plain`/:func:`from_plain`
give the same encoding as a plain tree for frameworks that save it themselves
(Lightning's and Accelerate's checkpoints).

Example:
    >>> blob = dumps({"format": "youmu.MapStream/1", "positions": {0: 5}, "pack": (3, 4)})
    >>> loads(blob, where="a blob")
    {'format': 'youmu.MapStream/1', 'positions': {0: 5}, 'pack': (3, 4)}
    >>> loads(b"", where="state.json")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: state.json is empty: not a youmu state file (truncated by an interrupted save?)
"""

from __future__ import annotations

import base64
import json
import math
import os
from collections.abc import Mapping
from typing import Any

from youmu.errors import StateError
from youmu.state.bounds import MAX_INT_BITS, check_array_shape, check_encoded_tree, check_json_depth

__all__ = ["FORMAT", "to_plain", "from_plain", "dumps", "loads", "write_state", "read_state", "is_plain_state",
           "envelope", "open_envelope"]

#: The envelope's format tag: what :func:`dumps` writes and :func:`loads` accepts.
FORMAT = "youmu.StateFile/1"

_TAG = "__youmu__"
# numpy dtype kinds a state may hold: numbers and bools (never "O": objects are code)
_NUMPY_KINDS = "biufc"
_PICKLE_MAGIC = (b"\x80", )  # every pickle protocol >= 2 starts with PROTO (0x80)


def _where(path: str, key: Any) -> str:
    return f"{path}[{key!r}]"


def _array(kind: str, dtype: str, shape: list[int], data: bytes) -> dict[str, Any]:
    return {_TAG: kind, "dtype": dtype, "shape": shape, "b64": base64.b64encode(data).decode("ascii")}


def _plain(obj: Any, path: str) -> Any:
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {_TAG: "float", "repr": repr(obj)}
    if isinstance(obj, list):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, tuple):
        return {_TAG: "tuple", "items": [_plain(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) for k in obj) and _TAG not in obj:
            return {k: _plain(v, _where(path, k)) for k, v in obj.items()}
        return {_TAG: "dict", "items": [[_plain(k, f"{path} key"), _plain(v, _where(path, k))] for k, v in obj.items()]}
    if isinstance(obj, (bytes, bytearray)):
        return {_TAG: "bytes", "b64": base64.b64encode(bytes(obj)).decode("ascii")}
    module = type(obj).__module__.split(".", 1)[0]
    if module == "numpy":
        import numpy as np

        arr = np.asarray(obj)
        if arr.dtype.kind not in _NUMPY_KINDS:
            raise StateError(f"cannot save a numpy {arr.dtype} value in a youmu state (at {path}): only numeric "
                             "and bool arrays are stored")
        kind = "ndarray" if isinstance(obj, np.ndarray) else "npscalar"
        return _array(kind, arr.dtype.str, list(arr.shape), np.ascontiguousarray(arr).tobytes())
    if module == "torch" and type(obj).__name__ in ("Tensor", "Parameter"):
        import torch

        t = obj.detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return _array("tensor", str(t.dtype).removeprefix("torch."), list(t.shape), raw)
    raise StateError(f"cannot save a {type(obj).__module__}.{type(obj).__qualname__} in a youmu state (at {path}): "
                     "states hold ints, floats, strings, bools, None, lists, tuples, dicts, bytes, numpy arrays "
                     "and torch tensors (a sample with other values cannot be carried in a state file)")


def to_plain(state: Any) -> Any:
    """``state`` as a JSON-compatible tree (tagged objects for the values JSON lacks);
    a value of another type is a :class:`~youmu.errors.StateError` naming where it sits.

    >>> to_plain({"positions": {0: 5}})
    {'positions': {'__youmu__': 'dict', 'items': [[0, 5]]}}
    """
    return _plain(state, "state")


def _bad(where: str, path: str, why: str) -> StateError:
    return StateError(f"{where}: not a valid youmu state ({path}: {why})")


def _decoded_bytes(node: Mapping[str, Any], where: str, path: str) -> bytes:
    raw = node.get("b64")
    if not isinstance(raw, str):
        raise _bad(where, path, "'b64' must be a base64 string")
    try:
        return base64.b64decode(raw.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise _bad(where, path, "'b64' is not valid base64") from None


def _shape(node: Mapping[str, Any], itemsize: int, where: str, path: str) -> tuple[int, ...]:
    try:
        return check_array_shape(node.get("shape"), itemsize, where=path)
    except StateError as e:
        raise _bad(where, path, str(e).removeprefix(f"{path}: ")) from None


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _from_array(node: Mapping[str, Any], kind: str, where: str, path: str) -> Any:
    dtype = node.get("dtype")
    if not isinstance(dtype, str):
        raise _bad(where, path, "'dtype' must be a string")
    if kind == "tensor":
        import torch

        tdtype = getattr(torch, dtype, None)
        if not isinstance(tdtype, torch.dtype):
            raise _bad(where, path, f"unknown torch dtype {dtype!r}")
        size = torch.empty((), dtype=tdtype).element_size()
        shape, data = _shape(node, size, where, path), _decoded_bytes(node, where, path)
        if len(data) != _numel(shape) * size:
            raise _bad(where, path, f"{len(data)} bytes for a {dtype} tensor of shape {list(shape)}")
        if not data:
            return torch.empty(shape, dtype=tdtype)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(tdtype).reshape(shape)
    import numpy as np

    try:
        ndtype = np.dtype(dtype)
    except TypeError:
        raise _bad(where, path, f"unknown numpy dtype {dtype!r}") from None
    if ndtype.kind not in _NUMPY_KINDS:
        raise _bad(where, path, f"numpy dtype {dtype!r} is not numeric")
    shape, data = _shape(node, ndtype.itemsize, where, path), _decoded_bytes(node, where, path)
    if len(data) != _numel(shape) * ndtype.itemsize:
        raise _bad(where, path, f"{len(data)} bytes for a {dtype} array of shape {list(shape)}")
    arr = np.frombuffer(data, dtype=ndtype).reshape(shape).copy()
    if kind == "npscalar":
        if shape:
            raise _bad(where, path, "a numpy scalar has shape []")
        return arr[()]
    return arr


def _from(node: Any, where: str, path: str) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_from(v, where, f"{path}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, dict):
        raise _bad(where, path, f"a {type(node).__name__} is not JSON data")
    kind = node.get(_TAG)
    if kind is None:
        return {k: _from(v, where, _where(path, k)) for k, v in node.items()}
    if kind in ("tuple", "dict"):
        items = node.get("items")
        if not isinstance(items, list):
            raise _bad(where, path, f"a tagged {kind} needs a list of 'items'")
        if kind == "tuple":
            return tuple(_from(v, where, f"{path}[{i}]") for i, v in enumerate(items))
        out: dict[Any, Any] = {}
        for i, pair in enumerate(items):
            if not isinstance(pair, list) or len(pair) != 2:
                raise _bad(where, path, f"dict item {i} must be a [key, value] pair")
            key = _from(pair[0], where, f"{path} key {i}")
            try:
                out[key] = _from(pair[1], where, _where(path, key))
            except TypeError:
                raise _bad(where, path, f"dict key {i} is not hashable") from None
        return out
    if kind == "bytes":
        return _decoded_bytes(node, where, path)
    if kind == "float":
        text = node.get("repr")
        if text not in ("nan", "inf", "-inf"):
            raise _bad(where, path, f"a tagged float is nan, inf or -inf, got {text!r}")
        return float(text)
    if kind in ("ndarray", "npscalar", "tensor"):
        return _from_array(node, kind, where, path)
    raise _bad(where, path, f"unknown tag {kind!r}")


def from_plain(tree: Any, *, where: str = "state") -> Any:
    """The state :func:`to_plain` encoded, checked node by node (a malformed tree is a
    :class:`~youmu.errors.StateError` naming ``where`` and the node), and first as a
    whole (:mod:`youmu.state.bounds`: no deeper than a state's encoding, no integer past
    64 bits, nothing holding itself)."""
    check_encoded_tree(tree, where=where)
    return _from(tree, where, "state")


def is_plain_state(obj: Any) -> bool:
    """Whether ``obj`` is the envelope :func:`envelope` makes (``{"format": FORMAT, ...}``)."""
    return isinstance(obj, Mapping) and obj.get("format") == FORMAT


def envelope(state: Any) -> dict[str, Any]:
    """``state`` as plain data inside a tagged envelope: what youmu hands frameworks that
    write their own checkpoints (``torch.save`` of it holds no object but dicts, lists,
    strings and numbers).

    >>> envelope((1, 2))
    {'format': 'youmu.StateFile/1', 'state': {'__youmu__': 'tuple', 'items': [1, 2]}}
    """
    return {"format": FORMAT, "state": to_plain(state)}


def open_envelope(obj: Any, *, where: str) -> Any:
    """The state inside an :func:`envelope` (checked), else a :class:`StateError`."""
    if not is_plain_state(obj):
        raise StateError(f"{where}: not a youmu state (no {FORMAT!r} format tag)")
    if "state" not in obj:
        raise StateError(f"{where}: the youmu state envelope has no 'state' field")
    return from_plain(obj["state"], where=where)


def dumps(state: Any) -> bytes:
    """``state`` as UTF-8 JSON bytes (the envelope of :func:`envelope`)."""
    return json.dumps(envelope(state), separators=(",", ":"), allow_nan=False).encode()


def loads(data: bytes | bytearray | memoryview, *, where: str) -> Any:
    """The state in ``data`` (bytes from :func:`dumps`); ``where`` names the file or blob
    in every error. A pickle is refused without being read: unpickling runs code."""
    data = bytes(data)
    if not data.strip():
        raise StateError(f"{where} is empty: not a youmu state file (truncated by an interrupted save?)")
    if data.startswith(_PICKLE_MAGIC):
        raise StateError(
            f"{where} is a pickle: youmu no longer reads pickled loader states, since loading a pickle runs any code "
            "its author put in it. Resume from a checkpoint saved by this youmu version (states are JSON now), or, "
            "for a checkpoint you trust, unpickle it yourself and call loader.load_state_dict on the result"
        )
    check_json_depth(data, where=where)
    try:
        tree = json.loads(data.decode("utf-8"), parse_int=lambda text: _json_int(text, where))
    except UnicodeDecodeError:
        raise StateError(f"{where}: not a youmu state file (not UTF-8 JSON)") from None
    except json.JSONDecodeError as e:
        raise StateError(f"{where}: not a youmu state file, or truncated ({e.msg} at byte {e.pos} of "
                         f"{len(data)})") from None
    return open_envelope(tree, where=where)


# no state integer has more than MAX_INT_BITS bits: that many decimal digits and a sign
_MAX_INT_DIGITS = len(str(1 << MAX_INT_BITS)) + 1


def _json_int(text: str, where: str) -> int:
    """An integer of the JSON, refused by its length before it is converted (a
    5,000-digit one would be a ``ValueError`` of Python's own conversion limit)."""
    if len(text) > _MAX_INT_DIGITS:
        raise StateError(f"{where}: not a valid youmu state (an integer of {len(text):,} digits: no state integer "
                         f"has more than {MAX_INT_BITS} bits)")
    return int(text)


def write_state(path: str | os.PathLike[str], state: Any) -> None:
    """Write ``state`` to ``path`` atomically (a reader sees the old file or the new one)."""
    path = os.fspath(path)
    data = dumps(state)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_state(path: str | os.PathLike[str]) -> Any:
    """The state in the file ``path``; a missing, unreadable, empty, truncated or foreign
    file (a directory, a pickle) is a :class:`StateError` naming it."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except IsADirectoryError:
        raise StateError(f"{path} is a directory, not a youmu state file") from None
    except FileNotFoundError:
        raise StateError(f"{path}: no such youmu state file") from None
    except OSError as e:
        raise StateError(f"{path}: cannot read the youmu state file ({e.strerror or e})") from None
    return loads(data, where=path)

