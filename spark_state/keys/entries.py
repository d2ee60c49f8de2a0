"""Which keyed state, and which key, owns an entry of a keyed function's store. Pure functions,
no I/O: the one answer for the tools that drop a state's entries (a savepoint transform
replacing a state) or a key's entries (erasure).

Layouts recognized (all integers big-endian; the full layouts are in the modules named)::

    [kg u16][len u8][name][len u32][key][suffix]        keyed state entry         -> STATE: name, key   (keyed.py)
    [kg u16][0x02 0xFF 'T'][domain u8][ts u64][key]      timer                     -> TIMERS: key        (timers.py)
    [0xFF][0x01][len u8][ns][bucket u64][data key]      TTL index entry           -> TTL_INDEX: ns, and the
                                                                                     data key's key when it
                                                                                     is a keyed state entry
    [0xFF][0x02][len u8][ns]                            TTL format marker         -> TTL_MARKER: ns     (system.py)
    [0xFF][0x03][len u8][name]                          keyed state schema record -> SCHEMA_RECORD: name
    [0xFE]..., [0xFF][0x04]...                          operator state, its       -> OTHER
                                                        schema records

The TTL namespace of a keyed state is its name, so a state's entries are its data entries,
its schema record, its TTL marker and its TTL index entries (:func:`is_entry_of_state`).
Timers are not a state's: their "name" (:data:`~.timers.TIMER_STATE_NAME`) is reported as
the owner's ``state`` only so that a key's timers are found by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import keyed as K
from . import system as S
from . import timers as TK
from .keygroup_prefix import KEY_GROUP_KEYSPACE_END

__all__ = ["STATE", "TIMERS", "TTL_INDEX", "TTL_MARKER", "SCHEMA_RECORD", "OTHER", "EntryOwner", "owner_of",
           "is_entry_of_state"]

#: EntryOwner.kind values
STATE, TIMERS, TTL_INDEX, TTL_MARKER, SCHEMA_RECORD, OTHER = (
    "state", "timers", "ttl index", "ttl marker", "schema record", "other")


@dataclass(frozen=True)
class EntryOwner:
    """What an entry is and whom it belongs to (see the module docstring)."""

    kind: str
    #: the keyed state's name (UTF-8 bytes; a TTL entry's namespace; timers: TIMER_STATE_NAME), None for OTHER
    state: Optional[bytes]
    #: the serialized key the entry belongs to; None for entries no key owns (markers, records, other)
    key: Optional[bytes]


_OTHER = EntryOwner(OTHER, None, None)


def _data_owner(entry: bytes) -> EntryOwner:
    """The owner of an entry of the key-group keyspace: a keyed state's entry or a timer."""
    if K.state_name_of(entry) == TK.TIMER_STATE_NAME:
        return EntryOwner(TIMERS, TK.TIMER_STATE_NAME, TK.split_timer_key(entry)[3])
    _, name, key, _ = K.split_entry(entry)
    return EntryOwner(STATE, name, key)


def owner_of(entry: bytes) -> EntryOwner:
    """The owner of ``entry``, a key of a keyed function's store (see the module docstring)."""
    if entry[:1] < KEY_GROUP_KEYSPACE_END:
        return _data_owner(entry)
    if entry[:1] != S.SYSTEM_PREFIX:  # operator state of keyed functions (0xFE)
        return _OTHER
    tag = entry[1:2]
    if tag == S.TTL_INDEX_TAG:
        data_key = S.data_key_of_index_key(entry)
        owner = _data_owner(data_key) if data_key[:1] < KEY_GROUP_KEYSPACE_END else None
        key = owner.key if owner is not None and owner.kind == STATE else None
        return EntryOwner(TTL_INDEX, S.name_of_named_key(entry), key)
    if tag == S.TTL_MARKER_TAG:
        return EntryOwner(TTL_MARKER, S.name_of_named_key(entry), None)
    if tag == S.KEYED_SCHEMA_TAG:
        return EntryOwner(SCHEMA_RECORD, S.name_of_named_key(entry), None)
    return _OTHER


def is_entry_of_state(entry: bytes, name: bytes) -> bool:
    """Whether ``entry`` belongs to keyed state ``name`` (UTF-8): its data entries, its schema
    record, its TTL marker and its TTL index entries. The same answer as ``owner_of(entry).state
    == name`` for every owner but OTHER, without splitting data entries (a transform asks it of
    every entry of a savepoint)."""
    if entry[:1] < KEY_GROUP_KEYSPACE_END:
        return K.state_name_of(entry) == name
    if entry[:1] == S.SYSTEM_PREFIX and entry[1:2] in _NAMED_TAGS:
        return S.name_of_named_key(entry) == name
    return False


_NAMED_TAGS = (S.TTL_INDEX_TAG, S.TTL_MARKER_TAG, S.KEYED_SCHEMA_TAG)
