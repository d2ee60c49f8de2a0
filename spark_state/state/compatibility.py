"""Schema evolution verdicts: is a state's stored schema readable under a new descriptor?

Flink's three answers (``TypeSerializerSchemaCompatibility``), decided from two schema
records (:mod:`.schema`) and, for a custom serializer's migration hook, the new serializer.
Pure: no I/O; callers read records, rewrite entries and write records.

* **compatible as is** -- the stored bytes read correctly: the same canonical type
  (``int`` -> ``bigint`` and ``float`` -> ``double`` share a codec), nullability changes,
  a TTL change (its stamp layout migrates on its own), value <-> reducing <-> aggregating
  (one value per key, same layout), the same custom serializer class and version.
* **compatible after migration** -- every stored value is rewritten once:
  ``bigint`` -> ``double`` (exact up to 2**53, rounded beyond, as Avro's promotion);
  ``bigint`` -> ``decimal``; structs matched **by field name** (a new nullable field is
  null, a dropped field is discarded, fields may move and widen recursively); arrays
  and map values whose element type migrates; any change to a custom serializer that
  implements ``migrate_from(old_snapshot, data) -> value``.
* **incompatible** -- everything else, with a reason: ``double`` -> ``bigint`` (drops
  fractions), ``double`` -> ``decimal`` (NaN and infinities have no decimal, and which
  decimal a binary fraction "means" is the user's call), anything <-> ``string`` /
  ``binary`` / ``boolean`` / ``date`` / ``timestamp`` unless identical, a new NOT NULL struct
  field, a map key type change (keys are part of the stored key and its order), a change
  of kind between layouts (single value / list / map; operator list / union / broadcast),
  pickle <-> typed, a custom serializer's class or version without ``migrate_from``.

A custom serializer opts into migration with one method::

    class MySerializer:
        schema_version = 2
        def serialize(self, value) -> bytes: ...
        def deserialize(self, data) -> object: ...
        def migrate_from(self, old_snapshot: dict, data: bytes) -> object:
            # old_snapshot: {"codec": "custom", "class": ..., "version": 1}, or a built-in's
            # {"codec": "spark", "type": "bigint"} / {"codec": "pickle"}; raise to refuse
            ...

Its return value is written back with ``serialize``.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .schema import SINGLE_VALUE_KINDS, StateSchema, describe_snapshot, without_display
from .serializers import Serializer, codec_for_type_string
from .type_strings import parse_type_string

AS_IS = "compatible as is"
MIGRATE = "compatible after migration"
INCOMPATIBLE = "incompatible"

#: Converts one stored value's bytes from the old schema to the new one.
Rewrite = Callable[[bytes], bytes]


@dataclass(frozen=True)
class Verdict:
    """The answer: ``outcome`` is one of :data:`AS_IS`, :data:`MIGRATE`,
    :data:`INCOMPATIBLE`; ``reason`` says why (for incompatible); ``rewrite`` converts a
    value's bytes (for migrate)."""

    outcome: str
    reason: str = ""
    rewrite: Optional[Rewrite] = None

    @property
    def as_is(self) -> bool:
        return self.outcome == AS_IS

    @property
    def migrates(self) -> bool:
        return self.outcome == MIGRATE

    @property
    def incompatible(self) -> bool:
        return self.outcome == INCOMPATIBLE


_AS_IS = Verdict(AS_IS)


class _Refused(Exception):
    """A type-level incompatibility; the message is the reason."""


def judge(old: StateSchema, new: StateSchema, new_serializer: Optional[Serializer] = None) -> Verdict:
    """The verdict for reading state stored under ``old`` with a descriptor whose record is
    ``new``. ``new_serializer`` is needed only to call a custom ``migrate_from`` hook."""
    reason = _kind_change(old.kind, new.kind)
    if reason:
        return Verdict(INCOMPATIBLE, reason)
    if (old.key is None) != (new.key is None):  # pragma: no cover - implied by the kinds
        return Verdict(INCOMPATIBLE, "one has map keys and the other not")
    if old.key is not None and new.key is not None:
        key_verdict = _judge_snapshots(old.key, new.key, None)
        if not key_verdict.as_is:
            return Verdict(INCOMPATIBLE, (
                f"the map key type changed from {describe_snapshot(old.key)} to {describe_snapshot(new.key)}; "
                "map keys are part of the stored key and decide its order, so they cannot be migrated"))
    return _judge_snapshots(old.value, new.value, new_serializer)


def equivalent(a: StateSchema, b: StateSchema) -> bool:
    """Whether state stored under ``a`` and under ``b`` has the same bytes and TTL stamp
    layout (so entries of both may be merged, e.g. on rescale)."""
    return (judge(a, b).as_is and judge(b, a).as_is
            and (a.ttl_ms is None) == (b.ttl_ms is None))


def _kind_change(old: str, new: str) -> str:
    if old == new or (old in SINGLE_VALUE_KINDS and new in SINGLE_VALUE_KINDS):
        return ""
    names = {"union": "union list", "broadcast": "broadcast"}
    return (f"its kind changed from {names.get(old, old)} state to {names.get(new, new)} state, "
            "which store their entries differently (a change of kind cannot be migrated)")


def _judge_snapshots(old: dict, new: dict, new_serializer: Optional[Serializer]) -> Verdict:
    o, n = without_display(old), without_display(new)
    assert o is not None and n is not None
    if o == n:
        return _AS_IS
    hook = getattr(new_serializer, "migrate_from", None) if n.get("codec") == "custom" else None
    if callable(hook):
        assert new_serializer is not None
        return Verdict(MIGRATE, rewrite=_hook_rewrite(hook, new_serializer, o))
    old_codec, new_codec = o.get("codec"), n.get("codec")
    if old_codec == "spark" and new_codec == "spark":
        return _judge_types(str(o["type"]), str(n["type"]))
    if old_codec == "pickle" or new_codec == "pickle":
        if old_codec == "pickle":
            why = ("it was written with PickleSerializer (pickled Python objects), which the new "
                   "serializer cannot read")
        else:
            why = ("the new descriptor reads it with PickleSerializer, but it was not written pickled; "
                   "unpickling other bytes fails or, worse, runs code")
        return Verdict(INCOMPATIBLE, why)
    if old_codec == "custom" and new_codec == "custom":
        if o.get("class") != n.get("class"):
            why = "the custom serializer class changed"
        else:
            why = f"the custom serializer's schema_version changed from {o.get('version')!r} to {n.get('version')!r}"
        return Verdict(INCOMPATIBLE, why + " and the new one has no migrate_from(old_snapshot, data) method")
    return Verdict(INCOMPATIBLE, "a custom serializer's bytes and a built-in type's are not interchangeable "
                                 "(implement migrate_from(old_snapshot, data) on the new serializer to convert)")


def _hook_rewrite(hook: Callable[[dict, bytes], Any], serializer: Serializer, old: dict) -> Rewrite:
    serialize = serializer.serialize

    def rewrite(data: bytes) -> bytes:
        return serialize(hook(dict(old), data))

    return rewrite


# ------------------------------------------------------------------------------ type rules
def _judge_types(old_type: str, new_type: str) -> Verdict:
    try:
        old_parsed = parse_type_string(old_type)
    except TypeError:
        return Verdict(INCOMPATIBLE, f"the recorded type {old_type!r} is unknown to this release "
                                     "(was the state written by a newer one?)")
    try:
        convert = _compare(old_parsed, parse_type_string(new_type), "")
    except _Refused as refused:
        return Verdict(INCOMPATIBLE, str(refused))
    if convert is None:
        return _AS_IS
    old_codec, new_codec = codec_for_type_string(old_type), codec_for_type_string(new_type)
    decode, encode = old_codec.deserialize, new_codec.serialize

    def rewrite(data: bytes) -> bytes:
        return encode(convert(decode(data)))

    return Verdict(MIGRATE, rewrite=rewrite)


Convert = Callable[[Any], Any]


def _compare(old: Any, new: Any, path: str) -> Optional[Convert]:
    """How to turn a non-null value of canonical type ``old`` into ``new``: ``None`` when
    the bytes are the same, else a function; raises :class:`_Refused` with the reason."""
    from pyspark.sql import types as T

    where = f" (at field {path})" if path else ""
    if isinstance(old, T.StructType) and isinstance(new, T.StructType):
        return _compare_structs(old, new, path)
    if isinstance(old, T.ArrayType) and isinstance(new, T.ArrayType):
        element = _compare(old.elementType, new.elementType, path + "[]" if path else "element")
        return None if element is None else _each(element)
    if isinstance(old, T.MapType) and isinstance(new, T.MapType):
        try:
            same_keys = _compare(old.keyType, new.keyType, path) is None
        except _Refused:
            same_keys = False
        if not same_keys:
            raise _Refused(f"map keys changed from {_name(old.keyType)} to {_name(new.keyType)}{where}; "
                           "two old keys could become one, so keys are never migrated")
        value = _compare(old.valueType, new.valueType, path + "{}" if path else "map value")
        return None if value is None else _each_value(value)
    if type(old) is type(new):
        return None  # canonical simple types: one codec per class (decimal is text at any precision)
    if isinstance(old, T.LongType) and isinstance(new, T.DoubleType):
        return float
    if isinstance(old, T.LongType) and isinstance(new, T.DecimalType):
        return decimal.Decimal
    o, n = _name(old), _name(new)
    if isinstance(old, T.DoubleType) and isinstance(new, T.LongType):
        raise _Refused(f"{o} values cannot be narrowed to {n}{where}: fractions would be lost")
    if isinstance(old, T.DoubleType) and isinstance(new, T.DecimalType):
        raise _Refused(f"{o} values are not migrated to {n}{where}: NaN and infinities have no decimal "
                       "value, and which decimal a binary fraction stands for is yours to decide")
    raise _Refused(f"{o} values cannot be read as {n}{where}")


def _name(t: Any) -> str:
    return t.simpleString()


def _compare_structs(old: Any, new: Any, path: str) -> Optional[Convert]:
    old_index = {f.name: i for i, f in enumerate(old.fields)}
    plan: list[tuple[Optional[int], Optional[Convert]]] = []
    for field in new.fields:
        sub = f"{path}.{field.name}" if path else field.name
        i = old_index.get(field.name)
        if i is None:
            if not field.nullable:
                raise _Refused(f"field {sub} is new and NOT NULL, and the stored values have no value "
                               "for it (declare it nullable: it is then null in the stored values)")
            plan.append((None, None))
        else:
            plan.append((i, _compare(old.fields[i].dataType, field.dataType, sub)))
    if [i for i, _ in plan] == list(range(len(old.fields))) and all(c is None for _, c in plan):
        return None

    def convert(row: Any) -> tuple:
        values = tuple(row)
        out = []
        for i, conv in plan:
            v = None if i is None else values[i]
            out.append(v if v is None or conv is None else conv(v))
        return tuple(out)

    return convert


def _each(convert: Convert) -> Convert:
    return lambda items: [None if x is None else convert(x) for x in items]


def _each_value(convert: Convert) -> Convert:
    return lambda entries: {k: (None if v is None else convert(v)) for k, v in entries.items()}
