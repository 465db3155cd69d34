"""Hostile object stores and hostile storage arguments: servers that ignore `If-Match`,
endpoints that accept connections and never answer, stores that go away for seconds
mid-epoch, credentials in URLs and options, URLs that cannot be listed, and malformed
or misplaced URLs and options. Every case ends in the data as indexed or a typed
`YoumuError` naming the argument, quickly, without a credential in its text.

The store is moto on 127.0.0.1 (``tests/support/s3util.py``) where it can produce the case, and
a small HTTP server of this file where it cannot (a server that ignores `If-Match`,
that sends no ETag, that never answers)."""

from __future__ import annotations

import email.utils
import io
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from parquet_fixtures import write_columns
from s3util import S3  # noqa: E402

import youmu

pytest.importorskip("moto")
pytestmark = pytest.mark.timeout(120)

DEFAULTS = dict(retries=10, retry_timeout=180, request_timeout=30, connect_timeout=5, read_timeout=10)


@pytest.fixture(autouse=True)
def io_settings() -> Iterator[None]:
    """Each test starts from youmu's default retry and timeout settings; restored after."""
    before = youmu.io_options()
    youmu.set_io_options(**DEFAULTS)
    yield
    youmu.set_io_options(**before)


def parquet_bytes(tmp_path: Path, n: int = 600, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    path = write_columns(tmp_path / f"t{seed}.parquet",
                         {"id": pa.array(np.arange(n), pa.int64()), "x": pa.array(rng.integers(0, 1 << 40, n), pa.int64())},
                         data_page_size=512, write_batch_size=64, write_page_index=True, compression="none")
    return path.read_bytes()


class ObjectServer:
    """A plain HTTP object server: HEAD and ranged GET of the objects in ``objects``
    (path -> [bytes, ETag or None, Last-Modified or None]). It ignores ``If-Match``, as
    many web servers and CDNs do, and records every request's method and path."""

    def __init__(self) -> None:
        self.objects: dict[str, list[object]] = {}
        self.requests: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def log_request(self, code: object = "-", size: object = "-") -> None:
                server.requests.append((self.command, self.path))

            def _serve(self, body: bool) -> None:
                obj = server.objects.get(self.path.split("?")[0])
                if obj is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data, etag, mtime = obj
                assert isinstance(data, bytes)
                start, end, status = 0, len(data), 200
                rng = self.headers.get("Range")
                if rng and body:
                    a, b = rng.removeprefix("bytes=").split("-")
                    start, end = (max(0, len(data) - int(b)), len(data)) if a == "" else (int(a), min(int(b) + 1, len(data)))
                    status = 206
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                if etag:
                    self.send_header("ETag", str(etag))
                if mtime:
                    self.send_header("Last-Modified", str(mtime))
                self.send_header("Content-Length", str(end - start))
                self.end_headers()
                if body:
                    self.wfile.write(data[start:end])

            def do_GET(self) -> None:
                self._serve(True)

            def do_HEAD(self) -> None:
                self._serve(False)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http() -> Iterator[ObjectServer]:
    s = ObjectServer()
    yield s
    s.stop()


def http_date(t: float) -> str:
    return email.utils.formatdate(t, usegmt=True)


# --- a server that ignores If-Match ----------------------------------------------------


@pytest.mark.parametrize("validator", ["etag", "last-modified"])
def test_a_same_size_replacement_served_despite_if_match_is_stale(
    http: ObjectServer, tmp_path: Path, validator: str
) -> None:
    data = parquet_bytes(tmp_path)
    etag, mtime = ('"v1"', None) if validator == "etag" else (None, http_date(1_600_000_000))
    http.objects["/d/a.parquet"] = [data, etag, mtime]
    idx = youmu.PageIndex(http.url("/d/a.parquet"))
    assert len(idx) > 3
    want = idx.read_page(1)
    # same size, other bytes (one value of a page flipped), a new ETag or Last-Modified
    other = bytearray(data)
    other[len(data) // 3] ^= 0xFF
    new_etag, new_mtime = ('"v2"', None) if validator == "etag" else (None, http_date(1_700_000_000))
    http.objects["/d/a.parquet"] = [bytes(other), new_etag, new_mtime]
    for read in (lambda: idx.read_page(1), lambda: idx.read_pages(range(len(idx)))):
        with pytest.raises(youmu.StaleIndexError, match="changed since it was indexed") as e:
            read()
        assert "/d/a.parquet" in str(e.value)
    # put back as indexed: read as before
    http.objects["/d/a.parquet"] = [data, etag, mtime]
    assert idx.read_page(1).equals(want)


# --- an endpoint that accepts connections and never answers ---------------------------


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield listener.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    listener.close()


@pytest.mark.slow  # waits out the documented bound (20 s): make test-system
def test_a_hung_endpoint_fails_typed_within_the_documented_bound(silent: int) -> None:
    # connect_timeout + 2 * read_timeout with the defaults (5 + 2 * 10 s), plus slack
    t0 = time.monotonic()
    with pytest.raises(youmu.StorageTimeoutError) as e:
        youmu.PageIndex(f"http://127.0.0.1:{silent}/x.parquet")
    took = time.monotonic() - t0
    assert took < 27, f"a hung endpoint blocked for {took:.0f} s"
    assert f"127.0.0.1:{silent}/x.parquet" in str(e.value)
    # the per-index override and the process-wide setting shorten it
    t0 = time.monotonic()
    with pytest.raises(youmu.StorageTimeoutError):
        youmu.PageIndex(f"http://127.0.0.1:{silent}/y.parquet", storage_options={"read_timeout": "1s"})
    assert time.monotonic() - t0 < 4
    youmu.set_io_options(read_timeout=0.5)
    assert youmu.io_options()["read_timeout"] == 0.5
    t0 = time.monotonic()
    with pytest.raises(youmu.StorageTimeoutError):
        youmu.PageIndex(f"http://127.0.0.1:{silent}/z.parquet")
    assert time.monotonic() - t0 < 3


@pytest.mark.slow  # waits out the documented bound (20 s): make test-system
def test_a_hung_s3_endpoint_fails_within_the_bound(silent: int) -> None:
    opts = {"endpoint": f"http://127.0.0.1:{silent}", "access_key_id": "k", "secret_access_key": "s", "region": "us-east-1"}
    t0 = time.monotonic()
    with pytest.raises(youmu.StorageTimeoutError, match="s3://bkt/"):
        youmu.PageIndex("s3://bkt/prefix/", storage_options=opts)
    assert time.monotonic() - t0 < 27


# --- credentials never reach a message -------------------------------------------------


def test_passwords_in_urls_and_options_never_reach_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from youmu.cli import main

    secret = "hunter2"
    keys = {"access_key_id": "AKIAEXAMPLE42", "secret_access_key": "wJalrXUtnFEMIexample", "region": "us-east-1"}
    cases = [
        lambda: youmu.PageIndex(f"http://admin:{secret}@127.0.0.1:1/x.parquet"),
        lambda: youmu.PageIndex(f"http://admin:{secret}@127.0.0.1:1/d/"),
        lambda: youmu.PageIndex("s3://b/x.parquet", storage_options={**keys, "endpoint": f"http://admin:{secret}@127.0.0.1:1"}),
        lambda: youmu.PageIndex("s3://b/x.parquet", storage_options={**keys, "endpoint": f"http://admin:{secret}@127.0.0.1:99999"}),
        lambda: youmu.PageIndex(f"ftp://admin:{secret}@127.0.0.1/x.parquet"),
        lambda: youmu.PageIndex(
            "az://c/x.parquet",
            storage_options={"account_name": "acct", "sas_token": f"sv=2022-11-02&sig={secret}", "endpoint": "http://127.0.0.1:1"},
        ),
        lambda: youmu.PageIndex.load(f"http://admin:{secret}@127.0.0.1:1/i.youmu"),
        lambda: youmu.PageIndex("s3://b/x.parquet", storage_options={**keys, "endpoint": "http://127.0.0.1:1", "timeout": "AKIAEXAMPLE42"}),
    ]
    for i, case in enumerate(cases):
        with pytest.raises(youmu.YoumuError) as e:
            case()
        text = f"{e.value} {e.value!r} {e.value.args}"
        for s in (secret, keys["access_key_id"], keys["secret_access_key"]):
            assert s not in text, f"case {i}: {text}"
        assert any(p in text for p in ("127.0.0.1", "s3://b/", "az://c/")), f"case {i} no longer names the place: {text}"
    for argv in (["inspect", f"http://admin:{secret}@127.0.0.1:1/x.parquet"],
                 ["index", f"http://admin:{secret}@127.0.0.1:1/x.parquet", "-o", str(tmp_path / "i.youmu")]):
        try:
            main(argv)
        except youmu.YoumuError as e:
            print(e)
        out = capsys.readouterr()
        assert secret not in out.out + out.err, out
    from youmu._core import redact

    # a presigned or SAS URL's whole query grants access: every value is blanked
    assert redact(f"GET https://u:{secret}@h/k?sv=1&sig=abc&X-Amz-Signature=def") == "GET https://***@h/k?sv=***&sig=***&X-Amz-Signature=***"



# --- a fork never inherits a held lock --------------------------------------------------

# A parent whose threads keep configuring stores (remembering their secrets, redacting
# their errors) and changing the I/O settings forks workers; each must still change the
# settings and configure a store with a new secret. A lock held by one of the parent's
# threads at the fork would stay locked in the child forever: it would hang there.
FORK_WHILE_BUSY = r"""
import itertools, os, sys, threading, time, warnings
import youmu
from youmu._core import redact

warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process, on purpose
youmu.set_io_options(retries=0, connect_timeout=1.0)
n = itertools.count()
stop = threading.Event()

def store(key_id, secret, **more):
    try:
        youmu.PageIndex("s3://b/x.parquet", storage_options={"access_key_id": key_id, "secret_access_key": secret,
                        "region": "us-east-1", "endpoint": "http://127.0.0.1:1", "allow_http": "true", **more})
    except youmu.YoumuError:
        pass

def configure_stores():
    while not stop.is_set():
        i = next(n) % 64
        # a malformed option fails at once, after the secrets are remembered and
        # before any request: the threads spend their time in the core, GIL released
        store(f"AKIAPARENT{i:08d}", f"parent-secret-{i:08d}", timeout="soon" * 20000)

def change_settings():
    while not stop.is_set():
        youmu.set_io_options(max_inflight=32 + next(n) % 32)

for f in [configure_stores] * 3 + [change_settings]:
    threading.Thread(target=f, daemon=True).start()
hung = []
for i in range(int(sys.argv[1])):
    time.sleep(0.01)
    pid = os.fork()
    if pid == 0:
        youmu.set_io_options(max_inflight=7)
        store("AKIACHILD00000000", f"child-secret-{i:08d}")
        ok = youmu.io_options()["max_inflight"] == 7 and redact(f"a child-secret-{i:08d} b") == "a *** b"
        os._exit(0 if ok else 3)
    deadline = time.monotonic() + 10
    while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    if not done[0]:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        hung.append(i)
    elif os.waitstatus_to_exitcode(done[1]) != 0:
        sys.exit(f"child {i} saw wrong settings or an unredacted secret")
stop.set()
sys.exit(f"children {hung} hung" if hung else 0)
"""


def test_workers_forked_while_threads_configure_stores_and_settings_never_hang() -> None:
    import subprocess

    # faulthandler: a crash of the parent (seen once, rc -11 and no output) then says where
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", FORK_WHILE_BUSY, "100"], capture_output=True,
                       text=True, timeout=100)
    assert r.returncode == 0, r.stderr[-2000:]

# --- retries span the retry timeout -----------------------------------------------------


class TcpRelay:
    """A TCP relay in front of moto that can go down (listener and every open
    connection closed: clients see refused connections) and come back on the same port,
    as a store's front end does when it restarts."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.up()

    def up(self) -> None:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(128)
        self.port = ls.getsockname()[1]
        self.listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            u = socket.create_connection(self.upstream)
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def down(self) -> None:
        self.listener.close()
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


def test_an_epoch_rides_out_a_store_down_for_five_seconds(s3: S3, tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        data = parquet_bytes(tmp_path, n=3000, seed=i)
        s3.put(f"outage/f{i}.parquet", data)
        paths.append(tmp_path / f"t{i}.parquet")
    host, port = s3.moto_endpoint.removeprefix("http://").split(":")
    relay = TcpRelay((host, int(port)))
    opts = s3.options(endpoint=f"http://127.0.0.1:{relay.port}")
    youmu.set_io_options(retry_timeout=60)
    remote = youmu.PageIndex(s3.url("outage/"), storage_options=opts)
    local = youmu.PageIndex([str(p) for p in paths])
    assert len(remote) == len(local) > 20
    retries_before = youmu.io_stats()["remote_retries"]

    def outage() -> None:
        time.sleep(0.3)
        relay.down()
        time.sleep(5)
        relay.up()

    t = threading.Thread(target=outage)
    t.start()
    t0 = time.monotonic()
    got = []
    for i in np.random.default_rng(0).permutation(len(remote)):
        got.append((int(i), remote.read_page(int(i))))
        time.sleep(0.02)
    t.join()
    assert time.monotonic() - t0 > 5, "the epoch spanned the outage"
    for i, batch in got:
        assert batch.equals(local.read_page(i)), f"page {i}"
    assert youmu.io_stats()["remote_retries"] > retries_before
    relay.down()


# --- plain HTTP cannot list ---------------------------------------------------------------


def test_plain_http_prefixes_and_globs_are_refused_at_once_and_objects_never_listed(
    http: ObjectServer, tmp_path: Path
) -> None:
    for spec in (http.url("/"), http.url("/d/"), http.url("/d/*.parquet")):
        t0 = time.monotonic()
        with pytest.raises(youmu.InvalidArgumentError, match="cannot list objects") as e:
            youmu.PageIndex(spec)
        assert time.monotonic() - t0 < 1
        assert f"127.0.0.1:{http.port}/" in str(e.value) and "must name one object" in str(e.value)
    assert http.requests == [], "nothing was sent"
    # four objects in one "directory", and one named without an extension: HEADs and GETs only
    data = parquet_bytes(tmp_path)
    for name in ("a", "b", "c", "d"):
        http.objects[f"/d/{name}.parquet"] = [data, f'"{name}"', None]
    http.objects["/d/noext"] = [data, '"e"', None]
    urls = [http.url(f"/d/{n}.parquet") for n in "abcd"] + [http.url("/d/noext")]
    idx = youmu.PageIndex(urls)
    assert idx.num_files == 5
    idx.save(tmp_path / "h.youmu")
    loaded = youmu.PageIndex.load(tmp_path / "h.youmu")
    assert loaded.read_page(len(loaded) - 1).equals(idx.read_page(len(idx) - 1))
    assert {m for m, _ in http.requests} <= {"GET", "HEAD"}, http.requests


# --- malformed and misplaced URLs and options ---------------------------------------------


@pytest.mark.parametrize(
    "value", ["http://127.0.0.1:99999", "http://exa mple:80", "ftp://127.0.0.1:21", "not a url", "http://h:1/?x=1"]
)
def test_a_malformed_endpoint_is_an_invalid_argument_naming_it(value: str) -> None:
    opts = {"endpoint": value, "access_key_id": "k", "secret_access_key": "s", "region": "us-east-1"}
    for call in (lambda: youmu.PageIndex("s3://b/x.parquet", storage_options=opts),
                 lambda: youmu.PageIndex.load("s3://b/i.youmu", storage_options=opts),
                 lambda: youmu.PageIndex("az://c/x.parquet", storage_options={"account_name": "a", "endpoint": value}),
                 lambda: youmu.PageIndex("s3://b/x.parquet", storage_options={**opts, "endpoint": "http://h", "proxy_url": value})):
        with pytest.raises(youmu.InvalidArgumentError, match="endpoint|proxy_url") as e:
            call()
        assert "internal error" not in str(e.value)


@pytest.mark.parametrize("url", [
    "s3://b/" + "k" * 100_000 + ".parquet",  # once an "internal error": object_store's signer panicked
    "s3://b/" + "k" * 1_100,
    "gs://b/" + "k" * 1_100,
    "az://c/" + "é" * 1_025,
    "http://127.0.0.1:9/" + "k" * 20_000,
    "https://h.example/x?sig=" + "s" * 20_000,
])
def test_a_url_longer_than_any_store_accepts_is_an_invalid_argument_naming_it(url: str) -> None:
    opts = {
        "s3": {"endpoint": "http://127.0.0.1:9", "access_key_id": "k", "secret_access_key": "s", "region": "us-east-1",
               "allow_http": "true"},
        "az": {"account_name": "a", "endpoint": "http://127.0.0.1:9", "allow_http": "true"},
    }.get(url[:2], {})
    with pytest.raises(youmu.InvalidArgumentError, match="at most") as e:
        youmu.PageIndex(url, storage_options=opts)
    assert url[:20] in str(e.value) and len(str(e.value)) < 400 and "internal error" not in str(e.value)


@pytest.mark.parametrize("scheme", ["ftp", "hdfs", "memory", "sftp", "webhdfs"])
def test_unsupported_url_schemes_are_refused_listing_the_supported_ones(scheme: str, tmp_path: Path) -> None:
    from youmu._core import column_pages

    url = f"{scheme}://host/data/x.parquet"
    for call in (lambda: youmu.PageIndex(url), lambda: youmu.PageIndex([url, str(tmp_path)]),
                 lambda: youmu.PageIndex.load(url), lambda: column_pages(url)):
        with pytest.raises(youmu.InvalidArgumentError, match=f"scheme .{scheme}. is not supported") as e:
            call()
        assert "s3" in str(e.value) and "https" in str(e.value)
    local = tmp_path / "a.parquet"
    local.write_bytes(parquet_bytes(tmp_path))
    idx = youmu.PageIndex(local)
    with pytest.raises(youmu.InvalidArgumentError, match="not supported"):
        idx.save(f"{scheme}://host/i.youmu")
    assert youmu.PageIndex(f"file://{local}").num_rows == idx.num_rows, "file:// stays a local path"


def test_a_disallowed_plain_http_endpoint_is_a_configuration_error(s3: S3) -> None:
    for opts in (s3.options(allow_http="false"), {"allow_http": "false"}):
        url = s3.url("x.parquet") if "endpoint" in opts else f"{s3.proxy.endpoint}/{s3.bucket}/x.parquet"
        t0 = time.monotonic()
        with pytest.raises(youmu.InvalidArgumentError, match="allow_http"):
            youmu.PageIndex(url, storage_options=opts)
        assert time.monotonic() - t0 < 2


def test_storage_options_for_local_paths_or_other_stores_are_refused(tmp_path: Path) -> None:
    from youmu._core import column_pages

    path = tmp_path / "a.parquet"
    path.write_bytes(parquet_bytes(tmp_path))
    with pytest.raises(youmu.InvalidArgumentError, match=".endpiont. does not apply"):
        youmu.PageIndex(path, storage_options={"endpiont": "http://127.0.0.1:9000"})
    with pytest.raises(youmu.InvalidArgumentError, match=".region. does not apply"):
        youmu.PageIndex(tmp_path, storage_options={"region": "us-east-1"})
    with pytest.raises(youmu.InvalidArgumentError, match=".region. does not apply"):
        column_pages(str(path), storage_options={"region": "us-east-1"})
    idx = youmu.PageIndex(path)
    idx.save(tmp_path / "a.youmu")
    with pytest.raises(youmu.InvalidArgumentError, match=".anon. does not apply"):
        youmu.PageIndex.load(tmp_path / "a.youmu", storage_options={"anon": "true"})
    assert youmu.PageIndex.load(tmp_path / "a.youmu").num_rows == idx.num_rows
    # keys of one store are unknown to another
    for url, key in (("gs://b/x.parquet", "aws_access_key_id"), ("az://c/x.parquet", "region"),
                     ("http://127.0.0.1:1/x.parquet", "region"), ("s3://b/x.parquet", "service_account_key")):
        with pytest.raises(youmu.InvalidArgumentError, match=f"key .{key}. is not an option"):
            youmu.PageIndex(url, storage_options={key: "x"})
    out = io.StringIO()
    from youmu.cli import inspect_file

    assert inspect_file(str(path), out=out, storage_options={"region": "x"}) == 1
    assert "region" in out.getvalue() and "does not apply" in out.getvalue()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("value, error", [
    ("http://127.0.0.1:{closed}", youmu.StorageError),  # nothing listens: httpx's ConnectError once
    ("http://user:s3cret-endpoint-pass@127.0.0.1:{closed}", youmu.StorageError),
    ("ftp://127.0.0.1:21", youmu.InvalidArgumentError),  # httpx's UnsupportedProtocol once
    ("127.0.0.1:8080", youmu.InvalidArgumentError),
    ("http://h:port", youmu.InvalidArgumentError),
    ("http://user:s3cret-endpoint-pass@[::1", youmu.InvalidArgumentError),
])
def test_an_unreachable_or_malformed_hf_endpoint_is_a_typed_error_naming_it(
        value: str, error: type[Exception], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_ENDPOINT", value.format(closed=_closed_port()))
    monkeypatch.setenv("HF_TOKEN", "hf_NeverShownToken0123456789")
    with pytest.raises(error) as e:
        youmu.PageIndex("hf://datasets/org/data/train.parquet")
    text = str(e.value)
    assert "HF_ENDPOINT" in text and "hf://datasets/org/data" in text, text
    assert "s3cret-endpoint-pass" not in text and "hf_NeverShownToken" not in text, text
