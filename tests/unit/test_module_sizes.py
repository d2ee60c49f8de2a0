"""The project's source files stay small: one over 500 lines says why at its top.

A long file is where a newcomer gets lost; when one is long on purpose (one table, one
invariant), it carries a paragraph starting ``Size:`` that gives the reason: in the module
docstring of a Python file, in the leading comment of a Scala file (the first comment, before
anything but ``package`` and ``import`` lines). The rule covers the package, the tests, the
benchmarks and the JVM shim.

A module docstring says what the module holds, its invariants and byte layouts, in about 30
lines; a longer rationale belongs in docs/. One over 50 lines (a format's specification, a set
of rules with their proofs) carries a ``Size:`` paragraph too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import spark_state

ROOT = Path(spark_state.__file__).resolve().parent.parent
LIMIT = 500
#: Lines of a package module's docstring without a ``Size:`` paragraph.
DOCSTRING_LIMIT = 50

#: The files the rule covers, as globs under the repository root.
PYTHON_GLOBS = ("spark_state/**/*.py", "tests/**/*.py", "bench/*.py")
SCALA_GLOBS = ("jvm-shim/**/*.scala",)

_COMMENT = re.compile(r"/\*.*?\*/|(?://[^\n]*\n)+", re.S)


def python_reason(text: str) -> str:
    """The module docstring of a Python file ("" without one)."""
    return ast.get_docstring(ast.parse(text)) or ""


def scala_reason(text: str) -> str:
    """The leading comment of a Scala file, without its ``/*``, ``*`` and ``//`` markers ("" when
    something other than ``package`` and ``import`` lines comes first)."""
    match = _COMMENT.search(text)
    if match is None:
        return ""
    before = [line.strip() for line in text[: match.start()].splitlines()]
    if any(line and not line.startswith(("package ", "import ")) for line in before):
        return ""
    body = match.group(0).removeprefix("/**").removeprefix("/*").removesuffix("*/")
    return "\n".join(re.sub(r"^\s*(?://|\*)? ?", "", line) for line in body.splitlines())


def _files(globs: tuple[str, ...]) -> list[Path]:
    return sorted({p for pattern in globs for p in ROOT.glob(pattern)})


def test_long_modules_give_a_reason() -> None:
    unexplained = []
    for globs, reason_of in ((PYTHON_GLOBS, python_reason), (SCALA_GLOBS, scala_reason)):
        for path in _files(globs):
            text = path.read_text(encoding="utf-8")
            lines = text.count("\n")
            if lines > LIMIT and "\nSize: " not in "\n" + reason_of(text):
                unexplained.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not unexplained, ("files over 500 lines without a 'Size:' paragraph in their docstring or leading "
                             "comment: " + ", ".join(unexplained))


def test_long_module_docstrings_give_a_reason() -> None:
    unexplained = []
    for path in _files(("spark_state/**/*.py",)):
        doc = python_reason(path.read_text(encoding="utf-8"))
        lines = doc.count("\n") + 1
        if lines > DOCSTRING_LIMIT and "\nSize: " not in "\n" + doc:
            unexplained.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not unexplained, ("module docstrings over 50 lines without a 'Size:' paragraph (move the rationale "
                             "to docs/): " + ", ".join(unexplained))


def test_the_rule_sees_every_kind_of_file() -> None:
    """The globs match files (a moved folder would otherwise leave the rule checking nothing)."""
    assert all(_files((pattern,)) for pattern in PYTHON_GLOBS + SCALA_GLOBS)


def test_the_scala_reason_is_the_leading_comment() -> None:
    text = "package a.b\n\nimport c._\n\n/**\n * One table.\n *\n * Size: the table is one invariant.\n */\nobject X\n"
    assert "\nSize: the table" in "\n" + scala_reason(text)
    assert "Size:" in scala_reason("// Size: one table.\n// More.\npackage a\n")
    assert scala_reason("package a\nobject X\n/** Size: late. */\n") == ""
