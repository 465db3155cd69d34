"""Local files at any count and the discovery rules: a bounded cache of open handles
(5,000 files under ``ulimit -n 256``), FIFOs skipped instead of hanging, extensions in
any case, hidden files skipped in globs, files rewritten after indexing reported as
stale."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from parquet_fixtures import write_ids

import youmu

pytestmark = pytest.mark.timeout(300)


def test_five_thousand_files_index_and_read_under_ulimit_256(tmp_path: Path) -> None:
    data = tmp_path / "many"
    data.mkdir()
    for i in range(5000):
        write_ids(data / f"part-{i:05d}.parquet", 3, start=3 * i, label_column="s")
    script = textwrap.dedent(
        f"""
        import resource, numpy as np, youmu
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        idx = youmu.PageIndex({str(data)!r})
        assert idx.num_files == 5000 and idx.num_rows == 15000
        ids = np.random.default_rng(0).permutation(len(idx))
        got = []
        for k in range(0, len(ids), 500):
            got += [v for b in idx.read_pages(ids[k:k + 500]) for v in b.column("id").to_pylist()]
        assert sorted(got) == list(range(15000))
        idx.save({str(tmp_path / "many.youmu")!r})
        again = youmu.PageIndex.load({str(tmp_path / "many.youmu")!r})
        assert again.read_rows([14999, 0]).column("id").to_pylist() == [14999, 0]
        s = youmu.io_stats()
        print(s["open_files"], youmu.io_options()["max_open_files"], s["file_opens"])
        """
    )
    env = dict(os.environ, PYTHONPATH=str(Path(youmu.__file__).parent.parent))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    open_now, limit, opens = map(int, out.stdout.split())
    assert limit == 64, "a quarter of the soft limit by default"
    assert open_now <= limit and opens > 5000  # handles were closed and reopened


def test_the_open_file_limit_is_a_setting(tmp_path: Path) -> None:
    for i in range(30):
        write_ids(tmp_path / f"{i:02d}.parquet", 5, start=5 * i, label_column="s")
    before = youmu.io_options()
    try:
        youmu.set_io_options(max_open_files=4)
        idx = youmu.PageIndex(tmp_path)
        assert sorted(v for b in idx.read_pages(range(len(idx))) for v in b.column("id").to_pylist()) == list(range(150))
        assert youmu.io_stats()["open_files"] <= 4
        with pytest.raises(youmu.InvalidArgumentError):
            youmu.set_io_options(max_open_files=0)
    finally:
        youmu.set_io_options(**before)


def test_a_fifo_named_like_parquet_is_skipped_and_reported_not_waited_on(tmp_path: Path) -> None:
    write_ids(tmp_path / "a.parquet", 10, label_column="s")
    os.mkfifo(tmp_path / "b.parquet")
    with pytest.warns(UserWarning, match="b.parquet"):
        idx = youmu.PageIndex(tmp_path)
    assert idx.num_files == 1
    assert [(Path(p).name, "FIFO" in why) for p, why in idx.skipped] == [("b.parquet", True)]
    with pytest.raises(youmu.InvalidArgumentError, match="not a regular file"):
        youmu.PageIndex(tmp_path / "b.parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert youmu.PageIndex(tmp_path / "a.parquet").skipped == []


def test_extensions_are_case_insensitive_and_hidden_files_skipped_in_globs(tmp_path: Path) -> None:
    for name in ["a.parquet", "B.PARQUET", "c.parq", "d.Pq", ".a.parquet.crc", "_SUCCESS", "_meta.parquet"]:
        if name.lower().endswith(("parquet", "parq", "pq")):
            write_ids(tmp_path / name, 2, label_column="s")
        else:
            (tmp_path / name).write_bytes(b"not parquet")
    names = lambda idx: [Path(f).name for f in idx.files]  # noqa: E731
    assert names(youmu.PageIndex(tmp_path)) == ["B.PARQUET", "a.parquet", "c.parq", "d.Pq"]
    assert names(youmu.PageIndex(str(tmp_path / "*"))) == ["B.PARQUET", "a.parquet", "c.parq", "d.Pq"]
    assert names(youmu.PageIndex(str(tmp_path / "*.parquet"))) == ["a.parquet"]
    assert names(youmu.PageIndex(str(tmp_path / "_*.parquet"))) == ["_meta.parquet"]
    assert names(youmu.PageIndex(tmp_path / "_meta.parquet")) == ["_meta.parquet"], "named explicitly"
    assert names(youmu.PageIndex(f"file://{tmp_path}/a.parquet")) == ["a.parquet"]


@pytest.mark.parametrize("evicted", [False, True])
def test_a_file_rewritten_after_indexing_is_stale_not_corrupt(tmp_path: Path, evicted: bool) -> None:
    path = tmp_path / "a.parquet"
    other = tmp_path / "z.parquet"
    write_ids(path, 3000, label_column="s", data_page_size=1024, write_batch_size=100)
    write_ids(other, 10, label_column="s")
    idx = youmu.PageIndex([path, other])
    assert idx.read_page(0).num_rows > 0  # the handle is open and cached
    write_ids(tmp_path / "new.parquet", 3000, start=10, label_column="s", data_page_size=1024, compression="gzip")
    if evicted:
        os.replace(tmp_path / "new.parquet", path)
        before = youmu.io_options()
        youmu.set_io_options(max_open_files=1)  # evicts every handle but one
        try:
            idx.read_page(len(idx) - 1)  # the other file takes the one slot
            with pytest.raises(youmu.StaleIndexError, match="a.parquet changed since it was indexed"):
                idx.read_page(1)
        finally:
            youmu.set_io_options(**before)
    else:
        # rewritten in place under the open handle: garbage to the decoder, then recheck
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write((tmp_path / "new.parquet").read_bytes())
        with pytest.raises(youmu.StaleIndexError, match="a.parquet changed since it was indexed"):
            idx.read_pages(range(len(idx) - 1))
