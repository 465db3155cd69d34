"""Row streams and YoumuDataset: exact coverage over ranks × workers × shuffle modes,
drop_last balance, determinism, resume equivalence, DataLoader workers, packing."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parquet_fixtures import write_id_groups, write_ids, write_token_rows
from torch.utils.data import DataLoader

import youmu
from youmu.order.shuffle import positions_to_rows
from youmu.streams.rowstream import RowStream
from youmu.torch import YoumuDataset, collate_packed, pack

MODES = ["page", "row", "local", "none"]
N_ROWS = 3000


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three files, written in id order (clustered, as real dumps are)."""
    d = tmp_path_factory.mktemp("stream")
    rng = np.random.default_rng(0)
    start = 0
    for k, n in enumerate([1400, 900, 700]):
        write_token_rows(d / f"part-{k}.parquet", rng.integers(1, 60, n), start=start, data_page_size=1024,
                         row_group_size=500, write_page_index=k != 1, use_dictionary=False)
        start += n
    return d


@pytest.fixture(scope="module")
def index(dataset: Path) -> youmu.PageIndex:
    return youmu.PageIndex(dataset, columns=["input_ids", "id"])


def ids_of(stream: RowStream, start: int = 0) -> list[int]:
    return [x for t in stream.iter_tables(start) for x in t.column("id").to_pylist()]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_every_row_exactly_once_across_ranks_and_workers(index, mode, world_size, num_workers) -> None:
    seen: list[int] = []
    for rank, worker in itertools.product(range(world_size), range(num_workers)):
        s = RowStream(index, mode, buffer_size=200, seed=7, epoch=1, rank=rank, world_size=world_size,
                      worker=worker, num_workers=num_workers)
        got = ids_of(s)
        assert len(got) == len(s)
        seen += got
    assert sorted(seen) == list(range(N_ROWS))


@pytest.mark.parametrize("mode", MODES)
def test_a_ranks_rows_do_not_depend_on_its_worker_count(index, mode) -> None:
    def rank_rows(nw: int) -> set[int]:
        return {i for w in range(nw) for i in ids_of(RowStream(index, mode, 200, 3, 0, rank=1, world_size=2, worker=w, num_workers=nw))}

    assert rank_rows(1) == rank_rows(3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("world", [2, 3, 8])
def test_drop_last_gives_every_rank_the_same_count_and_drops_fewer_than_world_size(index, mode, world) -> None:
    """Regression: drop_last used to cut every rank to the smallest rank's whole windows
    (20-23% of the rows with 8 ranks over 40 pages)."""
    seen = []
    per_rank = N_ROWS // world
    for r in range(world):
        ds = YoumuDataset(index, shuffle=mode, buffer_size=200, seed=1, rank=r, world_size=world, drop_last=True,
                          output="python")
        rows = list(ds)
        assert len(rows) == len(ds) == per_rank
        assert ds.dropped_rows() == N_ROWS - world * per_rank < world
        seen += [x["id"] for x in rows]
        # the rank's rows are the same whatever its worker count
        by_worker = {i for w in range(3) for i in ids_of(RowStream(index, mode, 200, 1, 0, rank=r, world_size=world,
                                                                   worker=w, num_workers=3, drop_last=True))}
        assert by_worker == {x["id"] for x in rows}
    assert len(set(seen)) == len(seen) == world * per_rank


def test_drop_last_on_many_ranks_over_few_pages_still_balances(tmp_path) -> None:
    """40 pages of uneven size over 8 ranks: every rank the same count, fewer than 8 rows dropped."""
    path = tmp_path / "p.parquet"
    rng = np.random.default_rng(0)
    write_id_groups(path, rng.integers(10, 40, size=40))  # one row group (one page) per size
    idx = youmu.PageIndex(str(path))
    assert len(idx) == 40
    counts = [len(list(YoumuDataset(idx, buffer_size=64, rank=r, world_size=8, drop_last=True, output="python")))
              for r in range(8)]
    assert len(set(counts)) == 1 and idx.num_rows - sum(counts) < 8


def test_a_rank_without_rows_is_warned_about_and_drop_last_with_fewer_rows_than_ranks_is_refused(tmp_path) -> None:
    path = tmp_path / "tiny.parquet"
    write_ids(path, 6, row_group_size=3)  # 2 pages, 6 rows
    idx = youmu.PageIndex(str(path))
    with pytest.warns(youmu.YoumuWarning, match="gets no rows"):
        YoumuDataset(idx, rank=3, world_size=4, output="python")
    balanced = [list(YoumuDataset(idx, rank=r, world_size=4, drop_last=True, output="python")) for r in range(4)]
    assert [len(b) for b in balanced] == [1, 1, 1, 1]
    with pytest.raises(youmu.InvalidArgumentError, match="leaves every rank with nothing"):
        YoumuDataset(idx, rank=0, world_size=7, drop_last=True, output="python")


def test_page_mode_is_deterministic_and_epochs_differ(index) -> None:
    a = ids_of(RowStream(index, "page", 200, seed=5, epoch=0))
    b = ids_of(RowStream(index, "page", 200, seed=5, epoch=0))
    c = ids_of(RowStream(index, "page", 200, seed=5, epoch=1))
    d = ids_of(RowStream(index, "page", 200, seed=6, epoch=0))
    assert a == b
    assert a != c and a != d
    assert sorted(a) == sorted(c) == list(range(N_ROWS))


@given(mode=st.sampled_from(MODES), frac=st.floats(0.0, 1.0), rank=st.integers(0, 1))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_resume_at_any_position_equals_the_uninterrupted_stream(index, mode, frac, rank) -> None:
    s = RowStream(index, mode, 200, seed=11, epoch=2, rank=rank, world_size=2)
    full = ids_of(s)
    start = int(frac * len(full))  # anywhere in the shard, its end included
    assert ids_of(s, start) == full[start:]


def test_pure_row_map_matches_what_is_read(index) -> None:
    s = RowStream(index, "page", 200, seed=2, epoch=0, rank=0, world_size=2)
    full = ids_of(s)
    positions = [0, 1, 57, len(full) // 2, len(full) - 1]
    mapped = positions_to_rows(s.plan, index.page_num_rows(), positions)
    for pos, (page, off) in zip(positions, mapped):
        assert index.read_page(page).column("id")[off].as_py() == full[pos]


@given(cut=st.integers(0, 1500))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_dataset_state_dict_resumes_the_live_iterator(index, cut) -> None:
    ds = YoumuDataset(index, shuffle="page", buffer_size=300, seed=4, rank=1, world_size=2, output="python")
    ds.set_epoch(3)
    full = [r["id"] for r in ds]
    ds2 = YoumuDataset(index, shuffle="page", buffer_size=300, seed=4, rank=1, world_size=2, output="python")
    ds2.set_epoch(3)
    it = iter(ds2)
    head = [next(it)["id"] for _ in range(min(cut, len(full)))]
    state = ds2.state_dict()
    ds3 = YoumuDataset(index, shuffle="page", buffer_size=300, seed=4, rank=1, world_size=2, output="python")
    ds3.load_state_dict(state)
    assert head + [r["id"] for r in ds3] == full


def test_load_state_dict_rejects_a_different_configuration(index) -> None:
    ds = YoumuDataset(index, seed=1, output="python")
    with pytest.raises(ValueError, match="seed"):
        YoumuDataset(index, seed=2, output="python").load_state_dict(ds.state_dict())


def test_dataloader_with_two_workers_delivers_every_row_once(index) -> None:
    ds = YoumuDataset(index, shuffle="page", buffer_size=256, seed=0, output="torch")
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    got = [int(row["id"]) for row in loader]
    assert sorted(got) == list(range(N_ROWS))
    # tokens survive the trip: every token of row i equals i
    for row in itertools.islice(DataLoader(ds, batch_size=None, num_workers=2), 50):
        assert (row["input_ids"] == row["id"]).all()


def test_stateful_dataloader_resumes_with_workers(index) -> None:
    tdl = pytest.importorskip("torchdata.stateful_dataloader")
    make = lambda: YoumuDataset(index, shuffle="page", buffer_size=256, seed=9, output="python")  # noqa: E731
    full = [r["id"] for r in tdl.StatefulDataLoader(make(), batch_size=None, num_workers=2)]
    loader = tdl.StatefulDataLoader(make(), batch_size=None, num_workers=2)
    it = iter(loader)
    head = [next(it)["id"] for _ in range(1111)]
    state = loader.state_dict()
    del it, loader
    resumed = tdl.StatefulDataLoader(make(), batch_size=None, num_workers=2)
    resumed.load_state_dict(state)
    tail = [r["id"] for r in resumed]
    assert sorted(head + tail) == list(range(N_ROWS))
    assert head + tail == full


def test_outputs_and_zero_copy_token_views(index) -> None:
    ds = YoumuDataset(index, shuffle="none", output="torch")
    it = iter(ds)
    a, b = next(it), next(it)
    assert a["input_ids"].dtype == torch.int32
    # consecutive rows are views of one Arrow buffer, not copies
    assert a["input_ids"].untyped_storage().data_ptr() == b["input_ids"].untyped_storage().data_ptr()
    np_row = next(iter(YoumuDataset(index, shuffle="none", output="numpy")))
    assert isinstance(np_row["input_ids"], np.ndarray) and np_row["input_ids"].base is not None
    arrow_row = next(iter(YoumuDataset(index, shuffle="none", output="arrow")))
    assert isinstance(arrow_row, pa.RecordBatch) and arrow_row.num_rows == 1
    t = YoumuDataset(index, shuffle="none", output="python", transform=lambda r: None if r["id"] % 2 else r["id"])
    assert list(t)[:3] == [0, 2, 4]


def test_bad_arguments(index) -> None:
    with pytest.raises(ValueError):
        YoumuDataset(index, shuffle="global")
    with pytest.raises(ValueError):
        YoumuDataset(index, output="pandas")
    with pytest.raises(ValueError):
        YoumuDataset(index, rank=2, world_size=2)
    with pytest.raises(ValueError):
        YoumuDataset(index, buffer_size=0)
    with pytest.raises(ValueError, match="columns"):
        YoumuDataset(index, columns=["id"])  # the index reads input_ids and id


def _quality(ids: list[int], file_of) -> tuple[float, float]:
    ids = np.asarray(ids)
    rho = float(np.corrcoef(np.arange(len(ids)), ids)[0, 1])  # ids are in file order
    files = [len(set(file_of(ids[i : i + 1000]))) for i in range(0, len(ids) - 999, 1000)]
    return rho, float(np.mean(files))


def test_shuffle_quality_is_ordered_none_local_page_row(index, capsys) -> None:
    starts = np.array([0, 1400, 2300])
    file_of = lambda a: np.searchsorted(starts, a, side="right") - 1  # noqa: E731
    stats = {m: _quality(ids_of(RowStream(index, m, 200, seed=1)), file_of) for m in MODES}
    with capsys.disabled():
        for m, (rho, files) in stats.items():
            print(f"\nshuffle={m:5s} rank-correlation with file order {rho:+.3f}, distinct files per 1000 rows {files:.2f}")
    assert stats["none"][0] > 0.999
    assert stats["local"][0] > 0.9  # a local buffer keeps the file order
    assert abs(stats["page"][0]) < 0.2 and abs(stats["row"][0]) < 0.2
    assert stats["page"][1] > stats["local"][1]


def test_packing_preserves_every_token_and_resumes(index) -> None:
    ds = YoumuDataset(index, columns=None, shuffle="page", buffer_size=300, seed=1, output="torch")
    stream_tokens = np.concatenate([np.append(r["input_ids"].numpy(), -1) for r in ds])
    packed = list(pack(ds, seq_len=128, eos_id=-1))
    flat = np.concatenate([p["input_ids"].numpy() for p in packed])
    assert len(flat) == (len(stream_tokens) // 128) * 128
    assert (flat == stream_tokens[: len(flat)]).all()
    for p in packed[:20]:
        cu = p["cu_seqlens"].numpy()
        assert cu[0] == 0 and cu[-1] == 128
        # position ids restart at each document piece
        for a, b in zip(cu[:-1], cu[1:]):
            assert (p["position_ids"][a:b].numpy() == np.arange(b - a)).all()
    # resume mid-epoch
    p2 = pack(YoumuDataset(index, shuffle="page", buffer_size=300, seed=1, output="torch"), seq_len=128, eos_id=-1)
    it = iter(p2)
    head = [next(it) for _ in range(37)]
    state = p2.state_dict()
    p3 = pack(YoumuDataset(index, shuffle="page", buffer_size=300, seed=1, output="torch"), seq_len=128, eos_id=-1)
    p3.load_state_dict(state)
    rest = list(p3)
    got = np.concatenate([x["input_ids"].numpy() for x in head + rest])
    assert (got == flat).all()
    batch = collate_packed(packed[:4])
    assert batch["input_ids"].shape == (4, 128) and batch["cu_seqlens"][-1] == 512


def test_row_dataset_random_access(dataset: Path) -> None:
    ds = youmu.RowDataset(dataset, columns=["id", "input_ids"])
    assert len(ds) == N_ROWS
    assert ds[0]["id"] == 0 and ds[-1]["id"] == N_ROWS - 1
    idx = [2999, 5, 1400, 1399, 2300]
    assert [r["id"] for r in ds.__getitems__(idx)] == idx
    assert ds[1500]["input_ids"] == [1500] * len(ds[1500]["input_ids"])
    with pytest.raises(IndexError):
        ds[N_ROWS]


def test_collate_pad_batches_variable_length_rows_in_workers(index) -> None:
    from youmu.torch import collate_pad

    ds = YoumuDataset(index, shuffle="page", buffer_size=256, seed=0)
    got = []
    for b in DataLoader(ds, batch_size=64, num_workers=2, collate_fn=collate_pad):
        ids, lengths = b["input_ids"], b["input_ids_lengths"]
        assert ids.shape == (len(lengths), int(lengths.max()))
        for row, n, i in zip(ids, lengths, b["id"]):
            assert (row[:n] == i).all() and (row[n:] == 0).all()
        got += b["id"].tolist()
    assert sorted(got) == list(range(N_ROWS))


def test_packing_applies_the_datasets_transform(index) -> None:
    """Regression: pack() read rows before the dataset's transform, so a filtering
    transform was silently ignored."""
    keep_even = lambda r: r if int(r["id"]) % 2 == 0 else None  # noqa: E731
    ds = YoumuDataset(index, shuffle="none", output="torch", transform=keep_even)
    want = np.concatenate([r["input_ids"].numpy() for r in ds])
    got = np.concatenate([p["input_ids"].numpy() for p in pack(ds, seq_len=64, pad_id=-7)])
    got = got[got != -7]
    assert (got == want).all()
    assert {int(t) for t in got} <= set(range(0, N_ROWS, 2))


@pytest.mark.parametrize("cache_pages", [0, 8])
def test_row_dataset_single_row_and_page_cache_paths_agree(dataset: Path, cache_pages: int) -> None:
    ds = youmu.RowDataset(dataset, columns=["id", "input_ids"], cache_pages=cache_pages)
    idx = [17, 2999, 1400, 17]
    rows = ds.__getitems__(idx)
    assert [r["id"] for r in rows] == idx
    assert all(r["input_ids"] == [r["id"]] * len(r["input_ids"]) for r in rows)


def test_a_small_dataset_still_gives_every_rank_rows(tmp_path: Path) -> None:
    """Regression: with one window of pages (buffer larger than the data), rank 1 got
    nothing and a DDP loop over it deadlocked its peers."""
    path = tmp_path / "small.parquet"
    write_ids(path, 400, data_page_size=256, use_dictionary=False, write_batch_size=32)
    idx = youmu.PageIndex(path)
    assert len(idx) >= 4
    for mode in MODES:
        got = [len(list(YoumuDataset(idx, shuffle=mode, buffer_size=100_000, rank=r, world_size=4, output="python")))
               for r in range(4)]
        assert all(n > 0 for n in got) and sum(got) == 400, (mode, got)


# -- memory budget ------------------------------------------------------------------------------
def test_decoded_size_estimate_tracks_what_pages_decode_to(index) -> None:
    est = index.page_decoded_bytes()
    assert est.shape == (len(index),) and (est > 0).all()
    got = np.array([index.read_page(i).nbytes for i in range(len(index))])
    # list<int32> + int64 without dictionary: Parquet's plain bytes are close to Arrow's
    ratio = est.sum() / got.sum()
    assert 0.5 < ratio < 2.0, ratio


def test_memory_budget_shrinks_windows_and_keeps_every_row(index) -> None:
    from youmu.order.shuffle import WINDOWS_IN_FLIGHT

    est = index.page_decoded_bytes()
    budget = int(WINDOWS_IN_FLIGHT * 2 * est.max())  # two of the largest pages per window
    free = RowStream(index, "page", buffer_size=2000, seed=3)
    tight = RowStream(index, "page", buffer_size=2000, seed=3, memory_budget=budget)
    assert free.window_pages > 2 and tight.window_pages == 2
    for i in range(len(tight.plan.window_ids)):
        assert est[tight.plan.pages_of(i)].sum() * WINDOWS_IN_FLIGHT <= budget
    assert sorted(ids_of(tight)) == list(range(N_ROWS))
    ds = YoumuDataset(index, buffer_size=2000, memory_budget=budget, output="python")
    assert ds._window_pages() == 2 and sorted(r["id"] for r in ds) == list(range(N_ROWS))


def test_a_page_over_the_budget_is_read_alone_without_read_ahead(index) -> None:
    # a budget below one page used to refuse the data; now each page is read alone
    alone = RowStream(index, "page", memory_budget=10, seed=3)
    assert (alone.window_pages, alone.read_ahead) == (1, 0)
    assert ids_of(alone) == ids_of(RowStream(index, "page", seed=3, window_pages=1))
    assert sorted(ids_of(alone)) == list(range(N_ROWS))
    ds = YoumuDataset(index, memory_budget=10, output="python")
    assert (ds.window_pages, ds.read_ahead) == (1, 0) and sorted(r["id"] for r in ds) == list(range(N_ROWS))
    with pytest.raises(ValueError, match="memory_budget"):
        YoumuDataset(index, memory_budget=0)


def test_resuming_with_a_different_window_size_is_refused(index) -> None:
    ds = YoumuDataset(index, buffer_size=2000, output="python")
    next(iter(ds))
    budget = int(3 * 2 * index.page_decoded_bytes().max())
    with pytest.raises(ValueError, match="windows of"):
        YoumuDataset(index, buffer_size=2000, memory_budget=budget, output="python").load_state_dict(ds.state_dict())


# -- row mode's page cache ----------------------------------------------------------------------
def test_row_mode_page_cache_saves_reads_and_changes_nothing(index) -> None:
    cached = RowStream(index, "row", buffer_size=400, seed=2)
    uncached = RowStream(index, "row", buffer_size=400, seed=2)
    uncached.cache_pages = 0
    a, b = ids_of(cached), ids_of(uncached)
    assert a == b and sorted(a) == list(range(N_ROWS))
    assert len(cached._cache) <= cached.cache_pages
    # the dataset has few pages, so chunks often land on pages still cached
    assert cached.pages_read < uncached.pages_read


# -- state at the end of an epoch ---------------------------------------------------------------
def test_a_state_saved_after_the_epoch_ended_resumes_to_nothing(index) -> None:
    """Regression: the end of an iteration dropped the position, so a checkpoint taken
    after the last row replayed the whole epoch on resume."""
    make = lambda: YoumuDataset(index, shuffle="page", buffer_size=300, seed=4, output="python")  # noqa: E731
    ds = make()
    first = [r["id"] for r in ds]
    state = ds.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert list(resumed) == []
    assert [r["id"] for r in resumed] == first  # the next iteration starts the epoch over
    assert [r["id"] for r in ds] == first


def test_a_packed_state_saved_after_the_epoch_ended_resumes_to_nothing(index) -> None:
    make = lambda: pack(YoumuDataset(index, shuffle="page", buffer_size=300, seed=1), seq_len=64, eos_id=-1)  # noqa: E731
    p = make()
    n = len(list(p))
    q = make()
    q.load_state_dict(p.state_dict())
    assert list(q) == [] and len(list(q)) == n


def test_a_map_stream_state_saved_after_the_epoch_ended_resumes_to_nothing() -> None:
    from youmu.torch import MapStream

    m = MapStream(list(range(10)), rank=0, world_size=1)
    assert list(m) == list(range(10))
    m2 = MapStream(list(range(10)), rank=0, world_size=1)
    m2.load_state_dict(m.state_dict())
    assert list(m2) == [] and list(m2) == list(range(10))


@pytest.mark.parametrize("cut", [0, 1, 13, 50])
def test_packing_resumes_at_several_points(index, cut: int) -> None:
    make = lambda: pack(YoumuDataset(index, shuffle="row", buffer_size=300, seed=8), seq_len=96, eos_id=-1)  # noqa: E731
    full = [x["input_ids"] for x in make()]
    p = make()
    it = iter(p)
    head = [next(it)["input_ids"] for _ in range(cut)]
    q = make()
    q.load_state_dict(p.state_dict())
    rest = [x["input_ids"] for x in q]
    assert len(head) + len(rest) == len(full)
    assert all(torch.equal(a, b) for a, b in zip(head + rest, full))


def test_packed_positions_restart_with_every_piece(index) -> None:
    ds = YoumuDataset(index, shuffle="none", output="torch")
    doc_lens = [len(r["input_ids"]) + 1 for r in ds]  # + eos
    for p in itertools.islice(pack(ds, seq_len=50, eos_id=-1), 30):
        cu, pos = p["cu_seqlens"].numpy(), p["position_ids"].numpy()
        starts = np.flatnonzero(pos == 0)
        assert list(starts) == list(cu[:-1])  # a position reset exactly at every boundary
        assert max(cu[1:] - cu[:-1]) <= max(doc_lens)


# -- zero copy ---------------------------------------------------------------------------------
def test_token_rows_are_views_of_the_arrow_values_buffer() -> None:
    from youmu.streams.convert import column_rows

    arr = pa.array([np.arange(n, dtype=np.int32) for n in (5, 0, 7, 3)], pa.list_(pa.int32())).slice(1)
    base = arr.values.buffers()[1].address + arr.values.offset * 4
    offsets = arr.offsets.to_numpy()
    for out in ("torch", "numpy"):
        rows = column_rows(arr, out)
        for i, r in enumerate(rows):
            ptr = r.data_ptr() if out == "torch" else r.__array_interface__["data"][0]
            if len(r):
                assert ptr == base + 4 * int(offsets[i])  # the Arrow bytes themselves
    # in DataLoader workers rows get their own buffers on purpose (see column_rows)
    compact = column_rows(arr, "torch", compact=True)
    assert compact[1].data_ptr() != base + 4 * int(offsets[1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ahead", [0, 1, 3, 8])
def test_read_ahead_depth_changes_nothing_but_timing(index, mode, ahead) -> None:
    base = ids_of(RowStream(index, mode, 200, seed=3, rank=1, world_size=2))
    assert ids_of(RowStream(index, mode, 200, seed=3, rank=1, world_size=2, read_ahead=ahead)) == base
    assert ids_of(RowStream(index, mode, 200, seed=3, rank=1, world_size=2, read_ahead=ahead), start=77) == base[77:]


def test_deeper_read_ahead_shrinks_windows_to_the_same_memory_budget(index) -> None:
    budget = int(5 * index.page_decoded_bytes().max())
    one = RowStream(index, "page", 10**6, memory_budget=budget, read_ahead=1)   # 3 windows in flight
    three = RowStream(index, "page", 10**6, memory_budget=budget, read_ahead=3)  # 5 windows in flight
    assert one.window_pages == 1 and three.window_pages == 1
    # 6 windows of one page do not fit: the budget lowers the read-ahead to what does
    four = RowStream(index, "page", 10**6, memory_budget=budget, read_ahead=4)
    assert (four.window_pages, four.read_ahead) == (1, 3)
    assert RowStream(index, "page", read_ahead=0).read_ahead == 0
    with pytest.raises(youmu.InvalidArgumentError, match="read_ahead"):
        RowStream(index, "page", read_ahead=-1)


def test_local_indexes_read_one_window_ahead_by_default(index) -> None:
    from youmu.streams.rowstream import default_read_ahead

    assert default_read_ahead(index, 10) == 1
    assert YoumuDataset(index, output="python").read_ahead == 1


# -- page slices --------------------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_page_slices_deliver_every_row_exactly_once(index, k, world_size, num_workers) -> None:
    seen: list[int] = []
    for r in range(world_size):
        per_rank = []
        for w in range(num_workers):
            s = RowStream(index, "page", 200, seed=4, rank=r, world_size=world_size, worker=w,
                          num_workers=num_workers, page_slices=k)
            per_rank += ids_of(s)
        alone = ids_of(RowStream(index, "page", 200, seed=4, rank=r, world_size=world_size, page_slices=k))
        assert sorted(per_rank) == sorted(alone)  # a rank's rows do not depend on its workers
        seen += per_rank
    assert sorted(seen) == list(range(N_ROWS))


def test_page_slices_draw_each_window_from_k_times_more_pages(index) -> None:
    whole = RowStream(index, "page", 400, seed=2)
    sliced = RowStream(index, "page", 400, seed=2, page_slices=4)
    assert whole.window_pages == sliced.window_pages  # a window holds about the same rows
    n = min(len(whole.plan.window_ids), len(sliced.plan.window_ids)) - 1
    pages_whole = np.mean([len(whole.plan.pages_of(i)) for i in range(n)])
    pages_sliced = np.mean([len(sliced.plan.pages_of(i)) for i in range(n)])
    assert pages_sliced > 2.5 * pages_whole
    assert abs(len(sliced) - len(whole)) == 0 and sliced.plan.window_rows.sum() == N_ROWS


def test_page_slices_of_one_are_the_page_shuffle_and_other_modes_refuse_them(index) -> None:
    assert ids_of(RowStream(index, "page", 200, seed=1, page_slices=1)) == ids_of(RowStream(index, "page", 200, seed=1))
    assert ids_of(RowStream(index, "page", 200, seed=1, page_slices=2)) != ids_of(RowStream(index, "page", 200, seed=1))
    with pytest.raises(youmu.InvalidArgumentError, match="page_slices"):
        YoumuDataset(index, shuffle="local", page_slices=2)
    with pytest.raises(youmu.InvalidArgumentError, match="page_slices"):
        YoumuDataset(index, page_slices=0)


def test_page_slices_resume_and_are_part_of_the_state(index) -> None:
    make = lambda k: YoumuDataset(index, buffer_size=300, seed=6, page_slices=k, output="python")  # noqa: E731
    whole = [r["id"] for r in make(3)]
    ds = make(3)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(700)]
    state = ds.state_dict()
    assert state["page_slices"] == 3
    again = make(3)
    again.load_state_dict(state)
    assert head + [r["id"] for r in again] == whole
    with pytest.raises(youmu.StateError, match="page_slices"):
        make(2).load_state_dict(state)


def test_positions_map_to_rows_under_page_slices(index) -> None:
    from diversity import plan_rows

    s = RowStream(index, "page", 250, seed=9, rank=1, world_size=2, page_slices=3)
    rows = plan_rows(s.plan, index.page_num_rows())
    assert rows.tolist() == ids_of(s)  # ids are the global row numbers in this corpus


def test_default_windows_hold_at_least_32_pages_where_the_data_has_them() -> None:
    """benches/shuffle_quality.py: windows of 32+ distinct pages trained as well as a full
    row shuffle, fewer kept part of the no-shuffle degradation."""
    from youmu.order.shuffle import window_pages_for

    big_pages = np.full(1000, 330)  # ~1 MiB token pages: 8,192 rows would be 25 pages
    assert window_pages_for(big_pages, None) == 32
    small_pages = np.full(5000, 8)  # 8,192 rows are 1,024 pages
    assert window_pages_for(small_pages, None) == 1024
    assert window_pages_for(big_pages, 8192) == 25  # an explicit buffer_size is what it says
    assert window_pages_for(np.full(40, 330), None, world_size=2) == 20  # every rank keeps a window
