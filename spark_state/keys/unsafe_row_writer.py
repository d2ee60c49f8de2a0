"""Spark's ``UnsafeRow`` bytes from Python values: a pure codec, no I/O, no JVM (the inverse of
:mod:`.unsafe_row` for the same flat types).

Savepoint surgery writes Spark operators' state rows (:mod:`spark_state.state_data.writers.spark_operator_surgery`)
as the provider stores them: a key row is looked up by its bytes, so the bytes must be exactly
those Spark's ``UnsafeRowWriter`` writes. Layout of a row of ``n`` fields (little-endian)::

    offset 0                 8 * ceil(n / 64) bytes   null bit set: bit i set = field i is null
    offset 8 * words + 8 i   8 bytes                  field i: a fixed-width value in the low
                                                      bytes, the rest zero (a null field: all
                                                      zero), or (offset << 32 | size) of a
                                                      variable-length value
    ...                                               variable-length values, each padded with
                                                      zeros to a multiple of 8 bytes

Fixed width: boolean (1 byte), tinyint, smallint, int and date (days since 1970-01-01), bigint
and timestamp (microseconds since the epoch, UTC), float, double. Variable length: string
(UTF-8), binary. Other types (decimals, nested types) raise :class:`ValueError` naming them.
"""

from __future__ import annotations

import datetime as _dt
import struct
from typing import Any, Callable, Sequence

__all__ = ["WRITABLE_TYPES", "unsafe_row"]

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _days(value: Any) -> int:
    return (value - _EPOCH_DATE).days if isinstance(value, _dt.date) else int(value)


def _micros(value: Any) -> int:
    if isinstance(value, _dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=_dt.timezone.utc)
        delta = aware - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return int(value)


#: fixed-width type -> the 8-byte word of a value
_FIXED: dict[str, Callable[[Any], bytes]] = {
    "boolean": lambda v: struct.pack("<?7x", bool(v)),
    "tinyint": lambda v: struct.pack("<b7x", v),
    "smallint": lambda v: struct.pack("<h6x", v),
    "int": lambda v: struct.pack("<i4x", v),
    "date": lambda v: struct.pack("<i4x", _days(v)),
    "bigint": lambda v: struct.pack("<q", v),
    "timestamp": lambda v: struct.pack("<q", _micros(v)),
    "float": lambda v: struct.pack("<f4x", v),
    "double": lambda v: struct.pack("<d", v),
    # NullType (a deduplication store's value ``__dummy__``): always null, so never called
    "void": lambda v: bytes(8),
}
_VARIABLE = {"string": lambda v: str(v).encode("utf-8"), "binary": bytes}
#: The Spark simple type strings this module writes.
WRITABLE_TYPES = tuple(_FIXED) + tuple(_VARIABLE)


def unsafe_row(values: Sequence[Any], types: Sequence[str]) -> bytes:
    """The ``UnsafeRow`` bytes of one row (see the module docstring); ``types`` are Spark simple
    type strings, one per value.

    :raises ValueError: another number of values than types, or a type not in :data:`WRITABLE_TYPES`.
    """
    if len(values) != len(types):
        raise ValueError(f"an UnsafeRow of {len(types)} fields got {len(values)} values")
    n = len(types)
    words = (n + 63) // 64
    nulls = bytearray(8 * words)
    fixed = bytearray(8 * n)
    variable = bytearray()
    start = 8 * words + 8 * n  # the first variable-length value's offset in the row
    for i, (value, type_name) in enumerate(zip(values, types)):
        if type_name not in _FIXED and type_name not in _VARIABLE:
            raise ValueError(f"field {i} is {type_name}; Spark rows of these types are written: "
                             f"{', '.join(WRITABLE_TYPES)}")
        if value is None:
            nulls[i // 8] |= 1 << (i % 8)
            continue
        if type_name in _FIXED:
            fixed[8 * i:8 * i + 8] = _FIXED[type_name](value)
            continue
        data = _VARIABLE[type_name](value)
        fixed[8 * i:8 * i + 8] = struct.pack("<q", ((start + len(variable)) << 32) | len(data))
        variable += data + bytes(-len(data) % 8)
    return bytes(nulls) + bytes(fixed) + bytes(variable)
