"""``youmu`` command line: ``youmu inspect FILE...`` and ``youmu index PATHS -o FILE``.

Paths may be object-store URLs (``s3://bucket/prefix/``, ``gs://``, ``az://``,
``https://``), configured by the environment (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL``, ...) and ``-s KEY=VALUE`` storage options.

Example:
    $ youmu inspect data/part-0.parquet
    $ youmu index data/ -o data.youmu --columns input_ids
    $ youmu index s3://corpus/train/ -o train.youmu -s region=us-east-1
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Sequence

import numpy as np


def _quantiles(values: np.ndarray) -> str:
    if len(values) == 0:
        return "-"
    q = np.percentile(values, [0, 50, 90, 100]).astype(int)
    return f"min {q[0]:,}  p50 {q[1]:,}  p90 {q[2]:,}  max {q[3]:,}"


_URL_SCHEMES = ("s3://", "s3a://", "gs://", "az://", "adl://", "azure://", "abfs://", "abfss://", "http://", "https://")


def _is_url(path: str) -> bool:
    return path.lower().startswith(_URL_SCHEMES)


def inspect_file(path: str, out=None, storage_options: dict[str, str] | None = None) -> int:
    """Print rows, row groups, columns, page-index presence, and per column the page
    count, page size and rows-per-page distribution, codecs and encodings."""
    import pyarrow.parquet as pq

    import youmu

    out = out or sys.stdout  # looked up per call: a captured stream may have been swapped

    if _is_url(path):
        return _inspect_object(path, out, storage_options)

    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as e:  # pyarrow cannot parse it: let youmu say what is wrong
        try:
            youmu.PageIndex(path)
        except youmu.YoumuError as ye:
            print(f"{path}: {ye}", file=out)
            return 1
        print(f"{path}: pyarrow cannot read the footer: {e}", file=out)
        return 1
    print(f"{path}", file=out)
    print(f"  rows {meta.num_rows:,}  row groups {meta.num_row_groups}  columns {meta.num_columns}  "
          f"created by {meta.created_by}", file=out)
    names = meta.schema.to_arrow_schema().names
    codecs: dict[str, Counter] = {}
    encodings: dict[str, set] = {}
    has_oi: dict[str, int] = {}
    for rg in range(meta.num_row_groups):
        r = meta.row_group(rg)
        for c in range(r.num_columns):
            col = r.column(c)
            top = col.path_in_schema.split(".")[0]
            codecs.setdefault(top, Counter())[col.compression] += 1
            encodings.setdefault(top, set()).update(col.encodings)
            has_oi[top] = has_oi.get(top, 0) + int(col.has_offset_index)
    return _inspect_columns(path, names, codecs, encodings, has_oi, out, None)


def _inspect_object(url: str, out, storage_options: dict[str, str] | None) -> int:
    """``inspect`` for objects in a store: the same report, from the footers youmu reads
    (no second storage stack; a URL naming a prefix inspects every object under it)."""
    import youmu

    try:
        whole = youmu.PageIndex(url, storage_options=storage_options)
    except youmu.YoumuError as e:
        print(f"{url}: {e}", file=out)
        return 1
    status = 0
    for i, obj in enumerate(whole.files):
        info = whole.file_info(i)
        chunks = whole.column_chunks(i)
        names = whole.columns
        num_rg = info["num_row_groups"]
        print(f"{obj}", file=out)
        print(f"  rows {info['num_rows']:,}  row groups {num_rg}  columns {len(names)}  "
              f"created by {info.get('created_by')}  size {info['size']:,}  etag {info.get('etag')}", file=out)
        codecs: dict[str, Counter] = {}
        encodings: dict[str, set] = {}
        has_oi: dict[str, int] = {}
        for c in chunks:
            codecs.setdefault(c["column"], Counter())[c["codec"]] += 1
            encodings.setdefault(c["column"], set()).update(c["encodings"])
            has_oi[c["column"]] = has_oi.get(c["column"], 0) + int(c["offset_index"])
        status |= _inspect_columns(obj, names, codecs, encodings, has_oi, out, storage_options)
    return status


def _inspect_columns(path, names, codecs, encodings, has_oi, out, storage_options) -> int:
    import youmu

    status = 0
    for name in names:
        line = f"  {name}: codec {'/'.join(sorted(codecs.get(name, {})))}; " \
               f"encodings {','.join(sorted(encodings.get(name, set())))}; " \
               f"offset index {'yes' if has_oi.get(name) else 'no'}"
        try:
            idx = youmu.PageIndex(path, columns=[name], storage_options=storage_options)
            info = idx.file_info(0)
            rows = idx.page_num_rows()
            sizes = idx.page_byte_sizes()
            how = []
            if info["row_groups_with_offset_index"]:
                how.append(f"{info['row_groups_with_offset_index']} rg from OffsetIndex")
            if info["row_groups_header_scanned"]:
                how.append(f"{info['row_groups_header_scanned']} rg header-scanned")
            if info["row_groups_merged_pages"]:
                how.append(f"{info['row_groups_merged_pages']} rg with pages merged at split rows")
            print(line, file=out)
            print(f"      pages {len(idx):,} ({'; '.join(how) or 'no rows'})", file=out)
            print(f"      page bytes   {_quantiles(sizes)}", file=out)
            print(f"      rows / page  {_quantiles(rows)}", file=out)
        except youmu.YoumuError as e:
            print(line, file=out)
            print(f"      not readable by youmu: {e}", file=out)
            status = 1
    return status


def _progress_bar(total_hint: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is optional
        def cb(done: int, total: int) -> None:
            print(f"\r{total_hint}: {done}/{total} files", end="", file=sys.stderr, flush=True)
        return cb, lambda: print(file=sys.stderr)
    bar = tqdm(total=0, unit="file", desc=total_hint)

    def cb(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.n = done
        bar.refresh()

    return cb, bar.close


def build_index(
    paths: Sequence[str],
    output: str,
    columns: Sequence[str] | None,
    out=None,
    storage_options: dict[str, str] | None = None,
) -> int:
    import youmu

    out = out or sys.stdout

    cb, close = _progress_bar("indexing")
    t0 = time.perf_counter()
    stats0 = youmu.io_stats()
    try:
        idx = youmu.PageIndex(
            list(paths), columns=list(columns) if columns else None, progress=cb, storage_options=storage_options
        )
    finally:
        close()
    dt = time.perf_counter() - t0
    idx.save(output)
    requests = youmu.io_stats()["remote_requests"] - stats0["remote_requests"]
    remote = f", {requests / max(idx.num_files, 1):.2f} GETs/object" if idx.is_remote else ""
    print(f"indexed {idx.num_files} files, {len(idx):,} pages, {idx.num_rows:,} rows in {dt:.2f}s "
          f"({idx.num_files / max(dt, 1e-9):.1f} files/s, {idx.table_bytes / max(len(idx), 1):.1f} bytes/page"
          f"{remote}) -> {output}", file=out)
    for path, why in idx.skipped:
        print(f"skipped {path}: {why}", file=out)
    return 0


def _storage_options(pairs: Sequence[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    opts = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise SystemExit(f"youmu: storage option {p!r} is not KEY=VALUE")
        opts[key] = value
    return opts


def main(argv: Sequence[str] | None = None) -> int:
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

    opts = _storage_options(args.storage_option)
    if args.cmd == "inspect":
        return max((inspect_file(f, storage_options=opts) for f in args.files), default=0)
    try:
        return build_index(args.paths, args.output, args.columns, storage_options=opts)
    except youmu.YoumuError as e:
        print(f"youmu index: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
