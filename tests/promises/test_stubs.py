"""The hand-written ``_core.pyi`` stays in sync with the native module: every public
name and method on one side exists on the other."""

from __future__ import annotations

import ast
from pathlib import Path

import youmu._core as core

STUB = Path(__file__).resolve().parents[2] / "python" / "youmu" / "_core.pyi"


def _stub_names() -> dict[str, set[str]]:
    tree = ast.parse(STUB.read_text())
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                n.name if isinstance(n, ast.FunctionDef) else n.target.id  # type: ignore[union-attr]
                for n in node.body
                if isinstance(n, ast.FunctionDef) or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
            }
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = set()
    return out


def test_stub_and_module_agree() -> None:
    stub = _stub_names()
    module_names = {n for n in dir(core) if not n.startswith("__")}
    assert set(stub) == module_names, f"stub-only: {set(stub) - module_names}, module-only: {module_names - set(stub)}"
    for name, members in stub.items():
        obj = getattr(core, name)
        if not isinstance(obj, type):
            continue
        real = {m for m in dir(obj) if not m.startswith("_") or m in {"__len__", "__getitem__", "__init__"}}
        real.discard("__init__")
        members = members - {"__init__"}
        assert members <= set(dir(obj)), f"{name}: stub lists missing members {members - set(dir(obj))}"
        public = {m for m in real if not m.startswith("_")}
        assert public <= members, f"{name}: members missing from the stub: {public - members}"
