"""The hostile user of local files, discovery, I/O settings and the binding's
arguments: what comes back is a typed ``YoumuError`` naming the argument, file,
variable or field (or the data that was indexed), in bounded time. Never an abort, a
hang, a Rust panic, "internal error", a builtin exception, or other rows.

Grouped by family; each bug found adds a case to its family. Cases that aborted or
hung the interpreter before run in a subprocess with a timeout, so they fail one test
instead of killing (or stalling) pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from parquet_fixtures import write_columns, write_ids, write_table

import youmu
from youmu.errors import CorruptFileError, InvalidArgumentError, StaleIndexError

ROOT = Path(__file__).resolve().parents[2]


def run_isolated(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (an abort there is a failed test here; a hang
    is a `TimeoutExpired` after `timeout` seconds)."""
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT / "python")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=full_env
    )


CASES_PRELUDE = """
import json, youmu
def case(name, f):
    try:
        r = f()
        print(json.dumps([name, "returned", repr(r)[:200]]))
    except BaseException as e:
        print(json.dumps([name, ",".join(c.__name__ for c in type(e).__mro__), str(e)]))
"""


def outcomes(code: str, env: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Each `case(name, f)` of `code` (after `CASES_PRELUDE`) as (exception classes, message)."""
    r = run_isolated(CASES_PRELUDE + textwrap.dedent(code), env=env)
    assert r.returncode == 0, f"subprocess died (rc {r.returncode}):\n{r.stderr[-3000:]}"
    assert "panicked" not in r.stderr and "PanicException" not in r.stdout, r.stderr[-3000:]
    return {name: (cls, msg) for name, cls, msg in map(json.loads, r.stdout.splitlines())}


def typed(outcome: tuple[str, str], cls: str, *words: str) -> None:
    """`outcome` is a `cls` (a YoumuError) whose message holds every one of `words`."""
    classes, msg = outcome
    assert classes.split(",")[0] == cls and "YoumuError" in classes, outcome
    assert "internal error" not in msg, outcome
    for w in words:
        assert w in msg, (w, outcome)


def ids_file(path: Path, first: int, n: int = 1000) -> None:
    """One int64 column of `first .. first + n`, laid out so that any `first` of the same
    digit count gives a file of exactly the same size."""
    write_ids(path, n, start=first, use_dictionary=False, compression="none", write_statistics=False,
              data_page_size=1024, write_batch_size=100, write_page_index=True)


# -- a local file changed under a cached handle --------------------------------------


def test_a_file_rewritten_in_place_with_the_same_size_is_stale_not_other_rows(tmp_path: Path) -> None:
    path = tmp_path / "ids.parquet"
    ids_file(path, 1000)
    idx = youmu.PageIndex(path)
    assert idx.read_page(0).column(0)[0].as_py() == 1000  # the handle is cached now
    size = path.stat().st_size
    time.sleep(0.01)  # a new mtime even on coarse clocks
    with open(path, "r+b") as f:  # in place: same inode
        tmp = tmp_path / "other.parquet"
        ids_file(tmp, 7000)
        f.write(tmp.read_bytes())
    assert path.stat().st_size == size
    for read in (lambda: idx.read_page(0), lambda: idx.read_rows([0]), lambda: idx.read_pages([0, 1]),
                 lambda: idx.read_window([0]), lambda: idx.prefetch([0]).result()):
        with pytest.raises(StaleIndexError, match="ids.parquet"):
            read()


def test_a_file_replaced_by_a_rename_is_stale_even_with_the_same_size_and_mtime(tmp_path: Path) -> None:
    path = tmp_path / "ids.parquet"
    ids_file(path, 1000)
    idx = youmu.PageIndex(path)
    assert idx.read_page(0).column(0)[0].as_py() == 1000
    new = tmp_path / "new.parquet"
    ids_file(new, 7000)
    st = path.stat()
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(new, path)
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    with pytest.raises(StaleIndexError, match="ids.parquet.*replaced"):
        idx.read_page(0)


def test_a_file_deleted_under_a_cached_handle_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "ids.parquet"
    ids_file(path, 1000)
    idx = youmu.PageIndex(path)
    idx.read_page(0)
    path.unlink()
    with pytest.raises(StaleIndexError, match="ids.parquet.*gone"):
        idx.read_page(1)


def test_an_unchanged_file_still_reads_after_the_checks(tmp_path: Path) -> None:
    path = tmp_path / "ids.parquet"
    ids_file(path, 1000)
    idx = youmu.PageIndex(path)
    got = np.concatenate([b.column(0).to_numpy() for b in idx.read_pages(list(range(len(idx))) * 2)])
    assert np.array_equal(got, np.tile(np.arange(1000, 2000), 2))


# -- discovery: loops, bounds, interrupts --------------------------------------------


def _loop_tree(root: Path) -> Path:
    d = root / "data"
    (d / "sub").mkdir(parents=True)
    ids_file(d / "a.parquet", 0, 10)
    ids_file(d / "sub" / "b.parquet", 10, 10)
    os.symlink(".", d / "l1")
    os.symlink("..", d / "sub" / "up")
    os.symlink(d, d / "sub" / "l2")
    return d


@pytest.mark.parametrize("form", ["dir", "glob", "double star"])
def test_symlink_loops_are_walked_once_not_forever(tmp_path: Path, form: str) -> None:
    d = _loop_tree(tmp_path)
    spec = {"dir": str(d), "glob": f"{d}/*", "double star": f"{d}/**/*.parquet"}[form]
    code = f"""
    import json, warnings, youmu
    warnings.simplefilter("ignore")
    idx = youmu.PageIndex({spec!r})
    print(json.dumps([idx.num_rows, sorted(p.rsplit("/", 1)[1] for p in idx.files)]))
    """
    r = run_isolated(code, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == [20, ["a.parquet", "b.parquet"]]


def test_a_loop_walked_once_is_reported_in_skipped(tmp_path: Path) -> None:
    d = _loop_tree(tmp_path)
    with pytest.warns(UserWarning, match="walked already"):
        idx = youmu.PageIndex(d)
    assert any(p.endswith("l1") and "symlink loop" in why for p, why in idx.skipped), idx.skipped


def test_ctrl_c_stops_a_long_walk_promptly() -> None:
    # When the signal had been sent is printed too (read after the kill returned): a walk
    # that ends by itself (no Parquet under /usr, an unreadable /proc entry) is fine only
    # if it ended before the signal was sent or just after (a loaded machine can run the
    # timer thread late, even between reading the clock and sending), never long after
    # it: an unheard Ctrl-C would end /usr's walk most of a second later.
    code = """
    import os, signal, threading, time, youmu
    # Ctrl-C as an interactive user has it: a parent that ignores or blocks SIGINT (a
    # library earlier in the test session) hands that on to its children
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    sent = []
    def interrupt():
        os.kill(os.getpid(), signal.SIGINT)
        sent.append(time.monotonic())  # after the kill: a timer thread descheduled before it is no unheard Ctrl-C
    timer = threading.Timer(0.1, interrupt)  # well inside the walk of /usr (about 1 s warm)
    timer.start()
    t = time.monotonic()
    try:
        try:
            youmu.PageIndex(["/usr", "/"])   # /usr first: seconds of walking with no error to end it early
            outcome = "finished"
        finally:
            timer.cancel()
            end = time.monotonic()
    except KeyboardInterrupt:
        outcome = "interrupted"
    except youmu.YoumuError as e:
        outcome = f"error {type(e).__name__} {e}"
    print(end - t, (sent[0] - t) if sent else -1.0, outcome)
    """
    r = run_isolated(code, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    ended, sent, what, *rest = r.stdout.split()
    ended_at, sent_at = float(ended), float(sent)
    if what == "interrupted":
        assert 0 <= sent_at and ended_at - sent_at < 4, r.stdout
    else:  # the walk ended by itself: typed, and not long after Ctrl-C was sent
        assert what == "error", r.stdout
        assert sent_at < 0 or ended_at - sent_at < 0.5, r.stdout


# -- I/O settings and thread counts --------------------------------------------------


@pytest.fixture(scope="module")
def settings() -> dict[str, tuple[str, str]]:
    return outcomes("""
    import os
    before = youmu.io_options()
    case("io_threads huge", lambda: youmu.set_io_options(io_threads=10**12))
    case("io_threads many", lambda: youmu.set_io_options(io_threads=20000))
    case("max_inflight 2**62", lambda: youmu.set_io_options(max_inflight=2**62))
    case("max_inflight 2**64", lambda: youmu.set_io_options(max_inflight=2**64))
    case("max_inflight negative", lambda: youmu.set_io_options(max_inflight=-1))
    case("max_inflight float", lambda: youmu.set_io_options(max_inflight=4.0))
    case("max_inflight str", lambda: youmu.set_io_options(max_inflight="8"))
    case("max_inflight True", lambda: youmu.set_io_options(max_inflight=True))
    case("max_open_files huge", lambda: youmu.set_io_options(max_open_files=10**9))
    case("coalesce_gap huge", lambda: youmu.set_io_options(coalesce_gap=2**63))
    case("tail_bytes huge", lambda: youmu.set_io_options(tail_bytes=2**62))
    case("retries huge", lambda: youmu.set_io_options(retries=2**40))
    case("request_timeout huge", lambda: youmu.set_io_options(request_timeout=1e18))
    case("request_timeout nan", lambda: youmu.set_io_options(request_timeout=float("nan")))
    case("connect_timeout bool", lambda: youmu.set_io_options(connect_timeout=True))
    case("retry_timeout str", lambda: youmu.set_io_options(retry_timeout="5"))
    case("unchanged", lambda: youmu.io_options() == before or youmu.io_options())
    case("a good one", lambda: youmu.set_io_options(max_inflight=8, request_timeout=2, io_threads=2))
    case("set_num_threads True", lambda: youmu.set_num_threads(True))
    case("set_fast_decode 1", lambda: youmu.set_fast_decode(1))
    """)


@pytest.mark.parametrize("case, name", [
    ("io_threads huge", "io_threads"), ("io_threads many", "io_threads"),
    ("max_inflight 2**62", "max_inflight"), ("max_inflight 2**64", "max_inflight"),
    ("max_inflight negative", "max_inflight"), ("max_open_files huge", "max_open_files"),
    ("coalesce_gap huge", "coalesce_gap"), ("tail_bytes huge", "tail_bytes"), ("retries huge", "retries"),
    ("request_timeout huge", "request_timeout"), ("request_timeout nan", "request_timeout"),
])
def test_io_settings_out_of_range_are_refused_naming_the_setting(settings: dict, case: str, name: str) -> None:
    typed(settings[case], "InvalidArgumentError", f"set_io_options({name})", "between" if "timeout" not in name
          else "at most")


@pytest.mark.parametrize("case, name", [
    ("max_inflight float", "max_inflight"), ("max_inflight str", "max_inflight"),
    ("max_inflight True", "max_inflight"), ("connect_timeout bool", "connect_timeout"),
    ("retry_timeout str", "retry_timeout"), ("set_num_threads True", "set_num_threads(n)"),
    ("set_fast_decode 1", "set_fast_decode(on)"),
])
def test_io_settings_of_the_wrong_type_are_a_type_error_naming_the_setting(settings: dict, case: str,
                                                                           name: str) -> None:
    typed(settings[case], "ArgumentTypeError", name)


def test_refused_settings_change_nothing_and_good_ones_apply(settings: dict) -> None:
    assert settings["unchanged"] == ("returned", "True")
    assert settings["a good one"] == ("returned", "None")


def test_a_huge_in_flight_limit_from_the_environment_never_reaches_the_store(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    ids_file(path, 0, 10)
    got = outcomes(f"""
    case("index", lambda: youmu.PageIndex({str(path)!r}))
    case("io_options", lambda: youmu.io_options())
    case("set_io_options", lambda: youmu.set_io_options(retries=3))
    """, env={"YOUMU_MAX_INFLIGHT": str(2**62)})
    for name in ("index", "io_options", "set_io_options"):
        typed(got[name], "InvalidArgumentError", "YOUMU_MAX_INFLIGHT", "16384")


@pytest.mark.parametrize("var, value", [
    ("YOUMU_MAX_INFLIGHT", "lots"), ("YOUMU_MAX_INFLIGHT", "0"), ("YOUMU_MAX_OPEN_FILES", "-3"),
    ("YOUMU_COALESCE_GAP", "1e6"), ("YOUMU_RETRIES", "many"), ("YOUMU_NUM_THREADS", "eight"),
])
def test_a_malformed_environment_variable_is_an_error_naming_it(tmp_path: Path, var: str, value: str) -> None:
    path = tmp_path / "a.parquet"
    ids_file(path, 0, 10)
    got = outcomes(f'case("index", lambda: youmu.PageIndex({str(path)!r}))', env={var: value})
    typed(got["index"], "InvalidArgumentError", f'{var}="{value}"')


# -- builtin errors where a typed one belongs ----------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("small") / "a.parquet"
    ids_file(path, 0, 100)
    return path


@pytest.fixture(scope="module")
def arguments(small: Path) -> dict[str, tuple[str, str]]:
    return outcomes(f"""
    from youmu._core import FlatMap, MixtureMap, _permutation_from_key
    idx = youmu.PageIndex({str(small)!r})
    case("concat None", lambda: youmu.PageIndex.concat(None))
    case("concat str", lambda: youmu.PageIndex.concat("ab"))
    case("concat item", lambda: youmu.PageIndex.concat([idx, 3]))
    case("from_bytes verify str", lambda: youmu.PageIndex.from_bytes(idx.to_bytes(), verify="no"))
    case("from_bytes verify int", lambda: youmu.PageIndex.from_bytes(idx.to_bytes(), verify=0))
    case("from_bytes data", lambda: youmu.PageIndex.from_bytes(12))
    case("Permutation 2**63", lambda: youmu.Permutation(2**63))
    case("Permutation negative", lambda: youmu.Permutation(-1))
    case("Permutation float", lambda: youmu.Permutation(10.0))
    case("Permutation bool", lambda: youmu.Permutation(True))
    case("Permutation seed 2**64", lambda: youmu.Permutation(10, seed=2**64))
    case("Permutation seed -1", lambda: youmu.Permutation(10, seed=-1))
    case("Permutation seed float", lambda: youmu.Permutation(10, seed=1.5))
    case("Permutation epoch 2**64", lambda: youmu.Permutation(10, epoch=2**64))
    case("Permutation purpose 2**64", lambda: youmu.Permutation(10, purpose=2**64))
    case("Permutation purpose float", lambda: youmu.Permutation(10, purpose=1.5))
    case("Permutation range negative", lambda: youmu.Permutation(10).range(-1, 5))
    case("Permutation range float", lambda: youmu.Permutation(10).range(0, 5.0))
    case("from_key 2**63", lambda: _permutation_from_key(2**63, 0, 0, 0))
    case("FlatMap seed 2**64", lambda: FlatMap([3, 4], seed=2**64))
    case("FlatMap seed bool", lambda: FlatMap([3, 4], seed=True))
    case("FlatMap shuffle str", lambda: FlatMap([3, 4], shuffle="no"))
    case("FlatMap lengths negative", lambda: FlatMap([3, -4]))
    case("FlatMap position child", lambda: FlatMap([3, 4]).position(-1, 0))
    case("MixtureMap seed 2**64", lambda: MixtureMap(["a"], [5], [(0, [1.0])], seed=2**64))
    case("MixtureMap block_size float", lambda: MixtureMap(["a"], [5], [(0, [1.0])], block_size=2.0))
    case("MixtureMap counts negative", lambda: MixtureMap(["a"], [5], [(0, [1.0])]).counts(-1))
    case("MixtureMap stage_of 2**64", lambda: MixtureMap(["a"], [5], [(0, [1.0])]).stage_of(2**64))
    """)


@pytest.mark.parametrize("case, words", [
    ("concat None", ["PageIndex.concat", "NoneType"]), ("concat str", ["PageIndex.concat", "str"]),
    ("concat item", ["item 1", "int"]),
    ("from_bytes verify str", ["from_bytes(verify)", "'no'"]), ("from_bytes verify int", ["from_bytes(verify)"]),
    ("from_bytes data", ["from_bytes(data)", "int"]),
    ("Permutation float", ["Permutation(n)", "float"]), ("Permutation bool", ["Permutation(n)", "bool"]),
    ("Permutation seed float", ["Permutation(seed)"]), ("Permutation purpose float", ["Permutation(purpose)"]),
    ("Permutation range float", ["Permutation.range(stop)"]),
    ("FlatMap seed bool", ["FlatMap(seed)"]), ("FlatMap shuffle str", ["FlatMap(shuffle)"]),
    ("MixtureMap block_size float", ["MixtureMap(block_size)"]),
])
def test_arguments_of_the_wrong_type_are_a_type_error_naming_them(arguments: dict, case: str,
                                                                  words: list[str]) -> None:
    typed(arguments[case], "ArgumentTypeError", *words)


@pytest.mark.parametrize("case, words", [
    ("Permutation 2**63", ["Permutation(n)", str(2**63)]), ("Permutation negative", ["Permutation(n)", "-1"]),
    ("Permutation seed 2**64", ["Permutation(seed)", str(2**64)]), ("Permutation seed -1", ["Permutation(seed)"]),
    ("Permutation epoch 2**64", ["Permutation(epoch)"]), ("Permutation purpose 2**64", ["Permutation(purpose)"]),
    ("Permutation range negative", ["Permutation.range(start)"]), ("from_key 2**63", ["Permutation(n)"]),
    ("FlatMap seed 2**64", ["FlatMap(seed)"]), ("FlatMap lengths negative", ["FlatMap(lengths)", "item 1"]),
    ("FlatMap position child", ["position(child)"]),
    ("MixtureMap seed 2**64", ["MixtureMap(seed)"]),
    ("MixtureMap stage_of 2**64", ["stage_of(i)"]),
])
def test_integer_arguments_out_of_range_are_refused_naming_them(arguments: dict, case: str,
                                                                words: list[str]) -> None:
    typed(arguments[case], "InvalidArgumentError", *words)


def test_a_mixture_count_beyond_its_length_is_out_of_range(arguments: dict) -> None:
    typed(arguments["MixtureMap counts negative"], "PageOutOfRangeError", "counts(i) -1")


def test_good_arguments_still_work(small: Path) -> None:
    idx = youmu.PageIndex(small)
    assert len(youmu.PageIndex.concat([idx])) == len(idx)
    assert youmu.PageIndex.from_bytes(idx.to_bytes(), verify=np.bool_(False)).num_rows == 100
    p = youmu.Permutation(10, seed=2**64 - 1, epoch=np.int64(3), purpose=2**63)
    assert sorted(p.range(0, None)) == list(range(10))
    assert (p.seed, p.epoch) == (2**64 - 1, 3)


# -- file names, schemas and what a path names ---------------------------------------


def test_a_file_name_that_is_not_utf8_is_indexed_and_read(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir()
    name = os.fsdecode(b"caf\xe9.parquet")  # Latin-1, not UTF-8: a surrogate escape in Python
    ids_file(d / "tmp", 0, 10)  # pyarrow cannot write to such a name
    os.rename(d / "tmp", d / name)
    ids_file(d / "plain.parquet", 10, 10)
    for spec in (d, f"{d}/*.parquet", f"{d}/**/*.parquet"):
        idx = youmu.PageIndex(spec)
        assert sorted(Path(p).name for p in idx.files) == sorted([name, "plain.parquet"]), spec
        assert idx.file_info(0)["path"] == str(d / name) or idx.file_info(1)["path"] == str(d / name)
        got = np.concatenate([b.column(0).to_numpy() for b in idx.read_pages(range(len(idx)))])
        assert sorted(got.tolist()) == list(range(20)), spec
    saved = tmp_path / "i.youmu"
    youmu.PageIndex(d).save(saved)
    loaded = youmu.PageIndex.load(saved)
    assert loaded.num_rows == 20 and name in [Path(p).name for p in loaded.files]
    assert youmu.PageIndex.from_bytes(loaded.to_bytes()).read_pages(range(len(loaded)))


@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_path_argument_that_is_not_utf8_is_refused_naming_it(tmp_path: Path, as_bytes: bool) -> None:
    path = tmp_path / os.fsdecode(b"caf\xe9.parquet")
    ids_file(tmp_path / "tmp", 0, 10)
    os.rename(tmp_path / "tmp", path)
    with pytest.raises(InvalidArgumentError, match="not valid UTF-8.*directory or a glob"):
        youmu.PageIndex(os.fsencode(path) if as_bytes else path)


def test_files_differing_only_in_nullability_give_batches_of_the_index_schema(tmp_path: Path) -> None:
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    write_table(tmp_path / "a.parquet", pa.table({"id": np.arange(5)}, schema=strict))
    write_columns(tmp_path / "b.parquet", {"id": pa.array([5, None, 7], pa.int64())})
    idx = youmu.PageIndex(tmp_path)
    assert idx.schema.field("id").nullable
    batches = idx.read_pages(range(len(idx)))
    for b in batches:
        assert b.schema == idx.schema, (b.schema, idx.schema)
    assert idx.read_rows([0, 6]).schema == idx.schema
    assert idx.read_window([0]).schema == idx.schema


@pytest.mark.parametrize("shuffle", ["page", "row", "local", "none"])
@pytest.mark.parametrize("read_ahead", [0, 2])
def test_files_differing_only_in_nullability_stream_in_the_index_schema_on_every_read_path(
        tmp_path: Path, shuffle: str, read_ahead: int) -> None:
    # windows read ahead, windows read alone (read_ahead 0) and row-mode chunks share one read loop
    from youmu.streams.rowstream import RowStream

    strict = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    write_table(tmp_path / "a.parquet", pa.table({"id": np.arange(40)}, schema=strict), row_group_size=7)
    write_columns(tmp_path / "b.parquet", {"id": pa.array([40, None, 42] * 10, pa.int64())}, row_group_size=9)
    idx = youmu.PageIndex(tmp_path)
    stream = RowStream(idx, shuffle=shuffle, buffer_size=16, seed=3, read_ahead=read_ahead)
    tables = list(stream.iter_tables(5))
    assert all(t.schema == idx.schema for t in tables)
    ids = [x for t in tables for x in t.column("id").to_pylist()]
    assert len(ids) == len(stream) - 5
    whole = [x for t in stream.iter_tables() for x in t.column("id").to_pylist()]
    assert ids == whole[5:]
    assert sorted(whole, key=lambda x: (x is None, x)) == sorted(list(range(40)) + [40, None, 42] * 10,
                                                                 key=lambda x: (x is None, x))


def test_a_saved_index_passed_as_data_says_so(small: Path, tmp_path: Path) -> None:
    saved = tmp_path / "x.youmu"
    youmu.PageIndex(small).save(saved)
    with pytest.raises(CorruptFileError, match=r"x\.youmu.*saved youmu index.*PageIndex\.load"):
        youmu.PageIndex(saved)
    with pytest.raises(CorruptFileError, match="saved youmu index"):
        youmu.PageIndex([small, saved])


# -- a background page read that cannot deliver --------------------------------------------------
def test_a_page_prefetch_taken_twice_is_a_prefetch_error_naming_its_call(tmp_path: Path) -> None:
    from youmu.errors import PrefetchError

    path = tmp_path / "t.parquet"
    write_ids(path, 4000, column="x", data_page_size=1024)
    idx = youmu.PageIndex(path)
    for pending, call in ((idx.prefetch(np.arange(len(idx))), "PageIndex.prefetch"),
                          (idx.prefetch_window(np.arange(len(idx))), "PageIndex.prefetch_window")):
        pending.result()
        with pytest.raises(PrefetchError, match=rf"^{call}: result\(\) was already taken"):
            pending.result()
