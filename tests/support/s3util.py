"""A real S3-compatible server for tests, and a proxy in front of it that counts and
breaks requests.

``moto``'s ``ThreadedMotoServer`` (bound to 127.0.0.1 explicitly; its default is every
interface) is the store. youmu talks to it through :class:`FaultProxy`, which records
every request (method, key, Range) and can fail, stall, truncate or deny the N-th
request matching a rule. Uploads go straight to moto with boto3, so they are not
counted.

moto copies the whole object on every GET: keep test objects small.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    headers: dict[str, str]

    @property
    def is_get(self) -> bool:
        return self.method == "GET" and "list-type" not in self.path and "?" not in self.path.split("/")[-1]

    @property
    def is_list(self) -> bool:
        return self.method == "GET" and ("list-type" in self.path or "prefix=" in self.path or "delimiter=" in self.path)


@dataclass
class Fault:
    """Break requests matching ``when`` (a predicate on :class:`Request`): the
    ``nth`` matching one (1-based), or every one from it on when ``times`` is None.
    ``action``: ``"fail"`` (503 SlowDown), ``"stall"`` (sleep ``seconds`` first),
    ``"truncate"`` (send half the body, then close), ``"deny"`` (403)."""

    action: str
    nth: int = 1
    times: int | None = 1
    seconds: float = 0.0
    when: Callable[[Request], bool] = lambda r: r.is_get
    seen: int = 0
    fired: int = 0

    def applies(self, r: Request) -> bool:
        if not self.when(r):
            return False
        self.seen += 1
        if self.seen < self.nth:
            return False
        if self.times is not None and self.fired >= self.times:
            return False
        self.fired += 1
        return True


@dataclass
class FaultProxy:
    upstream: tuple[str, int]
    delay: float = 0.0
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                req = Request(
                    self.command, self.path, self.headers.get("Range"), {k.lower(): v for k, v in self.headers.items()}
                )
                with proxy.lock:
                    proxy.requests.append(req)
                    fault = next((f for f in proxy.faults if f.applies(req)), None)
                if proxy.delay:
                    time.sleep(proxy.delay)
                if fault and fault.action == "stall":
                    time.sleep(fault.seconds)
                if fault and fault.action in ("fail", "deny"):
                    code, err = (503, "SlowDown") if fault.action == "fail" else (403, "InvalidAccessKeyId")
                    payload = (
                        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{err}</Code>'
                        f"<Message>injected by the test proxy</Message></Error>"
                    ).encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                # a HEAD answer has no body but the object's length
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                if fault and fault.action == "truncate":
                    self.send_header("Connection", "close")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            # socketserver's listen backlog is 5: a burst of connects (forked DataLoader
            # workers each open up to max_inflight at once) overflows it, and Linux drops
            # the SYNs, which the client resends after 1 s, then 3 s, so requests time out
            # for want of an accept. A real store's front end takes the burst; so does
            # moto's own server (werkzeug listens with 128).
            request_queue_size = 128

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.faults.clear()

    def gets(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.is_get]

    def lists(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.is_list]


class S3:
    """moto on 127.0.0.1, a proxy in front, a bucket, and options for youmu."""

    def __init__(self, bucket: str = "youmu-test") -> None:
        import boto3
        from moto.server import ThreadedMotoServer

        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        host, port = self.moto.get_host_and_port()
        self.moto_endpoint = f"http://{host}:{port}"
        self.proxy = FaultProxy((host, port)).start()
        self.bucket = bucket
        self.client = boto3.client(
            "s3",
            endpoint_url=self.moto_endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )
        self.client.create_bucket(Bucket=bucket)

    def options(self, **extra: object) -> dict[str, object]:
        return {
            "endpoint": self.proxy.endpoint,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "region": REGION,
            **extra,
        }

    def env(self) -> dict[str, str]:
        """The same configuration as environment variables."""
        return {
            "AWS_ENDPOINT_URL": self.proxy.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def put(self, key: str, data: bytes, public: bool = False) -> None:
        extra = {"ACL": "public-read"} if public else {}
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **extra)

    def put_file(self, key: str, path: object, public: bool = False) -> None:
        with open(path, "rb") as f:  # type: ignore[arg-type]
            self.put(key, f.read(), public)

    def stop(self) -> None:
        self.proxy.stop()
        self.moto.stop()


def object_key(req: Request) -> str:
    """The key of a path-style request (``/bucket/key?...``)."""
    path = req.path.split("?", 1)[0]
    return re.sub(r"^/[^/]+/", "", path)
