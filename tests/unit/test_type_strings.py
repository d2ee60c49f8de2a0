"""Spark type strings (spark_state.state.type_strings): the parser, and the Spark type of a state's values."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from spark_state.state import PickleSerializer
from spark_state.state.serializers import serializer_for, serializer_snapshot
from spark_state.state.type_strings import parse_type_string, spark_type_of


@pytest.mark.parametrize("text, expected", [
    ("bigint", T.LongType()),
    ("  INT ", T.IntegerType()),
    ("decimal", T.DecimalType(10, 0)),
    ("decimal(12, 3)", T.DecimalType(12, 3)),
    ("array<string>", T.ArrayType(T.StringType())),
    ("map<string,array<double>>", T.MapType(T.StringType(), T.ArrayType(T.DoubleType()))),
    ("struct<a:bigint,`b c`:string not null,`x``y`:timestamp_ntz>",
     T.StructType([T.StructField("a", T.LongType()), T.StructField("b c", T.StringType(), False),
                   T.StructField("x`y", T.TimestampNTZType())])),
    ("struct<>", T.StructType([])),
])
def test_parses_spark_type_strings(text: str, expected: T.DataType) -> None:
    assert parse_type_string(text) == expected


@pytest.mark.parametrize("text, why", [
    ("bignum", "unknown type 'bignum'"),
    ("array<bigint", "expected '>'"),
    ("bigint x", "unexpected trailing text"),
    ("struct<`a:bigint>", "unterminated `quoted` name"),
])
def test_a_bad_type_string_names_the_problem_and_its_position(text: str, why: str) -> None:
    with pytest.raises(TypeError, match=f"cannot parse state type .*{why}.* at position"):
        parse_type_string(text)


def test_every_codec_type_string_parses_back_to_its_codec() -> None:
    for declared in (int, float, str, bytes, bool, T.DateType(), T.TimestampType(), T.DecimalType(5, 2),
                     "map<string,array<struct<a:int,b:string not null>>>"):
        codec = serializer_for(declared)
        assert serializer_for(parse_type_string(codec.type_string)).type_string == codec.type_string


def test_spark_type_of_a_serializer_or_its_snapshot() -> None:
    codec = serializer_for("array<int>")
    assert spark_type_of(codec) == T.ArrayType(T.LongType())  # the canonical type: every integral is bigint
    assert spark_type_of(serializer_snapshot(codec)) == T.ArrayType(T.LongType())
    with pytest.warns(UserWarning):
        pickled = PickleSerializer()
    assert spark_type_of(pickled) is None
    assert spark_type_of(serializer_snapshot(pickled)) is None
    assert spark_type_of({"codec": "custom", "class": "x.Y", "version": 1}) is None
    assert spark_type_of(None) is None
