"""The job-states layer: what every merge of the states a job's ranks saved, and every
load of a merged state, checks — written once, at the bottom of the package.

A resume on another topology (:func:`youmu.merge_states`) takes the states every rank
of one job saved at one point and makes ONE state any rank of any new job loads. Each
loader's merge (streams, ``DynamicBatchLoader``, ``BalancedLoader``, the Ray
deployment) knows its own fields; what they share is here:

* :class:`JobStates`: the states are of one kind of loader (:func:`one_kind`), agree
  in every shared field (:meth:`JobStates.same`) and setting, key by key
  (:meth:`JobStates.same_settings`), hold every rank exactly once
  (:meth:`JobStates.in_rank_order`, :func:`job_ranks`) and, for step-planning
  loaders, were saved at a step boundary (:meth:`JobStates.at_step_boundary`);
* :func:`load_merged`: the header of every ``load_state_dict`` of a merged state
  (its tag, the stream it is of, the settings that must match);
* :class:`Level`: one job of the epoch's chain of jobs (its layout and progress),
  the one type the stream, ``DynamicBatchLoader`` and Ray merges record, and its one
  wire form (:func:`encode_chain`, :func:`decode_chain`; a Ray deployment's sources
  resume in step, one chain each: :func:`encode_chains`, :func:`decode_chains`);
* sizes bounded before anything is allocated: a level is dense (one position per
  shard), so a forged worker count is refused here (:data:`MAX_SHARDS`), not met
  with a ``MemoryError``.

A loader's merge receives the top-level merge as a :data:`Merge` callback for the
states nested in its own (a source's stream states), so no loader merge imports the
top-level one.

Example:
    >>> states = [{"format": "youmu.MapStream/1", "rank": r, "world_size": 2, "epoch": 0} for r in (1, 0)]
    >>> job = JobStates(one_kind(states, "youmu.MapStream/1", kind="MapStream"), kind="MapStream")
    >>> job.same("epoch"), [s["rank"] for s in job.in_rank_order(2, holds="its rows")]
    (0, [0, 1])
    >>> JobStates(states[:1] + [{**states[1], "epoch": 1}], kind="MapStream").same("epoch")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: merge_states: MapStream states of rank 1 and rank 0 differ in 'epoch' (0 vs 1): ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from youmu.errors import StateError
from youmu.order.resume import Level
from youmu.state.contract import check_state, is_state_int, same_data, state_value_int, state_value_ints

__all__ = [
    "MERGED_FORMAT",
    "MAX_SHARDS",
    "OWNER",
    "Merge",
    "JobStates",
    "one_kind",
    "job_ranks",
    "same_settings",
    "state_levels",
    "is_merged",
    "load_merged",
    "check_shards",
    "encode_chain",
    "decode_chain",
    "encode_chains",
    "decode_chains",
]

#: The format tag of a merged state (:func:`youmu.merge_states`).
MERGED_FORMAT = "youmu.MergedState/1"

#: Who speaks in a merge's errors.
OWNER = "merge_states"

#: The most shards (ranks × DataLoader workers) one job of a merged state may have. A
#: level holds one position per shard, so this bounds what a state can make a merge
#: allocate; it is far above any job (100,000 ranks × 8 workers is 800,000 shards).
MAX_SHARDS = 1 << 20

#: The top-level merge (:func:`youmu.merge_states`), handed to a loader's merge for
#: the states nested in its own.
Merge = Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]

T = TypeVar("T")


def _rank_of(state: Any) -> Any:
    return state.get("rank") if isinstance(state, Mapping) else getattr(state, "rank", None)


class JobStates(Generic[T]):
    """The states (or parsed states) every rank of one job saved, as one merge checks
    them; ``kind`` names the loader in messages, ``rank`` reads a state's rank."""

    def __init__(self, states: Sequence[T], *, kind: str, rank: Callable[[T], Any] = _rank_of) -> None:
        self.states = list(states)
        self.kind = kind
        self._rank = rank

    def same(self, field: str, get: Callable[[T], Any] | None = None, what: str = "") -> Any:
        """The value every state holds in ``field`` (``get``: how to read it; ``what``:
        whose field, for the message); a :class:`StateError` names the field and the
        two ranks that differ."""
        read: Callable[[Any], Any] = get if get is not None else (lambda s: s.get(field))
        first = read(self.states[0])
        for st in self.states[1:]:
            v = read(st)
            if v != first or type(v) is not type(first):
                raise StateError(f"{OWNER}: {self.kind} states of rank {self._rank(self.states[0])!r} and rank "
                                 f"{self._rank(st)!r} differ in {what}{field!r} ({first!r:.60} vs {v!r:.60}): they "
                                 "were not saved by one job at one point")
        return first

    def same_settings(self, get: Callable[[T], Any], what: str = "") -> dict[str, Any]:
        """The settings (a dict ``get`` reads from each state) every state shares, key
        by key, so the message names the setting that differs."""
        raw = [get(s) for s in self.states]
        if not all(isinstance(s, Mapping) for s in raw):
            raise StateError(f"{OWNER}: {self.kind} state field {what}'settings' must be a dict")
        for key in sorted(set().union(*raw)):
            self.same(key, _setting(get, key), what)
        return dict(raw[0])

    def in_rank_order(self, world: int, *, holds: str) -> list[T]:
        """The states in rank order: every rank of ``range(world)`` exactly once (see
        :func:`job_ranks`)."""
        ranks = [self._rank(s) for s in self.states]
        for i, r in enumerate(ranks):
            if not is_state_int(r):
                raise StateError(f"{OWNER}: states[{i}] field 'rank' must be an int >= 0, got {r!r}")
        return [self.states[i] for i in job_ranks(ranks, world, owner=OWNER, holds=holds)]

    def at_step_boundary(self, step: int, microbatch: int) -> None:
        """A step-planning loader's states were saved after a step's last micro-batch:
        a step half delivered was planned for the old ranks."""
        if microbatch:
            raise StateError(f"{OWNER}: the {self.kind} states were saved inside step {step} (field "
                             f"'microbatch'={microbatch}): that step was planned for the old ranks; save after a "
                             "step's last micro-batch to resume on another topology")


def _setting(get: Callable[[Any], Any], key: str) -> Callable[[Any], Any]:
    return lambda s: get(s).get(key)


def one_kind(states: Any, fmt: str, *, kind: str) -> list[Mapping[str, Any]]:
    """``states`` as a list, every one a state tagged ``fmt`` (one merge takes the
    states of one kind of loader), else a :class:`StateError` naming the first that is
    not."""
    if isinstance(states, Mapping) or not isinstance(states, Sequence) or not states:
        raise StateError(f"{OWNER} takes a non-empty list of the states the ranks saved, got {type(states).__name__}")
    for i, st in enumerate(states):
        if not isinstance(st, Mapping) or st.get("format") != fmt:
            got = st.get("format") if isinstance(st, Mapping) else type(st).__name__
            raise StateError(f"{OWNER}: states[{i}] is a {got} state, not a {kind} ({fmt}) state: one merge takes "
                             "the states of one kind of loader")
    return list(states)


def job_ranks(ranks: Sequence[int], world: int, *, owner: str, holds: str) -> list[int]:
    """The order that puts the states of one job's ranks in rank order (``ranks[i]`` is
    the rank of ``states[i]``): every rank of ``range(world)`` exactly once, or a
    :class:`StateError` naming the rank out of range, repeated or missing — a merge
    without one rank's state would lose ``holds`` (what only that state records).

    >>> job_ranks([1, 0], 2, owner="merge_states", holds="its rows")
    [1, 0]
    >>> job_ranks([0, 2, 3], 4, owner="merge_states", holds="its rows")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: merge_states: the job had world_size=4 but the states of rank(s) [1] are missing: ...
    """
    seen: dict[int, int] = {}
    for i, r in enumerate(ranks):
        if r >= world:
            raise StateError(f"{owner}: states[{i}] field 'rank'={r} is not in range(world_size={world})")
        if r in seen:
            raise StateError(f"{owner}: rank {r} appears twice (states[{seen[r]}] and states[{i}])")
        seen[r] = i
    # every rank holds a state, so a world larger than the states given is a missing rank
    # (said without listing up to 2**63 of them)
    if world > len(ranks):
        missing = [r for r in range(min(world, len(ranks) + 8)) if r not in seen][:8]
        raise StateError(f"{owner}: the job had world_size={world} but the states of rank(s) {missing}"
                         f"{' ...' if world - len(seen) > len(missing) else ''} are missing: every rank's state is "
                         f"needed ({holds} are only in its state)")
    return [seen[r] for r in range(world)]


def same_settings(saved: Any, mine: Mapping[str, Any], *, owner: str, what: str, may_change: str) -> None:
    """A merged state's ``settings`` against the loader that loads it: equal key by key,
    else a :class:`StateError` naming the first that differs (``may_change``: what a
    resume on another topology may change instead).

    >>> same_settings({"seed": 0}, {"seed": 1}, owner="merged BalancedLoader state", what="BalancedLoader",
    ...               may_change="the world size")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: merged BalancedLoader state was saved with seed=0 but this BalancedLoader has seed=1 ...
    """
    if not isinstance(saved, Mapping):
        raise StateError(f"{owner} field 'settings' must be a dict, got {type(saved).__name__}")
    for key in sorted(set(saved) | set(mine)):
        if saved.get(key) != mine.get(key) and not (key == "data" and same_data(saved.get(key), mine.get(key))):
            raise StateError(f"{owner} was saved with {key}={saved.get(key)!r} but this {what} has "
                             f"{key}={mine.get(key)!r} (at a resume on another topology only {may_change} may change)")


def is_merged(state: Any) -> bool:
    """``state`` is a merged state (:func:`youmu.merge_states`)."""
    return isinstance(state, Mapping) and state.get("format") == MERGED_FORMAT


def load_merged(state: Any, stream: str, *, owner: str, expect: Mapping[str, Any] | None = None,
                required: Sequence[str] = (), hint: str = "") -> dict[str, Any]:
    """The header of every ``load_state_dict`` of a merged state: ``state`` is a merged
    state of ``stream`` states (the loading object's own format; ``hint``: what to do
    with another one), with the ``required`` fields and the ``expect`` settings
    (a :class:`StateError` names the first that differs).

    >>> load_merged({"format": MERGED_FORMAT, "stream": "youmu.MapStream/1", "seed": 1}, "youmu.MapStream/1",
    ...             owner="MapStream", expect={"seed": 2})
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: state was saved with seed=1 but this MapStream has seed=2
    """
    st = check_state(state, MERGED_FORMAT, owner=owner, required=("stream",))
    if st["stream"] != stream:
        raise StateError(f"{owner}.load_state_dict got a merged state of a {st['stream']!r}, not of a {stream!r}"
                         f"{': ' + hint if hint else ''}")
    return check_state(st, MERGED_FORMAT, owner=owner, expect=expect, required=required)


def state_levels(state: Mapping[str, Any], key: str, *, owner: str,
                 label: str | None = None) -> list[tuple[str, Mapping[str, Any]]]:
    """The chain of resumed jobs a merged state carries: a non-empty list of dicts, one
    per job of the epoch, each returned with the name of its field for the caller's
    own checks (``label``: how messages name ``key``, by default its repr).

    >>> state_levels({"resumed": [{"world_size": 2}]}, "resumed", owner="YoumuDataset")
    [("'resumed'[0]", {'world_size': 2})]
    >>> state_levels({"resumed": []}, "resumed", owner="YoumuDataset")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: YoumuDataset state field 'resumed' must be a non-empty list of levels, got []
    """
    raw = state.get(key)
    name = repr(key) if label is None else label
    if not isinstance(raw, (list, tuple)) or not raw:
        raise StateError(f"{owner} state field {name} must be a non-empty list of levels, got {raw!r:.80}")
    out = []
    for i, lv in enumerate(raw):
        f = f"{name}[{i}]"
        if not isinstance(lv, Mapping):
            raise StateError(f"{owner} state field {f} must be a dict, got {type(lv).__name__}")
        out.append((f, lv))
    return out


def check_shards(num_workers: Sequence[int], *, owner: str, where: str) -> None:
    """A job's worker counts (one per rank) before a level of that many positions is
    built: at most :data:`MAX_SHARDS` shards in all."""
    total = sum(num_workers)
    if total > MAX_SHARDS:
        raise StateError(f"{owner}: {where} describe a job of {total:,} shards (ranks × DataLoader workers), more "
                         f"than the {MAX_SHARDS:,} a state may hold: an edited or corrupted state")


# -- the chain's wire form ----------------------------------------------------------------------
# One form for every owner (version 2 of the chain; a stream's levels were already in it,
# so a stream state's bytes are what they were): per level ``world_size``, ``num_workers``
# (one count per rank) and ``positions`` (one int per shard), then ``tokens`` (per shard,
# written only where a row is partly packed) and ``pending`` (per rank, the positions a
# ``DynamicBatchLoader`` rank read but did not deliver) where the owner records them.
# ``num_workers`` is what tells the versions apart: version 1 of the loaders' chains had
# none (a ``DynamicBatchLoader`` level held one flat position per rank; a Ray planner's
# chain held jobs of ``positions[rank][source]``), and those are still read.
def encode_chain(levels: Sequence[Level]) -> list[dict[str, Any]]:
    """Levels as plain lists, JSON- and ``torch.save``-friendly (the one wire form of
    an epoch's chain of jobs, whoever records it).

    >>> encode_chain([Level(2, (1, 2), ((3,), (2, 0)))])
    [{'world_size': 2, 'num_workers': [1, 2], 'positions': [[3], [2, 0]]}]
    >>> encode_chain([Level(1, (1,), ((4,),), pending=((1, 2),))])[0]["pending"]
    [[1, 2]]
    """
    out = []
    for lv in levels:
        d: dict[str, Any] = {"world_size": lv.world_size, "num_workers": list(lv.num_workers),
                             "positions": [list(p) for p in lv.positions]}
        if lv.tokens is not None and any(any(t) for t in lv.tokens):
            d["tokens"] = [list(t) for t in lv.tokens]
        if lv.pending is not None:
            d["pending"] = [list(p) for p in lv.pending]
        out.append(d)
    return out


def _grid(lv: Mapping[str, Any], name: str, f: str, ks: Sequence[int], owner: str) -> tuple[tuple[int, ...], ...]:
    """``lv[name]``: one list per rank of ``ks[r]`` ints (lengths checked before any
    entry is read: a forged worker count allocates nothing)."""
    g = lv.get(name)
    if not isinstance(g, (list, tuple)) or len(g) != len(ks) or any(
            not isinstance(row, (list, tuple)) or len(row) != k for row, k in zip(g, ks)):
        raise StateError(f"{owner} state field {f}[{name!r}] must hold one int per worker of each rank "
                         f"({list(ks)}), got {g!r:.80}")
    return tuple(state_value_ints(row, f"{f}[{name!r}]", owner=owner) for row in g)


def _pending(lv: Mapping[str, Any], f: str, w: int, owner: str) -> tuple[tuple[int, ...], ...]:
    raw = lv.get("pending")
    if not isinstance(raw, (list, tuple)) or len(raw) != w:
        raise StateError(f"{owner} state field {f}['pending'] must hold one list of positions per rank ({w}), "
                         f"got {raw!r:.80}")
    return tuple(state_value_ints(p, f"{f}['pending'][{r}]", owner=owner) for r, p in enumerate(raw))


def _sampler_level_v1(lv: Mapping[str, Any], f: str, w: int, owner: str) -> Level:
    """A ``DynamicBatchLoader`` level of chain version 1: one position per rank (its
    one "worker") and its pending positions."""
    positions = state_value_ints(lv.get("positions"), f"{f}['positions']", owner=owner, n=w)
    return Level(w, (1,) * w, tuple((p,) for p in positions), pending=_pending(lv, f, w, owner))


def decode_chain(raw: Any, owner: str, *, field: str = "resumed", tokens: bool = False, pending: bool = False,
                 one_worker: bool = False, label: str | None = None) -> list[Level]:
    """The chain an owner's state holds at ``field`` (:func:`encode_chain`'s form, or a
    ``DynamicBatchLoader``'s of version 1 where ``pending``), validated: the owner
    says what its levels may record (``tokens``: packed tokens of a row; ``pending``:
    a loader's held positions, then required; ``one_worker``: one shard per rank;
    ``label``: how messages name the field). A
    :class:`StateError` names the first field that does not fit.

    >>> decode_chain([{"world_size": 1, "num_workers": [2], "positions": [[3, 1]]}], "MapStream")
    [Level(world_size=1, num_workers=(2,), positions=((3, 1),), tokens=None, pending=None)]
    >>> decode_chain([{"world_size": 1, "positions": [8], "pending": [[7]]}], "DynamicBatchLoader", pending=True,
    ...              one_worker=True)[0].pending   # version 1
    ((7,),)
    >>> decode_chain([{"world_size": 1, "num_workers": [1], "positions": [[3]], "tokens": [[2]]}], "YoumuDataset")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: YoumuDataset state field 'resumed'[0] records 'tokens', which a YoumuDataset's levels ...
    """
    levels = []
    for f, lv in state_levels({field: raw}, field, owner=owner, label=label):
        w = state_value_int(lv.get("world_size"), f"{f}['world_size']", owner=owner, minimum=1)
        if "num_workers" not in lv and pending and one_worker:
            levels.append(_sampler_level_v1(lv, f, w, owner))
            continue
        for name, allowed in (("tokens", tokens), ("pending", pending)):
            if name in lv and not allowed:
                raise StateError(f"{owner} state field {f} records {name!r}, which a {owner}'s levels never hold")
        ks = state_value_ints(lv.get("num_workers"), f"{f}['num_workers']", owner=owner, n=w, minimum=1)
        if one_worker and any(k != 1 for k in ks):
            raise StateError(f"{owner} state field {f}['num_workers'] must be one per rank, got {list(ks)[:8]}")
        check_shards(ks, owner=owner, where=f"state field {f}['num_workers']")
        levels.append(Level(w, ks, _grid(lv, "positions", f, ks, owner),
                            _grid(lv, "tokens", f, ks, owner) if "tokens" in lv else None,
                            _pending(lv, f, w, owner) if pending else None))
    return levels


def encode_chains(chains: Sequence[Sequence[Level]]) -> list[list[dict[str, Any]]]:
    """The chains of streams that resumed in step (a Ray deployment's sources: one
    chain per source, the same jobs in each), each in :func:`encode_chain`'s form.

    >>> [c[0]["positions"] for c in encode_chains([[Level(1, (1,), ((4,),))], [Level(1, (1,), ((2,),))]])]
    [[[4]], [[2]]]
    """
    return [encode_chain(c) for c in chains]


def decode_chains(raw: Any, owner: str, *, count: int, field: str = "resumed") -> list[list[Level]]:
    """``count`` chains of one shard per rank, run in step (:func:`encode_chains`; or
    version 1, a Ray planner's list of jobs ``{"world_size", "positions":
    [rank][stream]}``), validated: every chain has the same jobs of the same world
    sizes. A :class:`StateError` names the first field that does not fit.

    >>> decode_chains([{"world_size": 2, "positions": [[4, 2], [3, 1]]}], "planner", count=2)[1]   # version 1
    [Level(world_size=2, num_workers=(1, 1), positions=((2,), (1,)), tokens=None, pending=None)]
    """
    if isinstance(raw, (list, tuple)) and raw and all(isinstance(job, Mapping) for job in raw):
        return _chains_v1(raw, owner, count, field)
    if not isinstance(raw, (list, tuple)) or len(raw) != count:
        raise StateError(f"{owner} state field {field!r} must hold one chain of levels per stream ({count}), "
                         f"got {raw!r:.80}")
    chains = [decode_chain(c, owner, field=field, one_worker=True, label=f"{field!r}[{i}]") for i, c in enumerate(raw)]
    for i, c in enumerate(chains[1:], 1):
        sizes, first = [lv.world_size for lv in c], [lv.world_size for lv in chains[0]]
        if sizes != first:
            raise StateError(f"{owner} state field {field!r}[{i}] holds jobs of world sizes {sizes[:8]}, "
                             f"{field!r}[0] of {first[:8]}: the streams resumed in step")
    return chains


def _chains_v1(raw: Sequence[Mapping[str, Any]], owner: str, count: int, field: str) -> list[list[Level]]:
    chains: list[list[Level]] = [[] for _ in range(count)]
    for j, job in enumerate(raw):
        f = f"{field!r}[{j}]"
        w = state_value_int(job.get("world_size"), f"{f}['world_size']", owner=owner, minimum=1)
        pos = job.get("positions")
        if not isinstance(pos, (list, tuple)) or len(pos) != w:
            raise StateError(f"{owner} state field {f}['positions'] must have one entry per rank ({w}), "
                             f"got {pos!r:.80}")
        rows = [state_value_ints(p, f"{f}['positions'][{r}]", owner=owner, n=count) for r, p in enumerate(pos)]
        for c in range(count):
            chains[c].append(Level(w, (1,) * w, tuple((row[c],) for row in rows)))
    return chains
