"""Fields of Spark's ``UnsafeRow`` bytes: a pure codec, no I/O, no JVM.

The provider stores Spark's state rows as their ``UnsafeRow`` bytes (:mod:`.provider` gives the
key row's place in a stored key). Reading a few top-level fields of such a row in Python lets the
operations tools match keys (an erasure of the rows of given keys) without a JVM.

Layout of a row of ``n`` fields (Spark's ``UnsafeRow``, little-endian as the JVM writes it on
x86 and ARM)::

    offset 0                 8 * ceil(n / 64) bytes   null bit set: bit i set = field i is null
    offset 8 * words + 8 i   8 bytes                  field i: a fixed-width value in the low
                                                      bytes, or (offset << 32 | size) of a
                                                      variable-length value in the row
    ...                                               variable-length values (8-byte aligned)

Fixed width: boolean (1 byte), tinyint, smallint, int and date (days since 1970-01-01),
bigint, float, double. Variable length: string (UTF-8), binary. Other types are not read here.
"""

from __future__ import annotations

import datetime as _dt
import struct
from typing import Any, Callable, Optional, Sequence

__all__ = ["READABLE_TYPES", "UnsafeRowReader"]

_EPOCH = _dt.date(1970, 1, 1)
_FIXED: dict[str, Callable[[bytes, int], Any]] = {
    "boolean": lambda b, at: b[at] != 0,
    "tinyint": lambda b, at: struct.unpack_from("<b", b, at)[0],
    "smallint": lambda b, at: struct.unpack_from("<h", b, at)[0],
    "int": lambda b, at: struct.unpack_from("<i", b, at)[0],
    "bigint": lambda b, at: struct.unpack_from("<q", b, at)[0],
    "float": lambda b, at: struct.unpack_from("<f", b, at)[0],
    "double": lambda b, at: struct.unpack_from("<d", b, at)[0],
    "date": lambda b, at: _EPOCH + _dt.timedelta(days=struct.unpack_from("<i", b, at)[0]),
}
_VARIABLE = {"string": lambda raw: raw.decode("utf-8"), "binary": bytes}
#: Spark simple-string types whose values :class:`UnsafeRowReader` reads.
READABLE_TYPES = tuple(_FIXED) + tuple(_VARIABLE)


class UnsafeRowReader:
    """Reads chosen top-level fields of rows of one schema (its fields' Spark simple-string types)."""

    def __init__(self, types: Sequence[str], ordinals: Sequence[int]) -> None:
        unreadable = [types[i] for i in ordinals if types[i] not in READABLE_TYPES]
        if unreadable:
            raise ValueError(f"fields of type {', '.join(unreadable)} cannot be read from UnsafeRow bytes here "
                             f"(readable: {', '.join(READABLE_TYPES)})")
        self._words = (len(types) + 63) // 64
        self._fields = [(i, types[i]) for i in ordinals]

    def values(self, row: bytes) -> tuple:
        """The chosen fields' values of ``row`` (None for a null field), in the chosen order."""
        return tuple(self._value(row, i, t) for i, t in self._fields)

    def _value(self, row: bytes, ordinal: int, type_name: str) -> Optional[Any]:
        if row[(ordinal // 64) * 8 + (ordinal % 64) // 8] >> (ordinal % 8) & 1:
            return None
        at = self._words * 8 + 8 * ordinal
        fixed = _FIXED.get(type_name)
        if fixed is not None:
            return fixed(row, at)
        (slot,) = struct.unpack_from("<q", row, at)
        offset, size = slot >> 32, slot & 0xFFFFFFFF
        return _VARIABLE[type_name](bytes(row[offset:offset + size]))
