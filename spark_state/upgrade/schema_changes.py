"""What changed between a state schema a checkpoint holds and the one a new query plans, in the
words a Spark user knows ("key column `region` added", "`n` int -> bigint").

Pure: Spark ``StructType`` JSON documents (``{"type": "struct", "fields": [...]}``, as the state
schema files hold them) in, sentences out. Spark itself compares key schemas by position and type
only (names and nullability aside), so a rename passes its check and a reorder of columns of one
type passes it too while every row's values would land in the wrong columns: :func:`misread`
tells that case from a harmless rename.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Column", "columns", "describe_changes", "misread", "same_columns", "schema_text", "type_name", "widened"]

#: Spark's numeric types, narrow to wide: a change along one of these chains keeps every value.
_WIDENING = (("byte", "short", "integer", "long"), ("float", "double"))


@dataclass(frozen=True)
class Column:
    """One field of a state schema: its name and its Spark type (as JSON: a string for simple types)."""

    name: str
    type: Any

    @property
    def type_text(self) -> str:
        return type_name(self.type)


def columns(schema: dict) -> list[Column]:
    """The top-level fields of a ``StructType`` JSON document, in order."""
    return [Column(str(f.get("name")), f.get("type")) for f in (schema or {}).get("fields") or []]


def type_name(data_type: Any) -> str:
    """A type as Spark's SQL names it (``int``, ``bigint``, ``struct<...>``) for messages."""
    simple = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}
    if isinstance(data_type, str):
        return simple.get(data_type, data_type)
    kind = data_type.get("type")
    if kind == "struct":
        inner = ",".join(f"{c.name}:{type_name(c.type)}" for c in columns(data_type))
        return f"struct<{inner}>"
    if kind == "array":
        return f"array<{type_name(data_type.get('elementType'))}>"
    if kind == "map":
        return f"map<{type_name(data_type.get('keyType'))},{type_name(data_type.get('valueType'))}>"
    return json.dumps(data_type, sort_keys=True)


def widened(old: Any, new: Any) -> bool:
    """Whether ``new`` holds every value of ``old`` (int -> bigint, float -> double, ...)."""
    for chain in _WIDENING:
        if old in chain and new in chain:
            return chain.index(new) > chain.index(old)
    return False


def _same_type(a: Any, b: Any) -> bool:
    """Types equal with nullability and field names aside (Spark's rule for state schemas)."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if a.get("type") != b.get("type"):
        return False
    if a.get("type") == "struct":
        ca, cb = columns(a), columns(b)
        return len(ca) == len(cb) and all(_same_type(x.type, y.type) for x, y in zip(ca, cb))
    if a.get("type") == "array":
        return _same_type(a.get("elementType"), b.get("elementType"))
    if a.get("type") == "map":
        return _same_type(a.get("keyType"), b.get("keyType")) and _same_type(a.get("valueType"), b.get("valueType"))
    return dict(a) == dict(b)


def misread(old: dict, new: dict) -> list[str]:
    """The columns a new schema that Spark accepts (same types by position) would read from another
    column of the old one: the same names in another order. Empty for a plain rename."""
    old_cols, new_cols = columns(old), columns(new)
    if len(old_cols) != len(new_cols) or sorted(c.name for c in old_cols) != sorted(c.name for c in new_cols):
        return []
    return [n.name for o, n in zip(old_cols, new_cols) if o.name != n.name]


def describe_changes(old: dict, new: dict, what: str = "key") -> list[str]:
    """Sentences for each difference between ``old`` and ``new`` (``what``: "key" or "value"),
    empty when they are equal but for nullability."""
    old_cols, new_cols = columns(old), columns(new)
    old_names, new_names = [c.name for c in old_cols], [c.name for c in new_cols]
    out: list[str] = []
    if len(old_cols) == len(new_cols) and all(_same_type(o.type, n.type) for o, n in zip(old_cols, new_cols)):
        moved = misread(old, new)
        if moved:
            out.append(f"{what} columns reordered ({', '.join(old_names)} -> {', '.join(new_names)}): Spark compares "
                       f"by position and type only, so it accepts this and reads {', '.join(moved)} from the "
                       "old state's other columns")
        else:
            out.extend(f"{what} column `{o.name}` renamed to `{n.name}`"
                       for o, n in zip(old_cols, new_cols) if o.name != n.name)
        return out
    old_by_name = {c.name: c for c in old_cols}
    new_by_name = {c.name: c for c in new_cols}
    for c in new_cols:
        if c.name not in old_by_name:
            out.append(f"{what} column `{c.name}` ({c.type_text}) added")
    for c in old_cols:
        if c.name not in new_by_name:
            out.append(f"{what} column `{c.name}` ({c.type_text}) removed")
    for c in new_cols:
        before = old_by_name.get(c.name)
        if before is not None and not _same_type(before.type, c.type):
            how = "widened" if widened(before.type, c.type) else "changed"
            out.append(f"{what} column `{c.name}` type {how}: {before.type_text} -> {c.type_text}")
    common = [n for n in new_names if n in old_by_name]
    if common != [n for n in old_names if n in new_by_name]:
        out.append(f"{what} columns reordered ({', '.join(old_names)} -> {', '.join(new_names)})")
    return out


def same_types(old: dict, new: dict) -> bool:
    """Equal types by position, names and nullability aside: what Spark's start-up check accepts."""
    return _same_type(old, new)


def same_columns(old: dict, new: dict) -> bool:
    """Equal names and types in the same order (nullability aside)."""
    a, b = columns(old), columns(new)
    return [c.name for c in a] == [c.name for c in b] and all(_same_type(x.type, y.type) for x, y in zip(a, b))


def schema_text(schema: dict) -> str:
    """``(user string, n int)``: a schema as one line."""
    return "(" + ", ".join(f"{c.name} {c.type_text}" for c in columns(schema)) + ")"
