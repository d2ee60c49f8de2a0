"""A key of the wrong number of values gets one message, given in Python (a lookup) or typed on
the command line (``spark-state get``): how many values the key columns take, and how many came."""

from __future__ import annotations

import pytest

from spark_state.state_data import KeyMismatchError
from spark_state.state_data.key_columns import KeyColumns


def test_one_column_key_given_two_values():
    cols = KeyColumns(("k",), ("string",))
    expected = r"one key value expected for the key column k string, got 2 values"
    with pytest.raises(KeyMismatchError, match=expected):
        cols.values(("k1", "x"))
    with pytest.raises(KeyMismatchError, match=expected):
        cols.parse('["k1", "x"]')


def test_two_column_key_given_three_values_or_not_an_array():
    cols = KeyColumns(("region", "id"), ("string", "int"))
    expected = r"2 key values expected for the key columns \(region string, id int\), got 3"
    with pytest.raises(KeyMismatchError, match=expected):
        cols.values(("eu", 1, 2))
    with pytest.raises(KeyMismatchError, match=expected):
        cols.parse('["eu", 1, 2]')
    with pytest.raises(KeyMismatchError, match=r"is not a JSON array of the key columns' values"):
        cols.parse('{"region": "eu"}')
