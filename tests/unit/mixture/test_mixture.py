"""Mixtures.

FlatMixture is a keyed permutation of a virtual concatenation; MixtureDataset allocates
exactly (exact block sizes, monotone counts, every positive weight at its rate, window
errors within the documented bounds), switches stages at the exact index, restarts or
stops finite children, nests both ways, and is a pure map (resume = set the index)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from parquet_fixtures import write_ids

import youmu
from youmu.mixture import FlatMixture, MixtureDataset


def tagged(name: str, n: int) -> list[tuple[str, int]]:
    return [(name, i) for i in range(n)]


def window_spread(child: np.ndarray, c: int, block: int, share: float, lo: int = 0) -> float:
    """max - min over block boundaries b of (count of c in [lo, lo + b·block) - b·block·share):
    the largest error over every run of whole blocks."""
    hits = (child == c).astype(np.int64)
    nb = len(child) // block
    cum = np.concatenate([[0], np.cumsum(hits[: nb * block].reshape(nb, block).sum(axis=1))])
    err = cum - np.arange(nb + 1) * block * share
    return float(err.max() - err.min())


# --------------------------------------------------------------------------------------
# FlatMixture
# --------------------------------------------------------------------------------------
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6), seed=st.integers(0, 2**64 - 1))
@settings(max_examples=60, deadline=None)
def test_flat_mixture_is_a_bijection_over_all_children(sizes: list[int], seed: int) -> None:
    children = {f"c{k}": tagged(f"c{k}", n) for k, n in enumerate(sizes)}
    fm = FlatMixture(children, seed=seed)
    assert len(fm) == sum(sizes)
    items = fm.__getitems__(list(range(len(fm))))
    assert sorted(items) == sorted(x for c in children.values() for x in c)
    child, local = fm.locate_many(np.arange(len(fm)))
    for i in range(len(fm)):
        name, k = fm.locate(i)
        assert (fm.names[child[i]], local[i]) == (name, k)
        assert children[name][k] == items[i] == fm[i]
        assert fm.position(name, k) == i


def test_flat_mixture_equals_concatenate_then_permute() -> None:
    children = {"a": tagged("a", 7), "empty": [], "b": tagged("b", 12), "c": tagged("c", 1)}
    concat = [x for c in children.values() for x in c]
    fm = FlatMixture(children, seed=3)
    perm = youmu.Permutation(len(concat), seed=3, purpose="flat-mixture")
    assert [fm[i] for i in range(len(fm))] == [concat[perm[i]] for i in range(len(concat))]
    assert list(FlatMixture(children, shuffle=False)) == concat
    assert list(fm) == [fm[i] for i in range(len(fm))]
    assert fm[-1] == fm[len(fm) - 1]
    with pytest.raises(IndexError):
        fm[len(fm)]
    with pytest.raises(IndexError):
        fm.locate_many([0, len(fm)])
    with pytest.raises(KeyError):
        fm.position("nope", 0)
    assert FlatMixture(children, seed=4).__getitems__(list(range(20))) != fm.__getitems__(list(range(20)))


def test_flat_mixture_arguments() -> None:
    with pytest.raises(ValueError):
        FlatMixture({})
    with pytest.raises(TypeError):
        FlatMixture([[1, 2]])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        FlatMixture({"a": 5})
    with pytest.raises(ValueError):
        FlatMixture({"a": [1]}, seed=-1)
    assert len(FlatMixture({"a": [], "b": []})) == 0


# --------------------------------------------------------------------------------------
# MixtureDataset: allocation
# --------------------------------------------------------------------------------------
def test_every_block_holds_exactly_block_size_samples() -> None:
    mix = MixtureDataset({k: tagged(k, 50) for k in "abcd"}, [(0, {"a": 0.7, "b": 0.2, "c": 0.09, "d": 0.01}),
                                                              (1000, {"a": 1, "d": 1})], block_size=64, length=10_000)
    for b in range(15):  # stage 0 is 1000 indices: 15 blocks of 64 and one of 40
        assert sum(mix.block_counts(b, stage=0).values()) == 64
    assert sum(mix.block_counts(15, stage=0).values()) == 1000 - 15 * 64
    with pytest.raises(ValueError):
        mix.block_counts(16, stage=0)
    for b in range(100):
        assert sum(mix.block_counts(b, stage=1).values()) == 64
    child, _ = mix.locate_many(np.arange(10_000))
    for b in range(15):
        lo = mix.block_start(b)
        got = np.bincount(child[lo:lo + 64], minlength=4)
        assert dict(zip(mix.names, got.tolist())) == mix.block_counts(b)


@pytest.mark.parametrize("weights", [{"a": 0.7, "b": 0.2, "c": 0.1}, {"a": 0.9, "b": 0.099, "c": 0.001},
                                     {"a": 1, "b": 1, "c": 1}, {f"s{k}": 1 / (k + 1) for k in range(20)}])
def test_counts_in_any_window_of_blocks_are_within_the_bound(weights) -> None:
    """Every run of whole blocks holds m·B·w ± bound samples of each child. The bound
    is below 1 for each child of a two-way split and about 1-2.5 otherwise; ±1 for
    every child at once cannot hold in general with blocks of exactly B samples."""
    mix = MixtureDataset({k: tagged(k, 1000) for k in weights}, weights, block_size=64, seed=5, length=64 * 4000)
    total = sum(weights.values())
    bounds = mix.window_bounds()[0]
    child, _ = mix.locate_many(np.arange(len(mix)))
    for c, (name, w) in enumerate(weights.items()):
        spread = window_spread(child, c, 64, w / total)
        assert spread < bounds[name] + 1e-9, (name, spread, bounds[name])
        # the bound is the recursion 1 + r·E_parent down the tree: never above the depth
        assert bounds[name] <= math.ceil(math.log2(len(weights))) + len(weights)
    assert max(bounds.values()) < 3


@pytest.mark.parametrize("weights", [{"a": 0.7, "b": 0.3}, {"a": 0.999, "b": 0.001}, {"a": 1 - 1e-6, "b": 1e-6},
                                     {"a": 3, "b": 1}])
def test_two_children_are_within_one_in_every_window(weights) -> None:
    mix = MixtureDataset({k: tagged(k, 100) for k in weights}, weights, block_size=64, seed=11, length=64 * 5000)
    total = sum(weights.values())
    child, _ = mix.locate_many(np.arange(len(mix)))
    for c, w in enumerate(weights.values()):
        assert window_spread(child, c, 64, w / total) < 1
        # any window of m blocks, directly
        hits = np.add.reduceat((child == c).astype(np.int64), np.arange(0, len(child), 64))
        for m in (1, 3, 17, 100):
            sums = np.convolve(hits, np.ones(m, dtype=np.int64), mode="valid")
            assert np.abs(sums - m * 64 * w / total).max() <= 1


@given(weights=st.lists(st.floats(1e-7, 1.0), min_size=1, max_size=8), block=st.integers(1, 200),
       seed=st.integers(0, 2**32))
@settings(max_examples=30, deadline=None)
def test_allocation_properties_for_random_weights(weights: list[float], block: int, seed: int) -> None:
    names = [f"c{k}" for k in range(len(weights))]
    mix = MixtureDataset({n: tagged(n, 37) for n in names}, dict(zip(names, weights)), block_size=block, seed=seed,
                         length=block * 300)
    child, k = mix.child_samples(np.arange(len(mix)))
    bounds = mix.window_bounds()[0]
    total = sum(weights)
    for c, n in enumerate(names):
        draws = np.sort(k[child == c])
        assert (draws == np.arange(len(draws))).all()  # whole blocks: draws 0..n-1, none twice
        assert window_spread(child, c, block, weights[c] / total) < bounds[n] + 1e-9
    assert mix.counts(len(mix)) == dict(zip(names, np.bincount(child, minlength=len(names)).tolist()))


def test_counts_match_the_located_children_at_any_index() -> None:
    mix = MixtureDataset({k: tagged(k, 500) for k in "abc"}, {"a": 5, "b": 3, "c": 2}, block_size=32, seed=1,
                         length=20_000)
    child, _ = mix.locate_many(np.arange(10_000))
    for n in [0, 1, 31, 32, 33, 1000, 4321, 9999, 10_000]:
        assert mix.counts(n) == dict(zip(mix.names, np.bincount(child[:n], minlength=3).tolist()))
    with pytest.raises(IndexError):
        mix.counts(len(mix) + 1)


def test_a_one_in_a_million_component_is_sampled_on_schedule() -> None:
    mix = MixtureDataset({"big": tagged("big", 10_000), "tiny": tagged("tiny", 3)},
                         {"big": 1 - 1e-6, "tiny": 1e-6}, block_size=64, seed=2, length=5_000_000)
    child, _ = mix.locate_many(np.arange(5_000_000))
    hits = np.flatnonzero(child == 1)
    assert len(hits) == 5
    # one per 10^6 samples: the allocation is periodic, the slot shuffle moves a hit
    # inside its block of 64
    assert (np.abs(np.diff(hits) - 1_000_000) <= 2 * 64).all(), hits
    assert [mix.position("tiny", d) for d in range(5)] == hits.tolist()


def test_levanter_failure_case_is_sampled() -> None:
    """Levanter's block mixture gives a weight-1e-3 component int(0.001 * 64) = 0 samples
    per block of 64 and never samples it; here it gets exactly its share."""
    assert int(0.001 * 64) == 0
    mix = MixtureDataset({"main": tagged("main", 100_000), "small": tagged("small", 1000)},
                         {"main": 0.999, "small": 0.001}, block_size=64, seed=0, length=640_000)
    child, local = mix.locate_many(np.arange(640_000))
    small = child == 1
    assert abs(int(small.sum()) - 640) <= 1
    # on schedule: every run of 1000 blocks holds 64 ± 1
    per_block = small.reshape(-1, 64).sum(axis=1)
    runs = np.convolve(per_block, np.ones(1000, dtype=np.int64), mode="valid")
    assert runs.min() >= 63 and runs.max() <= 65
    assert len(set(local[small].tolist())) == int(small.sum())  # no repeats within the first pass


# --------------------------------------------------------------------------------------
# stages, passes, policies
# --------------------------------------------------------------------------------------
def test_stage_switches_at_the_exact_index() -> None:
    mix = MixtureDataset({"a": tagged("a", 100), "b": tagged("b", 100)},
                         [(0, {"a": 1.0}), (1000, {"b": 1.0}), (1500, {"a": 1, "b": 1})], block_size=64, length=3000)
    child, _ = mix.locate_many(np.arange(3000))
    assert (child[:1000] == 0).all() and (child[1000:1500] == 1).all()
    assert mix.stage_of(999) == 0 and mix.stage_of(1000) == 1 and mix.stage_of(1500) == 2
    # blocks restart at each stage: stage 2's blocks of 64 start at 1500
    assert mix.block_start(23, stage=2) == 1500 + 23 * 64
    assert abs(int((child[1500:mix.block_start(23, stage=2)] == 0).sum()) - 23 * 32) < 1
    # counts carry across stages: the first draw of 'b' in stage 1 is b's draw 0, and
    # no draw number repeats or is skipped across the switches
    assert mix.counts(1000) == {"a": 1000, "b": 0}
    assert mix.counts(1500) == {"a": 1000, "b": 500}
    end = mix.block_start(20, stage=2)
    c, k = mix.child_samples(np.arange(end))
    for x in range(2):
        assert (np.sort(k[c == x]) == np.arange(int((c == x).sum()))).all()
    assert mix.stages[1].as_dict(mix.names) == {"b": 1.0}


def test_stage_arguments_are_checked() -> None:
    kids = {"a": tagged("a", 5), "b": tagged("b", 5)}
    with pytest.raises(ValueError, match="unknown"):
        MixtureDataset(kids, [(0, {"a": 1}), (10, {"zz": 1})])
    with pytest.raises(ValueError, match="increasing"):
        MixtureDataset(kids, [(0, {"a": 1}), (20, {"b": 1}), (10, {"a": 1})])
    with pytest.raises(ValueError, match="increasing"):
        MixtureDataset(kids, [(0, {"a": 1}), (0, {"a": 1})])
    with pytest.raises(ValueError, match="start at index 0"):
        MixtureDataset(kids, [(5, {"a": 1})])
    with pytest.raises(ValueError, match="non-negative"):
        MixtureDataset(kids, [(-1, {"a": 1})])
    with pytest.raises(ValueError, match="positive"):
        MixtureDataset(kids, [(0, {"a": 1}), (5, {"a": 0, "b": 0})])
    with pytest.raises(TypeError):
        MixtureDataset(kids, [(0, [("a", 1)])])
    with pytest.raises(ValueError, match="empty"):
        MixtureDataset(kids, [])


def test_restart_gives_each_pass_a_fresh_permutation_and_counts_passes() -> None:
    mix = MixtureDataset({"a": tagged("a", 10), "b": tagged("b", 1000)}, {"a": 0.5, "b": 0.5}, block_size=4, seed=9,
                         length=200)
    child, local, passes = mix.locate_passes(np.arange(200))
    a = child == 0
    by_pass = {p: local[a & (passes == p)].tolist() for p in range(int(passes[a].max()) + 1)}
    complete = [p for p, v in by_pass.items() if len(v) == 10]
    assert len(complete) >= 8
    for p in complete:
        assert sorted(by_pass[p]) == list(range(10))
    assert len({tuple(by_pass[p]) for p in complete}) == len(complete), "every pass has its own order"
    assert mix.passes(0) == {"a": 0, "b": 0}
    assert mix.passes(200) == {"a": 10, "b": 1}
    _, k = mix.child_samples(np.arange(200))
    assert (passes == np.where(a, k // 10, k // 1000)).all()


def test_stop_policy_ends_before_a_child_runs_out() -> None:
    kids = {"a": tagged("a", 100), "b": tagged("b", 10)}
    mix = MixtureDataset(kids, {"a": 0.5, "b": 0.5}, block_size=8, policy="stop")
    n = len(mix)
    assert 18 <= n <= 22 and mix.counts(n)["b"] == 10  # b is used exactly once
    items = mix.__getitems__(list(range(n)))
    assert len(set(items)) == n and set(tagged("b", 10)) <= set(items)
    _, _, passes = mix.locate_passes(np.arange(n))
    assert (passes == 0).all()
    with pytest.raises(IndexError):
        mix[n]
    # the same allocation without the cut: identical whole blocks before it, and b's
    # 11th draw falls in the block where the cut is
    longer = MixtureDataset(kids, {"a": 0.5, "b": 0.5}, block_size=8, length=1000)
    whole = n // 8 * 8
    assert longer.__getitems__(list(range(whole))) == items[:whole]
    assert longer.position("b", 10) // 8 == n // 8
    with pytest.raises(ValueError, match="exceeds"):
        MixtureDataset(kids, {"a": 0.5, "b": 0.5}, block_size=8, policy="stop", length=n + 1)
    assert len(MixtureDataset(kids, {"a": 0.5, "b": 0.5}, block_size=8, policy="stop", length=n - 3)) == n - 3
    # a child with weight 0 never stops the mixture, even when empty; a single child is
    # used up exactly even when its length is not a multiple of the block size
    ok = MixtureDataset({"a": tagged("a", 30), "e": []}, {"a": 1.0, "e": 0}, policy="stop", block_size=4)
    assert len(ok) == 30 and sorted(ok) == tagged("a", 30)
    # exhaustion inside stage 0 ends the mixture there: later stages are dropped
    cut = MixtureDataset(kids, [(0, {"a": 1, "b": 1}), (1000, {"a": 1})], block_size=8, policy="stop")
    assert len(cut) == n and len(cut.stages) == 1 and cut.stages[0].end == n


def test_bad_arguments_are_clear_errors() -> None:
    kids = {"a": tagged("a", 5), "b": []}
    with pytest.raises(ValueError, match="empty"):
        MixtureDataset(kids, {"a": 1, "b": 1})
    with pytest.raises(ValueError, match="empty"):
        MixtureDataset(kids, {"a": 1, "b": 1}, policy="stop")
    with pytest.raises(ValueError, match="unknown"):
        MixtureDataset(kids, {"zz": 1})
    with pytest.raises(ValueError, match=">= 0"):
        MixtureDataset(kids, {"a": -1})
    with pytest.raises(ValueError, match="finite"):
        MixtureDataset(kids, {"a": float("nan")})
    with pytest.raises(ValueError, match="finite"):
        MixtureDataset(kids, {"a": float("inf")})
    with pytest.raises(ValueError, match="positive"):
        MixtureDataset(kids, {"a": 0})
    with pytest.raises(TypeError):
        MixtureDataset(kids, {"a": "1"})
    with pytest.raises(ValueError, match="policy"):
        MixtureDataset(kids, {"a": 1}, policy="loop")
    with pytest.raises(ValueError, match="block_size"):
        MixtureDataset(kids, {"a": 1}, block_size=0)
    with pytest.raises(ValueError, match="block_size"):
        MixtureDataset(kids, {"a": 1}, block_size=1 << 30)
    with pytest.raises(ValueError, match="length"):
        MixtureDataset(kids, {"a": 1}, length=-1)
    with pytest.raises(ValueError, match="seed"):
        MixtureDataset(kids, {"a": 1}, seed=-3)
    with pytest.raises(ValueError):
        MixtureDataset({}, {"a": 1})
    with pytest.raises(TypeError):
        MixtureDataset({"a": object()}, {"a": 1})


# --------------------------------------------------------------------------------------
# composition, purity, pickling
# --------------------------------------------------------------------------------------
def test_nesting_three_levels_deep_in_both_directions() -> None:
    inner = MixtureDataset({"x": tagged("x", 50), "y": tagged("y", 5)}, {"x": 0.8, "y": 0.2}, block_size=16, length=200)
    flat = FlatMixture({"inner": inner, "z": tagged("z", 30)}, seed=4)
    outer = MixtureDataset({"flat": flat, "w": tagged("w", 40)}, {"flat": 0.75, "w": 0.25}, block_size=16, length=1600)
    items = outer.__getitems__(list(range(1600)))
    names = [x[0] for x in items]
    assert set(names) == {"x", "y", "z", "w"}
    assert names.count("w") == 400  # 100 whole blocks of 16 at 25%
    assert [outer[i] for i in range(0, 1600, 97)] == [items[i] for i in range(0, 1600, 97)]
    # the other direction: a FlatMixture of mixtures of FlatMixtures
    f1 = FlatMixture({"p": tagged("p", 20), "q": tagged("q", 7)}, seed=1)
    m1 = MixtureDataset({"f1": f1, "r": tagged("r", 9)}, {"f1": 2, "r": 1}, block_size=6, length=60, seed=3)
    top = FlatMixture({"m1": m1, "s": tagged("s", 11)}, seed=2)
    assert len(top) == 71
    got = top.__getitems__(list(range(71)))
    assert got == [top[i] for i in range(71)]
    expected = sorted(m1.__getitems__(list(range(60))) + tagged("s", 11))
    assert sorted(got) == expected


def test_pure_maps_resume_without_state_and_pickle() -> None:
    def make() -> MixtureDataset:
        return MixtureDataset({"a": tagged("a", 100), "b": tagged("b", 7)}, [(0, {"a": 0.9, "b": 0.1}), (2550, {"b": 1})],
                              seed=7, block_size=32, length=5000)

    a, b = make(), make()
    assert a.__getitems__(list(range(2500, 2600))) == [b[i] for i in range(2500, 2600)]
    c = pickle.loads(pickle.dumps(a))
    assert c.__getitems__(list(range(0, 5000, 7))) == a.__getitems__(list(range(0, 5000, 7)))
    fm = FlatMixture({"a": tagged("a", 30), "b": tagged("b", 3)}, seed=5)
    assert list(pickle.loads(pickle.dumps(fm))) == list(fm)
    # a longer mixture starts with the shorter one (length does not change the map)
    longer = MixtureDataset({"a": tagged("a", 100), "b": tagged("b", 7)}, [(0, {"a": 0.9, "b": 0.1}), (2550, {"b": 1})],
                            seed=7, block_size=32, length=9000)
    assert longer.__getitems__(list(range(5000))) == a.__getitems__(list(range(5000)))
    # different seeds, different orders
    other = MixtureDataset({"a": tagged("a", 100), "b": tagged("b", 7)}, {"a": 0.9, "b": 0.1}, seed=8, block_size=32,
                           length=5000)
    assert other.__getitems__(list(range(100))) != a.__getitems__(list(range(100)))


def test_parquet_and_page_index_children(tmp_path: Path) -> None:
    paths = []
    for k, n in enumerate([40, 25]):
        paths.append(write_ids(tmp_path / f"p{k}.parquet", n, start=1000 * k))
    mix = MixtureDataset({"p0": paths[0], "p1": youmu.PageIndex(str(paths[1]))}, {"p0": 1, "p1": 1}, block_size=10,
                         length=50)
    ids = [r["id"] for r in mix.__getitems__(list(range(50)))]
    assert sum(i < 1000 for i in ids) == 25 and len(set(ids)) == 50


# --------------------------------------------------------------------------------------
# torch layer
# --------------------------------------------------------------------------------------
def test_map_stream_shards_a_mixture_exactly_once_and_resumes() -> None:
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from youmu.torch import MapStream

    mix = MixtureDataset({"a": tagged("a", 300), "b": tagged("b", 40)}, {"a": 0.8, "b": 0.2}, block_size=16, length=1000)
    everything = mix.__getitems__(list(range(len(mix))))
    seen = []
    for rank in range(3):
        seen += list(DataLoader(MapStream(mix, rank=rank, world_size=3), batch_size=None, num_workers=2,
                                collate_fn=lambda x: x))
    assert sorted(seen) == sorted(everything) and len(seen) == 1000
    s = MapStream(mix, rank=1, world_size=2)
    full = list(s)
    s2 = MapStream(mix, rank=1, world_size=2)
    it = iter(s2)
    head = [next(it) for _ in range(123)]
    s3 = MapStream(mix, rank=1, world_size=2)
    s3.load_state_dict(s2.state_dict())
    assert head + list(s3) == full
    assert len(MapStream(mix, rank=0, world_size=3, drop_last=True)) == 333


def test_flat_mixture_of_parquet_sources_streams_by_pages(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from youmu.torch import YoumuDataset

    start = 0
    sources = {}
    for k, n in enumerate([500, 30, 900]):
        sources[f"s{k}"] = youmu.RowDataset(write_ids(tmp_path / f"s{k}.parquet", n, start=start, data_page_size=512))
        start += n
    # nested: a FlatMixture of a FlatMixture and a source is still one page space
    fm = FlatMixture({"first": FlatMixture({"s0": sources["s0"], "s1": sources["s1"]}, seed=2), "s2": sources["s2"]},
                     seed=1)
    assert len(fm) == 1430 and sorted(r["id"] for r in fm) == list(range(1430))
    assert fm.page_index().num_rows == 1430
    ds = YoumuDataset(fm, shuffle="page", buffer_size=64, output="python")
    ids = [r["id"] for r in ds]
    assert sorted(ids) == list(range(1430)) and ids != sorted(ids)
    with pytest.raises(TypeError, match="not a youmu Parquet source"):
        FlatMixture({"s0": sources["s0"], "list": [1, 2]}).page_index()
    # a RowDataset streams by pages too; a weighted mixture is pointed at MixtureStream
    assert sorted(r["id"] for r in YoumuDataset(sources["s2"], output="python")) == list(range(530, 1430))
    mix = MixtureDataset({"s0": sources["s0"], "s2": sources["s2"]}, {"s0": 0.5, "s2": 0.5})
    with pytest.raises(TypeError, match="MixtureStream"):
        YoumuDataset(mix)


def test_pack_over_a_mixture_stream_resumes() -> None:
    torch = pytest.importorskip("torch")
    from youmu.torch import MapStream, pack

    kids = {"a": [torch.full((n % 13 + 1,), n) for n in range(200)], "b": [torch.full((3,), -n) for n in range(20)]}
    mix = MixtureDataset(kids, {"a": 0.9, "b": 0.1}, block_size=16, length=500)
    full = torch.cat([p["input_ids"] for p in pack(MapStream(mix, rank=0, world_size=2), seq_len=32)])
    p2 = pack(MapStream(mix, rank=0, world_size=2), seq_len=32)
    it = iter(p2)
    head = [next(it) for _ in range(9)]
    p3 = pack(MapStream(mix, rank=0, world_size=2), seq_len=32)
    p3.load_state_dict(p2.state_dict())
    got = torch.cat([x["input_ids"] for x in head + list(p3)])
    assert torch.equal(got, full)


@given(n=st.integers(0, 300), world=st.integers(1, 4), workers=st.integers(1, 3), run=st.integers(1, 40),
       drop_last=st.booleans())
@settings(max_examples=80, deadline=None)
def test_mixture_stream_deals_runs_exactly_once(n: int, world: int, workers: int, run: int, drop_last: bool) -> None:
    pytest.importorskip("torch")
    from youmu.order.sharding import Shard, run_round_robin_index
    from youmu.torch import MixtureStream

    data = list(range(n))
    seen: list[int] = []
    per_rank = []
    for rank in range(world):
        s = MixtureStream(data, rank=rank, world_size=world, run=run, drop_last=drop_last)
        mine: list[int] = []
        for w in range(workers):
            count = s._count(w, workers)
            got = [run_round_robin_index(p, run, Shard(rank, world, w, workers)) for p in range(count)]
            assert all(i // run % world == rank for i in got)  # whole runs, dealt by rank
            mine += got
        assert len(mine) == len(s) == len(list(s))
        per_rank.append(len(mine))
        seen += mine
    expect = n - n % (world * run) if drop_last else n
    assert sorted(seen) == list(range(expect))
    if drop_last:
        assert len(set(per_rank)) == 1


def test_mixture_stream_over_workers_resumes_and_packs() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from youmu.torch import MixtureStream, pack

    mix = MixtureDataset({"a": tagged("a", 300), "b": tagged("b", 40)}, {"a": 0.8, "b": 0.2}, block_size=16, length=1000)
    assert MixtureStream(mix, rank=0, world_size=1).run == 16  # the mixture's blocks by default
    everything = mix.__getitems__(list(range(len(mix))))
    seen = []
    for rank in range(3):
        seen += list(DataLoader(MixtureStream(mix, rank=rank, world_size=3), batch_size=None, num_workers=2,
                                collate_fn=lambda x: x))
    assert sorted(seen) == sorted(everything) and len(seen) == 1000
    full = list(MixtureStream(mix, rank=1, world_size=2))
    s2 = MixtureStream(mix, rank=1, world_size=2)
    it = iter(s2)
    head = [next(it) for _ in range(37)]
    s3 = MixtureStream(mix, rank=1, world_size=2)
    s3.load_state_dict(s2.state_dict())
    assert head + list(s3) == full
    with pytest.raises(ValueError, match="run"):
        MixtureStream(mix, rank=1, world_size=2, run=8).load_state_dict(s2.state_dict())
    kids = {"a": [torch.full((n % 13 + 1,), n) for n in range(200)], "b": [torch.full((3,), -n) for n in range(20)]}
    tok = MixtureDataset(kids, {"a": 0.9, "b": 0.1}, block_size=16, length=500)
    packed = torch.cat([p["input_ids"] for p in pack(MixtureStream(tok, rank=0, world_size=2), seq_len=32)])
    p2 = pack(MixtureStream(tok, rank=0, world_size=2), seq_len=32)
    it2 = iter(p2)
    first = [next(it2) for _ in range(5)]
    p3 = pack(MixtureStream(tok, rank=0, world_size=2), seq_len=32)
    p3.load_state_dict(p2.state_dict())
    assert torch.equal(torch.cat([x["input_ids"] for x in first + list(p3)]), packed)


def test_chunk_local_child_orders() -> None:
    kids = {"a": tagged("a", 1000), "b": tagged("b", 95)}
    mix = MixtureDataset(kids, {"a": 0.5, "b": 0.5}, block_size=64, length=4000, child_chunk={"a": 50, "b": 10})
    child, local, passes = mix.locate_passes(np.arange(4000))
    a = local[(child == 0) & (passes == 0)]
    b = local[(child == 1) & (passes == 0)]
    assert sorted(a.tolist()) == list(range(1000)) and sorted(b.tolist()) == list(range(95))
    # a block's draws of a child are consecutive draw numbers, which walk through runs
    # of 50 (resp. 10) neighbouring rows: a block touches few runs of each child
    for lo in range(0, 4000, 64):
        c, x = child[lo:lo + 64], local[lo:lo + 64]
        for k, size in ((0, 50), (1, 10)):
            rows = x[c == k]
            assert len(np.unique(rows // size)) <= -(-len(rows) // size) + 2, (lo, k, rows)
    # the allocation does not depend on the child order
    plain = MixtureDataset(kids, {"a": 0.5, "b": 0.5}, block_size=64, length=4000, child_chunk=1)
    assert (plain.locate_passes(np.arange(4000))[0] == child).all()
    assert not (plain.locate_passes(np.arange(4000))[1] == local).all()
    with pytest.raises(ValueError, match="child_chunk"):
        MixtureDataset(kids, {"a": 1}, child_chunk=0)
    with pytest.raises(ValueError, match="unknown"):
        MixtureDataset(kids, {"a": 1}, child_chunk={"zz": 4})
    with pytest.raises(ValueError, match="child_chunk"):
        MixtureDataset(kids, {"a": 1}, child_chunk="pages")
