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
    r"|\bis_remote\b|\bover_network\b|\bis_local\b|\breads_in_place\b|\bany_remote\b"
    r"|storage::aio\b|storage::remote\b"
)
# `PageIndex.is_remote` is public Python API (a description for `youmu inspect`): its
# getter may keep the name and ask storage, in these two lines and nowhere else.
ALLOWED = re.compile(r"^\s*fn is_remote\(&self\) -> bool \{$|^\s*crate::storage::any_remote\(self\.inner\.sources\(\)\)$")

# Storage functions that answer yes or no about something other than where bytes are
# (a length, which option keys are credentials, whether a URL scheme can list, ...):
# the only ones code outside storage may call. Any other predicate storage defines,
# whatever its name, is a question about the backend, which callers must not ask:
# they hand storage the ranges a read needs and it decides (`storage::fetch_reads`).
STORAGE_PREDICATES_CALLERS_MAY_ASK = {
    "is_empty": "a length",
    "is_secret_key": "which storage option keys hold credentials (kept out of descriptions)",
}


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


def _storage_predicates() -> set[str]:
    """The names of the functions ``rust/storage/`` offers that return ``bool``: its
    ``pub`` ones and its traits' methods (declared without a body)."""
    sig = r"fn\s+(\w+)\s*(?:<[^{;]*?>)?\s*\((?:[^(){};]|\([^()]*\))*\)\s*->\s*bool\b"
    names: set[str] = set()
    for path in STORAGE.glob("*.rs"):
        code = "\n".join(_code(line) for line in path.read_text().split("#[cfg(test)]", 1)[0].splitlines())
        names |= set(re.findall(r"\bpub(?:\([^)]*\))?\s+" + sig, code))
        names |= set(re.findall(r"\b" + sig + r"\s*;", code))
    return names


def test_no_code_outside_storage_asks_storage_where_bytes_are_under_any_name() -> None:
    predicates = _storage_predicates()
    assert {"reads_in_place", "any_remote"} <= predicates, predicates  # the scan finds them
    asked = re.compile(r"(?:\.|::)(" + "|".join(sorted(predicates - set(STORAGE_PREDICATES_CALLERS_MAY_ASK))) + r")\b")
    hits = []
    for path in _rust_files_outside_storage():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if asked.search(_code(line)) and not ALLOWED.match(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, ("a storage predicate asked outside rust/storage/ (hand storage the ranges a read needs, "
                      "or say why it is not about the backend in STORAGE_PREDICATES_CALLERS_MAY_ASK):\n"
                      + "\n".join(hits))


def test_python_never_asks_whether_data_is_remote() -> None:
    # the read-ahead comes from PageIndex.suggested_read_ahead; only the CLI describes
    # the files (GETs per object) with the public PageIndex.is_remote
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in sorted((ROOT / "python" / "youmu").rglob("*.py")) if p.name != "cli.py"
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"\bis_remote\b|\bover_network\b", line.split("#", 1)[0])]
    assert not hits, "\n".join(hits)


def test_a_match_on_the_backend_is_caught() -> None:
    # the forms discovery took before listing moved into storage, and the ones it must not take again
    for line in (
        "match Location::of(s)? {",
        "Location::Local(local) => {",
        "Found::Local(p) => Ok(p),",
        "out.push(Found::Remote { spec, path, meta: None });",
        "let Source::Remote(o) = source else { return };",
        "if self.files[file].source.over_network() {",
        "background(self.inner.is_remote(), move || work())",
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
