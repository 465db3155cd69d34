"""``youmu`` command line: ``youmu inspect FILE...`` and ``youmu index PATHS -o FILE``.

Example:
    $ youmu inspect data/part-0.parquet
    $ youmu index data/ -o data.youmu --columns input_ids
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np


def _quantiles(values: np.ndarray) -> str:
    if len(values) == 0:
        return "-"
    q = np.percentile(values, [0, 50, 90, 100]).astype(int)
    return f"min {q[0]:,}  p50 {q[1]:,}  p90 {q[2]:,}  max {q[3]:,}"


def inspect_file(path: str, out=None) -> int:
    """Print rows, row groups, columns, page-index presence, and per column the page
    count, page size and rows-per-page distribution, codecs and encodings."""
    out = out or sys.stdout  # looked up per call: sys.stdout may be replaced after import
    import pyarrow.parquet as pq

    import youmu
    from youmu._core import column_pages

    try:
        # every column's pages in one pass over the file (an index per column is
        # quadratic in the number of columns)
        columns = column_pages(path)
    except youmu.YoumuError as e:
        print(f"{path}: {e}", file=out)
        return 1
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as e:  # youmu reads it but pyarrow cannot: say so
        print(f"{path}: pyarrow cannot read the footer: {e}", file=out)
        return 1
    print(f"{path}", file=out)
    print(f"  rows {meta.num_rows:,}  row groups {meta.num_row_groups}  columns {meta.num_columns}  "
          f"created by {meta.created_by}", file=out)
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
    status = 0
    for info in columns:
        name = info["name"]
        line = f"  {name}: codec {'/'.join(sorted(codecs.get(name, {})))}; " \
               f"encodings {','.join(sorted(encodings.get(name, set())))}; " \
               f"offset index {'yes' if has_oi.get(name) else 'no'}"
        print(line, file=out)
        if "error" in info:
            print(f"      not readable by youmu: {info['error']}", file=out)
            status = 1
            continue
        how = []
        if info["row_groups_with_offset_index"]:
            how.append(f"{info['row_groups_with_offset_index']} rg from OffsetIndex")
        if info["row_groups_header_scanned"]:
            how.append(f"{info['row_groups_header_scanned']} rg header-scanned")
        if info["row_groups_merged_pages"]:
            how.append(f"{info['row_groups_merged_pages']} rg with pages merged at split rows")
        print(f"      pages {info['num_pages']:,} ({'; '.join(how) or 'no rows'})", file=out)
        print(f"      page bytes   {_quantiles(info['page_byte_sizes'])}", file=out)
        print(f"      rows / page  {_quantiles(info['page_num_rows'])}", file=out)
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


def build_index(paths: Sequence[str], output: str, columns: Sequence[str] | None, out=None) -> int:
    out = out or sys.stdout
    import youmu

    cb, close = _progress_bar("indexing")
    t0 = time.perf_counter()
    try:
        idx = youmu.PageIndex(list(paths), columns=list(columns) if columns else None, progress=cb)
    finally:
        close()
    dt = time.perf_counter() - t0
    idx.save(output)
    print(f"indexed {idx.num_files} files, {len(idx):,} pages, {idx.num_rows:,} rows in {dt:.2f}s "
          f"({idx.num_files / max(dt, 1e-9):.1f} files/s, {idx.table_bytes / max(len(idx), 1):.1f} bytes/page) "
          f"-> {output}", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="youmu", description="Page-granular Parquet tools")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_inspect = sub.add_parser("inspect", help="describe Parquet files page by page")
    p_inspect.add_argument("files", nargs="+")
    p_index = sub.add_parser("index", help="build and save a page index")
    p_index.add_argument("paths", nargs="+")
    p_index.add_argument("-o", "--output", required=True)
    p_index.add_argument("--columns", nargs="*", default=None)
    args = parser.parse_args(argv)
    import youmu

    if args.cmd == "inspect":
        return max((inspect_file(f) for f in args.files), default=0)
    try:
        return build_index(args.paths, args.output, args.columns)
    except youmu.YoumuError as e:
        print(f"youmu index: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
