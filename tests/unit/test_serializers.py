"""Typed state serializers: round trips, layouts, and pickle only by opt-in."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from support import Mean
from pyspark.sql import Row
from pyspark.sql import types as T

from spark_state.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    PickleSerializer,
    ReducingStateDescriptor,
    ValueStateDescriptor,
    serializer_for,
)
from spark_state.state.schema import schema_of
from spark_state.state.serializers import codec_for_type_string, serializer_snapshot
from spark_state.ttl import ManualClock, TtlConfig


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


# ------------------------------------------------------------------ canonical types, snapshots, pickling
@pytest.mark.parametrize("value_type, canonical", [
    (int, "bigint"), (T.IntegerType(), "bigint"), (T.ShortType(), "bigint"), (pa.int32(), "bigint"),
    (float, "double"), (T.FloatType(), "double"), (str, "string"), (bytes, "binary"), (bool, "boolean"),
    (T.DateType(), "date"), (T.TimestampNTZType(), "timestamp"), (T.DecimalType(5, 2), "decimal"),
    ("array<int>", "array<bigint>"), ("map<string,float>", "map<string,double>"),
    (T.StructType([T.StructField("a", T.IntegerType(), False), T.StructField("b c", T.StringType())]),
     "struct<a:bigint not null,`b c`:string>"),
    ("struct<`we``ird`:struct<x:int NOT NULL>>", "struct<`we``ird`:struct<x:bigint not null>>"),
])
def test_canonical_type_strings_round_trip(value_type: object, canonical: str) -> None:
    ser = serializer_for(value_type)
    assert ser.type_string == canonical
    again = codec_for_type_string(canonical)
    assert again.type_string == canonical and again.name == ser.name
    assert ser.snapshot() == serializer_snapshot(ser) == {"codec": "spark", "type": canonical}


def test_nullability_is_in_the_type_string_but_not_in_the_bytes() -> None:
    nullable = serializer_for("struct<a:int,b:string>")
    strict = serializer_for("struct<a:int not null,b:string>")
    assert nullable.name == strict.name and nullable.type_string != strict.type_string
    assert nullable.serialize((1, "x")) == strict.serialize((1, "x"))


class Versioned:
    schema_version = 3

    def serialize(self, value):
        return str(value).encode()

    def deserialize(self, data):
        return data.decode()


def test_snapshots_of_pickle_and_custom_serializers() -> None:
    with pytest.warns(UserWarning):
        assert serializer_snapshot(PickleSerializer()) == {"codec": "pickle"}
    assert serializer_snapshot(Versioned()) == {
        "codec": "custom", "class": f"{__name__}.Versioned", "version": 3}


def _every_descriptor():
    ttl = TtlConfig.builder("5s").clock(ManualClock(42)).build()
    acc = T.StructType([T.StructField("s", T.LongType()), T.StructField("n", T.IntegerType(), False)])
    return [
        ValueStateDescriptor("v", T.LongType(), default=0),
        ValueStateDescriptor("vt", T.DoubleType(), ttl=ttl),
        ValueStateDescriptor("vd", "decimal(10,2)"),
        ListStateDescriptor("l", "array<struct<a:int,`b c`:string>>", ttl=ttl),
        MapStateDescriptor("m", str, T.TimestampType(), ttl=ttl),
        MapStateDescriptor("m2", T.IntegerType(), "map<string,date>"),
        ReducingStateDescriptor("r", lambda a, b: a + b, int, ttl=ttl),
        AggregatingStateDescriptor("a", Mean(), acc, ttl=ttl),
        ValueStateDescriptor("custom", Versioned()),
        ValueStateDescriptor("arrow", pa.float32()),
    ]


@pytest.mark.parametrize("descriptor", _every_descriptor(), ids=lambda d: d.name)
def test_every_descriptor_kind_survives_cloudpickle(descriptor) -> None:
    """The bug: ``cannot pickle '_struct.Struct' object`` for every typed descriptor (and a
    lock inside ManualClock for TTL ones), so functions holding descriptors could not ship."""
    from pyspark import cloudpickle

    again = cloudpickle.loads(cloudpickle.dumps(descriptor))
    assert type(again) is type(descriptor) and again.name == descriptor.name
    assert schema_of(again) == schema_of(descriptor)
    assert again.declared_type == descriptor.declared_type
    if descriptor.ttl is not None:
        assert again.ttl == descriptor.ttl and again.ttl.now_ms() == 42
        again.ttl.clock.advance(1)  # the copy's clock has a working lock of its own
    samples = {"v": 5, "vt": 1.5, "vd": decimal.Decimal("1.25"), "l": [(1, "x"), None],
               "m": dt.datetime(2026, 1, 2, 3, 4, 5), "m2": {"d": dt.date(2026, 1, 2)}, "r": 3, "a": (3, 2),
               "custom": "7", "arrow": 0.5}
    value = samples[descriptor.name]
    assert again.serializer.serialize(value) == descriptor.serializer.serialize(value)
    if isinstance(descriptor, MapStateDescriptor):
        assert again.key_serializer.serialize(1 if descriptor.name == "m2" else "k") == \
            descriptor.key_serializer.serialize(1 if descriptor.name == "m2" else "k")
    if isinstance(descriptor, ReducingStateDescriptor):
        assert again.reduce_function(2, 3) == 5
    if isinstance(descriptor, AggregatingStateDescriptor):
        assert again.aggregate_function.get_result((6, 2)) == 3.0


def test_builtin_codecs_unpickle_to_the_shared_singletons() -> None:
    import pickle

    for t in (int, float, str, bytes, bool, dt.date, dt.datetime, decimal.Decimal):
        assert pickle.loads(pickle.dumps(serializer_for(t))) is serializer_for(t)
