"""youmu.ray: disaggregated source loaders on a real (local) Ray cluster.

What these tests specify:

* the Ray path delivers, on every rank, exactly the ``(batch, MicroBatchInfo)``
  sequence of the in-process ``BalancedLoader`` for the same sources, schedule (with a
  mixture stage switch), capacity, cost model, balancing and seed — every sample, its
  order, its micro-batch and every info field;
* killing a source loader (at a random step) or the planner, or removing a node that
  hosts loaders, changes nothing in what is delivered;
* a loader that cannot come back (killed for good, or hanging) is a
  ``LoaderUnavailableError`` on every rank within the timeout, never a hang;
* a checkpoint taken mid-epoch resumes on a fresh deployment with exactly the tail;
* states and deployments of other settings are refused.

One Ray cluster serves the whole module (``ray.cluster_utils.Cluster``: a head node
and two nodes offering a ``loader`` resource, small object stores), started once: Ray
start-up is the expensive part.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="youmu.ray needs Ray: pip install 'youmu[ray]'")
pytest.importorskip("torch")
import planning_mp  # noqa: E402
import ray_streams as rs  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from youmu.errors import InvalidArgumentError, LoaderUnavailableError, StateError  # noqa: E402
from youmu.ray import RayBalancedLoader, RayLoaders, Source  # noqa: E402

# a Ray cluster per module (56 s): the whole module runs in make test-system
pytestmark = pytest.mark.slow

# functions of ray_streams reach the actors by value (tests/support is not on
# the workers' path)
ray.cloudpickle.register_pickle_by_value(rs)

TIMEOUT = 20.0  # seconds a loader may take to answer, restarts included


# ----------------------------------------------------------------------------------------
# fixtures: one cluster, the data, the in-process reference
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster() -> Any:
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": 100 << 20, "resources": {"head": 100}})
    c.add_node(num_cpus=1, object_store_memory=80 << 20, resources={"loader": 100})
    c.add_node(num_cpus=1, object_store_memory=80 << 20, resources={"loader": 100})
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return rs.write_sources(tmp_path_factory.mktemp("ray-sources"))


@pytest.fixture(scope="module")
def reference(paths: dict[str, str]) -> list[list[Any]]:
    """Every rank's micro-batches from BalancedLoader on 2 Gloo ranks (spawned)."""
    got = planning_mp.run_world(rs.in_process, rs.WORLD, paths, timeout=120)
    assert all(status == "ok" for status, _ in got), got
    return [res for _, res in got]


def deploy(paths: dict[str, str], name: str, **kw: Any) -> RayLoaders:
    """A deployment of the three sources, loaders pinned to the ``loader`` nodes and
    the planner to the head."""
    kw.setdefault("loader_options", {"resources": {"loader": 1}})
    kw.setdefault("planner_options", {"resources": {"head": 1}})
    return RayLoaders({n: Source(p, **rs.STREAM) for n, p in paths.items()}, world_size=rs.WORLD, name=name,
                      namespace="youmu-tests", timeout=kw.pop("timeout", TIMEOUT), **rs.PLAN, **kw)


@pytest.fixture(scope="module")
def golden(cluster: Any, paths: dict[str, str]) -> Any:
    loaders = deploy(paths, "golden")
    yield loaders
    loaders.shutdown()


def run(clients: list[RayBalancedLoader], between: Any = None) -> list[list[Any]]:
    """Iterate every rank's client in lockstep (as DDP would); ``between(k)`` runs after
    the k-th micro-batch of every rank."""
    its = [iter(c) for c in clients]
    out: list[list[Any]] = [[] for _ in clients]
    k = 0
    while True:
        items = [next(it, None) for it in its]
        if all(x is None for x in items):
            return out
        assert all(x is not None for x in items), "ranks delivered different numbers of micro-batches"
        for r, x in enumerate(items):
            out[r].append(rs.key(x))
        if between is not None:
            between(k)
        k += 1


# ----------------------------------------------------------------------------------------
# the same stream as in process
# ----------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_reference_exercises_what_matters(reference: list[list[Any]]) -> None:
    """The golden run covers a stage switch, carried samples and several steps."""
    infos = [info for info, _ in reference[0]]
    assert len(infos) >= 18 and len({i.step for i in infos}) >= 6
    assert any(i.deferred for i in infos), "capacity never deferred a sample: the carry is untested"
    assert {i.step for i in infos if i.source_counts.get("code")} < {i.step for i in infos}, "no stage switch"


@pytest.mark.parametrize("shuffle", ["page", "row", "local", "none", "page-slices"])
@pytest.mark.parametrize("world,drop_last,budget", [(1, False, None), (2, True, None), (3, False, 60_000)])
def test_loaders_read_the_rows_youmu_dataset_yields(paths: dict[str, str], shuffle: str, world: int,
                                                    drop_last: bool, budget: int | None) -> None:
    """A loader's torch-free ParquetStream is YoumuDataset.iter_positions, position for
    position, and reads the same rows back one by one."""
    import youmu
    from youmu.streams.parquet import ParquetStream
    from youmu.torch import YoumuDataset

    index = youmu.PageIndex(paths["web"], columns=["id", "input_ids"])
    drop = rs.drop_every_seventh
    kw: dict[str, Any] = dict(shuffle=shuffle, buffer_size=40, seed=7, drop_last=drop_last, output="numpy",
                              memory_budget=budget, transform=drop)
    if shuffle == "page-slices":
        kw.update(shuffle="page", page_slices=3)
    for rank in range(world):
        ds = YoumuDataset(index, rank=rank, world_size=world, **kw)
        mine = Source(index, **kw).build(index, rank, world)
        assert isinstance(mine, ParquetStream)
        for epoch in (0, 2):
            ds.set_epoch(epoch)
            mine.set_epoch(epoch)
            for start in (0, 13):
                want = [(p, int(r["id"])) for p, r in ds.iter_positions(start)]
                assert [(p, int(r["id"])) for p, r in mine.iter_positions(start)] == want
                assert want or world == 3
                # and row by row, through the row map (how a loader re-reads an evicted row)
                some = want[::5][::-1]
                assert [int(r["id"]) for r in mine.rows_at([p for p, _ in some])] == [i for _, i in some]


@pytest.mark.timeout(60)
def test_in_process_deployment_equals_balanced_loader(paths: dict[str, str], reference: list[list[Any]]) -> None:
    """``local=True`` runs the loaders' and planner's code in one process: the same plans."""
    loaders = RayLoaders({n: Source(p, **rs.STREAM) for n, p in paths.items()}, world_size=rs.WORLD, local=True,
                         **rs.PLAN)
    assert run([loaders.client(r, prefetch=0) for r in range(rs.WORLD)]) == reference


@pytest.mark.timeout(180)
def test_ray_path_equals_balanced_loader(golden: RayLoaders, reference: list[list[Any]]) -> None:
    """Same samples, order, micro-batch assignment and MicroBatchInfo on both ranks."""
    got = run([golden.client(r) for r in range(rs.WORLD)])
    assert got == reference


@pytest.mark.timeout(120)
def test_a_client_found_by_name_gets_the_same_stream(golden: RayLoaders, reference: list[list[Any]]) -> None:
    deployment = RayLoaders.connect("golden", namespace="youmu-tests")
    assert run([RayBalancedLoader(deployment, r, prefetch=1) for r in range(rs.WORLD)]) == reference


# ----------------------------------------------------------------------------------------
# failover
# ----------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_killing_a_loader_at_a_random_step_changes_nothing(golden: RayLoaders, reference: list[list[Any]]) -> None:
    rng = random.Random(os.environ.get("YOUMU_TEST_SEED", "ray-kill"))
    victim = rng.choice(golden.loader_names)
    at = rng.randrange(len(reference[0]) - 3)
    killed = []

    def kill(k: int) -> None:
        if k == at:
            ray.kill(golden.actors()[victim], no_restart=False)  # Ray restarts it
            killed.append(victim)

    got = run([golden.client(r) for r in range(rs.WORLD)], between=kill)
    assert killed, "the loader was not killed"
    assert got == reference, f"killing {victim} after micro-batch {at} changed the stream"


@pytest.mark.timeout(180)
def test_killing_the_planner_changes_nothing(golden: RayLoaders, reference: list[list[Any]]) -> None:
    def kill(k: int) -> None:
        if k == 7:  # mid-step: the restarted planner resumes from a client's state
            ray.kill(golden.actors()[golden.planner_name], no_restart=False)

    got = run([golden.client(r) for r in range(rs.WORLD)], between=kill)
    assert got == reference
    assert golden.stats()[golden.planner_name]["seeded"] >= 1  # the new process resumed from a client's state


@pytest.mark.timeout(240)
def test_a_standby_takes_over_from_a_loader_that_dies(cluster: Any, paths: dict[str, str],
                                                      reference: list[list[Any]]) -> None:
    """With ``standby=True`` each loader has a replica that answers the same calls; a
    primary killed for good leaves the stream unchanged."""
    loaders = deploy(paths, "standby", standby=True, sources_per_loader=3, hedge_after=0.2)
    try:
        def kill(k: int) -> None:
            if k == 4:
                ray.kill(loaders.actors()["standby.loader0"], no_restart=True)

        assert run([loaders.client(r) for r in range(rs.WORLD)], between=kill) == reference
        served = ray.get(loaders.actors()["standby.loader0.standby"].stats.remote(), timeout=60)["rows_read"]
        assert served["records"] + served["payload_misses"] > 0, "the standby never answered"
    finally:
        loaders.shutdown()


def _until_error(its: list[Any], started: threading.Event) -> list[tuple[Any, float | None]]:
    """Each rank goes on (on its own thread) until its loader fails: ``(error, seconds
    after ``started`` was set)`` per rank."""
    out: list[tuple[Any, float | None]] = [(None, None)] * len(its)
    t0: list[float] = []

    def go(r: int) -> None:
        try:
            for _ in its[r]:
                time.sleep(0.01)
            out[r] = ("finished", None)
        except Exception as e:  # noqa: BLE001 - what the test is about
            out[r] = (e, time.monotonic() - t0[0] if t0 else None)

    threads = [threading.Thread(target=go, args=(r,)) for r in range(len(its))]
    for t in threads:
        t.start()
    started.wait(30)
    t0.append(time.monotonic())
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a rank hangs"
    return out


@pytest.mark.timeout(180)
def test_a_loader_that_never_comes_back_is_a_typed_error_on_every_rank(cluster: Any, paths: dict[str, str]) -> None:
    timeout = 6.0
    loaders = deploy(paths, "doomed", sources_per_loader=3, timeout=timeout)
    try:
        its = [iter(loaders.client(r, prefetch=1)) for r in range(rs.WORLD)]
        for it in its:
            next(it)  # running
        ray.kill(loaders.actors()["doomed.loader0"], no_restart=True)  # and it may not restart
        started = threading.Event()
        started.set()
        out = _until_error(its, started)
        for r, (err, after) in enumerate(out):
            assert isinstance(err, LoaderUnavailableError), f"rank {r}: {err!r}"
            assert err.actor == "doomed.loader0" and "doomed.loader0" in str(err)
            assert after is not None and after < timeout + 10, f"rank {r} took {after:.1f} s"
    finally:
        loaders.shutdown()


@pytest.mark.timeout(180)
def test_a_hung_loader_is_a_typed_error_on_every_rank_within_the_timeout(cluster: Any, paths: dict[str, str],
                                                                          tmp_path: Path) -> None:
    import functools

    timeout = 5.0
    flag = tmp_path / "hang"
    transform = functools.partial(rs.stall_when_flagged, str(flag))
    loaders = RayLoaders({n: Source(p, transform=transform, **rs.STREAM) for n, p in paths.items()},
                         world_size=rs.WORLD, name="hung", namespace="youmu-tests", timeout=timeout,
                         sources_per_loader=3, loader_options={"resources": {"loader": 1}}, **rs.PLAN)
    try:
        its = [iter(loaders.client(r, prefetch=1)) for r in range(rs.WORLD)]
        for it in its:
            next(it)
        started = threading.Event()
        flag.touch()  # from now on the loader stalls on the next row it reads
        started.set()
        out = _until_error(its, started)
        for r, (err, after) in enumerate(out):
            assert isinstance(err, LoaderUnavailableError), f"rank {r}: {err!r}"
            assert err.actor == "hung.loader0"
            # each rank may wait out its own call once: at most two timeouts, never a hang
            assert after is not None and after < 2 * timeout + 10, f"rank {r} took {after:.1f} s"
    finally:
        flag.unlink(missing_ok=True)
        loaders.shutdown()


@pytest.mark.timeout(240)
def test_removing_a_node_reschedules_its_loaders_and_changes_nothing(cluster: Any, paths: dict[str, str],
                                                                     reference: list[list[Any]]) -> None:
    loaders = deploy(paths, "nodes")
    try:
        nodes = {ray.get(h.ping.remote(), timeout=60)["node"] for n, h in loaders.actors().items()
                 if n != loaders.planner_name}
        victim = next(n for n in cluster.worker_nodes if n.node_id in nodes)
        removed = []

        def remove(k: int) -> None:
            if k == 5:
                cluster.remove_node(victim)
                removed.append(victim)

        got = run([loaders.client(r) for r in range(rs.WORLD)], between=remove)
        assert removed
        assert got == reference
        after = {ray.get(h.ping.remote(), timeout=60)["node"] for n, h in loaders.actors().items()
                 if n != loaders.planner_name}
        assert victim.node_id not in after, "a loader still runs on the removed node"
    finally:
        loaders.shutdown()
        if len(cluster.worker_nodes) < 2:  # give later tests their node back
            cluster.add_node(num_cpus=1, object_store_memory=80 << 20, resources={"loader": 100})
            cluster.wait_for_nodes()


# ----------------------------------------------------------------------------------------
# resume
# ----------------------------------------------------------------------------------------
@pytest.mark.timeout(240)
@pytest.mark.parametrize("stop_after", [7, 9])  # mid-step (7 % 3 = 1), and at a step boundary
def test_resume_from_a_mid_epoch_checkpoint_gives_the_exact_tail(golden: RayLoaders, paths: dict[str, str],
                                                                  reference: list[list[Any]], stop_after: int) -> None:
    clients = [golden.client(r) for r in range(rs.WORLD)]
    its = [iter(c) for c in clients]
    head = [[rs.key(next(it)) for _ in range(stop_after)] for it in its]
    # the checkpoint: a few integers, through JSON (as a trainer's checkpoint might keep it)
    states = [json.loads(json.dumps(c.state_dict())) for c in clients]
    for c in clients:
        c.close()
    assert all(st["step"] * rs.PLAN["num_microbatches"] + st["microbatch"] == stop_after for st in states)
    fresh = deploy(paths, f"resumed{stop_after}")  # new actors: nothing survives but the states
    try:
        resumed = [fresh.client(r) for r in range(rs.WORLD)]
        for c, st in zip(resumed, states):
            c.load_state_dict(pickle.loads(pickle.dumps(st)))
        tail = run(resumed)
        for r in range(rs.WORLD):
            assert head[r] + tail[r] == reference[r]
    finally:
        fresh.shutdown()


def test_a_state_of_other_settings_is_refused(paths: dict[str, str]) -> None:
    a = RayLoaders({n: Source(p, **rs.STREAM) for n, p in paths.items()}, world_size=rs.WORLD, local=True, **rs.PLAN)
    other = dict(rs.PLAN, seed=4)
    b = RayLoaders({n: Source(p, **rs.STREAM) for n, p in paths.items()}, world_size=rs.WORLD, local=True, **other)
    state = a.client(0).state_dict()
    with pytest.raises(StateError, match="config"):
        b.client(0).load_state_dict(state)
    with pytest.raises(StateError, match="RayBalancedLoader"):
        a.client(0).load_state_dict({"format": "youmu.planning.BalancedLoader/2"})
    with pytest.raises(StateError, match="'positions'"):
        a.client(0).load_state_dict(dict(state, planner=dict(state["planner"], positions=[[0, 0, 0]])))


@pytest.mark.timeout(120)
def test_a_deployment_name_with_other_settings_is_refused(golden: RayLoaders, paths: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError, match="other settings"):
        RayLoaders({n: Source(p, **dict(rs.STREAM, seed=8)) for n, p in paths.items()}, world_size=rs.WORLD,
                   name="golden", namespace="youmu-tests", loader_options={"resources": {"loader": 1}},
                   planner_options={"resources": {"head": 1}}, **rs.PLAN)


def test_clients_refuse_to_run_in_dataloader_workers(paths: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.utils.data

    from youmu.errors import LoaderError

    loaders = RayLoaders({n: Source(p, **rs.STREAM) for n, p in paths.items()}, world_size=rs.WORLD, local=True,
                         **rs.PLAN)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    with pytest.raises(LoaderError, match="DataLoader worker"):
        next(iter(loaders.client(0)))


# ----------------------------------------------------------------------------------------
# sources that cannot open, arguments, connecting
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("broken", "error"), [
    ({"paths": "/nonexistent/youmu-ray/missing.parquet"}, "YoumuIOError"),
    ({"columns": ["id", "not_a_column"]}, "ColumnNotFoundError"),
])
def test_a_source_that_cannot_open_raises_its_own_error_and_frees_the_name(cluster: Any, paths: dict[str, str],
                                                                           broken: dict[str, Any],
                                                                           error: str) -> None:
    import youmu.errors

    first = sorted(paths)[0]

    def sources(bad: bool) -> dict[str, Source]:
        out = {}
        for n, p in paths.items():
            kw = dict(rs.STREAM)
            if bad and n == first:
                kw.update({k: v for k, v in broken.items() if k != "paths"})
                p = broken.get("paths", p)
            out[n] = Source(p, **kw)
        return out

    opts = dict(world_size=rs.WORLD, name="broken", namespace="youmu-tests", timeout=TIMEOUT,
                loader_options={"resources": {"loader": 1}}, planner_options={"resources": {"head": 1}}, **rs.PLAN)
    with pytest.raises(getattr(youmu.errors, error)) as caught:
        RayLoaders(sources(True), **opts)
    assert not isinstance(caught.value, ray.exceptions.RayError)
    # nothing of the failed deployment runs, and its names are free
    for suffix in ("planner", "loader0", "loader1", "loader2"):
        with pytest.raises(ValueError):
            ray.get_actor(f"broken.{suffix}", namespace="youmu-tests")
    fixed = RayLoaders(sources(False), **opts)  # the same name, the source corrected: starts
    try:
        assert len(list(fixed.client(0, prefetch=0).iter_steps())) > 0
    finally:
        fixed.shutdown()


def test_ray_arguments_are_checked_before_anything_starts(paths: dict[str, str]) -> None:
    from youmu.errors import ArgumentTypeError

    p = next(iter(paths.values()))
    with pytest.raises(InvalidArgumentError, match="shuffle"):
        Source(p, shuffle="bogus")
    with pytest.raises(ArgumentTypeError, match="storage_options"):
        Source(p, storage_options=["endpoint"])
    with pytest.raises(InvalidArgumentError, match="hedge_after"):
        RayLoaders({n: Source(q, **rs.STREAM) for n, q in paths.items()}, world_size=rs.WORLD, local=True,
                   hedge_after=-1, **rs.PLAN)
    with pytest.raises(ArgumentTypeError, match="deployment"):
        RayBalancedLoader(None, 0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="columns"):
        Source(p, columns=[1])
    local = RayLoaders({n: Source(q, **rs.STREAM) for n, q in paths.items()}, world_size=rs.WORLD, local=True,
                       **rs.PLAN)
    with pytest.raises(InvalidArgumentError, match="epoch"):
        local.client(0).set_epoch(2**70)


def test_connect_without_ray_init_says_so_and_starts_no_cluster() -> None:
    import subprocess

    code = ("import ray\n"
            "from youmu.errors import LoaderError\n"
            "from youmu.ray import RayLoaders\n"
            "try:\n"
            "    RayLoaders.connect('nothing-here')\n"
            "except LoaderError as e:\n"
            "    print('refused:', e)\n"
            "print('initialised:', ray.is_initialized())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "refused: Ray is not initialised" in out.stdout, out.stdout + out.stderr
    assert "initialised: False" in out.stdout
