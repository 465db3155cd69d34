"""A ``DynamicBatchLoader``'s state, in one place: its format declared field by field
(:data:`LOADER_STATE`, a :class:`~youmu.state.formats.StateFormat`), the state of an
epoch's start (:func:`fresh_state`), the one check of a rank's saved state
(:func:`check_saved_state`) and of a merged one (:func:`read_merged`). The loader's load
(:func:`youmu.batching.merge.check_loader_state`) and its merge
(:func:`youmu.batching.merge.merge_loader_states`) read a state through these and
nothing else, each once; this module calls nothing above it.

A rank's state is ``{"format", "kind", "world_size", "rank", "config", "epoch",
"iteration", "round", "step", "emitted", "done", "replay", "overflow", "position",
"source_state", "workers", "payloads", "settings"}`` in that order, plus ``"resumed"``
(the chain of the epoch's earlier jobs) in a job resumed on another topology. A new
field is one :class:`~youmu.state.formats.StateField` below (its check, whether a merge
compares it) and the runtime that fills it in (:mod:`youmu.batching.runtime.epoch`).

Example:
    >>> st = LOADER_STATE.write({**{f.name: 0 for f in LOADER_STATE.fields if f.required}, "kind": "map",
    ...                          "world_size": 1, "done": False, "replay": [], "overflow": [], "payloads": {}})
    >>> check_saved_state(st)["workers"] is None          # version 1 states had none
    True
    >>> check_saved_state({**st, "overflow": [3, 3]})
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: DynamicBatchLoader state names sample key 3 twice in its 'replay' steps and \
'overflow': a resume would deliver that sample twice, so the state is forged or corrupted
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from youmu._internal.args import MAX_WORKERS
from youmu.batching.algo.step_info import StepInfo
from youmu.errors import StateError
from youmu.order.resume import Level
from youmu.state.contract import is_state_int, state_int, state_ints
from youmu.state.formats import (
    OWN,
    RANK,
    SAME,
    SHARED,
    SUM,
    StateField,
    StateFormat,
    a_bool,
    an_int,
    optional,
    some_ints,
)
from youmu.state.jobs import decode_chain, encode_chain, load_merged

if TYPE_CHECKING:
    from youmu.batching.config import LoaderConfig

__all__ = ["DYNAMIC_LOADER_FORMAT", "DYNAMIC_LOADER_FORMATS", "LOADER_STATE", "FIXED_SETTINGS", "COUNTERS",
           "fresh_state", "check_saved_state", "read_rank_state", "read_merged", "loader_levels", "pooled_keys"]

#: The format tag of the ``DynamicBatchLoader`` states saved now. Version 2 added
#: ``workers``: an iterable dataset's DataLoader workers, each one's dataset state and
#: the rotation's turn (version 1 saved mid-epoch iterable states with
#: ``num_workers=0`` only); a version-1 youmu refuses such a state instead of replaying
#: every worker's samples.
DYNAMIC_LOADER_FORMAT = "youmu.batching/2"
#: Every tag a ``DynamicBatchLoader`` loads (and merges): the states of earlier versions too.
DYNAMIC_LOADER_FORMATS = (DYNAMIC_LOADER_FORMAT, "youmu.batching/1")

#: Settings a merged state must share with the loader that loads it (``token_budget``
#: and ``pool_size`` may change: they take effect from the resume step).
FIXED_SETTINGS = ("kind", "n", "data", "seed", "shuffle", "join", "pad_sampler", "shuffle_steps", "loss_scaling",
                  "uneven", "encoder_budget")

#: The counters of where an epoch stands, in a rank's state and in a merged one alike.
COUNTERS = ("epoch", "iteration", "round", "step", "emitted")

_OWNER = "DynamicBatchLoader"


# -- the fields' checks ---------------------------------------------------------------------------
def _kind(st: Mapping[str, Any], key: str, owner: str) -> str:
    if st[key] not in ("map", "iterable"):
        raise StateError(f"{owner} state field {key!r} must be 'map' or 'iterable', got {st[key]!r:.40}")
    return str(st[key])


def _rank(st: Mapping[str, Any], key: str, owner: str) -> int:
    return state_int(st, key, owner=owner, maximum=st["world_size"] - 1)


def _as_saved(st: Mapping[str, Any], key: str, owner: str) -> Any:
    """A value whose owner reads it: the settings' fingerprint (compared with the
    loader's), the dataset's own state (checked by the dataset)."""
    return st[key]


def _replay(st: Mapping[str, Any], key: str, owner: str) -> list[int]:
    """The steps planned but not consumed: each a dict of sample ``keys`` and a step's
    ``info``; the keys, in order."""
    replay = st[key]
    if not isinstance(replay, (list, tuple)):
        raise StateError(f"{owner} state field {key!r} must be a list, got {type(replay).__name__}")
    keys: list[int] = []
    for i, entry in enumerate(replay):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("info"), Mapping):
            raise StateError(f"{owner} state field {key!r}[{i}] must be a dict with 'keys' and 'info'")
        keys += state_ints(entry, "keys", owner=f"{owner} {key!r}[{i}]")
        info = entry["info"]
        try:
            StepInfo(**{**info, "sample_indices": tuple(info.get("sample_indices", ()))})
        except (TypeError, ValueError) as e:
            raise StateError(f"{owner} state field {key!r}[{i}]['info'] is not a step's info: {e}") from None
    return keys


def _workers(st: Mapping[str, Any], key: str, owner: str) -> dict[str, Any] | None:
    """Version 2: an iterable dataset's DataLoader workers, each one's dataset state
    (``None``: nothing taken from it) and the next turn; ``None`` without workers."""
    workers = st.get(key)
    if workers is None:
        return None
    where = f"{owner} state field {key!r}"
    if st["kind"] != "iterable" or not isinstance(workers, Mapping):
        raise StateError(f"{where} must be None or, for an iterable dataset, a dict with 'states' and 'turn'")
    states = workers.get("states")
    if not isinstance(states, (list, tuple)) or not 1 <= len(states) <= MAX_WORKERS:
        raise StateError(f"{where}: 'states' must list one dataset state per DataLoader worker (1 to {MAX_WORKERS})")
    turn = state_int(workers, "turn", owner=f"{owner} {key!r}", maximum=len(states) - 1)
    return {"states": list(states), "turn": turn}


def _payloads(st: Mapping[str, Any], key: str, owner: str) -> Any:
    """An iterable dataset's carried samples, by key (a map-style dataset's are read
    from the dataset again): a dict, matched to the keys by :func:`check_saved_state`."""
    if st["kind"] == "iterable" and not isinstance(st[key], Mapping):
        raise StateError(f"{owner} state field {key!r} must be a dict, got {type(st[key]).__name__}")
    return st[key]


def loader_levels(raw: Any, owner: str) -> list[Level]:
    """The ``resumed`` field of a ``DynamicBatchLoader`` state, validated: the one chain
    form (:func:`youmu.state.jobs.decode_chain`) with one sampler position per rank and
    its pending positions (a :class:`StateError` names the first field that does not
    fit)."""
    return decode_chain(raw, owner, pending=True, one_worker=True)


def _chain(st: Mapping[str, Any], key: str, owner: str) -> list[Level]:
    return loader_levels(st[key], owner)


_COUNT = an_int()

#: The ``DynamicBatchLoader`` format, declared once: its fields in the order they are
#: written. What a merge compares across ranks is :data:`~youmu.state.formats.SAME`;
#: the rest is the rank's own, read by :func:`youmu.batching.merge.merge_loader_states`.
LOADER_STATE = StateFormat(_OWNER, DYNAMIC_LOADER_FORMAT, (
    StateField("kind", _kind),
    StateField("world_size", an_int(1)),
    StateField("rank", _rank, scope=RANK, merge=OWN),
    StateField("config", _as_saved),  # the settings' fingerprint (the loader compares its own)
    *(StateField(k, _COUNT, scope=SHARED if k == "epoch" else RANK, merge=SAME if k == "epoch" else OWN)
      for k in ("epoch", "iteration", "round", "step", "emitted")),
    StateField("done", a_bool, scope=RANK, merge=OWN),
    StateField("replay", _replay, scope=RANK, merge=OWN),
    StateField("overflow", some_ints, scope=RANK, merge=OWN),
    StateField("position", _COUNT, scope=RANK, merge=OWN),
    StateField("source_state", _as_saved, scope=RANK, merge=OWN),
    StateField("workers", _workers, scope=RANK, merge=OWN, required=False),  # version 2
    StateField("payloads", _payloads, scope=RANK, merge=OWN),
    StateField("settings", _as_saved, required=False),  # plain values a merge compares key by key
    StateField("resumed", optional(_chain), required=False),  # a job resumed on another topology
), older=DYNAMIC_LOADER_FORMATS[1:], merger="youmu.batching.merge:merge_loader_states")


def fresh_state(config: LoaderConfig, epoch: int, carried: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The state of ``epoch``'s start under ``config`` (what ``state_dict()`` says before
    iterating), with the ``carried`` declared fields a merged state hands on (its
    :data:`~youmu.state.formats.SUM` fields)."""
    return copy.deepcopy(LOADER_STATE.write({**(carried or {}),
        "kind": config.kind, "world_size": config.world_size, "rank": config.rank, "config": config.fingerprint,
        "epoch": epoch, "iteration": 0, "round": 0, "step": 0, "emitted": 0, "done": False, "replay": [],
        "overflow": [], "position": 0, "source_state": None, "workers": None, "payloads": {},
        "settings": dict(config.resume_settings),
    }))


def pooled_keys(st: Mapping[str, Any]) -> list[int]:
    """The samples a checked state's round still holds: its ``replay`` steps' keys, then
    its ``overflow``."""
    return [k for step in st["replay"] for k in step["keys"]] + list(st["overflow"])


def check_saved_state(state: Any, *, owner: str = _OWNER, expect: Mapping[str, Any] | None = None,
                      pool_size: int | None = None) -> dict[str, Any]:
    """A rank's ``DynamicBatchLoader`` state checked field by field, without a loader
    (``expect``: settings it must hold, see :func:`~youmu.state.contract.check_state`;
    ``pool_size``: the loader's, else the state's own ``settings``): a
    :class:`~youmu.errors.StateError` names the first field that does not fit. Returns
    it as a new dict, ``workers`` (``None`` in version 1) and ``resumed`` in today's form."""
    return read_rank_state(state, owner=owner, expect=expect, pool_size=pool_size)[0]


def read_rank_state(state: Any, *, owner: str = _OWNER, expect: Mapping[str, Any] | None = None,
                    pool_size: int | None = None) -> tuple[dict[str, Any], list[Level] | None]:
    """:func:`check_saved_state`, and the levels of its ``resumed`` chain (``None``: a
    job not resumed on another topology), decoded once."""
    st, values = LOADER_STATE.read(state, owner=owner, expect=expect)
    keys = pooled_keys(st)
    _check_pooled(st, keys, owner, pool_size)
    if st["kind"] == "iterable":
        payloads = st["payloads"]
        for k in keys:
            p = payloads.get(k)
            if not isinstance(p, (list, tuple)) or len(p) not in (3, 4):
                raise StateError(f"{owner} state field 'payloads' has no (sample, length, tokens) for key {k}")
        if len(payloads) != len(keys):
            extra = sorted(set(payloads) - set(keys), key=repr)[:3]
            raise StateError(f"{owner} state field 'payloads' holds samples of keys no replayed step or overflow "
                             f"names ({extra!r:.80}): a forged or corrupted state")
    st["workers"] = values.get("workers")
    levels = values.get("resumed")
    if levels is not None:
        st["resumed"] = encode_chain(levels)  # a chain of an earlier version is saved in today's form
    return st, levels


def _check_pooled(st: Mapping[str, Any], keys: list[int], owner: str, pool_size: int | None) -> None:
    """The samples a state's round still holds (its ``replay`` steps' and its
    ``overflow``): each once, and no more than the grouping pool held when the round
    fired. A key twice would deliver one sample twice; more keys than the pool holds
    would wait forever for credits the loader never grants (a resume takes every one of
    them before its first step)."""
    seen: set[int] = set()
    for k in keys:
        if k in seen:
            raise StateError(f"{owner} state names sample key {k} twice in its 'replay' steps and 'overflow': a "
                             "resume would deliver that sample twice, so the state is forged or corrupted")
        seen.add(k)
    settings = st.get("settings")
    if pool_size is None and isinstance(settings, Mapping) and is_state_int(settings.get("pool_size"), minimum=1):
        pool_size = int(settings["pool_size"])
    if pool_size is not None and len(keys) > pool_size:
        raise StateError(f"{owner} state's round holds {len(keys):,} samples ('replay' and 'overflow') but its "
                         f"grouping pool holds {pool_size:,} (pool_size): a forged or corrupted state")


def read_merged(state: Any, settings: Mapping[str, Any], *, owner: str = _OWNER) -> dict[str, Any]:
    """A merged ``DynamicBatchLoader`` state (:func:`youmu.merge_states`, of any
    version's states) read once for a loader with these resume ``settings``: its
    :data:`FIXED_SETTINGS` equal to the loader's (a :class:`StateError` names the first
    that differs), its :data:`COUNTERS` and ``done`` checked as the declaration checks
    a rank's; a map-style one's ``resumed`` decoded to levels."""
    stream = state.get("stream") if isinstance(state, Mapping) else None
    fmt = stream if stream in LOADER_STATE.tags else LOADER_STATE.tag
    st = load_merged(state, fmt, owner=owner, required=("kind", "epoch", "step"),
                     expect={k: settings[k] for k in FIXED_SETTINGS})
    for key in COUNTERS:
        LOADER_STATE.field(key).check(st, key, owner)
    for f in LOADER_STATE.fields:  # the fields a merge sums, as the declaration checks a rank's
        if f.merge == SUM and f.name in st:
            f.check(st, f.name, owner)
    a_bool(st, "done", owner)
    if st["kind"] == "map":
        st["resumed"] = loader_levels(st.get("resumed"), owner)
    return st
