"""Schema records and verdicts, without a store: every rule of the compatibility table,
the value conversions of migrations, and the record's byte layout."""

from __future__ import annotations

import decimal
import json
import warnings

import pytest
from pyspark.sql import Row
from pyspark.sql import types as T

from spark_state.keys.system import keyed_record_key, operator_record_key
from spark_state.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    PickleSerializer,
    ReducingStateDescriptor,
    ValueStateDescriptor,
    serializer_for,
)
from spark_state.state.compatibility import AS_IS, INCOMPATIBLE, MIGRATE, equivalent, judge
from spark_state.state.errors import StateSchemaRecordError
from spark_state.state.schema import StateSchema, schema_of
from spark_state.ttl import TtlConfig


class Sum(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + value

    def get_result(self, acc):
        return acc


class Csv:
    """A custom serializer: ints as decimal text."""

    schema_version = 1

    def serialize(self, value):
        return str(value).encode()

    def deserialize(self, data):
        return int(data)


def csv_v2() -> Csv:
    """The same class, a new schema version."""
    ser = Csv()
    ser.schema_version = 2
    return ser


class CsvV2Migrating(Csv):
    """Reads version 1 of :class:`Csv` (text) and bigint (8 bytes)."""

    schema_version = 2

    def migrate_from(self, old_snapshot, data):
        if old_snapshot.get("codec") == "spark":
            return serializer_for(old_snapshot["type"]).deserialize(data)
        assert old_snapshot == {"codec": "custom", "class": f"{__name__}.Csv", "version": 1}
        return int(data)


with warnings.catch_warnings():  # the opt-in warning is tested in test_serializers.py
    warnings.simplefilter("ignore")
    PICKLE = PickleSerializer()


def value(t, **kw):
    return schema_of(ValueStateDescriptor("s", t, **kw))


def verdict(old_type, new_type):
    new = ValueStateDescriptor("s", new_type)
    return judge(value(old_type), schema_of(new), new.serializer)


# ----------------------------------------------------------------------------- as is
@pytest.mark.parametrize("old, new", [
    (T.IntegerType(), T.LongType()),                   # int -> long: one int64 codec
    (T.LongType(), T.ShortType()),                     # ... in both directions (same bytes)
    (int, "bigint"), (T.FloatType(), T.DoubleType()), (float, "float"),
    (T.DecimalType(5, 2), T.DecimalType(20, 4)),       # decimals are text at any precision
    (T.TimestampNTZType(), T.TimestampType()),
    ("struct<a:int not null>", "struct<a:bigint>"),    # nullability never changes bytes
    ("array<struct<a:int>>", "array<struct<a:bigint not null>>"),
])
def test_same_bytes_are_compatible_as_is(old, new) -> None:
    v = verdict(old, new)
    assert v.outcome == AS_IS and v.rewrite is None


def test_ttl_and_single_value_kind_changes_are_compatible_as_is() -> None:
    ttl = TtlConfig.builder("1h").build()
    assert judge(value(int), value(int, ttl=ttl)).as_is
    assert judge(value(int, ttl=ttl), value(int)).as_is
    reducing = schema_of(ReducingStateDescriptor("s", lambda a, b: a + b, int))
    aggregating = schema_of(AggregatingStateDescriptor("s", Sum(), int))
    assert judge(value(int), reducing).as_is and judge(reducing, aggregating).as_is
    assert judge(aggregating, value(int)).as_is


def test_same_custom_class_and_version_and_pickle_to_pickle_are_as_is() -> None:
    assert verdict(Csv(), Csv()).as_is
    assert verdict(PICKLE, PICKLE).as_is


# ----------------------------------------------------------------------------- migrations
def rewrite(old_type, new_type, stored):
    """Write ``stored`` under ``old_type``, migrate, read under ``new_type``."""
    v = verdict(old_type, new_type)
    assert v.outcome == MIGRATE, v.reason
    return serializer_for(new_type).deserialize(v.rewrite(serializer_for(old_type).serialize(stored)))


def test_integral_widens_to_floating_and_decimal() -> None:
    assert rewrite(T.LongType(), T.DoubleType(), 41) == 41.0
    assert isinstance(rewrite(T.IntegerType(), "float", 3), float)
    assert rewrite(int, T.DecimalType(20, 0), -(1 << 62)) == decimal.Decimal(-(1 << 62))


def test_struct_fields_are_matched_by_name() -> None:
    old = "struct<id:int,name:string,score:int>"
    # a new nullable field is null, a dropped field is discarded, fields move and widen
    new = "struct<score:double,id:bigint,tags:array<string>>"
    assert rewrite(old, new, (7, "x", 3)) == Row(score=3.0, id=7, tags=None)
    assert rewrite(old, new, (7, None, None)) == Row(score=None, id=7, tags=None)
    assert rewrite("struct<a:int,b:int>", "struct<b:int,a:int>", (1, 2)) == Row(b=2, a=1)
    assert rewrite("struct<a:int,b:int>", "struct<a:int>", (1, 2)) == Row(a=1)


def test_nested_structs_arrays_and_map_values_widen_recursively() -> None:
    old = "struct<inner:struct<n:int>,xs:array<int>,m:map<string,int>,deep:array<struct<v:int>>>"
    new = "struct<inner:struct<n:double,extra:string>,xs:array<double>,m:map<string,double>,deep:array<struct<v:decimal(20,0)>>>"
    got = rewrite(old, new, ((1,), [1, None, 3], {"a": 2, "b": None}, [(5,), None]))
    assert got == Row(inner=Row(n=1.0, extra=None), xs=[1.0, None, 3.0], m={"a": 2.0, "b": None},
                      deep=[Row(v=decimal.Decimal(5)), None])
    assert rewrite("array<bigint>", "array<double>", [1, 2]) == [1.0, 2.0]
    assert rewrite("map<string,bigint>", "map<string,double>", {"k": 1}) == {"k": 1.0}


def test_a_custom_serializer_with_migrate_from_migrates_from_anything() -> None:
    v = verdict(Csv(), CsvV2Migrating())
    assert v.migrates and v.rewrite(b"12") == b"12"
    v = verdict(T.LongType(), CsvV2Migrating())
    assert v.migrates and v.rewrite(serializer_for(int).serialize(5)) == b"5"


# ----------------------------------------------------------------------------- incompatible
@pytest.mark.parametrize("old, new, why", [
    (T.DoubleType(), T.LongType(), "cannot be narrowed to bigint: fractions would be lost"),
    (T.DoubleType(), T.DecimalType(10, 2), "NaN and infinities have no decimal"),
    (T.LongType(), "string", "bigint values cannot be read as string"),
    ("string", T.LongType(), "string values cannot be read as bigint"),
    ("string", "binary", "string values cannot be read as binary"),
    (T.BooleanType(), T.LongType(), "boolean values cannot be read as bigint"),
    (T.DateType(), T.TimestampType(), "date values cannot be read as timestamp"),
    (T.DecimalType(10, 2), T.DoubleType(), "decimal(10,0) values cannot be read as double"),
    ("array<bigint>", "bigint", "array<bigint> values cannot be read as bigint"),
    ("struct<a:int>", "struct<a:int,b:int not null>", "field b is new and NOT NULL"),
    ("struct<a:struct<x:double>>", "struct<a:struct<x:int>>", "(at field a.x)"),
    ("map<string,int>", "map<binary,int>", "map keys changed from string to binary"),
    ("map<int,int>", "map<double,int>", "two old keys could become one"),
    (PICKLE, T.LongType(), "written with PickleSerializer"),
    (T.LongType(), PICKLE, "reads it with PickleSerializer, but it was not written pickled"),
    (Csv(), csv_v2(), "schema_version changed from 1 to 2 and the new one has no migrate_from"),
    (Csv(), PICKLE, "PickleSerializer"),
    (T.LongType(), Csv(), "not interchangeable"),
    (Csv(), T.LongType(), "not interchangeable"),
])
def test_incompatible_changes_say_why(old, new, why) -> None:
    v = verdict(old, new)
    assert v.outcome == INCOMPATIBLE and v.rewrite is None
    assert why in v.reason


def test_custom_class_change_is_incompatible() -> None:
    class Other(Csv):
        pass

    assert "custom serializer class changed" in verdict(Csv(), Other()).reason


def test_changes_of_kind_are_incompatible() -> None:
    lst = schema_of(ListStateDescriptor("s", int))
    mp = schema_of(MapStateDescriptor("s", str, int))
    for old, new in [(value(int), lst), (lst, value(int)), (lst, mp), (mp, value(int))]:
        v = judge(old, new)
        assert v.incompatible and "its kind changed" in v.reason and "cannot be migrated" in v.reason
    operator = {mode: schema_of(ListStateDescriptor("s", int), mode) for mode in ("list", "union")}
    broadcast = schema_of(MapStateDescriptor("s", str, int), "broadcast")
    assert "from list state to union list state" in judge(operator["list"], operator["union"]).reason
    assert judge(operator["union"], operator["list"]).incompatible
    assert judge(broadcast, schema_of(MapStateDescriptor("s", str, int), "broadcast")).as_is


def test_map_state_key_changes_are_incompatible_value_changes_follow_the_rules() -> None:
    def m(k, v):
        return schema_of(MapStateDescriptor("s", k, v))

    assert judge(m(T.IntegerType(), int), m(T.LongType(), int)).as_is
    v = judge(m(str, int), m(int, int))
    assert v.incompatible and "map key type changed from string (declared Python str) to bigint" in v.reason
    assert "decide its order" in v.reason
    assert judge(m(str, int), m(str, float)).migrates
    assert judge(m(str, float), m(str, int)).incompatible


def test_equivalent_means_same_bytes_and_same_stamp_layout() -> None:
    ttl = TtlConfig.builder("1h").build()
    assert equivalent(value(T.IntegerType()), value(T.LongType()))
    assert equivalent(value(int, ttl=ttl), value(int, ttl=TtlConfig.builder("2h").build()))
    assert not equivalent(value(int), value(int, ttl=ttl))          # stamped vs plain entries
    assert not equivalent(value(int), value(float))                 # migratable one way only
    assert not equivalent(value("struct<a:int>"), value("struct<a:int,b:int>"))


# ----------------------------------------------------------------------------- the record
def test_record_layout() -> None:
    assert keyed_record_key(b"count") == b"\xff\x03\x05count"
    assert operator_record_key("é".encode()) == b"\xff\x04\x02\xc3\xa9"
    ttl = TtlConfig.builder("90s").build()
    record = schema_of(MapStateDescriptor("m", T.IntegerType(), "struct<a:int not null>", ttl=ttl))
    assert record.encode() == (
        b'{"format":1,"key":{"codec":"spark","declared":"int","type":"bigint"},"kind":"map",'
        b'"ttl":{"ttl_ms":90000},"value":{"codec":"spark","declared":"struct<a:int>",'
        b'"type":"struct<a:bigint not null>"}}')
    assert StateSchema.decode(record.encode(), "m") == record
    assert json.loads(schema_of(ValueStateDescriptor("p", PICKLE)).encode()) == {
        "format": 1, "kind": "value", "ttl": None, "value": {"codec": "pickle", "declared": "pickle"}}
    assert record.describe() == "map state of bigint (declared int) -> struct<a:bigint not null> (declared struct<a:int>)"


def test_a_recorded_type_this_release_does_not_know_is_incompatible() -> None:
    future = StateSchema("value", {"codec": "spark", "type": "interval"})
    v = judge(future, value(int))
    assert v.incompatible and "the recorded type 'interval' is unknown to this release" in v.reason


def test_unreadable_records_are_named() -> None:
    with pytest.raises(StateSchemaRecordError, match="record of state 'x' is not valid JSON"):
        StateSchema.decode(b"\x00garbage", "x")
    with pytest.raises(StateSchemaRecordError, match="has format 2; this release reads format 1"):
        StateSchema.decode(b'{"format":2,"kind":"value"}', "x")
    with pytest.raises(StateSchemaRecordError, match="lacks or mangles 'value'"):
        StateSchema.decode(b'{"format":1,"kind":"value"}', "x")
