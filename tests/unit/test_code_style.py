"""Comments and docstrings state facts and their reasons, not the code's history.

A reader of a file meets the code as it is; "previously it ...", "as before", "Today: ..." tell
what the code was, which belongs in the commit log. The check looks for phrasing that tells
history in every comment and docstring of the package and the JVM shim. The list holds only
phrases with few innocent uses: "now" alone is not on it (timers read ``now()``, TTL compares
with now), nor "no longer" or "was changed" (a store's copy is no longer trusted after an
error; a commit says how many threads were changed).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import Iterator

import spark_state

ROOT = Path(spark_state.__file__).resolve().parent.parent

#: Phrasing that tells history (matched case-insensitively, ``Today:`` with its capital).
HISTORY = re.compile(r"(?i:\bpreviously\b|\bformerly\b|\bused to be\b|\bas before\b|\bthe old code\b|"
                     r"\buntil now\b|\boriginally\b|\bhistorically\b)|\bToday:")

_SCALA_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def python_prose(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every comment and docstring line of a Python source."""
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for i, line in enumerate(first.value.value.splitlines()):
                    yield first.value.lineno + i, line


def scala_prose(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every comment line of a Scala source."""
    for match in _SCALA_COMMENT.finditer(text):
        start = text.count("\n", 0, match.start()) + 1
        for i, line in enumerate(match.group(0).splitlines()):
            yield start + i, line


def history_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    prose = python_prose(text) if path.suffix == ".py" else scala_prose(text)
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for n, line in prose if HISTORY.search(line)]


def test_comments_and_docstrings_state_facts_not_history() -> None:
    paths = sorted(ROOT.glob("spark_state/**/*.py")) + sorted(ROOT.glob("jvm-shim/**/*.scala"))
    assert paths
    found = [hit for path in paths for hit in history_lines(path)]
    assert not found, "comments that tell history (say what the code does and why):\n" + "\n".join(found)


def test_the_check_finds_history_in_both_languages() -> None:
    assert sorted(n for n, line in python_prose('"""Doc.\n\nToday: x."""\n# previously y\nz = 1\n')
            if HISTORY.search(line)) == [3, 4]
    assert [n for n, line in scala_prose("package a\n/**\n * As before.\n */\nval now = 1 // was before\n")
            if HISTORY.search(line)] == [3]
    assert not HISTORY.search("today: lower case, a timer's now() and the store is no longer trusted")
