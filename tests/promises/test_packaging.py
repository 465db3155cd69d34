"""Packaging promises: the core works without torch; the CLI entry point exists."""

from __future__ import annotations

import subprocess
import sys


def test_core_streams_and_pure_layers_do_not_import_torch() -> None:
    code = (
        "import sys, youmu, youmu.streams.rowstream, youmu.order.shuffle, youmu.order.sharding, youmu.state.contract, youmu.streams.rows, youmu.cli\n"
        "import youmu.streams.core, youmu.streams.parquet, youmu.streams.skips\n"
        "import youmu.mixture, youmu.distributed, youmu.batching, youmu.planning\n"
        "youmu.PageIndex; youmu.Permutation(10)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_parquet_stream_reads_and_resumes_without_torch(tmp_path) -> None:
    """The stream core and the Parquet stream (what a Ray source loader serves) read
    rows by pass, by window and by position, and resume, without importing torch."""
    code = (
        "import sys, pyarrow as pa, pyarrow.parquet as pq\n"
        "from youmu.streams.parquet import ParquetStream\n"
        "from youmu.order.resume import Level\n"
        f"path = {str(tmp_path / 't.parquet')!r}\n"
        "pq.write_table(pa.table({'x': list(range(40))}), path, row_group_size=4)\n"
        "s = ParquetStream(path, rank=0, world_size=2, buffer_size=8, seed=1, output='numpy')\n"
        "rows = [int(r['x']) for r in s]\n"
        "assert len(rows) == len(s) > 0 and [int(r['x']) for _, w in s.iter_windows() for _, r in w] == rows\n"
        "assert [int(r['x']) for r in s.rows_at([3, 0])] == [rows[3], rows[0]]\n"
        "t = ParquetStream(path, rank=0, world_size=1, buffer_size=8, seed=1, output='numpy')\n"
        "t.resume_after(0, [Level(2, (1, 1), ((5,), (7,)))])\n"
        "assert len(list(t)) == 40 - 12\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nothing_but_youmu_ray_imports_ray() -> None:
    """Ray is the optional extra ``youmu[ray]``: every other module imports without it."""
    code = (
        "import importlib, pkgutil, sys, warnings, youmu\n"
        "warnings.simplefilter('ignore')\n"
        "todo = [youmu]\n"
        "while todo:\n"  # walk_packages would import youmu.ray to list it
        "    pkg = todo.pop()\n"
        "    for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if m.name != 'youmu.ray':\n"
        "            mod = importlib.import_module(m.name)\n"
        "            todo += [mod] if m.ispkg else []\n"
        "youmu.PageIndex; youmu.LoaderUnavailableError\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_console_script_is_installed() -> None:
    out = subprocess.run([sys.executable, "-m", "youmu.cli", "--help"], capture_output=True, text=True, check=True)
    assert "inspect" in out.stdout and "index" in out.stdout
