"""Value serializers for keyed and operator state: typed, compact, never pickle by default.

A descriptor names the type of its values; :func:`serializer_for` turns that into a
:class:`Serializer`. Accepted types: Python ``int``, ``float``, ``str``, ``bytes``,
``bool``; pyspark ``DataType``s (integral, floating, string, binary, boolean, date,
timestamp, decimal, and nested ``StructType``/``ArrayType``/``MapType``); pyarrow
primitive types; or a ``Serializer`` instance.

Byte layouts (big-endian throughout, so integers also sort numerically when non-negative):

* integral types: int64 (8 bytes); floating types: IEEE-754 float64 (8 bytes);
  boolean: 1 byte (0/1); date: int32 days since 1970-01-01; timestamp: int64
  microseconds since the epoch (UTC); decimal: its string form in UTF-8.
* string / binary at the top level: the raw UTF-8 / bytes; nested: uint32 length + bytes.
* struct: per field, a presence byte (0 = null, 1 = value) then the field's nested encoding;
  decoded as a ``pyspark.sql.Row``.
* array: uint32 count, then per element a presence byte and the element.
* map: uint32 count, then per entry the key, a presence byte and the value.

**Canonical types and snapshots.** Every built-in codec has a canonical type string
(``type_string``) that :func:`.type_strings.parse_type_string` turns back into the same codec:
``bigint``, ``double``, ``boolean``, ``string``, ``binary``, ``date``, ``timestamp``,
``decimal``, ``array<...>``, ``map<k,v>``, ``struct<a:bigint,b:string not null>``. Types
that share bytes share a codec and so a canonical type: every integral type is ``bigint``,
every floating type ``double``, every decimal ``decimal`` (stored as text, whatever the
precision). Struct field names that are not plain identifiers are quoted with backticks,
and a field declared non-nullable says ``not null``; nullability never changes the bytes
(every struct field has a presence byte), but schema evolution needs it to decide whether
a new field may be filled with null. :func:`serializer_snapshot` describes any serializer
as JSON-able data (Flink's ``TypeSerializerSnapshot``), which the state's schema record
keeps (see :mod:`.schema`). Codecs pickle as their canonical type string, so descriptors
built in a function's ``__init__`` or as class attributes ship to executors.

:class:`PickleSerializer` is the escape hatch for arbitrary Python objects. Unpickling
runs code chosen by whoever wrote the bytes, so it is never used unless the descriptor
names it explicitly, and it warns when created.

Size: one module on purpose (over 500 lines): the codecs and the mapping from a declared type
to its codec (:func:`serializer_for`, ``_spark_codec``, ``_arrow_codec``) are one table read in
both directions -- every codec's ``type_string``, parsed (:mod:`.type_strings`), must map back to
that same codec, or a schema record would name a type no codec reads. Split, a codec added in one
module and not the other would break that silently.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import pickle
import re
import struct
import warnings
from typing import Any, Callable, Optional, Protocol, runtime_checkable

from .type_strings import parse_type_string

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")
_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@runtime_checkable
class Serializer(Protocol):
    """Turns state values into bytes and back."""

    def serialize(self, value: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...


class _Codec:
    """A serializer that can also write and read itself nested in a larger buffer.

    ``name`` identifies the bytes (two codecs with equal names read each other's bytes);
    ``type_string`` is the canonical type, ``name`` plus struct fields' ``not null``.
    """

    name = "?"
    #: The one Python type whose values come back from ``deserialize(serialize(v))`` equal and
    #: of the same type, so a state may keep such a value instead of re-reading its bytes
    #: (immutable types only); None: no such promise.
    exact_type: Optional[type] = None

    @property
    def type_string(self) -> str:
        return self.name

    def snapshot(self) -> dict:
        """What the state's schema record keeps about this codec."""
        return {"codec": "spark", "type": self.type_string}

    def __reduce__(self) -> tuple:
        # struct.Struct objects and Row factories do not pickle; the canonical type
        # string rebuilds an equal codec (the module singleton for simple types).
        return (codec_for_type_string, (self.type_string,))

    def serialize(self, value: Any) -> bytes:
        out = bytearray()
        self.write(out, value)
        return bytes(out)

    def deserialize(self, data: bytes) -> Any:
        value, _ = self.read(data, 0)
        return value

    def write(self, out: bytearray, value: Any) -> None:
        raise NotImplementedError

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<serializer {self.name}>"


class _Fixed(_Codec):
    def __init__(self, name: str, fmt: struct.Struct, to: Callable[[Any], Any], back: Callable[[Any], Any],
                 exact_type: Optional[type] = None) -> None:
        self.name, self._fmt, self._to, self._back = name, fmt, to, back
        self.exact_type = exact_type
        # The hot paths (one call per state read or write): the precompiled struct's bound
        # methods, and no conversion call for values already of the exact type.
        self._pack, self._unpack_from = fmt.pack, fmt.unpack_from
        self._plain = back is _identity

    def serialize(self, value: Any) -> bytes:
        if type(value) is self.exact_type:
            return self._pack(value)
        return self._pack(self._to(value))

    def deserialize(self, data: bytes) -> Any:
        if self._plain:
            return self._unpack_from(data)[0]
        return self._back(self._unpack_from(data)[0])

    def write(self, out: bytearray, value: Any) -> None:
        out += self._fmt.pack(self._to(value))

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return self._back(self._fmt.unpack_from(data, pos)[0]), pos + self._fmt.size


def _to_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np  # numpy integers come out of Arrow/pandas conversions
            if isinstance(value, np.integer):
                return int(value)
        except ImportError:  # pragma: no cover
            pass
        raise TypeError(f"expected an integer state value, got {type(value).__name__} {value!r}")
    return value


def _identity(value: Any) -> Any:
    return value


class _Bool(_Codec):
    name = "boolean"
    exact_type = bool

    def serialize(self, value: Any) -> bytes:
        return b"\x01" if value else b"\x00"

    def deserialize(self, data: bytes) -> Any:
        return data[:1] == b"\x01"

    def write(self, out: bytearray, value: Any) -> None:
        out.append(1 if value else 0)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return data[pos] == 1, pos + 1


class _Blob(_Codec):
    """UTF-8 strings or raw bytes: raw at the top level, length-prefixed when nested."""

    def __init__(self, text: bool) -> None:
        self._text = text
        self.name = "string" if text else "binary"
        self.exact_type = str if text else bytes

    def _bytes(self, value: Any) -> bytes:
        if self._text:
            if not isinstance(value, str):
                raise TypeError(f"expected a str state value, got {type(value).__name__} {value!r}")
            return value.encode("utf-8")
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected a bytes state value, got {type(value).__name__}")
        return bytes(value)

    def serialize(self, value: Any) -> bytes:
        return self._bytes(value)

    def deserialize(self, data: bytes) -> Any:
        return data.decode("utf-8") if self._text else bytes(data)

    def write(self, out: bytearray, value: Any) -> None:
        raw = self._bytes(value)
        out += _U32.pack(len(raw))
        out += raw

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        (n,) = _U32.unpack_from(data, pos)
        raw = data[pos + 4: pos + 4 + n]
        return (raw.decode("utf-8") if self._text else bytes(raw)), pos + 4 + n


class _Decimal(_Codec):
    name = "decimal"
    _inner = _Blob(text=True)

    def serialize(self, value: Any) -> bytes:
        return str(decimal.Decimal(value)).encode()

    def deserialize(self, data: bytes) -> Any:
        return decimal.Decimal(data.decode())

    def write(self, out: bytearray, value: Any) -> None:
        self._inner.write(out, str(decimal.Decimal(value)))

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        text, pos = self._inner.read(data, pos)
        return decimal.Decimal(text), pos


def _date_to_days(value: _dt.date) -> int:
    return (value - _EPOCH_DATE).days


def _timestamp_to_micros(value: _dt.datetime) -> int:
    if value.tzinfo is None:  # naive: taken as UTC, like Arrow does
        value = value.replace(tzinfo=_dt.timezone.utc)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _micros_to_timestamp(micros: int) -> _dt.datetime:
    return (_EPOCH + _dt.timedelta(microseconds=micros)).replace(tzinfo=None)


def quote_field_name(name: str) -> str:
    """A struct field name as it appears in a type string: backticks unless it is a plain
    identifier (a backtick inside is doubled, as in Spark SQL)."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return name
    return "`" + name.replace("`", "``") + "`"


class _Struct(_Codec):
    def __init__(self, names: list[str], fields: list[_Codec], nullable: "list[bool] | None" = None) -> None:
        self._names = names
        self._fields = fields
        self._nullable = list(nullable) if nullable is not None else [True] * len(names)
        quoted = [quote_field_name(n) for n in names]
        self.name = "struct<" + ",".join(f"{n}:{f.name}" for n, f in zip(quoted, fields)) + ">"
        self._type_string = "struct<" + ",".join(
            f"{n}:{f.type_string}{'' if ok else ' not null'}"
            for n, f, ok in zip(quoted, fields, self._nullable)) + ">"
        from pyspark.sql import Row
        self._row = Row(*names)

    @property
    def type_string(self) -> str:
        return self._type_string

    def write(self, out: bytearray, value: Any) -> None:
        if isinstance(value, dict):
            items = [value.get(n) for n in self._names]
        else:
            items = list(value)
            if len(items) != len(self._names):
                raise TypeError(f"expected {len(self._names)} fields ({', '.join(self._names)}), got {value!r}")
        for codec, item in zip(self._fields, items):
            if item is None:
                out.append(0)
            else:
                out.append(1)
                codec.write(out, item)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        values = []
        for codec in self._fields:
            present = data[pos]
            pos += 1
            if present:
                item, pos = codec.read(data, pos)
                values.append(item)
            else:
                values.append(None)
        return self._row(*values), pos


class _Array(_Codec):
    def __init__(self, element: _Codec) -> None:
        self._element = element
        self.name = f"array<{element.name}>"

    @property
    def type_string(self) -> str:
        return f"array<{self._element.type_string}>"

    def write(self, out: bytearray, value: Any) -> None:
        items = list(value)
        out += _U32.pack(len(items))
        for item in items:
            if item is None:
                out.append(0)
            else:
                out.append(1)
                self._element.write(out, item)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        (n,) = _U32.unpack_from(data, pos)
        pos += 4
        items = []
        for _ in range(n):
            present = data[pos]
            pos += 1
            if present:
                item, pos = self._element.read(data, pos)
                items.append(item)
            else:
                items.append(None)
        return items, pos


class _Map(_Codec):
    def __init__(self, key: _Codec, value: _Codec) -> None:
        self._key, self._value = key, value
        self.name = f"map<{key.name},{value.name}>"

    @property
    def type_string(self) -> str:
        return f"map<{self._key.type_string},{self._value.type_string}>"

    def write(self, out: bytearray, value: Any) -> None:
        items = list(dict(value).items())
        out += _U32.pack(len(items))
        for k, v in items:
            self._key.write(out, k)
            if v is None:
                out.append(0)
            else:
                out.append(1)
                self._value.write(out, v)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        (n,) = _U32.unpack_from(data, pos)
        pos += 4
        result = {}
        for _ in range(n):
            k, pos = self._key.read(data, pos)
            present = data[pos]
            pos += 1
            v = None
            if present:
                v, pos = self._value.read(data, pos)
            result[k] = v
        return result, pos


LONG = _Fixed("bigint", _I64, _to_int, _identity, exact_type=int)
DOUBLE = _Fixed("double", _F64, float, _identity, exact_type=float)
BOOLEAN = _Bool()
STRING = _Blob(text=True)
BINARY = _Blob(text=False)
DATE = _Fixed("date", _I32, _date_to_days, lambda d: _EPOCH_DATE + _dt.timedelta(days=d))
TIMESTAMP = _Fixed("timestamp", _I64, _timestamp_to_micros, _micros_to_timestamp)
DECIMAL = _Decimal()

_PY_TYPES: dict[type, _Codec] = {int: LONG, float: DOUBLE, str: STRING, bytes: BINARY, bool: BOOLEAN,
                                 _dt.date: DATE, _dt.datetime: TIMESTAMP, decimal.Decimal: DECIMAL}


class PickleSerializer:
    """Arbitrary Python objects through :mod:`pickle` -- an explicit opt-in.

    Unpickling executes whatever the pickled bytes say, so only use this for state that
    no one else can write (your own checkpoint location), and prefer typed descriptors.
    """

    name = "pickle"

    def __init__(self, protocol: int = pickle.HIGHEST_PROTOCOL) -> None:
        self._protocol = protocol
        warnings.warn(
            "spark-state: a state descriptor uses PickleSerializer, so state read back from "
            "checkpoint storage will be unpickled; anyone who can write that storage can run "
            "code in your job. Prefer a typed descriptor (Spark/Arrow types).",
            UserWarning, stacklevel=2,
        )

    def serialize(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=self._protocol)

    def deserialize(self, data: bytes) -> Any:
        return pickle.loads(data)

    def snapshot(self) -> dict:
        return {"codec": "pickle"}

    def __repr__(self) -> str:
        return "<serializer pickle>"


def serializer_snapshot(serializer: Serializer) -> dict:
    """A JSON-able description of ``serializer`` (Flink's ``TypeSerializerSnapshot``):

    * built-in codecs: ``{"codec": "spark", "type": <canonical type string>}``;
    * :class:`PickleSerializer`: ``{"codec": "pickle"}``;
    * any other ``Serializer``: ``{"codec": "custom", "class": "<module>.<qualname>",
      "version": <its ``schema_version`` attribute, or None>}`` -- bump ``schema_version``
      when the bytes change, and implement ``migrate_from`` to read older ones (see
      :mod:`.compatibility`).
    """
    if isinstance(serializer, (_Codec, PickleSerializer)):
        return serializer.snapshot()
    cls = type(serializer)
    version = getattr(serializer, "schema_version", None)
    if not (version is None or isinstance(version, (int, str))) or isinstance(version, bool):
        version = repr(version)
    return {"codec": "custom", "class": f"{cls.__module__}.{cls.__qualname__}", "version": version}


def describe_type(value_type: Any) -> str:
    """The type a descriptor declared, for messages: ``int`` (a Spark type's simple
    string), ``Python int``, ``Arrow int32``, or a serializer's class name."""
    if isinstance(value_type, type) and value_type in _PY_TYPES:
        return f"Python {value_type.__name__}"
    if isinstance(value_type, _Codec):
        return value_type.type_string
    if isinstance(value_type, str):
        try:
            return parse_type_string(value_type).simpleString()
        except TypeError:
            return value_type
    simple = getattr(value_type, "simpleString", None)
    if callable(simple):
        return str(simple())
    if type(value_type).__module__.startswith("pyarrow"):
        return f"Arrow {value_type}"
    if isinstance(value_type, PickleSerializer):
        return "pickle"
    return type(value_type).__qualname__


def codec_for_type_string(text: str) -> "_Codec":
    """The built-in codec of a canonical type string (what ``type_string`` returns)."""
    codec = _spark_codec(parse_type_string(text))
    assert codec is not None  # parse_type_string only returns types _spark_codec knows
    return codec


def serializer_for(value_type: Any) -> Serializer:
    """The serializer for a descriptor's type (see the module docstring for what is accepted)."""
    if isinstance(value_type, type) and value_type in _PY_TYPES:
        return _PY_TYPES[value_type]
    if isinstance(value_type, str):
        value_type = parse_type_string(value_type)
    codec = _spark_codec(value_type) or _arrow_codec(value_type)
    if codec is not None:
        return codec
    if isinstance(value_type, Serializer) and not isinstance(value_type, type):
        return value_type
    raise TypeError(
        f"unsupported state type {value_type!r}: use int, float, str, bytes, bool, a pyspark "
        "DataType, a pyarrow type or a Serializer (PickleSerializer() for arbitrary objects, "
        "an explicit opt-in)"
    )


def _spark_codec(t: Any) -> "_Codec | None":
    try:
        from pyspark.sql import types as T
    except ImportError:  # pragma: no cover
        return None
    if not isinstance(t, T.DataType):
        return None
    if isinstance(t, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return LONG
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return DOUBLE
    if isinstance(t, T.StringType):
        return STRING
    if isinstance(t, T.BinaryType):
        return BINARY
    if isinstance(t, T.BooleanType):
        return BOOLEAN
    if isinstance(t, T.DateType):
        return DATE
    if isinstance(t, (T.TimestampType, T.TimestampNTZType)):
        return TIMESTAMP
    if isinstance(t, T.DecimalType):
        return DECIMAL
    if isinstance(t, T.StructType):
        return _Struct([f.name for f in t.fields], [_nested(f.dataType) for f in t.fields],
                       [f.nullable for f in t.fields])
    if isinstance(t, T.ArrayType):
        return _Array(_nested(t.elementType))
    if isinstance(t, T.MapType):
        return _Map(_nested(t.keyType), _nested(t.valueType))
    return None


def _arrow_codec(t: Any) -> "_Codec | None":
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover
        return None
    if not isinstance(t, pa.DataType):
        return None
    if pa.types.is_integer(t):
        return LONG
    if pa.types.is_floating(t):
        return DOUBLE
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return STRING
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BINARY
    if pa.types.is_boolean(t):
        return BOOLEAN
    if pa.types.is_date32(t):
        return DATE
    if pa.types.is_timestamp(t):
        return TIMESTAMP
    return None


def _nested(t: Any) -> _Codec:
    codec = _spark_codec(t)
    if codec is None:
        raise TypeError(f"unsupported nested state type {t!r}")
    return codec
