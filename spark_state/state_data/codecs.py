"""One keyed state's stored entries -> Python values, from the state's schema record. No I/O.

What a keyed state stores under one key (layout: :mod:`spark_state.keys.keyed`), and what
:meth:`StateCodec.value_of` makes of those entries:

========================= ============================================ ===========================
kind                      entries under ``[kg][name][key]``            value
========================= ============================================ ===========================
value, reducing,          one, at the base key                         the value
aggregating
list                      the counter at the base key; one element at  the elements, oldest first
                          ``base + seq`` (uint64 BE), in seq order
map                       one entry at ``base + map key bytes``        a dict
========================= ============================================ ===========================

A state whose TTL format marker is present stores every value stamped (``[last access ms :
int64][value]``, :mod:`spark_state.ttl.codec`); an entry whose stamp plus the recorded TTL is at
or before ``now_ms`` has expired and is left out, as the function would not see it.

Values are decoded by the serializer the record names: built-in codecs by their canonical
type; a custom serializer by importing its class (``<module>.<qualname>``, built without
arguments); pickled values only with ``allow_pickle`` (unpickling runs whatever the bytes say).
"""

from __future__ import annotations

import importlib
from typing import Any, Iterable, Optional

from ..state.schema import StateSchema
from ..state.serializers import PickleSerializer, Serializer, codec_for_type_string
from ..ttl.codec import is_expired, unstamp
from .errors import UnreadableStateError

#: Kinds that keep one value at the base key.
SINGLE_VALUE_KINDS = ("value", "reducing", "aggregating")


def serializer_of(snapshot: dict, state: str, allow_pickle: bool) -> Serializer:
    """The serializer a schema record's snapshot names (see the module docstring)."""
    codec = snapshot.get("codec")
    if codec == "spark":
        return codec_for_type_string(str(snapshot["type"]))
    if codec == "pickle":
        if not allow_pickle:
            raise UnreadableStateError(
                f"state {state!r} holds pickled values, and unpickling runs whatever the stored bytes say: "
                "read it only from storage you trust, with allow_pickle=True (command line: --allow-pickle)")
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the caller opted in
            return PickleSerializer()
    if codec == "custom":
        path = str(snapshot.get("class"))
        module, _, qualname = path.rpartition(".")
        try:
            target: Any = importlib.import_module(module)
            for part in qualname.split("."):
                target = getattr(target, part)
            return target()
        except Exception as exc:
            raise UnreadableStateError(
                f"state {state!r} was written by the custom serializer {path}, which cannot be imported and "
                f"built without arguments here ({type(exc).__name__}: {exc}); put its module on the path") from None
    raise UnreadableStateError(f"state {state!r} has a schema record of unknown codec {codec!r}")


class StateCodec:
    """Decodes one keyed state's entries under one key (see the module docstring)."""

    def __init__(self, state: str, record: StateSchema, stamped: bool, allow_pickle: bool = False) -> None:
        self.state = state
        self.record = record
        self.stamped = stamped
        self._value = serializer_of(record.value, state, allow_pickle)
        self._map_key = serializer_of(record.key, state, allow_pickle) if record.key is not None else None

    @property
    def kind(self) -> str:
        return self.record.kind

    def _live(self, raw: bytes, now_ms: int) -> Optional[bytes]:
        """The user bytes of a stored value, None if it has expired."""
        if not self.stamped:
            return raw
        access_ms, user = unstamp(raw)
        if self.record.ttl_ms is not None and is_expired(access_ms, self.record.ttl_ms, now_ms):
            return None
        return user

    def value_of(self, base_len: int, entries: Iterable[tuple[bytes, bytes]], now_ms: int) -> tuple[bool, Any]:
        """``(found, value)`` from the entries under one base key (of ``base_len`` bytes), in key order.

        Not found is always ``(False, None)``: a list or map state without a live element (a
        list's counter alone, or every element expired) is not found, as the function sees no
        value there (its ``get()`` gives an empty list or map, never a stored empty one)."""
        kind = self.record.kind
        if kind in SINGLE_VALUE_KINDS:
            for key, raw in entries:
                if len(key) == base_len:
                    user = self._live(raw, now_ms)
                    return (False, None) if user is None else (True, self._value.deserialize(user))
            return False, None
        if kind == "list":
            elements = [self._live(raw, now_ms) for key, raw in entries if len(key) > base_len]
            values = [self._value.deserialize(e) for e in elements if e is not None]
            return (True, values) if values else (False, None)
        if kind == "map":
            assert self._map_key is not None
            out = {}
            for key, raw in entries:
                user = self._live(raw, now_ms)
                if user is not None and len(key) > base_len:
                    out[self._map_key.deserialize(key[base_len:])] = self._value.deserialize(user)
            return (True, out) if out else (False, None)
        raise UnreadableStateError(f"state {self.state!r} is of kind {kind!r}, which this release cannot read")
