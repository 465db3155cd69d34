"""BalancedLoader: single-process behaviour and 2-rank Gloo runs with exact coverage."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import planning_mp as mp  # noqa: E402

from youmu.errors import PrefetchError  # noqa: E402
from youmu.planning import BalancedLoader, CostModel, MicroBatchInfo, pack_microbatch  # noqa: E402
from youmu.planning.state.checkpoint import BALANCED_LOADER_FORMAT  # noqa: E402
from youmu.state import files as statefile  # noqa: E402


def _sid(s: dict[str, Any]) -> int:
    return int(s["id"])


def _check_coverage(records: list[list[dict]], expected: set[int], m: int, capacity: int | None = None) -> None:
    """Exactly-once delivery, equal micro-batch counts, identical plans, exact scales."""
    ranks = len(records)
    seen = Counter(i for rec in records for r in rec if not r["pad"] for i in r["ids"])
    assert set(seen) == expected, f"missing {sorted(expected - set(seen))[:10]} extra {sorted(set(seen) - expected)[:10]}"
    assert max(seen.values()) == 1, [i for i, c in seen.items() if c > 1][:10]
    assert len({len(rec) for rec in records}) == 1  # same number of micro-batches everywhere
    for rec in records:
        assert len(rec) % m == 0
        assert [r["mb"] for r in rec] == list(range(m)) * (len(rec) // m)
    by_step: dict[int, list[dict]] = defaultdict(list)
    for rec in records:
        for r in rec:
            by_step[r["step"]].append(r)
    for step, rs in by_step.items():
        assert len(rs) == ranks * m
        assert len({r["fp"] for r in rs}) == 1, f"ranks planned step {step} differently"
        assert len({r["T"] for r in rs}) == 1
        assert sum(r["scale"] for r in rs) == pytest.approx(ranks)  # Σ W·t/T = W
        assert sum(r["tokens"] for r in rs if not r["pad"]) == rs[0]["T"]
        if capacity is not None:
            assert max(r["real_tokens"] for r in rs) <= capacity
    for rec in records:
        for r in rec:
            if r["batch_ids"] is not None and not r["pad"]:
                assert r["batch_ids"] == sorted(r["ids"])  # the payloads are the planned samples


# -- single process -------------------------------------------------------------------------------
def test_single_process_token_budget_with_packing() -> None:
    data = mp.dataset(150)
    loader = BalancedLoader(iter(data), num_microbatches=4, token_budget=5000, capacity=1600, cost="llama-12b",
                            id_fn=_sid, collate_fn=pack_microbatch, prefetch=0)
    recs = []
    for batch, info in loader:
        assert isinstance(info, MicroBatchInfo)
        assert batch["input_ids"].shape[1] == info.real_tokens <= 1600
        assert int(batch["cu_seqlens"][-1]) == info.real_tokens
        recs.append({"step": info.step, "mb": info.microbatch, "ids": list(info.sample_ids), "tokens": info.num_tokens,
                     "real_tokens": info.real_tokens, "scale": info.loss_scale, "pad": info.is_padding,
                     "fp": info.fingerprint, "T": info.global_num_tokens, "batch_ids": None})
    _check_coverage([recs], set(range(150)), 4, capacity=1600)
    assert loader.state_dict()["step"] == max(r["step"] for r in recs) + 1


def test_single_process_reorder_only_keeps_microbatches() -> None:
    data = mp.dataset(40)
    units = [data[k:k + 5] for k in range(0, 40, 5)]
    loader = BalancedLoader(iter(units), num_microbatches=4, reorder_only=True, id_fn=_sid, prefetch=0)
    got = [sorted(info.sample_ids) for batch, info in loader]
    assert sorted(map(tuple, got)) == sorted(tuple(sorted(s["id"] for s in u)) for u in units)


def test_padding_slots_repeat_with_zero_scale() -> None:
    data = mp.dataset(3)
    loader = BalancedLoader(iter(data), num_microbatches=4, global_batch_size=3, id_fn=_sid, prefetch=0)
    out = list(loader)
    assert len(out) == 4
    pads = [info for _, info in out if info.is_padding]
    assert len(pads) == 1 and pads[0].loss_scale == 0.0
    assert all(batch is not None for batch, _ in out)
    assert sum(info.loss_scale for _, info in out) == pytest.approx(1.0)


def test_iterating_twice_and_argument_errors() -> None:
    loader = BalancedLoader(iter(mp.dataset(10)), num_microbatches=1, global_batch_size=5, prefetch=0)
    list(loader)
    with pytest.raises(RuntimeError, match="once"):
        list(loader)
    with pytest.raises(ValueError, match="exactly one"):
        BalancedLoader([], num_microbatches=1)
    with pytest.raises(ValueError, match="schedule"):
        BalancedLoader({"a": []}, num_microbatches=1, global_batch_size=4)
    with pytest.raises(ValueError, match="reorder_only"):
        BalancedLoader([], num_microbatches=1, global_batch_size=4, reorder_only=True)
    with pytest.raises(ValueError, match="num_microbatches"):
        BalancedLoader([], num_microbatches=0, global_batch_size=4)
    with pytest.raises(TypeError, match="micro-batch"):
        list(BalancedLoader(iter([{"id": 1}]), num_microbatches=1, reorder_only=True, prefetch=0))
    with pytest.raises(TypeError, match="length_fn"):
        list(BalancedLoader(iter([object()]), num_microbatches=1, global_batch_size=1, prefetch=0))
    with pytest.raises(ValueError, match="exceeds capacity"):
        list(BalancedLoader(iter([{"input_ids": [0] * 50}]), num_microbatches=1, global_batch_size=1,
                            capacity=49, prefetch=0))


def test_source_error_surfaces_in_the_trainer() -> None:
    def bad():
        yield {"id": 0, "input_ids": [1, 2]}
        raise KeyError("broken shard")

    with pytest.raises(KeyError, match="broken shard"):  # planned in the trainer's thread: the error as it is
        list(BalancedLoader(bad(), num_microbatches=1, global_batch_size=1, id_fn=_sid, prefetch=0))
    # planned ahead on a thread: a PrefetchError naming the loader, chained from the error
    with pytest.raises(PrefetchError, match="BalancedLoader .* computing its steps ahead .*broken shard") as info:
        list(BalancedLoader(bad(), num_microbatches=1, global_batch_size=1, id_fn=_sid, prefetch=1))
    assert isinstance(info.value.__cause__, KeyError)


def test_pack_microbatch_keeps_packed_boundaries() -> None:
    packed = {"input_ids": torch.arange(6), "cu_seqlens": torch.tensor([0, 2, 6], dtype=torch.int32)}
    b = pack_microbatch([packed, {"input_ids": [7, 8, 9]}])
    assert b["cu_seqlens"].tolist() == [0, 2, 6, 9]
    assert b["position_ids"].tolist() == [[0, 1, 0, 1, 2, 3, 0, 1, 2]]
    assert int(b["max_seqlen"]) == 4
    with pytest.raises(ValueError, match="empty"):
        pack_microbatch([])


# -- two ranks over Gloo --------------------------------------------------------------------------
@pytest.mark.timeout(150)
def test_two_ranks_every_mode_exact_coverage() -> None:
    res = mp.run_world(mp.scenario_modes, 2, timeout=120)
    assert all(s == "ok" for s, _ in res), res
    out = [r for _, r in res]
    all_ids = set(range(mp.N_SAMPLES))
    # Planner.plan_distributed: same plan on both ranks, every sample in one place
    plans = [o["planner"] for o in out]
    assert plans[0]["fingerprint"] == plans[1]["fingerprint"] and plans[0]["n"] == mp.N_SAMPLES
    planned = [i for p in plans for mb in p["ids"] for i in mb]
    assert len(planned) == len(set(planned))
    _check_coverage([o["tokens"] for o in out], all_ids, 3, capacity=1600)
    _check_coverage([o["packed"] for o in out], all_ids, 3, capacity=1600)
    assert all(r["packed_ok"] for o in out for r in o["packed"])
    _check_coverage([o["samples"] for o in out], all_ids, 2)
    _check_coverage([o["reorder"] for o in out], all_ids, 3)
    # the mixture: per-step source counts follow the schedule while both sources last
    mix = [o["mix"] for o in out]
    aux = {10_000 + i for i in range(mp.N_SAMPLES)}
    seen = {i for rec in mix for r in rec if not r["pad"] for i in r["ids"]}
    assert {i for i in seen if i < 10_000} == all_ids and {i for i in seen if i >= 10_000} == aux
    first = {r["step"]: r["sources"] for r in mix[0]}
    assert first[0] == {"main": 15, "aux": 5} and first[4] == {"main": 10, "aux": 10}
    # balancing beat what each rank would have run on its own share (full steps)
    from youmu.planning import CostModel

    cost = CostModel.from_config("llama-12b").of_lengths([len(s["input_ids"]) for s in mp.dataset()])
    shards = [list(range(mp.N_SAMPLES))[r::2] for r in range(2)]
    better = []
    for step in range(mp.N_SAMPLES // 24):
        own = [cost[shards[r][step * 12:(step + 1) * 12]].sum() for r in range(2)]
        got = [sum(cost[i] for rec in out[r]["samples"] if rec["step"] == step for i in rec["ids"]) for r in range(2)]
        assert sum(own) == pytest.approx(sum(got))  # the same global batch
        better.append(max(own) / max(got))
    assert min(better) >= 1.0 - 1e-9 and np.mean(better) > 1.05


@pytest.mark.timeout(150)
def test_two_ranks_dynamic_batch_loader_source() -> None:
    res = mp.run_world(mp.scenario_dbl, 2, timeout=120)
    assert all(s == "ok" for s, _ in res), res
    _check_coverage([r for _, r in res], set(range(mp.N_SAMPLES)), 2)


@pytest.mark.timeout(120)
def test_two_ranks_failure_propagates_fast() -> None:
    res = mp.run_world(mp.scenario_failure, 2, timeout=90)
    assert [s for s, _ in res] == ["ok", "ok"], res
    r0, r1 = res[0][1], res[1][1]
    assert r1.startswith("PrefetchError from _Boom")
    assert r0.startswith("RankFailedError")
    assert float(r0.split(" after ")[1].rstrip("s")) < 20  # not the 30 s collective timeout


@pytest.mark.timeout(150)
def test_two_ranks_stop_together_and_alone() -> None:
    together = mp.run_world(mp.scenario_stop, 2, [2, 2], timeout=60)
    assert [r for _, r in together] == ["ok 2", "ok 2"], together
    alone = mp.run_world(mp.scenario_stop, 2, [1, None], timeout=60)
    assert alone[0][1] == "ok 1", alone
    assert alone[1][1].startswith("PeerClosedError"), alone


# -- resume ---------------------------------------------------------------------------------------
def _balanced(data: Any, prefetch: int = 0, **kw: Any) -> BalancedLoader:
    kw.setdefault("id_fn", _sid)
    return BalancedLoader(data if not isinstance(data, list) else iter(data), num_microbatches=4, token_budget=5000,
                          capacity=1600, cost="llama-12b", collate_fn=pack_microbatch, prefetch=prefetch, **kw)


def _key(info: MicroBatchInfo) -> tuple:
    return (info.step, info.microbatch, info.sample_ids, info.is_padding, info.loss_scale)


def _resumed(make: Any, stop_after: int, prefetch: int, key: Any) -> tuple[list, list, dict]:
    """(what the first loader yielded before stopping, what a new loader yields after
    load_state_dict, the state) — the state goes through the state file codec as a checkpoint would."""
    first = make(prefetch)
    head: list = []
    if stop_after:
        for batch, info in first:
            head.append(key(batch, info))
            if len(head) == stop_after:
                break
    state = statefile.loads(statefile.dumps(first.state_dict()), where="checkpoint")
    first.close()
    second = make(0)
    second.load_state_dict(state)
    assert second.state_dict() == state  # loaded but not yet resumed: the same point
    return head, [key(b, i) for b, i in second], state


class Stateful:
    """A minimal stateful source (the protocol of YoumuDataset, MapStream, StatefulDataLoader):
    ``state_dict()`` is the position after the items yielded so far."""

    def __init__(self, data: list[Any]) -> None:
        self.data, self.pos = data, 0

    def __iter__(self):
        while self.pos < len(self.data):
            self.pos += 1
            yield self.data[self.pos - 1]

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pos = state["pos"]


@pytest.mark.parametrize("stop_after", [1, 4, 6, 13])
def test_resume_mid_step_yields_exactly_the_uninterrupted_tail(stop_after: int) -> None:
    data = mp.dataset(150)
    full = [_key(info) for _, info in _balanced(data)]
    head, tail, state = _resumed(lambda p: _balanced(data, prefetch=p), stop_after, 2, lambda b, i: _key(i))
    assert head + tail == full
    assert (state["step"], state["microbatch"]) == divmod(stop_after, 4)
    assert state["mode"] == "replay"  # an iterator has no state of its own: replay


@pytest.mark.parametrize("mode", ["state", "replay"])
def test_resume_at_every_point(mode: str) -> None:
    """Every stop point of a run with deferrals (capacity) and budget overshoots, default
    arrival ids (so the restored arrival counter matters) and packed payloads."""
    data = mp.dataset(150)

    def make(prefetch: int) -> BalancedLoader:
        # a real restart builds new source objects; "replay" re-reads a fresh list
        src = Stateful(data) if mode == "state" else data
        return _balanced(src, prefetch=prefetch, id_fn=None)

    def key(batch: dict, info: MicroBatchInfo) -> tuple:
        return _key(info) + (batch["input_ids"].tolist(), batch["cu_seqlens"].tolist())

    full = [key(b, i) for b, i in make(0)]
    held_over = 0
    for stop_after in range(len(full) + 1):
        head, tail, state = _resumed(make, stop_after, stop_after % 3, key)
        assert head + tail == full, stop_after
        assert state["mode"] == mode
        held_over += bool(state.get("carry"))
    if mode == "state":
        assert held_over >= 3, "some resume points should fall where samples are held over"


def test_resume_mixing_and_dynamic_batch_loader_sources() -> None:
    """State mode with youmu's own stateful sources: two MapStreams mixed by a schedule,
    and a DynamicBatchLoader whose flattened steps leave samples pending."""
    from youmu.batching.dynamic_loader import DynamicBatchLoader
    from youmu.torch import MapStream

    data = mp.dataset(150)
    aux = [dict(s, id=10_000 + s["id"], input_ids=s["input_ids"][:30]) for s in data[:60]]

    def mixed(prefetch: int) -> BalancedLoader:
        return BalancedLoader({"main": MapStream(data, rank=0, world_size=1), "aux": MapStream(aux, rank=0,
                                                                                                world_size=1)},
                              num_microbatches=2, global_batch_size=20, capacity=1600, id_fn=_sid, prefetch=prefetch,
                              schedule=[(0, {"main": 3, "aux": 1}), (3, {"main": 1, "aux": 1})])

    def dbl(prefetch: int) -> BalancedLoader:
        src = DynamicBatchLoader(data, token_budget=2048, length_fn=lambda s: len(s["input_ids"]), collate_fn=None,
                                 pool_size=32, num_workers=0, seed=1, timeout=30)
        return BalancedLoader(src, num_microbatches=2, global_batch_size=20, capacity=1600, id_fn=_sid,
                              prefetch=prefetch)

    for make in (mixed, dbl):
        full = [_key(i) for _, i in make(0)]
        pending = 0
        for stop_after in range(0, len(full) + 1, 3):
            head, tail, state = _resumed(make, stop_after, 1, lambda b, i: _key(i))
            assert head + tail == full, (make.__name__, stop_after)
            assert state["mode"] == "state"
            pending += sum(len(st["pending"]) for st in state["streams"])
        if make is dbl:
            assert pending > 0, "some resume points should fall inside a DynamicBatchLoader step"


@pytest.mark.timeout(120)
def test_resume_from_a_youmu_dataset_state(tmp_path: Path) -> None:
    """YoumuDataset (Parquet, page-shuffled) is stateful: a resume restores its row
    positions instead of re-reading, and yields the uninterrupted run's tail."""
    pytest.importorskip("pyarrow")
    import importlib.util

    from parquet_fixtures import write_token_rows

    if importlib.util.find_spec("youmu._core") is None:  # pragma: no cover
        pytest.skip("the native core is not built")
    from youmu.torch import YoumuDataset

    rng = np.random.default_rng(0)
    lens = np.where(rng.random(400) < 0.1, rng.integers(600, 1500, 400), rng.integers(5, 120, 400))
    write_token_rows(tmp_path / "part-0.parquet", lens, data_page_size=4096, row_group_size=100, use_dictionary=False)

    def make(prefetch: int) -> BalancedLoader:
        ds = YoumuDataset(tmp_path, columns=["input_ids", "id"], seed=3, rank=0, world_size=1)
        return _balanced(ds, prefetch=prefetch)

    def key(batch: dict, info: MicroBatchInfo) -> tuple:
        return _key(info) + (batch["input_ids"].tolist(),)

    full = [key(b, i) for b, i in make(0)]
    assert sorted(i for k in full if not k[3] for i in k[2]) == list(range(lens.size))
    for stop_after in (1, 6, len(full) // 2, len(full) - 1):
        head, tail, state = _resumed(make, stop_after, 1, key)
        assert state["mode"] == "state"
        assert bool(state["streams"][0]["source_state"]["positions"]) == (state["step"] > 0)
        assert head + tail == full, stop_after


def test_resume_state_is_checked() -> None:
    data = mp.dataset(40)
    state = _balanced(data).state_dict()
    assert state["format"] == BALANCED_LOADER_FORMAT and (state["step"], state["microbatch"]) == (0, 0)
    for other, key in [
        (dict(num_microbatches=2), "num_microbatches"),
        (dict(token_budget=6000), "config"),
        (dict(capacity=1700), "config"),
        (dict(cost=CostModel(a=1.0)), "config"),
        (dict(method="kk"), "config"),
        (dict(seed=3), "config"),
        (dict(drop_last=True), "config"),
    ]:
        kw = dict(num_microbatches=4, token_budget=5000, capacity=1600, cost="llama-12b", id_fn=_sid, prefetch=0)
        kw.update(other)
        with pytest.raises(ValueError, match=key):
            BalancedLoader(iter(data), **kw).load_state_dict(state)
    # the mixing schedule is compared by content, not by its (names-only) repr
    def mix(weights: dict) -> BalancedLoader:
        return BalancedLoader({"a": data, "b": data}, num_microbatches=1, global_batch_size=4, schedule=weights,
                              prefetch=0)
    with pytest.raises(ValueError, match="config"):
        mix({"a": 1, "b": 2}).load_state_dict(mix({"a": 1, "b": 1}).state_dict())
    mix({"a": 1, "b": 1}).load_state_dict(mix({"a": 1, "b": 1}).state_dict())
    with pytest.raises(ValueError, match="not a BalancedLoader state"):
        _balanced(data).load_state_dict({"step": 3})
    with pytest.raises(ValueError, match="resume position"):
        _balanced(data).load_state_dict(dict(state, microbatch=4))
    with pytest.raises(ValueError, match="rank"):  # a source state belongs to its rank
        _balanced(Stateful(data)).load_state_dict(dict(_balanced(Stateful(data)).state_dict(), rank=1))
    # the loader contract (youmu.state.contract.Loader): loading during a pass closes it, and
    # the next pass starts at the loaded resume point
    loader = _balanced(data)
    next(iter(loader))
    loader.load_state_dict(state)
    assert loader.state_dict() == state


def test_resume_mode_choice() -> None:
    data = mp.dataset(60)
    with pytest.raises(ValueError, match="state_dict"):
        _balanced(data, resume_mode="state")  # a list has no state of its own
    with pytest.raises(ValueError, match="resume_mode"):
        _balanced(data, resume_mode="fast")
    assert _balanced(Stateful(data), resume_mode="replay").state_dict()["mode"] == "replay"

    class Brittle(Stateful):
        """A source that cannot save a mid-epoch state (as a DynamicBatchLoader over a
        stateless iterable cannot)."""

        def state_dict(self) -> dict[str, int]:
            if 0 < self.pos < len(self.data):
                raise ValueError("no mid-epoch state")
            return super().state_dict()

    auto = _balanced(Brittle(data))
    it = iter(auto)
    for _ in range(5):
        next(it)
    state = auto.state_dict()  # "auto" falls back to a replay state ...
    assert state["mode"] == "replay"
    strict = _balanced(Brittle(data), resume_mode="state")
    it = iter(strict)
    for _ in range(5):
        next(it)
    with pytest.raises(RuntimeError, match="no mid-epoch state"):  # ... "state" says why it cannot
        strict.state_dict()
    with pytest.raises(ValueError, match="replay mode"):
        _balanced(Stateful(data), resume_mode="state").load_state_dict(state)
    head = [_key(i) for _, i in _balanced(data)]
    resumed = _balanced(data)  # the replay state resumes over a fresh stream
    resumed.load_state_dict(state)
    assert head[5:] == [_key(i) for _, i in resumed]


# -- two ranks: resume and exact gradients ---------------------------------------------------------
@pytest.fixture(scope="module")
def extra() -> list[dict[str, Any]]:
    res = mp.run_world(mp.scenario_extra, 2, timeout=200)
    assert all(s == "ok" for s, _ in res), res
    return [r for _, r in res]


@pytest.mark.timeout(240)
def test_two_ranks_resume_equals_the_uninterrupted_run(extra: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(extra):
        for run in out["resume"]["runs"]:
            assert run["head"] + run["tail"] == run["full"], (rank, run["mode"], len(run["head"]))
            assert run["head"] and run["tail"]
    modes = [run["mode"] for run in extra[0]["resume"]["runs"]]
    assert modes == ["state", "state", "replay", "state"]  # the last: rank 1 resumes from a replay state
    # both ranks: exactly the same micro-batch plan (fingerprints) and exact coverage
    for k in range(len(modes)):
        fps = [{(r[0], r[5]) for r in out["resume"]["runs"][k]["full"]} for out in extra]
        assert fps[0] == fps[1]
        seen = Counter(i for out in extra for r in out["resume"]["runs"][k]["head"] + out["resume"]["runs"][k]["tail"]
                       if not r[3] for i in r[2])
        assert set(seen) == set(range(mp.N_SAMPLES)) and max(seen.values()) == 1
    # a resume loaded on one rank only fails on every rank, fast, instead of hanging
    for out in extra:
        assert out["resume"]["lone"].startswith("ValueError"), out["resume"]["lone"]
        assert "same point" in out["resume"]["lone"]
        assert float(out["resume"]["lone"].split(" after ")[1].split("s:")[0]) < 10


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["reorder", "budget"])
def test_two_ranks_summed_gradient_is_the_global_batch_gradient(extra: list[dict[str, Any]], mode: str) -> None:
    """DDP with gradient accumulation: each rank sums its micro-batches' gradients of
    ``loss_scale × mean loss`` and the all-reduce averages over ranks. Whatever the plan
    moved, that must equal the per-token mean gradient over the step's global batch —
    for reorder-only, the unbalanced run's global batch, so its gradient is unchanged
    (≤ 1e-6 relative)."""
    data = mp.dataset()
    per_rank = [out["gradients"][mode] for out in extra]
    assert len(per_rank[0]) == len(per_rank[1]) > 2
    if mode == "reorder":
        # the global batch of step s is exactly the ranks' arrival-order units of step s
        units = [out["gradients"]["reorder_units"] for out in extra]
        for s, (a, b) in enumerate(zip(*per_rank)):
            want = {i for r in range(2) for u in units[r][3 * s:3 * s + 3] for i in u}
            assert set(a["ids"]) | set(b["ids"]) == want
    worst, naive_gap = 0.0, 0.0
    for a, b in zip(*per_rank):
        assert a["step"] == b["step"]
        ids = a["ids"] + b["ids"]
        assert len(ids) == len(set(ids))
        model = mp.tiny_lm()
        mp.microbatch_grad(model, [data[i] for i in sorted(ids)], 1.0)  # one pass over the global batch
        ref = mp.flat_grad(model)
        got = (a["exact"] + b["exact"]) / 2
        naive = (a["naive"] + b["naive"]) / 2
        worst = max(worst, float(np.linalg.norm(got - ref) / np.linalg.norm(ref)))
        naive_gap = max(naive_gap, float(np.linalg.norm(naive - ref) / np.linalg.norm(ref)))
    assert worst <= 1e-6
    assert naive_gap > 1e-3  # the test can fail: the usual 1/m weighting is not the per-token mean
