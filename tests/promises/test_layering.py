"""The layers stay layers: the Python package is one ordered list of layers
(:data:`LAYERS`) and acyclic, and the Rust storage layer stays one abstraction.

Every module of ``python/youmu`` imports only modules of its own layer or below it (a
lazy import inside a function is still a dependency); the job-states layer (``youmu.state.jobs``) that every
merge uses sits at the bottom, and no loader's merge imports the top-level
``merge_states``. No module takes another module's private names.

Code outside ``rust/storage/`` holds a ``storage::Source`` (one ``Storage`` trait, local
files and objects in stores behind it) and calls storage functions that are synchronous:
it never asks which backend a file is on and never waits on the async I/O runtime
itself. Inside ``rust/storage/`` the modules form no import cycle and stay small. These
checks read the Rust sources, so a change that starts branching on the backend again
fails here rather than in review.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from youmu.order.modes import MODES

ROOT = Path(__file__).resolve().parents[2]
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
}


def _code(line: str) -> str:
    """``line`` without a trailing ``//`` comment (comments may name anything)."""
    return line.split("//", 1)[0]


def _rust_files_outside_storage() -> list[Path]:
    return sorted(p for p in RUST.rglob("*.rs") if STORAGE not in p.parents)


def test_rust_sources_are_found() -> None:
    files = _rust_files_outside_storage()
    assert RUST / "index" / "read.rs" in files and RUST / "py" / "index.rs" in files
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


# "Is this still the process that made it?" is one question with one answer, the fork
# generation `rust/runtime/perprocess.rs` keeps (bumped by a `pthread_atfork` child handler):
# a process id compared elsewhere is a second answer, and a pid can be reused.
PROCESS_ID_COMPARED = re.compile(r"(?:==|!=)\s*std::process::id\(\)|std::process::id\(\)\s*(?:==|!=)|\bpid:\s*u32\b")


def test_only_perprocess_asks_which_process_this_is() -> None:
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in sorted(RUST.rglob("*.rs")) if p.name != "perprocess.rs"
            for n, line in enumerate(p.read_text().splitlines(), 1) if PROCESS_ID_COMPARED.search(_code(line))]
    assert not hits, "compare crate::runtime::perprocess::fork_generation() instead:\n" + "\n".join(hits)
    for line in ("if self.pid != std::process::id() {", "    pid: u32,"):
        assert PROCESS_ID_COMPARED.search(line), line
    assert not PROCESS_ID_COMPARED.search('let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));')


def _storage_modules() -> dict[str, list[Path]]:
    """Each module of ``rust/storage/`` by name: a file, or a folder with its files."""
    out = {p.stem: [p] for p in STORAGE.glob("*.rs") if p.stem != "mod"}
    out |= {p.name: sorted(p.rglob("*.rs")) for p in STORAGE.iterdir() if p.is_dir()}
    return out


def _storage_imports() -> dict[str, set[str]]:
    """Sibling modules each storage module refers to (``super::name`` from a file of
    ``storage/`` or a folder's ``mod.rs``, ``super::super::name`` from a folder's other
    files, ``crate::storage::name`` from anywhere), tests excluded."""
    modules = _storage_modules()
    graph: dict[str, set[str]] = {}
    for m, files in modules.items():
        refs: set[str] = set()
        for f in files:
            code = "\n".join(_code(line) for line in f.read_text().split("#[cfg(test)]", 1)[0].splitlines())
            refs |= set(re.findall(r"crate::storage::(\w+)", code))
            for group in re.findall(r"crate::storage::\{([^}]*)\}", code):
                refs |= set(re.findall(r"(?:^|,)\s*(\w+)", group))
            if f.parent == STORAGE or f.name == "mod.rs":
                refs |= set(re.findall(r"(?<!::)\bsuper::(\w+)", code))
            else:
                refs |= set(re.findall(r"\bsuper::super::(\w+)", code))
        graph[m] = {r for r in refs if r in modules and r != m}
    return graph


def test_storage_modules_form_no_import_cycle() -> None:
    graph = _storage_imports()
    assert graph["client"] >= {"aio", "spec", "stores"}, graph
    assert graph["scheme"] >= {"stores", "walk", "listed", "client", "remote"}, graph["scheme"]
    assert graph["spec"] >= {"stores"}, graph["spec"]
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


def _rust_top_level_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """The crate's top-level modules each top-level module refers to (``crate::name``,
    ``crate::{a, b::c}``, or a name ``lib.rs`` re-exports such as ``crate::Error``), from
    ``sources``: each module's code (a directory module's files together), tests excluded."""
    lib = (RUST / "lib.rs").read_text()
    reexported = {name.strip(): m for m, names in re.findall(r"^pub use (\w+)::\{?([\w, ]+)\}?;", lib, re.M)
                  for name in names.split(",")}
    graph: dict[str, set[str]] = {}
    for m, text in sources.items():
        code = "\n".join(_code(line) for line in text.splitlines())
        refs = re.findall(r"crate::(\w+)", code)
        for group in re.findall(r"crate::\{([^}]*)\}", code):
            refs += re.findall(r"(?:^|,)\s*(\w+)", group)
        graph[m] = {reexported.get(r, r) for r in refs} & set(sources) - {m}
    return graph


def _rust_top_level_sources() -> dict[str, str]:
    """Each top-level module of the crate (``rust/x.rs`` with its ``rust/x/`` files) by name,
    its ``#[cfg(test)]`` modules cut off."""
    names = {p.stem for p in RUST.glob("*.rs")} - {"lib"} | {p.name for p in RUST.iterdir() if p.is_dir()}
    out = {}
    for m in sorted(names):
        files = [RUST / f"{m}.rs"] if (RUST / f"{m}.rs").exists() else []
        files += sorted((RUST / m).rglob("*.rs")) if (RUST / m).is_dir() else []
        out[m] = "\n".join(f.read_text().split("#[cfg(test)]", 1)[0] for f in files)
    return out


def test_rust_top_level_modules_form_no_import_cycle() -> None:
    # the layers, bottom up: error (with the leaves it uses: redact), the process settings
    # (limits, runtime/), storage/, one Parquet file (parquet/), the index with its
    # discovery, persistence and readers (index/), order (order/) and the bindings (py/);
    # a cycle among them makes every layer every other's
    graph = _rust_top_level_graph(_rust_top_level_sources())
    assert {"storage", "error", "runtime", "parquet", "index", "order", "py"} <= set(graph), sorted(graph)
    assert {"error", "storage", "parquet"} <= graph["index"], graph["index"]
    cycle = _cycle(graph)
    assert cycle is None, "import cycle among the Rust crate's top-level modules: " + " -> ".join(cycle or [])


def test_a_rust_import_cycle_is_caught_in_every_form() -> None:
    # a path, a use list, a name lib.rs re-exports; comments name anything
    planted = {
        "error": "pub fn message(&self) -> String { crate::storage::redact::redact(&s) }",
        "storage": "use crate::{error::Error, runtime};",
        "runtime": "pub fn f() -> crate::Result<()> { Ok(()) } // crate::index::PageIndex",
        "index": "use crate::storage::Source;",
    }
    graph = _rust_top_level_graph(planted)
    assert graph == {"error": {"storage"}, "storage": {"error", "runtime"}, "runtime": {"error"},
                     "index": {"storage"}}, graph
    assert _cycle(graph) == ["error", "storage", "error"]
    assert _cycle(_rust_top_level_graph({"error": "use crate::{limits};", "limits": "fn f() -> crate::Result<()>"})) \
        == ["error", "limits", "error"]
    del planted["error"]
    assert _cycle(_rust_top_level_graph(planted)) is None


# Which kind of object store a URL names is the store registry's (`rust/storage/stores/`,
# one file per kind, as `object_store` keeps one folder per store); which kind of place,
# the scheme registry's (`rust/storage/scheme/`, one file per scheme). Everything else
# asks a store's or a scheme's own methods: `object_store`'s enum of kinds is named in the
# store registry only, and a saved index's files are reopened by the scheme of each name.
STORE_REGISTRY = STORAGE / "stores"
SCHEME_REGISTRY = STORAGE / "scheme"


def test_store_kinds_are_told_apart_only_by_the_store_registry() -> None:
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in sorted(RUST.rglob("*.rs")) if STORE_REGISTRY not in p.parents
            for n, line in enumerate(p.read_text().splitlines(), 1) if "ObjectStoreScheme" in _code(line)]
    assert not hits, ("a kind of store told apart outside rust/storage/stores/ (give StoreKind a method and "
                      "implement it in each store's file instead):\n" + "\n".join(hits))


def _registered(registry: Path, macro: str) -> set[str]:
    """The files a registry's one registration line (``macro!(file::ITEM, ...)``) names."""
    line = re.search(macro + r"!\(([^)]*)\);", (registry / "mod.rs").read_text())
    assert line, f"{registry.relative_to(ROOT)}/mod.rs registers through {macro}!(...)"
    return set(re.findall(r"(\w+)::\w+", line.group(1)))


def test_each_store_and_scheme_is_one_file_registered_in_one_line() -> None:
    stores = {p.stem for p in STORE_REGISTRY.glob("*.rs")} - {"mod"}
    assert stores >= {"s3", "gcs", "azure", "http"}, stores
    assert _registered(STORE_REGISTRY, "stores") == stores
    schemes = {p.stem for p in SCHEME_REGISTRY.glob("*.rs")} - {"mod"}
    assert schemes >= {"files", "objects", "hub"}, schemes
    assert _registered(SCHEME_REGISTRY, "schemes") == schemes
    # no `mod` line of its own: a file is a store or a scheme by being registered
    for registry in (STORE_REGISTRY, SCHEME_REGISTRY):
        assert not re.search(r"^\s*(pub\s+)?mod \w+;", (registry / "mod.rs").read_text(), re.M), registry


def test_a_saved_index_is_reopened_through_the_scheme_registry() -> None:
    # `open.rs` reopened local files and objects itself, branching on what was saved
    code = "\n".join(_code(line) for line in (STORAGE / "open.rs").read_text().split("#[cfg(test)]", 1)[0].splitlines())
    assert "scheme.reopen(" in code and "scheme_of(&s.name)" in code
    for backend in ("LocalFile", "RemoteObject", "StoreSpec", ".object"):
        assert backend not in code, f"open.rs reopens through the schemes, not with {backend}"


def test_storage_modules_stay_small() -> None:
    big = {str(p.relative_to(STORAGE)): n for p in STORAGE.rglob("*.rs") if (n := len(p.read_text().splitlines())) > 500}
    assert not big, f"split these storage modules by idea (over 500 lines): {big}"


# Past this many lines a Rust module holds several ideas, to be split by idea, unless the
# first line of its doc comment says it is one algorithm (and which).
MODULE_LINES = 500


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


# -- the Python package -------------------------------------------------------------------------
PACKAGE = ROOT / "python" / "youmu"


def _python_sources() -> dict[str, str]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        out[name] = p.read_text(encoding="utf-8")
    return out


def _imports(name: str, tree: ast.AST, modules: set[str]) -> set[str]:
    """The package's modules ``name`` imports, anywhere in its body (``from pkg import
    mod`` counts as importing ``mod``)."""
    is_package = any(m.startswith(name + ".") for m in modules)
    deps: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            if n.level:
                parts = name.split(".")
                base = parts[: len(parts) - n.level + (1 if is_package else 0)]
                module = ".".join(base + ([n.module] if n.module else []))
            else:
                module = n.module or ""
            if not module.startswith("youmu"):
                continue
            subs = {f"{module}.{a.name}" for a in n.names} & modules
            deps |= subs or {module}
        elif isinstance(n, ast.Import):
            deps |= {a.name for a in n.names if a.name.startswith("youmu")}
    return {d for d in deps if d in modules and d != name}


def _import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    modules = set(sources)
    return {m: _imports(m, ast.parse(text), modules) for m, text in sources.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, or ``None``. A package and its own submodules do
    not count: a package's ``__init__`` names what it holds."""
    done: set[str] = set()

    def related(a: str, b: str) -> bool:
        return a.startswith(b + ".") or b.startswith(a + ".")

    def visit(m: str, path: list[str]) -> list[str] | None:
        if m in path:
            return [*path[path.index(m):], m]
        if m in done:
            return None
        for d in sorted(graph.get(m, ())):
            if not related(m, d) and (found := visit(d, [*path, m])):
                return found
        done.add(m)
        return None

    for m in sorted(graph):
        if found := visit(m, []):
            return found
    return None


def test_python_modules_are_found() -> None:
    graph = _import_graph(_python_sources())
    assert {"youmu.merge", "youmu.state.jobs", "youmu.batching.merge"} <= set(graph)
    assert "youmu.state.jobs" in graph["youmu.merge"], graph["youmu.merge"]


# The Python package keeps the Rust modules' rule (MODULE_LINES): past it a module is split
# by idea unless the first line of its docstring says it is one algorithm (and which).
PY_MODULE_LINES = MODULE_LINES


def test_python_modules_stay_small_unless_one_algorithm() -> None:
    big = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        doc = ast.get_docstring(ast.parse(text)) or ""
        if len(text.splitlines()) > PY_MODULE_LINES and "one algorithm" not in doc.split("\n")[0].lower():
            big[str(path.relative_to(ROOT))] = len(text.splitlines())
    assert not big, (
        f"split these Python modules by idea (over {PY_MODULE_LINES} lines), or say in the first line of the "
        f"module's docstring that it is one algorithm and which: {big}"
    )


def test_python_package_has_no_import_cycle() -> None:
    cycle = _cycle(_import_graph(_python_sources()))
    assert cycle is None, "import cycle in python/youmu: " + " -> ".join(cycle or [])


#: The package's layers, bottom first. A module imports only modules of its own layer
#: or of layers below it (a lazy import inside a function counts); within a layer the
#: module graph stays acyclic (above). A new package joins one layer here.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("plumbing: the native module, errors, argument checks, redaction", ("youmu._core", "youmu._internal",
                                                                          "youmu.errors")),
    ("processes and jobs: ranks, channels, producer threads", ("youmu.distributed",)),
    ("pure order maps: shards, shuffle modes, resume math", ("youmu.order",)),
    ("state formats: declarations, codecs, job chains, merges of streams", ("youmu.state",)),
    ("the stream core: the one Parquet pass, specs, rows, the Hub", ("youmu.streams",)),
    ("row kinds and the loader contract", ("youmu.mixture", "youmu.text", "youmu.loaders")),
    ("images", ("youmu.vision",)),
    ("torch views and step planning", ("youmu.torch", "youmu.planning")),
    ("loaders: dynamic batching, Ray", ("youmu.batching", "youmu.ray")),
    ("one state for any topology", ("youmu.merge",)),
    ("trainer integrations", ("youmu.integrations",)),
    ("faces", ("youmu", "youmu.cli", "youmu.__main__")),
)


def _layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the layer holding ``module`` (the package
    ``youmu`` itself is its ``__init__``, not everything below it)."""
    for i, (_, packages) in enumerate(LAYERS):
        if any(module == p or (p != "youmu" and module.startswith(p + ".")) for p in packages):
            return i
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def _upward_imports(sources: dict[str, str]) -> list[str]:
    graph = _import_graph({**sources, "youmu._core": ""})
    return sorted(f"{m} ({LAYERS[_layer_of(m)][0].split(':')[0]}) imports {d} ({LAYERS[_layer_of(d)][0].split(':')[0]})"
                  for m, deps in graph.items() for d in deps if _layer_of(d) > _layer_of(m))


def test_every_module_sits_in_one_layer_and_imports_only_its_layer_and_below() -> None:
    sources = _python_sources()
    placed = [p for _, packages in LAYERS for p in packages]
    assert len(placed) == len(set(placed)), placed
    tops = {".".join(m.split(".")[:2]) for m in sources}
    assert tops <= set(placed), f"packages in no layer: {sorted(tops - set(placed))}"
    hits = _upward_imports(sources)
    assert not hits, "imports reaching up a layer (move the code down, or pass it in):\n" + "\n".join(hits)


def test_an_upward_import_is_caught() -> None:
    sources = {"youmu.state.x": "def f():\n    from youmu.streams.y import g\n", "youmu.streams.y": "g = 1\n",
               "youmu._internal.z": "from youmu import _core\n"}
    assert _upward_imports(sources) == [
        "youmu.state.x (state formats) imports youmu.streams.y (the stream core)"]


def test_an_import_cycle_through_a_lazy_import_is_caught() -> None:
    sources = {"youmu.a": "from youmu.b import f\n",
               "youmu.b": "def f():\n    from youmu import a\n    return a\n"}
    assert _cycle(_import_graph(sources)) == ["youmu.a", "youmu.b", "youmu.a"]


def test_job_states_sit_at_the_bottom_and_merges_never_call_back_up() -> None:
    graph = _import_graph(_python_sources())
    assert graph["youmu.state.jobs"] <= {"youmu.state.contract", "youmu.errors", "youmu._internal.args",
                                         "youmu.order.resume"}, graph["youmu.state.jobs"]
    merges = [m for m in graph if m.endswith(".merge") and m != "youmu.merge"]
    assert len(merges) >= 3, merges
    for m in merges:
        assert "youmu.merge" not in graph[m], f"{m} imports the top-level merge: take it as the merge callback"


def test_the_loader_state_owner_reads_its_format_alone_and_calls_no_loader_module_back() -> None:
    """``DynamicBatchLoader``'s format has one owner (``batching/state.py``), below the
    loader's load and merge: loading a state once went config -> merge -> config and
    read the state twice. The config knows settings, not the format; the owner imports
    the config for its type only."""
    graph = _import_graph(_python_sources())
    owner = graph["youmu.batching.state"]
    allowed = {"youmu.errors", "youmu._internal.args", "youmu.batching.algo.step_info", "youmu.batching.config",
               "youmu.order.resume"}
    assert {m for m in owner if not m.startswith("youmu.state.")} <= allowed, owner
    assert "youmu.batching.state" not in graph["youmu.batching.config"]
    assert "youmu.batching.state" in graph["youmu.batching.merge"] and "youmu.batching.merge" not in owner
    text = (PACKAGE / "batching" / "state.py").read_text()
    assert "if TYPE_CHECKING:\n    from youmu.batching.config import LoaderConfig" in text


def _private_imports(sources: dict[str, str]) -> list[str]:
    """``from youmu.x import _name`` where ``_name`` is not itself a module."""
    modules = set(sources) | {"youmu._core"}
    found = []
    for name, text in sources.items():
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").startswith("youmu"):
                found += [f"{name}:{n.lineno} takes {n.module}.{a.name}" for a in n.names
                          if a.name.startswith("_") and f"{n.module}.{a.name}" not in modules]
    return found


def test_no_module_takes_another_modules_private_names() -> None:
    bad = _private_imports(_python_sources())
    assert not bad, "a name another module needs is not private; or the two modules are one idea: " + "; ".join(bad)


def test_a_private_import_is_caught() -> None:
    sources = {"youmu.a": "def _helper():\n    pass\n", "youmu.b": "from youmu.a import _helper\n",
               "youmu.c": "from youmu import _core\n"}
    assert _private_imports(sources) == ["youmu.b:1 takes youmu.a._helper"]


def _pass_through_exports(sources: dict[str, str]) -> list[str]:
    """Names a module that is not a package lists in its ``__all__`` but imports."""
    found = []
    for name, text in sources.items():
        if any(m.startswith(name + ".") for m in sources):
            continue  # a package's __init__ is its face: it names what its modules hold
        tree = ast.parse(text)
        imported: set[str] = set()
        exported: list[str] = []
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                imported |= {(a.asname or a.name).split(".")[0] for a in n.names}
            elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                target = n.targets[0] if isinstance(n, ast.Assign) else n.target
                if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(n.value, (ast.List, ast.Tuple)):
                    exported += [e.value for e in n.value.elts if isinstance(e, ast.Constant)]
        found += [f"{name} re-exports {x}" for x in exported if x in imported]
    return found


def test_no_module_but_a_package_re_exports_another_modules_names() -> None:
    bad = _pass_through_exports(_python_sources())
    assert not bad, "import each name from the module that defines it: " + "; ".join(bad)


def test_a_re_export_is_caught() -> None:
    sources = {"youmu.a": "X = 1\n", "youmu.b": "from youmu.a import X\n__all__ = ['X', 'y']\ny = 2\n",
               "youmu.p": "from youmu.p.m import X\n__all__ = ['X']\n", "youmu.p.m": "X = 1\n"}
    assert _pass_through_exports(sources) == ["youmu.b re-exports X"]


def _renamed_imports(sources: dict[str, str]) -> list[str]:
    """Module-level ``X = Y`` where ``Y`` is a name the module imports: one thing under a
    second name, which a reader (or a grep for the first) does not find."""
    found = []
    for name, text in sources.items():
        body = ast.parse(text).body
        imported = {(a.asname or a.name).split(".")[0]
                    for n in body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        found += [f"{name}:{n.lineno} {n.targets[0].id} = {n.value.id}" for n in body
                  if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and n.value.id in imported
                  and isinstance(n.targets[0], ast.Name)]
    return found


def test_no_module_renames_a_name_it_imports() -> None:
    bad = _renamed_imports(_python_sources())
    assert not bad, "use the imported name itself (or import it `as` the other name): " + "; ".join(bad)


def test_a_renamed_import_is_caught() -> None:
    sources = {"youmu.a": "from youmu.b import OWNER\n_OWNER = OWNER\nT = 3\nU = T\n"}
    assert _renamed_imports(sources) == ["youmu.a:2 _OWNER = OWNER"]


def _all_declarations(sources: dict[str, str]) -> list[str]:
    """Modules whose ``__all__`` is assigned or extended by more than one statement."""
    found = []
    for name, text in sources.items():
        lines = [n.lineno for n in ast.parse(text).body
                 if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                 and any(isinstance(t, ast.Name) and t.id == "__all__"
                         for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
        if len(lines) > 1:
            found.append(f"{name} at lines {lines}")
    return found


def test_each_module_declares_its_all_once() -> None:
    # what a module exports is read in one place, at its top
    bad = _all_declarations(_python_sources())
    assert not bad, "declare __all__ once: " + "; ".join(bad)


def test_a_second_all_is_caught() -> None:
    sources = {"youmu.a": "__all__ = ['f']\ndef f(): pass\n__all__ += ['g']\n", "youmu.b": "__all__ = []\n"}
    assert _all_declarations(sources) == ["youmu.a at lines [1, 3]"]


# Public class names two modules define, each for its own idea, left as they are for now:
# name -> why. `youmu.integrations.mesh.LoaderState` (a DCP `Stateful`) is public API;
# the other is the in-process plan loaders' base class, `youmu.planning.state.loader_state`.
SHARED_CLASS_NAMES = {"LoaderState": "mesh's DCP wrapper is public; planning's is the plan loaders' base"}


def _same_named_classes(sources: dict[str, str]) -> list[str]:
    """Public class names defined at the top of more than one module, unless one class
    is the other's adapter (it derives from ``module.SameName``, as the torch streams
    derive from the torch-free core's)."""
    where: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for name, text in sources.items():
        for n in ast.parse(text).body:
            if isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                where.setdefault(n.name, []).append((name, n))
    found = []
    for cls, defs in sorted(where.items()):
        adapters = [m for m, d in defs if any(isinstance(b, (ast.Attribute, ast.Subscript)) and cls in ast.unparse(b)
                                              for b in d.bases)]
        if len(defs) - len(adapters) > 1 and cls not in SHARED_CLASS_NAMES:
            found.append(f"{cls} in {', '.join(m for m, _ in defs)}")
    return found


def test_no_two_classes_share_a_name() -> None:
    # two `Level`s once held two encodings of one idea: one name, one class
    bad = _same_named_classes(_python_sources())
    assert not bad, "name each class for its own idea: " + "; ".join(bad)


def test_two_classes_sharing_a_name_are_caught() -> None:
    sources = {"youmu.a": "class Level:\n    pass\n", "youmu.b": "class Level:\n    pass\nclass _P:\n    pass\n",
               "youmu.c": "class _P:\n    pass\n", "youmu.core": "class S:\n    pass\n",
               "youmu.t": "from youmu import core\nclass S(core.S, list):\n    pass\n"}
    assert _same_named_classes(sources) == ["Level in youmu.a, youmu.b"]


# A state's format tag, e.g. "youmu.MapStream/1": written once, as its owner's constant.
_FORMAT_TAG = re.compile(r"^youmu\.[A-Za-z][\w.]*/\d+$")


def _repeated_format_tags(sources: dict[str, str]) -> list[str]:
    """Format tags written as a literal in code (docstrings and doctests aside) in more
    than one place: a bump of one copy would refuse the states the other still writes."""
    seen: dict[str, list[str]] = {}
    for name, text in sources.items():
        tree = ast.parse(text)
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        for n in ast.walk(tree):
            if (isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                    and _FORMAT_TAG.match(n.value)):
                seen.setdefault(n.value, []).append(f"{name}:{n.lineno}")
    return [f"{tag} at {', '.join(at)}" for tag, at in sorted(seen.items()) if len(at) > 1]


def test_each_state_format_tag_is_written_once() -> None:
    bad = _repeated_format_tags(_python_sources())
    assert not bad, "import the owner's format constant instead of writing the tag again: " + "; ".join(bad)


def _format_constants(sources: dict[str, str]) -> dict[str, list[str]]:
    """Module-level names bound to a format tag, with the modules binding each."""
    names: dict[str, list[str]] = {}
    for name, text in sources.items():
        for n in ast.parse(text).body:
            target = n.targets[0] if isinstance(n, ast.Assign) and len(n.targets) == 1 else getattr(n, "target", None)
            value = getattr(n, "value", None)
            if (isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str)
                    and _FORMAT_TAG.match(value.value)):
                names.setdefault(target.id, []).append(name)
    return names


def test_each_state_format_constant_has_its_own_name() -> None:
    """A tag's constant says whose states it marks (``BALANCED_LOADER_FORMAT``), so a
    merge table or an import reads without renaming (``as``) what four modules call
    alike."""
    names = _format_constants(_python_sources())
    alike = {k: v for k, v in names.items() if len(v) > 1}
    assert not alike, f"name each owner's format tag for its owner: {alike}"
    assert "STATE_FORMAT" not in names, names["STATE_FORMAT"]
    assert _format_constants({"youmu.a": 'X_FORMAT = "youmu.A/1"\n', "youmu.b": 'X_FORMAT: str = "youmu.B/2"\n'}) == {
        "X_FORMAT": ["youmu.a", "youmu.b"]}


def test_a_repeated_format_tag_is_caught() -> None:
    sources = {"youmu.a": 'STATE_FORMAT = "youmu.A/1"\n',
               "youmu.b": '"""Saves ``"youmu.A/1"`` states."""\nif s["format"] == "youmu.A/1":\n    pass\n'}
    assert _repeated_format_tags(sources) == ["youmu.A/1 at youmu.a:1, youmu.b:2"]


# the one rule per setting that every loader shares: (function that holds it, its module)
_ONE_RULE = {"seed": ("seed_arg", "youmu._internal.args"), "epoch": ("check_epoch", "youmu.state.contract")}


def _own_checks(sources: dict[str, str]) -> list[str]:
    """Calls of the generic int checkers on a setting that has its one rule, outside
    the function that holds that rule."""
    found = []
    for name, text in sources.items():
        tree = ast.parse(text)
        allowed = {id(c) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                   for setting, (holder, module) in _ONE_RULE.items() if f.name == holder and name == module
                   for c in ast.walk(f)}
        for n in ast.walk(tree):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                    and n.func.id in ("int_arg", "opt_int_arg", "state_int") and n.args
                    and isinstance(n.args[0], ast.Constant) and n.args[0].value in _ONE_RULE
                    and id(n) not in allowed):
                found.append(f"{name}:{n.lineno} checks {n.args[0].value!r} itself")
    return sorted(found)


def test_each_shared_setting_has_one_rule() -> None:
    bad = _own_checks(_python_sources())
    assert not bad, "use youmu._internal.args.seed_arg / youmu.state.contract.check_epoch: " + "; ".join(bad)


def test_a_setting_checked_by_hand_is_caught() -> None:
    sources = {"youmu.a": "def f(seed):\n    return int_arg('seed', seed, minimum=0)\n",
               "youmu._internal.args": "def seed_arg(seed):\n    return int_arg('seed', seed, minimum=0)\n"}
    assert _own_checks(sources) == ["youmu.a:2 checks 'seed' itself"]


def _own_state_int_ranges(sources: dict[str, str]) -> list[str]:
    """Comparisons with ``MAX_STATE_INT`` outside ``youmu.state.contract``: a module writing
    the state-integer range itself (``stateful.is_state_int`` / ``state_value_int`` /
    ``state_int`` hold it; passing it on as a bound, ``maximum=MAX_STATE_INT``, is fine)."""
    found = []
    for name, text in sources.items():
        if name == "youmu.state.contract":
            continue
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, ast.Compare) and any(isinstance(x, ast.Name) and x.id == "MAX_STATE_INT"
                                                  for x in [n.left, *n.comparators]):
                found.append(f"{name}:{n.lineno}")
    return found


def test_the_state_integer_range_is_checked_in_one_place() -> None:
    bad = _own_state_int_ranges(_python_sources())
    assert not bad, "use youmu.state.contract.is_state_int / state_value_int / state_int: " + "; ".join(bad)


def test_a_state_integer_range_written_again_is_caught() -> None:
    sources = {"youmu.a": "def ok(x):\n    return 0 <= x <= MAX_STATE_INT\n",
               "youmu.b": "def f(v):\n    return int_arg('run', v, maximum=MAX_STATE_INT)\n",
               "youmu.state.contract": "def is_state_int(x):\n    return 0 <= x <= MAX_STATE_INT\n"}
    assert _own_state_int_ranges(sources) == ["youmu.a:2"]


def _duck_typed_self(text: str) -> list[int]:
    """Lines where a class reads an attribute of ``self`` by name with a fallback
    (``getattr(self, "drop_last", False)``): an attribute only some subclasses have."""
    return [n.lineno for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")
            and len(n.args) >= 2 and isinstance(n.args[0], ast.Name) and n.args[0].id == "self"
            and isinstance(n.args[1], ast.Constant)]


def test_the_stream_core_asks_its_streams_through_methods_not_attribute_guesses() -> None:
    # the positional core is the base of every youmu stream: what it needs of one is a
    # method it declares (and a stream that resumes on another topology overrides)
    text = (PACKAGE / "streams" / "core.py").read_text()
    assert not _duck_typed_self(text), _duck_typed_self(text)
    assert _duck_typed_self("class A:\n    def f(self):\n        return getattr(self, 'rank', 0)\n") == [3]


def test_merging_stream_states_never_imports_torch() -> None:
    """``merge_states`` reads states, not streams: merging a row stream's states, a
    ``pack`` stream's (its own entry in the table) and a Parquet stream's leaves torch
    unimported — the stream format constants live outside the torch modules."""
    code = (
        "import sys\n"
        "from youmu.merge import merge_states\n"
        "row = {'format': 'youmu.MapStream/1', 'world_size': 2, 'rank': 0, 'run': 1, 'drop_last': False,\n"
        "       'data': 'd', 'epoch': 0, 'num_workers': 1, 'positions': {0: 3}}\n"
        "m = merge_states([row, {**row, 'rank': 1, 'positions': {0: 2}}])\n"
        "assert m['resumed'][0]['positions'] == [[3], [2]], m\n"
        "pack = {'format': 'youmu.PackedDataset/1', 'seq_len': 8, 'column': 'input_ids', 'eos_id': None,\n"
        "        'pad_id': None, 'epoch': 0, 'num_workers': 1, 'positions': {0: [3, 2]}, 'dataset': row}\n"
        "p = merge_states([pack, {**pack, 'positions': {0: [1, 0]}, 'dataset': {**row, 'rank': 1}}])\n"
        "assert p['stream'] == 'youmu.PackedDataset/1' and p['dataset']['resumed'][0]['tokens'] == [[2], [0]], p\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})



# What a process that must not load torch runs — a Ray source loader (a CUDA build of
# torch costs ~520 MB of private memory per process) reading, mapping and packing its
# streams: these modules and packages never reach the torch adapters (`youmu.torch`),
# not even through a lazy import, and import where `import torch` fails.
TORCH_FREE = ("youmu.streams", "youmu.order", "youmu.state", "youmu.mixture", "youmu.ray.source",
              "youmu.ray.source_actor")


def _under(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def _torch_adapter_paths(graph: dict[str, set[str]], roots: tuple[str, ...]) -> list[str]:
    """For each module under ``roots`` that reaches ``youmu.torch`` through its
    imports (lazy ones too), one path of imports that gets there."""
    found = []
    for start in sorted(m for m in graph if _under(m, roots)):
        parent: dict[str, str | None] = {start: None}
        todo = [start]
        while todo:
            m = todo.pop()
            for d in sorted(graph.get(m, ())):
                if d not in parent:
                    parent[d] = m
                    todo.append(d)
        hit = next((m for m in sorted(parent) if _under(m, ("youmu.torch",))), None)
        if hit is not None:
            path = [hit]
            while (up := parent[path[-1]]) is not None:
                path.append(up)
            found.append(" -> ".join(reversed(path)))
    return found


def test_the_torch_free_layers_never_reach_the_torch_adapters() -> None:
    graph = _import_graph(_python_sources())
    assert {"youmu.mixture.mapstream", "youmu.streams.packing", "youmu.ray.source_actor"} <= set(graph)
    bad = _torch_adapter_paths(graph, TORCH_FREE)
    assert not bad, "a torch-free module imports youmu.torch (move what it needs below it):\n" + "\n".join(bad)


def test_a_torch_free_module_reaching_the_torch_adapters_is_caught() -> None:
    sources = {"youmu.streams.a": "def f():\n    from youmu.streams import b\n", "youmu.streams.b": "import youmu.x\n",
               "youmu.x": "from youmu.torch.pack import pack\n", "youmu.torch.pack": "", "youmu.torch": "",
               "youmu.streams.c": "import youmu.order\n", "youmu.order": ""}
    assert _torch_adapter_paths(_import_graph(sources), ("youmu.streams",)) == [
        "youmu.streams.a -> youmu.streams.b -> youmu.x -> youmu.torch.pack",
        "youmu.streams.b -> youmu.x -> youmu.torch.pack"]


def _imports_without_torch(roots: tuple[str, ...], path: Path) -> list[str]:
    """The modules under ``roots`` (found under ``path``) that fail to import in a
    process where ``import torch`` fails, each with its error."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        "sys.modules['torch'] = None  # import torch (and torch.*) raises ImportError\n"
        f"todo, bad = list({list(roots)!r}), []\n"
        "while todo:\n"
        "    name = todo.pop()\n"
        "    try:\n"
        "        mod = importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        bad.append(f'{name}: {e!r}')\n"
        "        continue\n"
        "    if hasattr(mod, '__path__'):\n"
        "        todo += [m.name for m in pkgutil.iter_modules(mod.__path__, name + '.')]\n"
        "print(json.dumps(sorted(bad)))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_torch_free_layers_import_where_torch_cannot_be_imported() -> None:
    bad = _imports_without_torch(TORCH_FREE, PACKAGE.parent)
    assert not bad, "torch-free modules that need torch to import:\n" + "\n".join(bad)


def test_a_torch_free_module_importing_torch_is_caught(tmp_path: Path) -> None:
    pkg = tmp_path / "tfpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fine.py").write_text("import numpy\n")
    (pkg / "needs.py").write_text("import torch.utils.data\n")
    bad = _imports_without_torch(("tfpkg",), tmp_path)
    assert len(bad) == 1 and bad[0].startswith("tfpkg.needs: ModuleNotFoundError"), bad

# The shuffle modes' names: only their owner, the `youmu.order.modes` registry (one file
# per mode), compares them (everyone else asks a mode for its orders). "none" is a value of other settings too, so
# it counts only against an operand named like a shuffle mode.
_SHUFFLE_OWNER = "youmu.order.modes"
_MODE_NAMES = tuple(MODES)  # the registry's: a new mode is one file, this test follows
_SHARED_WORDS = {"none"}
_MODE_OPERAND = re.compile(r"mode|shuffle", re.IGNORECASE)


def _operand_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _operand_name(node.func)
    return ""


def _words(node: ast.AST) -> list[str]:
    """The string literals of ``node``: itself, or the items of a tuple/list/set."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [x.value for x in items if isinstance(x, ast.Constant) and isinstance(x.value, str)]


def _mode_comparisons(sources: dict[str, str]) -> list[str]:
    """Comparisons (``==``, ``!=``, ``in``, ``match`` cases) against a shuffle mode's
    name outside the module that owns the modes."""
    found: dict[str, set[str]] = {}
    for name, text in sources.items():
        if name == _SHUFFLE_OWNER or name.startswith(_SHUFFLE_OWNER + "."):
            continue
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, ast.Compare):
                pairs = [(a, b) for a in [n.left, *n.comparators] for b in [n.left, *n.comparators] if a is not b]
            elif isinstance(n, ast.Match):
                pairs = [(p.value, n.subject) for c in n.cases for p in ast.walk(c.pattern)
                         if isinstance(p, ast.MatchValue)]
            else:
                continue
            found.setdefault(f"{name}:{n.lineno}", set()).update(
                w for literal, other in pairs for w in _words(literal) if w in _MODE_NAMES
                and (w not in _SHARED_WORDS or _MODE_OPERAND.search(_operand_name(other))))
    return sorted(f"{at} compares {', '.join(map(repr, sorted(words)))}" for at, words in found.items() if words)


def test_only_the_shuffle_module_names_the_shuffle_modes() -> None:
    assert {"page", "row", "local", "none"} <= set(_MODE_NAMES), _MODE_NAMES
    bad = _mode_comparisons(_python_sources())
    assert not bad, "ask the mode (youmu.order.modes.ShuffleMode's properties), don't compare its name: " + "; ".join(bad)


def test_a_mode_compared_by_name_is_caught() -> None:
    sources = {"youmu.a": 'def f(plan, spec, kind, scaling):\n'
                          '    if plan.mode == "row" or "local" != spec.shuffle:\n        pass\n'
                          '    if spec.shuffle_mode in ("page", "none"):\n        pass\n'
                          '    if kind == "none" or scaling == "none":\n        pass\n'
                          '    match spec.shuffle:\n        case "row":\n            pass\n',
               "youmu.order.modes": 'def g(mode):\n    return mode == "page"\n'}
    assert _mode_comparisons(sources) == ["youmu.a:2 compares 'local', 'row'", "youmu.a:4 compares 'none', 'page'",
                                          "youmu.a:8 compares 'row'"]


# A stream state's fields (youmu.state.stream): only their owner reads or writes them by
# name, so a new field is one module's edit. The modules that build, load or merge a
# stream's states ask it; the loaders' own states (whose fields share some names) and
# the chain's wire form (youmu.state.jobs) are other formats and are not checked.
_STREAM_STATE_OWNER = "youmu.state.stream"
_STREAM_STATE_FIELDS = ("positions", "num_workers", "resumed", "dataset")
_STREAM_STATE_USERS = ("youmu.streams.core", "youmu.streams.parquet", "youmu.streams.spec", "youmu.merge", "youmu.state.stream_merge",
                       "youmu.streams.packing", "youmu.mixture.mapstream", "youmu.torch.pack", "youmu.torch.mapstream",
                       "youmu.torch.sharded",
                       "youmu.torch.dataset", "youmu.ray.source")


def _stream_state_fields_by_name(sources: dict[str, str]) -> list[str]:
    """Where a stream-state module names a field itself: a string constant used as a
    key (a subscript, a dict literal's key, ``.get``'s argument)."""
    found = []
    for name in _STREAM_STATE_USERS:
        for n in ast.walk(ast.parse(sources.get(name, ""))):
            keys: list[ast.AST] = []
            if isinstance(n, ast.Subscript):
                keys = [n.slice]
            elif isinstance(n, ast.Dict):
                keys = [k for k in n.keys if k is not None]
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args:
                keys = [n.args[0]]
            elif isinstance(n, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops):
                keys = [n.left]
            found += [f"{name}:{k.lineno} names {k.value!r}" for k in keys
                      if isinstance(k, ast.Constant) and k.value in _STREAM_STATE_FIELDS]
    return found


def test_only_the_stream_state_module_names_a_stream_states_fields() -> None:
    sources = _python_sources()
    assert set(_STREAM_STATE_USERS) <= set(sources), set(_STREAM_STATE_USERS) - set(sources)
    bad = _stream_state_fields_by_name(sources)
    assert not bad, f"read and write a stream state's fields through {_STREAM_STATE_OWNER}: " + "; ".join(bad)


def test_a_stream_state_field_named_by_hand_is_caught() -> None:
    sources = {"youmu.streams.core": 'def f(s):\n    return {"positions": s.get("num_workers"), **s}["resumed"]\n',
               "youmu.merge": 'def g(s):\n    return "dataset" in s\n'}
    assert sorted(_stream_state_fields_by_name(sources)) == [
        "youmu.merge:2 names 'dataset'", "youmu.streams.core:2 names 'num_workers'",
        "youmu.streams.core:2 names 'positions'", "youmu.streams.core:2 names 'resumed'"]
