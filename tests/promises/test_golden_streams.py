"""Golden streams: what every youmu stream emits today, pinned by hash.

A golden stream is the exact sequence of items a stream yields for fixed arguments
and a fixed corpus — rows of a ``YoumuDataset`` per rank and DataLoader worker count,
packed sequences, mixture items through ``MapStream``, the steps of
``DynamicBatchLoader`` and the micro-batches of ``BalancedLoader`` on one and on two
Gloo ranks, and the rest of each stream after a resume. Each is stored in
``tests/support/golden_streams.json`` as its number of items and a sha256 of their canonical
serialisation (``golden_mp.digest``), so a refactor that is meant to change no
behaviour cannot change a stream unnoticed: a failure names every case whose count
or content changed.

These tests say *that* a stream changed, not whether the change is right; the other
test modules say what is right. Each case also checks the properties that must hold
whatever the hashes (every row exactly once over the ranks, a resumed stream is the
uninterrupted one's rest, ...).

The corpus is written by the test (``golden_mp.write_corpus``) with one page per row
group, so its page structure does not depend on the pyarrow version;
``test_corpus_is_the_intended_one`` checks that structure and the corpus's content,
so a drift in the corpus fails there, explicitly, rather than in every stream.

Regenerating, deliberately
    When a change is *meant* to change a stream, regenerate the hashes of the cases it
    changes and say so in the commit message (which streams changed, and why)::

        YOUMU_REGEN_GOLDEN=1 PYTHONPATH=python python -m pytest -q tests/promises/test_golden_streams.py -k drop_last

    With ``YOUMU_REGEN_GOLDEN=1`` the selected tests record the hashes they observe
    instead of asserting them and write them into the JSON at the end of the session
    (entries of cases that did not run are kept), so ``-k`` regenerates a subset
    alone; the self-consistency checks still run. The ``drop_last`` cases
    (``YoumuDataset.drop_last/...``, test ``test_youmu_dataset_drop_last``) are kept
    apart because their behaviour is due to change on its own. To drop entries of
    cases that no longer exist, delete the JSON and regenerate everything.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import golden_mp as g
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader
from where import SUPPORT

import youmu
from youmu.state import files as statefile
from youmu.torch import MapStream, MixtureStream, YoumuDataset, pack

GOLDEN_PATH = SUPPORT / "golden_streams.json"
REGEN = os.environ.get("YOUMU_REGEN_GOLDEN") == "1"

MODES = ["page", "row", "local", "none"]
WORLDS = [1, 2, 3]
WORKERS = [0, 2]
BUFFER = 30  # rows per window: 3 pages of ~10.7 rows, so 10 windows per epoch
SEED = 5
RESUME_AFTER = 37  # rows (or items) taken before a state is saved: inside a window
SEQ_LEN = 128  # packed sequence length
N_MAIN = sum(n for _, n, _ in g.MAIN_FILES)
N_AUX = sum(n for _, n, _ in g.AUX_FILES)

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")]


# ----------------------------------------------------------------------------------------
# the golden book: expected digests, and regeneration
# ----------------------------------------------------------------------------------------
class GoldenBook:
    """Expected digests by case name; records observed ones when regenerating."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.expected: dict[str, dict[str, Any]] = (
            json.loads(path.read_text())["cases"] if path.exists() else {}
        )
        self.observed: dict[str, dict[str, Any]] = {}

    def check(self, cases: dict[str, dict[str, Any]]) -> None:
        """Compare ``{name: digest}`` with the book (or record it, regenerating);
        one assertion listing every case that differs."""
        for name, got in cases.items():
            assert name not in self.observed or self.observed[name] == got, \
                f"case {name} computed twice with different results (non-determinism within one session)"
            self.observed[name] = got
        if REGEN:
            return
        problems = []
        for name, got in sorted(cases.items()):
            want = self.expected.get(name)
            if want is None:
                problems.append(f"  {name}: no golden entry (regenerate with YOUMU_REGEN_GOLDEN=1)")
            elif want["count"] != got["count"]:
                problems.append(f"  {name}: {want['count']} items expected, {got['count']} emitted")
            elif want["sha256"] != got["sha256"]:
                problems.append(f"  {name}: the same {got['count']} items expected, different content emitted")
        if problems:
            pytest.fail(f"{len(problems)} of {len(cases)} golden streams changed (if deliberate, regenerate them "
                        "and say so in the commit message):\n" + "\n".join(problems), pytrace=False)

    def save(self) -> None:
        cases = {**self.expected, **self.observed}
        lines = [f"  {json.dumps(k)}: {json.dumps(cases[k], sort_keys=True)}" for k in sorted(cases)]
        self.path.write_text(
            '{\n "about": "golden stream digests; written by tests/promises/test_golden_streams.py with YOUMU_REGEN_GOLDEN=1",\n'
            ' "cases": {\n' + ",\n".join(lines) + "\n }\n}\n"
        )


@pytest.fixture(scope="session")
def golden() -> Iterable[GoldenBook]:
    book = GoldenBook(GOLDEN_PATH)
    yield book
    if REGEN and book.observed:
        book.save()


def check(golden: GoldenBook, streams: dict[str, list[Any]]) -> None:
    """Digest every ``{name: items}`` and compare with the book."""
    golden.check({name: g.digest(items) for name, items in streams.items()})


# ----------------------------------------------------------------------------------------
# corpus
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return g.write_corpus(tmp_path_factory.mktemp("golden-corpus"))


@pytest.fixture(scope="session")
def index(paths: dict[str, str]) -> youmu.PageIndex:
    return youmu.PageIndex(paths["main"])


def test_corpus_is_the_intended_one(paths: dict[str, str], index: youmu.PageIndex, golden: GoldenBook) -> None:
    """One page per row group, in file order, and the same rows as when the hashes
    were recorded (a drift here would change every stream below)."""
    assert [Path(f).name for f in index.files] == [name for name, _, _ in g.MAIN_FILES]
    assert index.columns == ["id", "input_ids"]
    assert index.page_num_rows().tolist() == g.expected_page_rows(g.MAIN_FILES)
    aux = youmu.PageIndex(paths["aux"])
    assert aux.page_num_rows().tolist() == g.expected_page_rows(g.AUX_FILES)
    streams = {}
    for name, files in (("main", g.MAIN_FILES), ("aux", g.AUX_FILES)):
        assert sorted(p.name for p in Path(paths[name]).iterdir()) == [f for f, _, _ in files]
        rows = []
        for f, n, rg in files:
            meta = pq.ParquetFile(Path(paths[name]) / f).metadata
            assert meta.num_rows == n
            groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
            assert groups == g.expected_page_rows([(f, n, rg)])
            rows += pq.read_table(Path(paths[name]) / f).to_pylist()
        lengths = [len(r["input_ids"]) for r in rows]
        assert min(lengths) >= g.MIN_TOKENS and max(lengths) <= g.MAX_TOKENS
        streams[f"corpus/{name}"] = [g.row_key(r) for r in rows]
    assert [r["id"] for r in streams["corpus/main"]] == list(range(N_MAIN))
    assert [r["id"] for r in streams["corpus/aux"]] == list(range(g.AUX_FIRST_ID, g.AUX_FIRST_ID + N_AUX))
    check(golden, streams)


# ----------------------------------------------------------------------------------------
# iteration helpers
# ----------------------------------------------------------------------------------------
def loader(ds: Any, workers: int) -> Any:
    """Items as a training loop sees them: the dataset itself, or a DataLoader with
    ``workers`` worker processes (``batch_size=None``: one item at a time)."""
    if workers == 0:
        return ds
    return DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context="fork")


def stateful_resume(make: Callable[[], Any], workers: int, after: int, key: Callable[[Any], Any]) -> tuple[list, list]:
    """(first ``after`` items, the rest) through torchdata's StatefulDataLoader, the
    rest read by a fresh loader over a fresh dataset from the first one's state."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def sdl(ds: Any) -> Any:
        return StatefulDataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context="fork")

    first = sdl(make())
    head = []
    for item in first:
        head.append(key(item))
        if len(head) == after:
            break
    state = statefile.loads(statefile.dumps(first.state_dict()), where="checkpoint")
    del first
    second = sdl(make())
    second.load_state_dict(state)
    return head, [key(x) for x in second]


def direct_resume(make: Callable[[], Any], after: int, key: Callable[[Any], Any]) -> tuple[list, list]:
    """(first ``after`` items, the rest) in the main process: ``state_dict()`` of the
    first dataset, ``load_state_dict`` into a fresh one."""
    first = make()
    head = []
    for item in first:
        head.append(key(item))
        if len(head) == after:
            break
    state = statefile.loads(statefile.dumps(first.state_dict()), where="checkpoint")
    second = make()
    second.load_state_dict(state)
    return head, [key(x) for x in second]


# ----------------------------------------------------------------------------------------
# YoumuDataset
# ----------------------------------------------------------------------------------------
def youmu_ds(index: Any, mode: str, world: int, rank: int, **kw: Any) -> YoumuDataset:
    kw.setdefault("buffer_size", BUFFER)
    return YoumuDataset(index, shuffle=mode, seed=SEED, rank=rank, world_size=world, **kw)


@functools.cache
def _epoch_rows(index: Any, mode: str, world: int, rank: int, workers: int, epoch: int = 0,
                drop_last: bool = False) -> tuple[dict[str, Any], ...]:
    ds = youmu_ds(index, mode, world, rank, drop_last=drop_last)
    ds.set_epoch(epoch)
    return tuple(g.row_key(r) for r in loader(ds, workers))


def epoch_rows(index: Any, mode: str, world: int, rank: int, workers: int, epoch: int = 0,
               drop_last: bool = False) -> list[dict[str, Any]]:
    """The rows one rank reads in one epoch (computed once per session)."""
    return list(_epoch_rows(index, mode, world, rank, workers, epoch, drop_last))


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in rows]


@pytest.mark.parametrize("mode", MODES)
def test_youmu_dataset_full_epoch(index: youmu.PageIndex, golden: GoldenBook, mode: str) -> None:
    """Epoch 0 of every rank, world sizes 1–3, in the main process and through two
    DataLoader workers."""
    streams = {}
    for world in WORLDS:
        for workers in WORKERS:
            per_rank = [epoch_rows(index, mode, world, r, workers) for r in range(world)]
            assert sorted(i for rows in per_rank for i in _ids(rows)) == list(range(N_MAIN))
            for rank, rows in enumerate(per_rank):
                assert len(rows) == len(youmu_ds(index, mode, world, rank))
                if workers:  # a rank's rows do not depend on its worker count (their order does)
                    assert sorted(_ids(rows)) == sorted(_ids(epoch_rows(index, mode, world, rank, 0)))
                streams[f"YoumuDataset/{mode}/world{world}/workers{workers}/epoch0/rank{rank}"] = rows
    check(golden, streams)


@pytest.mark.parametrize("mode", MODES)
def test_youmu_dataset_second_epoch(index: youmu.PageIndex, golden: GoldenBook, mode: str) -> None:
    """Epoch 1 after ``set_epoch(1)``: reshuffled (the same order in ``none`` mode)."""
    streams = {}
    for world in WORLDS:
        for workers in WORKERS:
            per_rank = [epoch_rows(index, mode, world, r, workers, epoch=1) for r in range(world)]
            assert sorted(i for rows in per_rank for i in _ids(rows)) == list(range(N_MAIN))
            epoch0 = [epoch_rows(index, mode, world, r, workers) for r in range(world)]
            assert (per_rank == epoch0) == (mode == "none")
            for rank, rows in enumerate(per_rank):
                streams[f"YoumuDataset/{mode}/world{world}/workers{workers}/epoch1/rank{rank}"] = rows
    check(golden, streams)


def test_youmu_dataset_variants(index: youmu.PageIndex, paths: dict[str, str], golden: GoldenBook) -> None:
    """Page mode, world 2: every output format (the same rows; the types pinned), a filtering
    transform, a memory budget that shrinks the windows, the paths given directly,
    and a FlatMixture of both sources as one page space."""
    streams = {}
    for rank in range(2):
        base = epoch_rows(index, "page", 2, rank, 0)
        for output in ("torch", "numpy", "python", "arrow"):
            rows = [g.typed_row_key(r) for r in youmu_ds(index, "page", 2, rank, output=output)]
            assert [r["row"] for r in rows] == base, output
            streams[f"YoumuDataset.variant/output_{output}/world2/rank{rank}"] = rows
        even = youmu_ds(index, "page", 2, rank, transform=lambda r: r if int(r["id"]) % 2 == 0 else None)
        streams[f"YoumuDataset.variant/transform_even/world2/rank{rank}"] = [g.row_key(r) for r in even]
        assert _ids(streams[f"YoumuDataset.variant/transform_even/world2/rank{rank}"]) == \
            [i for i in _ids(base) if i % 2 == 0]
        budget = 3 * 2 * int(index.page_decoded_bytes().max())  # windows of 2 pages
        streams[f"YoumuDataset.variant/memory_budget/world2/rank{rank}"] = \
            [g.row_key(r) for r in youmu_ds(index, "page", 2, rank, memory_budget=budget)]
        from_paths = YoumuDataset(paths["main"], shuffle="page", buffer_size=BUFFER, seed=SEED, rank=rank, world_size=2)
        assert [g.row_key(r) for r in from_paths] == base
        flat = YoumuDataset(g.flat_mixture(paths), shuffle="page", buffer_size=BUFFER, seed=SEED, rank=rank,
                            world_size=2)
        streams[f"YoumuDataset.variant/flat_mixture/world2/rank{rank}"] = [g.row_key(r) for r in flat]
    flat_ids = sorted(i for r in range(2) for i in _ids(streams[f"YoumuDataset.variant/flat_mixture/world2/rank{r}"]))
    assert flat_ids == list(range(N_MAIN)) + list(range(g.AUX_FIRST_ID, g.AUX_FIRST_ID + N_AUX))
    check(golden, streams)


def test_reiteration(index: youmu.PageIndex, paths: dict[str, str], golden: GoldenBook) -> None:
    """Iterating the same object again in the main process: every ``iter()`` is an
    independent pass (the stream contract, :mod:`youmu.state.contract`), so after a finished
    epoch and after a ``break`` alike the next pass starts the epoch over (the same
    rows). Pinned for ``YoumuDataset``, ``pack`` and ``MapStream``, broken off after 37
    items."""
    streams = {}
    full = epoch_rows(index, "page", 2, 1, 0)
    ds = youmu_ds(index, "page", 2, 1)
    assert [g.row_key(r) for r in ds] == full
    assert [g.row_key(r) for r in ds] == full
    for name, make, key in [
        ("YoumuDataset/page/world2/rank1", lambda: youmu_ds(index, "page", 2, 1), g.row_key),
        ("pack/page/world2/rank1", lambda: pack(youmu_ds(index, "page", 2, 1), seq_len=SEQ_LEN, eos_id=0),
         g.packed_key),
        ("MapStream/MixtureDataset/world2/rank1", lambda: MapStream(g.mixture(paths), rank=1, world_size=2),
         g.row_key),
    ]:
        stream = make()
        whole = [key(x) for x in make()]
        it = iter(stream)
        head = [key(next(it)) for _ in range(RESUME_AFTER)]
        del it
        again = [key(x) for x in stream]
        assert head == whole[:RESUME_AFTER]
        assert again == whole
        streams[f"reiterate_after_break/{name}/after{RESUME_AFTER}"] = again
    check(golden, streams)


def test_youmu_dataset_drop_last(index: youmu.PageIndex, golden: GoldenBook) -> None:
    """``drop_last=True``, page mode, worlds 2 and 3: every rank exactly
    ``N // world`` rows, none twice, the fewer than ``world`` others reported by
    ``dropped_rows()``. (Kept apart so a deliberate change regenerates only these,
    with ``-k drop_last``.)"""
    streams = {}
    for world in (2, 3):
        for workers in WORKERS:
            per_rank = [epoch_rows(index, "page", world, r, workers, drop_last=True) for r in range(world)]
            assert len({len(rows) for rows in per_rank}) == 1
            assert len(per_rank[0]) == len(youmu_ds(index, "page", world, 0, drop_last=True))
            seen = [i for rows in per_rank for i in _ids(rows)]
            dropped = youmu_ds(index, "page", world, 0, drop_last=True).dropped_rows()
            assert len(set(seen)) == len(seen) and len(seen) + dropped == N_MAIN and dropped < world
            for rank, rows in enumerate(per_rank):
                streams[f"YoumuDataset.drop_last/page/world{world}/workers{workers}/rank{rank}"] = rows
    check(golden, streams)


@pytest.mark.parametrize("mode", MODES)
def test_youmu_dataset_resumed(index: youmu.PageIndex, golden: GoldenBook, mode: str) -> None:
    """The rest of epoch 0 after a resume at row 37 of every rank: from the dataset's
    own ``state_dict`` (main process), and through torchdata's StatefulDataLoader
    with two workers. Both continue exactly where the interrupted stream stopped."""
    streams = {}
    for world in WORLDS:
        for rank in range(world):
            def make() -> YoumuDataset:
                return youmu_ds(index, mode, world, rank)

            head, rest = direct_resume(make, RESUME_AFTER, g.row_key)
            assert head + rest == epoch_rows(index, mode, world, rank, 0)
            streams[f"YoumuDataset.resumed/{mode}/world{world}/workers0/rank{rank}/after{RESUME_AFTER}"] = rest
            head, rest = stateful_resume(make, 2, RESUME_AFTER, g.row_key)
            assert head + rest == epoch_rows(index, mode, world, rank, 2)
            streams[f"YoumuDataset.resumed/{mode}/world{world}/workers2/rank{rank}/after{RESUME_AFTER}"] = rest
    check(golden, streams)


# ----------------------------------------------------------------------------------------
# packing
# ----------------------------------------------------------------------------------------
def test_pack(index: youmu.PageIndex, paths: dict[str, str], golden: GoldenBook) -> None:
    """``pack(YoumuDataset, seq_len=128, eos_id=0)`` per rank, worlds 1 and 2, in the
    main process and through two workers; padding the last sequence instead of
    dropping it; packing a mixture's ``MapStream``; and resumes."""
    streams = {}

    def packed(world: int, rank: int, **kw: Any) -> Any:
        kw.setdefault("eos_id", 0)
        return pack(youmu_ds(index, "page", world, rank), seq_len=SEQ_LEN, **kw)

    for world in (1, 2):
        for workers in WORKERS:
            for rank in range(world):
                seqs = [g.packed_key(s) for s in loader(packed(world, rank), workers)]
                assert all(len(s["input_ids"]["values"]) == SEQ_LEN for s in seqs)
                streams[f"pack/page/world{world}/workers{workers}/rank{rank}"] = seqs
    streams["pack/pad_no_eos/world1/rank0"] = [g.packed_key(s) for s in packed(1, 0, eos_id=None, pad_id=0)]
    for rank in range(2):
        mix = pack(MapStream(g.mixture(paths), rank=rank, world_size=2), seq_len=SEQ_LEN, eos_id=0)
        streams[f"pack/MapStream_mixture/world2/rank{rank}"] = [g.packed_key(s) for s in mix]

    # resumes after 5 sequences (most sequence boundaries split a row: the resume starts inside it)
    for rank in range(2):
        head, rest = direct_resume(lambda: packed(2, rank), 5, g.packed_key)
        assert head + rest == streams[f"pack/page/world2/workers0/rank{rank}"]
        streams[f"pack.resumed/page/world2/workers0/rank{rank}/after5"] = rest
    for world in (1, 2):
        rank = world - 1
        head, rest = stateful_resume(lambda: packed(world, rank), 2, 5, g.packed_key)
        assert head + rest == streams[f"pack/page/world{world}/workers2/rank{rank}"]
        streams[f"pack.resumed/page/world{world}/workers2/rank{rank}/after5"] = rest
    check(golden, streams)


# ----------------------------------------------------------------------------------------
# mixtures through MapStream / MixtureStream
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["MixtureDataset", "FlatMixture"])
def test_mapstream(paths: dict[str, str], golden: GoldenBook, kind: str) -> None:
    """``MapStream`` over a weighted ``MixtureDataset`` (three ``RowDataset``
    children, a stage switch at index 96, blocks of 16) and over a ``FlatMixture``:
    worlds 1–3, in the main process and through two workers; a resume at item 37 on
    each of two ranks, from the stream's own state and through StatefulDataLoader."""
    make_dataset = g.mixture if kind == "MixtureDataset" else g.flat_mixture
    ds = make_dataset(paths)
    everything = [g.row_key(ds[i]) for i in range(len(ds))]
    streams = {}
    for world in WORLDS:
        for workers in WORKERS:
            per_rank = [[g.row_key(x) for x in loader(MapStream(ds, rank=r, world_size=world), workers)]
                        for r in range(world)]
            # index i goes to rank i % world
            assert all(rows == everything[r::world] for r, rows in enumerate(per_rank))
            for rank, rows in enumerate(per_rank):
                streams[f"MapStream/{kind}/world{world}/workers{workers}/rank{rank}"] = rows
    for rank in range(2):
        head, rest = direct_resume(lambda: MapStream(make_dataset(paths), rank=rank, world_size=2), RESUME_AFTER,
                                   g.row_key)
        assert head + rest == streams[f"MapStream/{kind}/world2/workers0/rank{rank}"]
        streams[f"MapStream.resumed/{kind}/world2/workers0/rank{rank}/after{RESUME_AFTER}"] = rest
        head, rest = stateful_resume(lambda: MapStream(make_dataset(paths), rank=rank, world_size=2), 2,
                                     RESUME_AFTER, g.row_key)
        assert head + rest == streams[f"MapStream/{kind}/world2/workers2/rank{rank}"]
        streams[f"MapStream.resumed/{kind}/world2/workers2/rank{rank}/after{RESUME_AFTER}"] = rest
    check(golden, streams)


def test_mixture_dataset_order(paths: dict[str, str], golden: GoldenBook) -> None:
    """The mixture's own index order (what every stream over it deals out), and
    ``MixtureStream`` (runs of one block dealt over two ranks, with two workers)."""
    mix = g.mixture(paths)
    streams = {"MixtureDataset/index_order": [g.row_key(mix[i]) for i in range(len(mix))],
               "FlatMixture/index_order": [g.row_key(x) for x in g.flat_mixture(paths)]}
    assert len(mix) == N_MAIN + N_AUX
    for rank in range(2):
        for workers in WORKERS:
            rows = [g.row_key(x) for x in loader(MixtureStream(mix, rank=rank, world_size=2), workers)]
            streams[f"MixtureStream/MixtureDataset/world2/workers{workers}/rank{rank}"] = rows
    runs = [streams["MixtureDataset/index_order"][k:k + 16] for k in range(0, len(mix), 16)]
    assert streams["MixtureStream/MixtureDataset/world2/workers0/rank0"] == [x for run in runs[0::2] for x in run]
    check(golden, streams)


# ----------------------------------------------------------------------------------------
# collated batches
# ----------------------------------------------------------------------------------------
def test_collated_batches(index: youmu.PageIndex, golden: GoldenBook) -> None:
    """What a training loop receives from a DataLoader with a collate function:
    ``collate_pad`` batches of 8 rows through two workers behind a ``Prefetcher``
    (and resumed from the ``Prefetcher``'s state after 5 batches), and
    ``collate_packed`` batches of 4 packed sequences. Values, dtypes and shapes."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from youmu.torch import Prefetcher, collate_packed, collate_pad

    def padded_loader(cls: Any = DataLoader) -> Any:
        return cls(youmu_ds(index, "page", 2, 1), batch_size=8, num_workers=2, collate_fn=collate_pad,
                   multiprocessing_context="fork")

    streams = {"collate_pad/page/world2/workers2/rank1": [g.tensors_key(b) for b in Prefetcher(padded_loader())]}
    # each worker collates batches of its own rows
    ids = [i for b in streams["collate_pad/page/world2/workers2/rank1"] for i in b["id"]["values"]]
    assert sorted(ids) == sorted(_ids(epoch_rows(index, "page", 2, 1, 2)))

    first = Prefetcher(padded_loader(StatefulDataLoader))
    head = []
    for b in first:
        head.append(g.tensors_key(b))
        if len(head) == 5:
            break
    state = statefile.loads(statefile.dumps(first.state_dict()), where="checkpoint")
    first.close()
    second = Prefetcher(padded_loader(StatefulDataLoader))
    second.load_state_dict(state)
    rest = [g.tensors_key(b) for b in second]
    assert head + rest == streams["collate_pad/page/world2/workers2/rank1"]
    streams["collate_pad.resumed/page/world2/workers2/rank1/after5"] = rest

    packed = pack(youmu_ds(index, "page", 1, 0), seq_len=SEQ_LEN, eos_id=0)
    streams["collate_packed/page/world1/workers0/rank0"] = [
        g.tensors_key(b) for b in DataLoader(packed, batch_size=4, collate_fn=collate_packed)]
    check(golden, streams)


# ----------------------------------------------------------------------------------------
# batch loaders, in one process and on two Gloo ranks (one launch for every case)
# ----------------------------------------------------------------------------------------
# Samples delivered over all ranks by the full-epoch batch loader cases: every one
# exactly once (a MixtureDataset repeats its small children's rows: counted only).
DELIVERED = {
    "DynamicBatchLoader/map/RowDataset/workers0": N_MAIN,
    "DynamicBatchLoader/map/RowDataset/non_join": N_MAIN,
    "DynamicBatchLoader/map/MixtureDataset/workers0": N_MAIN + N_AUX,
    "DynamicBatchLoader/map/MixtureDataset/workers2": N_MAIN + N_AUX,
    "DynamicBatchLoader/iterable/YoumuDataset/workers0": N_MAIN,
    "DynamicBatchLoader/iterable/YoumuDataset/workers2": N_MAIN,
    "DynamicBatchLoader/iterable/YoumuDataset/uneven_pad": N_MAIN,
    "BalancedLoader/global_batch_size": N_MAIN,
    "BalancedLoader/token_budget": N_MAIN + N_AUX,  # arrival ids of the mixture's items
    "BalancedLoader/multi_source": N_MAIN + N_AUX,
    "BalancedLoader/dbl_source": N_MAIN,
    "BalancedLoader/reorder_only": N_MAIN,
}


def check_delivered(prefix: str, per_rank_ids: list[dict[str, list[int]]]) -> None:
    """Every sample of the full-epoch cases named ``prefix...`` delivered exactly once
    over the ranks."""
    for name, total in DELIVERED.items():
        if not name.startswith(prefix):
            continue
        ids = [i for ids in per_rank_ids for i in ids[name]]
        assert len(ids) == total, f"{name}: {len(ids)} samples delivered, {total} expected"
        if "MixtureDataset" not in name:
            assert len(set(ids)) == total, f"{name}: a sample delivered twice"


def test_dynamic_batch_loader_single_process(paths: dict[str, str], golden: GoldenBook) -> None:
    """``DynamicBatchLoader`` steps (sample ids per step and the step info) with no
    process group: map-style and YoumuDataset sources, two workers, non-join, a
    padded tail, and resumes after 3 steps."""
    cases = {f"DynamicBatchLoader/{k}": v for k, v in g.dbl_cases(paths, 0, 1, lambda: None).items()}
    check_delivered("DynamicBatchLoader/", [{k: g.delivered_ids(v) for k, v in cases.items()}])
    check(golden, {f"{name}/world1/rank0": steps for name, steps in cases.items()})


def test_balanced_loader_single_process(paths: dict[str, str], golden: GoldenBook) -> None:
    """``BalancedLoader`` micro-batches with no process group: a global batch size, a
    token budget with capacity (deferrals), two sources mixed by a staged schedule,
    packed samples, a DynamicBatchLoader source (flattened, and reorder-only), a
    resume from the sources' states after 5 micro-batches and a replayed resume
    after 7."""
    cases = {f"BalancedLoader/{k}": v for k, v in g.balanced_cases(paths, 0, 1, lambda: None).items()}
    check_delivered("BalancedLoader/", [{k: g.delivered_ids(v) for k, v in cases.items()}])
    check(golden, {f"{name}/world1/rank0": items for name, items in cases.items()})


@pytest.fixture(scope="module")
def two_ranks(paths: dict[str, str]) -> list[dict[str, Any]]:
    from batching_mp import run_world

    return run_world(g.golden_rank_scenario, 2, paths, timeout=300)


@pytest.mark.parametrize("loader_name", ["DynamicBatchLoader", "BalancedLoader"])
def test_batch_loaders_on_two_ranks(two_ranks: list[dict[str, Any]], golden: GoldenBook, loader_name: str) -> None:
    """The same cases on two spawned ranks over Gloo: each rank's own steps (the
    resumed cases resume on both ranks)."""
    prefix = loader_name + "/"
    check_delivered(prefix, [per["ids"] for per in two_ranks])
    cases = {f"{name}/world2/rank{rank}": d for rank, per in enumerate(two_ranks)
             for name, d in per["digests"].items() if name.startswith(prefix)}
    assert cases
    golden.check(cases)
