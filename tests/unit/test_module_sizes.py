"""The package's modules stay small: one over 500 lines says why in its docstring.

A long module is where a newcomer gets lost; when one is long on purpose (one table, one
invariant), its docstring carries a paragraph starting ``Size:`` that gives the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import spark_state

PACKAGE = Path(spark_state.__file__).resolve().parent
LIMIT = 500


def test_long_modules_give_a_reason() -> None:
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines <= LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "\nSize: " not in "\n" + doc:
            unexplained.append(f"{path.relative_to(PACKAGE.parent)} ({lines} lines)")
    assert not unexplained, ("modules over 500 lines without a 'Size:' paragraph in their docstring: "
                             + ", ".join(unexplained))
