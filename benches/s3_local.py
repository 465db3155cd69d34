"""A minimal S3-compatible server over a local directory, with an injected first-byte
delay, for storage benchmarks.

    python benches/s3_local.py --root DIR [--port 0] [--delay 0.02]

Each directory under ``DIR`` is a bucket. It answers what youmu (object_store) and
pyarrow's ``S3FileSystem`` send for reading: GET with ``Range`` (``a-b``, ``-n``,
``a-``) and ``If-Match``, HEAD, ListObjectsV2 (prefix, delimiter, continuation), HEAD
bucket. Authentication is not checked. Bodies go out with ``sendfile`` and the server
runs in its own process (asyncio, one thread), so it is not the bottleneck of a
client on the same machine the way moto (which copies a whole object per GET) is.

Latency: every response waits ``delay`` seconds before its first byte (S3's first-byte
latency is tens of milliseconds for small objects; Durner et al., VLDB 2023).
Counters and settings: ``GET /__stats`` (JSON: requests by kind, body bytes),
``GET /__reset``, ``GET /__delay?s=0.02``. Prints ``PORT <n>`` when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import json
import os
import sys
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path
from xml.sax.saxutils import escape

STATS = {"get": 0, "head": 0, "list": 0, "other": 0, "bytes": 0}
CONFIG = {"delay": 0.0}


def etag(st: os.stat_result) -> str:
    return f'"{st.st_size:x}-{st.st_mtime_ns:x}"'


def xml_error(code: int, name: str, message: str) -> tuple[int, dict[str, str], bytes]:
    body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{name}</Code><Message>{message}</Message></Error>'
    return code, {"Content-Type": "application/xml"}, body.encode()


def list_objects(root: Path, bucket: str, q: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    base = root / bucket
    if not base.is_dir():
        return xml_error(404, "NoSuchBucket", "The specified bucket does not exist")
    prefix = q.get("prefix", "")
    delimiter = q.get("delimiter", "")
    start_after = q.get("continuation-token") or q.get("start-after") or ""
    max_keys = int(q.get("max-keys", "1000"))
    keys = []
    for dirpath, _, files in os.walk(base, followlinks=True):
        rel_dir = os.path.relpath(dirpath, base)
        for f in files:
            k = f if rel_dir == "." else f"{rel_dir}/{f}"
            if k.startswith(prefix):
                keys.append(k)
    keys.sort()
    contents, prefixes = [], []
    seen_prefixes: set[str] = set()
    truncated, next_token, last = False, "", start_after
    for k in keys:
        if k <= start_after:
            continue
        if len(contents) + len(prefixes) >= max_keys:
            truncated, next_token = True, last
            break
        rest = k[len(prefix):]
        if delimiter and delimiter in rest:
            p = prefix + rest.split(delimiter, 1)[0] + delimiter
            if p not in seen_prefixes:
                seen_prefixes.add(p)
                prefixes.append(p)
            last = k
            continue
        st = (base / k).stat()
        modified = datetime.fromtimestamp(st.st_mtime, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        contents.append(
            f"<Contents><Key>{escape(k)}</Key><LastModified>{modified}</LastModified>"
            f"<ETag>{escape(etag(st))}</ETag><Size>{st.st_size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
        )
        last = k
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(contents) + len(prefixes)}</KeyCount>"
        f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
        + (f"<NextContinuationToken>{escape(next_token)}</NextContinuationToken>" if truncated else "")
        + "".join(contents)
        + "".join(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes)
        + "</ListBucketResult>"
    )
    return 200, {"Content-Type": "application/xml"}, body.encode()


async def handle(root: Path, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0") or 0)
            if n:
                await reader.readexactly(n)
            url = urllib.parse.urlsplit(target)
            q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            path = urllib.parse.unquote(url.path)
            file_part = None
            status, extra, body = 200, {}, b""
            if path == "/__stats":
                body = json.dumps(STATS).encode()
            elif path == "/__reset":
                for k in STATS:
                    STATS[k] = 0
            elif path == "/__delay":
                CONFIG["delay"] = float(q.get("s", "0"))
            else:
                bucket, _, key = path.lstrip("/").partition("/")
                if CONFIG["delay"]:
                    await asyncio.sleep(CONFIG["delay"])
                if method == "GET" and not key and "list-type" in q:
                    STATS["list"] += 1
                    status, extra, body = list_objects(root, bucket, q)
                elif not key:
                    STATS["other"] += 1
                    ok = (root / bucket).is_dir()
                    status, extra, body = (200, {}, b"") if ok else xml_error(404, "NoSuchBucket", "no bucket")
                else:
                    f = root / bucket / key
                    if not f.is_file():
                        STATS["other"] += 1
                        status, extra, body = xml_error(404, "NoSuchKey", "The specified key does not exist")
                    else:
                        st = f.stat()
                        size = st.st_size
                        extra = {
                            "ETag": etag(st),
                            "Last-Modified": email.utils.formatdate(st.st_mtime, usegmt=True),
                            "Accept-Ranges": "bytes",
                            "Content-Type": "application/octet-stream",
                        }
                        if headers.get("if-match") and headers["if-match"] not in (etag(st), "*"):
                            status, extra, body = xml_error(412, "PreconditionFailed", "If-Match failed")
                        elif method == "HEAD":
                            STATS["head"] += 1
                            extra["Content-Length"] = str(size)
                        else:
                            STATS["get"] += 1
                            start, end = 0, size
                            rng = headers.get("range", "")
                            if rng.startswith("bytes="):
                                a, _, b = rng[6:].partition("-")
                                if a == "":
                                    start, end = max(0, size - int(b)), size
                                else:
                                    start, end = int(a), (min(size, int(b) + 1) if b else size)
                                if start >= size and size > 0:
                                    status, extra, body = xml_error(416, "InvalidRange", "range not satisfiable")
                                    start = end = 0
                                else:
                                    status = 206
                                    extra["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
                            if status in (200, 206):
                                file_part = (f, start, end - start)
            if file_part is None:
                extra.setdefault("Content-Length", str(len(body)))
            else:
                extra["Content-Length"] = str(file_part[2])
            reason = {200: "OK", 206: "Partial Content", 404: "Not Found", 412: "Precondition Failed"}.get(status, "X")
            out = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in extra.items()]
            writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
            if method != "HEAD":
                if file_part is not None:
                    f, off, count = file_part
                    with open(f, "rb") as fh:
                        await loop.sendfile(writer.transport, fh, off, count)
                    STATS["bytes"] += count
                else:
                    writer.write(body)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main_async(root: Path, port: int, delay: float) -> None:
    CONFIG["delay"] = delay
    server = await asyncio.start_server(lambda r, w: handle(root, r, w), "127.0.0.1", port, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.0)
    a = ap.parse_args()
    try:
        asyncio.run(main_async(Path(a.root), a.port, a.delay))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
