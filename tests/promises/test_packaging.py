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
    from parquet_fixtures import write_ids

    path = write_ids(tmp_path / "t.parquet", 40, column="x", row_group_size=4)
    code = (
        "import sys\n"
        "from youmu.streams.parquet import ParquetStream\n"
        "from youmu.order.resume import Level\n"
        f"path = {str(path)!r}\n"
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


_NO_TORCH_MAP_AND_PACK = """
import json, sys
sys.modules['torch'] = None  # import torch (and torch.*) raises ImportError here
import numpy as np
from youmu.mixture import MixtureDataset
from youmu.ray.source import Source
from youmu.ray.source_actor import SourceLoader
from youmu.mixture.mapstream import MapStream, MixtureStream
from youmu.streams.packing import pack
from youmu.streams.parquet import ParquetStream
from youmu.streams.rows import RowDataset

path = sys.argv[1]
ids = lambda seqs: [s['input_ids'].tolist() for s in seqs]
out = {}
rows = RowDataset(path, columns=['input_ids', 'labels'], output='numpy')
out['map'] = [r['input_ids'].tolist() for r in MapStream(rows, rank=1, world_size=2, run=2)]
mix = MixtureDataset({'a': rows, 'b': list(range(7))}, {'a': 0.7, 'b': 0.3}, block_size=4, length=20, seed=3)
out['mixture'] = [x if isinstance(x, int) else x['input_ids'].tolist() for x in MixtureStream(mix, rank=0, world_size=2)]
parquet = lambda: ParquetStream(path, rank=0, world_size=1, columns=['input_ids', 'labels'], buffer_size=8, seed=1,
                                output='numpy')
packed = list(pack(parquet(), seq_len=8, eos_id=0, pad_id=1, label_column='labels'))
assert all(type(v) is np.ndarray for s in packed for v in s.values()), packed[0]
out['pack_parquet'] = [{k: v.tolist() for k, v in s.items()} for s in packed]
p = pack(MapStream(rows, rank=0, world_size=2), seq_len=5, eos_id=0)
it = iter(p)
head = [next(it) for _ in range(3)]
state = p.state_dict()
q = pack(MapStream(rows, rank=0, world_size=2), seq_len=5, eos_id=0)
q.load_state_dict(state)
out['pack_map'] = ids(head) + ids(q)
out['pack_map_state'] = repr(state)
loader = SourceLoader({'web': Source(stream=lambda r, w: MapStream(rows, rank=r, world_size=w))}, world_size=2)
recs = loader.records(0, [('web', 1, 0, 3)])[0]
out['source'] = [[r.position, r.docs] for r in recs] + [
    s['input_ids'].tolist() for s in loader.payloads(0, [('web', 1, [2, 0])])[0]]
assert 'torch' not in sys.modules or sys.modules['torch'] is None
print(json.dumps(out))
"""


def test_map_and_pack_streams_run_where_torch_cannot_be_imported(tmp_path) -> None:
    """A Ray source loader maps and packs without torch (a CUDA torch costs ~520 MB a
    process): where ``import torch`` fails, a ``MapStream`` over Parquet rows, a
    ``MixtureStream``, ``pack`` over a ``ParquetStream`` (labels and padding too) and
    over a ``MapStream`` (saved and resumed mid-epoch), and a ``Source`` serving a
    ``MapStream`` all run — and give exactly what youmu.torch's streams give, as numpy
    arrays, with the same states."""
    import json

    from parquet_fixtures import write_columns

    from youmu.mixture import MixtureDataset
    from youmu.ray.source import Source
    from youmu.ray.source_actor import SourceLoader
    from youmu.streams.rows import RowDataset
    from youmu.torch import MapStream, MixtureStream, YoumuDataset, pack

    path = str(tmp_path / "t.parquet")
    lengths = [3, 9, 1, 6, 4, 2, 7, 5, 8, 3, 2, 6]
    tokens = [list(range(10 * i + 1, 10 * i + 1 + n)) for i, n in enumerate(lengths)]
    write_columns(path, {"input_ids": tokens, "labels": [[-100] + t[1:] for t in tokens]}, row_group_size=3)
    got = subprocess.run([sys.executable, "-c", _NO_TORCH_MAP_AND_PACK, path], check=True, capture_output=True,
                         text=True)
    out = json.loads(got.stdout.strip().splitlines()[-1])

    ids = lambda seqs: [s["input_ids"].tolist() for s in seqs]  # noqa: E731
    rows = RowDataset(path, columns=["input_ids", "labels"], output="numpy")
    assert out["map"] == [r["input_ids"].tolist() for r in MapStream(rows, rank=1, world_size=2, run=2)]
    mix = MixtureDataset({"a": rows, "b": list(range(7))}, {"a": 0.7, "b": 0.3}, block_size=4, length=20, seed=3)
    assert out["mixture"] == [x if isinstance(x, int) else x["input_ids"].tolist()
                              for x in MixtureStream(mix, rank=0, world_size=2)]
    ds = YoumuDataset(path, rank=0, world_size=1, columns=["input_ids", "labels"], buffer_size=8, seed=1,
                      output="numpy")
    assert out["pack_parquet"] == [{k: v.tolist() for k, v in s.items()}
                                   for s in pack(ds, seq_len=8, eos_id=0, pad_id=1, label_column="labels")]
    p = pack(MapStream(rows, rank=0, world_size=2), seq_len=5, eos_id=0)
    it = iter(p)
    head = [next(it) for _ in range(3)]
    assert out["pack_map_state"] == repr(p.state_dict())
    assert out["pack_map"] == ids(head) + ids(it) and len(out["pack_map"]) > 4
    loader = SourceLoader({"web": Source(stream=lambda r, w: MapStream(rows, rank=r, world_size=w))}, world_size=2)
    recs = loader.records(0, [("web", 1, 0, 3)])[0]
    assert out["source"] == [[r.position, r.docs] for r in recs] + [
        s["input_ids"].tolist() for s in loader.payloads(0, [("web", 1, [2, 0])])[0]]


def _crate_features(*args: str) -> dict[str, str]:
    """``cargo tree``'s crates with their enabled features, for the build ``args`` name."""
    import shutil
    from pathlib import Path

    import pytest

    if shutil.which("cargo") is None:
        pytest.skip("cargo is not installed")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(["cargo", "tree", "--locked", "--offline", "-e", "normal,build", "-f", "{p}|{f}",
                          "--prefix", "none", *args], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cargo tree could not run offline: {out.stderr.strip()[-200:]}")
    crates: dict[str, str] = {}
    for line in out.stdout.splitlines():
        name, _, features = line.removesuffix(" (*)").partition("|")
        if not name.startswith("youmu "):
            crates[name] = features
    return crates


def test_cargo_test_and_maturin_build_shared_crates_with_one_feature_set() -> None:
    """Every crate both `cargo test` (dev-dependencies in) and maturin's build (the
    `python` feature) compile gets the same features in both, so the release build of the
    arrow stack is compiled once on a fresh machine, not once per build (Cargo.toml's
    feature-unification block names the union)."""
    tests = _crate_features("--features", "", "-e", "dev")
    python = _crate_features("--features", "python")
    differ = {name: (tests[name], python[name]) for name in tests.keys() & python.keys()
              if tests[name] != python[name]}
    assert not differ, f"crates built with other features by cargo test and by maturin (test, python): {differ}"
