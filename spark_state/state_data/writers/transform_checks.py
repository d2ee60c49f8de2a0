"""The checks of a transform's rows before anything is written: the key columns and the ``value``
column of a keyed state's rows (:meth:`~.transform.SavepointTransform.replace_keyed_state`), and
the columns and partitions of a function's operator state rows
(:meth:`~.transform.SavepointTransform.replace_function_operator_state`), against the recorded key
columns and the descriptor's types; and the ``key`` and ``value`` columns of a Spark operator's
store's rows, against the store's recorded schemas (:func:`check_spark_rows`)."""

from __future__ import annotations

from typing import Optional

from pyspark.sql import DataFrame
from pyspark.sql import functions as SQL
from pyspark.sql import types as T

from ...keys.operator import MODE_BROADCAST
from ...keys.unsafe_row_writer import WRITABLE_TYPES
from ...ops import savepoint_format as F
from ...state.descriptors import StateDescriptor
from ...state.type_strings import spark_type_of
from ..errors import KeyMismatchError, StateDataError
from ..location.savepoints import SavepointSource


def check_rows(source: SavepointSource, descriptor: StateDescriptor, kind: str, schema: T.StructType) -> None:
    """The replacement's key columns (of its rows' ``schema``) are the recorded ones and its
    ``value`` fits the descriptor."""
    recorded = source.key_columns
    types = {f.name: f.dataType for f in schema.fields}
    given = [(c, types[c].simpleString()) for c in recorded.columns if c in types]
    if [c for c, _ in given] != list(recorded.columns) or [t for _, t in given] != list(recorded.types):
        raise KeyMismatchError(
            f"the rows for state {descriptor.name!r} of {source.function!r} need the key columns "
            f"{recorded.describe()} (as recorded in the savepoint); they have {schema.simpleString()}: "
            "rename or cast them")
    if "value" not in types:
        raise StateDataError(f"the rows for state {descriptor.name!r} need a 'value' column; they have "
                             f"{', '.join(types)} (read_keyed_state gives the form to write)")
    expected = _expected_type(descriptor, kind)
    if expected is not None and _canonical(types["value"]) != _canonical(expected):
        raise StateDataError(
            f"the 'value' column for state {descriptor.name!r} is {types['value'].simpleString()}, but the "
            f"descriptor ({type(descriptor).__name__}) stores {expected.simpleString()}: cast the column, or "
            "declare the descriptor with the column's type")


def check_operator_rows(source: SavepointSource, descriptor: StateDescriptor, mode: int, rows: DataFrame) -> None:
    """The rows of an operator state have the columns and types the descriptor writes, and their
    partitions are the function's (one small Spark job: their smallest and largest)."""
    types = {f.name: f.dataType for f in rows.schema.fields}
    place = "map_key" if mode == MODE_BROADCAST else "index"
    value = spark_type_of(descriptor.serializer)
    key = spark_type_of(getattr(descriptor, "key_serializer", None)) if mode == MODE_BROADCAST else T.LongType()
    for column, expected in (("partition_id", T.LongType()), (place, key), ("value", value)):
        if column not in types:
            raise StateDataError(f"the rows for operator state {descriptor.name!r} need the columns "
                                 f"{place}, value, partition_id; they have {rows.schema.simpleString()} "
                                 "(read_function_operator_state gives the form to write)")
        if expected is not None and _canonical(types[column]) != _canonical(expected):
            raise StateDataError(
                f"the {column!r} column for operator state {descriptor.name!r} is {types[column].simpleString()}, but "
                f"the descriptor ({type(descriptor).__name__}) stores {expected.simpleString()}: cast the column")
    n = source.entry.parallelism
    found = rows.agg(SQL.min("partition_id"), SQL.max("partition_id")).first()
    low, high = (found[0], found[1]) if found is not None else (None, None)
    if low is not None and high is not None and (low < 0 or high >= n):
        raise StateDataError(f"the rows for operator state {descriptor.name!r} name partitions {low}..{high}, but "
                             f"{source.function!r} has {n} partitions (0..{n - 1})")


def _expected_type(descriptor: StateDescriptor, kind: str) -> Optional[T.DataType]:
    """The Spark type of the ``value`` column a descriptor takes (None: values of a Python or
    custom serializer, checked by the serializer as they are written)."""
    value = spark_type_of(descriptor.serializer)
    if value is None:
        return None
    if kind == "list":
        return T.ArrayType(value, True)
    if kind == "map":
        key = spark_type_of(getattr(descriptor, "key_serializer", None))
        return T.MapType(key, value, True) if key is not None else None
    return value


def _canonical(data_type: T.DataType) -> str:
    """A type's canonical form (the serializers'), nullability ignored: ``int`` is ``bigint``."""
    from ...state.serializers import serializer_for

    text = getattr(serializer_for(data_type), "type_string", None)
    return text.replace(" not null", "") if isinstance(text, str) else data_type.simpleString()


def check_spark_rows(op: F.OperatorEntry, store: F.StoreEntry,
                     schema: T.StructType) -> tuple[list[str], list[str]]:
    """The key and value fields' Spark types, once the ``key`` and ``value`` structs of the rows'
    ``schema`` are the store's recorded schemas (names and types; nullability aside).

    Raises:
        StateDataError: naming both schemas.
    """
    types = {f.name: f.dataType for f in schema.fields}
    out = []
    for column, recorded in (("key", store.key_schema), ("value", store.value_schema)):
        expected = T.StructType.fromJson(recorded)
        given = types.get(column)
        want = [(f.name, f.dataType.simpleString()) for f in expected.fields]
        if not isinstance(given, T.StructType) or [(f.name, f.dataType.simpleString()) for f in given.fields] != want:
            raise StateDataError(
                f"the rows for store {store.name!r} of Spark operator {op.id} ({op.name}) need a {column!r} column "
                f"{expected.simpleString()} (Spark's schema of the store, as the savepoint records it); they have "
                f"{given.simpleString() if given is not None else 'none'} (read_spark_operator_state gives the form)")
        unwritable = [f"{n} {t}" for n, t in want if t not in WRITABLE_TYPES]
        if unwritable:
            raise StateDataError(f"the {column} of store {store.name!r} of Spark operator {op.id} has fields "
                                 f"{', '.join(unwritable)}; rows of these types are written: "
                                 f"{', '.join(WRITABLE_TYPES)}")
        out.append([t for _, t in want])
    return out[0], out[1]
