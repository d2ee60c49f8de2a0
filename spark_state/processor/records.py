"""What one loaded partition store records about its keyed states: their schema records (in the
store's system keyspace, :mod:`spark_state.state.schema`) and their TTL format markers.

A partition store records the states its keys have held; a partition none of whose keys ever
had a state has no record of it.
"""

from __future__ import annotations

from typing import Optional

from ..engine.store import VersionedStore
from ..keys import system as syskeys
from ..state.schema import StateSchema
from ..ttl.kv import is_stamped
from .codecs import StateCodec


def keyed_records(store: VersionedStore) -> dict[str, StateSchema]:
    """Every keyed state's schema record in ``store``, by state name."""
    out = {}
    for key, raw in store.iterate(*syskeys.record_range(syskeys.KEYED_SCHEMA_TAG)):
        name = syskeys.name_of_record_key(key).decode("utf-8", "replace")
        out[name] = StateSchema.decode(raw, name)
    return out


def keyed_record(store: VersionedStore, state: str) -> Optional[StateSchema]:
    """``state``'s schema record in ``store``, None if the store has none."""
    raw = store.get(syskeys.keyed_record_key(state.encode("utf-8")))
    return None if raw is None else StateSchema.decode(raw, state)


def state_codec(store: VersionedStore, state: str, allow_pickle: bool) -> Optional[StateCodec]:
    """The codec of ``state``'s entries in ``store`` (its record and TTL layout), None if the
    store has no record of it."""
    record = keyed_record(store, state)
    if record is None:
        return None
    return StateCodec(state, record, is_stamped(store, state.encode("utf-8")), allow_pickle)
