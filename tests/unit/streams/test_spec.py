"""The stream spec (:mod:`youmu.streams.spec`): a Parquet source's settings are checked once,
by the spec, and every reader of a Parquet source — ``YoumuDataset`` in DataLoader
workers, the Ray ``Source`` / ``ParquetStream`` in loader actors — is a wrapper over it:
the same settings give equal specs, equal descriptions and identical streams, and the
wrappers hold no setting checks and build no ``RowStream`` of their own."""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from parquet_fixtures import write_token_rows

import youmu
from youmu.errors import ArgumentTypeError, InvalidArgumentError
from youmu.streams.rowstream import RowStream, window_layout
from youmu.streams.spec import SETTINGS, StreamLayout, StreamSpec, describe_paths
from youmu.torch import YoumuDataset

PACKAGE = Path(youmu.__file__).parent
N_ROWS = 700


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    p = str(tmp_path_factory.mktemp("spec") / "rows.parquet")
    write_token_rows(p, [i % 7 + 1 for i in range(N_ROWS)], id_first=True, column="tokens", dtype=np.int64,
                     row_group_size=23)
    return p


def _ray_source() -> Any:
    pytest.importorskip("ray")
    from youmu.ray import Source

    return Source


# -- validation, once ---------------------------------------------------------------------------
BAD = [
    ({"shuffle": "pages"}, InvalidArgumentError, "shuffle"),
    ({"shuffle": 3}, ArgumentTypeError, "shuffle"),
    ({"buffer_size": 0}, InvalidArgumentError, "buffer_size"),
    ({"buffer_size": 20.0}, ArgumentTypeError, "buffer_size"),
    ({"seed": -1}, InvalidArgumentError, "seed"),
    ({"seed": 1 << 64}, InvalidArgumentError, "seed"),
    ({"seed": 1.5}, ArgumentTypeError, "seed"),
    ({"transform": 3}, ArgumentTypeError, "transform"),
    ({"drop_last": "yes"}, ArgumentTypeError, "drop_last"),
    ({"output": "pandas"}, InvalidArgumentError, "output"),
    ({"memory_budget": 0}, InvalidArgumentError, "memory_budget"),
    ({"memory_budget": 1.5e9}, ArgumentTypeError, "memory_budget"),
    ({"read_ahead": -1}, InvalidArgumentError, "read_ahead"),
    ({"read_ahead": 1.0}, ArgumentTypeError, "read_ahead"),
    ({"page_slices": 0}, InvalidArgumentError, "page_slices"),
    ({"page_slices": 65}, InvalidArgumentError, "page_slices"),
    ({"page_slices": 2, "shuffle": "row"}, InvalidArgumentError, "page_slices"),
    ({"columns": "id"}, ArgumentTypeError, "columns"),
    ({"columns": ["id", 1]}, ArgumentTypeError, "columns"),
    ({"columns": []}, InvalidArgumentError, "columns"),
    ({"storage_options": "endpoint=x"}, ArgumentTypeError, "storage_options"),
    ({"storage_options": {"endpoint": object()}}, ArgumentTypeError, "storage_options"),
]


@pytest.mark.parametrize(("kwargs", "error", "name"), BAD)
def test_the_spec_rejects_each_bad_setting_naming_it(kwargs: dict[str, Any], error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        StreamSpec(**kwargs)


@pytest.mark.parametrize(("kwargs", "error", "name"), BAD)
def test_dataset_and_ray_source_reject_a_bad_setting_with_the_specs_own_error(
        path: str, kwargs: dict[str, Any], error: type, name: str) -> None:
    Source = _ray_source()
    with pytest.raises(error) as want:
        StreamSpec(**kwargs)
    for build in (lambda: YoumuDataset(path, **kwargs), lambda: Source(path, **kwargs)):
        with pytest.raises(error) as got:
            build()
        assert str(got.value) == str(want.value)


def test_a_setting_that_does_not_exist_is_a_type_error_naming_it(path: str) -> None:
    Source = _ray_source()
    with pytest.raises(ArgumentTypeError, match="buffersize"):
        StreamSpec.of({"buffersize": 8})
    with pytest.raises(ArgumentTypeError, match="buffersize"):
        Source(path, buffersize=8)


def test_settings_are_normalised_so_equal_settings_are_equal_specs() -> None:
    a = StreamSpec(columns=["id", "tokens"], seed=np.int64(4), buffer_size=np.int32(64), drop_last=np.bool_(True))
    b = StreamSpec(columns=("id", "tokens"), seed=4, buffer_size=64, drop_last=True)
    assert a == b and type(a.seed) is int and a.columns == ("id", "tokens") and a.drop_last is True
    assert StreamSpec(seed=1) != StreamSpec(seed=2)
    assert [f for f in SETTINGS] == ["columns", "shuffle", "buffer_size", "seed", "transform", "drop_last",
                                     "output", "memory_budget", "read_ahead", "page_slices", "storage_options"]


def test_where_the_rows_are_is_checked_against_the_settings(path: str, tmp_path: Path) -> None:
    index = youmu.PageIndex(path)
    assert StreamSpec().check_paths(path) == "paths" and StreamSpec().check_paths(index) == "index"
    assert StreamSpec().check_paths([path, Path(path)]) == "paths"
    with pytest.raises(InvalidArgumentError, match="storage_options apply to paths"):
        StreamSpec(storage_options={"region": "x"}).open(index)
    with pytest.raises(ArgumentTypeError, match="paths must be a path"):
        StreamSpec().open(3)
    with pytest.raises(ArgumentTypeError, match="paths must be a path"):
        StreamSpec().open([])
    with pytest.raises(ArgumentTypeError, match="MapStream"):
        StreamSpec().open({"a": 1})
    with pytest.raises(InvalidArgumentError, match="columns"):
        StreamSpec(columns=["id"]).open(index)  # the index reads id and tokens
    assert StreamSpec(columns=["id"]).open(path).columns == ["id"]
    # a RowDataset and a FlatMixture open to their page index
    rows = youmu.RowDataset(index)
    assert StreamSpec().open(rows) is index
    other = str(tmp_path / "other.parquet")
    write_token_rows(other, [1, 1, 1], start=1, id_first=True, column="tokens", dtype=np.int64)
    flat = youmu.FlatMixture({"a": index, "b": youmu.PageIndex(other)})
    assert StreamSpec().open(flat).num_rows == N_ROWS + 3


def test_a_ray_source_takes_only_what_a_loader_can_be_sent(path: str) -> None:
    Source = _ray_source()
    index = youmu.PageIndex(path)
    with pytest.raises(ArgumentTypeError, match="paths must be a path"):
        Source(youmu.FlatMixture({"a": index}))
    with pytest.raises(InvalidArgumentError, match="storage_options apply to paths"):
        Source(index, storage_options={"region": "x"})
    with pytest.raises(InvalidArgumentError, match="storage_options apply to paths"):
        Source(stream=lambda r, w: None, storage_options={"region": "x"})
    with pytest.raises(InvalidArgumentError, match="not both"):
        Source(path, spec=StreamSpec(), seed=3)
    with pytest.raises(ArgumentTypeError, match="spec"):
        Source(path, spec={"seed": 3})


# -- one spec, one stream -----------------------------------------------------------------------
CASES = [
    dict(shuffle="page", buffer_size=60, seed=3),
    dict(shuffle="page", buffer_size=60, seed=3, page_slices=3, drop_last=True),
    dict(shuffle="row", buffer_size=40, seed=9, drop_last=True),
    dict(shuffle="local", buffer_size=80, seed=1, memory_budget=20_000),
    dict(shuffle="none", read_ahead=0),
]


@pytest.mark.parametrize("kw", CASES)
@pytest.mark.parametrize("world", [1, 3])
def test_dataset_and_ray_source_with_the_same_settings_are_one_spec_and_one_stream(
        path: str, kw: dict[str, Any], world: int) -> None:
    from youmu.streams.parquet import ParquetStream

    Source = _ray_source()
    settings = dict(kw, columns=["id", "tokens"], output="python", transform=_double)
    src = Source(path, **settings)
    assert Source(path, spec=src.spec) == src
    for rank in range(world):
        ds = YoumuDataset(path, rank=rank, world_size=world, **settings)
        assert ds.spec == src.spec
        assert ds.spec.describe(describe_paths(path)) == src.describe()
        rows = src.build(src.open(), rank, world)
        assert isinstance(rows, ParquetStream)
        state = ds.state_dict()
        assert rows.layout.settings(rank) == {k: state[k] for k in rows.layout.settings(rank)}
        assert (rows.layout.window_pages, rows.layout.read_ahead) == (ds.window_pages, ds.read_ahead)
        for epoch in (0, 2):
            ds.set_epoch(epoch)
            rows.set_epoch(epoch)
            want = [(p, r["id"]) for p, r in ds.iter_positions(0)]
            assert want and [(p, r["id"]) for p, r in rows.iter_positions(0)] == want
            assert all(r["id"] % 2 == 0 for _, r in ds.iter_positions(0))  # the transform ran


def _double(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "id": 2 * row["id"]}


@pytest.mark.parametrize("kw", CASES)
def test_a_layout_is_window_layout_and_its_streams_are_row_streams(path: str, kw: dict[str, Any]) -> None:
    spec = StreamSpec(**kw)
    index = youmu.PageIndex(path)
    layout = spec.layout(index, world_size=2)
    assert isinstance(layout, StreamLayout) and layout.index is index
    assert (layout.window_pages, layout.read_ahead) == window_layout(
        index, spec.buffer_size, 2, memory_budget=spec.memory_budget, read_ahead=spec.read_ahead,
        page_slices=spec.page_slices)
    for rank, worker, epoch in [(0, 0, 0), (1, 1, 3)]:
        direct = RowStream(index, spec.shuffle, spec.buffer_size, spec.seed, epoch, rank=rank, world_size=2,
                           worker=worker, num_workers=2, drop_last=spec.drop_last, memory_budget=spec.memory_budget,
                           read_ahead=spec.read_ahead, page_slices=spec.page_slices)
        mine = layout.stream(rank, worker, 2, epoch)
        assert [t.column("id").to_pylist() for t in mine.iter_tables()] == \
            [t.column("id").to_pylist() for t in direct.iter_tables()]


def test_wrappers_pickle_and_read_their_settings_from_the_spec(path: str) -> None:
    Source = _ray_source()
    src = Source(path, shuffle="row", seed=11, buffer_size=30)
    again = pickle.loads(pickle.dumps(src))  # how a Source reaches a loader actor
    assert again == src and again.seed == 11 and again.shuffle == "row"
    ds = YoumuDataset(path, shuffle="row", seed=11, buffer_size=30, output="python", read_ahead=2)
    copy = pickle.loads(pickle.dumps(ds))  # how a dataset reaches a spawned DataLoader worker
    assert copy.spec == ds.spec and copy.seed == 11 and copy.read_ahead == 2 and ds.drop_last is False
    assert [r["id"] for r in copy] == [r["id"] for r in ds]
    with pytest.raises(AttributeError):
        ds.no_such_setting  # noqa: B018


def test_the_spec_imports_neither_torch_nor_ray() -> None:
    code = ("import sys, youmu.streams.spec; bad = [m for m in ('torch', 'ray') if m in sys.modules]; "
            "sys.exit(f'youmu.streams.spec imported {bad}' if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr or done.stdout


# -- structure: the wrappers hold no settings logic of their own -----------------------------------
_CHECKERS = {"int_arg", "opt_int_arg", "choice_arg", "bool_arg", "callable_arg", "storage_options_arg",
             "shuffle_args"}
# what lays out, plans or builds a Parquet source's stream: the spec's business
_BUILDERS = {"RowStream", "window_layout", "window_pages_for", "shard_plan", "all_window_rows", "ShardPlan"}
_WRAPPERS = ["torch/dataset.py", "ray/source.py", "ray/source_actor.py"]


def _calls(path: Path) -> list[tuple[str, str | None, int]]:
    """(called name, its first argument when a string, line) of every call in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            first = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            out.append((name, first if isinstance(first, str) else None, node.lineno))
    return out


@pytest.mark.parametrize("module", _WRAPPERS)
def test_wrappers_check_no_setting_and_build_no_stream_of_their_own(module: str) -> None:
    calls = _calls(PACKAGE / module)
    checks = [(n, a, line) for n, a, line in calls if n in _CHECKERS and (a in SETTINGS or n == "shuffle_args")]
    assert not checks, f"{module} checks spec settings itself: {checks}"
    builds = [(n, line) for n, _, line in calls if n in _BUILDERS]
    assert not builds, f"{module} lays out or builds a Parquet stream itself: {builds}"
    text = (PACKAGE / module).read_text()
    for name in ("SHUFFLE_MODES", "MAX_PAGE_SLICES", "OUTPUTS"):
        assert name not in text, f"{module} refers to {name}: the spec checks that setting"


def test_only_the_spec_builds_a_parquet_sources_row_stream() -> None:
    """``RowStream`` and ``window_layout`` are the stream module's primitives; within the
    package only the spec calls them."""
    callers = sorted({str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                      if any(n in ("RowStream", "window_layout") for n, _, _ in _calls(p))})
    assert callers == ["streams/rowstream.py", "streams/spec.py"]
