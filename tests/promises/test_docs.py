"""Documentation promises of every module of the package: each public module says
what it exports (``__all__``, names that exist), shows an example that runs (its
doctests pass), and cites papers and systems by name — never issue numbers or
development history, which a reader of the code cannot follow."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import youmu

PACKAGE = Path(youmu.__file__).parent

# Modules that need an optional dependency to import.
OPTIONAL = {"youmu.ray": "ray"}


def _modules() -> list[str]:
    names = ["youmu"]
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="youmu."):
        if info.name.split(".")[-1].startswith("_"):
            continue
        names.append(info.name)
    return sorted(names)


MODULES = _modules()


def _import(name: str):
    for prefix, dep in OPTIONAL.items():
        if name == prefix or name.startswith(prefix + "."):
            pytest.importorskip(dep)
    return importlib.import_module(name)


@pytest.mark.parametrize("name", MODULES)
def test_every_module_declares_what_it_exports(name: str) -> None:
    mod = _import(name)
    exported = getattr(mod, "__all__", None)
    assert isinstance(exported, list), f"{name} has no __all__ list"
    missing = [n for n in exported if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats names"


@pytest.mark.parametrize("name", MODULES)
def test_every_module_has_an_example_that_runs(name: str) -> None:
    mod = _import(name)
    assert mod.__doc__, f"{name} has no module docstring"
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} doctest(s) failed"
    assert result.attempted > 0, f"{name} shows no example"


_HISTORY = re.compile(r"\b[Ii]ssue #?\d+|\bthe paper\b|notes/\w+\.md")
# A reference into a paper ("Eq. 2", "Lemma 4", "App. D", "§3.3") names the paper on
# its line or the line before (the short names of docs/references.md).
_POINTER = re.compile(r"\b(Eq\.|Eqs\.|App\.|Appendix|Lemma|Theorem|Table|Fig\.)\s*[0-9A-Z]|§\s*\d")
_NAMES = re.compile(r"Youmu|ODB|DGAP|MegaScale-Data|FlatMixture|Graham|Fraenkel|Karmarkar|Luby|Black|Durner|Parquet|"
                    r"torchdata|MosaicML|Levanter|Megatron|arrow-rs|object_store")


def test_comments_cite_papers_by_name_not_issue_numbers_or_unreachable_notes() -> None:
    root = PACKAGE.parent.parent
    offenders = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(root / "rust").rglob("*.rs"), *(root / "docs").rglob("*.md")]):
        lines = path.read_text().splitlines()
        for lineno, line in enumerate(lines, 1):
            before = lines[lineno - 2] if lineno > 1 else ""
            unnamed = (_POINTER.search(line) and not (_NAMES.search(line) or _NAMES.search(before))
                       and path.name != "references.md")  # the page that defines the names
            if _HISTORY.search(line) or unnamed:
                offenders.append(f"{path.relative_to(root)}:{lineno}: {line.strip()}")
    assert not offenders, "cite papers and systems by name (docs/references.md):\n" + "\n".join(offenders[:60])


def test_tests_benches_and_examples_cite_no_issue_numbers() -> None:
    """Issue numbers mean nothing to a reader of a clone: the rule holds outside the package too."""
    root = PACKAGE.parent.parent
    issue = re.compile(r"\b[Ii]ssue #?\d+")
    paths = [*(root / "tests").rglob("*.py"), *(root / "benches").glob("*.py"), *(root / "examples").glob("*.py"),
             root / "README.md", root / "benches" / "RESULTS.md"]
    offenders = [f"{p.relative_to(root)}:{n}: {line.strip()}" for p in sorted(paths)
                 for n, line in enumerate(p.read_text().splitlines(), 1) if issue.search(line)]
    assert not offenders, "\n".join(offenders[:40])


# The documentation site (mkdocs.yml, docs/): the API reference is generated from the
# docstrings above, so what the package exports is what the site documents.
ROOT = PACKAGE.parent.parent
REFERENCE = ROOT / "docs" / "reference"
# Imported on their own by users (they import their trainer): a reference entry each.
TRAINER_MODULES = ["youmu.integrations.hf", "youmu.integrations.accelerate", "youmu.integrations.lightning",
                   "youmu.integrations.mesh"]


def _source(module: str) -> Path:
    path = ROOT / "python" / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _documented_modules() -> list[str]:
    """The modules the reference pages render (``::: youmu.x``; a directive naming a
    function, as ``::: youmu.torch.pack.pack`` does, is not one)."""
    return [m for page in sorted(REFERENCE.glob("*.md"))
            for m in re.findall(r"^::: (youmu[\w.]*)\s*$", page.read_text(), re.MULTILINE) if _source(m).is_file()]


def _exports(module: str) -> list[str]:
    """A module's ``__all__``, read from its source: importing the trainer modules would
    import their trainers."""
    import ast

    source = _source(module)
    for node in ast.parse(source.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(getattr(t, "id", None) == "__all__" for t in targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    return []


def test_every_package_and_top_level_module_has_a_reference_entry() -> None:
    wanted = [m for m in MODULES if m.count(".") <= 1] + TRAINER_MODULES
    documented = set(_documented_modules())
    missing = [m for m in wanted if m not in documented]
    assert not missing, f"add `::: name` to a page of docs/reference/ for: {missing}"


def test_the_design_notes_are_pages_of_the_site() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    for page in ["architecture.md", "references.md", "reference/index.md", "quickstart.md"]:
        assert (ROOT / "docs" / page).is_file(), page
        assert re.search(rf":\s*{re.escape(page)}\s*$", config, re.MULTILINE), f"{page} is not in mkdocs.yml's nav"


@pytest.mark.timeout(300)
def test_the_site_builds_strictly_with_an_entry_for_every_exported_name(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (what ``make docs`` runs): no broken link or anchor, no page
    outside the nav, no unreadable docstring; and the built reference has an anchor for
    every name each documented module exports (a name that is also a submodule's is
    documented as ``module.name.name``)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "NO_MKDOCS_2_WARNING": "1"}
    site = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    anchors = {a for page in site.rglob("*.html") for a in re.findall(r'id="(youmu[\w.]*)"', page.read_text())}
    missing = [f"{m}.{name}" for m in _documented_modules() for name in _exports(m)
               if f"{m}.{name}" not in anchors and f"{m}.{name}.{name}" not in anchors]
    assert not missing, f"exported but not in the built API reference: {missing}"


def test_the_readme_opens_with_the_two_commands_and_links_into_the_site() -> None:
    """The README is the first screen: its first code block is the two commands, and
    every page it links to exists (the rest of the documentation is the site's)."""
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```(\w*)\n(.*?)```", readme, re.DOTALL)
    assert first and first.group(2) == "make demo\nmake test\n", first and first.group(0)
    links = re.findall(r"\]\(((?:docs|benches)/[^)#]+)(?:#[^)]*)?\)", readme)
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, f"the README links to files that do not exist: {missing}"
