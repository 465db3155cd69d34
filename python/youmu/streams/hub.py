"""Datasets on the Hugging Face Hub as youmu paths:
``hf://datasets/<owner>/<name>[@<revision>]/<path or glob>``, wherever a path goes
(:class:`youmu.PageIndex`, :class:`youmu.RowDataset`, the datasets and loaders built
from paths, Ray sources, ``youmu index`` / ``youmu inspect``).

The Hub is asked through ``huggingface_hub`` (imported on first use; ``import youmu``
does not import it), so ``HF_ENDPOINT`` and ``HF_TOKEN`` (or the token ``hf auth
login`` saved) apply as they do for every Hugging Face library:

* the revision (``main`` when none is given; a branch, tag or commit) is resolved to
  its commit once, when the path is expanded, and every file becomes the resolve URL of
  that commit (``{endpoint}/datasets/{repo}/resolve/{commit}/{file}``). The index, its
  saved form and every state record it, so a branch that moves while a job trains
  changes nothing: the pinned commit keeps being read (or, if the Hub no longer has it,
  reads fail with :class:`youmu.StaleIndexError`).
* the files are found by listing the repository's tree, by the rules of local
  directories and object-store prefixes (hidden names skipped, ``*.parquet`` /
  ``*.parq`` / ``*.pq``, globs matched the same way); pages are then read by the
  native core as ranged GETs on those URLs, following the Hub's redirects to its CDN,
  conditional on each file's ETag. The CDN's signed URL is remembered per file (one
  round trip a page, not two) until it says it expires or the CDN refuses it, when the
  Hub is asked again.
* which URLs get the token: every ``http(s)://`` URL on the Hub's own scheme, host and
  port (:func:`endpoint`: ``HF_ENDPOINT``, else ``https://huggingface.co``), wherever a
  path goes and however it was written: the resolve URLs an ``hf://`` path stands for,
  a resolve URL typed by hand or copied from the Hub's website
  (``https://huggingface.co/datasets/<owner>/<name>/resolve/<revision>/<file>``, the
  data's or a saved index's), and the files of a saved or pickled index. The native core
  finds the token as ``huggingface_hub`` does (``HF_TOKEN``, else
  ``HUGGING_FACE_HUB_TOKEN``, else the file ``hf auth login`` wrote: ``HF_TOKEN_PATH``,
  else ``$HF_HOME/token``; none when ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set). No other
  host is ever sent it: not an ``s3://`` or other ``http(s)://`` store in the same
  index, not the CDN a redirect leads to.
* credentials the ``storage_options`` give win over the environment's:
  ``{"bearer_token": ...}`` (or ``bearer_token_env`` / ``bearer_token_file``: where to
  read one), or Basic ``username``/``password`` (or user info in the URL). The
  listing follows the same rule: it sends the token the options name, and no token at
  all where they give other credentials or a token that cannot be read (the Hub's API
  takes no Basic credentials), never the environment's instead.
* the token is never copied into the index, a state or a pickle, nor where it was
  found: each process (a DataLoader worker, a Ray actor, a job loading a saved index)
  finds its own when it first reads, and no message shows it. An explicit
  ``bearer_token`` option travels with pickles, like any other explicit credential.
* ``429 Too Many Requests`` answers are waited out as their ``Retry-After`` asks,
  listing and reads alike.

Hub errors arrive as youmu's: a missing repository is :class:`youmu.BucketNotFoundError`,
a missing revision or file :class:`youmu.ObjectNotFoundError`, a private or gated one
without a token that may read it :class:`youmu.StorageAuthError`, each naming the
``hf://`` URL.

Example:
    >>> parse_hf_url("hf://datasets/HuggingFaceFW/fineweb@main/data/*.parquet")
    HubPath(repo='HuggingFaceFW/fineweb', revision='main', path='data/*.parquet')
    >>> is_hf_url("hf://datasets/a/b") and not is_hf_url("s3://b/k")
    True
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from youmu._internal.hub_urls import RESOLVE_URL
from youmu.errors import (
    BucketNotFoundError,
    InvalidArgumentError,
    ObjectNotFoundError,
    RetriesExhaustedError,
    StorageAuthError,
    StorageError,
)

__all__ = ["HubPath", "is_hf_url", "parse_hf_url", "endpoint", "expand_paths", "pinned_commits"]

_T = TypeVar("_T")
_DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclass(frozen=True)
class HubPath:
    """An ``hf://`` URL taken apart: ``repo`` (``owner/name``), ``revision`` (as
    written; ``main`` when none was) and ``path`` (a file, directory or glob inside the
    repository; empty for all of it)."""

    repo: str
    revision: str
    path: str


def is_hf_url(spec: Any) -> bool:
    """Whether ``spec`` is an ``hf://`` URL (any case of the scheme)."""
    return isinstance(spec, str) and spec[:5].lower() == "hf://"


def parse_hf_url(url: str) -> HubPath:
    """``url`` taken apart (see :class:`HubPath`); a revision holding ``/`` (``refs/pr/1``)
    is written percent-encoded (``@refs%2Fpr%2F1``), as ``huggingface_hub`` quotes it.

    >>> parse_hf_url("hf://datasets/o/n@refs%2Fpr%2F1")
    HubPath(repo='o/n', revision='refs/pr/1', path='')
    """
    if not is_hf_url(url):
        raise InvalidArgumentError(f"{url!r} is not an hf:// URL")
    rest = url[5:]
    kind, _, rest = rest.partition("/")
    if kind != "datasets":
        raise InvalidArgumentError(
            f"{url!r}: only dataset repositories are read (hf://datasets/<owner>/<name>[@revision]/<path>), "
            f"not {kind!r}")
    parts = rest.split("/", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise InvalidArgumentError(f"{url!r} names no repository: write hf://datasets/<owner>/<name>[@revision]/<path>")
    owner, name = parts[0], parts[1]
    path = parts[2] if len(parts) == 3 else ""
    name, at, revision = name.partition("@")
    if at and not revision:
        raise InvalidArgumentError(f"{url!r}: an empty revision after '@'")
    if not name:
        raise InvalidArgumentError(f"{url!r} names no repository: write hf://datasets/<owner>/<name>[@revision]/<path>")
    return HubPath(repo=f"{owner}/{name}", revision=unquote(revision) if at else "main", path=path)


def endpoint() -> str:
    """The Hub's address: ``HF_ENDPOINT`` as set now (``huggingface_hub`` reads it once,
    at its import), else ``https://huggingface.co``: what listings ask, and the one
    host the native core sends the Hub's token to."""
    return (os.environ.get("HF_ENDPOINT") or _DEFAULT_ENDPOINT).rstrip("/")


def _listing_token(options: Mapping[str, Any]) -> str | bool | None:
    """The token a listing sends, by the rule the native core's reads follow: the one
    ``storage_options`` name (``bearer_token``, ``bearer_token_env``,
    ``bearer_token_file``); ``False`` (none at all) when they give credentials but no
    usable token (Basic ``username``/``password``, a token variable that is not set, a
    token file that cannot be read: the reads then say why, naming the option), so the
    environment's token never goes where the options chose other credentials; ``None``
    when they give none, letting ``huggingface_hub`` find its own."""
    if options.get("bearer_token") is not None:
        return str(options["bearer_token"]).strip() or False
    if options.get("bearer_token_env") is not None:
        return os.environ.get(str(options["bearer_token_env"]), "").strip() or False
    if options.get("bearer_token_file") is not None:
        try:
            with open(str(options["bearer_token_file"])) as f:
                return f.read().strip() or False
        except OSError:
            return False
    if any(options.get(k) is not None for k in ("username", "password")):
        return False
    return None


def _status(e: BaseException) -> int | None:
    response = getattr(e, "response", None)
    return getattr(response, "status_code", None)


def _retry_after(e: BaseException) -> float | None:
    response = getattr(e, "response", None)
    raw = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
    try:
        secs = float(raw) if raw is not None else None
    except ValueError:
        return None
    return secs if secs is not None and secs >= 0 else None


def _hub_call(what: str, call: Callable[[], _T]) -> _T:
    """``call()`` (one Hub API request, or a listing's pages), with 429 and 5xx answers
    retried as youmu retries reads (``retries`` within ``retry_timeout``; ``Retry-After``
    followed where given), and Hub errors turned into youmu's naming ``what``."""
    from huggingface_hub import errors as hf

    from youmu._core import io_options, redact

    io = io_options()
    start, tries = time.monotonic(), 0
    while True:
        try:
            return call()
        except hf.HfHubHTTPError as e:
            status = _status(e)
            transient = status == 429 or (status is not None and status >= 500)
            pause = _retry_after(e) if status == 429 else None
            if pause is None:
                pause = min(0.1 * 2 ** tries, 5.0)
            left = float(io["retry_timeout"]) - (time.monotonic() - start)
            if transient and tries < int(io["retries"]) and pause <= left:
                tries += 1
                time.sleep(pause)
                continue
            raise _youmu_error(what, e, status, tries) from None
        except _transport_errors(hf) as e:  # the endpoint did not answer (refused, DNS, timeout)
            raise StorageError(redact(f"{what}: the Hub at {endpoint()} (HF_ENDPOINT) did not answer: "
                                      f"{type(e).__name__}: {e}")) from None


def _transport_errors(hf: Any) -> tuple[type[BaseException], ...]:
    """``OSError`` (``requests``' errors derive from it) and the base error of the HTTP
    library ``huggingface_hub`` is built on, found as a base of its ``HfHubHTTPError``:
    httpx's connection errors (``ConnectError``, ``UnsupportedProtocol``, timeouts)
    derive from that, not from ``OSError``."""
    own = tuple(c for c in hf.HfHubHTTPError.__mro__[1:]
                if issubclass(c, BaseException) and c not in (OSError, Exception, BaseException))
    return (OSError, *own)


def _youmu_error(what: str, e: BaseException, status: int | None, tries: int) -> StorageError:
    from huggingface_hub import errors as hf

    from youmu._core import redact

    hint = " (set HF_TOKEN, or log in with `hf auth login`, with a token that may read it)"
    if isinstance(e, hf.GatedRepoError):
        return StorageAuthError(f"{what}: the repository is gated and this token has not been granted access ({status})"
                                f"{hint}")
    if status in (401, 403):
        # the Hub answers 401 for a private repository without a token, and for one that does not exist
        return StorageAuthError(f"{what}: not found, or private and not readable without a token ({status}){hint}"
                                if status == 401 else f"{what}: this token may not read it ({status}){hint}")
    if isinstance(e, hf.RevisionNotFoundError):
        return ObjectNotFoundError(f"{what}: no such revision (branch, tag or commit) ({status})")
    if isinstance(e, hf.EntryNotFoundError):
        return ObjectNotFoundError(f"{what}: no such file or directory in the repository ({status})")
    if isinstance(e, hf.RepositoryNotFoundError) or status == 404:
        return BucketNotFoundError(f"{what}: no such dataset repository ({status})")
    if status == 429 or (status is not None and status >= 500):
        return RetriesExhaustedError(f"{what}: the Hub answered {status} after {tries} retries")
    return StorageError(redact(f"{what}: the Hub answered {status}: {e}"))


def _checked_endpoint(url: str) -> str:
    """:func:`endpoint`, where ``url`` (an ``hf://`` URL) is read from; refused (naming
    ``url`` and ``HF_ENDPOINT``, its credentials blanked) unless
    it is an ``http(s)://host[:port][/path]`` address: anything else fails deep inside the
    HTTP library, with its own exception types."""
    from urllib.parse import urlsplit

    from youmu._core import redact

    address = endpoint()
    try:
        parts = urlsplit(address)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query and not parts.fragment
        parts.port  # noqa: B018  (a port that is no number raises here)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidArgumentError(
            f"{url}: HF_ENDPOINT={redact(address)!r} is not a usable Hub address: write http(s)://host[:port], "
            f"e.g. {_DEFAULT_ENDPOINT}")
    return address


def _api(url: str, options: Mapping[str, Any]) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=_checked_endpoint(url), token=_listing_token(options))


def _resolve_one(url: str, options: Mapping[str, Any]) -> list[str]:
    """The resolve URLs, pinned to one commit, of the files ``url`` names."""
    from youmu._core import listed_data, listing_prefix

    where = parse_hf_url(url)
    api = _api(url, options)
    info = _hub_call(f"{url} (revision {where.revision!r})",
                     lambda: api.dataset_info(where.repo, revision=where.revision))
    commit = str(info.sha)
    key = where.path
    prefix = listing_prefix(key)
    if prefix is None:
        files = [key]
    else:
        def listing() -> list[str]:
            tree = api.list_repo_tree(where.repo, path_in_repo=prefix.rstrip("/") or None, recursive=True,
                                      revision=commit, repo_type="dataset")
            return [entry.path for entry in tree if type(entry).__name__ == "RepoFile"]

        try:
            listed = _hub_call(f"{url} (listing {prefix or '/'!s} at commit {commit})", listing)
        except ObjectNotFoundError:
            listed = []
        files = listed_data(key, listed)
        if not files:
            if key and not key.endswith("/") and not any(c in key for c in "*?["):
                files = [key]  # a file named without a data extension: its reads say if it is there
            else:
                raise InvalidArgumentError(f"{url} holds no Parquet files (*.parquet, *.parq, *.pq; hidden names "
                                           f"skipped) at commit {commit}")
    base = f"{endpoint()}/datasets/{where.repo}/resolve/{commit}/"
    return [base + quote(f, safe="/") for f in files]


def expand_paths(paths: Sequence[str], storage_options: Mapping[str, Any] | None = None
                 ) -> tuple[list[str], list[tuple[str, str]]]:
    """``paths`` with each ``hf://`` URL replaced by the resolve URLs of its files (at
    the commit its revision names now), and the ``storage_options`` that reach them (the
    given ones: the native core adds the Hub's token where the Hub's host is read). The
    native core's Hub scheme (its storage registry's ``hf`` entry) calls this for each
    ``hf://`` path it is given, so ``hf://`` works wherever a path does.

    >>> expand_paths(["data/a.parquet"], {})
    (['data/a.parquet'], [])
    """
    options = dict(storage_options or {})
    out: list[str] = []
    for p in paths:
        out.extend(_resolve_one(p, options) if is_hf_url(p) else [p])
    return out, [(k, str(v)) for k, v in options.items()]


def pinned_commits(urls: Sequence[str]) -> list[str]:
    """The Hub commits (``owner/name@sha``) that resolve URLs among ``urls`` are pinned
    to, sorted.

    >>> pinned_commits(["https://huggingface.co/datasets/o/n/resolve/" + "a" * 40 + "/x.parquet", "/data/y.parquet"])
    ['o/n@aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa']
    """
    found = {f"{m.group(1)}@{m.group(2)}" for u in urls if (m := RESOLVE_URL.search(u))}
    return sorted(found)
