"""Mixtures: FlatMixture is a keyed permutation of a virtual concatenation;
MixtureDataset allocates exactly (every positive weight at its exact rate, ±1 per any
window of blocks), switches stages at the exact index, nests, and shards exactly once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import youmu
from youmu.mixture import FlatMixture, MixtureDataset, batch_permute


def tagged(name: str, n: int) -> list[tuple[str, int]]:
    return [(name, i) for i in range(n)]


@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6), seed=st.integers(0, 10**9))
@settings(max_examples=60, deadline=None)
def test_flat_mixture_is_a_bijection_over_all_children(sizes: list[int], seed: int) -> None:
    children = {f"c{k}": tagged(f"c{k}", n) for k, n in enumerate(sizes)}
    fm = FlatMixture(children, seed=seed)
    assert len(fm) == sum(sizes)
    items = [fm[i] for i in range(len(fm))]
    assert sorted(items) == sorted(x for c in children.values() for x in c)
    for i in range(len(fm)):
        name, local = fm.locate(i)
        assert children[name][local] == items[i]


def test_flat_mixture_equals_concatenate_then_permute() -> None:
    children = {"a": tagged("a", 7), "empty": [], "b": tagged("b", 12), "c": tagged("c", 1)}
    concat = [x for c in children.values() for x in c]
    fm = FlatMixture(children, seed=3)
    perm = youmu.Permutation(len(concat), seed=3, purpose="flat-mixture")
    assert [fm[i] for i in range(len(fm))] == [concat[perm[i]] for i in range(len(concat))]
    assert fm.__getitems__([0, 5, 19]) == [fm[0], fm[5], fm[19]]
    with pytest.raises(IndexError):
        fm[len(fm)]


def test_batch_permute_is_a_bijection_for_every_domain() -> None:
    for n in [1, 2, 3, 5, 63, 64, 65, 1000]:
        for key in [0, 7, 2**63 + 5]:
            out = batch_permute(np.arange(n), np.full(n, n), np.full(n, key, dtype=np.uint64))
            assert sorted(out.tolist()) == list(range(n))


@pytest.mark.parametrize("weights", [{"a": 0.7, "b": 0.2, "c": 0.1}, {"a": 0.9, "b": 0.099, "c": 0.001},
                                     {"a": 1, "b": 1, "c": 1}])
def test_counts_in_any_window_of_blocks_are_within_one(weights) -> None:
    mix = MixtureDataset({k: tagged(k, 1000) for k in weights}, weights, block_size=64, seed=5, length=10**6)
    total = sum(weights.values())
    starts = [mix.block_start(b) for b in range(0, 301)]
    counts = [mix.counts(s) for s in starts]
    for m in [1, 3, 17, 100]:
        for b in range(0, 300 - m, 7):
            for k, w in weights.items():
                got = counts[b + m][k] - counts[b][k]
                assert abs(got - m * 64 * w / total) <= 1, (k, b, m, got)


def test_located_children_match_the_counts() -> None:
    mix = MixtureDataset({k: tagged(k, 500) for k in "abc"}, {"a": 5, "b": 3, "c": 2}, block_size=32, seed=1,
                         length=20_000)
    child, _ = mix.locate_many(np.arange(10_000))
    got = dict(zip(mix.names, np.bincount(child, minlength=3).tolist()))
    assert got == mix.counts(10_000)


def test_a_one_in_a_million_component_is_sampled_on_schedule() -> None:
    mix = MixtureDataset({"big": tagged("big", 10_000), "tiny": tagged("tiny", 3)},
                         {"big": 1 - 1e-6, "tiny": 1e-6}, block_size=64, seed=2, length=5_000_000)
    child, _ = mix.locate_many(np.arange(5_000_000))
    hits = np.nonzero(child == 1)[0]
    assert 4 <= len(hits) <= 6
    gaps = np.diff(hits)
    assert ((gaps > 1_000_000 - 2 * 64 - 64) & (gaps < 1_000_000 + 2 * 64 + 64)).all(), gaps


def test_levanter_failure_case_is_sampled() -> None:
    """Levanter gives a weight-1e-3 component int(0.001 * 64) = 0 samples per block of 64
    and never samples it; here it gets its exact share."""
    mix = MixtureDataset({"main": tagged("main", 100_000), "small": tagged("small", 1000)},
                         {"main": 0.999, "small": 0.001}, block_size=64, seed=0, length=640_000)
    child, _ = mix.locate_many(np.arange(640_000))
    assert abs(int((child == 1).sum()) - 640) <= 1


def test_stage_switches_at_the_exact_index() -> None:
    mix = MixtureDataset({"a": tagged("a", 100), "b": tagged("b", 100)},
                         [(0, {"a": 1.0}), (1000, {"b": 1.0}), (1500, {"a": 1, "b": 1})], block_size=64, length=3000)
    child, _ = mix.locate_many(np.arange(3000))
    assert (child[:1000] == 0).all() and (child[1000:1500] == 1).all()
    # the ±1 guarantee is per whole blocks: check at a block boundary of stage 2
    end = mix.block_start(23, stage=2)
    assert abs(int((child[1500:end] == 0).sum()) - 23 * 64 * 0.5) <= 1
    # counts carry across stages: the first sample of 'b' in stage 1 is b's sample 0
    assert mix.counts(1000) == {"a": 1000, "b": 0}
    assert mix.counts(1500) == {"a": 1000, "b": 500}


def test_restart_gives_each_pass_a_fresh_permutation_and_counts_passes() -> None:
    mix = MixtureDataset({"a": tagged("a", 10)}, {"a": 1.0}, block_size=4, seed=9, length=30)
    items = [mix[i][1] for i in range(30)]
    _, k = mix.child_samples(np.arange(30))  # the child's own sample numbers define its passes
    # passes 0 and 1 are complete within the first 30 indices (the last, partial block
    # may draw samples of pass 3 in its shuffled slot order)
    passes = [[items[i] for i in np.argsort(k) if k[i] // 10 == p] for p in range(2)]
    assert all(sorted(p) == list(range(10)) for p in passes)
    assert passes[0] != passes[1]
    assert mix.passes(10) == {"a": 1} and mix.passes(11) == {"a": 2} and mix.passes(30) == {"a": 3}


def test_stop_policy_ends_before_a_child_runs_out() -> None:
    mix = MixtureDataset({"a": tagged("a", 100), "b": tagged("b", 10)}, {"a": 0.5, "b": 0.5}, block_size=8,
                         policy="stop")
    n = len(mix)
    assert mix.counts(n)["b"] <= 10 and mix.counts(n + 1)["b"] == 11
    items = [mix[i] for i in range(n)]
    assert len(set(items)) == n  # no item repeats within the single pass
    with pytest.raises(IndexError):
        mix[n]


def test_bad_arguments_are_clear_errors() -> None:
    kids = {"a": tagged("a", 5), "b": []}
    with pytest.raises(ValueError, match="empty"):
        MixtureDataset(kids, {"a": 1, "b": 1})
    with pytest.raises(ValueError, match="unknown"):
        MixtureDataset(kids, {"zz": 1})
    with pytest.raises(ValueError, match=">= 0"):
        MixtureDataset(kids, {"a": -1})
    with pytest.raises(ValueError, match="positive"):
        MixtureDataset(kids, {"a": 0})
    with pytest.raises(ValueError, match="increasing"):
        MixtureDataset(kids, [(0, {"a": 1}), (0, {"a": 1})])
    with pytest.raises(ValueError, match="start at index 0"):
        MixtureDataset(kids, [(5, {"a": 1})])
    with pytest.raises(ValueError, match="policy"):
        MixtureDataset(kids, {"a": 1}, policy="loop")
    with pytest.raises(ValueError):
        FlatMixture({})


def test_nesting_three_levels_deep_in_both_directions() -> None:
    inner = MixtureDataset({"x": tagged("x", 50), "y": tagged("y", 5)}, {"x": 0.8, "y": 0.2}, block_size=16, length=200)
    flat = FlatMixture({"inner": inner, "z": tagged("z", 30)}, seed=4)
    outer = MixtureDataset({"flat": flat, "w": tagged("w", 40)}, {"flat": 0.75, "w": 0.25}, block_size=16, length=1000)
    items = outer.__getitems__(list(range(1000)))
    names = [x[0] for x in items]
    assert set(names) == {"x", "y", "z", "w"}
    assert abs(names.count("w") - 250) <= 1
    assert [outer[i] for i in range(0, 1000, 97)] == [items[i] for i in range(0, 1000, 97)]


def test_pure_maps_resume_without_state() -> None:
    make = lambda: MixtureDataset({"a": tagged("a", 100), "b": tagged("b", 7)}, {"a": 0.9, "b": 0.1}, seed=7,  # noqa: E731
                                  block_size=32, length=5000)
    a, b = make(), make()
    assert [a[i] for i in range(2500, 2600)] == [b[i] for i in range(2500, 2600)]


def test_map_stream_shards_a_mixture_exactly_once_and_resumes() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from youmu.torch import MapStream

    mix = MixtureDataset({"a": tagged("a", 300), "b": tagged("b", 40)}, {"a": 0.8, "b": 0.2}, block_size=16, length=1000)
    everything = [mix[i] for i in range(len(mix))]
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
    # ranks advance through the global index together (stages switch at the same step)
    firsts = [next(iter(MapStream(list(range(10)), rank=r, world_size=3))) for r in range(3)]
    assert firsts == [0, 1, 2]
    del torch


def test_flat_mixture_of_parquet_sources_streams_by_pages(tmp_path: Path) -> None:
    from youmu.torch import YoumuDataset

    start = 0
    sources = {}
    for k, n in enumerate([500, 30, 900]):
        p = tmp_path / f"s{k}.parquet"
        pq.write_table(pa.table({"id": np.arange(start, start + n)}), p, data_page_size=512)
        sources[f"s{k}"] = youmu.RowDataset(p)
        start += n
    fm = FlatMixture(sources, seed=1)
    assert len(fm) == 1430 and sorted(fm[i]["id"] for i in range(0, 1430, 1)) == list(range(1430))
    ds = YoumuDataset(fm, shuffle="page", buffer_size=64, output="python")
    ids = [r["id"] for r in ds]
    assert sorted(ids) == list(range(1430)) and ids != sorted(ids)


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
    with pytest.raises(TypeError):
        pack([1, 2, 3], seq_len=4)
