"""Key columns -> the key bytes keyed state is stored under, and the key users see.

Layout of the key bytes (stable across releases: they are part of the checkpoint):

* one key column: ``0x00`` for null, else ``0x01`` + the column type's state serializer
  encoding (:func:`spark_state.state.serializer_for`; e.g. raw UTF-8 for strings, int64 BE
  for integral types);
* several key columns: the struct encoding of those columns (a presence byte per field,
  then the field's nested encoding).

``ctx.current_key`` is the column's Python value for one key column and a tuple for several.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from pyspark.sql import types as T

from ..state import serializer_for
from .errors import ProcessDefinitionError

#: Key column types: those Spark's ``hash()`` and the state serializers both handle exactly.
SUPPORTED_KEY_TYPES = (
    T.StringType, T.BinaryType, T.BooleanType, T.ByteType, T.ShortType, T.IntegerType,
    T.LongType, T.FloatType, T.DoubleType, T.DateType, T.TimestampType, T.TimestampNTZType,
    T.DecimalType,
)


def check_key_fields(fields: Sequence[T.StructField]) -> None:
    for f in fields:
        if not isinstance(f.dataType, SUPPORTED_KEY_TYPES):
            raise ProcessDefinitionError(
                f"key column {f.name!r} has type {f.dataType.simpleString()}, which cannot be a key; "
                "key columns may be string, binary, boolean, integral, float, double, decimal, "
                "date or timestamp")


def key_encoder(fields: Sequence[T.StructField]) -> Callable[[Any], bytes]:
    """``encode(key) -> bytes`` for keys as :mod:`.keycodec` presents them."""
    if len(fields) == 1:
        ser = serializer_for(fields[0].dataType).serialize

        def encode_one(key: Any) -> bytes:
            return b"\x00" if key is None else b"\x01" + ser(key)

        return encode_one
    return serializer_for(T.StructType(list(fields))).serialize


def key_decoder(fields: Sequence[T.StructField]) -> Callable[[bytes], Any]:
    """The inverse of :func:`key_encoder`: key bytes -> the key as ``ctx.current_key`` shows it
    (the column's value for one key column, a tuple for several). Used for timers, whose
    entries hold only the key bytes."""
    if len(fields) == 1:
        de = serializer_for(fields[0].dataType).deserialize

        def decode_one(data: bytes) -> Any:
            return None if data[:1] == b"\x00" else de(data[1:])

        return decode_one
    de_struct = serializer_for(T.StructType(list(fields))).deserialize

    def decode_many(data: bytes) -> Any:
        return tuple(de_struct(data))

    return decode_many
