"""A table of any size printed as its rows come, for ``read``: the rows are read once, in order,
and never held together, so printing a state of any size holds one row in this process.

Both forms are what printing the whole table at once gives, byte for byte:

* ``--json``: the document ``json.dumps({"columns": ..., "rows": [...], "total": n}, indent=1,
  default=str)``, written piece by piece (a row's lines indented two more spaces, as its place in
  the document nests it; ``json.dumps`` escapes newlines inside strings, so every newline of a
  row's text is one of its indentation);
* text: the column names tab-separated, one line per row (each value as JSON), then
  ``(n rows)``, or ``(n rows, m shown: --limit 0 prints all)`` when fewer were shown.

``total`` is the table's size when only part of it is printed (a ``--limit``); ``None`` when every
row is printed, which makes it the number of rows printed.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional, TextIO

__all__ = ["write_json", "write_text"]


def write_json(out: TextIO, columns: list[str], rows: Iterable[dict[str, Any]], total: Optional[int]) -> None:
    """The table as one JSON document on ``out`` (see the module docstring)."""
    out.write('{\n "columns": ' + _nested(columns, 1) + ',\n "rows": [')
    shown = 0
    for row in rows:
        out.write((",\n  " if shown else "\n  ") + _nested(row, 2))
        shown += 1
    out.write(("\n ]" if shown else "]") + ',\n "total": ' + json.dumps(shown if total is None else total) + "\n}\n")


def write_text(out: TextIO, columns: list[str], rows: Iterable[dict[str, Any]], total: Optional[int]) -> None:
    """The table as tab-separated lines on ``out`` (see the module docstring)."""
    out.write("\t".join(columns) + "\n")
    shown = 0
    for row in rows:
        out.write("\t".join(json.dumps(row[c], default=str) for c in columns) + "\n")
        shown += 1
    total = shown if total is None else total
    out.write(f"({total} rows, {shown} shown: --limit 0 prints all)\n" if shown < total else f"({total} rows)\n")


def _nested(value: Any, depth: int) -> str:
    """``value`` as ``json.dumps(indent=1)`` prints it ``depth`` levels deep in a document."""
    return json.dumps(value, indent=1, default=str).replace("\n", "\n" + " " * depth)
