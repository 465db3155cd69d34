"""Credentials stay in memory: no message, repr, report, saved index, pickle or CLI output
shows a password, a secret key, a session token or a URL's signature — and URLs that
carry their credential in the query (presigned S3 URLs, Azure SAS URLs) are read.

* user info in an http(s) URL authenticates the reads but is never saved with the index
  or pickled with it: a load passes ``storage_options={"username", "password"}``, and
  one that does not is told so;
* ``repr`` of a spec or a Ray source, ``ImageError`` messages and skip reports go
  through the one redaction (``youmu._internal.redaction``, the native core's);
* a URL with a query names one object (``?`` is no glob character there), fetched as
  written with ranged GETs, from a local server and from moto's presigned URLs;
* malformed ``YOUMU_*`` variables are errors naming them, and a ``YOUMU_HTTP_<KEY>``
  applies its value.

The servers are a small Basic-auth HTTP server of this file and moto on 127.0.0.1
(``tests/support/s3util.py``)."""

from __future__ import annotations

import base64
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from parquet_fixtures import write_ids
from s3util import S3  # noqa: E402

import youmu
from youmu._internal.redaction import redact
from youmu.errors import ImageError, StorageAuthError

pytestmark = pytest.mark.timeout(120)

PASSWORD = "hunter2#x"  # a '#' in a password, typed unescaped
SIGNATURE = "c2lnbmF0dXJlLXNlY3JldA"


def parquet_bytes(tmp_path: Path, n: int = 300) -> bytes:
    path = write_ids(tmp_path / "t.parquet", n, data_page_size=256, write_batch_size=32, write_page_index=True,
                     compression="none")
    return path.read_bytes()


class GuardedServer:
    """Ranged GETs and HEADs of ``objects`` (path -> bytes) for requests with Basic
    credentials ``admin``/``PASSWORD`` or, where ``signed``, the query ``query`` (401/403
    otherwise). Records every request line."""

    def __init__(self, objects: dict[str, bytes], query: str | None = None) -> None:
        self.objects, self.query, self.requests = objects, query, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _refuse(self, code: int) -> None:
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _serve(self, body: bool) -> None:
                server.requests.append((self.command, self.path, self.headers.get("Authorization")))
                path, _, query = self.path.partition("?")
                if server.query is not None:
                    if query != server.query:
                        return self._refuse(403)
                else:
                    want = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
                    if self.headers.get("Authorization") != want:
                        return self._refuse(401)
                data = server.objects.get(path)
                if data is None:
                    return self._refuse(404)
                start, end, status = 0, len(data), 200
                rng = self.headers.get("Range")
                if rng and body:
                    a, b = rng.removeprefix("bytes=").split("-")
                    start, end = (max(0, len(data) - int(b)), len(data)) if a == "" else (int(a), min(int(b) + 1, len(data)))
                    status = 206
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                self.send_header("ETag", '"v1"')
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
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def data(tmp_path: Path) -> bytes:
    return parquet_bytes(tmp_path)


@pytest.fixture
def basic(data: bytes) -> Iterator[GuardedServer]:
    s = GuardedServer({"/d/a.parquet": data})
    yield s
    s.stop()


def _ids(idx: youmu.PageIndex) -> list[int]:
    return [v for p in range(len(idx)) for v in idx.read_page(p).column("id").to_pylist()]


# --- user info in URLs ----------------------------------------------------------------------


def test_user_info_authenticates_but_is_never_saved_or_pickled(basic: GuardedServer, tmp_path: Path) -> None:
    url = f"http://admin:{PASSWORD}@{basic.host}/d/a.parquet"
    idx = youmu.PageIndex(url)
    assert _ids(idx) == list(range(300))
    idx.save(tmp_path / "i.youmu")
    blob = pickle.dumps(idx)
    for raw in ((tmp_path / "i.youmu").read_bytes(), blob):
        assert PASSWORD.encode() not in raw and b"admin:" not in raw
        assert f"{basic.host}/d/a.parquet".encode() in raw  # the object is still named
    assert PASSWORD not in str(idx.files) + repr(idx)
    # a load without the credentials is told what to pass, without showing any
    with pytest.raises(StorageAuthError, match=r"storage_options=\{\"username\"") as e:
        youmu.PageIndex.load(tmp_path / "i.youmu")
    assert PASSWORD not in str(e.value)
    opts = {"username": "admin", "password": PASSWORD}
    assert _ids(youmu.PageIndex.load(tmp_path / "i.youmu", storage_options=opts)) == list(range(300))
    with pytest.raises(StorageAuthError, match="username"):
        _ids(pickle.loads(blob))
    assert _ids(youmu.PageIndex.from_bytes(idx.to_bytes(), storage_options=opts)) == list(range(300))


def test_the_index_command_writes_no_password(basic: GuardedServer, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from youmu.cli import main

    out = tmp_path / "cli.youmu"
    main(["index", f"http://admin:{PASSWORD}@{basic.host}/d/a.parquet", "-o", str(out)])
    printed = capsys.readouterr()
    assert PASSWORD not in printed.out + printed.err
    assert out.exists() and PASSWORD.encode() not in out.read_bytes()


def test_a_password_with_a_hash_or_a_signature_fragment_is_never_shown() -> None:
    with pytest.raises(youmu.YoumuError) as e:
        youmu.PageIndex(f"http://admin:{PASSWORD}@127.0.0.1:1/x.parquet")
    assert PASSWORD not in str(e.value) and "hunter2" not in str(e.value) and "127.0.0.1:1" in str(e.value)
    assert redact(f"http://u:{PASSWORD}@h/x.parquet") == "http://***@h/x.parquet"
    assert redact(f"https://h/x.parquet#sig={SIGNATURE}") == "https://h/x.parquet#sig=***"
    assert redact(f"x.parquet#sig={SIGNATURE}") == "x.parquet#sig=***"


def test_a_url_fragment_is_never_sent_nor_shown(data: bytes) -> None:
    """A fragment (``#sig=...``) is the client's own: never part of the object's key, so
    never sent to the server and never quoted back in a message (it once went out as
    ``%23sig=...`` and came back unmasked in the server's error)."""
    s = GuardedServer({"/d/a.parquet": data})
    try:
        idx = youmu.PageIndex(f"http://admin:{PASSWORD}@{s.host}/d/a.parquet#sig={SIGNATURE}")
        assert _ids(idx) == list(range(300))
        assert SIGNATURE not in str(idx.files) + repr(idx)
        with pytest.raises(youmu.YoumuError) as e:
            youmu.PageIndex(f"http://admin:{PASSWORD}@{s.host}/d/missing.parquet#sig={SIGNATURE}")
        assert "missing.parquet" in str(e.value)
        assert SIGNATURE not in str(e.value) and "%23" not in str(e.value), str(e.value)
        assert s.requests and not any("#" in p or "%23" in p or SIGNATURE in p for _, p, _ in s.requests), s.requests
    finally:
        s.stop()


def test_a_password_with_an_unescaped_slash_is_a_typed_error_that_never_shows_it(
        basic: GuardedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import test_hostile_secrets as here

    secret = "hunter2/zq#x"  # as typed: '/' would end the host, so it must be percent-encoded
    for url in (f"http://admin:{secret}@{basic.host}/d/a.parquet", f"https://admin:{secret}@h.example/x.parquet"):
        with pytest.raises(youmu.InvalidArgumentError, match="%2F") as e:
            youmu.PageIndex(url)
        text = str(e.value)
        assert "hunter2" not in text and "zq" not in text, text
        assert "user info" in text and url.split("@")[1].split("/")[0] in text, "names the URL it refuses"
        assert "hunter2" not in redact(f"GET {url}: refused") and "zq" not in redact(f"GET {url}: refused")
    # percent-encoded, the same password authenticates
    monkeypatch.setattr(here, "PASSWORD", secret)
    encoded = secret.replace("/", "%2F").replace("#", "%23")
    assert _ids(youmu.PageIndex(f"http://admin:{encoded}@{basic.host}/d/a.parquet")) == list(range(300))


def test_hive_style_paths_are_shown_as_they_are(tmp_path: Path) -> None:
    assert redact("data/code=python/part-0.parquet") == "data/code=python/part-0.parquet"
    assert redact("code=python/part-0.parquet") == "code=python/part-0.parquet"
    with pytest.raises(youmu.YoumuError, match="code=python/part-0.parquet"):
        youmu.PageIndex(str(tmp_path / "code=python" / "part-0.parquet"))


# --- the Hugging Face Hub's token -----------------------------------------------------------------

HUB_TOKEN = "hf_EnvironmentTokenShouldStayHome42"


@pytest.fixture
def no_login(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Hub token but the ones a test sets: not the machine's ``hf auth login`` file."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_DISABLE_IMPLICIT_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-login"))


@pytest.mark.parametrize("endpoint", [None, "not a url", "http://127.0.0.1:1", "ftp://127.0.0.1"])
def test_the_hub_token_of_the_environment_reaches_no_other_server(
        basic: GuardedServer, no_login: None, monkeypatch: pytest.MonkeyPatch, endpoint: str | None) -> None:
    monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
    if endpoint is not None:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
    assert _ids(youmu.PageIndex(f"http://admin:{PASSWORD}@{basic.host}/d/a.parquet")) == list(range(300))
    with pytest.raises(StorageAuthError) as e:
        youmu.PageIndex(f"http://{basic.host}/d/a.parquet")
    assert "HF_TOKEN" not in str(e.value), "a server that is not the Hub is not told of the Hub's token"
    assert basic.requests and not any("Bearer" in str(auth) for _, _, auth in basic.requests)


def test_on_the_hubs_host_credentials_given_win_over_the_environments_token(
        basic: GuardedServer, no_login: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", f"http://{basic.host}/")
    assert _ids(youmu.PageIndex(f"http://admin:{PASSWORD}@{basic.host}/d/a.parquet")) == list(range(300))
    opts = {"username": "admin", "password": PASSWORD}
    assert _ids(youmu.PageIndex(f"http://{basic.host}/d/a.parquet", storage_options=opts)) == list(range(300))
    assert not any("Bearer" in str(auth) for _, _, auth in basic.requests)
    # none given: the Hub's token is sent, refused here, and never shown
    with pytest.raises(StorageAuthError, match="HF_TOKEN") as e:
        youmu.PageIndex(f"http://{basic.host}/d/a.parquet")
    assert HUB_TOKEN not in str(e.value)
    assert any(auth == f"Bearer {HUB_TOKEN}" for _, _, auth in basic.requests)


@pytest.mark.parametrize("case", ["control character", "token file is a directory", "token file not UTF-8"])
def test_an_unusable_hub_token_is_a_typed_error_naming_where_it_was_found(
        basic: GuardedServer, no_login: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://{basic.host}")
    secret = "hf_Sec\x01retToken"
    if case == "control character":
        monkeypatch.setenv("HF_TOKEN", secret)
        where = "HF_TOKEN"
    elif case == "token file is a directory":
        monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path))
        where = str(tmp_path)
    else:
        (tmp_path / "token").write_bytes(b"hf_\xff\xfe" + secret.encode())
        monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))
        where = str(tmp_path / "token")
    with pytest.raises(youmu.InvalidArgumentError) as e:
        youmu.PageIndex(f"http://{basic.host}/d/a.parquet")
    msg = str(e.value)
    assert where in msg and basic.host in msg, msg
    assert "Sec" not in msg and "retToken" not in msg, msg
    assert not basic.requests, "nothing is sent with a token that cannot be"


def test_a_blank_hf_token_falls_back_to_the_login_file(basic: GuardedServer, no_login: None,
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://{basic.host}")
    monkeypatch.setenv("HF_TOKEN", " \n")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_HiddenByTheBlankOne123")  # as huggingface_hub reads them
    (tmp_path / "token").write_text(f"\n {HUB_TOKEN}\r\n")
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))
    with pytest.raises(StorageAuthError):
        youmu.PageIndex(f"http://{basic.host}/d/a.parquet")
    assert {auth for _, _, auth in basic.requests} == {f"Bearer {HUB_TOKEN}"}


# --- reprs, image errors, skip reports ----------------------------------------------------------


KEYS = {"access_key_id": "AKIAEXAMPLE42", "secret_access_key": "wJalrXUtnFEMIexample",
        "aws_session_token": "FwoGZXIvYXdzEXAMPLETOKEN", "region": "us-east-1"}


def test_reprs_of_specs_and_sources_show_no_secret() -> None:
    from youmu.streams.spec import StreamSpec

    spec = StreamSpec(storage_options=KEYS)
    texts = [repr(spec), str(spec)]
    ray_source = pytest.importorskip("youmu.ray.source")
    texts.append(repr(ray_source.Source(f"http://admin:{PASSWORD}@h/x.parquet")))
    texts.append(repr(ray_source.Source("s3://b/x.parquet", storage_options=KEYS)))
    for text in texts:
        for secret in (KEYS["secret_access_key"], KEYS["aws_session_token"], PASSWORD):
            assert secret not in text, text
    assert "us-east-1" in texts[0] and "'secret_access_key': '***'" in texts[0]


def test_image_errors_and_skip_reports_show_no_credential() -> None:
    from youmu.streams.skips import SkipLog, reporting_pass

    url = f"https://admin:{PASSWORD}@h/part-0.parquet?sig={SIGNATURE}"
    err = ImageError(f"cannot decode image from {url}", column="image", path=url).located(file=url, row=3, position=3)
    assert PASSWORD not in str(err) and SIGNATURE not in str(err) and "row 3" in str(err)

    def transform(row: int) -> dict:
        if row == 1:
            raise ImageError(f"bad image in {url}", path=url, skip=True)
        return {"row": row}

    log = SkipLog()
    out = list(reporting_pass(iter(range(3)), transform, 0, lambda pos: {"file": url, "row": pos, "position": pos}, log))
    reports = [r for _, item in out if isinstance(item, dict) for r in item.get("skipped", [])]
    assert len(reports) == 1 and log.count == 1
    text = repr(reports) + repr(list(log.rows))
    assert PASSWORD not in text and SIGNATURE not in text and "h/part-0.parquet" in text


# --- URLs with a query: presigned and SAS URLs ----------------------------------------------------


@pytest.mark.parametrize("query", [
    f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=60&X-Amz-Signature={SIGNATURE}",
    f"sv=2022-11-02&se=2030-01-01&sp=r&sig={SIGNATURE}",
    "download=true",
])
def test_a_url_with_a_query_names_one_object(data: bytes, query: str, tmp_path: Path) -> None:
    server = GuardedServer({"/c/x.parquet": data, "/c/noext": data}, query=query)
    try:
        for path in ("/c/x.parquet", "/c/noext"):
            idx = youmu.PageIndex(f"http://{server.host}{path}?{query}")
            assert _ids(idx) == list(range(300))
            # the query is the object's address (``files`` keeps it, to reopen it), never shown
            assert SIGNATURE not in repr(idx) and idx.files == [f"http://{server.host}{path}?{query}"]
        assert {m for m, _, _ in server.requests} == {"GET"}, "ranged GETs of the URL as written, no listing"
        assert all(p.endswith(f"?{query}") for _, p, _ in server.requests)
        idx.save(tmp_path / "q.youmu")  # the signature is the object's address: kept to reopen it
        assert _ids(youmu.PageIndex.load(tmp_path / "q.youmu")) == list(range(300))
        # a wrong signature: refused by the server, and the message does not echo it
        with pytest.raises(youmu.YoumuError) as e:
            youmu.PageIndex(f"http://{server.host}/c/x.parquet?{query}0")
        assert SIGNATURE not in str(e.value) and f"{server.host}/c/x.parquet" in str(e.value)
    finally:
        server.stop()


def test_a_presigned_s3_url_is_read(data: bytes) -> None:
    pytest.importorskip("moto")
    s3 = S3()
    try:
        s3.put("p/a.parquet", data)
        url = s3.client.generate_presigned_url("get_object", Params={"Bucket": s3.bucket, "Key": "p/a.parquet"},
                                               ExpiresIn=600)
        assert "X-Amz-Signature=" in url or "Signature=" in url
        idx = youmu.PageIndex(url)
        assert _ids(idx) == list(range(300))
        assert "Signature=***" in redact(url) and url.split("Signature=")[1][:8] not in redact(url)
    finally:
        s3.stop()


# --- YOUMU_* environment variables ------------------------------------------------------------------


def _run(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("var, value", [
    ("YOUMU_MMAP_THRESHOLD", "lots"), ("YOUMU_MMAP_THRESHOLD", "-5"), ("YOUMU_MMAP_THRESHOLD", str(1 << 40)),
    ("YOUMU_FAST_DECODE", "off"), ("YOUMU_FAST_DECODE", "yes"),
    ("YOUMU_HTTP_TIMEOUT", "soon"), ("YOUMU_HTTP_NO_SUCH_KEY", "1"),
])
def test_a_malformed_youmu_variable_is_an_error_naming_it(var: str, value: str, ids_file: Callable[..., str]) -> None:
    path = ids_file(2, start=1, column="x")
    code = f"""
        import youmu
        try:
            youmu.PageIndex({path!r})
        except youmu.InvalidArgumentError as e:
            print("refused:", e)
        else:
            print("accepted")
    """
    done = _run(code, {var: value})
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and var in done.stdout, done.stdout


def test_valid_youmu_variables_are_accepted(ids_file: Callable[..., str]) -> None:
    done = _run(f"import youmu; print(youmu.PageIndex({ids_file(2, start=1, column='x')!r}).num_rows)",
                {"YOUMU_MMAP_THRESHOLD": "262144", "YOUMU_FAST_DECODE": "0", "YOUMU_HTTP_TIMEOUT": "30s"})
    assert done.returncode == 0 and done.stdout.strip() == "2", done.stderr


def test_a_youmu_http_variable_applies_its_value() -> None:
    # a server that accepts and never answers: YOUMU_HTTP_TIMEOUT=1s ends the request in
    # about a second where youmu's own request timeout is a minute
    code = """
        import socket, time, youmu
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
        youmu.set_io_options(retries=0, request_timeout=60, read_timeout=60, connect_timeout=60)
        t0 = time.monotonic()
        try:
            youmu.PageIndex(f"http://127.0.0.1:{s.getsockname()[1]}/x.parquet")
        except youmu.YoumuError as e:
            print(type(e).__name__, round(time.monotonic() - t0, 1))
    """
    done = _run(code, {"YOUMU_HTTP_TIMEOUT": "1s"}, timeout=50)
    assert done.returncode == 0, done.stderr
    kind, seconds = done.stdout.split()
    assert kind == "StorageTimeoutError" and float(seconds) < 20, done.stdout
