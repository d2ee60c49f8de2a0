"""Arrow in, Arrow out: input record batches to row objects, function output to record batches.

Input rows are instances of a ``namedtuple`` built from the input columns (hidden routing
columns removed): ``row.word``, ``row[0]`` and ``row._asdict()`` all work, and building them is
a C-level loop (no pandas, no per-row Row objects).

Output rows may be tuples or lists in ``output_schema`` order, dicts by field name, or
``pyspark.sql.Row`` objects (by field name when they have names). They are gathered per
column and converted with ``pyarrow.array(values, type=...)`` against the Arrow schema of
``output_schema``; a row that does not fit raises :class:`OutputSchemaError` naming the
column, its type and the offending row -- also a ``None`` in a column declared ``not null``
(checked on the built column's null count, for those columns only, before Spark's Arrow
reader would fail on it without naming either).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Iterable, Optional, Sequence, Union

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.types import StructType

from ..spark.compat import arrow_schema
from . import datetimes
from .errors import OutputSchemaError

#: Rows buffered before an output record batch is emitted.
OUTPUT_BATCH_ROWS = 8192


def row_class(names: Sequence[str]) -> type[Any]:
    """The namedtuple type of input rows (invalid identifiers are renamed ``_0``, ``_1`` ...)."""
    return namedtuple("Row", list(names), rename=True)


def columns_as_lists(batch: pa.RecordBatch, indices: Sequence[int]) -> list[list]:
    return [column_values(batch.column(i)) for i in indices]


def column_values(column: Union[pa.Array, pa.ChunkedArray]) -> list:
    """``column.to_pylist()``: the same values (equal, same types and zones), with timestamps
    and dates converted by :mod:`.datetimes` (Arrow's own conversion costs more per value
    than the rest of a keyed function's row)."""
    return datetimes.to_pylist(column) if datetimes.convertible(column) else column.to_pylist()


class OutputWriter:
    """Collects output rows and turns them into record batches of ``schema``."""

    def __init__(self, schema: StructType, function_name: str, task_schema: Optional[StructType] = None) -> None:
        """``schema``: the function's output; ``task_schema``: the ``mapInArrow`` schema, the
        output plus trailing hidden columns that the writer fills with nulls (the observation,
        :mod:`.observation`)."""
        self._schema = schema
        self._names = schema.fieldNames()
        self._width = len(self._names)
        self._arrow = arrow_schema(schema)
        task_arrow = arrow_schema(task_schema) if task_schema is not None else self._arrow
        self._task_arrow = task_arrow
        self._hidden = [task_arrow.field(i).type for i in range(len(self._arrow), len(task_arrow))]
        #: per column: declared ``not null`` (its nulls are refused here, not by Spark's reader)
        self._not_null = [not f.nullable for f in schema.fields]
        self._function = function_name
        self.rows: list = []

    def extend(self, produced: Optional[Iterable[Any]]) -> None:
        if produced is not None:
            self.rows.extend(produced)

    @property
    def full(self) -> bool:
        return len(self.rows) >= OUTPUT_BATCH_ROWS

    def flush(self) -> Optional[pa.RecordBatch]:
        """The buffered rows as one record batch (None if there are none)."""
        rows, self.rows = self.rows, []
        if not rows:
            return None
        width = self._width
        if set(map(type, rows)) != {tuple} or set(map(len, rows)) != {width}:  # C loops, no Python per row
            rows = [r if type(r) is tuple and len(r) == width else self._normalise(r) for r in rows]
        columns = list(zip(*rows))
        arrays = []
        not_null = self._not_null
        for i, field in enumerate(self._arrow):
            try:
                array = pa.array(columns[i], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                bad = _first_bad(columns[i], field.type)
                raise OutputSchemaError(
                    f"{self._function} produced a row that does not match output_schema: column "
                    f"{field.name!r} ({self._schema[i].dataType.simpleString()}) cannot hold "
                    f"{bad!r} ({type(bad).__name__}): {exc}") from None
            if not_null[i] and array.null_count:
                raise self._null_in(i, array, rows)
            arrays.append(array)
        arrays.extend(pa.nulls(len(rows), type=t) for t in self._hidden)
        return pa.RecordBatch.from_arrays(arrays, schema=self._task_arrow)

    def _null_in(self, column: int, array: pa.Array, rows: list) -> OutputSchemaError:
        """The error for a null in ``column``, declared ``not null``, naming its first row."""
        row = rows[array.is_null().to_pylist().index(True)]
        name = self._names[column]
        return OutputSchemaError(
            f"{self._function} produced a row with None in column {name!r}, which output_schema declares "
            f"{self._schema[column].dataType.simpleString()} not null: {dict(zip(self._names, row))!r}. "
            f"Give {name!r} a value in every row, or declare the column nullable (drop 'not null')")

    def _normalise(self, row: Any) -> tuple:
        if isinstance(row, Row) and hasattr(row, "__fields__"):
            row = row.asDict()
        if isinstance(row, dict):
            extra = set(row) - set(self._names)
            if extra:
                raise OutputSchemaError(
                    f"{self._function} produced a row with fields {sorted(extra)} that output_schema "
                    f"({', '.join(self._names)}) does not have: {row!r}")
            return tuple(row.get(n) for n in self._names)
        if isinstance(row, (tuple, list)):
            if len(row) != self._width:
                raise OutputSchemaError(
                    f"{self._function} produced a row with {len(row)} values but output_schema has "
                    f"{self._width} fields ({', '.join(self._names)}): {row!r}")
            return tuple(row)
        raise OutputSchemaError(
            f"{self._function} produced {type(row).__name__} {row!r}; output rows must be tuples, "
            f"dicts or Rows matching output_schema ({', '.join(self._names)}) -- did process_element "
            "return a single row instead of yielding it?")


def _first_bad(values: Sequence[Any], arrow_type: pa.DataType) -> Any:
    for v in values:
        try:
            pa.array([v], type=arrow_type)
        except Exception:
            return v
    return None
