"""Shared fixtures (the conformance corpus, files of ids, an S3 server) and markers of every test folder.

The folders (``docs/contributing.md`` says what goes where): ``unit/<layer>`` one folder per
layer of ``python/youmu``, ``promises`` what the project promises across layers (goldens,
the loader contract, saved formats, the guards of the layout), ``hostile`` bad input,
``integrations`` the trainers, Ray, object stores and the Hub, ``system`` whole jobs (the
release wheel, the demos and examples), ``support`` what they share (helpers, the
multi-process job scripts, pinned JSON fixtures; on pytest's ``pythonpath``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from parquet_fixtures import write_ids
from where import PARQUET_TESTING, TESTS

SYSTEM = TESTS / "system"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under ``tests/system`` is marked ``system``: its own CI stage (``make
    test-system``), not ``make test``."""
    for item in items:
        if SYSTEM in Path(item.path).parents:
            item.add_marker(pytest.mark.system)


#: Modules whose tests are each a self-contained job of their own processes (the seam
#: matrix's trainer cells, the documentation's example jobs): under xdist they are dealt
#: one test at a time, so both workers run jobs; their module fixtures are cheap to build
#: once per worker.
JOB_MODULES = ("tests/integrations/test_seams.py", "tests/system/test_docs_examples.py")

_RAY_TEST = re.compile(r"(?<![a-z])ray")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist's ``--dist loadfile`` a module's tests stay on one worker, so its
    module-scoped fixtures (S3 servers, multi-rank runs) are built once; the tests of
    :data:`JOB_MODULES` are dealt one by one; and everything that starts a local Ray
    cluster (the modules that call ``ray.init``, a job module's Ray tests) shares one
    worker: two clusters starting at once on a 2-core machine time out. (A scheduler,
    not ``xdist_group`` marks: pytest 9 no longer reads the node ids xdist rewrites for
    those.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class ModulesJobsAndRay(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, root)

    return ModulesJobsAndRay(config, log)


def work_unit(nodeid: str, root: Path) -> str:
    """The unit of work a test belongs to under xdist (see :func:`pytest_xdist_make_scheduler`)."""
    module, _, test = nodeid.partition("::")
    if module in JOB_MODULES:
        return "ray" if _RAY_TEST.search(test) else nodeid
    return "ray" if _starts_ray(root / module) else module


_RAY_STARTERS: dict[Path, bool] = {}


def _starts_ray(path: Path) -> bool:
    """Whether a test module starts a local Ray cluster (it calls ``ray.init``)."""
    if path not in _RAY_STARTERS:
        _RAY_STARTERS[path] = path.is_file() and "ray.init(" in path.read_text(encoding="utf-8")
    return _RAY_STARTERS[path]


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    data = PARQUET_TESTING / "data"
    if not data.is_dir():
        pytest.skip(f"conformance corpus not found at {data} (expected ../shared/parquet-testing beside the repo)")
    return data


@pytest.fixture(scope="session")
def ids_file(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """``ids_file(n, start=0, column="id", **layout)``: the path of a read-only
    ``parquet_fixtures.write_ids`` file, written once per session for each set of arguments
    (tests only read it: one that changes its file writes its own with ``write_ids``)."""
    made: dict[tuple[Any, ...], str] = {}

    def get(n: int, *, start: int = 0, column: str = "id", **layout: Any) -> str:
        key = (n, start, column, tuple(sorted(layout.items())))
        if key not in made:
            folder = tmp_path_factory.mktemp(f"ids-{column}-{n}")
            made[key] = str(write_ids(folder / "ids.parquet", n, start=start, column=column, **layout))
        return made[key]

    return get


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    """A real S3-compatible server for one test module: moto on 127.0.0.1 behind a proxy
    that can inject faults (``tests/support/s3util.py``); its bucket is ``youmu-test``."""
    from s3util import S3

    server = S3()
    yield server
    server.stop()
