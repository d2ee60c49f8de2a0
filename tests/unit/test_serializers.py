"""Typed state serializers: round trips, layouts, and pickle only by opt-in."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql import types as T

from spark_state.state import PickleSerializer, serializer_for


@pytest.mark.parametrize("value_type, value", [
    (int, -(1 << 62)), (float, 2.5), (str, "héllo"), (bytes, b"\x00\xff"), (bool, True),
    (T.IntegerType(), 7), (T.LongType(), 1 << 40), (T.DoubleType(), -0.25), (T.StringType(), ""),
    (T.BinaryType(), b""), (T.BooleanType(), False), (T.DateType(), dt.date(2024, 2, 29)),
    (T.TimestampType(), dt.datetime(2026, 11, 21, 12, 30, 1, 123456)),
    (T.DecimalType(10, 2), decimal.Decimal("12.34")),
    (T.ArrayType(T.StringType()), ["a", None, "c"]),
    (T.MapType(T.StringType(), T.LongType()), {"a": 1, "b": None}),
    (pa.int32(), 5), (pa.string(), "x"), (pa.float64(), 1.0),
    ("bigint", 3), ("array<int>", [1, 2]), ("struct<a:int, b:string>", (1, "x")),
    ("decimal(5,1)", decimal.Decimal("1.5")), ("map<string,bigint>", {"k": 2}),
])
def test_round_trip(value_type: object, value: object) -> None:
    ser = serializer_for(value_type)
    assert ser.deserialize(ser.serialize(value)) == value


def test_struct_round_trip_gives_rows_and_keeps_nulls() -> None:
    schema = T.StructType([
        T.StructField("name", T.StringType()), T.StructField("n", T.LongType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("inner", T.StructType([T.StructField("x", T.DoubleType())])),
    ])
    ser = serializer_for(schema)
    value = ser.deserialize(ser.serialize(("a", None, ["t"], (1.5,))))
    assert value == Row(name="a", n=None, tags=["t"], inner=Row(x=1.5))
    assert value.name == "a" and value.inner.x == 1.5
    assert ser.deserialize(ser.serialize({"name": "b", "n": 2, "tags": [], "inner": None})).n == 2


def test_layouts_are_documented_big_endian() -> None:
    assert serializer_for(int).serialize(1) == b"\x00" * 7 + b"\x01"
    assert serializer_for(str).serialize("ab") == b"ab"
    assert serializer_for(T.ArrayType(T.StringType())).serialize(["ab"]) == b"\x00\x00\x00\x01\x01\x00\x00\x00\x02ab"


def test_wrong_values_and_types_are_clear() -> None:
    with pytest.raises(TypeError, match="expected an integer"):
        serializer_for(int).serialize("3")
    with pytest.raises(TypeError, match="expected a str"):
        serializer_for(str).serialize(3)
    with pytest.raises(TypeError, match="unsupported state type"):
        serializer_for(object)
    with pytest.raises(TypeError, match="cannot parse state type 'array<int': expected '>' at position 9"):
        serializer_for("array<int")
    with pytest.raises(TypeError, match="unknown type 'varchar2'"):
        serializer_for("varchar2")


def test_pickle_is_an_explicit_opt_in_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="unpickled"):
        ser = PickleSerializer()
    assert serializer_for(ser) is ser
    assert ser.deserialize(ser.serialize({"a": {1, 2}})) == {"a": {1, 2}}
