"""spark_state.state_data.key_columns: keys typed on the command line, keys given in Python, and the
key bytes and key groups they make (against the runtime's key codec and Spark's hash)."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from spark_state.partitioning.spark_hash import spark_hash
from spark_state.state_data import KeyMismatchError
from spark_state.state_data.key_columns import KeyColumns


def test_one_column_keys_parse_by_type():
    assert KeyColumns(("k",), ("bigint",)).parse("42") == (42,)
    assert KeyColumns(("k",), ("string",)).parse("alice") == ("alice",)
    assert KeyColumns(("k",), ("date",)).parse("2024-01-31") == (dt.date(2024, 1, 31),)
    assert KeyColumns(("k",), ("binary",)).parse("0x00ff") == (b"\x00\xff",)
    assert KeyColumns(("k",), ("decimal(10,2)",)).parse("1.25") == (decimal.Decimal("1.25"),)
    assert KeyColumns(("k",), ("boolean",)).parse("true") == (True,)
    with pytest.raises(KeyMismatchError, match=r"'x' is not a bigint"):
        KeyColumns(("k",), ("bigint",)).parse("x")


def test_several_columns_take_a_json_array_or_a_dict():
    cols = KeyColumns(("region", "id"), ("string", "int"))
    assert cols.parse('["eu", 42]') == ("eu", 42)
    assert cols.values({"id": 42, "region": "eu"}) == ("eu", 42) == cols.values(["eu", 42])
    with pytest.raises(KeyMismatchError, match=r"JSON array of 2 values \(region string, id int\)"):
        cols.parse("eu")
    with pytest.raises(KeyMismatchError, match=r"lacks the key column\(s\) \['id'\]"):
        cols.values({"region": "eu"})


def test_key_bytes_and_key_group():
    cols = KeyColumns(("k",), ("bigint",))
    assert cols.encode((7,)) == b"\x01" + (7).to_bytes(8, "big", signed=True)  # presence byte, int64 BE
    assert cols.key_group((7,), 128) == spark_hash([7], ["bigint"]) % 128
    with pytest.raises(KeyMismatchError, match=r"does not fit the key columns \(k bigint\)"):
        cols.key_group(("seven",), 128)


def test_a_location_without_a_key_record_says_how_to_get_one():
    with pytest.raises(KeyMismatchError, match="run the query for one batch with this release"):
        KeyColumns.from_record({"format": 1, "kind": "keyed", "max_parallelism": 128}, "/x/_operator.json")
