"""``spark-state read`` prints its table as the rows come (spark_state.cli.table), byte for byte
what printing the whole table at once gives: the JSON document and the text lines."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest

from spark_state.cli import table

COLUMNS = ["k", "value", "partition_id"]
ROWS = [{"k": "a\nb", "value": {"x": [1, 2], "y": {"z": None}}, "partition_id": 0},
        {"k": "é", "value": [], "partition_id": 1},
        {"k": "t", "value": dt.datetime(2026, 1, 31, 12, 0), "partition_id": 2}]


def _whole_json(rows, total) -> str:
    return json.dumps({"columns": COLUMNS, "rows": rows, "total": total}, indent=1, default=str) + "\n"


def _whole_text(rows, total) -> str:
    return "\n".join(["\t".join(COLUMNS)] + ["\t".join(json.dumps(r[c], default=str) for c in COLUMNS) for r in rows]
                     + ([f"({total} rows, {len(rows)} shown: --limit 0 prints all)"] if len(rows) < total else
                        [f"({total} rows)"])) + "\n"


@pytest.mark.parametrize("shown, total", [(3, None), (1, None), (0, None), (2, 5), (0, 4)])
def test_the_streamed_table_is_the_whole_table_printed_at_once(shown, total):
    rows = ROWS[:shown]
    out = io.StringIO()
    table.write_json(out, COLUMNS, iter(rows), total)
    assert out.getvalue() == _whole_json(rows, len(rows) if total is None else total)
    out = io.StringIO()
    table.write_text(out, COLUMNS, iter(rows), total)
    assert out.getvalue() == _whole_text(rows, len(rows) if total is None else total)


def test_rows_are_taken_one_at_a_time_as_they_are_printed():
    out = io.StringIO()
    seen = []

    def rows():
        for row in ROWS:
            seen.append(out.tell())  # what was printed when the row was asked for
            yield row

    table.write_text(out, COLUMNS, rows(), None)
    assert seen[0] < seen[1] < seen[2]


def test_a_limited_table_prints_its_first_rows_and_counts_the_rest_in_one_pass():
    taken = []

    def rows():
        for row in ROWS:
            taken.append(row["k"])
            yield row

    limited = table.Limited(rows(), 2)
    out = io.StringIO()
    table.write_text(out, COLUMNS, limited, limited)
    assert out.getvalue() == _whole_text(ROWS[:2], 3) and taken == ["a\nb", "é", "t"]
    limited = table.Limited(iter(ROWS), 0)
    out = io.StringIO()
    table.write_json(out, COLUMNS, limited, limited)
    assert out.getvalue() == _whole_json(ROWS, 3)
