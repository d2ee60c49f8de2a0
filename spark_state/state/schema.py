"""The schema record of a state: what its stored bytes are, kept next to them. Pure codec.

Flink writes each state's serializer snapshot (``TypeSerializerSnapshot``) into the
checkpoint and checks it against the new descriptor at restore. spark-state keeps the same
information *in the store*, in the engine's system keyspace, so the record is versioned,
exactly-once and restored together with the state it describes (a failed task writes
neither), and it moves with the state on rescale.

**Keys** (``0xFF`` system keyspace; built by :mod:`spark_state.keys.system`)::

    [0xFF][0x03][len(name) : uint8][name, UTF-8]    keyed state ``name``
    [0xFF][0x04][len(name) : uint8][name, UTF-8]    operator state ``name`` (any mode)

An operator state's record is keyed by its name alone, not by (mode, name): a name has
one mode at a time, and a changed mode is then found in the record (and refused).

**Value**: compact JSON, keys sorted, UTF-8::

    {"format": 1,
     "kind":  "value" | "list" | "map" | "reducing" | "aggregating"     (keyed)
              "list" | "union" | "broadcast"                            (operator),
     "value": <snapshot>,
     "key":   <snapshot>            map and broadcast state only,
     "ttl":   {"ttl_ms": <int>} | null}

    <snapshot> = {"codec": "spark", "type": <canonical type>, "declared": <as declared>}
               | {"codec": "pickle", "declared": "pickle"}
               | {"codec": "custom", "class": "<module>.<qualname>", "version": <int|str|null>,
                  "declared": ...}

``type`` is the serializer's canonical type (:mod:`.serializers`): types that share bytes
share it (``int`` and ``bigint`` are both ``bigint``), so it decides compatibility;
``declared`` is only for messages. The TTL is recorded for inspection and messages; a TTL
change needs no verdict (the stamp layout has its own marker, see :mod:`spark_state.ttl.kv`).

Invariant: a state registered by this release has exactly one record, written in the same
epoch as the first entries it describes, and rewritten in the same epoch as a migration
rewrites them. States written by earlier releases have none until they are registered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ..constants import SCHEMA_RECORD_FORMAT
from .errors import StateSchemaRecordError
from .serializers import serializer_snapshot

if TYPE_CHECKING:
    from .descriptors import StateDescriptor

#: Keyed kinds that store one value at the key's base entry: they read each other's bytes.
SINGLE_VALUE_KINDS = frozenset({"value", "reducing", "aggregating"})


@dataclass(frozen=True)
class StateSchema:
    """One state's record: its kind, serializer snapshots and TTL."""

    kind: str
    value: dict
    key: Optional[dict] = None
    ttl_ms: Optional[int] = None

    # ------------------------------------------------------------------ codec
    def encode(self) -> bytes:
        doc: dict[str, Any] = {"format": SCHEMA_RECORD_FORMAT, "kind": self.kind, "value": self.value,
                               "ttl": None if self.ttl_ms is None else {"ttl_ms": self.ttl_ms}}
        if self.key is not None:
            doc["key"] = self.key
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, raw: bytes, state: str) -> "StateSchema":
        """Parse a stored record; ``state`` names it in errors."""
        try:
            doc = json.loads(raw.decode("utf-8"))
            fmt = doc.get("format")
        except (ValueError, AttributeError) as exc:
            raise StateSchemaRecordError(
                f"the schema record of state {state!r} is not valid JSON ({exc}): the store is corrupt") from None
        if fmt != SCHEMA_RECORD_FORMAT:
            raise StateSchemaRecordError(
                f"the schema record of state {state!r} has format {fmt!r}; this release reads format "
                f"{SCHEMA_RECORD_FORMAT}. Run the release that wrote it, or start from a new state location")
        try:
            ttl = doc.get("ttl")
            return cls(kind=str(doc["kind"]), value=dict(doc["value"]),
                       key=dict(doc["key"]) if doc.get("key") is not None else None,
                       ttl_ms=int(ttl["ttl_ms"]) if ttl else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateSchemaRecordError(
                f"the schema record of state {state!r} lacks or mangles {exc}: the store is corrupt") from None

    # ------------------------------------------------------------------ display
    def describe(self) -> str:
        """``value state of bigint``, ``map state of string -> double`` (declared types
        in parentheses when they differ)."""
        what = describe_snapshot(self.value)
        if self.key is not None:
            what = f"{describe_snapshot(self.key)} -> {what}"
        kind = {"union": "union list", "list": "list"}.get(self.kind, self.kind)
        return f"{kind} state of {what}"


def describe_snapshot(snapshot: dict) -> str:
    """A serializer snapshot for messages."""
    codec = snapshot.get("codec")
    if codec == "spark":
        text = str(snapshot.get("type"))
        declared = snapshot.get("declared")
        return text if not declared or declared == text else f"{text} (declared {declared})"
    if codec == "pickle":
        return "pickled objects (PickleSerializer)"
    version = snapshot.get("version")
    return f"custom serializer {snapshot.get('class')}" + ("" if version is None else f" version {version}")


def without_display(snapshot: Optional[dict]) -> Optional[dict]:
    """A snapshot without its display-only fields (what compatibility compares)."""
    if snapshot is None:
        return None
    return {k: v for k, v in snapshot.items() if k != "declared"}


def snapshot_of(serializer: Any, declared: Optional[str]) -> dict:
    snap = serializer_snapshot(serializer)
    if declared:
        snap["declared"] = declared
    return snap


def schema_of(descriptor: "StateDescriptor", kind: Optional[str] = None) -> StateSchema:
    """The record ``descriptor`` would write; ``kind`` defaults to the descriptor's
    (operator state passes its mode: ``list``, ``union``, ``broadcast``)."""
    key_serializer = getattr(descriptor, "key_serializer", None)
    return StateSchema(
        kind=kind or descriptor.kind,
        value=snapshot_of(descriptor.serializer, getattr(descriptor, "declared_type", None)),
        key=None if key_serializer is None else snapshot_of(key_serializer,
                                                            getattr(descriptor, "declared_key_type", None)),
        ttl_ms=descriptor.ttl.ttl_ms if descriptor.ttl is not None else None,
    )
