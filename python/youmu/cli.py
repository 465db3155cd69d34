"""``youmu`` command line: ``youmu inspect FILE...`` and ``youmu index PATHS -o FILE``.

Paths may be object-store URLs (``s3://bucket/prefix/``, ``gs://``, ``az://``,
``https://``), configured by the environment (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL``, ...) and ``-s KEY=VALUE`` storage options. ``inspect`` reads
each file or object once for all its columns (``youmu._core.column_pages``), through
the same storage layer as an index: a local file with ``pread``, an object with a tail
GET plus one round of GETs for the column chunks a header scan needs.

Shell usage::

    $ youmu inspect data/part-0.parquet
    $ youmu inspect s3://corpus/train/ -s region=us-east-1
    $ youmu index data/ -o data.youmu --columns input_ids
    $ youmu index s3://corpus/train/ -o train.youmu -s region=us-east-1

Example (the report of a small file, and how ``-s`` options are parsed):

    >>> import io, os, tempfile
    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"input_ids": [[1, 2], [3]]}), path, write_page_index=True)
    >>> out = io.StringIO()
    >>> inspect_file(path, out=out)
    0
    >>> print(out.getvalue().split("\\n", 1)[1])  # doctest: +ELLIPSIS
      rows 2  row groups 1  columns 1  created by parquet-cpp-arrow version ...
      input_ids: codec SNAPPY; encodings ...; offset index yes
          pages 1 (1 rg from OffsetIndex)
          page bytes   min ...
          rows / page  min 2  p50 2  p90 2  max 2
    <BLANKLINE>
    >>> _storage_options(["region=us-east-1", "endpoint=http://127.0.0.1:9000"])
    {'region': 'us-east-1', 'endpoint': 'http://127.0.0.1:9000'}
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import numpy as np

__all__ = ["build_index", "inspect_file", "main"]


def _quantiles(values: np.ndarray) -> str:
    if len(values) == 0:
        return "-"
    q = np.percentile(values, [0, 50, 90, 100]).astype(int)
    return f"min {q[0]:,}  p50 {q[1]:,}  p90 {q[2]:,}  max {q[3]:,}"


def _message(path: str, error: object) -> str:
    """``path: error``, without naming the path twice (youmu's messages start with it),
    credentials blanked out (youmu's one redaction, ``youmu._internal.redaction.redact``)."""
    from youmu._internal.redaction import redact

    path, text = redact(path), redact(str(error))
    return text if text.startswith(path) else f"{path}: {text}"


def inspect_file(path: str, out: TextIO | None = None, storage_options: Mapping[str, str] | None = None) -> int:
    """Print, per file or object under ``path`` (a file, directory, glob, object URL or
    prefix): rows, row groups, columns, creator, and per top-level column its codecs,
    encodings, OffsetIndex presence and the page count, page size and rows-per-page
    distribution youmu would index. Returns 1 if something could not be read."""
    import youmu
    from youmu._core import column_pages

    out = out or sys.stdout  # looked up per call: a captured stream may have been swapped
    try:
        # every column's pages in one pass over each file (an index per column is
        # quadratic in the number of columns)
        files = column_pages(path, storage_options=dict(storage_options) if storage_options else None)
    except youmu.YoumuError as e:
        print(_message(path, e), file=out)
        return 1
    status = 0
    for f in files:
        name = str(f["path"])
        if "skipped" in f:
            print(_message(f"skipped {name}", f["skipped"]), file=out)
            continue
        if "error" in f:
            print(_message(name, f["error"]), file=out)
            status = 1
            continue
        status |= _report(f, out)
    return status


def _report(f: dict[str, Any], out: TextIO) -> int:
    from youmu._internal.redaction import redact

    print(redact(str(f["path"])), file=out)
    remote = ""
    if f["etag"] is not None or f["requests"]:
        remote = f"  size {f['size']:,}  etag {f['etag']}  GETs {f['requests']}"
    print(f"  rows {f['num_rows']:,}  row groups {f['num_row_groups']}  columns {f['num_columns']}  "
          f"created by {f['created_by']}{remote}", file=out)
    status = 0
    for c in f["columns"]:
        print(f"  {c['name']}: codec {'/'.join(c['codecs'])}; encodings {','.join(c['encodings'])}; "
              f"offset index {'yes' if c['chunks_with_offset_index'] else 'no'}", file=out)
        if "error" in c:
            print(f"      not readable by youmu: {c['error']}", file=out)
            status = 1
            continue
        how = []
        if c["row_groups_with_offset_index"]:
            how.append(f"{c['row_groups_with_offset_index']} rg from OffsetIndex")
        if c["row_groups_header_scanned"]:
            how.append(f"{c['row_groups_header_scanned']} rg header-scanned")
        if c["row_groups_merged_pages"]:
            how.append(f"{c['row_groups_merged_pages']} rg with pages merged at split rows")
        print(f"      pages {c['num_pages']:,} ({'; '.join(how) or 'no rows'})", file=out)
        print(f"      page bytes   {_quantiles(c['page_byte_sizes'])}", file=out)
        print(f"      rows / page  {_quantiles(c['page_num_rows'])}", file=out)
    return status


def _progress_bar(total_hint: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A progress callback for index builds and a function that ends the display
    (tqdm's bar when installed, else a line on stderr)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is optional

        def plain(done: int, total: int) -> None:
            print(f"\r{total_hint}: {done}/{total} files", end="", file=sys.stderr, flush=True)

        return plain, lambda: print(file=sys.stderr)
    bar = tqdm(total=0, unit="file", desc=total_hint)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.n = done
        bar.refresh()

    return update, bar.close


def build_index(
    paths: Sequence[str],
    output: str,
    columns: Sequence[str] | None,
    out: TextIO | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> int:
    """Index ``paths`` (files, directories, globs, object URLs or prefixes) and save the
    index to ``output`` (a path, or an object URL); print what was indexed, GETs per
    object for object stores, and the entries discovery skipped."""
    import youmu
    from youmu._internal.redaction import redact

    out = out or sys.stdout  # looked up per call, as in inspect_file

    cb, close = _progress_bar("indexing")
    t0 = time.perf_counter()
    stats0 = youmu.io_stats()
    try:
        idx = youmu.PageIndex(
            list(paths),
            columns=list(columns) if columns else None,
            progress=cb,
            storage_options=dict(storage_options) if storage_options else None,
        )
    finally:
        close()
    dt = time.perf_counter() - t0
    idx.save(output)
    requests = youmu.io_stats()["remote_requests"] - stats0["remote_requests"]
    remote = f", {requests / max(idx.num_files, 1):.2f} GETs/object" if idx.is_remote else ""
    print(f"indexed {idx.num_files} files, {len(idx):,} pages, {idx.num_rows:,} rows in {dt:.2f}s "
          f"({idx.num_files / max(dt, 1e-9):.1f} files/s, {idx.table_bytes / max(len(idx), 1):.1f} bytes/page"
          f"{remote}) -> {redact(output)}", file=out)
    for path, why in idx.skipped:
        print(redact(f"skipped {path}: {why}"), file=out)
    return 0


def _storage_options(pairs: Sequence[str] | None) -> dict[str, str] | None:
    """``-s KEY=VALUE`` arguments as a ``storage_options`` dict (``None`` for none)."""
    if not pairs:
        return None
    opts = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise SystemExit(f"youmu: storage option {p!r} is not KEY=VALUE")
        opts[key] = value
    return opts


#: The exit status of a command whose reader went away (``| head``): what a Unix tool
#: killed by SIGPIPE reports to its shell (128 + 13).
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """The ``youmu`` command (``argv`` defaults to ``sys.argv[1:]``); returns the exit code.

    A reader that stops early (``youmu inspect ... | head``) ends the command quietly
    with :data:`EXIT_BROKEN_PIPE`, as ``cat`` or ``grep`` end, not with a traceback.
    """
    try:
        code = _run(argv)
        sys.stdout.flush()  # inside the guard: the interpreter's own flush at exit would print the error
    except BrokenPipeError:
        # nothing more can be written; pointing stdout at /dev/null keeps the flush at
        # exit from reporting the closed pipe (the recipe of Python's signal docs)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


def _run(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="youmu", description="Page-granular Parquet tools")
    sub = parser.add_subparsers(dest="cmd", required=True)
    so_help = "object-store option KEY=VALUE (endpoint, region, access_key_id, ...); repeatable"
    p_inspect = sub.add_parser("inspect", help="describe Parquet files (or objects) page by page")
    p_inspect.add_argument("files", nargs="+")
    p_inspect.add_argument("-s", "--storage-option", action="append", metavar="KEY=VALUE", help=so_help)
    p_index = sub.add_parser("index", help="build and save a page index")
    p_index.add_argument("paths", nargs="+")
    p_index.add_argument("-o", "--output", required=True)
    p_index.add_argument("--columns", nargs="*", default=None)
    p_index.add_argument("-s", "--storage-option", action="append", metavar="KEY=VALUE", help=so_help)
    args = parser.parse_args(argv)
    import youmu
    from youmu._internal.redaction import redact

    opts = _storage_options(args.storage_option)
    if args.cmd == "inspect":
        return max((inspect_file(f, storage_options=opts) for f in args.files), default=0)
    try:
        return build_index(args.paths, args.output, args.columns, storage_options=opts)
    except youmu.YoumuError as e:
        print(f"youmu index: {redact(str(e))}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
