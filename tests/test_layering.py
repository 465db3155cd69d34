"""The Rust storage layer stays one abstraction.

Code outside ``rust/storage/`` holds a ``storage::Source`` (one ``Storage`` trait, local
files and objects in stores behind it) and calls storage functions that are synchronous:
it never asks which backend a file is on and never waits on the async I/O runtime
itself. Inside ``rust/storage/`` the modules form no import cycle and stay small. These
checks read the Rust sources, so a change that starts branching on the backend again
fails here rather than in review.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUST = ROOT / "rust"
STORAGE = RUST / "storage"

# What only storage may say: its backends' names (of an opened source, of a user's path
# or URL, of an entry discovery found), its classification of paths and URLs, its
# backends' listings, and waiting on its async runtime.
FORBIDDEN = re.compile(
    r"Source::Local|Source::Remote|Backend::|Location::|Found::Local|Found::Remote|block_on|\bis_url\b"
    r"|\bis_remote\(|storage::aio\b|storage::remote\b"
)
# `PageIndex.is_remote` is public Python API: its getter may keep the name.
ALLOWED = re.compile(r"^\s*fn is_remote\(&self\) -> bool \{$")


def _code(line: str) -> str:
    """``line`` without a trailing ``//`` comment (comments may name anything)."""
    return line.split("//", 1)[0]


def _rust_files_outside_storage() -> list[Path]:
    return sorted(p for p in RUST.rglob("*.rs") if STORAGE not in p.parents)


def test_rust_sources_are_found() -> None:
    files = _rust_files_outside_storage()
    assert RUST / "read.rs" in files and RUST / "py" / "index.rs" in files
    assert (STORAGE / "source.rs").exists()


def test_no_code_outside_storage_branches_on_the_backend_or_blocks_on_its_runtime() -> None:
    hits = []
    for path in _rust_files_outside_storage():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if FORBIDDEN.search(_code(line)) and not ALLOWED.match(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "storage details used outside rust/storage/ (add a storage function instead):\n" + "\n".join(hits)


def test_a_match_on_the_backend_is_caught() -> None:
    # the forms discovery took before listing moved into storage, and the ones it must not take again
    for line in (
        "match Location::of(s)? {",
        "Location::Local(local) => {",
        "Found::Local(p) => Ok(p),",
        "out.push(Found::Remote { spec, path, meta: None });",
        "let Source::Remote(o) = source else { return };",
    ):
        assert FORBIDDEN.search(_code(line)), line
    assert not FORBIDDEN.search(_code("let found = paths::discover(paths, options)?; // not Location::of"))


def _storage_imports() -> dict[str, set[str]]:
    """Sibling modules each storage module refers to (``super::name``), tests excluded."""
    modules = {p.stem for p in STORAGE.glob("*.rs")} - {"mod"}
    graph: dict[str, set[str]] = {}
    for m in modules:
        text = (STORAGE / f"{m}.rs").read_text().split("#[cfg(test)]", 1)[0]
        code = "\n".join(_code(line) for line in text.splitlines())
        graph[m] = {r for r in re.findall(r"super::(\w+)", code) if r in modules and r != m}
    return graph


def test_storage_modules_form_no_import_cycle() -> None:
    graph = _storage_imports()
    assert graph["client"] >= {"aio", "spec"}, graph
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import cycle in rust/storage/: " + " -> ".join([*path[path.index(m):], m]))
        if m in done:
            return
        for n in sorted(graph[m]):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])


def test_storage_modules_stay_small() -> None:
    big = {p.name: n for p in STORAGE.glob("*.rs") if (n := len(p.read_text().splitlines())) > 500}
    assert not big, f"split these storage modules by idea (over 500 lines): {big}"


# Past this many lines a Rust module holds several ideas, to be split by idea, unless the
# first line of its doc comment says it is one algorithm (and which).
MODULE_LINES = 520


def test_rust_modules_stay_small_unless_one_algorithm() -> None:
    big = {}
    for path in sorted(RUST.rglob("*.rs")):
        lines = path.read_text().splitlines()
        first_doc = next((line for line in lines if line.startswith("//!")), "")
        if len(lines) > MODULE_LINES and "one algorithm" not in first_doc.lower():
            big[str(path.relative_to(ROOT))] = len(lines)
    assert not big, (
        f"split these Rust modules by idea (over {MODULE_LINES} lines), or say in the first line of the "
        f"module's doc comment that it is one algorithm and which: {big}"
    )
