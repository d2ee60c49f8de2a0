"""spark_state.keys.unsafe_row_writer: the bytes Spark's UnsafeRowWriter writes (layout checked
byte by byte for one row), read back by the reader of the same layout for every writable type,
and the refusal of other types. (That the JVM finds the rows by these bytes is tested in
tests/state_data/test_savepoint_surgery.py: a restored aggregation continues from rows written here.)"""

from __future__ import annotations

import datetime as dt
import struct

import pytest

from spark_state.keys.unsafe_row import UnsafeRowReader
from spark_state.keys.unsafe_row_writer import WRITABLE_TYPES, unsafe_row


def test_the_layout_of_a_string_and_a_long():
    row = unsafe_row(["k1", 5], ["string", "bigint"])
    # null bits (8), two field words (16), "k1" padded to 8
    assert len(row) == 8 + 16 + 8
    assert row[:8] == bytes(8)
    assert struct.unpack_from("<q", row, 8)[0] == (24 << 32) | 2
    assert struct.unpack_from("<q", row, 16)[0] == 5
    assert row[24:] == b"k1" + bytes(6)


def test_nulls_set_their_bit_and_leave_a_zero_word():
    row = unsafe_row([None, 7, None], ["string", "int", "double"])
    assert row[0] == 0b101 and row[1:8] == bytes(7)
    assert row[8:16] == bytes(8) and row[24:32] == bytes(8)
    assert row[16:24] == struct.pack("<i", 7) + bytes(4)  # an int's high bytes are zero


def test_every_writable_type_reads_back():
    values = [True, -3, 300, -70000, dt.date(2026, 1, 2), 1 << 40,
              dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc), 1.5, 2.25, "zé", b"\x00\x01"]
    types = ["boolean", "tinyint", "smallint", "int", "date", "bigint", "timestamp", "float", "double", "string",
             "binary"]
    assert set(types) | {"void"} == set(WRITABLE_TYPES)
    readable = [i for i, t in enumerate(types) if t != "timestamp"]  # the reader reads no timestamps
    got = UnsafeRowReader(types, readable).values(unsafe_row(values, types))
    assert list(got) == [values[i] for i in readable]
    micros = struct.unpack_from("<q", unsafe_row(values, types), 8 + 8 * 6)[0]
    assert micros == int(values[6].timestamp()) * 1_000_000 + 6


def test_a_null_type_field_is_always_null():
    """A deduplication store's value ``__dummy__`` (NullType, ``void``): its null bit and a zero word."""
    assert unsafe_row([None], ["void"]) == b"\x01" + bytes(7) + bytes(8)


def test_other_types_are_refused_by_name():
    with pytest.raises(ValueError, match="field 0 is decimal\\(10,2\\)"):
        unsafe_row([1], ["decimal(10,2)"])
    with pytest.raises(ValueError, match="of 2 fields got 1 values"):
        unsafe_row([1], ["int", "int"])
