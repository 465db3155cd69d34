"""What a careless user (or a broken peer) could hand the planning layer — absurd
sizes, foreign or malformed states, bad vectors — each ending in a typed error that
names the argument or field, or in correct data; and memory that follows the data,
not the arguments."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from workloads import arrival_assignment

from youmu.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    PlanError,
    ProtocolError,
    StateError,
    YoumuError,
)
from youmu.planning import (
    BalancedLoader,
    CostModel,
    Mesh,
    MixingSchedule,
    ModelConfig,
    Planner,
    SampleMeta,
    balance,
    imbalance,
    pack_microbatch,
)
from youmu.planning.engine.balance import balance_detailed
from youmu.planning.engine.metrics import MAX_SLOTS
from youmu.planning.settings import MAX_MICROBATCHES
from youmu.planning.state.checkpoint import BALANCED_LOADER_FORMAT

ROOT = Path(__file__).resolve().parents[2]


def _peak_mib(fn: Callable[[], Any]) -> tuple[Any, float]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


# -- absurd sizes: refused before anything is allocated --------------------------------------------
ABSURD: list[tuple[str, Callable[[], Any], str]] = [
    ("balance num_buckets", lambda: balance([1, 2], num_buckets=10**9), "num_buckets"),
    ("balance num_bins", lambda: balance([1, 2], 1, num_bins=10**9), "num_bins"),
    ("balance grid", lambda: balance([1, 2], 2**11, num_bins=2**10), "num_bins"),
    ("balance_detailed", lambda: balance_detailed([1], 10**12, reorder_only=True), "num_buckets"),
    ("imbalance", lambda: imbalance([1], [(0, 0)], 10**9), "num_buckets"),
    ("distribute num_buckets", lambda: Planner().distribute(10**9), "num_buckets"),
    ("distribute num_microbatches", lambda: Planner().distribute(2, 10**9), "num_microbatches"),
    ("distribute mesh", lambda: Planner().distribute(mesh=Mesh(dp=10**6, cp=10**3), axis="CP"), "num_buckets"),
    ("loader num_microbatches", lambda: BalancedLoader([], num_microbatches=10**9, global_batch_size=1),
     "num_microbatches"),
    ("loader num_microbatches over the per-rank limit",
     lambda: BalancedLoader([], num_microbatches=MAX_MICROBATCHES + 1, global_batch_size=1), "num_microbatches"),
    ("arrival_assignment num_items", lambda: arrival_assignment(-1, 2), "num_items"),
]


@pytest.mark.parametrize("case", ABSURD, ids=[c[0] for c in ABSURD])
def test_absurd_sizes_are_refused_naming_the_argument(case: tuple) -> None:
    _, fn, name = case
    start = time.perf_counter()
    with pytest.raises(InvalidArgumentError, match=name) as info:
        _peak_mib(fn)
    assert isinstance(info.value, ValueError)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(method="kk"),
        dict(capacity=10, sizes=[1, 2]),
        dict(method="kk", capacity=10, sizes=[1, 2]),
        dict(num_bins=2**10, num_buckets=2**10, placement="greedy"),
        dict(num_bins=2**10, num_buckets=2**10, reorder_only=True, method="interleave"),
        dict(num_bins=2**10, num_buckets=2**10, reorder_only=True, method="greedy"),
        dict(num_buckets=2**10, num_bins=2**10, group_size=2**5),
    ],
    ids=["greedy", "kk", "greedy+capacity", "kk+capacity", "placement greedy", "reorder interleave",
         "reorder greedy", "groups"],
)
def test_more_slots_than_samples_costs_a_few_words_per_slot(kw: dict) -> None:
    """Up to MAX_SLOTS slots for two samples: the result's statistics hold a float per
    slot (8 MiB each at the limit); nothing else grows with the empty slots (measured:
    24 MiB peak at most, against 100-225 MiB and seconds before)."""
    kw = dict(kw)
    kw.setdefault("num_buckets", MAX_SLOTS)
    start = time.perf_counter()
    res, peak = _peak_mib(lambda: balance_detailed([1, 2], **kw))
    assert peak < 48, f"{peak:.0f} MiB for two samples"
    assert time.perf_counter() - start < 5
    placed = res.assignment
    assert all(a is not None for a in placed) and placed[0] != placed[1]
    assert res.stats.bin_costs.shape == (kw["num_buckets"], kw.get("num_bins", 1))
    assert res.stats.bin_costs.sum() == 3


def test_large_values_that_allocate_nothing_are_fine() -> None:
    # capacity and batch sizes are numbers, not allocations
    assert balance([1, 2], 2, capacity=10**18, sizes=[1, 2]) == [(1, 0), (0, 0)]
    counts = MixingSchedule({"a": 1, "b": 3}).counts(0, 10**15)
    assert counts == {"a": 25 * 10**13, "b": 75 * 10**13}
    planner = Planner().mix({"a": 1}, global_batch_size=10**15).distribute(2)
    with pytest.raises(PlanError, match="needs 1,000,000,000,000,000|needs 1000000000000000"):
        planner.plan(0, SampleMeta.build(ids=[0, 1], lengths=[5, 6]))
    assert arrival_assignment(6, 10**9, 10**9) == [(r, 0) for r in range(6)]


def test_schedule_memory_does_not_grow_with_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk keeps a bounded number of checkpoints (thinned as it goes), and a jump
    back from any of them still gives the counts of one uninterrupted walk."""
    import youmu.planning.engine.schedule as schedule

    def spec(step: int) -> dict[str, float]:
        return {"a": 1.0 + step % 7, "b": 2.0, "c": float(step % 3 == 0)}

    reference = MixingSchedule(spec, names=["a", "b", "c"])
    want = [reference.count_vector(k, 9).tolist() for k in range(600)]
    monkeypatch.setattr(schedule, "_CHECKPOINT_EVERY", 4)
    monkeypatch.setattr(schedule, "_MAX_CHECKPOINTS", 8)
    thin = MixingSchedule(spec, names=["a", "b", "c"])
    assert thin.count_vector(599, 9).tolist() == want[599]
    walk = thin._memo[9]
    assert len(walk.checkpoints) <= 8 and walk.every > 4
    rng = np.random.default_rng(0)
    for k in rng.integers(0, 600, 40).tolist():  # jumps back and forth
        assert thin.count_vector(k, 9).tolist() == want[k], k
    assert len(walk.checkpoints) <= 8


# -- malformed vectors from a peer ------------------------------------------------------------------
@pytest.mark.parametrize("vec", [[], [5], [-1, 0], [2, 0, 1, 2], [1, 3, 7, 0, 1, 1, 5], [1, 1, 7, 0, 1, -1, 5]])
def test_malformed_metadata_vectors_are_refused(vec: list[int]) -> None:
    with pytest.raises(InvalidArgumentError, match="metadata vector"):
        SampleMeta.decode(vec)


def test_a_step_status_no_rank_could_send_is_a_protocol_error() -> None:
    torch = pytest.importorskip("torch")
    from youmu.planning.steps.exchange import OK, StepExchange

    class Garbled:
        """A two-rank channel whose peer sends status 9."""

        rank, world_size = 0, 2

        def all_gather_rows(self, values: Any) -> list[list[int]]:
            return [list(values), list(values)]

        def all_gather_int64(self, values: Any) -> list[Any]:
            t = torch.as_tensor(values, dtype=torch.int64)
            bad = t.clone()
            bad[0] = 9
            return [t, bad]

    with pytest.raises(ProtocolError, match="rank\\(s\\) \\[1\\]"):
        StepExchange(Garbled()).gather(OK, [0, 0])


# -- foreign and malformed states --------------------------------------------------------------------
class Stateful:
    def __init__(self, data: list[Any]) -> None:
        self.data, self.pos = data, 0
        self.epochs: list[int] = []

    def __iter__(self):
        while self.pos < len(self.data):
            self.pos += 1
            yield self.data[self.pos - 1]

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pos = state["pos"]

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def _data(n: int = 40) -> list[dict[str, Any]]:
    return [{"id": i, "input_ids": [0] * (5 + i % 9)} for i in range(n)]


def _loader(src: Any = None, **kw: Any) -> BalancedLoader:
    kw.setdefault("prefetch", 0)
    return BalancedLoader(Stateful(_data()) if src is None else src, num_microbatches=2, global_batch_size=6,
                          id_fn=lambda s: s["id"], **kw)


@pytest.fixture(scope="module")
def saved() -> dict[str, Any]:
    loader = _loader()
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    assert state["mode"] == "state" and state["carry"] == [] and state["format"] == BALANCED_LOADER_FORMAT
    state["carry"] = [(99, 0, [5], 5, {"id": 99, "input_ids": [0] * 5})]  # a held sample, as a budget leaves
    return state


FOREIGN: list[tuple[str, Callable[[dict], Any], str]] = [
    ("None", lambda s: None, "NoneType"),
    ("a list", lambda s: [s], "list"),
    ("another stream's", lambda s: {"format": "youmu.MapStream/1", "positions": {}}, "youmu.MapStream/1"),
    ("untagged", lambda s: {k: v for k, v in s.items() if k != "format"}, "untagged"),
    ("mode", lambda s: dict(s, mode="fast"), "'mode'"),
    ("world_size", lambda s: dict(s, world_size=2), "world_size"),
    ("world_size missing", lambda s: {k: v for k, v in s.items() if k != "world_size"}, "world_size"),
    ("num_microbatches", lambda s: dict(s, num_microbatches="2"), "num_microbatches"),
    ("config", lambda s: dict(s, config=None), "config"),
    ("rank", lambda s: dict(s, rank=3), "rank"),
    ("step type", lambda s: dict(s, step="3"), "'step'"),
    ("step negative", lambda s: dict(s, step=-1), "'step'"),
    ("microbatch bool", lambda s: dict(s, microbatch=True), "'microbatch'"),
    ("microbatch range", lambda s: dict(s, microbatch=2), "'microbatch'"),
    ("streams missing", lambda s: {k: v for k, v in s.items() if k != "streams"}, "'streams'"),
    ("streams not dicts", lambda s: dict(s, streams=["default"]), "'streams'"),
    ("streams names", lambda s: dict(s, streams=[dict(s["streams"][0], name="web")]), "streams"),
    ("streams done", lambda s: dict(s, streams=[dict(s["streams"][0], done="no")]), "'done'"),
    ("streams pending", lambda s: dict(s, streams=[dict(s["streams"][0], pending=None)]), "'pending'"),
    ("streams source_state", lambda s: dict(s, streams=[{k: v for k, v in s["streams"][0].items()
                                                         if k != "source_state"}]), "source_state"),
    ("carry missing", lambda s: {k: v for k, v in s.items() if k != "carry"}, "'carry'"),
    ("carry entry", lambda s: dict(s, carry=[(1, 2)]), "'carry'\\[0\\]"),
    ("carry source", lambda s: dict(s, carry=[(1, 5, [3], 3, None)]), "'carry'\\[0\\]"),
    ("carry documents", lambda s: dict(s, carry=[(1, 0, [-3], 3, None)]), "'carry'\\[0\\]"),
    ("next_index", lambda s: dict(s, next_index=None), "'next_index'"),
    ("epoch type", lambda s: dict(s, epoch="1"), "'epoch'"),
    ("epoch negative", lambda s: dict(s, epoch=-1), "'epoch'"),
]


@pytest.mark.parametrize("case", FOREIGN, ids=[c[0] for c in FOREIGN])
def test_foreign_and_malformed_states_name_the_field(saved: dict[str, Any], case: tuple) -> None:
    _, mutate, field = case
    with pytest.raises(StateError, match=field) as info:
        _loader().load_state_dict(mutate(dict(saved)))
    assert isinstance(info.value, ValueError)


def test_the_well_formed_state_loads_and_resumes(saved: dict[str, Any]) -> None:
    loader = _loader()
    loader.load_state_dict(saved)
    out = [info.sample_ids for _, info in loader]
    assert 99 in {i for ids in out for i in ids}  # the held sample comes back


# -- set_epoch ---------------------------------------------------------------------------------------
def test_set_epoch_forwards_before_iterating_and_at_the_next_pass_after() -> None:
    mixed = BalancedLoader({"a": Stateful(_data()), "b": _data()}, num_microbatches=1, global_batch_size=4,
                           schedule={"a": 1, "b": 1}, prefetch=0)
    mixed.set_epoch(np.int64(4))
    assert mixed._sources["a"].epochs == [4] and mixed.epoch == 4  # the list has no epochs: left as it is
    with pytest.raises(ArgumentTypeError, match="epoch"):
        mixed.set_epoch(1.0)
    with pytest.raises(InvalidArgumentError, match="epoch"):
        mixed.set_epoch(-1)
    next(iter(mixed))
    mixed.set_epoch(5)  # the pass in progress keeps its epoch: forwarded when the next one starts
    assert mixed._sources["a"].epochs == [4] and mixed.epoch == 5
    next(iter(mixed))
    assert mixed._sources["a"].epochs == [4, 5]


def test_set_epoch_keeps_a_loaded_resume_point(saved: dict[str, Any]) -> None:
    from youmu.state.contract import Stream

    loader = _loader()
    assert isinstance(loader, Stream)  # the stream contract: state_dict, load_state_dict, set_epoch, iter
    loader.load_state_dict(saved)
    loader.set_epoch(0)
    assert loader.state_dict() == saved  # no silent restart


class EpochShuffled:
    """A stateful source whose order is a function of its epoch."""

    def __init__(self, data: list[Any]) -> None:
        self.data, self.epoch, self.pos = data, 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        order = np.random.default_rng(self.epoch).permutation(len(self.data))
        while self.pos < len(order):
            self.pos += 1
            yield self.data[order[self.pos - 1]]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]


@pytest.mark.parametrize("resume_mode", ["replay", "state"])
def test_a_loaded_state_resumes_its_epoch_without_a_set_epoch_call(resume_mode: str) -> None:
    """A state of epoch 1 loaded into a new loader (of epoch 0): the rest of epoch 1 —
    replayed over fresh sources set to epoch 1, or restored — and the states saved
    after it say epoch 1."""
    def loader() -> BalancedLoader:
        return _loader(EpochShuffled(_data()), resume_mode=resume_mode)

    def ids(batches: Any) -> list[list[int]]:
        return [info.sample_ids for _, info in batches]

    ref = loader()
    ref.set_epoch(1)
    full = ids(ref)
    assert full != ids(loader())  # another epoch, another order
    partial = loader()
    partial.set_epoch(1)
    it = iter(partial)
    head = ids(next(it) for _ in range(3))
    state = pickle.loads(pickle.dumps(partial.state_dict()))
    assert state["mode"] == resume_mode and state["epoch"] == 1
    resumed = loader()
    resumed.load_state_dict(state)
    it = iter(resumed)
    rest = ids([next(it)])
    assert resumed.epoch == 1 and resumed.state_dict()["epoch"] == 1
    rest += ids(it)
    assert head + rest == full


# -- the layer's contract ----------------------------------------------------------------------------
def test_every_error_the_layer_raises_is_a_youmu_error() -> None:
    from planning_cases import BAD_ARGUMENTS

    for name, fn, exc, _ in BAD_ARGUMENTS:
        with pytest.raises(exc) as info:
            fn()
        assert isinstance(info.value, YoumuError), (name, type(info.value))


def test_no_planning_module_imports_torch() -> None:
    code = (
        "import sys, warnings, pkgutil, importlib\n"
        "import youmu.planning as p\n"
        "names = [m.name for m in pkgutil.walk_packages(p.__path__, prefix='youmu.planning.')]\n"
        "for n in names: importlib.import_module(n)\n"
        "assert len(names) >= 20, names\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# Fingerprints of a few settings as saved states hold them (values computed before
# youmu.distributed.fingerprint replaced the loader's own hash): they must not move.
PINNED_FINGERPRINTS = {
    "gbs": (dict(num_microbatches=2, global_batch_size=8), 358761962605028069),
    "gbs numpy": (dict(num_microbatches=2, global_batch_size=np.int64(8)), 3885078501240576394),
    "tokens": (dict(num_microbatches=3, token_budget=4096, capacity=1200, method="kk"), 7624747875213829926),
    "tokens numpy capacity": (dict(num_microbatches=3, token_budget=4096, capacity=np.int32(1200),
                                   cost="llama-12b"), 9135402918525215930),
    "reorder": (dict(num_microbatches=3, reorder_only=True, method="interleave"), 2595752023974260984),
    "placement": (dict(num_microbatches=3, global_batch_size=9, placement="kk", seed=7, drop_last=True),
                  3967161107164950745),
    "group": (dict(num_microbatches=2, global_batch_size=8, group_size=1), 2807563513971224198),
}


@pytest.mark.parametrize("name", sorted(PINNED_FINGERPRINTS))
def test_config_fingerprints_are_what_saved_states_hold(name: str) -> None:
    kw, want = PINNED_FINGERPRINTS[name]
    assert BalancedLoader([{"input_ids": [0] * 5}] * 4, prefetch=0, **kw).config_fingerprint() == want


def test_config_fingerprints_of_schedules_and_cost_models() -> None:
    from youmu.mixture import MixtureDataset

    data = [{"input_ids": [0] * 5}] * 4

    def fp(**kw: Any) -> int:
        src = kw.pop("source", data)
        return BalancedLoader(src, num_microbatches=2, prefetch=0, **kw).config_fingerprint()

    two = {"a": data, "b": data}
    assert fp(global_batch_size=8, cost=CostModel(a=1.0, b=2.0)) == 1066806414799672470
    assert fp(global_batch_size=8, cost=ModelConfig(hidden=64, num_layers=2)) == 5783765571490874957
    assert fp(source=two, global_batch_size=12, schedule=[(0, {"a": 3, "b": 1}), (5, {"a": 1, "b": 1})]) \
        == 2079886895413149607
    assert fp(source=two, global_batch_size=12, schedule={"a": 0.3, "b": 0.7}) == 4432118155780365528
    mix = MixtureDataset({"a": range(100), "b": range(50)}, {"a": 3, "b": 1}, block_size=8)
    assert fp(source=two, global_batch_size=8, schedule=mix) == 5808531403956911341


def test_module_paths_resolve() -> None:
    for name in ("steps.microbatch", "steps.rank_sources", "steps.exchange", "state.checkpoint", "balanced_loader", "engine.planner", "steps.packing"):
        assert importlib.import_module(f"youmu.planning.{name}").__all__



MORE_TYPES: list[tuple[str, Callable[[], Any], str]] = [
    ("preset list", lambda: ModelConfig.preset(["llama-12b"]), "preset"),
    ("fit intercept", lambda: CostModel.fit([[1], [2], [3]], [1, 2, 3], intercept="no"), "intercept"),
    ("pack ignore_index", lambda: pack_microbatch([{"input_ids": [1]}], ignore_index=-100.0), "ignore_index"),
    ("pack key", lambda: pack_microbatch([{"input_ids": [1]}], key=0), "key"),
]


@pytest.mark.parametrize("case", MORE_TYPES, ids=[c[0] for c in MORE_TYPES])
def test_more_arguments_of_the_wrong_type(case: tuple) -> None:
    what, fn, name = case
    if what.startswith("pack"):
        pytest.importorskip("torch")
    with pytest.raises(ArgumentTypeError, match=name):
        fn()
