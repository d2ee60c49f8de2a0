"""A table of any size printed as its rows come, for ``read``: the rows are read once, in order,
and never held together, so printing a state of any size holds one row in this process.

Both forms are what printing the whole table at once gives, byte for byte:

* ``--json``: the document ``json.dumps({"columns": ..., "rows": [...], "total": n}, indent=1,
  default=str)``, written piece by piece (a row's lines indented two more spaces, as its place in
  the document nests it; ``json.dumps`` escapes newlines inside strings, so every newline of a
  row's text is one of its indentation);
* text: the column names tab-separated, one line per row (each value as JSON), then
  ``(n rows)``, or ``(n rows, m shown: --limit 0 prints all)`` when fewer were shown.

``total`` is the table's size when only part of it is printed; ``None`` when every row is
printed, which makes it the number of rows printed; or a :class:`Limited`, whose size is known
once its rows are read (``--limit N``: the first ``N`` rows printed, the rest counted).
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, TextIO, Union

__all__ = ["Limited", "write_json", "write_text"]


class Limited:
    """The first ``limit`` of ``rows`` (0: all of them); iterating counts the rest, so
    :attr:`total` is the size of ``rows`` once the iteration has ended (one pass)."""

    def __init__(self, rows: Iterable[dict[str, Any]], limit: int) -> None:
        self._rows, self._limit = rows, limit
        self.total = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for row in self._rows:
            self.total += 1
            if not self._limit or self.total <= self._limit:
                yield row


Total = Union[None, int, Limited]


def _total(total: Total, shown: int) -> int:
    if isinstance(total, Limited):
        return total.total
    return shown if total is None else total


def write_json(out: TextIO, columns: list[str], rows: Iterable[dict[str, Any]], total: Total) -> None:
    """The table as one JSON document on ``out`` (see the module docstring)."""
    out.write('{\n "columns": ' + _nested(columns, 1) + ',\n "rows": [')
    shown = 0
    for row in rows:
        out.write((",\n  " if shown else "\n  ") + _nested(row, 2))
        shown += 1
    out.write(("\n ]" if shown else "]") + ',\n "total": ' + json.dumps(_total(total, shown)) + "\n}\n")


def write_text(out: TextIO, columns: list[str], rows: Iterable[dict[str, Any]], total: Total) -> None:
    """The table as tab-separated lines on ``out`` (see the module docstring)."""
    out.write("\t".join(columns) + "\n")
    shown = 0
    for row in rows:
        out.write("\t".join(json.dumps(row[c], default=str) for c in columns) + "\n")
        shown += 1
    count = _total(total, shown)
    out.write(f"({count} rows, {shown} shown: --limit 0 prints all)\n" if shown < count else f"({count} rows)\n")


def _nested(value: Any, depth: int) -> str:
    """``value`` as ``json.dumps(indent=1)`` prints it ``depth`` levels deep in a document."""
    return json.dumps(value, indent=1, default=str).replace("\n", "\n" + " " * depth)
