"""A griffe extension for the API reference. The package's docstrings are Google style
with doctest examples, written for ``help()`` and for doctest (tests/promises/test_docs.py runs
them); this reads them as they are written, without changing the source:

* a doctest block (``>>>`` lines and their output, up to a blank line) becomes a fenced
  ``pycon`` block, wherever it stands (under ``Example:``, which griffe renders as an
  admonition of markdown, or in the running text), so ``[[0, 2, 4], [1, 3]]`` is output,
  not a markdown link, and ``>>>`` no quote;
* an ``Args:`` entry that names several parameters over two lines
  (``a, b, c,`` / ``d, e,`` / ``f: as for ...``) is joined into one line, which griffe's Google
  parser reads as one entry;
* a Sphinx role (``:class:`~youmu.ray.Source` ``) is shown as the code it names
  (``Source``), not as the role's markup.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_NAMES_CONTINUED = re.compile(r"^(\s+)([A-Za-z_][\w, ]*,)\s*\n\s+", re.MULTILINE)
_FLAGS = re.compile(r"\s*#\s*doctest:.*$")
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    name = match.group(2)
    return "``" + (name.rsplit(".", 1)[-1] if match.group(1) else name) + "``"


def fence_doctests(text: str) -> str:
    """Each doctest block of ``text`` as a fenced ``pycon`` block at its indentation."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if not stripped.startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(stripped)]
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(_FLAGS.sub("", lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].strip()))
            i += 1
        if out and out[-1].strip():
            out.append("")
        out += [indent + "```pycon", *(indent + b for b in block), indent + "```"]
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            value, joined = obj.docstring.value, 1
            while joined:
                value, joined = _NAMES_CONTINUED.subn(r"\1\2 ", value)
            obj.docstring.value = fence_doctests(_ROLE.sub(_role, value))
