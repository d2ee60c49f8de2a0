"""A keyed function's key columns, as its state location records them: build, hash and parse
keys outside Spark. Pure functions, no I/O.

The record (``_operator.json``'s ``key``, written by :func:`spark_state.process.location.verify_location`)
holds the key columns' names and Spark types. From them:

* the key bytes are :mod:`spark_state.process.keycodec`'s (what the function stores under);
* the key group is ``pmod(hash(key columns), max parallelism)`` with Spark's ``hash()``
  (:func:`~spark_state.partitioning.spark_hash.spark_hash`), as :mod:`spark_state.process.routing`
  computes it in Spark SQL.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from pyspark.sql import types as T

from ..partitioning.spark_hash import spark_hash
from ..process.keycodec import key_encoder
from ..state.type_strings import parse_type_string
from .errors import KeyMismatchError


def key_column_type(simple: str) -> T.DataType:
    """The key column type a recorded simple string names (``bigint``, ``decimal(10,2)``): an
    atomic Spark type, parsed by the one parser of type strings
    (:func:`spark_state.state.type_strings.parse_type_string`)."""
    try:
        parsed = parse_type_string(simple)
    except TypeError:
        parsed = None
    if not isinstance(parsed, T.AtomicType):
        raise KeyMismatchError(f"the recorded key type {simple!r} is not a key column type this release knows")
    return parsed


@dataclass(frozen=True)
class KeyColumns:
    """The key columns of one keyed function: names and Spark simple-string types."""

    columns: tuple[str, ...]
    types: tuple[str, ...]

    @classmethod
    def from_record(cls, meta: Mapping[str, Any], where: str) -> "KeyColumns":
        """From a state location's ``_operator.json`` (``where`` names it in errors)."""
        key = meta.get("key")
        if not key:
            raise KeyMismatchError(
                f"{where} does not record its key columns (it was written by an earlier release and has not "
                "run since): run the query for one batch with this release, which records them")
        return cls(tuple(key["columns"]), tuple(key["types"]))

    @property
    def fields(self) -> list[T.StructField]:
        return [T.StructField(c, key_column_type(t), True) for c, t in zip(self.columns, self.types)]

    def describe(self) -> str:
        return ", ".join(f"{c} {t}" for c, t in zip(self.columns, self.types))

    # ------------------------------------------------------------------ keys
    def values(self, key: Any) -> tuple:
        """The key as one value per column: a scalar for one column; a tuple, list or dict (by
        column name) for several, as ``ctx.current_key`` shows it."""
        if isinstance(key, Mapping):
            missing = [c for c in self.columns if c not in key]
            if missing:
                raise KeyMismatchError(
                    f"the key {key!r} lacks the key column(s) {missing}; key columns: {self.describe()}")
            return tuple(key[c] for c in self.columns)
        if len(self.columns) == 1:
            if not isinstance(key, (tuple, list)):
                return (key,)
            if len(key) == 1:
                return (key[0],)
            raise self._wrong_count(len(key), key)
        if not isinstance(key, (tuple, list)):
            raise KeyMismatchError(
                f"{len(self.columns)} key values expected for the key columns ({self.describe()}), got one "
                f"value: {key!r} (give a tuple, or a dict by column name)")
        if len(key) != len(self.columns):
            raise self._wrong_count(len(key), key)
        return tuple(key)

    def _wrong_count(self, got: int, key: Any) -> KeyMismatchError:
        """The error of a key of ``got`` values (one text for Python keys and command-line keys)."""
        if len(self.columns) == 1:
            return KeyMismatchError(
                f"one key value expected for the key column {self.describe()}, got {got} values: {key!r}")
        return KeyMismatchError(
            f"{len(self.columns)} key values expected for the key columns ({self.describe()}), got {got}: {key!r}")

    def encode(self, values: Sequence[Any]) -> bytes:
        """The key bytes the function's state is stored under."""
        encode = key_encoder(self.fields)
        try:
            return encode(values[0] if len(self.columns) == 1 else tuple(values))
        except (TypeError, ValueError, OverflowError, AttributeError) as exc:
            raise KeyMismatchError(
                f"the key {tuple(values)!r} does not fit the key columns ({self.describe()}): {exc}") from None

    def key_group(self, values: Sequence[Any], max_parallelism: int) -> int:
        """``pmod(hash(key columns), max_parallelism)`` (Spark's ``hash()``)."""
        try:
            return spark_hash(list(values), list(self.types)) % max_parallelism
        except ValueError as exc:
            raise KeyMismatchError(
                f"the key {tuple(values)!r} does not fit the key columns ({self.describe()}): {exc}") from None

    def parse(self, text: str) -> tuple:
        """A key typed on the command line: one column's value as text (``42``, ``alice``,
        ``2024-01-31``, ``0x00ff`` for binary), or a JSON array of the columns' values."""
        if len(self.columns) > 1 or text.lstrip().startswith("["):
            try:
                items = json.loads(text)
            except ValueError as exc:
                raise KeyMismatchError(f"the key {text!r} is not a JSON array of {len(self.columns)} values "
                                       f"({self.describe()}): {exc}") from None
            if not isinstance(items, list):
                raise KeyMismatchError(f"the key {text!r} is not a JSON array of the key columns' values "
                                       f"({self.describe()})")
            if len(items) != len(self.columns):
                raise self._wrong_count(len(items), text)
            return tuple(_parse_value(item, t, text) for item, t in zip(items, self.types))
        return (_parse_value(text, self.types[0], text),)


def _parse_value(value: Any, type_name: str, text: str) -> Optional[Any]:
    """One key column's value from its command-line (or JSON) form."""
    if value is None:
        return None
    t = type_name.lower()
    raw = str(value)
    try:
        if t == "string":
            return raw
        if t in ("tinyint", "smallint", "int", "bigint"):
            return int(raw)
        if t in ("float", "double"):
            return float(raw)
        if t == "boolean":
            if raw.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return raw.lower() == "true"
        if t == "binary":
            return bytes.fromhex(raw[2:] if raw.startswith("0x") else raw)
        if t == "date":
            return _dt.date.fromisoformat(raw)
        if t in ("timestamp", "timestamp_ntz"):
            return _dt.datetime.fromisoformat(raw)
        if t.startswith("decimal"):
            return decimal.Decimal(raw)
    except (ValueError, decimal.InvalidOperation) as exc:
        raise KeyMismatchError(f"the key {text!r}: {raw!r} is not a {type_name} ({exc})") from None
    raise KeyMismatchError(f"the key {text!r}: key columns of type {type_name} cannot be typed on the command line")
