"""Every state format is declared once and found from one place: the catalog
(``youmu.state.catalog``) lists where each declaration lives, ``merge_states`` takes
each format's merge from its declaration through it, and no declaration is missing
from it (a format the catalog does not know would be merged, walked and frozen by
no one)."""

from __future__ import annotations

import ast
from pathlib import Path

import youmu
from youmu.state.catalog import HOMES, declared, format_tagged, merger_of

PACKAGE = Path(youmu.__file__).parent
_DECLARERS = {"StateFormat", "_stream_format"}


def _module_level_declarations() -> set[str]:
    """``module:name`` of every module-level assignment in the package that builds a
    ``StateFormat`` (directly or through a stream kind's ``_stream_format``)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(("youmu", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            calls = {c.func.id for c in ast.walk(node.value) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if calls & _DECLARERS:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.update(f"{module}:{t.id}" for t in targets if isinstance(t, ast.Name))
    return found


def test_every_declared_format_is_in_the_catalog() -> None:
    assert _module_level_declarations() == set(HOMES)


def test_each_tag_names_one_format() -> None:
    tags = [tag for fmt in declared() for tag in fmt.tags]
    assert len(tags) == len(set(tags)), tags
    for fmt in declared():
        assert all(format_tagged(tag) is fmt for tag in fmt.tags)


def test_every_merge_a_declaration_names_is_a_function_of_its_owner() -> None:
    named = [fmt for fmt in declared() if fmt.merger is not None]
    owners = {fmt.merger.split(":")[0].split(".")[1] for fmt in named}  # type: ignore[union-attr]
    assert {"batching", "planning", "ray", "state"} <= owners
    for fmt in named:
        assert callable(merger_of(fmt.tag)), fmt.tag


def test_a_format_without_a_declared_merge_has_none() -> None:
    assert merger_of("youmu.TrainerLoader/1") is None  # a TrainerLoader resizes from the ranks' states itself
    assert merger_of("youmu.MapStream/1") is None  # a row stream: merge_states' own merge
    assert merger_of("no.such/1") is None and merger_of(None) is None
