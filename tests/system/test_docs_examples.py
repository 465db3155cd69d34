"""The documentation's code runs (docs/contributing.md, "Code that runs").

* Every ``python`` block of the quickstart, the guides, the concepts pages and the limits
  page runs: a page's blocks in order, in one namespace, in a directory of its own that
  holds small generated data under the names the pages use (:func:`write_workspace`).
* A page never copies a script that needs a trainer, several ranks or a Ray cluster: it
  includes the example itself (``--8<-- "examples/x.py"``), and every file a page
  includes is run by a test — the demos by their own tests (:data:`RUN_ELSEWHERE`), the
  trainer, DDP and Ray examples here (:data:`RUN_HERE`, marked ``slow`` + ``seams`` so
  ``make test`` leaves them out; ``make test-seams`` runs them in CI beside the seam
  matrix, 2 minutes together on an idle 2-core machine, and ``make test-examples`` alone).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(str(p.relative_to(DOCS)) for pattern in ("quickstart.md", "guides/*.md", "concepts/*.md", "limits.md")
               for p in DOCS.glob(pattern))

# Included example files run by another test: (the test module, a string it holds that
# names the file it runs).
RUN_ELSEWHERE = {
    "examples/sft_trainer.py": ("tests/system/test_docs_examples.py", "test_the_sft_script_trains_checkpoints_and_resumes"),
    "examples/demo.py": ("tests/system/test_demo.py", "demo.py"),
    "examples/sft_demo.py": ("tests/system/test_sft_demo.py", "sft_demo.py"),
    "examples/vlm_demo.py": ("tests/system/test_vlm_demo.py", "vlm_demo.py"),
    "examples/elastic_resume.py": ("tests/system/test_elastic_example.py", "elastic_resume.py"),
    "examples/chat_tokenizer.py": ("tests/support/textutil.py", "chat_tokenizer"),
    "examples/trainer_data.py": ("tests/system/test_examples_launcher.py", "trainer_data"),
}
# Included example files this module runs (the arguments keep them small), each a job of
# spawned ranks that stops mid-epoch and resumes, or a local Ray cluster.
RUN_HERE = {
    "examples/train_hf.py": [],
    "examples/train_accelerate.py": [],
    "examples/train_lightning.py": [],
    "examples/train_mesh.py": [],
    "examples/ddp_odb.py": ["--samples", "600"],
    "examples/ddp_youmu.py": ["{data}", "--steps", "10", "--seq-len", "128", "--vocab", "256"],
    "examples/ray_multisource.py": ["--out", "{out}", "--sources", "2", "--rows", "300"],
}

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```\s*$",
                    re.MULTILINE | re.DOTALL)
_INCLUDE = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$', re.MULTILINE)


def code_blocks(page: str) -> list[tuple[str, str, int]]:
    """``(language, code, line)`` of each fenced block of a page, dedented."""
    text = (DOCS / page).read_text()
    out = []
    for m in _FENCE.finditer(text):
        indent = len(m.group("indent"))
        body = "".join(line[indent:] if line[:indent].isspace() else line
                       for line in m.group("body").splitlines(keepends=True))
        out.append((m.group("lang"), body, text.count("\n", 0, m.start()) + 1))
    return out


def includes(page: str) -> list[str]:
    return _INCLUDE.findall((DOCS / page).read_text())


# ---- the data the pages read -------------------------------------------------------

def write_workspace(root: Path) -> Path:
    """What the pages read, under the names they use: the script the quickstart tells a
    reader to run (``examples/sample_data.py``), every part of it."""
    sys.path.insert(0, str(ROOT / "examples"))
    from sample_data import write_workspace as write

    return write(root, strict=True)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_workspace(tmp_path_factory.mktemp("docs-data"))


# ---- what some pages need besides files -----------------------------------------------

def _s3(monkeypatch: pytest.MonkeyPatch, root: Path):
    """A local S3-compatible store (moto) holding the ``data/`` corpus as
    ``s3://bucket/train/``, configured by the environment as a user's would be."""
    pytest.importorskip("moto")
    from s3util import S3

    store = S3(bucket="bucket")
    for f in sorted((root / "data").glob("*.parquet")):
        store.put_file(f"train/{f.name}", f)
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    return store


def _hub(monkeypatch: pytest.MonkeyPatch, root: Path):
    """A local Hugging Face Hub (tests/support/hubserver.py) holding the chats as
    ``youmu/sft-chats``, found through ``HF_ENDPOINT``."""
    from hubserver import HubServer

    hub = HubServer().start()
    hub.commit("youmu/sft-chats", {"data/ultrachat.parquet": (root / "ultrachat" / "part-0.parquet").read_bytes()})
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return hub


SERVICES = {"guides/storage.md": [_s3, _hub]}


# ---- the tests -------------------------------------------------------------------------

def test_the_pages_have_code_and_every_block_says_its_language() -> None:
    assert {"quickstart.md", "limits.md"} <= set(PAGES) and len(PAGES) >= 10, PAGES
    for page in PAGES:
        unlabeled = [line for lang, _, line in code_blocks(page) if not lang]
        assert not unlabeled, f"{page}: blocks without a language at lines {unlabeled} (python, sh, text)"


def test_every_included_file_is_run_by_a_test() -> None:
    included = {path for page in [*PAGES, "index.md"] for path in includes(page)}
    for path in sorted(included):
        assert (ROOT / path).is_file(), path
        if path in RUN_HERE:
            continue
        assert path in RUN_ELSEWHERE, f"{path} is included into a page but no test runs it"
        test, needle = RUN_ELSEWHERE[path]
        assert needle in (ROOT / test).read_text(), f"{test} no longer runs {path}"
    assert included >= set(RUN_HERE), f"examples run here but shown nowhere: {set(RUN_HERE) - included}"


def own_blocks(page: str) -> list[tuple[str, int]]:
    """A page's python blocks that are not includes: ``(code, line)``."""
    return [(code, line) for lang, code, line in code_blocks(page) if lang == "python" and not _INCLUDE.search(code)]


RUNNABLE = [page for page in PAGES if own_blocks(page)]


def test_a_page_without_code_of_its_own_shows_an_example_a_test_runs() -> None:
    bare = [page for page in PAGES if page not in RUNNABLE and not set(includes(page)) & set(RUN_HERE)]
    assert not bare, f"pages with neither python blocks of their own nor an example run here: {bare}"


def test_the_readme_quickstart_is_the_quickstart_page_s() -> None:
    """The README's 20-line example is the quickstart page's first block (which runs
    here); the README keeps the same code, not a variant of it."""
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"## Quickstart\s+```python\n(.*?)```", readme, re.S)
    assert m, "the README has a Quickstart code block"
    assert m.group(1) == own_blocks("quickstart.md")[0][0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", RUNNABLE)
def test_a_page_s_code_runs(page: str, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = own_blocks(page)
    for entry in workspace.iterdir():
        (tmp_path / entry.name).symlink_to(entry)
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    services = [start(monkeypatch, workspace) for start in SERVICES.get(page, [])]
    namespace: dict[str, object] = {"__name__": "__docs__"}
    try:
        for code, line in blocks:
            with redirect_stdout(io.StringIO()):
                exec(compile("\n" * (line) + code, str(DOCS / page), "exec"), namespace)  # noqa: S102
    finally:
        for service in services:
            service.stop()


@pytest.mark.slow
@pytest.mark.seams
@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", sorted(RUN_HERE))
def test_an_included_example_runs(script: str, workspace: Path, tmp_path: Path) -> None:
    args = [a.format(data=workspace / "data", out=tmp_path / "out") for a in RUN_HERE[script]]
    if "--out" not in args and "--out" in (ROOT / script).read_text():
        args += ["--out", str(tmp_path / "out")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=580)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]


@pytest.mark.timeout(400)
def test_the_sft_script_trains_checkpoints_and_resumes(workspace: Path, tmp_path: Path) -> None:
    """The SFT guide's whole script (examples/sft_trainer.py), on one process with the
    workspace's tiny model: a job that stops at ``max_steps`` after its checkpoints, and
    the same command with a later ``max_steps`` resuming from the last one."""
    for entry in workspace.iterdir():
        (tmp_path / entry.name).symlink_to(entry)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    small = ["--model", "my-model", "--save-steps", "2", "--token-budget", "2048", "--cutoff-len", "512"]
    outputs = []
    for steps in (4, 6):
        run = subprocess.run([sys.executable, str(ROOT / "examples" / "sft_trainer.py"), "--max-steps", str(steps),
                              *small], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=380)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
        outputs.append(run.stdout)
    assert "global step 4, resumed from None" in outputs[0]
    assert f"global step 6, resumed from {Path('sft-out') / 'checkpoint-4'}" in outputs[1], outputs[1]
    assert (tmp_path / "sft-out" / "checkpoint-4" / "youmu_loader_rank0.json").is_file()
