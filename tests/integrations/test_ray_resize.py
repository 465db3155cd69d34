"""youmu.ray: a deployment resumed on another number of ranks, or with another
mixture, from the states its clients saved (``youmu.merge_states``).

What these tests specify:

* the clients' states of a deployment of ``W`` ranks, merged, load into every client
  of a deployment of ``W'`` ranks (2 → 3, 2 → 1, 2 → 3 → 1): it resumes at the same
  step on every rank, with its own global batch size from that step, and across the
  deployments every row of every source comes exactly once — carried samples (read
  back from the old streams by position) included;
* a new mixing schedule at the resume, with and without a resize, draws each step's
  counts from the new schedule from the resume step on, and still delivers every row
  exactly once (each source's consumed positions are kept);
* the loaders' resumed Parquet streams are the rows a ``YoumuDataset`` resumed from
  the same merged state yields, and read back one by one through the row map;
* states of a missing rank, of another kind, of other data or settings, or saved
  inside a step are a ``StateError`` naming the field.

Most tests run the deployment in process (``local=True``: the actors' code, no Ray);
the ones marked ``ray`` run it on a real local Ray cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="youmu.ray needs Ray: pip install 'youmu[ray]'")
pytest.importorskip("torch")
import ray_streams as rs  # noqa: E402

import youmu  # noqa: E402
from youmu.errors import StateError  # noqa: E402
from youmu.planning import MixingSchedule  # noqa: E402
from youmu.ray import RayBalancedLoader, RayLoaders, Source  # noqa: E402

# a Ray cluster per module (18 s): the whole module runs in make test-system
pytestmark = pytest.mark.slow

ray.cloudpickle.register_pickle_by_value(rs)

#: every row delivered (no ``drop_last``, no source weighted 0): exactly-once is
#: checkable as "each id once"; a stage switch at step 5
PLAN = dict(rs.PLAN, drop_last=False, schedule=[(0, {"web": 2, "code": 1, "math": 1}),
                                                (5, {"web": 1, "code": 1, "math": 3})])
NEW_SCHEDULE = [(0, {"web": 1, "code": 2, "math": 1})]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return rs.write_sources(tmp_path_factory.mktemp("ray-resize-sources"))


@pytest.fixture(scope="module")
def all_ids(paths: dict[str, str]) -> Counter[int]:
    import pyarrow.parquet as pq

    return Counter(int(i) for p in paths.values() for i in pq.read_table(p, columns=["id"])["id"].to_pylist())


def deploy(paths: dict[str, str], world: int, *, stream: dict[str, Any] | None = None, **kw: Any) -> RayLoaders:
    plan = dict(PLAN)
    plan.update({k: kw.pop(k) for k in list(kw) if k in plan})
    return RayLoaders({n: Source(p, **(stream or rs.STREAM)) for n, p in paths.items()}, world_size=world, **plan,
                      **kw)


class Ranks:
    """Every rank's client of a deployment, iterated in lockstep by whole steps (as
    DDP would: one pass, however many calls)."""

    def __init__(self, clients: list[RayBalancedLoader]) -> None:
        self.clients = clients
        self._its = [c.iter_steps() for c in clients]

    def steps(self, limit: int | None = None) -> list[list[Any]]:
        """Up to ``limit`` more steps (all of them): per step, every rank's micro-batches."""
        out = []
        while limit is None or len(out) < limit:
            got = [next(it, None) for it in self._its]
            if all(g is None for g in got):
                break
            assert all(g is not None for g in got), "ranks delivered different numbers of steps"
            out.append(got)
        return out

    def until_carried(self, least: int = 1, most: int = 5) -> list[list[Any]]:
        """At least ``least`` steps, then steps until the planner carries samples over
        the step boundary (a resize must keep them), at most ``most``."""
        out = self.steps(least)
        while not any(self.clients[0].state_dict()["planner"]["carry"]) and len(out) < most:
            out += self.steps(1)
        return out

    def saved(self) -> list[dict[str, Any]]:
        """The clients' states, through JSON (as a checkpoint may keep them)."""
        return [json.loads(json.dumps(c.state_dict())) for c in self.clients]

    def close(self) -> None:
        for c in self.clients:
            c.close()


def clients_of(loaders: RayLoaders, **kw: Any) -> Ranks:
    return Ranks([loaders.client(r, **kw) for r in range(loaders.deployment.world_size)])


def delivered(run: list[list[Any]]) -> Counter[int]:
    """Ids of every real (not padding) sample delivered, counted."""
    return Counter(int(s["id"]) for ranks in run for items in ranks for batch, info in items
                   if not info.is_padding and batch is not None for s in batch)


def infos(run: list[list[Any]]) -> list[list[Any]]:
    """Per step, every rank's first info."""
    return [[items[0][1] for items in ranks] for ranks in run]


def usual_batch(run: list[list[Any]]) -> int:
    """The most common global batch of the steps (capacity may defer some samples)."""
    return Counter(ranks[0][0][1].global_num_samples for ranks in run).most_common(1)[0][0]


def resume(loaders: RayLoaders, merged: dict[str, Any], **kw: Any) -> Ranks:
    clients = [loaders.client(r, **kw) for r in range(loaders.deployment.world_size)]
    for c in clients:
        c.load_state_dict(merged)
    return Ranks(clients)


# ----------------------------------------------------------------------------------------
# in process: the layouts, the chain, the carry
# ----------------------------------------------------------------------------------------
def test_the_uninterrupted_run_delivers_every_row_once(paths: dict[str, str], all_ids: Counter[int]) -> None:
    """The premise of the exactly-once checks below (no drop_last: every row comes)."""
    loaders = deploy(paths, 2, local=True)
    assert delivered(clients_of(loaders, prefetch=0).steps()) == all_ids


@pytest.mark.parametrize("shuffle", ["page", "row"])
@pytest.mark.parametrize("worlds,batch_sizes,cache_rows", [
    ((2, 3), (32, 30), 8192),
    ((2, 3), (32, 32), 1),          # every payload re-read by position through the resumed plan
    ((2, 1), (32, 12), 8192),
    ((2, 3, 1), (32, 30, 12), 8192),  # a chain: two resizes in one epoch
])
def test_a_resize_delivers_every_row_exactly_once(paths: dict[str, str], all_ids: Counter[int], shuffle: str,
                                                  worlds: tuple[int, ...], batch_sizes: tuple[int, ...],
                                                  cache_rows: int) -> None:
    stream = dict(rs.STREAM, shuffle=shuffle)
    first = deploy(paths, worlds[0], stream=stream, global_batch_size=batch_sizes[0], local=True)
    ranks = clients_of(first, prefetch=0)
    got = Counter[int]()
    carried = 0
    for k, (world, gbs) in enumerate(zip(worlds[1:], batch_sizes[1:])):
        head = ranks.until_carried(2)
        got += delivered(head)
        states = ranks.saved()
        merged = youmu.merge_states(states)
        carried += sum(len(c) for c in merged["planner"]["carry"])
        step = states[0]["step"]
        nxt = deploy(paths, world, stream=stream, global_batch_size=gbs, local=True, cache_rows=cache_rows)
        ranks = resume(nxt, merged, prefetch=0)
        assert all(c.state_dict()["step"] == step for c in ranks.clients)
        if k == len(worlds) - 2:
            tail = ranks.steps()
            got += delivered(tail)
            first_infos = infos(tail)[0]
            # the same step on every rank, the new world size and batch size from it
            assert {(i.step, i.world_size) for i in first_infos} == {(step, world)}
            assert usual_batch(tail[:3]) == gbs
            assert [i.step for i in infos(tail)[-1]] == [step + len(tail) - 1] * world
    assert carried, "no sample was carried over a resize: the carry is untested"
    assert len(got) > len(all_ids) // 2
    assert got == all_ids


@pytest.mark.parametrize("module", ["youmu.mixture.mapstream", "youmu.torch"])
def test_stream_function_sources_resize_exactly_once(all_ids: Counter[int], paths: dict[str, str],
                                                     module: str) -> None:
    """Sources given as stream functions (MapStream: the torch-free one a loader needs no
    torch for, and the torch view) resume from merged stream states."""
    import importlib

    import pyarrow.parquet as pq

    MapStream = importlib.import_module(module).MapStream  # noqa: N806

    rows = {n: pq.read_table(p).to_pylist() for n, p in paths.items()}

    def source(name: str) -> Source:
        return Source(stream=lambda r, w: MapStream(rows[name], rank=r, world_size=w))

    def make(world: int) -> RayLoaders:
        return RayLoaders({n: source(n) for n in rows}, world_size=world, local=True,
                          length_fn=lambda s: len(s["input_ids"]), **PLAN)

    two = make(2)
    ranks = clients_of(two, prefetch=0)
    head = ranks.steps(4)
    merged = youmu.merge_states(ranks.saved())
    tail = resume(make(3), merged, prefetch=0).steps()
    assert delivered(head) + delivered(tail) == all_ids


def test_resumed_parquet_rows_are_what_youmu_dataset_resumes_to(paths: dict[str, str]) -> None:
    """A loader's resumed ParquetStream is YoumuDataset loaded with the same merged state."""
    from youmu.order.resume import Level
    from youmu.streams.parquet import ParquetStream
    from youmu.torch import YoumuDataset

    index = youmu.PageIndex(paths["web"], columns=["id", "input_ids"])
    kw: dict[str, Any] = dict(shuffle="page", buffer_size=40, seed=7, output="numpy", transform=rs.drop_every_seventh)
    old = [YoumuDataset(index, rank=r, world_size=2, **kw) for r in range(2)]
    states = []
    for r, ds in enumerate(old):
        ds.set_epoch(1)
        st = ds.state_dict()
        st.update(positions={0: (37, 52)[r]}, num_workers=1)
        states.append(st)
    merged = youmu.merge_states(states)
    level = Level(2, (1, 1), ((37,), (52,)))
    for rank in range(3):
        ds = YoumuDataset(index, rank=rank, world_size=3, **kw)
        ds.load_state_dict(merged)
        want = [(p, int(r["id"])) for p, r in ds.iter_positions(0)]
        mine = Source(index, **kw).build(index, rank, 3, epoch=1, levels=[level])
        assert isinstance(mine, ParquetStream)
        assert [(p, int(r["id"])) for p, r in mine.iter_positions(0)] == want and want
        some = want[::4][::-1]
        assert [int(r["id"]) for r in mine.rows_at([p for p, _ in some])] == [i for _, i in some]


@pytest.mark.parametrize("world", [2, 3])
def test_a_new_schedule_applies_from_the_resume_step(paths: dict[str, str], all_ids: Counter[int],
                                                     world: int) -> None:
    """Same or another world size: the counts of every step from the resume step are
    the new schedule's, and every row still comes exactly once."""
    first = deploy(paths, 2, local=True)
    ranks = clients_of(first, prefetch=0)
    head = ranks.steps(3)
    merged = youmu.merge_states(ranks.saved())
    # the new deployment lists the sources in another order: the state is renumbered
    nxt = deploy(dict(reversed(paths.items())), world, schedule=NEW_SCHEDULE, local=True)
    assert nxt.deployment.names != first.deployment.names
    tail = resume(nxt, merged, prefetch=0).steps()
    sched = MixingSchedule(NEW_SCHEDULE)
    full = [i for i in infos(tail) if i[0].global_num_samples == PLAN["global_batch_size"]]
    assert len(full) >= 3
    for step_infos in full[:3]:
        i = step_infos[0]
        assert i.step >= 3 and i.source_counts == sched.counts(i.step, PLAN["global_batch_size"])
    assert infos(tail)[0][0].step == 3
    assert delivered(head) + delivered(tail) == all_ids


# ----------------------------------------------------------------------------------------
# bad states
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_states(paths: dict[str, str]) -> list[dict[str, Any]]:
    loaders = deploy(paths, 2, local=True)
    ranks = clients_of(loaders, prefetch=0)
    ranks.steps(2)
    return ranks.saved()


def test_bad_states_are_refused_naming_the_field(paths: dict[str, str], two_states: list[dict[str, Any]]) -> None:
    with pytest.raises(StateError, match=r"rank\(s\) \[1\] are missing"):
        youmu.merge_states(two_states[:1])
    with pytest.raises(StateError, match="rank 0 appears twice"):
        youmu.merge_states([two_states[0], two_states[0]])
    with pytest.raises(StateError, match=r"states\[1\] is a youmu.MapStream/1 state"):
        youmu.merge_states([two_states[0], {"format": "youmu.MapStream/1"}])
    with pytest.raises(StateError, match="'microbatch'=1"):
        youmu.merge_states([dict(s, microbatch=1) for s in two_states])
    with pytest.raises(StateError, match="differ in 'step'"):
        youmu.merge_states([two_states[0], dict(two_states[1], step=7)])
    with pytest.raises(StateError, match="differ in 'planner'"):
        youmu.merge_states([two_states[0], dict(two_states[1], planner=dict(two_states[1]["planner"], step=1))])
    with pytest.raises(StateError, match="'positions'"):
        youmu.merge_states([dict(s, planner=dict(s["planner"], positions=[[0, 0]] * 2)) for s in two_states])
    merged = youmu.merge_states(two_states)
    # other data: another seed of the sources' streams, other files
    other = deploy(paths, 3, stream=dict(rs.STREAM, seed=8), local=True)
    with pytest.raises(StateError, match="field 'data'"):
        other.client(0).load_state_dict(merged)
    moved = {n: p for n, p in zip(paths, [paths["code"], paths["web"], paths["math"]])}
    with pytest.raises(StateError, match="field 'data'"):
        deploy(moved, 3, local=True).client(0).load_state_dict(merged)
    # a plan setting a resume must keep
    with pytest.raises(StateError, match="capacity=330"):
        deploy(paths, 3, capacity=400, local=True).client(0).load_state_dict(merged)
    # a merged state of another kind, a broken planner state
    with pytest.raises(StateError, match="not of a 'youmu.ray.RayBalancedLoader/1'"):
        deploy(paths, 3, local=True).client(0).load_state_dict(dict(merged, stream="youmu.MapStream/1"))
    bad = dict(merged, planner=dict(merged["planner"], carry=[[[1, 0, [3], 3, 5, 9]], []]))
    with pytest.raises(StateError, match=r"'carry'\[0\]\[0\] names origin stream 9"):
        deploy(paths, 3, local=True).client(0).load_state_dict(bad)


def test_a_merge_of_states_loaded_but_not_iterated_says_so(paths: dict[str, str],
                                                           two_states: list[dict[str, Any]]) -> None:
    """A client saved right after loading a rank's mid-epoch state holds the planner
    state of an earlier step: refused with the reason, not merged wrongly."""
    loaders = deploy(paths, 2, local=True)
    clients = [loaders.client(r, prefetch=0) for r in range(2)]
    behind = [dict(s, planner=dict(s["planner"], step=s["step"] - 1)) for s in two_states]
    for c, st in zip(clients, behind):
        c.load_state_dict(st)
    with pytest.raises(StateError, match="not the resume step"):
        youmu.merge_states([c.state_dict() for c in clients])


# ----------------------------------------------------------------------------------------
# on a real Ray cluster
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster() -> Any:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": 100 << 20, "resources": {"head": 100}})
    c.add_node(num_cpus=1, object_store_memory=80 << 20, resources={"loader": 100})
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def on_ray(paths: dict[str, str], world: int, name: str, **kw: Any) -> RayLoaders:
    return deploy(paths, world, name=name, namespace="youmu-resize-tests", timeout=20.0, sources_per_loader=3,
                  loader_options={"resources": {"loader": 1}}, planner_options={"resources": {"head": 1}}, **kw)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world,schedule", [(3, None), (2, NEW_SCHEDULE)])
def test_on_ray_a_resumed_deployment_delivers_the_rest_exactly_once(cluster: Any, paths: dict[str, str],
                                                                     all_ids: Counter[int], world: int,
                                                                     schedule: Any) -> None:
    """2 → 3 ranks with a new global batch size, or 2 → 2 with a new mixture: new
    actors, nothing survives but the clients' states."""
    first = on_ray(paths, 2, f"resize-a{world}")
    try:
        ranks = clients_of(first)
        head = ranks.until_carried(2)
        states = ranks.saved()
        ranks.close()
    finally:
        first.shutdown(wait=True)
    merged = youmu.merge_states(states)
    assert any(merged["planner"]["carry"]), "nothing carried at the resume step: the carry is untested"
    kw: dict[str, Any] = {"global_batch_size": 30} if schedule is None else {"schedule": schedule}
    second = on_ray(paths, world, f"resize-b{world}", **kw)
    try:
        tail = resume(second, merged).steps()
    finally:
        second.shutdown()
    gbs = kw.get("global_batch_size", PLAN["global_batch_size"])
    step = states[0]["step"]
    assert {(i.step, i.world_size) for i in infos(tail)[0]} == {(step, world)}
    if schedule is None:
        assert usual_batch(tail[:3]) == gbs
    else:
        # a step's counts include the samples carried into it: most steps have none
        new = MixingSchedule(schedule)
        assert sum(i[0].source_counts == new.counts(i[0].step, gbs) for i in infos(tail)[:4]) >= 2
    assert delivered(head) + delivered(tail) == all_ids
