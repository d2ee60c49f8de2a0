"""Spark type strings: parse ``"bigint"``, ``"array<string>"``, ``"struct<a:int,b:string not null>"``
into pyspark ``DataType``s, and name the Spark type of a state's values.

A state's schema record keeps its serializer's canonical type string (see
:mod:`.serializers`, whose codecs answer ``type_string`` and are found again from it); readers of
state as data turn that string back into a Spark type for the columns they return. The strings
are parsed here rather than by Spark because state descriptors are also built inside Python
workers, where no SparkSession exists.

Grammar (case-insensitive names, blanks allowed between tokens)::

    type   := simple | decimal | "array<" type ">" | "map<" type "," type ">"
            | "struct<" [field ("," field)*] ">"
    field  := name ":" type ["not null"]
    name   := identifier | "`" any text, "``" for a backtick "`"
    decimal:= "decimal" ["(" precision ["," scale] ")"]     (default decimal(10,0))
    simple := tinyint | byte | smallint | short | int | integer | bigint | long | float | real
            | double | string | binary | boolean | bool | date | timestamp | timestamp_ntz
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

__all__ = ["parse_type_string", "spark_type_of"]

_SIMPLE_TYPE_NAMES = {
    "tinyint": "ByteType", "byte": "ByteType", "smallint": "ShortType", "short": "ShortType",
    "int": "IntegerType", "integer": "IntegerType", "bigint": "LongType", "long": "LongType",
    "float": "FloatType", "real": "FloatType", "double": "DoubleType", "string": "StringType",
    "binary": "BinaryType", "boolean": "BooleanType", "bool": "BooleanType", "date": "DateType",
    "timestamp": "TimestampType", "timestamp_ntz": "TimestampNTZType",
}


def parse_type_string(text: str) -> Any:
    """A pyspark ``DataType`` from a type string such as ``"bigint"``, ``"array<string>"``,
    ``"map<string,bigint>"``, ``"struct<a:int,b:string>"`` or ``"decimal(10,2)"``.

    Parsed here rather than by Spark because state descriptors are also built inside Python
    workers, where no SparkSession exists.
    """
    from pyspark.sql import types as T

    pos = 0

    def fail(why: str) -> TypeError:
        return TypeError(f"cannot parse state type {text!r}: {why} at position {pos}")

    def skip() -> None:
        nonlocal pos
        while pos < len(text) and text[pos].isspace():
            pos += 1

    def word() -> str:
        nonlocal pos
        skip()
        if pos < len(text) and text[pos] == "`":
            # a quoted name: anything up to the closing backtick, `` for a backtick
            out = []
            pos += 1
            while True:
                if pos >= len(text):
                    raise fail("unterminated `quoted` name")
                if text[pos] == "`":
                    if text[pos + 1:pos + 2] == "`":
                        out.append("`")
                        pos += 2
                        continue
                    pos += 1
                    return "".join(out)
                out.append(text[pos])
                pos += 1
        start = pos
        while pos < len(text) and (text[pos].isalnum() or text[pos] == "_"):
            pos += 1
        if start == pos:
            raise fail("expected a name")
        return text[start:pos]

    def peek_not_null() -> bool:
        """Consume ``NOT NULL`` (any case) if it comes next."""
        nonlocal pos
        m = re.compile(r"\s*not\s+null\b", re.IGNORECASE).match(text, pos)
        if m is None:
            return False
        pos = m.end()
        return True

    def expect(ch: str) -> None:
        nonlocal pos
        skip()
        if pos >= len(text) or text[pos] != ch:
            raise fail(f"expected {ch!r}")
        pos += 1

    def peek(ch: str) -> bool:
        skip()
        return pos < len(text) and text[pos] == ch

    def parse() -> Any:
        name = word().lower()
        if name == "array":
            expect("<")
            element = parse()
            expect(">")
            return T.ArrayType(element)
        if name == "map":
            expect("<")
            key = parse()
            expect(",")
            value = parse()
            expect(">")
            return T.MapType(key, value)
        if name == "struct":
            expect("<")
            fields = []
            while not peek(">"):
                field_name = word()
                expect(":")
                field_type = parse()
                fields.append(T.StructField(field_name, field_type, nullable=not peek_not_null()))
                if not peek(">"):
                    expect(",")
            expect(">")
            return T.StructType(fields)
        if name == "decimal":
            precision, scale = 10, 0
            if peek("("):
                expect("(")
                precision = int(word())
                if peek(","):
                    expect(",")
                    scale = int(word())
                expect(")")
            return T.DecimalType(precision, scale)
        if name in _SIMPLE_TYPE_NAMES:
            return getattr(T, _SIMPLE_TYPE_NAMES[name])()
        raise fail(f"unknown type {name!r}")

    result = parse()
    skip()
    if pos != len(text):
        raise fail("unexpected trailing text")
    return result


def spark_type_of(described: Any) -> Optional[Any]:
    """The Spark type (a pyspark ``DataType``) of a state's values, from either its serializer
    (a built-in codec, whose ``type_string`` names it) or that serializer's snapshot in a schema
    record (``{"codec": "spark", "type": <type string>}``, see
    :func:`.serializers.serializer_snapshot`).

    None when the values have no Spark type: pickled values, a custom serializer, or nothing
    (a map state's absent key serializer).
    """
    if isinstance(described, Mapping):
        text = described.get("type") if described.get("codec") == "spark" else None
    else:
        text = getattr(described, "type_string", None)
    return parse_type_string(text) if isinstance(text, str) else None
