"""Smoke test run by ``tests/system/test_wheel.py`` inside a clean virtual environment where
only the built wheel (and its declared dependencies) is installed, from a directory
outside the source tree. It must pass with nothing else on the path: no torch, no
source checkout."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import youmu
import youmu._core

here = Path.cwd()
assert "site-packages" in youmu.__file__, f"youmu imported from {youmu.__file__}, not the installed wheel"
assert youmu._core.__file__.endswith(".abi3.so"), youmu._core.__file__
files = importlib.resources.files("youmu")
for name in ("py.typed", "_core.pyi"):
    assert files.joinpath(name).is_file(), f"the wheel lacks youmu/{name}"

with tempfile.TemporaryDirectory() as d:
    path = Path(d) / "t.parquet"
    # written here: this script runs outside the tree, where tests/support is not importable
    pq.write_table(pa.table({"input_ids": [[i, i + 1] for i in range(100)]}), path, row_group_size=25)
    idx = youmu.PageIndex(str(path))
    assert idx.num_rows == 100 and len(idx) >= 4
    assert idx.read_page(1).column(0).to_pylist()[0] == [25, 26]
    rows = list(youmu.RowStream(idx, shuffle="page", buffer_size=30, seed=1).iter_tables())
    assert sorted(r[0] for t in rows for r in t.column(0).to_pylist()) == list(range(100))
    idx.save(str(Path(d) / "t.youmu"))
    assert youmu.PageIndex.load(str(Path(d) / "t.youmu")).num_rows == 100
    out = subprocess.run([sys.executable, "-m", "youmu.cli", "inspect", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr

import youmu.batching  # noqa: E402,F401 - pure layers import without torch
import youmu.distributed  # noqa: E402,F401
import youmu.planning  # noqa: E402,F401

assert "torch" not in sys.modules, "a torch-free layer imported torch"
try:
    youmu.PageIndex(str(here / "missing.parquet"))
except youmu.YoumuError as e:
    assert isinstance(e, OSError)
else:
    raise AssertionError("a missing file must raise")
print("wheel smoke test passed:", youmu.__version__, youmu._core.__file__)
