"""Moving keyed state between partitions by key group (rescaling).

Keyed state of a key group is one contiguous key range (see :mod:`spark_state.keys.keyed`), so a new
partition owning key groups ``first..last`` takes exactly that range from each old store
whose range overlaps. Timers (:mod:`.timers`) are entries of that range too (a reserved state
name inside each key group), so they move with their key group with no extra step. TTL index entries live
in the system keyspace and name their data key, which starts with its key group, so they are filtered the
same way; format markers are per state and copied as they are. Schema records (:mod:`.schema`) are per state too
and move with the state: every source must hold the state in the same layout, or the copy
fails with :class:`~.errors.StateSchemaConflictError` rather than mix layouts under one
record (see :func:`~.evolution.merge_schema_records`).
"""

from __future__ import annotations

from ..keys import keyed as K
from ..keys.system import KEYED_SCHEMA_TAG, TTL_INDEX_TAG, TTL_MARKER_TAG, data_key_of_index_key, tag_range
from ..engine.store import VersionedStore
from .evolution import merge_schema_records

_INDEX_RANGE = tag_range(TTL_INDEX_TAG)
_MARKER_RANGE = tag_range(TTL_MARKER_TAG)


def copy_key_groups(source: VersionedStore, target: VersionedStore, first: int, last: int) -> int:
    """Stage into ``target`` every entry of key groups ``first..last`` (inclusive) held by
    ``source``, with their TTL index entries, the format markers and the schema records.
    Both stores must be loaded; nothing is committed. Returns the number of data entries
    copied.

    :raises StateSchemaConflictError: ``target`` already holds a state (copied from another
        source) whose schema record differs in layout from ``source``'s.
    """
    if first > last:
        return 0
    merge_schema_records(source, target, KEYED_SCHEMA_TAG)
    start, end = K.key_group_range(first, last)
    keys: list[bytes] = []
    values: list[bytes] = []
    for key, value in source.iterate(start, end):
        keys.append(key)
        values.append(value)
    copied = len(keys)
    for key, value in source.iterate(*_INDEX_RANGE):
        if first <= K.key_group_of(data_key_of_index_key(key)) <= last:
            keys.append(key)
            values.append(value)
    for key, value in source.iterate(*_MARKER_RANGE):
        keys.append(key)
        values.append(value)
    target.put_many(keys, values)
    return copied
