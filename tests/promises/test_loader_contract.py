"""youmu's loader contract (:class:`youmu.state.contract.Loader`), checked the same way
against all three loaders: ``DynamicBatchLoader`` (youmu.batching),
``BalancedLoader`` (youmu.planning) and ``RayBalancedLoader`` (youmu.ray, on a local
Ray cluster). Each is one rank over the same shuffled Parquet source
(``YoumuDataset``, ``shuffle="page"``: another epoch, another order), so a pass is
compared by the ids it delivers.

The one epoch rule (``set_epoch(e)`` on the epoch a state was loaded for keeps the
resume point, another epoch starts that epoch fresh) is checked with the same test
against the streams too: ``YoumuDataset``, ``MapStream`` and ``pack``.

Also: the plan's settings are checked in one place, so ``BalancedLoader`` and the Ray
deployment refuse the same bad settings with the same error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="youmu.ray needs Ray: pip install 'youmu[ray]'")
pytest.importorskip("torch")
import ray_streams as rs  # noqa: E402

from youmu.errors import LoaderError, StateError, YoumuError  # noqa: E402
from youmu.state import files as statefile  # noqa: E402
from youmu.state.contract import LOADER_STATE_KEYS, Loader  # noqa: E402

KINDS = ["dynamic", "balanced", "ray"]
#: the class each kind builds: every loader class in youmu is one of these (a test walks the package)
LOADER_CLASSES = {"dynamic": "youmu.batching.dynamic_loader.DynamicBatchLoader",
                  "balanced": "youmu.planning.balanced_loader.BalancedLoader",
                  "ray": "youmu.ray.client.RayBalancedLoader"}
#: loaders that adapt a loader or stream for trainers: they keep the contract's shared face
#: (read-only ``epoch`` under the one epoch rule, ``close(timeout=None)``, ``with``) but not
#: its passes — a new ``iter()`` after a finished pass is the next epoch, as trainers expect
#: (youmu.integrations.trainer_loader) — so they are walked by the tests at the end, not by ``make``
ADAPTER_CLASSES = {"trainer": "youmu.integrations.trainer_loader.TrainerLoader"}
STREAMS = ["youmu_dataset", "map_stream", "pack"]
_STREAM = {k: v for k, v in rs.STREAM.items() if k != "columns"}
_PLAN = dict(num_microbatches=2, global_batch_size=16, cost="llama-12b", seed=3)


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return rs.write_sources(tmp_path_factory.mktemp("contract-sources"))["web"]


@pytest.fixture(scope="module")
def cluster() -> Any:
    # address="local": a cluster of its own, never one another test process left in
    # /tmp/ray/ray_current_cluster (ray.init() would join that one, and refuse num_cpus)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=80 << 20)
    yield
    ray.shutdown()


def _dataset(path: str) -> Any:
    import youmu
    from youmu.torch import YoumuDataset

    return YoumuDataset(youmu.PageIndex(path, columns=rs.STREAM["columns"]), rank=0, world_size=1, **_STREAM)


def _factory(request: pytest.FixtureRequest, path: str, kind: str) -> Iterator[Callable[[], Any]]:
    made: list[Any] = []
    deployments: list[Any] = []
    if kind == "ray":
        request.getfixturevalue("cluster")
        from youmu.ray import RayLoaders, Source

        deployments.append(RayLoaders({"web": Source(path, **rs.STREAM)}, world_size=1, schedule={"web": 1},
                                      name="contract", **_PLAN))

    def new() -> Any:
        if kind == "dynamic":
            from youmu.batching import DynamicBatchLoader

            loader = DynamicBatchLoader(_dataset(path), token_budget=600, length_fn=lambda s: len(s["input_ids"]),
                                        pool_size=16, num_workers=0)
        elif kind == "balanced":
            from youmu.planning import BalancedLoader

            loader = BalancedLoader({"web": _dataset(path)}, schedule={"web": 1}, prefetch=1, **_PLAN)
        elif kind == "ray":
            loader = deployments[0].client(0, prefetch=1)
        elif kind == "youmu_dataset":
            return _dataset(path)
        elif kind == "map_stream":
            from youmu.torch import MapStream

            return MapStream([{"id": i} for i in range(40)], rank=0, world_size=1, chunk=3)
        else:
            from youmu.torch import pack

            return pack(_dataset(path), seq_len=48)
        made.append(loader)
        return loader

    yield new
    for loader in made:
        loader.close()
    for d in deployments:
        d.shutdown()


@pytest.fixture(params=KINDS)
def make(request: pytest.FixtureRequest, path: str) -> Iterator[Callable[[], Any]]:
    """A factory of equally configured loaders of one kind (closed at the end)."""
    yield from _factory(request, path, request.param)


@pytest.fixture(params=KINDS + STREAMS)
def make_any(request: pytest.FixtureRequest, path: str) -> Iterator[Callable[[], Any]]:
    """A factory of equally configured loaders or streams of one kind."""
    yield from _factory(request, path, request.param)


def _ids(item: Any) -> tuple[int, ...]:
    """What a delivered item is compared by: a loader's ``(batch, info)`` by its samples'
    ids, a stream's row by its id, a packed sequence by its tokens."""
    if not isinstance(item, tuple):
        if "cu_seqlens" in item:
            return tuple(item["input_ids"].tolist())
        return (int(item["id"]),)
    batch = item[0]
    return () if batch is None else tuple(int(s["id"]) for s in batch)


def _pass(loader: Any) -> list[tuple[int, ...]]:
    return [_ids(x) for x in loader]


def _take(it: Iterator[Any], n: int) -> list[tuple[int, ...]]:
    return [_ids(next(it)) for _ in range(n)]


# -- every loader, one contract ---------------------------------------------------------------
def _loader_classes() -> set[str]:
    """Every class in the package that is a loader: it declares ``yields_pairs = True`` or
    derives from one of youmu.loaders.passes' loader bases (read from the source, so a loader in
    a module nobody imports is found too)."""
    import ast

    import youmu

    root = Path(youmu.__file__).parent
    bases = {"PassLoader", "StepLoader", "LoaderState"}
    found = set()
    for path in root.rglob("*.py"):
        module = ".".join(("youmu", *path.relative_to(root).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or node.name in bases:
                continue
            names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            names |= {b.value.id for b in node.bases if isinstance(b, ast.Subscript) and isinstance(b.value, ast.Name)}
            declares = any(isinstance(x, ast.Assign) and any(getattr(t, "id", None) == "yields_pairs" for t in x.targets)
                           for x in node.body)
            if declares or names & bases:
                found.add(f"{module}.{node.name}")
    return found


def test_every_loader_in_the_package_is_walked_by_these_tests() -> None:
    """A new loader class must be added to ``KINDS`` (and so to every test here), or be an
    adapter walked by the adapter tests."""
    assert _loader_classes() == set(LOADER_CLASSES.values()) | set(ADAPTER_CLASSES.values())


def test_a_loader_outside_the_walk_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import youmu

    fake = tmp_path / "youmu"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "stray.py").write_text("class Stray:\n    yields_pairs = True\n")
    monkeypatch.setattr(youmu, "__file__", str(fake / "__init__.py"))
    assert _loader_classes() == {"youmu.stray.Stray"}


@pytest.mark.parametrize("kind", KINDS + list(ADAPTER_CLASSES))
def test_every_loader_shares_the_one_pass_bookkeeping(kind: str) -> None:
    import importlib

    from youmu.loaders.passes import PassLoader

    module, name = {**LOADER_CLASSES, **ADAPTER_CLASSES}[kind].rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, PassLoader)
    assert cls.epoch is PassLoader.epoch and cls.__enter__ is PassLoader.__enter__
    assert cls.__exit__ is PassLoader.__exit__


# -- iter(): an independent pass from the resume point -----------------------------------------
def test_every_loader_keeps_the_protocol(make: Callable[[], Any]) -> None:
    assert isinstance(make(), Loader)


def test_epoch_is_a_read_only_int(make: Callable[[], Any]) -> None:
    loader = make()
    assert type(loader.epoch) is int and loader.epoch == 0
    loader.set_epoch(2)
    assert type(loader.epoch) is int and loader.epoch == 2
    with pytest.raises(AttributeError):
        loader.epoch = 3
    assert loader.epoch == 2


def test_a_second_iter_is_a_new_pass_from_the_epoch_start(make: Callable[[], Any]) -> None:
    loader = make()
    first = _pass(loader)
    assert len(first) > 4
    assert _pass(loader) == first  # after a pass that ran out
    it = iter(loader)
    assert _take(it, 3) == first[:3]
    assert _pass(loader) == first  # while one is in progress: that one is closed


def test_a_loaded_state_starts_the_next_pass_then_the_epoch_start_again(make: Callable[[], Any]) -> None:
    loader = make()
    full = _pass(loader)
    it = iter(loader)
    _take(it, 3)
    state = statefile.loads(statefile.dumps(loader.state_dict()), where="checkpoint")
    resumed = make()
    resumed.load_state_dict(state)
    assert _pass(resumed) == full[3:]
    assert _pass(resumed) == full
    # loading during a pass closes it: the next pass starts at the loaded point
    it = iter(resumed)
    _take(it, 1)
    resumed.load_state_dict(state)
    assert _pass(resumed) == full[3:]


# -- set_epoch: any time, from the next pass on ------------------------------------------------
def test_a_loaded_state_resumes_its_epoch_without_a_set_epoch_call(make: Callable[[], Any]) -> None:
    """The state says its epoch: a new loader that loads it is in that epoch (``epoch``,
    the rest of the pass, the states it saves), whatever its own epoch was."""
    ref = make()
    ref.set_epoch(1)
    full = _pass(ref)
    it = iter(ref)
    _take(it, 3)
    state = statefile.loads(statefile.dumps(ref.state_dict()), where="checkpoint")
    del it
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.epoch == 1
    it = iter(resumed)
    head = _take(it, 1)
    assert resumed.state_dict()["epoch"] == 1  # a checkpoint taken now is of epoch 1 too
    assert head + [_ids(x) for x in it] == full[3:]


def test_set_epoch_before_a_pass(make: Callable[[], Any]) -> None:
    a, b = make(), make()
    epoch0 = _pass(a)
    b.set_epoch(1)
    epoch1 = _pass(b)
    assert sorted(i for ids in epoch1 for i in ids) == sorted(i for ids in epoch0 for i in ids)
    assert epoch1 != epoch0  # another epoch, another shuffle
    assert b.state_dict()["epoch"] == 1


def test_set_epoch_during_a_pass_takes_effect_at_the_next(make: Callable[[], Any]) -> None:
    ref0, ref1 = make(), make()
    epoch0 = _pass(ref0)
    ref1.set_epoch(1)
    epoch1 = _pass(ref1)
    loader = make()
    it = iter(loader)
    head = _take(it, 2)
    loader.set_epoch(1)
    assert head + [_ids(x) for x in it] == epoch0  # the pass in progress keeps its epoch
    assert loader.state_dict()["epoch"] == 0  # the state describes that pass
    assert _pass(loader) == epoch1


def test_set_epoch_keeps_a_resume_point_of_its_epoch_and_clears_another(make: Callable[[], Any]) -> None:
    ref = make()
    full = _pass(ref)
    it = iter(ref)
    _take(it, 3)
    state = ref.state_dict()
    kept = make()
    kept.load_state_dict(state)
    kept.set_epoch(0)
    assert _pass(kept) == full[3:]
    other, cleared = make(), make()
    other.set_epoch(1)
    cleared.load_state_dict(state)
    cleared.set_epoch(1)
    assert _pass(cleared) == _pass(other)


@pytest.mark.parametrize("merged", [False, True], ids=["own state", "merged state"])
def test_one_epoch_rule_for_streams_and_loaders(make_any: Callable[[], Any], request: pytest.FixtureRequest,
                                                merged: bool) -> None:
    """The usual loop after a resume (load the state, then ``set_epoch(e)`` for each
    epoch) continues the loaded epoch where it stopped; ``set_epoch`` of any other
    epoch starts that epoch fresh."""
    kind = request.node.callspec.params["make_any"]
    if merged and kind not in STREAMS:
        pytest.skip("a loader's merged state resumes on another topology: tests/promises/test_resume_*.py")
    import youmu

    ref = make_any()
    ref.set_epoch(1)
    full1 = _pass(ref)
    ref.set_epoch(0)
    full0 = _pass(ref)
    ref.set_epoch(1)
    it = iter(ref)
    _take(it, 3)
    state = statefile.loads(statefile.dumps(ref.state_dict()), where="checkpoint")
    if merged:
        state = youmu.merge_states([state])
    del it
    kept = make_any()
    kept.load_state_dict(state)
    kept.set_epoch(1)
    kept.set_epoch(1)  # as often as a training loop likes
    assert _pass(kept) == full1[3:]
    if not merged:  # (a merged state's epoch is what its jobs left: its passes start there)
        assert _pass(kept) == full1  # the pass after it: the epoch's start
    kept.set_epoch(2)
    kept.set_epoch(1)  # once cleared, the epoch starts fresh
    assert _pass(kept) == full1
    other = make_any()
    other.load_state_dict(state)
    other.set_epoch(0)
    assert _pass(other) == full0


# -- state_dict: one schema ------------------------------------------------------------------------
def test_state_dict_schema(make: Callable[[], Any]) -> None:
    loader = make()
    before = loader.state_dict()
    assert set(LOADER_STATE_KEYS) <= set(before) and before["epoch"] == 0
    assert before["world_size"] == 1 and before["rank"] == 0 and isinstance(before["format"], str)
    it = iter(loader)
    _take(it, 2)
    mid = loader.state_dict()
    assert set(LOADER_STATE_KEYS) <= set(mid) and mid != before
    with pytest.raises(StateError):
        make().load_state_dict({"format": "youmu.MapStream/1", "world_size": 1, "rank": 0, "epoch": 0})
    with pytest.raises(StateError):
        make().load_state_dict(dict(mid, world_size=2))


# -- close(): stops the pass, idempotent, the loader stays usable ----------------------------------
def test_close(make: Callable[[], Any]) -> None:
    loader = make()
    loader.close()  # before any pass
    full = _pass(loader)
    it = iter(loader)
    _take(it, 2)
    loader.close()
    loader.close()
    assert _pass(loader) == full


def test_close_has_one_signature_and_every_loader_is_a_context_manager(make: Callable[[], Any]) -> None:
    import inspect

    loader = make()
    params = inspect.signature(loader.close).parameters
    assert list(params) == ["timeout"] and params["timeout"].default is None
    full = _pass(loader)
    with loader as same:
        assert same is loader
        it = iter(loader)
        _take(it, 2)
    loader.close(timeout=1.0)  # the block closed the pass already: a no-op
    assert _pass(loader) == full


def test_passes_on_two_gloo_ranks() -> None:
    """Across ranks, passes are collective: every rank starts the next one together,
    after the last ran out or every rank closed it."""
    import planning_mp

    got = planning_mp.run_world(planning_mp.scenario_passes, 2, timeout=120)
    assert all(status == "ok" for status, _ in got), got
    for _, res in got:
        assert len(res["first"]) > 4
        assert res["second"] == res["first"] == res["third"]
        assert res["head"] == res["first"][:3]


# -- a source that cannot be iterated again ------------------------------------------------------
def test_a_one_shot_source_refuses_a_second_pass_with_a_typed_error() -> None:
    from youmu.planning import BalancedLoader

    rows = [{"id": i, "input_ids": [0] * (i % 5 + 1)} for i in range(12)]
    loader = BalancedLoader(iter(rows), num_microbatches=1, global_batch_size=4, prefetch=0)
    assert len(list(loader)) == 3
    with pytest.raises(LoaderError, match="cannot start another pass: source \\['default'\\] is an iterator"):
        list(loader)
    assert len(list(BalancedLoader(rows, num_microbatches=1, global_batch_size=4, prefetch=0))) == 3


# -- one plan-settings object: the same refusals ---------------------------------------------------
BAD_SETTINGS: list[dict[str, Any]] = [
    dict(num_microbatches=0),
    dict(num_microbatches=2, method="best"),
    dict(num_microbatches=2, placement="nearest"),
    dict(num_microbatches=2, seed=-1),
    dict(num_microbatches=2, capacity=0),
    dict(num_microbatches=2, drop_last="yes"),
    dict(num_microbatches=2, cost="no-such-model"),
    dict(num_microbatches=2, global_batch_size=None),
    dict(num_microbatches=2, token_budget=1000),
    dict(num_microbatches=2, schedule={"web": 1, "code": 1}),
    dict(num_microbatches=2, group_size=3),
]


@pytest.mark.parametrize("bad", BAD_SETTINGS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_balanced_loader_and_the_ray_deployment_refuse_the_same_settings(path: str, bad: dict[str, Any]) -> None:
    from youmu.planning import BalancedLoader, PlanSettings
    from youmu.ray import RayLoaders, Source

    kw = dict(global_batch_size=16, schedule={"web": 1})
    kw.update(bad)
    errors = []
    for build in (lambda: BalancedLoader({"web": [{"input_ids": [1]}]}, **kw),
                  lambda: RayLoaders({"web": Source(path, **rs.STREAM)}, world_size=1, local=True, **kw),
                  lambda: PlanSettings.make(names=["web"], world_size=1, **kw)):
        with pytest.raises(YoumuError) as info:
            build()
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1] == errors[2]


def test_one_settings_object_drives_both_deployments(path: str) -> None:
    from youmu.errors import InvalidArgumentError
    from youmu.planning import BalancedLoader, PlanSettings
    from youmu.ray import RayLoaders, Source

    settings = PlanSettings.make(names=["web"], world_size=1, schedule={"web": 1}, **_PLAN)
    by_object = BalancedLoader({"web": _dataset(path)}, settings=settings, prefetch=0)
    by_keywords = BalancedLoader({"web": _dataset(path)}, schedule={"web": 1}, prefetch=0, **_PLAN)
    assert by_object.config_fingerprint() == by_keywords.config_fingerprint() == settings.fingerprint()
    assert _pass(by_object) == _pass(by_keywords)
    local = RayLoaders({"web": Source(path, **rs.STREAM)}, settings=settings, local=True)
    assert local.settings == settings
    assert _pass(local.client(0, prefetch=0)) == _pass(by_keywords)
    with pytest.raises(InvalidArgumentError, match="settings= or \\['seed'\\], not both"):
        BalancedLoader({"web": []}, settings=settings, seed=4)
    with pytest.raises(InvalidArgumentError, match="settings= or \\['seed'\\], not both"):
        RayLoaders({"web": Source(path, **rs.STREAM)}, settings=settings, seed=4, local=True)


# -- TrainerLoader: the same rule, and its own epoch count --------------------------------------
@pytest.fixture(params=["youmu_dataset", "map_stream", "pack"])
def make_trainer_loader(request: pytest.FixtureRequest, path: str) -> Iterator[Callable[[], Any]]:
    """A factory of ``TrainerLoader``s over one kind of stream (one rank)."""
    from youmu.integrations import TrainerLoader
    from youmu.torch import collate_packed

    for new in _factory(request, path, request.param):
        def loader() -> Any:
            if request.param == "pack":
                return TrainerLoader(new(), batch_size=2, collate_fn=collate_packed)
            return TrainerLoader(new(), batch_size=3, collate_fn=lambda rows: {"id": [int(r["id"]) for r in rows]})

        yield loader


def _batch_ids(batch: Any) -> tuple[int, ...]:
    if "cu_seqlens" in batch:
        return tuple(batch["input_ids"].flatten().tolist())
    return tuple(batch["id"])


def _trainer_pass(loader: Any) -> list[tuple[int, ...]]:
    return [_batch_ids(b) for b in loader]


def test_trainer_loader_follows_the_one_epoch_rule(make_trainer_loader: Callable[[], Any],
                                                   request: pytest.FixtureRequest) -> None:
    """``TrainerLoader.set_epoch``: the loaded epoch keeps its resume point, another epoch
    starts fresh; without calls, each pass after a finished one is the next epoch."""
    ref = make_trainer_loader()
    ref.set_epoch(1)
    full1 = _trainer_pass(ref)
    full2 = _trainer_pass(ref)  # no set_epoch: the loader's own next epoch
    ref.set_epoch(0)
    full0 = _trainer_pass(ref)
    if request.node.callspec.params["make_trainer_loader"] != "map_stream":  # (a list: every epoch alike)
        assert full0 != full1 != full2
    ref.set_epoch(1)
    it = iter(ref)
    [_batch_ids(next(it)) for _ in range(2)]
    state = statefile.loads(statefile.dumps(ref.state_dict()), where="checkpoint")
    kept = make_trainer_loader()
    kept.load_state_dict(state)
    kept.set_epoch(1)
    kept.set_epoch(1)  # as often as a training loop likes
    assert _trainer_pass(kept) == full1[2:]
    assert _trainer_pass(kept) == full2 and kept.epoch == 2
    kept.set_epoch(1)  # the pass began since the load: epoch 1 afresh
    assert _trainer_pass(kept) == full1
    other = make_trainer_loader()
    other.load_state_dict(state)
    other.set_epoch(0)
    assert _trainer_pass(other) == full0 and other.epoch == 0
    fresh = make_trainer_loader()
    fresh.load_state_dict(state)
    fresh.set_epoch(3)
    ref.set_epoch(3)
    assert _trainer_pass(fresh) == _trainer_pass(ref)



def test_trainer_loader_keeps_the_contracts_face(make_trainer_loader: Callable[[], Any]) -> None:
    """Over any stream: the loader protocol, a read-only int ``epoch`` and one ``close``."""
    import inspect

    from youmu.state.contract import Loader

    loader = make_trainer_loader()
    assert isinstance(loader, Loader)
    params = inspect.signature(loader.close).parameters
    assert list(params) == ["timeout"] and params["timeout"].default is None
    assert type(loader.epoch) is int and loader.epoch == 0
    with pytest.raises(AttributeError):
        loader.epoch = 3
    _trainer_pass(loader)
    assert type(loader.epoch) is int and loader.epoch == 0


def test_trainer_loader_close_and_with_stop_the_pass_in_progress(make_trainer_loader: Callable[[], Any]) -> None:
    """``close(timeout)`` stops the pass in progress, idempotently; ``with`` closes on the
    way out, however the block is left; the loader stays usable."""
    loader = make_trainer_loader()
    full = _trainer_pass(loader)
    loader.set_epoch(0)
    it = iter(loader)
    next(it)
    loader.close(timeout=1.0)
    assert next(it, None) is None
    loader.close()
    with pytest.raises(KeyError), loader as same:
        assert same is loader
        it = iter(loader)
        next(it)
        raise KeyError("the block fails")
    assert next(it, None) is None and loader.epoch == 0
    assert _trainer_pass(loader) == full


def test_trainer_loader_starts_a_left_pass_s_epoch_afresh(make_trainer_loader: Callable[[], Any]) -> None:
    """A pass the trainer left early (no state loaded since) is not continued: the next
    ``iter()`` delivers the whole epoch again, every batch of it, as its source's next pass
    does (youmu.state.contract's loader contract)."""
    loader = make_trainer_loader()
    full = _trainer_pass(loader)
    loader.set_epoch(0)
    it = iter(loader)
    assert _batch_ids(next(it)) == full[0]
    del it
    assert _trainer_pass(loader) == full and loader.epoch == 0
    _trainer_pass(loader)
    assert loader.epoch == 1  # then the next epoch, as ever


@pytest.mark.parametrize("kind", ["dynamic", "balanced"])
def test_trainer_loader_closes_its_loader_source_s_pass(path: str, kind: str) -> None:
    """Over a loader of ``(batch, info)`` pairs, ``close(timeout)`` closes the source's pass
    too: its background thread is gone when ``close`` returns."""
    import threading

    from youmu.integrations import TrainerLoader

    def ids(rows: list[Any]) -> dict[str, Any]:
        return {"id": [int(r["id"]) for r in rows]}

    if kind == "dynamic":
        from youmu.batching import DynamicBatchLoader

        source: Any = DynamicBatchLoader(_dataset(path), token_budget=600, length_fn=lambda s: len(s["input_ids"]),
                                         pool_size=16, num_workers=0, collate_fn=ids)
    else:
        from youmu.planning import BalancedLoader

        source = BalancedLoader({"web": _dataset(path)}, schedule={"web": 1}, prefetch=1, collate_fn=ids, **_PLAN)
    with source:
        before = set(threading.enumerate())
        loader = TrainerLoader(source)
        with loader:
            it = iter(loader)
            next(it)
            assert set(threading.enumerate()) - before  # the pass runs on its own thread
        assert next(it, None) is None
        assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
        loader.close(timeout=1.0)
