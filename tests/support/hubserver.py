"""A local Hugging Face Hub for tests: the public endpoints that dataset readers use,
served on 127.0.0.1 by two real HTTP servers started in-process.

The Hub (:class:`HubServer`):

* ``GET /api/datasets/{owner}/{name}[/revision/{rev}]``: repository info at a revision
  (``id``, ``sha``, ``siblings``...), as ``HfApi.dataset_info`` reads it;
* ``GET /api/datasets/{repo}/tree/{rev}[/{path}]?recursive=&expand=&cursor=``: one
  directory (or, recursive, everything below it) as JSON entries (``type``, ``path``,
  ``oid``, ``size``, ``lfs``), ``page_size`` entries a page, the next page in a
  ``Link: <...>; rel="next"`` header (cursor-based, as the Hub paginates);
* ``POST /api/datasets/{repo}/paths-info/{rev}``: entries of named paths
  (``HfFileSystem.info``);
* ``GET|HEAD /datasets/{repo}/resolve/{rev}/{path}``: a small ("git") file is served
  here with ``ETag`` and ``X-Repo-Commit``; an LFS file (``*.parquet``, or anything
  larger than ``lfs_threshold``) answers ``302`` to the CDN on another port with a
  signed URL, carrying ``X-Linked-Etag`` / ``X-Linked-Size`` as the Hub does.

The CDN (:class:`_Cdn`): ``GET|HEAD /blobs/{sha256}?Expires=..&Signature=..`` (or, with
``opaque_signatures``, ``?token=..``: an expiry the client cannot read), valid for
``signed_ttl`` seconds; a bad or expired signature is 403 and an ``Authorization`` header is 400 (S3 and CloudFront refuse a
second credential beside a signed URL), so a client that leaks its Hub token across
the redirect fails here. Both honour single ranges (``bytes=a-b``, ``a-``, ``-n``:
206 with ``Content-Range``, 416 past the end) and ``If-Match`` (412).

Auth and errors as the Hub answers them: a private repository without a token is 401
(``X-Error-Code: RepoNotFound``); with a token that may not read it 403; a gated one
403 ``GatedRepo``; a missing repository 404 ``RepoNotFound``, revision 404
``RevisionNotFound``, file 404 ``EntryNotFound``. ``rate_limit(n, retry_after)``
answers the next ``n`` requests matching a predicate 429 with ``Retry-After``, and
``refuse(n, status)`` any other status (a CDN's 403);
``first_byte_delay`` delays every answer (benchmarks). Every request is recorded.

Example:
    >>> hub = HubServer().start()
    >>> sha = hub.commit("o/d", {"data/a.parquet": b"PAR1"})
    >>> hub.branches("o/d")["main"] == sha
    True
    >>> hub.stop()
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

_SIGNING_KEY = b"local-hub-cdn"


@dataclass
class Seen:
    """One request as the server saw it."""

    server: str  # "hub" or "cdn"
    method: str
    path: str
    headers: dict[str, str]
    at: float
    status: int = 0


@dataclass
class _Repo:
    private: bool = False
    gated: bool = False
    readers: set[str] = field(default_factory=set)  # tokens that may read it (private or gated)
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)


@dataclass
class _RateLimit:
    left: int
    retry_after: str | None
    when: Callable[[Seen], bool]
    status: int = 429


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None | str:
    """``(start, end_exclusive)`` of a single ``Range`` header, ``None`` for none, or
    ``"unsatisfiable"``."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None  # several ranges: the whole body, as many servers answer
    a, _, b = spec.strip().partition("-")
    if a == "":
        n = int(b)
        return (max(size - n, 0), size) if n > 0 else "unsatisfiable"
    start = int(a)
    end = min(int(b) + 1, size) if b else size
    if start >= size or end <= start:
        return "unsatisfiable"
    return start, end


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: Any  # HubServer or _Cdn, set per server class

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _record(self) -> Seen:
        seen = Seen(self.owner.name, self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                    time.monotonic())
        with self.owner.hub.lock:
            self.owner.hub.requests.append(seen)
        return seen

    def _send(self, seen: Seen, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              head: bool = False) -> None:
        delay = self.owner.hub.first_byte_delay
        if delay:
            time.sleep(delay)
        seen.status = status
        self.send_response(status)
        hs = {"Content-Length": str(len(body)), **(headers or {})}
        for k, v in hs.items():
            self.send_header(k, v)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _error(self, seen: Seen, status: int, code: str | None, message: str, head: bool = False,
               extra: dict[str, str] | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._send(seen, status, body, headers, head)

    def _limited(self, seen: Seen, head: bool) -> bool:
        hub = self.owner.hub
        with hub.lock:
            for rl in hub.rate_limits:
                if rl.left > 0 and rl.when(seen):
                    rl.left -= 1
                    break
            else:
                return False
        if rl.status == 429:
            self._error(seen, 429, None, "rate limited", head, {"Retry-After": rl.retry_after or "1"})
        else:
            self._error(seen, rl.status, None, "refused", head)
        return True

    def _file(self, seen: Seen, data: bytes, etag: str, extra: dict[str, str], head: bool) -> None:
        if_match = self.headers.get("If-Match")
        if if_match is not None and if_match.strip() not in (etag, "*"):
            return self._error(seen, 412, None, "precondition failed", head)
        r = _byte_range(self.headers.get("Range"), len(data))
        headers = {"ETag": etag, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream", **extra}
        if r == "unsatisfiable":
            return self._send(seen, 416, b"", {**headers, "Content-Range": f"bytes */{len(data)}"}, head)
        if r is None:
            return self._send(seen, 200, data, headers, head)
        assert isinstance(r, tuple)
        start, end = r
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        self._send(seen, 206, data[start:end], headers, head)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_POST(self) -> None:
        self._serve(head=False, post=True)

    def _serve(self, head: bool, post: bool = False) -> None:
        seen = self._record()
        if self._limited(seen, head):
            return
        try:
            self.owner.serve(self, seen, head, post)
        except (BrokenPipeError, ConnectionResetError):
            pass


class HubServer:
    """The Hub (see the module docs). ``page_size``: tree entries per page;
    ``lfs_threshold``: files larger than this (and every ``*.parquet``) are LFS files
    served through the CDN."""

    name = "hub"

    def __init__(self, page_size: int = 1000, lfs_threshold: int = 10 << 20) -> None:
        self.page_size = page_size
        self.lfs_threshold = lfs_threshold
        self.first_byte_delay = 0.0
        self.signed_ttl = 3600.0
        self.opaque_signatures = False
        self.repos: dict[str, _Repo] = {}
        self.blobs: dict[str, bytes] = {}
        self.requests: list[Seen] = []
        self.rate_limits: list[_RateLimit] = []
        self.lock = threading.Lock()
        self.hub = self
        self.cdn = _Cdn(self)
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> HubServer:
        handler = type("HubHandler", (_Handler,), {"owner": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.cdn.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.cdn.stop()

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- content ---------------------------------------------------------------------
    def create(self, repo: str, private: bool = False, gated: bool = False, readers: set[str] | None = None) -> None:
        self.repos[repo] = _Repo(private=private, gated=gated, readers=set(readers or ()))

    def commit(self, repo: str, files: dict[str, bytes], branch: str = "main", replace: bool = False) -> str:
        """Commit ``files`` (added to the branch's current ones unless ``replace``) and
        move ``branch`` to the new commit; its sha is returned."""
        r = self.repos.setdefault(repo, _Repo())
        parent = r.branches.get(branch)
        tree = {} if replace or parent is None else dict(r.commits[parent])
        tree.update(files)
        sha = hashlib.sha1(repr((repo, parent, sorted((k, _git_oid(v)) for k, v in tree.items()))).encode()
                           + str(len(r.commits)).encode()).hexdigest()
        r.commits[sha] = tree
        r.branches[branch] = sha
        for data in tree.values():
            self.blobs[hashlib.sha256(data).hexdigest()] = data
        return sha

    def forget(self, repo: str, sha: str) -> None:
        """Drop a commit (a force-push and garbage collection)."""
        del self.repos[repo].commits[sha]

    def branches(self, repo: str) -> dict[str, str]:
        return dict(self.repos[repo].branches)

    def rate_limit(self, n: int, retry_after: str = "1", when: Callable[[Seen], bool] = lambda s: True) -> None:
        """Answer the next ``n`` requests that ``when`` accepts 429 with ``Retry-After``."""
        with self.lock:
            self.rate_limits.append(_RateLimit(n, retry_after, when))

    def refuse(self, n: int, status: int, when: Callable[[Seen], bool] = lambda s: True) -> None:
        """Answer the next ``n`` requests that ``when`` accepts with ``status``."""
        with self.lock:
            self.rate_limits.append(_RateLimit(n, None, when, status))

    def is_lfs(self, path: str, data: bytes) -> bool:
        return path.endswith(".parquet") or len(data) > self.lfs_threshold

    # -- requests --------------------------------------------------------------------
    def _auth(self, h: _Handler, seen: Seen, repo: str, head: bool) -> _Repo | None:
        r = self.repos.get(repo)
        if r is None:
            h._error(seen, 404, "RepoNotFound", "Repository not found", head)
            return None
        auth = h.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else None
        if r.private or r.gated:
            if token is None:
                if r.private:
                    h._error(seen, 401, "RepoNotFound", "Repository not found", head)
                else:
                    h._error(seen, 401, "GatedRepo", "Access to this dataset is restricted", head)
                return None
            if token not in r.readers:
                code = "GatedRepo" if r.gated else None
                h._error(seen, 403, code, "Access to this resource is restricted", head)
                return None
        return r

    def _commit_of(self, h: _Handler, seen: Seen, r: _Repo, rev: str, head: bool) -> str | None:
        sha = r.branches.get(rev, rev)
        if sha not in r.commits:
            h._error(seen, 404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
            return None
        return sha

    def _entry(self, path: str, tree: dict[str, bytes]) -> dict[str, Any]:
        if path in tree:
            data = tree[path]
            e: dict[str, Any] = {"type": "file", "oid": _git_oid(data), "size": len(data), "path": path}
            if self.is_lfs(path, data):
                e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            return e
        return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}

    def _listing(self, tree: dict[str, bytes], base: str, recursive: bool) -> list[str] | None:
        """Paths below directory ``base`` ('' for the root) in tree order (directories
        before the files inside them); ``None`` if ``base`` is no directory."""
        prefix = f"{base}/" if base else ""
        below = sorted(p for p in tree if p.startswith(prefix))
        if base and not below:
            return None
        out: list[str] = []
        seen_dirs: set[str] = set()
        for p in below:
            parts = p[len(prefix):].split("/")
            for depth in range(1, len(parts)):
                d = prefix + "/".join(parts[:depth])
                if d not in seen_dirs:
                    seen_dirs.add(d)
                    out.append(d)
                if not recursive:
                    break
            if recursive or len(parts) == 1:
                out.append(p)
        return out

    def serve(self, h: _Handler, seen: Seen, head: bool, post: bool) -> None:
        url = urlsplit(h.path)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        query = parse_qs(url.query)
        if parts[:2] == ["api", "datasets"] and len(parts) >= 4:
            repo = f"{parts[2]}/{parts[3]}"
            r = self._auth(h, seen, repo, head)
            if r is None:
                return
            rest = parts[4:]
            if not rest or rest[0] == "revision":
                rev = rest[1] if len(rest) > 1 else "main"
                sha = self._commit_of(h, seen, r, rev, head)
                if sha is None:
                    return
                info = {"_id": repo, "id": repo, "author": parts[2], "sha": sha, "private": r.private,
                        "gated": "auto" if r.gated else False, "disabled": False, "downloads": 0, "likes": 0,
                        "tags": [], "lastModified": "2026-11-28T00:00:00.000Z",
                        "siblings": [{"rfilename": p} for p in sorted(r.commits[sha])]}
                return h._send(seen, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)
            if rest[0] == "tree" and len(rest) >= 2:
                sha = self._commit_of(h, seen, r, rest[1], head)
                if sha is None:
                    return
                tree = r.commits[sha]
                base = "/".join(rest[2:]).strip("/")
                recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
                listing = self._listing(tree, base, recursive)
                if listing is None:
                    return h._error(seen, 404, "EntryNotFound", f"{base} does not exist on {rest[1]}", head)
                start = int(query.get("cursor", ["0"])[0])
                page = listing[start:start + self.page_size]
                headers = {"Content-Type": "application/json"}
                if start + self.page_size < len(listing):
                    nxt = dict(query)
                    nxt["cursor"] = [str(start + self.page_size)]
                    qs = "&".join(f"{k}={quote(v[0])}" for k, v in nxt.items())
                    headers["Link"] = f'<{self.endpoint}{url.path}?{qs}>; rel="next"'
                body = json.dumps([self._entry(p, tree) for p in page]).encode()
                return h._send(seen, 200, body, headers, head)
            if rest[0] == "paths-info" and len(rest) >= 2 and post:
                sha = self._commit_of(h, seen, r, rest[1], head)
                if sha is None:
                    return
                length = int(h.headers.get("Content-Length") or 0)
                form = parse_qs(h.rfile.read(length).decode())
                tree = r.commits[sha]
                dirs = {"/".join(p.split("/")[:i]) for p in tree for i in range(1, p.count("/") + 1)}
                found = [self._entry(p, tree) for p in form.get("paths", []) if p in tree or p in dirs]
                return h._send(seen, 200, json.dumps(found).encode(), {"Content-Type": "application/json"}, head)
            return h._error(seen, 404, None, "Not Found", head)
        if parts[:1] == ["datasets"] and len(parts) >= 6 and parts[3] == "resolve":
            repo = f"{parts[1]}/{parts[2]}"
            r = self._auth(h, seen, repo, head)
            if r is None:
                return
            sha = self._commit_of(h, seen, r, parts[4], head)
            if sha is None:
                return
            path = "/".join(parts[5:])
            data = r.commits[sha].get(path)
            if data is None:
                return h._error(seen, 404, "EntryNotFound", f"{path} does not exist", head)
            common = {"X-Repo-Commit": sha}
            if self.is_lfs(path, data):
                oid = hashlib.sha256(data).hexdigest()
                location = self.cdn.signed_url(oid)
                hdr = {**common, "Location": location, "X-Linked-Etag": f'"{oid}"',
                       "X-Linked-Size": str(len(data)), "ETag": f'"{oid}"'}
                return h._send(seen, 302, b"", hdr, head)
            return h._file(seen, data, f'"{_git_oid(data)}"', common, head)
        h._error(seen, 404, None, "Not Found", head)


class _Cdn:
    """The CDN the Hub redirects LFS files to (see the module docs)."""

    name = "cdn"

    def __init__(self, hub: HubServer) -> None:
        self.hub = hub
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        handler = type("CdnHandler", (_Handler,), {"owner": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @staticmethod
    def _signature(oid: str, expires: str) -> str:
        return hmac.new(_SIGNING_KEY, f"{oid}:{expires}".encode(), hashlib.sha256).hexdigest()

    def signed_url(self, oid: str) -> str:
        expires = str(int(time.time() + self.hub.signed_ttl))
        if self.hub.opaque_signatures:
            return f"{self.endpoint}/blobs/{oid}?token={expires}.{self._signature(oid, expires)}"
        return f"{self.endpoint}/blobs/{oid}?Expires={expires}&Signature={self._signature(oid, expires)}"

    def serve(self, h: _Handler, seen: Seen, head: bool, post: bool) -> None:
        url = urlsplit(h.path)
        query = parse_qs(url.query)
        parts = url.path.split("/")[1:]
        if h.headers.get("Authorization"):
            return h._error(seen, 400, None, "Only one auth mechanism allowed", head)
        if len(parts) != 2 or parts[0] != "blobs" or parts[1] not in self.hub.blobs:
            return h._error(seen, 404, None, "NoSuchKey", head)
        oid = parts[1]
        expires = query.get("Expires", [""])[0]
        signature = query.get("Signature", [""])[0]
        if "token" in query:
            expires, _, signature = query["token"][0].partition(".")
        good = hmac.compare_digest(signature, self._signature(oid, expires))
        if not good or not expires.isdigit() or int(expires) < time.time():
            return h._error(seen, 403, None, "AccessDenied", head)
        h._file(seen, self.hub.blobs[oid], f'"{oid}"', {}, head)


def main(argv: list[str] | None = None) -> None:
    """``python tests/support/hubserver.py --repo owner/name --dir DIR [--delay S]``: serve the
    files under ``DIR`` as one commit of ``owner/name`` until killed (for benchmarks,
    in a process of its own); prints the endpoint on the first line."""
    import argparse
    import os
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--delay", type=float, default=0.0, help="first-byte delay of every answer, seconds")
    args = ap.parse_args(argv)
    hub = HubServer()
    files = {}
    for root, _, names in os.walk(args.dir):
        for n in names:
            full = os.path.join(root, n)
            with open(full, "rb") as f:
                files[os.path.relpath(full, args.dir)] = f.read()
    hub.commit(args.repo, files)
    hub.first_byte_delay = args.delay
    hub.start()
    print(hub.endpoint, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    hub.stop()


if __name__ == "__main__":
    main()
