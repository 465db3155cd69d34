"""One error hierarchy: every exception youmu raises is a ``YoumuError`` and also the
builtin a user would catch for it, the native core maps its errors onto these classes
in one place, and no module raises a bare builtin exception."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import youmu
import youmu.errors as errors

ROOT = Path(youmu.__file__).resolve().parent.parent.parent
BUILTIN_RAISE = re.compile(
    r"raise (ValueError|TypeError|RuntimeError|IndexError|KeyError|OSError|MemoryError|OverflowError|"
    r"AssertionError|Exception)\("
)


def test_every_error_class_is_a_youmu_error_and_exported() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, BaseException)]
    assert classes
    for cls in classes:
        assert cls.__name__ in errors.__all__, f"{cls.__name__} is not exported"
        assert issubclass(cls, youmu.YoumuError) or issubclass(cls, Warning), cls
        assert getattr(youmu, cls.__name__) is cls, f"youmu.{cls.__name__} is not the class in youmu.errors"


def test_every_error_but_the_base_is_also_a_builtin_users_catch() -> None:
    builtins = (ValueError, TypeError, IndexError, KeyError, OSError, RuntimeError, MemoryError, OverflowError)
    plain = {"YoumuError", "CorruptFileError", "UnsupportedError", "StaleIndexError"}  # youmu-specific conditions
    for name in errors.__all__:
        cls = getattr(errors, name)
        if issubclass(cls, Warning) or name in plain:
            continue
        assert issubclass(cls, builtins), f"{name} is not also a builtin exception"


def test_the_native_core_maps_only_onto_classes_that_exist() -> None:
    mapping = (ROOT / "rust" / "py" / "errors.rs").read_text()
    named = set(re.findall(r'"([A-Z][A-Za-z]+Error)"', mapping))
    assert named and named <= set(errors.__all__), named - set(errors.__all__)


def test_no_module_raises_a_bare_builtin_exception() -> None:
    offenders = []
    for path in sorted((ROOT / "python" / "youmu").rglob("*.py")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if BUILTIN_RAISE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not offenders, "raise a youmu.errors class instead:\n" + "\n".join(offenders)
