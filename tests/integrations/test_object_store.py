"""Object storage against a real S3-compatible server (moto on 127.0.0.1), through a
proxy that counts and breaks requests: values equal to local reads, request
accounting, retries, timeouts, typed errors, staleness, persistence, fork, the CLI, and
the hostile-input checks of local files (page CRCs, memory limits, INT96 units, the
checksummed index format, ambiguous columns, malformed Arrow schemas, progress
callbacks) holding for objects too."""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from parquet_fixtures import write_columns, write_ids, write_table
from s3util import S3, Fault, object_key  # noqa: E402

import youmu

pytest.importorskip("moto")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def clean_proxy_and_options(s3: S3):
    """A proxy with no faults or requests recorded, and the I/O settings restored after."""
    before = youmu.io_options()
    s3.proxy.reset()
    yield
    s3.proxy.reset()
    youmu.set_io_options(**before)


@pytest.fixture
def fast_failures() -> None:
    """Short timeouts and backoff, so the fault tests finish in seconds. Only for them:
    the server is moto and this proxy, Python threads sharing one GIL with the test, and
    on a loaded machine an answer can take more than 2 s of wall time; a test that
    injects no fault reads with youmu's defaults, as users do."""
    youmu.set_io_options(retries=3, retry_timeout=20, request_timeout=2, connect_timeout=2)


def table(n: int, seed: int = 0, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 60, n)
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + n), pa.int64()),
            "input_ids": pa.array([rng.integers(0, 5000, int(k)).astype(np.int32) for k in lens], pa.list_(pa.int32())),
            "text": pa.array([None if i % 9 == 0 else f"doc {start + i} {'y' * (i % 13)}" for i in range(n)]),
            "label": pa.array([f"class-{i % 5}" for i in range(n)]),  # dictionary-friendly
        }
    )


# Small objects (moto copies a whole object per GET): a corner of every writer setting.
CORPUS = {
    f"pi={int(wpi)}-v{v}-dict={int(d)}-{c}": dict(write_page_index=wpi, data_page_version=v, use_dictionary=d, compression=c)
    for wpi, v, d, c in itertools.product([True, False], ["1.0", "2.0"], [True, False], ["zstd", "snappy", "gzip", "none"])
    if c in ("zstd", "none") or (wpi and not d)
}
COLUMNS = ["input_ids", "id", "text", "label"]


@pytest.fixture(scope="module")
def corpus(s3: S3, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    for i, (name, settings) in enumerate(sorted(CORPUS.items())):
        path = d / f"{name}.parquet"
        # written here: the writer settings (CORPUS) are what this corpus varies
        pq.write_table(table(700, seed=i, start=i * 700), path, data_page_size=1024, row_group_size=300, **settings)
        s3.put_file(f"corpus/{path.name}", path)
    return d


def rows_of(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_page_over_s3_equals_the_local_read(s3: S3, corpus: Path, name: str) -> None:
    local = youmu.PageIndex(corpus / f"{name}.parquet", columns=COLUMNS)
    remote = youmu.PageIndex(s3.url(f"corpus/{name}.parquet"), columns=COLUMNS, storage_options=s3.options())
    assert remote.is_remote and not local.is_remote
    assert len(remote) == len(local) > 2 and remote.num_rows == local.num_rows
    assert remote.schema == local.schema
    before = youmu.io_stats()["unplanned_remote_reads"]
    for i in range(len(local)):
        assert remote.read_page(i).equals(local.read_page(i)), f"page {i}"
    ids = np.random.default_rng(0).permutation(len(local))
    assert rows_of(remote.read_pages(ids)).equals(rows_of(local.read_pages(ids)))
    rows = np.random.default_rng(1).integers(0, local.num_rows, 40)
    assert remote.read_rows(rows).equals(local.read_rows(rows))
    take = np.random.default_rng(2).permutation(sum(local.page_num_rows()[ids[:5]]))
    assert remote.read_window(ids[:5], take).equals(local.read_window(ids[:5], take))
    assert youmu.io_stats()["unplanned_remote_reads"] == before, "every byte a decode read was planned"


def test_index_build_is_a_listing_and_at_most_two_gets_per_object(s3: S3, corpus: Path) -> None:
    idx = youmu.PageIndex(s3.url("corpus/"), columns=COLUMNS, storage_options=s3.options())
    assert idx.num_files == len(CORPUS)
    assert [Path(f).name for f in idx.files] == sorted(f"{n}.parquet" for n in CORPUS)
    gets = s3.proxy.gets()
    per_object = {k: sum(1 for g in gets if object_key(g) == k) for k in {object_key(g) for g in gets}}
    assert len(s3.proxy.lists()) == 1
    # files without an OffsetIndex need their column chunks for the header scan: one more round
    with_index = [k for k in per_object if "pi=1" in k]
    assert all(per_object[k] == 1 for k in with_index), per_object
    assert all(per_object[k] <= 2 for k in per_object), per_object
    # listed objects have a known size: their tail is a bounded range ending at it
    assert all(g.range and g.range.startswith("bytes=") for g in gets)


def test_a_tail_too_short_for_the_footer_costs_one_more_get(s3: S3, corpus: Path) -> None:
    name = "pi=1-v1.0-dict=0-zstd.parquet"
    youmu.set_io_options(tail_bytes=64)
    idx = youmu.PageIndex(s3.url(f"corpus/{name}"), columns=COLUMNS, storage_options=s3.options())
    assert len(s3.proxy.gets()) == 2, [g.range for g in s3.proxy.gets()]
    local = youmu.PageIndex(corpus / name, columns=COLUMNS)
    assert rows_of(idx.read_pages(range(len(idx)))).equals(rows_of(local.read_pages(range(len(local)))))


def test_a_page_is_one_get_and_coalescing_merges_neighbours(s3: S3, corpus: Path) -> None:
    name = "pi=1-v1.0-dict=0-zstd.parquet"
    idx = youmu.PageIndex(s3.url(f"corpus/{name}"), columns=["input_ids"], storage_options=s3.options())
    n = len(idx)
    assert n >= 6
    youmu.set_io_options(coalesce_gap=0)
    s3.proxy.reset()
    idx.read_page(3)
    assert len(s3.proxy.gets()) == 1
    s3.proxy.reset()
    idx.read_pages([0, 2, 4])  # not adjacent: one GET each
    assert len(s3.proxy.gets()) == 3
    s3.proxy.reset()
    before = youmu.io_stats()["remote_bytes"]
    idx.read_pages(range(n))  # adjacent pages of a chunk touch: merged even with gap 0
    exact = youmu.io_stats()["remote_bytes"] - before
    merged_gets = len(s3.proxy.gets())
    assert merged_gets < n
    youmu.set_io_options(coalesce_gap=1 << 20)
    s3.proxy.reset()
    before = youmu.io_stats()["remote_bytes"]
    idx.read_pages([0, 2, 4])
    assert len(s3.proxy.gets()) == 1  # the holes are small: one GET, more bytes
    assert youmu.io_stats()["remote_bytes"] - before <= exact


def test_a_dictionary_page_is_fetched_once(s3: S3, tmp_path: Path) -> None:
    path = tmp_path / "dict.parquet"
    t = pa.table({"label": [f"class-{i % 7}-{'z' * (i % 3)}" for i in range(4000)]})
    # written here: one dictionary page before many small data pages is the layout under test
    pq.write_table(t, path, row_group_size=4000, data_page_size=256, write_batch_size=200, write_page_index=True)
    s3.put_file("dict/a.parquet", path)
    idx = youmu.PageIndex(s3.url("dict/a.parquet"), storage_options=s3.options())
    youmu.set_io_options(coalesce_gap=0)
    assert len(idx) >= 4
    s3.proxy.reset()
    idx.read_page(len(idx) - 1)  # dictionary + page: two GETs (not adjacent)
    assert len(s3.proxy.gets()) == 2
    s3.proxy.reset()
    idx.read_page(len(idx) - 3)  # dictionary cached
    assert len(s3.proxy.gets()) == 1
    assert idx.read_page(2).equals(youmu.PageIndex(path).read_page(2))


def test_prefix_and_glob_listing_follow_the_discovery_rules(s3: S3, corpus: Path) -> None:
    data = (corpus / "pi=1-v1.0-dict=0-zstd.parquet").read_bytes()
    for key in ["b.parquet", "A.PARQUET", "c.parq", "sub/d.pq", "_SUCCESS", ".b.parquet.crc", "_tmp/x.parquet", "x.txt"]:
        s3.put(f"rules/{key}", data if "parq" in key.lower() or key.endswith(".pq") else b"junk")
    opts = s3.options()
    names = lambda idx: [f.split("/rules/", 1)[1] for f in idx.files]  # noqa: E731
    assert names(youmu.PageIndex(s3.url("rules/"), storage_options=opts)) == ["A.PARQUET", "b.parquet", "c.parq", "sub/d.pq"]
    assert names(youmu.PageIndex(s3.url("rules"), storage_options=opts)) == ["A.PARQUET", "b.parquet", "c.parq", "sub/d.pq"]
    assert names(youmu.PageIndex(s3.url("rules/*.parquet"), storage_options=opts)) == ["b.parquet"]
    # a glob matching a "directory" takes its objects, as a local glob walks a matched directory
    assert names(youmu.PageIndex(s3.url("rules/*"), storage_options=opts)) == ["A.PARQUET", "b.parquet", "c.parq", "sub/d.pq"]
    assert names(youmu.PageIndex(s3.url("rules/*.p*"), storage_options=opts)) == ["b.parquet", "c.parq"]
    assert names(youmu.PageIndex(s3.url("rules/_tmp/x.parquet"), storage_options=opts)) == ["_tmp/x.parquet"]
    with pytest.raises(youmu.InvalidArgumentError, match="matched no Parquet objects"):
        youmu.PageIndex(s3.url("rules/*.nothing"), storage_options=opts)


def test_configuration_from_the_environment(s3: S3, corpus: Path, tmp_path: Path) -> None:
    script = (
        "import youmu, sys\n"
        f"idx = youmu.PageIndex({s3.url('corpus/')!r}, columns=['id'])\n"
        "print(idx.num_files, idx.num_rows, idx.read_page(0).num_rows)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | s3.env()
    env["PYTHONPATH"] = str(Path(youmu.__file__).parent.parent)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    files, rows, first = map(int, out.stdout.split())
    assert files == len(CORPUS) and rows == 700 * len(CORPUS) and first > 0


def test_http_urls_name_objects(s3: S3, corpus: Path) -> None:
    name = "pi=1-v2.0-dict=0-zstd.parquet"
    s3.put_file(f"public/{name}", corpus / name, public=True)  # plain HTTP is anonymous
    url = f"{s3.proxy.endpoint}/{s3.bucket}/public/{name}"
    idx = youmu.PageIndex(url, columns=COLUMNS)
    local = youmu.PageIndex(corpus / name, columns=COLUMNS)
    assert rows_of(idx.read_pages(range(len(idx)))).equals(rows_of(local.read_pages(range(len(local)))))


# --- faults ------------------------------------------------------------------------


def remote_index(s3: S3, name: str = "pi=1-v1.0-dict=0-zstd.parquet", **kw: object) -> youmu.PageIndex:
    return youmu.PageIndex(s3.url(f"corpus/{name}"), columns=["input_ids", "id"], storage_options=s3.options(**kw))


@pytest.mark.usefixtures("fast_failures")
@pytest.mark.parametrize("action", ["fail", "stall", "truncate"])
def test_a_transient_fault_is_retried(s3: S3, corpus: Path, action: str) -> None:
    idx = remote_index(s3)
    want = rows_of(youmu.PageIndex(corpus / "pi=1-v1.0-dict=0-zstd.parquet", columns=["input_ids", "id"]).read_pages(range(len(idx))))
    s3.proxy.reset()
    s3.proxy.faults.append(Fault(action, nth=1, seconds=4.0))  # request_timeout is 2 s
    assert rows_of(idx.read_pages(range(len(idx)))).equals(want)
    assert s3.proxy.faults[0].fired == 1


@pytest.mark.usefixtures("fast_failures")
@pytest.mark.parametrize(
    "action, error",
    [("fail", "RetriesExhaustedError"), ("stall", "StorageTimeoutError"), ("truncate", "RetriesExhaustedError")],
)
def test_faults_outlasting_the_retries_are_typed_errors_naming_object_and_range(
    s3: S3, corpus: Path, action: str, error: str
) -> None:
    idx = remote_index(s3)
    youmu.set_io_options(retries=1, request_timeout=1)
    s3.proxy.faults.append(Fault(action, nth=1, times=None, seconds=3.0))
    with pytest.raises(getattr(youmu, error)) as e:
        idx.read_page(1)
    assert isinstance(e.value, youmu.StorageError) and isinstance(e.value, OSError)
    assert s3.url("corpus/pi=1-v1.0-dict=0-zstd.parquet") in str(e.value)
    assert "bytes " in str(e.value)


def test_an_object_replaced_after_indexing_is_stale(s3: S3, corpus: Path, tmp_path: Path) -> None:
    key = "stale/a.parquet"
    s3.put_file(key, corpus / "pi=1-v1.0-dict=0-zstd.parquet")
    idx = youmu.PageIndex(s3.url(key), storage_options=s3.options())
    idx.read_page(0)
    idx.save(tmp_path / "a.youmu")
    youmu.PageIndex.load(tmp_path / "a.youmu", storage_options=s3.options()).read_page(1)
    s3.put_file(key, corpus / "pi=1-v1.0-dict=0-snappy.parquet")  # same name, other bytes
    with pytest.raises(youmu.StaleIndexError, match="changed since it was indexed"):
        idx.read_page(1)
    with pytest.raises(youmu.StaleIndexError, match=key):
        youmu.PageIndex.load(tmp_path / "a.youmu", storage_options=s3.options())
    s3.client.delete_object(Bucket=s3.bucket, Key=key)
    with pytest.raises(youmu.StaleIndexError, match="no longer exists"):
        idx.read_page(2)


def test_bad_credentials_missing_bucket_and_missing_key_are_typed_errors(s3: S3, corpus: Path) -> None:
    s3.proxy.faults.append(Fault("deny", times=None, when=lambda r: "BADKEY" in r.headers.get("authorization", "")))
    with pytest.raises(youmu.StorageAuthError, match="s3://") as e:
        youmu.PageIndex(s3.url("corpus/"), storage_options=s3.options(access_key_id="BADKEY"))
    assert isinstance(e.value, PermissionError)
    with pytest.raises(youmu.BucketNotFoundError, match="s3://no-such-bucket/") as e2:
        youmu.PageIndex("s3://no-such-bucket/x/", storage_options=s3.options())
    assert isinstance(e2.value, FileNotFoundError)
    with pytest.raises(youmu.ObjectNotFoundError, match="corpus/missing.parquet"):
        youmu.PageIndex(s3.url("corpus/missing.parquet"), storage_options=s3.options())
    with pytest.raises(youmu.InvalidArgumentError, match="endpiont"):
        youmu.PageIndex(s3.url("corpus/"), storage_options={"endpiont": "x"})
    with pytest.raises(youmu.InvalidArgumentError, match="holds no Parquet objects"):
        youmu.PageIndex(s3.url("nothing-here/"), storage_options=s3.options())


@pytest.mark.usefixtures("fast_failures")
def test_unreachable_endpoint_fails_fast_and_typed(s3: S3) -> None:
    youmu.set_io_options(retries=1, connect_timeout=1)
    with pytest.raises(youmu.StorageError, match="s3://"):
        youmu.PageIndex(s3.url("corpus/"), storage_options=s3.options(endpoint="http://127.0.0.1:9"))


# --- persistence, pickling, fork -----------------------------------------------------


def test_save_load_and_pickle_round_trip(s3: S3, corpus: Path, tmp_path: Path) -> None:
    idx = youmu.PageIndex(s3.url("corpus/"), columns=["id"], storage_options=s3.options())
    want = rows_of(idx.read_pages(range(len(idx))))
    idx.save(tmp_path / "i.youmu")
    s3.proxy.reset()
    loaded = youmu.PageIndex.load(tmp_path / "i.youmu", storage_options=s3.options())
    assert len(s3.proxy.gets()) == 0 and len(s3.proxy.lists()) == 1, "one listing checks every object of a prefix"
    assert rows_of(loaded.read_pages(range(len(loaded)))).equals(want)
    idx.save(s3.url("indexes/i.youmu"))  # an index kept in the store itself
    from_store = youmu.PageIndex.load(s3.url("indexes/i.youmu"), storage_options=s3.options())
    assert rows_of(from_store.read_pages(range(len(from_store)))).equals(want)
    again = pickle.loads(pickle.dumps(idx))
    assert again.is_remote and rows_of(again.read_pages(range(len(again)))).equals(want)
    assert b"testing" not in (tmp_path / "i.youmu").read_bytes(), "credentials are never saved"


def test_a_shuffled_epoch_over_s3_equals_the_local_epoch(s3: S3, corpus: Path) -> None:
    from youmu.torch import YoumuDataset

    remote = youmu.PageIndex(s3.url("corpus/"), columns=["id", "input_ids"], storage_options=s3.options())
    local = youmu.PageIndex(sorted(corpus.glob("*.parquet")), columns=["id", "input_ids"])
    kw = dict(shuffle="page", buffer_size=500, seed=3, output="python")
    got = [r["id"] for r in YoumuDataset(remote, **kw)]
    want = [r["id"] for r in YoumuDataset(local, **kw)]
    assert got == want and sorted(got) == list(range(700 * len(CORPUS)))


def test_dataloader_fork_workers_over_s3_deliver_every_row_once(s3: S3, corpus: Path) -> None:
    import multiprocessing as mp

    import torch

    from youmu.torch import YoumuDataset

    idx = youmu.PageIndex(s3.url("corpus/"), columns=["id"], storage_options=s3.options())
    idx.read_page(0)  # the parent's I/O runtime and connections exist before the fork
    ds = YoumuDataset(idx, shuffle="page", buffer_size=400, seed=1, output="python")
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context=mp.get_context("fork"), timeout=60
    )
    got = [r["id"] for r in loader]
    assert sorted(got) == list(range(700 * len(CORPUS)))


def test_a_fork_while_a_request_is_in_flight_leaves_both_processes_reading(s3: S3, corpus: Path) -> None:
    import multiprocessing as mp
    import time

    name = "pi=1-v1.0-dict=0-zstd.parquet"
    idx = youmu.PageIndex(s3.url(f"corpus/{name}"), columns=["id"], storage_options=s3.options())
    want = rows_of(youmu.PageIndex(corpus / name, columns=["id"]).read_pages(range(len(idx))))
    idx.read_page(0)  # the pool holds an idle connection too
    s3.proxy.reset()
    s3.proxy.faults.append(Fault("stall", nth=1, seconds=5.0))
    pending = idx.prefetch(np.arange(len(idx)))  # its first GET hangs in the proxy
    deadline = time.monotonic() + 30
    while not s3.proxy.gets() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s3.proxy.gets() and not pending.done(), "the parent's request is in flight"

    def child() -> None:
        assert rows_of(idx.read_pages(range(len(idx)))).equals(want)
        youmu.set_io_options(max_inflight=4)  # as a worker_init_fn may
        assert rows_of(idx.read_pages(range(len(idx)))).equals(want)

    # forked while the parent's runtime threads are mid-request and its pool threads wait
    worker = mp.get_context("fork").Process(target=child)
    worker.start()
    worker.join(60)
    if worker.is_alive():
        worker.kill()
        worker.join()
        pytest.fail("the forked child hung reading")
    assert worker.exitcode == 0, "the forked child failed or read other rows (its traceback is above)"
    assert rows_of(pending.result()).equals(want), "the parent's read in flight at the fork completes"
    assert s3.proxy.faults[0].fired == 1


def test_cli_inspects_and_indexes_objects(s3: S3, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from youmu.cli import main

    opts = [f"-s{k}={v}" for k, v in s3.options().items()]
    assert main(["index", s3.url("corpus/"), "-o", str(tmp_path / "c.youmu"), "--columns", "id", *opts]) == 0
    out = capsys.readouterr().out
    assert f"indexed {len(CORPUS)} files" in out and "GETs/object" in out
    loaded = youmu.PageIndex.load(tmp_path / "c.youmu", storage_options=s3.options())
    assert loaded.num_rows == 700 * len(CORPUS)
    name = "pi=0-v1.0-dict=1-zstd.parquet"
    assert main(["inspect", s3.url(f"corpus/{name}"), *opts]) == 0
    report = capsys.readouterr().out
    assert s3.url(f"corpus/{name}") in report and "input_ids: codec ZSTD" in report and "header-scanned" in report
    assert "offset index no" in report and "etag" in report


def test_inspect_reads_each_object_once_for_every_column(
    s3: S3, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from youmu.cli import main

    opts = [f"-s{k}={v}" for k, v in s3.options().items()]
    youmu.set_io_options(tail_bytes=4096)  # the footer and OffsetIndex, not the whole object
    s3.proxy.reset()
    assert main(["inspect", s3.url("corpus/"), *opts]) == 0  # a prefix: every object under it
    report = capsys.readouterr().out
    for name in CORPUS:
        assert s3.url(f"corpus/{name}.parquet") in report
    assert report.count("  label: codec ") == len(CORPUS) and "GETs " in report
    # a tail, maybe the rest of the footer, then one round for the chunks header scans
    # walk: never a request per column (an index per column would be 4 per object)
    assert len(s3.proxy.lists()) == 1 and len(s3.proxy.gets()) <= 3 * len(CORPUS), len(s3.proxy.gets())
    assert main(["inspect", s3.url("corpus/missing.parquet"), *opts]) == 1
    assert "corpus/missing.parquet" in capsys.readouterr().out


# --- hostile inputs over object storage: the same checks as local files ---------------


def test_a_flipped_bit_in_a_checksummed_page_is_refused_over_s3(s3: S3, tmp_path: Path) -> None:
    good = tmp_path / "crc.parquet"
    t = pa.table({"input_ids": pa.array([np.arange(k, dtype=np.int32) for k in range(1, 200)], pa.list_(pa.int32()))})
    # written here: page checksums (a writer option) are what is tested
    pq.write_table(t, good, compression="none", use_dictionary=False, write_page_index=True,
                   write_page_checksum=True, data_page_size=1 << 20)
    data = bytearray(good.read_bytes())
    data[pq.ParquetFile(good).metadata.row_group(0).column(0).data_page_offset + 4000] ^= 0x10
    s3.put("hostile/crc.parquet", bytes(data))
    idx = youmu.PageIndex(s3.url("hostile/crc.parquet"), storage_options=s3.options())
    try:
        for fast in (True, False):
            youmu.set_fast_decode(fast)
            with pytest.raises(youmu.CorruptFileError, match="(?i)checksum|crc") as e:
                idx.read_pages(range(len(idx)))
            assert s3.url("hostile/crc.parquet") in str(e.value)
    finally:
        youmu.set_fast_decode(True)


def test_ambiguous_columns_and_malformed_arrow_schemas_over_s3(s3: S3, tmp_path: Path) -> None:
    dup = tmp_path / "dup.parquet"
    write_table(dup, pa.Table.from_arrays([pa.array([1, 2]), pa.array(["x", "y"])], names=["a", "a"]))
    s3.put_file("hostile/dup.parquet", dup)
    with pytest.raises(youmu.AmbiguousColumnError, match="2 top-level columns"):
        youmu.PageIndex(s3.url("hostile/dup.parquet"), columns=["a"], storage_options=s3.options())
    # a mutation of the embedded Arrow schema that arrow-ipc cannot decode (found locally)
    good = tmp_path / "good.parquet"
    write_ids(good, 3, start=1, column="a")
    data = good.read_bytes()
    pos = data.find(pq.read_metadata(good).metadata[b"ARROW:schema"])
    bad = tmp_path / "bad.parquet"
    for i, c in itertools.product(range(16, 48), b"AEQgw/+9"):
        d = bytearray(data)
        d[pos + i] = c
        bad.write_bytes(d)
        try:
            youmu.PageIndex(bad)
        except youmu.CorruptFileError as e:
            if "ARROW:schema" in str(e):
                break
    else:
        pytest.fail("no malformed schema found")
    s3.put_file("hostile/bad.parquet", bad)
    url = s3.url("hostile/bad.parquet")
    with pytest.raises(youmu.CorruptFileError, match="ARROW:schema") as e:
        youmu.PageIndex(url, storage_options=s3.options())
    assert url in str(e.value)
    import io

    from youmu.cli import inspect_file

    out = io.StringIO()
    assert inspect_file(url, out=out, storage_options=s3.options()) == 1
    assert url in out.getvalue() and "ARROW:schema" in out.getvalue()


def test_remote_reads_that_cannot_fit_are_refused_before_any_get(s3: S3, tmp_path: Path) -> None:
    big = tmp_path / "big.parquet"
    write_columns(big, {"s": ["x" * (1 << 20)]})  # one page of 1 MiB
    s3.put_file("hostile/big.parquet", big)
    idx = youmu.PageIndex(s3.url("hostile/big.parquet"), storage_options=s3.options())
    s3.proxy.reset()
    many = np.zeros(10**6, np.int64)  # a terabyte of pages
    for call in (lambda: idx.read_pages(many), lambda: idx.prefetch(many), lambda: idx.read_window(many),
                 lambda: idx.read_rows(np.zeros(10**7, np.int64))):
        with pytest.raises(youmu.RequestTooLargeError, match="of memory is available"):
            call()
    assert s3.proxy.gets() == []


def test_int96_units_and_the_checksummed_index_format_over_s3(s3: S3, tmp_path: Path) -> None:
    import datetime as dt

    path = tmp_path / "far.parquet"
    ts = pa.array([dt.datetime(2000, 1, 1), dt.datetime(2300, 1, 1)], pa.timestamp("us"))
    # written here: INT96 without an Arrow schema (writer options) is what is tested
    pq.write_table(pa.table({"ts": ts}), path, use_deprecated_int96_timestamps=True, store_schema=False)
    s3.put_file("int96/far.parquet", path)
    url = s3.url("int96/far.parquet")
    with pytest.raises(youmu.ValueOverflowError):
        youmu.PageIndex(url, storage_options=s3.options()).read_page(0)  # nanoseconds wrap in 2262
    idx = youmu.PageIndex(url, coerce_int96_timestamp_unit="us", storage_options=s3.options())
    want = pq.read_table(path, coerce_int96_timestamp_unit="us")
    assert pa.Table.from_batches(idx.read_pages(range(len(idx)))).equals(want)
    # format 3: the unit, the object's ETag, a checksum trailer; kept in the store itself
    blob = idx.to_bytes()
    assert blob[8:12] == (3).to_bytes(4, "little") and blob.endswith(b"YOUMUCRC")
    idx.save(s3.url("indexes/far.youmu"))
    loaded = youmu.PageIndex.load(s3.url("indexes/far.youmu"), storage_options=s3.options())
    assert loaded.is_remote and loaded.coerce_int96_timestamp_unit == "us"
    assert pa.Table.from_batches(loaded.read_pages(range(len(loaded)))).equals(want)
    for version in (1, 2):  # both earlier layouts: rebuild, never a misread
        old = bytearray(blob)
        old[8:12] = version.to_bytes(4, "little")
        with pytest.raises(youmu.StaleIndexError, match=f"format {version}.*rebuild it"):
            youmu.PageIndex.from_bytes(bytes(old), storage_options=s3.options())
    damaged = bytearray(blob)
    damaged[len(blob) // 2] ^= 1
    with pytest.raises(youmu.CorruptFileError, match="youmu index file"):
        youmu.PageIndex.from_bytes(bytes(damaged), storage_options=s3.options())


def test_a_progress_callback_that_raises_stops_a_remote_build(s3: S3, corpus: Path) -> None:
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        raise ValueError("stop")

    with pytest.raises(ValueError, match="stop"):
        youmu.PageIndex(s3.url("corpus/"), storage_options=s3.options(), progress=progress)
    assert calls == [1]
