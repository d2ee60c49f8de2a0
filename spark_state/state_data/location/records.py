"""What one loaded partition store records about its keyed states: their schema records (in the
store's system keyspace, :mod:`spark_state.state.schema`) and their TTL format markers; and the
search for one state's record over a function's partition stores.

A partition store records the states its keys have held; a partition none of whose keys ever
had a state has no record of it, so a state's record is searched in one store after another
(:func:`find_state_record`), stopping at the first that has it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Callable, Iterable, Iterator, Mapping, Optional

from ...engine.store import VersionedStore
from ...keys import system as syskeys
from ...state.schema import StateSchema
from ...ttl.kv import is_stamped
from ..codecs import StateCodec
from ..errors import UnknownStateError


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


def each_store_records(open_store: Callable[[int], AbstractContextManager[VersionedStore]],
                       partitions: int) -> Iterator[dict[str, StateSchema]]:
    """The keyed states' records of partition stores ``0..partitions-1``, one store at a time
    (``open_store(i)`` loads partition ``i``'s store; it is closed before the next is loaded)."""
    for partition in range(partitions):
        with open_store(partition) as store:
            records = keyed_records(store)
        yield records


def find_state_record(records: Iterable[Mapping[str, StateSchema]], state: str, function: str) -> StateSchema:
    """``state``'s schema record from the first of the partition stores' ``records`` that has
    one (lazily: the stores after it are not read).

    :raises UnknownStateError: no store records it (the message lists the states they record)."""
    return find_state_records(records, (state,), function)[state]


def find_state_records(records: Iterable[Mapping[str, StateSchema]], states: Iterable[str],
                       function: str) -> dict[str, StateSchema]:
    """The schema record of each of ``states``, each from the first of the partition stores'
    ``records`` that has one (lazily: the stores after the one that completes the set are not read).

    :raises UnknownStateError: no store records one of them (the message lists the states they record)."""
    wanted = list(dict.fromkeys(states))
    out: dict[str, StateSchema] = {}
    seen: set[str] = set()
    for found in records:
        out.update((name, found[name]) for name in wanted if name not in out and name in found)
        seen.update(found)
        if len(out) == len(wanted):
            return out
    missing = [name for name in wanted if name not in out]
    what = f"keyed state {missing[0]!r}" if len(missing) == 1 else f"keyed states {', '.join(map(repr, missing))}"
    raise UnknownStateError(
        f"function {function!r} has no {what} (states: {', '.join(sorted(seen)) or 'none yet'})")
