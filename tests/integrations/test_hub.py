"""Datasets on the Hugging Face Hub (``hf://datasets/...``) against a local Hub
(``tests/support/hubserver.py``: the Hub's API, resolve redirects to a CDN on another port,
auth, pagination, rate limits), whose fidelity is checked in the same tests by
``huggingface_hub``'s own ``HfApi`` / ``HfFileSystem`` pointed at it: youmu lists what
they list and reads the bytes they read; revisions are pinned to a commit; 401, 403,
404 and 429 arrive as youmu's typed errors naming the URL; the token never appears in
a message, a repr, a saved index or a pickle."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hubserver import HubServer  # noqa: E402
from parquet_fixtures import parquet_bytes as to_parquet

import youmu

hf = pytest.importorskip("huggingface_hub")
from huggingface_hub import constants as hf_constants  # noqa: E402
from huggingface_hub import errors as hf_errors  # noqa: E402

pytestmark = pytest.mark.timeout(120)

TOKEN = "hf_LocalHubReaderToken0123456789"
OTHER_TOKEN = "hf_SomeoneElsesToken9876543210"


def parquet_bytes(table: pa.Table, row_group_size: int = 50) -> bytes:
    return to_parquet(table, row_group_size=row_group_size, data_page_size=1024, write_page_index=True)


def shard(first: int, n: int = 120) -> pa.Table:
    ids = np.arange(first, first + n, dtype=np.int64)
    return pa.table({"id": ids, "input_ids": [list(range(i % 7 + 1)) for i in ids]})


FILES = {
    "data/train-00000.parquet": parquet_bytes(shard(0)),
    "data/train-00001.parquet": parquet_bytes(shard(1000)),
    "data/sub/train-00002.parquet": parquet_bytes(shard(2000)),
    "data/_tmp/partial.parquet": b"not parquet at all",
    "data/.hidden.parquet": b"nor this",
    "README.md": b"# a dataset card\n",
}


@pytest.fixture(scope="module")
def hub():
    server = HubServer(page_size=2).start()
    server.commit("org/corpus", FILES)
    server.create("org/private", private=True, readers={TOKEN})
    server.commit("org/private", {"train.parquet": parquet_bytes(shard(5000, 40))})
    server.create("org/gated", gated=True, readers={TOKEN})
    server.commit("org/gated", {"train.parquet": parquet_bytes(shard(6000, 40))})
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def env(hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Point youmu and huggingface_hub at the local Hub, with no token unless a test
    sets one (not even a login file of the machine's); short retries."""
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", raising=False)
    login_file(monkeypatch, tmp_path / "no-token")
    old = youmu.io_options()
    youmu.set_io_options(retries=4, retry_timeout=10.0)
    hub.requests.clear()
    yield
    youmu.set_io_options(retries=old["retries"], retry_timeout=old["retry_timeout"])


def login_file(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Make ``path`` the file ``hf auth login`` writes, for huggingface_hub (which read
    ``HF_TOKEN_PATH`` at its import) and for the native core (which reads it per store)."""
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(path))
    monkeypatch.setenv("HF_TOKEN_PATH", str(path))


def rows_of(index: youmu.PageIndex) -> pa.Table:
    got = index.read_rows(np.arange(index.num_rows))
    return pa.Table.from_batches([got]) if isinstance(got, pa.RecordBatch) else got


def local_rows(names: list[str]) -> pa.Table:
    return pa.concat_tables([pq.read_table(io.BytesIO(FILES[n])) for n in names])


def repo_paths(urls: list[str], commit: str) -> list[str]:
    marker = f"/resolve/{commit}/"
    assert all(marker in u for u in urls), urls
    return [u.split(marker, 1)[1] for u in urls]


# -- listing and bytes, against huggingface_hub's own view of the server ---------------
def test_a_directory_lists_what_huggingface_hub_lists_by_youmus_rules(hub: HubServer) -> None:
    commit = hub.branches("org/corpus")["main"]
    idx = youmu.PageIndex("hf://datasets/org/corpus/data")
    fs = hf.HfFileSystem(endpoint=hub.endpoint, token=False)
    theirs = sorted(p.removeprefix("datasets/org/corpus/") for p in fs.find("datasets/org/corpus/data"))
    data = [p for p in theirs if p.endswith(".parquet") and not any(c[0] in "._" for c in p.split("/"))]
    assert repo_paths(idx.files, commit) == data == [
        "data/sub/train-00002.parquet", "data/train-00000.parquet", "data/train-00001.parquet"]
    # the tree came in pages of two, followed through the Link header
    assert sum("cursor=" in s.path for s in hub.requests if "/tree/" in s.path) >= 2
    assert rows_of(idx).to_pydict() == local_rows(data).to_pydict()


def test_globs_and_single_files_and_the_whole_repository(hub: HubServer) -> None:
    commit = hub.branches("org/corpus")["main"]
    glob = youmu.PageIndex("hf://datasets/org/corpus/data/train-*.parquet")
    assert repo_paths(glob.files, commit) == ["data/train-00000.parquet", "data/train-00001.parquet"]
    deep = youmu.PageIndex("hf://datasets/org/corpus/**/*.parquet")
    assert repo_paths(deep.files, commit) == [
        "data/sub/train-00002.parquet", "data/train-00000.parquet", "data/train-00001.parquet"]
    one = youmu.PageIndex(f"hf://datasets/org/corpus@{commit}/data/train-00001.parquet")
    assert repo_paths(one.files, commit) == ["data/train-00001.parquet"]
    assert rows_of(one).to_pydict() == local_rows(["data/train-00001.parquet"]).to_pydict()
    whole = youmu.PageIndex("hf://datasets/org/corpus")
    assert len(whole.files) == 3


def test_pages_are_ranged_gets_through_the_cdn_with_the_bytes_huggingface_hub_reads(hub: HubServer) -> None:
    idx = youmu.PageIndex("hf://datasets/org/corpus/data/train-00000.parquet")
    hub.requests.clear()
    idx.read_pages(list(range(len(idx))))
    cdn = [s for s in hub.requests if s.server == "cdn" and s.method == "GET"]
    assert cdn and all(s.status == 206 and s.headers.get("range", "").startswith("bytes=") for s in cdn)
    assert all("if-match" in s.headers for s in cdn), "reads are conditional on the indexed ETag"
    fs = hf.HfFileSystem(endpoint=hub.endpoint, token=False)
    with fs.open("datasets/org/corpus/data/train-00000.parquet", "rb") as f:
        f.seek(100)
        theirs = f.read(300)
    assert theirs == FILES["data/train-00000.parquet"][100:400]
    assert rows_of(idx).to_pydict() == local_rows(["data/train-00000.parquet"]).to_pydict()


def test_row_datasets_streams_and_the_cli_take_hf_urls(hub: HubServer, tmp_path: Path) -> None:
    from youmu.torch import YoumuDataset

    url = "hf://datasets/org/corpus/data/train-*.parquet"
    ds = youmu.RowDataset(url, columns=["id"])
    assert len(ds) == 240 and ds[130]["id"] == 1010
    stream = YoumuDataset(url, columns=["id"], shuffle="none", output="python")
    assert [r["id"] for r in stream] == list(range(120)) + list(range(1000, 1120))
    out = subprocess.run([sys.executable, "-m", "youmu", "inspect", url], capture_output=True, text=True,
                         env={**os.environ}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "train-00001.parquet" in out.stdout


# -- the CDN's signed URLs, remembered per file -------------------------------------------
def resolves_and_cdn_gets(hub: HubServer) -> tuple[list, list]:
    resolves = [s for s in hub.requests if s.server == "hub" and "/resolve/" in s.path]
    return resolves, [s for s in hub.requests if s.server == "cdn" and s.method == "GET"]


def test_later_reads_of_a_file_go_straight_to_its_signed_url(hub: HubServer) -> None:
    idx = youmu.PageIndex("hf://datasets/org/corpus/data/train-00000.parquet")
    resolves, cdn = resolves_and_cdn_gets(hub)
    assert len(resolves) == 1 and resolves[0].status == 302, "indexing the file asked the Hub once"
    hub.requests.clear()
    idx.read_pages(list(range(len(idx))))
    assert rows_of(idx).to_pydict() == local_rows(["data/train-00000.parquet"]).to_pydict()
    resolves, cdn = resolves_and_cdn_gets(hub)
    assert resolves == [], "pages were read from the signed URL the Hub gave, without a 302 each"
    assert len(cdn) >= 2 and all(s.status == 206 for s in cdn)
    assert all("if-match" in s.headers for s in cdn), "still conditional on the indexed ETag"


@pytest.mark.parametrize("num_workers, loaded", [(0, False), (2, False), (2, True)])
def test_dataloader_workers_ask_the_hub_once_per_file_not_once_per_page(hub: HubServer, tmp_path: Path,
                                                                        num_workers: int, loaded: bool) -> None:
    """A forked DataLoader worker reads its pages from the signed URLs the main process
    was given when it indexed (or loaded and checked) the files: no Hub request (the
    rate-limited API) per page, in the main process or a worker."""
    from torch.utils.data import DataLoader

    from youmu.torch import YoumuDataset

    index = youmu.PageIndex("hf://datasets/org/corpus/data", columns=["id"])
    if loaded:
        index.save(tmp_path / "corpus.youmu")
        index = youmu.PageIndex.load(tmp_path / "corpus.youmu")
    ds = YoumuDataset(index, shuffle="page", buffer_size=1, seed=3, output="python")
    hub.requests.clear()
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers,
                        multiprocessing_context="fork" if num_workers else None)
    files = ["data/sub/train-00002.parquet", "data/train-00000.parquet", "data/train-00001.parquet"]
    assert sorted(r["id"] for r in loader) == sorted(local_rows(files).column("id").to_pylist())
    resolves, cdn = resolves_and_cdn_gets(hub)
    processes = max(num_workers, 1)
    assert len(cdn) >= len(files) and all(s.status == 206 for s in cdn)
    assert resolves == [], f"{len(resolves)} Hub resolves for {len(cdn)} page reads in {processes} process(es)"


def test_a_signed_url_about_to_expire_is_asked_for_again(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "signed_ttl", 5.0)  # says when it expires: sooner than youmu's margin
    idx = youmu.PageIndex("hf://datasets/org/corpus/data/train-00001.parquet")
    hub.requests.clear()
    assert rows_of(idx).to_pydict() == local_rows(["data/train-00001.parquet"]).to_pydict()
    resolves, cdn = resolves_and_cdn_gets(hub)
    assert cdn and len(resolves) == len(cdn), "each read asked for a fresh URL"
    assert all(s.status == 206 for s in cdn), "no expired URL was sent"


def test_an_expired_signed_url_is_resolved_again_and_the_read_goes_on(hub: HubServer,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(hub, "opaque_signatures", True)  # the client cannot tell when it expires
    monkeypatch.setattr(hub, "signed_ttl", 1.0)
    idx = youmu.PageIndex("hf://datasets/org/corpus/data/sub/train-00002.parquet")
    time.sleep(2.2)
    monkeypatch.setattr(hub, "signed_ttl", 3600.0)
    hub.requests.clear()
    assert rows_of(idx).to_pydict() == local_rows(["data/sub/train-00002.parquet"]).to_pydict()
    resolves, cdn = resolves_and_cdn_gets(hub)
    expired = [s for s in cdn if s.status == 403]
    assert expired, "the remembered URL was tried first"
    assert resolves and all(r.status == 302 for r in resolves)
    assert resolves[0].at >= expired[0].at and cdn[-1].status == 206
    later = [s for s in cdn if s.at > resolves[-1].at]
    assert later and all(s.status == 206 for s in later)


def test_a_cdn_refusing_once_still_yields_the_right_bytes_and_never_sees_the_token(
        hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    idx = youmu.PageIndex("hf://datasets/org/private")
    hub.requests.clear()
    hub.refuse(1, 403, when=lambda s: s.server == "cdn" and s.method == "GET")
    assert rows_of(idx).column("id").to_pylist() == list(range(5000, 5040))
    resolves, cdn = resolves_and_cdn_gets(hub)
    assert [s.status for s in cdn].count(403) == 1 and cdn[-1].status == 206
    assert len(resolves) == 1 and resolves[0].at > cdn[0].at, "asked the Hub again after the refusal"
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in resolves)
    assert not any("authorization" in s.headers for s in hub.requests if s.server == "cdn")


# -- revisions ------------------------------------------------------------------------
def test_a_branch_that_moves_changes_nothing_the_index_pinned(hub: HubServer, tmp_path: Path) -> None:
    first = hub.commit("org/moving", {"d/a.parquet": parquet_bytes(shard(0, 30))})
    idx = youmu.PageIndex("hf://datasets/org/moving/d")
    assert repo_paths(idx.files, first) == ["d/a.parquet"]
    idx.save(tmp_path / "pinned.youmu")
    second = hub.commit("org/moving", {"d/a.parquet": parquet_bytes(shard(100, 30)),
                                       "d/b.parquet": parquet_bytes(shard(200, 30))})
    assert second != first and hub.branches("org/moving")["main"] == second
    assert rows_of(idx).column("id").to_pylist() == list(range(30))
    again = youmu.PageIndex.load(tmp_path / "pinned.youmu")
    assert rows_of(again).column("id").to_pylist() == list(range(30))
    fresh = youmu.PageIndex("hf://datasets/org/moving/d")
    assert repo_paths(fresh.files, second) == ["d/a.parquet", "d/b.parquet"]
    assert rows_of(fresh).column("id").to_pylist()[:3] == [100, 101, 102]
    # the pinned commit garbage-collected by a force-push: a clear error, never other rows
    hub.forget("org/moving", first)
    with pytest.raises(youmu.StaleIndexError, match="org/moving"):
        rows_of(youmu.PageIndex.load(tmp_path / "pinned.youmu"))


def test_a_saved_index_is_loaded_from_the_hub_and_never_written_there(hub: HubServer, tmp_path: Path) -> None:
    idx = youmu.PageIndex("hf://datasets/org/corpus/data/train-00000.parquet")
    idx.save(tmp_path / "corpus.youmu")
    hub.commit("org/indexes", {"corpus.youmu": (tmp_path / "corpus.youmu").read_bytes()})
    loaded = youmu.PageIndex.load("hf://datasets/org/indexes/corpus.youmu")
    assert loaded.files == idx.files
    assert rows_of(loaded).to_pydict() == rows_of(idx).to_pydict()
    # the Hub takes commits, not PUTs: a clear refusal, nothing sent
    with pytest.raises(youmu.InvalidArgumentError, match="does not write to the Hugging Face Hub"):
        idx.save("hf://datasets/org/indexes/other.youmu")
    with pytest.raises(youmu.InvalidArgumentError, match="names 3 files of the Hub, not one saved index"):
        youmu.PageIndex.load("hf://datasets/org/corpus/data")
    # what the Hub answered keeps its type, as it does for an index built over it
    with pytest.raises(youmu.BucketNotFoundError, match="org/nothing"):
        youmu.PageIndex.load("hf://datasets/org/nothing/i.youmu")


def test_a_state_follows_the_files_content_not_the_commit_or_where_they_are_served(hub: HubServer,
                                                                                    tmp_path: Path) -> None:
    from youmu.torch import YoumuDataset

    def fixed_size(ids: np.ndarray) -> bytes:  # plain, uncompressed, no statistics: the size ignores values
        return to_parquet(pa.table({"id": ids}), use_dictionary=False, compression="none", write_statistics=False)

    def stream(where: str | Path) -> YoumuDataset:
        return YoumuDataset(str(where), columns=["id"], shuffle="none")

    def state_after_one(where: str | Path) -> dict:
        ds = stream(where)
        next(iter(ds))
        return ds.state_dict()

    first_bytes = fixed_size(np.arange(30, dtype=np.int64))
    first = hub.commit("org/states", {"data/a.parquet": first_bytes})
    state = state_after_one("hf://datasets/org/states/data")
    # the same file name, size and pages at another commit, other bytes: other data, refused
    second = hub.commit("org/states", {"data/a.parquet": fixed_size(np.arange(100, 130, dtype=np.int64))})
    assert len(hub.repos["org/states"].commits[second]["data/a.parquet"]) == len(first_bytes) and second != first
    with pytest.raises(youmu.StateError, match="other data"):
        stream("hf://datasets/org/states/data").load_state_dict(state)
    again = stream(f"hf://datasets/org/states@{first}/data")
    again.load_state_dict(state)
    assert [r["id"] for r in again][:2] == [1, 2]
    # a later commit that leaves the file's bytes as they were: the same data
    third = hub.commit("org/states", {"data/a.parquet": first_bytes, "README.md": b"# card\n"})
    same = stream(f"hf://datasets/org/states@{third}/data")
    same.load_state_dict(state)
    assert [r["id"] for r in same][:2] == [1, 2]
    # the same files on a local disk, both ways: the order is the same, and so is the data
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.parquet").write_bytes(first_bytes)
    local = stream(tmp_path / "data")
    local.load_state_dict(state)
    assert [r["id"] for r in local][:2] == [1, 2]
    from_hub = stream(f"hf://datasets/org/states@{first}/data")
    from_hub.load_state_dict(state_after_one(tmp_path / "data"))
    assert [r["id"] for r in from_hub][:2] == [1, 2]


# -- errors -----------------------------------------------------------------------------
def test_401_403_and_404_are_typed_and_named(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(youmu.StorageAuthError, match=r"hf://datasets/org/private.*401"):
        youmu.PageIndex("hf://datasets/org/private")
    with pytest.raises(youmu.StorageAuthError, match=r"hf://datasets/org/gated.*gated"):
        youmu.PageIndex("hf://datasets/org/gated")
    monkeypatch.setenv("HF_TOKEN", OTHER_TOKEN)
    with pytest.raises(youmu.StorageAuthError, match=r"hf://datasets/org/private.*403"):
        youmu.PageIndex("hf://datasets/org/private")
    with pytest.raises(youmu.BucketNotFoundError, match=r"hf://datasets/org/nothing.*no such dataset"):
        youmu.PageIndex("hf://datasets/org/nothing/data")
    with pytest.raises(youmu.ObjectNotFoundError, match=r"hf://datasets/org/corpus@v9.*revision"):
        youmu.PageIndex("hf://datasets/org/corpus@v9/data")
    with pytest.raises(youmu.ObjectNotFoundError, match="missing.parquet"):
        youmu.PageIndex("hf://datasets/org/corpus/data/missing.parquet")
    with pytest.raises(youmu.InvalidArgumentError, match="no Parquet files"):
        youmu.PageIndex("hf://datasets/org/corpus/data/*.csv")
    with pytest.raises(youmu.InvalidArgumentError, match="only dataset repositories"):
        youmu.PageIndex("hf://models/org/corpus")
    # the huggingface_hub errors behind them, from the same server
    with pytest.raises(hf_errors.RepositoryNotFoundError):
        hf.HfApi(endpoint=hub.endpoint, token=False).dataset_info("org/private")
    with pytest.raises(hf_errors.RevisionNotFoundError):
        hf.HfApi(endpoint=hub.endpoint, token=False).dataset_info("org/corpus", revision="v9")


def test_a_private_repository_is_read_with_the_token_which_never_reaches_the_cdn(hub: HubServer,
                                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    idx = youmu.PageIndex("hf://datasets/org/private")
    assert rows_of(idx).column("id").to_pylist() == list(range(5000, 5040))
    resolves = [s for s in hub.requests if s.server == "hub" and "/resolve/" in s.path]
    assert resolves and all(s.headers.get("authorization") == f"Bearer {TOKEN}" for s in resolves)
    cdn = [s for s in hub.requests if s.server == "cdn"]
    assert cdn and not any("authorization" in s.headers for s in cdn), "the token must not follow the redirect"
    assert hf.HfApi(endpoint=hub.endpoint, token=TOKEN).dataset_info("org/private").sha in idx.files[0]
    # a token file (hf auth login) works the same, read where the index is opened
    monkeypatch.delenv("HF_TOKEN")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    login_file(monkeypatch, token_file)
    assert len(youmu.PageIndex("hf://datasets/org/gated")) > 0


def test_the_token_is_never_echoed(hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    idx = youmu.PageIndex("hf://datasets/org/private")
    idx.save(tmp_path / "private.youmu")
    texts = [repr(idx), str(idx.files), (tmp_path / "private.youmu").read_bytes().decode("latin-1"),
             pickle.dumps(idx).decode("latin-1"), pickle.dumps(youmu.RowDataset(idx)).decode("latin-1")]
    assert not any(TOKEN in t for t in texts)
    # the pickle says nothing of the token; the worker finds its own
    assert rows_of(pickle.loads(pickle.dumps(idx))).num_rows == 40
    loaded = youmu.PageIndex.load(tmp_path / "private.youmu")
    assert rows_of(loaded).num_rows == 40
    # a token passed explicitly, or inside a URL, is blanked in messages
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(youmu.StorageAuthError) as e:
        youmu.PageIndex("hf://datasets/org/private", storage_options={"bearer_token": OTHER_TOKEN})
    assert OTHER_TOKEN not in str(e.value)
    url = idx.files[0].replace("http://", f"http://user:{OTHER_TOKEN}@")
    with pytest.raises(youmu.YoumuError) as e2:
        youmu.PageIndex(url + ".nothing")
    assert OTHER_TOKEN not in str(e2.value)
    with pytest.raises(youmu.StorageError) as e3:
        youmu.PageIndex.load(tmp_path / "private.youmu", storage_options={"bearer_token": OTHER_TOKEN})
    assert OTHER_TOKEN not in str(e3.value) and "403" in str(e3.value)


def test_a_saved_index_of_a_private_repository_loads_with_this_processs_token(
        hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    idx = youmu.PageIndex("hf://datasets/org/private")
    idx.save(tmp_path / "private.youmu")
    assert TOKEN.encode() not in (tmp_path / "private.youmu").read_bytes()
    hub.requests.clear()
    loaded = youmu.PageIndex.load(tmp_path / "private.youmu")  # no storage_options: found as listing found it
    assert rows_of(loaded).column("id").to_pylist() == list(range(5000, 5040))
    assert all(s.headers.get("authorization") == f"Bearer {TOKEN}" for s in hub.requests if s.server == "hub")
    assert TOKEN not in repr(loaded) and TOKEN.encode() not in pickle.dumps(loaded)
    # an index pickled where no token was set, unpickled where one is
    monkeypatch.delenv("HF_TOKEN")
    bare = pickle.dumps(youmu.PageIndex.from_bytes(idx.to_bytes(), verify=False))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    login_file(monkeypatch, token_file)  # hf auth login's file
    assert rows_of(pickle.loads(bare)).num_rows == 40
    assert rows_of(youmu.PageIndex.load(tmp_path / "private.youmu")).num_rows == 40
    # no token anywhere: the typed refusal, naming what to set
    login_file(monkeypatch, tmp_path / "none")
    with pytest.raises(youmu.StorageAuthError):
        youmu.PageIndex.load(tmp_path / "private.youmu")
    # a Hub at another address is never sent this one's token
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")
    with pytest.raises(youmu.StorageAuthError):
        youmu.PageIndex.load(tmp_path / "private.youmu")


def test_every_refusal_of_a_hub_file_says_how_to_give_the_hub_token(hub: HubServer, monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """A 401 or 403 names the Hub's fix (``HF_TOKEN``, ``hf auth login``) wherever it is
    answered: by the Hub's API (listing, a saved index loaded by its ``hf://`` URL) or to
    the native core's reads of a file's resolve URL (the pages of a saved index, a saved
    index loaded by its resolve URL) — never an http(s) username/password hint, never
    the token."""
    hub.create("org/secret", private=True, readers={TOKEN})
    hub.commit("org/secret", {"train.parquet": parquet_bytes(shard(8000, 30))})
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    idx = youmu.PageIndex("hf://datasets/org/secret")
    idx.save(tmp_path / "secret.youmu")
    hub.commit("org/secret", {"index/secret.youmu": (tmp_path / "secret.youmu").read_bytes()})
    index_url = youmu.PageIndex("hf://datasets/org/secret").files[0].replace("train.parquet", "index/secret.youmu")
    reads: dict[str, Any] = {
        "listing": lambda: youmu.PageIndex("hf://datasets/org/secret"),
        "a saved index by its hf:// URL": lambda: youmu.PageIndex.load("hf://datasets/org/secret/index/secret.youmu"),
        "a saved index by its resolve URL": lambda: youmu.PageIndex.load(index_url),
        "pages of a saved index": lambda: rows_of(youmu.PageIndex.load(tmp_path / "secret.youmu")),
    }
    for token in (None, OTHER_TOKEN):
        if token is None:
            monkeypatch.delenv("HF_TOKEN")
        else:
            monkeypatch.setenv("HF_TOKEN", token)
        for what, read in reads.items():
            with pytest.raises(youmu.StorageAuthError) as e:
                read()
            msg = str(e.value)
            assert "org/secret" in msg and ("401" in msg or "403" in msg), (what, msg)
            assert "HF_TOKEN" in msg and "hf auth login" in msg, (what, msg)
            assert "username" not in msg and "password" not in msg, (what, msg)
            assert TOKEN not in msg and OTHER_TOKEN not in msg, (what, msg)


# -- Hub URLs typed by hand ---------------------------------------------------------------
@pytest.fixture(scope="module")
def handtyped(hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A private repository holding a shard and a saved index of it; its URLs as a user
    copies them from the Hub's website (``resolve/main``) or pins them (``resolve/<sha>``)."""
    hub.create("org/handtyped", private=True, readers={TOKEN})
    sha = hub.commit("org/handtyped", {"train.parquet": parquet_bytes(shard(9000, 30))})
    base = f"{hub.endpoint}/datasets/org/handtyped/resolve"
    saved = tmp_path_factory.mktemp("handtyped") / "train.youmu"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_ENDPOINT", hub.endpoint)
        mp.setenv("HF_TOKEN", TOKEN)
        youmu.PageIndex(f"hf://datasets/org/handtyped@{sha}/train.parquet").save(saved)
    hub.commit("org/handtyped", {"index/train.youmu": saved.read_bytes()})
    return {"main": f"{base}/main/train.parquet", "pinned": f"{base}/{sha}/train.parquet",
            "index": f"{base}/main/index/train.youmu", "hf_index": "hf://datasets/org/handtyped/index/train.youmu"}


HANDTYPED_IDS = list(range(9000, 9030))


def test_a_hub_url_typed_by_hand_is_read_with_the_hub_token_wherever_a_path_goes(
        hub: HubServer, handtyped: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from youmu.torch import YoumuDataset

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.requests.clear()
    for url in (handtyped["main"], handtyped["pinned"]):
        assert rows_of(youmu.PageIndex(url)).column("id").to_pylist() == HANDTYPED_IDS, url
    for saved in (handtyped["index"], handtyped["hf_index"]):
        assert rows_of(youmu.PageIndex.load(saved)).column("id").to_pylist() == HANDTYPED_IDS, saved
    assert youmu.RowDataset(handtyped["main"], columns=["id"])[3]["id"] == 9003
    stream = YoumuDataset(handtyped["main"], columns=["id"], shuffle="none", output="python")
    assert [r["id"] for r in stream] == HANDTYPED_IDS
    out = subprocess.run([sys.executable, "-m", "youmu", "inspect", handtyped["main"]], capture_output=True,
                         text=True, env={**os.environ}, timeout=60)
    assert out.returncode == 0 and "train.parquet" in out.stdout, out.stderr
    assert TOKEN not in out.stdout + out.stderr
    resolves = [s for s in hub.requests if s.server == "hub" and "/resolve/" in s.path]
    assert resolves and all(s.headers.get("authorization") == f"Bearer {TOKEN}" for s in resolves)
    cdn = [s for s in hub.requests if s.server == "cdn"]
    assert cdn and not any("authorization" in s.headers for s in cdn), "the token must not follow the redirect"
    # the token file hf auth login writes works the same
    monkeypatch.delenv("HF_TOKEN")
    login_file(monkeypatch, tmp_path / "token")
    (tmp_path / "token").write_text(TOKEN + "\n")
    assert rows_of(youmu.PageIndex(handtyped["main"])).num_rows == 30


def test_without_a_token_a_hub_url_typed_by_hand_is_a_typed_refusal_naming_the_hubs_fix(
        handtyped: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    reads: dict[str, Any] = {
        "a file by its resolve URL": lambda: youmu.PageIndex(handtyped["main"]),
        "a saved index by its resolve URL": lambda: youmu.PageIndex.load(handtyped["index"]),
    }
    for token, status in ((None, "401"), (OTHER_TOKEN, "403")):
        if token is not None:
            monkeypatch.setenv("HF_TOKEN", token)
        for what, read in reads.items():
            with pytest.raises(youmu.StorageAuthError) as e:
                read()
            msg = str(e.value)
            assert "org/handtyped" in msg and status in msg, (what, msg)
            assert "HF_TOKEN" in msg and "hf auth login" in msg and "username" not in msg, (what, msg)
            assert OTHER_TOKEN not in msg, (what, msg)


def test_the_hub_token_goes_to_the_hubs_own_host_only(hub: HubServer, handtyped: dict[str, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another server holding the same repository (another port: another origin) is never
    sent the token of the Hub at ``HF_ENDPOINT``, nor is the CDN a redirect leads to."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    elsewhere = HubServer().start()
    try:
        elsewhere.create("org/handtyped", private=True, readers={TOKEN})
        sha = elsewhere.commit("org/handtyped", {"train.parquet": parquet_bytes(shard(9000, 30))})
        with pytest.raises(youmu.StorageAuthError, match="401"):
            youmu.PageIndex(f"{elsewhere.endpoint}/datasets/org/handtyped/resolve/{sha}/train.parquet")
        assert elsewhere.requests and not any("authorization" in s.headers for s in elsewhere.requests)
        # pointed at it, it is the Hub: its host gets the token, the first one's no longer does
        monkeypatch.setenv("HF_ENDPOINT", elsewhere.endpoint)
        url = f"{elsewhere.endpoint}/datasets/org/handtyped/resolve/{sha}/train.parquet"
        assert rows_of(youmu.PageIndex(url)).column("id").to_pylist() == HANDTYPED_IDS
        hub.requests.clear()
        with pytest.raises(youmu.StorageAuthError, match="401"):
            youmu.PageIndex(handtyped["pinned"])
        assert hub.requests and not any("authorization" in s.headers for s in hub.requests)
        cdn = [s for s in elsewhere.requests if s.server == "cdn"]
        assert cdn and not any("authorization" in s.headers for s in cdn), "the token must not follow the redirect"
    finally:
        elsewhere.stop()


def test_credentials_given_as_options_win_over_the_environments(
        hub: HubServer, handtyped: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    url = handtyped["pinned"]
    hub.requests.clear()
    with pytest.raises(youmu.StorageAuthError, match="403"):
        youmu.PageIndex(url, storage_options={"bearer_token": OTHER_TOKEN})
    assert {s.headers.get("authorization") for s in hub.requests} == {f"Bearer {OTHER_TOKEN}"}
    monkeypatch.setenv("HF_TOKEN", OTHER_TOKEN)
    monkeypatch.setenv("MY_HUB_TOKEN", TOKEN)
    idx = youmu.PageIndex(url, storage_options={"bearer_token_env": "MY_HUB_TOKEN"})
    assert rows_of(idx).column("id").to_pylist() == HANDTYPED_IDS
    # Basic credentials given are sent instead of the token, not refused beside it
    hub.requests.clear()
    with pytest.raises(youmu.StorageAuthError, match="401"):
        youmu.PageIndex(url, storage_options={"username": "u", "password": "p"})
    assert all(s.headers.get("authorization", "").startswith("Basic ") for s in hub.requests)
    # as huggingface_hub, no token is sent by itself where HF_HUB_DISABLE_IMPLICIT_TOKEN says so
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    with pytest.raises(youmu.StorageAuthError, match="401"):
        youmu.PageIndex(url)


def test_a_listing_never_sends_the_environments_token_where_the_options_chose_other_credentials(
        hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The listing of an ``hf://`` path follows the reads' rule: credentials given as
    options win, and the environment's token is not sent beside or instead of them."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    unreadable = tmp_path / "a-directory"
    unreadable.mkdir()
    for options in ({"username": "u", "password": "p"}, {"bearer_token_env": "NOT_SET_ANYWHERE"},
                    {"bearer_token_file": str(unreadable)}, {"bearer_token": OTHER_TOKEN}):
        monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
        hub.requests.clear()
        with pytest.raises(youmu.YoumuError):
            youmu.PageIndex("hf://datasets/org/private", storage_options=options)
        api_calls = [s for s in hub.requests if s.server == "hub" and s.path.startswith("/api/")]
        assert api_calls, options
        assert not any(TOKEN in s.headers.get("authorization", "") for s in hub.requests), options
    # with no credentials among the options, the listing and the reads use the environment's
    hub.requests.clear()
    assert len(youmu.PageIndex("hf://datasets/org/private", storage_options={"timeout": "30s"})) > 0
    assert all(s.headers.get("authorization") == f"Bearer {TOKEN}" for s in hub.requests if s.server == "hub")


def test_the_token_of_a_hub_url_is_never_saved_pickled_or_shown(
        handtyped: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from youmu.torch import YoumuDataset

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    idx = youmu.PageIndex(handtyped["main"])
    idx.save(tmp_path / "i.youmu")
    stream = YoumuDataset(idx, shuffle="none", output="python")
    next(iter(stream))
    texts = [repr(idx), str(idx.files), repr(stream), str(stream.state_dict()),
             (tmp_path / "i.youmu").read_bytes().decode("latin-1"), pickle.dumps(idx).decode("latin-1"),
             pickle.dumps(youmu.RowDataset(idx)).decode("latin-1"), pickle.dumps(stream).decode("latin-1")]
    assert not any(TOKEN in t for t in texts)
    assert not any("HF_TOKEN" in t or "bearer_token" in t for t in texts), "not even where the token was found"
    # a worker unpickling it, or a job loading it, finds its own token (here: a login file)
    blob = pickle.dumps(idx)
    monkeypatch.delenv("HF_TOKEN")
    login_file(monkeypatch, tmp_path / "token")
    (tmp_path / "token").write_text(TOKEN + "\n")
    assert rows_of(pickle.loads(blob)).column("id").to_pylist() == HANDTYPED_IDS
    assert rows_of(youmu.PageIndex.load(tmp_path / "i.youmu")).num_rows == 30


def test_hub_and_s3_files_in_one_index_each_take_their_own_options(
        hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from s3util import S3

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    s3 = S3()
    try:
        s3.put("mix/part.parquet", parquet_bytes(shard(7000, 30)))
        want = list(range(5000, 5040)) + list(range(7000, 7030))
        idx = youmu.PageIndex(["hf://datasets/org/private", s3.url("mix/part.parquet")],
                              storage_options=s3.options())
        assert rows_of(idx).column("id").to_pylist() == want
        assert not any("Bearer" in str(r.headers) for r in s3.proxy.requests), "the Hub's token stays on the Hub"
        assert all(s.headers.get("authorization") == f"Bearer {TOKEN}" for s in hub.requests if s.server == "hub")
        assert rows_of(pickle.loads(pickle.dumps(idx))).column("id").to_pylist() == want
        idx.save(tmp_path / "mixed.youmu")
        loaded = youmu.PageIndex.load(tmp_path / "mixed.youmu", storage_options=s3.options())
        assert rows_of(loaded).column("id").to_pylist() == want
        # an option that none of the stores takes is still refused, naming it
        with pytest.raises(youmu.InvalidArgumentError, match="regoin"):
            youmu.PageIndex(["hf://datasets/org/private", s3.url("mix/part.parquet")],
                            storage_options={**s3.options(), "regoin": "us-east-1"})
        with pytest.raises(youmu.InvalidArgumentError, match="bearer_token"):
            youmu.PageIndex(s3.url("mix/part.parquet"), storage_options={**s3.options(), "bearer_token": "x" * 20})
    finally:
        s3.stop()


def test_429_waits_for_retry_after(hub: HubServer) -> None:
    # listing through huggingface_hub
    hub.rate_limit(1, retry_after="1", when=lambda s: "/tree/" in s.path)
    idx = youmu.PageIndex("hf://datasets/org/corpus/data/sub")
    tree = [s for s in hub.requests if "/tree/" in s.path]
    assert tree[0].status == 429 and tree[1].status == 200 and tree[1].at - tree[0].at >= 1.0
    # reads through the native core
    hub.requests.clear()
    hub.rate_limit(2, retry_after="1", when=lambda s: s.server == "cdn" and s.method == "GET")
    assert rows_of(idx).num_rows == 120
    cdn = [s for s in hub.requests if s.server == "cdn" and s.method == "GET"]
    limited = [s for s in cdn if s.status == 429]
    assert len(limited) == 2
    for s in limited:  # the same range asked again, no sooner than Retry-After said
        again = [t for t in cdn if t.headers.get("range") == s.headers.get("range") and t.at > s.at]
        assert again and again[0].at - s.at >= 1.0 and again[-1].status == 206


def test_429_without_end_exhausts_the_retries_with_a_typed_error(hub: HubServer) -> None:
    hub.rate_limit(1000, retry_after="0", when=lambda s: "/revision/" in s.path or s.path.endswith("/corpus"))
    try:
        with pytest.raises(youmu.RetriesExhaustedError, match="429"):
            youmu.PageIndex("hf://datasets/org/corpus/data")
    finally:
        hub.rate_limits.clear()


# -- the payoff: a chat dataset from the Hub, templated in the stream ---------------------
def test_a_chat_dataset_on_the_hub_is_templated_as_the_tokenizer_would(hub: HubServer) -> None:
    pytest.importorskip("transformers")
    from textutil import chat_tokenizer, ultrachat

    from youmu.text import ChatTemplate
    from youmu.torch import YoumuDataset

    convs = ultrachat(24, seed=3)
    hub.commit("org/chat", {"data/train-0.parquet": to_parquet(pa.table({"id": list(range(24)), "messages": convs}),
                                                                row_group_size=8)})
    tok = chat_tokenizer()
    ds = YoumuDataset("hf://datasets/org/chat/data", shuffle="none", output="python",
                      transform=ChatTemplate(tok))
    got = {r["id"]: r["input_ids"] for r in ds}
    want = tok.apply_chat_template(convs, tokenize=True)
    want = want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want
    assert [list(got[i]) for i in range(24)] == [list(w) for w in want]
