"""A key change of a Spark operator's state, as DataFrame expressions: the old store's rows (``key``
and ``value`` structs, as :func:`~spark_state.state_data.readers.spark_operator_state.read_spark_operator_state`
reads them) in, the rows of the new query's store out, in its key and value schemas.

How each new key column gets its value, in this order:

1. ``add={"region": expr}``: an expression (a ``Column``, a SQL string, or a constant) over the
   old key's columns (by their names after ``rename``) and ``value`` (the old value struct:
   ``value.count``);
2. the old key column of the same name, after ``rename={"old": "new"}``;
3. otherwise the change is refused, naming the column.

Each is cast to the new key's type (``int`` -> ``bigint`` widens). Old key columns the new key
does not name are dropped, and rows that then share a key are **merged** by ``merge``:

* ``"sum"``, ``"min"``, ``"max"``: of every value column (a count's merge is the sum; an
  average's buffer ``(sum, count)`` too);
* ``"first"``: one row of each key (deduplication: one row stands for all);
* ``{"column": rule, ...}``: one of those per value column;
* a function ``(DataFrame) -> DataFrame`` over the rows (``key``, ``value``), several per key,
  that returns one row per key.

Deduplication stores merge by ``"first"`` unless told otherwise, and
``dropDuplicatesWithinWatermark`` stores (whose value is the expiry ``expiresAtMicros``) by the
earliest expiry: the first row seen of the merged key is the one the new query would have kept.
An aggregation whose key loses a column needs ``merge`` (the rule depends on its functions).

The value keeps its columns by position (their types must be the new query's: a changed value
is no key change) and takes the new schema's names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..state_data.errors import StateDataError
from .schema_changes import misread, same_types

__all__ = ["KeyChange", "MERGE_RULES", "Merge", "rekeyed_columns", "rekeyed_rows", "same_key"]

#: A merge rule (see the module docstring).
Merge = Union[str, Mapping[str, str], Callable[[DataFrame], DataFrame]]

MERGE_RULES = ("sum", "min", "max", "first")

#: The value column of ``dropDuplicatesWithinWatermark``'s store.
_EXPIRY = "expiresAtMicros"
_DEDUP_OPERATORS = ("dedupe", "dedupeWithinWatermark")


@dataclass(frozen=True)
class KeyChange:
    """How the old key becomes the new one (see the module docstring)."""

    add: Mapping[str, Any] = field(default_factory=dict)
    rename: Mapping[str, str] = field(default_factory=dict)
    merge: Optional[Merge] = None

    def __post_init__(self) -> None:
        merge = self.merge
        if isinstance(merge, str) and merge not in MERGE_RULES:
            raise ValueError(f"merge takes one of {', '.join(MERGE_RULES)}, a dict of them by value column, or a "
                             f"function; got {merge!r}")
        if isinstance(merge, Mapping):
            bad = {c: r for c, r in merge.items() if r not in MERGE_RULES}
            if bad:
                raise ValueError(f"merge rules are {', '.join(MERGE_RULES)}; got {bad}")


def same_key(old: dict, new: dict) -> bool:
    """Whether the new key (Spark StructType JSON) is the old one's bytes with the same meaning: the
    same types by position (as Spark compares them) and no column read from another's place (a
    rename keeps the state, a reorder does not): the state files are then kept as they are."""
    return same_types(old, new) and not misread(old, new)


def rekeyed_rows(rows: DataFrame, old_key: dict, new_key: dict, new_value: dict, change: KeyChange,
                 operator: str, where: str) -> DataFrame:
    """``rows`` (``key`` and ``value`` of the old store) as the new store's rows (see the module
    docstring); ``operator`` is the store's operator kind (its default merge), ``where`` names
    the operator in errors.

    Raises:
        StateDataError: a new key column with no value, an ``add`` or ``rename`` of a column the
            keys do not have, a value whose types differ from the new query's, or a dropped key
            column without a merge rule.
    """
    old_names = [f["name"] for f in old_key["fields"]]
    new_fields = T.StructType.fromJson(new_key).fields
    names, dropped = _resolved(old_names, [f.name for f in new_fields], change, where)
    flat = rows.select(*[F.col("key").getField(o).alias(n) for o, n in zip(old_names, names)], F.col("value"))
    key = F.struct(*[_key_column(f.name, change).cast(f.dataType).alias(f.name) for f in new_fields])
    out = flat.select(key.alias("key"), _renamed_value(rows, new_value, where).alias("value"))
    merge = change.merge
    if merge is None and dropped:
        merge = _default_merge(operator, new_value)
        if merge is None:
            raise StateDataError(
                f"{where}: the new key drops {', '.join(f'`{n}`' for n in dropped)}, so old rows merge into one "
                "key: say how with merge= ('sum' for counts and sums, 'min', 'max', 'first', a dict of those by "
                "value column, or a function of the rows)")
    return out if merge is None else _merged(out, merge, new_value, where)


def rekeyed_columns(rows: DataFrame, old_names: Sequence[str], new_names: Sequence[str], change: KeyChange,
                    types: Mapping[str, str], where: str) -> tuple[DataFrame, list[str]]:
    """``rows`` of a keyed function's state (its old key columns first, then the others) with the
    new key's columns instead of the old ones, in ``new_names``' order, each cast to ``types`` where
    given, the other columns after them; and the old key columns the new key drops (the caller
    merges the rows that then share a key)."""
    names, dropped = _resolved(list(old_names), list(new_names), change, where)
    stray = sorted(set(types) - set(new_names))
    if stray:
        raise StateDataError(f"{where}: types names {', '.join(stray)}, which the new key does not have")
    others = [c for c in rows.columns if c not in old_names]
    flat = rows.select(*[F.col(o).alias(n) for o, n in zip(old_names, names)], *others)
    key = [(_key_column(n, change).cast(types[n]) if n in types else _key_column(n, change)).alias(n)
           for n in new_names]
    return flat.select(*key, *others), dropped


def _resolved(old_names: list[str], new_names: list[str], change: KeyChange, where: str) -> tuple[list[str], list[str]]:
    """The old key columns' names after ``rename``, and those the new key drops; refused: a rename or
    an add of a column neither key has, a new column that is neither old nor added."""
    unknown = sorted(set(change.rename) - set(old_names))
    if unknown:
        raise StateDataError(f"{where}: rename names {', '.join(unknown)}, which the old key "
                             f"({', '.join(old_names)}) does not have")
    names = [change.rename.get(n, n) for n in old_names]
    stray = sorted(set(change.add) - set(new_names))
    if stray:
        raise StateDataError(f"{where}: add names {', '.join(stray)}, which the new key ({', '.join(new_names)}) "
                             "does not have")
    missing = [n for n in new_names if n not in change.add and n not in names]
    if missing:
        raise StateDataError(
            f"{where}: the new key column(s) {', '.join(f'`{n}`' for n in missing)} are not in the old key "
            f"({', '.join(old_names)}): give their values, e.g. add={{{missing[0]!r}: <expression over the old key>}}, "
            "or say which old column they are (rename={'old': 'new'})")
    return names, [n for n in names if n not in new_names]


def _key_column(name: str, change: KeyChange) -> Column:
    """New key column ``name``: its ``add`` expression, else the (renamed) old column."""
    return _column(change.add[name]) if name in change.add else F.col(name)


def _column(value: Any) -> Column:
    if isinstance(value, Column):
        return value
    if isinstance(value, str):
        return F.expr(value)
    return F.lit(value)


def _renamed_value(rows: DataFrame, new_value: dict, where: str) -> Column:
    """The old ``value`` struct's columns, by position, under the new schema's names; refused when
    their types differ (a changed value is not a key change)."""
    old_fields = next(f for f in rows.schema.fields if f.name == "value").dataType
    assert isinstance(old_fields, T.StructType)
    new_fields = T.StructType.fromJson(new_value).fields
    old_types = [f.dataType.simpleString() for f in old_fields.fields]
    new_types = [f.dataType.simpleString() for f in new_fields]
    if old_types != new_types:
        raise StateDataError(f"{where}: the value changes too ({', '.join(old_types)} -> {', '.join(new_types)}): "
                             "a key change keeps the value; give the new operator its whole state instead (set_state)")
    return F.struct(*[F.col("value").getField(o.name).alias(n.name) for o, n in zip(old_fields.fields, new_fields)])


def _default_merge(operator: str, new_value: dict) -> Optional[Merge]:
    if operator not in _DEDUP_OPERATORS:
        return None
    names = [f["name"] for f in new_value["fields"]]
    return {_EXPIRY: "min"} if names == [_EXPIRY] else "first"


def _merged(rows: DataFrame, merge: Merge, new_value: dict, where: str) -> DataFrame:
    if callable(merge):
        out = merge(rows)
        if not isinstance(out, DataFrame) or [c for c in out.columns] != ["key", "value"]:
            raise StateDataError(f"{where}: the merge function must return a DataFrame of `key` and `value`, got "
                                 f"{out.columns if isinstance(out, DataFrame) else type(out).__name__}")
        return out
    fields = T.StructType.fromJson(new_value).fields
    rules = {f.name: merge for f in fields} if isinstance(merge, str) else dict(merge)
    unknown = sorted(set(rules) - {f.name for f in fields})
    if unknown:
        raise StateDataError(f"{where}: merge names {', '.join(unknown)}, which the value "
                             f"({', '.join(f.name for f in fields)}) does not have")
    if all(rules.get(f.name, "first") == "first" for f in fields):
        return rows.groupBy("key").agg(F.first("value").alias("value"))
    aggregates = {"sum": F.sum, "min": F.min, "max": F.max, "first": F.first}
    return rows.groupBy("key").agg(F.struct(*[
        aggregates[rules.get(f.name, "first")](F.col("value").getField(f.name)).cast(f.dataType).alias(f.name)
        for f in fields]).alias("value"))
