"""The stream contract: what every youmu stream and loader promises, and the one
validator of saved states.

A youmu *stream* is a stateful iterable in the spirit of torchdata's nodes
(``next`` / ``reset(state)`` / ``get_state``), expressed with the methods PyTorch users
already know:

* ``iter(stream)`` starts an independent pass over the current epoch, from the
  stream's *resume point*: the position loaded by ``load_state_dict`` for the first
  pass after it, the epoch's start otherwise. Two iterators of one stream never share
  a position (a peek with ``next(iter(stream))`` moves nothing for the next loop).
* ``state_dict()`` describes the progress of the most recent pass (or the resume
  point before any pass): a small dict of integers and strings, tagged with a
  versioned ``format`` (e.g. ``"youmu.YoumuDataset/1"``), that ``load_state_dict`` of
  an equally configured stream turns into the exact rest of the stream. A state taken
  after a pass ended resumes to the (empty) rest of that epoch.
* ``load_state_dict(state)`` checks the state before using it: the format tag names
  the kind of object that saved it, and every setting that shapes the stream (seed,
  shuffle, world size, window size, ...) must match, as must the shard (``rank``, a
  field of its own next to ``world_size``) and the data (``data``: a fingerprint from
  :func:`data_fingerprint`, kept apart from the shard). A mismatch is a
  :class:`~youmu.errors.StateError` naming the field.
* ``state_dict()`` in the main process of a stream that DataLoader workers iterate is
  a :class:`~youmu.errors.StateError`: the progress is in the workers' copies, and
  the loader (torchdata's ``StatefulDataLoader``) is what to checkpoint.
* ``set_epoch(epoch)`` reshuffles for ``epoch`` and starts it fresh — the one epoch
  rule, the same for streams and loaders: a loaded state of ``epoch`` whose pass has
  not begun is kept (the usual loop, load then ``set_epoch(e)`` for each epoch,
  continues the loaded epoch), a state of any other epoch is cleared. It reaches
  DataLoader workers that already run (``persistent_workers=True``): the epoch lives
  in shared memory (:class:`youmu._internal.shared_int.SharedEpoch`).

Wrappers (``pack``, loaders over youmu streams) use only these methods.

A state resumes the job that saved it, rank by rank. For a job of another shape,
:func:`youmu.merge_states` turns all ranks' states into one merged state that any
rank of any topology loads (:mod:`youmu.state.jobs`, :mod:`youmu.order.resume`).

Example:
    >>> state = {"format": "youmu.MapStream/1", "world_size": 2, "run": 1, "epoch": 0,
    ...          "num_workers": None, "positions": {0: 5}}
    >>> check_state(state, "youmu.MapStream/1", owner="MapStream", expect={"world_size": 2})["positions"]
    {0: 5}
    >>> check_state(state, "youmu.YoumuDataset/1", owner="YoumuDataset")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: YoumuDataset.load_state_dict got a state saved by youmu.MapStream/1, not a ...
"""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from youmu._internal.hub_urls import is_hub_file
from youmu.errors import StateError
from youmu.state.bounds import check_tree

__all__ = [
    "Stateful",
    "Stream",
    "check_state",
    "data_fingerprint",
    "describe_data",
    "same_data",
    "state_bool",
    "state_int",
    "state_ints",
    "state_value_ints",
    "is_state_int",
    "state_value_int",
    "state_positions",
    "MAX_STATE_INT",
    "LOADER_STATE_KEYS",
    "Loader",
    "again_or_raise",
    "check_epoch",
    "keeps_resume_point",
    "yields_pairs",
]

#: The largest integer a state field may hold: epochs and positions live in int64
#: (shared memory, numpy, Rust), so a larger one is a corrupted or edited state.
MAX_STATE_INT = (1 << 63) - 1

#: Content hashes of the files :func:`data_fingerprint` is describing (a list while it
#: runs): :func:`describe_data` of a page index adds its Hub files' ``[name, ETag]``.
_CONTENT: contextvars.ContextVar[list[list[str]] | None] = contextvars.ContextVar("youmu_content", default=None)

#: Why a field differs, said with the mismatch (the field name alone is not enough).
_HINTS = {
    "data": "the state was saved over other data (the fingerprint covers file names, sizes, row and page "
            "counts, the content where a hash of it is known; a mixture's children and settings)",
    "rank": "a rank's state resumes that rank only: load each rank's own state",
    "world_size": "positions are per rank of that many ranks",
    "window_pages": "the state was saved with windows of another size (buffer_size or memory_budget differ): "
                    "the shuffle would differ, so the rest of the epoch would not be the uninterrupted one",
}


@runtime_checkable
class Stateful(Protocol):
    """Anything whose progress can be saved and restored exactly."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class Stream(Stateful, Protocol):
    """A stateful iterable with epochs: youmu's stream contract (see the module doc)."""

    def set_epoch(self, epoch: int) -> None: ...

    def __iter__(self) -> Iterator[Any]: ...


def _describe(state: Any) -> str:
    if isinstance(state, Mapping):
        fmt = state.get("format")
        return str(fmt) if fmt is not None else "an untagged state"
    return type(state).__name__


def check_state(
    state: Any,
    fmt: str | Sequence[str],
    *,
    owner: str,
    expect: Mapping[str, Any] | None = None,
    required: Sequence[str] = (),
) -> dict[str, Any]:
    """Validate a state given to ``owner.load_state_dict``; return it as a new dict.

    Args:
        state: what the user passed.
        fmt: the format tag(s) this owner accepts.
        owner: the class name used in messages.
        expect: settings that shape the stream; each must equal the saved value.
        required: keys the state must have.

    Raises :class:`~youmu.errors.StateError` naming the first field that does not fit,
    and for a state past the bounds of :mod:`youmu.state.bounds` (too deep, holding
    itself or a huge integer) before reading any field.
    """
    accepted = (fmt,) if isinstance(fmt, str) else tuple(fmt)
    if not isinstance(state, Mapping):
        raise StateError(
            f"{owner}.load_state_dict expects the dict that {owner}.state_dict() returned, got {_describe(state)}"
        )
    check_tree(state, owner=owner)  # before any field is read: depth, integers, cycles
    got = state.get("format")
    if got not in accepted:
        raise StateError(
            f"{owner}.load_state_dict got a state saved by {_describe(state)}, not a {' or '.join(accepted)} state "
            "(field 'format')"
        )
    for key in required:
        if key not in state:
            raise StateError(f"{owner} state ({got}) has no {key!r} field")
    for key, mine in (expect or {}).items():
        saved = state.get(key)
        # type-strict: "3" is not 3 and True is not 1 (an edited or foreign state)
        if key == "data" and type(saved) is type(mine) and same_data(saved, mine):
            continue  # content known on one side only (local files, the Hub's): the same data
        if saved != mine or type(saved) is not type(mine):
            if key not in state:
                raise StateError(f"{owner} state ({got}) has no {key!r} field (this {owner} has {key}={mine!r})")
            hint = f": {_HINTS[key]}" if key in _HINTS else ""
            raise StateError(f"state was saved with {key}={saved!r} but this {owner} has {key}={mine!r}{hint}")
    return dict(state)


def state_int(
    state: Mapping[str, Any], key: str, *, owner: str, minimum: int | None = 0, maximum: int = MAX_STATE_INT
) -> int:
    """An integer field of a state (never a bool or a float), at most ``maximum``.

    >>> state_int({"epoch": 2**70}, "epoch", owner="MapStream")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: MapStream state field 'epoch' must be at most 9,223,372,036,854,775,807, got a 71-bit int
    """
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateError(f"{owner} state field {key!r} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise StateError(f"{owner} state field {key!r} must be >= {minimum}, got {value}")
    if value > maximum:
        shown = f"a {value.bit_length()}-bit int" if value.bit_length() > 64 else f"{value:,}"
        raise StateError(f"{owner} state field {key!r} must be at most {maximum:,}, got {shown}")
    return value


def is_state_int(value: Any, minimum: int = 0) -> bool:
    """Whether ``value``, read from a state, is an int (a numpy one too, never a bool)
    in ``[minimum, MAX_STATE_INT]``: the one range every integer of every state keeps.

    >>> is_state_int(3), is_state_int(True), is_state_int(2**63), is_state_int(-1, minimum=-5)
    (True, False, False, True)
    """
    return (not isinstance(value, bool) and isinstance(value, (int, np.integer))
            and minimum <= int(value) <= MAX_STATE_INT)


def state_value_int(value: Any, field: str, *, owner: str, minimum: int = 0) -> int:
    """``value``, an integer found inside a state at ``field`` (a list entry, a nested
    dict's value), checked by :func:`is_state_int`; a :class:`StateError` names it.

    >>> state_value_int(1.5, "'resumed'[0]['world_size']", owner="MapStream", minimum=1)
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: MapStream state field 'resumed'[0]['world_size'] must be an int in [1, 2**63), got 1.5
    """
    if not is_state_int(value, minimum):
        raise StateError(f"{owner} state field {field} must be an int in [{minimum}, 2**63), got {value!r:.80}")
    return int(value)


def state_bool(state: Mapping[str, Any], key: str, *, owner: str) -> bool:
    """A bool field of a state: ``"no"`` or ``0`` would read as a truth value.

    >>> state_bool({"finished": "no"}, "finished", owner="TrainerLoader")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: TrainerLoader state field 'finished' must be a bool, got str 'no'
    """
    value = state.get(key)
    if not isinstance(value, bool):
        raise StateError(f"{owner} state field {key!r} must be a bool, got {type(value).__name__} {value!r:.80}")
    return value


def state_value_ints(raw: Any, field: str, *, owner: str, n: int | None = None, minimum: int = 0) -> tuple[int, ...]:
    """``raw``, a list of integers found inside a state at ``field`` (``n`` of them where
    given), each checked by :func:`is_state_int`; a :class:`StateError` names the field.

    >>> state_value_ints([3, 1], "'next_index'", owner="planner", n=2)
    (3, 1)
    >>> state_value_ints([1.5], "'keys'", owner="DynamicBatchLoader")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: DynamicBatchLoader state field 'keys' must be a list of ints in [0, 2**63), got [1.5]
    """
    if not isinstance(raw, (list, tuple)) or (n is not None and len(raw) != n) or not all(
            is_state_int(x, minimum) for x in raw):
        size = f"{n} " if n is not None else ""
        raise StateError(f"{owner} state field {field} must be a list of {size}ints in [{minimum}, 2**63), "
                         f"got {raw!r:.80}")
    return tuple(int(x) for x in raw)


def state_ints(state: Mapping[str, Any], key: str, *, owner: str, minimum: int = 0) -> list[int]:
    """A list-of-integers field of a state (:func:`state_value_ints`).

    >>> state_ints({"keys": [3, 1]}, "keys", owner="DynamicBatchLoader")
    [3, 1]
    """
    return list(state_value_ints(state.get(key), repr(key), owner=owner, minimum=minimum))


def state_positions(
    state: Mapping[str, Any], key: str, *, owner: str, width: int = 1, workers: int | None = None
) -> dict[int, int | tuple[int, ...]]:
    """A ``{worker: position}`` field: non-negative worker ids (ints, or their string
    form after a JSON round trip) to non-negative positions — one int, or ``width``
    ints for positions with several parts (packing: row, tokens into the row). With
    ``workers`` (the state's own worker count), more entries than workers are refused
    before any is read."""
    raw = state.get(key)
    if not isinstance(raw, Mapping):
        raise StateError(f"{owner} state field {key!r} must be a dict of worker -> position, got {type(raw).__name__}")
    if workers is not None and len(raw) > workers:
        raise StateError(f"{owner} state field {key!r} holds {len(raw):,} worker positions but the state has "
                         f"num_workers={workers}: a forged or corrupted state")
    out: dict[int, int | tuple[int, ...]] = {}
    for k, v in raw.items():
        try:
            worker = int(k)
        except (TypeError, ValueError):
            raise StateError(f"{owner} state field {key!r} has a non-integer worker id {k!r}") from None
        if isinstance(k, bool) or worker < 0 or (isinstance(k, str) and k != str(worker)):
            raise StateError(f"{owner} state field {key!r} has an invalid worker id {k!r}")
        parts = (v,) if width == 1 else v
        if width > 1 and (not isinstance(v, (list, tuple)) or len(v) != width):
            raise StateError(f"{owner} state field {key!r}[{k!r}] must be {width} ints, got {v!r}")
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_STATE_INT:
                raise StateError(f"{owner} state field {key!r}[{k!r}] must hold ints >= 0 and < 2**63, got {v!r}")
        out[worker] = int(v) if width == 1 else tuple(int(p) for p in v)
    return out


def describe_data(data: Any) -> Any:
    """What identifies the data a stream reads, cheaply: from a page index, per file its
    name relative to the directory all the files are in (:func:`_relative_names`: a
    copy moved elsewhere, to an object store or to the Hub, is the same data), size and
    rows, plus the columns and every page's row count; from a youmu mixture or
    ``RowDataset``, its own description; from anything else, its type and length. Where
    a file's content is known by a hash (a Hub file's ETag, the same at any commit that
    holds the same bytes) :func:`data_fingerprint` adds it apart (see :func:`same_data`)."""
    own = getattr(data, "_state_fingerprint", None)
    if callable(own):
        return own()
    if callable(getattr(data, "page_num_rows", None)) and callable(getattr(data, "file_info", None)):
        infos = [data.file_info(i) for i in range(data.num_files)]
        names = _relative_names([str(info["path"]) for info in infos])
        files = [[name, info["size"], info["num_rows"]] for name, info in zip(names, infos)]
        pages = hashlib.sha256(data.page_num_rows().astype("<i8").tobytes()).hexdigest()
        collected = _CONTENT.get()
        if collected is not None:
            collected.extend([name, info["etag"]] for name, info in zip(names, infos)
                             if info.get("etag") and is_hub_file(str(info["path"])))
        return {"files": files, "columns": list(data.columns), "pages": pages}
    try:
        n: Any = len(data)
    except TypeError:
        n = None
    return {"type": f"{type(data).__module__}.{type(data).__qualname__}", "len": n}


def _relative_names(paths: Sequence[str]) -> list[str]:
    """The files' names below the deepest directory that holds them all: where the
    data is (its root directory, local or in a bucket) is left out, how it is arranged
    below is kept. A URL's query string (a presigned URL's signature) is not part of
    its name.

    >>> _relative_names(["/data/a.parquet", "/data/sub/b.parquet"])
    ['a.parquet', 'sub/b.parquet']
    >>> _relative_names(["s3://bucket/x/a.parquet", "s3://bucket/x/sub/b.parquet"])
    ['a.parquet', 'sub/b.parquet']
    >>> _relative_names(["https://host/b/c.parquet?X-Amz-Signature=0f"])
    ['c.parquet']
    """
    parts = [(p.split("?", 1)[0] if "://" in p else p).rstrip("/").split("/") for p in paths]
    common = 0
    if parts:
        shortest = min(len(p) for p in parts) - 1  # directories only: a name is always kept
        while common < shortest and all(p[common] == parts[0][common] for p in parts):
            common += 1
    return ["/".join(p[common:]) for p in parts]


def data_fingerprint(data: Any) -> str:
    """A short digest of the data a stream reads (see :func:`describe_data`): a state
    saved over other files, or another mixture, is refused on load instead of resuming
    positions that mean other rows. Where files' content hashes are known (Hub files)
    their digest follows a ``+``: compare fingerprints with :func:`same_data`.

    >>> data_fingerprint(list(range(10))) == data_fingerprint(list(range(10)))
    True
    >>> data_fingerprint(list(range(10))) == data_fingerprint(list(range(11)))
    False
    """
    token = _CONTENT.set([])
    try:
        described = describe_data(data)
        content = _CONTENT.get()
    finally:
        _CONTENT.reset(token)
    digest = hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:16]
    if content:
        digest += "+" + hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]
    return digest


def same_data(saved: Any, mine: Any) -> bool:
    """Whether a state's ``data`` fingerprint ``saved`` is of the data fingerprinted
    ``mine``: the same names, sizes, rows and pages, and the same content where both
    know it (the Hub's hashes: a state saved over local files loads over the same files
    on the Hub and back; over another commit with other bytes it does not).

    >>> same_data("0123456789abcdef", "0123456789abcdef+00ff00ff00ff00ff")
    True
    >>> same_data("0123456789abcdef+00ff00ff00ff00ff", "0123456789abcdef+11ee11ee11ee11ee")
    False
    """
    if saved == mine or not isinstance(saved, str) or not isinstance(mine, str):
        return saved == mine
    (a, _, a_content), (b, _, b_content) = saved.partition("+"), mine.partition("+")
    return a == b and not (a_content and b_content)


# ------------------------------------------------------------------------------------------
# the loader contract
# ------------------------------------------------------------------------------------------
# What every loader built on streams keeps — DynamicBatchLoader (youmu.batching),
# BalancedLoader (youmu.planning) and RayBalancedLoader (youmu.ray) — stated once here
# and checked against all three by tests/promises/test_loader_contract.py.

#: The fields every loader's ``state_dict()`` holds besides its own: its ``format``
#: tag, the shard (``world_size``, ``rank``) and the ``epoch`` of the pass it describes.
LOADER_STATE_KEYS = ("format", "world_size", "rank", "epoch")


@runtime_checkable
class Loader(Stream, Protocol):
    """youmu's loader contract: a :class:`Stream` (see the module doc) that may run a
    pass on a background thread and across ranks, so it also says when each call may
    come:

    * ``iter(loader)`` starts an independent pass from the resume point (the state
      loaded since the last pass, the epoch's start otherwise); a pass still in
      progress is closed first. Across ranks, every rank starts the new pass (the
      passes are collective, like the training loop). A loader over a one-shot
      iterator cannot start a second pass: it raises
      :class:`~youmu.errors.LoaderError` (:func:`again_or_raise`).
    * ``set_epoch(epoch)`` may be called at any time; it takes effect at the next
      pass (a pass in progress keeps its epoch), and it clears a loaded resume point
      saved in another epoch (one of the same epoch is kept: ``load_state_dict``
      then ``set_epoch`` of the state's epoch resumes).
    * ``state_dict()`` describes the most recent pass (or the resume point before
      any pass): :data:`LOADER_STATE_KEYS` plus the loader's own fields; samples a
      planning loader carries over a step boundary are ``carry`` entries parsed by
      :func:`youmu.planning.steps.carry.parse_carry`. ``load_state_dict`` checks the state
      (a :class:`~youmu.errors.StateError` naming the field), closes a pass in
      progress and sets the resume point of the next pass.
    * ``close(timeout=None)`` stops the pass in progress (its background thread;
      peers learn it at their next exchange), waiting at most ``timeout`` seconds for
      the thread (``None``: the loader's default), and is idempotent; the loader stays
      usable. Every loader is a context manager that closes its pass on exit
      (:class:`youmu.loaders.passes.PassLoader`).

    A loader whose passes yield ``(batch, info)`` pairs (a whole batch and its step
    information, :class:`~youmu.batching.StepInfo` or
    :class:`~youmu.planning.MicroBatchInfo`) declares it with a class attribute
    ``yields_pairs = True`` (:func:`yields_pairs`): what the trainer integrations dispatch on.
    """

    def close(self, timeout: float | None = None) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> None: ...


def yields_pairs(source: Any) -> bool:
    """Whether ``source`` is a :class:`Loader` whose passes yield ``(batch, info)`` pairs
    (it declares ``yields_pairs = True``), as against a stream of samples.

    >>> class Pairs:
    ...     yields_pairs = True
    ...     def __iter__(self): return iter([])
    ...     def state_dict(self): return {}
    ...     def load_state_dict(self, state): pass
    ...     def set_epoch(self, epoch): pass
    ...     def close(self, timeout=None): pass
    ...     def __enter__(self): return self
    ...     def __exit__(self, *exc): self.close()
    >>> yields_pairs(Pairs()), yields_pairs([1, 2])
    (True, False)
    """
    return getattr(source, "yields_pairs", False) is True and isinstance(source, Loader)


def check_epoch(epoch: Any) -> int:
    """An epoch given to ``set_epoch`` (an int in ``[0, MAX_STATE_INT]``).

    >>> check_epoch(3)
    3
    """
    from youmu._internal.args import int_arg

    return int_arg("epoch", epoch, minimum=0, maximum=MAX_STATE_INT)


def keeps_resume_point(saved_epoch: Any, epoch: int) -> bool:
    """Whether ``set_epoch(epoch)`` keeps a loaded resume point saved in
    ``saved_epoch`` (``None``: the state does not say — kept).

    >>> keeps_resume_point(2, 2), keeps_resume_point(2, 3), keeps_resume_point(None, 3)
    (True, False, True)
    """
    return saved_epoch is None or saved_epoch == epoch


def again_or_raise(owner: str, sources: Mapping[str, Any]) -> None:
    """Before a loader's second pass: refuse sources that are one-shot iterators
    (consumed by the first pass) with a :class:`~youmu.errors.LoaderError`.

    >>> again_or_raise("BalancedLoader", {"default": [1, 2]})
    >>> again_or_raise("BalancedLoader", {"default": iter([1, 2])})
    Traceback (most recent call last):
    ...
    youmu.errors.LoaderError: BalancedLoader cannot start another pass: source ['default'] is an iterator, ...
    """
    from youmu.errors import LoaderError

    one_shot = [n for n, s in sources.items() if isinstance(s, Iterator)]
    if one_shot:
        raise LoaderError(f"{owner} cannot start another pass: source {one_shot} is an iterator, iterated once "
                          "(the first pass consumed it); give a re-iterable source (a list, a dataset, a "
                          "DataLoader) or make a new loader")

