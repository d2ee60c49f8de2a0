"""Staging one epoch of the JVM's writes, with or without TTL, before the store commits.

The provider keeps one TTL namespace per store, ``b""`` (layouts in
:mod:`spark_state.ttl.codec`): with TTL a value is stored as
``[last_access_ms int64 BE][UnsafeRow bytes]`` and has one expiry index entry in the system
keyspace; without TTL it is the bare UnsafeRow. The JVM always ships bare UnsafeRows; this
module stamps them, all with the one ``now`` of the batch (taken when the batch loaded its
version, so visibility in the JVM and cleanup here agree).

Order of one commit with TTL:

1. If the configured layout differs from the stored one (TTL turned on or off since the
   state was written), migrate: stamp every row with ``now`` and build the index, or strip
   the stamps and drop the index (:func:`spark_state.ttl.migrate_layout`).
2. Collect expired rows from the *committed* index (nothing staged yet, so the scan reads
   RocksDB directly): at most ``cleanupSize`` entries of index buckets that have wholly
   expired; plus those background cleanup collected between batches for this version.
   (The index is bucketed by a sixteenth of the TTL, so the incremental sweep removes a
   row at most ``ttl / 16`` after it expired; reads never see it meanwhile.)
3. Stage the JVM's writes stamped with ``now`` (``TtlKeyValue.stage_raw_changes``); its
   prior stamps spare lookups of the old index entries. TOUCH rows (``OnReadAndWrite``
   reads) are rewrites of the value read.
4. Expire the candidates that are still expired and not rewritten in step 3. When
   full-snapshot cleanup is on and this commit takes a snapshot, every expired row instead of
   the ``cleanupSize`` ones: the committed index is read in chunks while they are expired
   (``TtlKeyValue.expire_all``; staging does not change the loaded version), so memory holds one
   chunk, not the state's expired rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .. import constants as C
from ..engine.epoch_writes import ArrowWrites
from ..keys.system import SYSTEM_PREFIX
from ..engine.store import VersionedStore
from ..ttl import TtlKeyValue, is_stamped, migrate_layout
from ..ttl.kv import KeySink
from .ttl_policy import StoreTtl

_LOG = logging.getLogger(__name__)

#: The provider's one TTL namespace per store.
NAMESPACE = b""
#: Changes-file op of an ``OnReadAndWrite`` read: rewrite the value read with a new stamp.
OP_TOUCH = 2
#: Changes-file prior stamp of a key known to be absent from committed state.
PRIOR_STAMP_ABSENT = -2
#: Collect at most this many expired rows per background pass when incremental cleanup is off.
BACKGROUND_LIMIT = 100_000


@dataclass
class Changes:
    """An epoch's writes as the JVM shipped them (see ``protocol``)."""

    keys: list[bytes]
    #: new value, None for deletes; for touches the value that was read (without stamp)
    values: list[Optional[bytes]]
    #: 1 / 0: the key existed / did not exist before the epoch; -1 unknown
    existed: list[int]
    #: stamp of the committed value the JVM read; -1 unknown, -2 absent
    prior_stamps: list[int]
    #: indexes of TOUCH rows
    touches: list[int] = field(default_factory=list)

    def without_touches(self) -> "Changes":
        if not self.touches:
            return self
        drop = set(self.touches)
        keep = [i for i in range(len(self.keys)) if i not in drop]
        return Changes([self.keys[i] for i in keep], [self.values[i] for i in keep],
                       [self.existed[i] for i in keep], [self.prior_stamps[i] for i in keep])


def read_changes_table(path: str) -> pa.Table:
    """The changes file the shim wrote (schema in ``protocol``), as one Arrow table."""
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()


def _values_as_shipped(table: pa.Table) -> pa.ChunkedArray:
    """The new values, null for deletes: the ``value`` column itself, which the shim writes so (a copy
    of every value is made only if a file breaks that rule)."""
    values = table.column("value")
    deletes = pc.equal(table.column("op"), C.OP_DELETE)
    if (pc.sum(deletes).as_py() or 0) == values.null_count and \
            not pc.any(pc.and_kleene(pc.is_null(values), pc.invert(deletes))).as_py():
        return values
    return _values(table)


def _values(table: pa.Table) -> pa.ChunkedArray:
    """The new values, null for deletes."""
    return pc.if_else(pc.equal(table.column("op"), C.OP_DELETE), pa.scalar(None, pa.binary()), table.column("value"))


def _chunks(table: pa.Table) -> Iterator[Changes]:
    """The changes table a record batch at a time, as Python lists (for staging in the overlay)."""
    for batch in table.to_batches(max_chunksize=C.ARROW_BATCH_ROWS):
        yield changes_of(pa.Table.from_batches([batch]))


def changes_of(table: pa.Table) -> Changes:
    """The changes table as Python lists (for staging in the store's overlay)."""
    op = table.column("op")
    n = table.num_rows
    if "prior_stamp" in table.column_names:
        prior_stamps = table.column("prior_stamp").to_pylist()
    else:
        prior_stamps = [-1] * n
    touches: list[int] = []
    if n and pc.any(pc.equal(op, OP_TOUCH)).as_py():
        touches = pc.indices_nonzero(pc.equal(op, OP_TOUCH)).to_pylist()
    return Changes(table.column("key").to_pylist(), _values(table).to_pylist(), table.column("prior").to_pylist(),
                   prior_stamps, touches)


@dataclass
class EpochTtl:
    """What TTL did in one commit."""

    #: rows removed because they expired
    expired: int = 0
    #: rows rewritten by a layout migration (TTL turned on or off)
    migrated: int = 0
    #: the stored layout changed in this commit (TTL turned on or off): values are (un)stamped now
    layout_changed: bool = False


def stage_epoch(store: VersionedStore, ttl: StoreTtl, table: pa.Table, now: int,
                background: Optional[Sequence[tuple[bytes, int]]] = None, where: str = "",
                expired_keys: Optional[KeySink] = None) -> EpochTtl:
    """Stage the changes ``table`` in ``store`` (loaded, nothing staged yet) with ``ttl``'s layout,
    one record batch at a time (the store's overlay spills to local disk past its share of memory);
    ``where`` names the store in logs. The data keys expiry removes are appended to
    ``expired_keys`` if given (the file of keys the JVM's views apply, or a list)."""
    result = EpochTtl()
    stamped = is_stamped(store, NAMESPACE)
    if stamped != ttl.enabled:
        result.layout_changed = True
        result.migrated = migrate_layout(
            store, NAMESPACE, ttl.enabled, lambda start: store.iterate_committed(start, SYSTEM_PREFIX), now,
            ttl.config.ttl_ms if ttl.config is not None else None)
        if result.migrated or store.version > 0:
            _LOG.info("TTL turned %s for %s at version %d: %d rows %s",
                      "on" if ttl.enabled else "off", where or "a store", store.version, result.migrated,
                      "stamped with the current time (their TTL starts now)" if ttl.enabled
                      else "unstamped, expiry index dropped")
    if not ttl.enabled:
        for changes in _chunks(table):
            plain = changes.without_touches()
            store.stage_changes(plain.keys, plain.values, plain.existed)
        return result
    assert ttl.config is not None
    kv = TtlKeyValue(store, NAMESPACE, ttl.config)
    candidates: dict[tuple[bytes, int], None] = {}  # (data key, index bucket), in order, once each
    # Freshly migrated rows all carry `now`: nothing can be expired.
    expire_all = stamped and ttl.config.cleanup_full_snapshot and store.commit_takes_snapshot()
    if stamped:
        if ttl.config.cleanup_size and not expire_all:
            candidates.update(dict.fromkeys(kv.collect_expired(now, ttl.config.cleanup_size)))
        if background:
            candidates.update(dict.fromkeys(background))
    for changes in _chunks(table):
        priors = [PRIOR_STAMP_ABSENT if e == 0 else s for e, s in zip(changes.existed, changes.prior_stamps)]
        kv.stage_raw_changes(changes.keys, changes.values, priors, now)
    if expire_all:
        # Every staged write carries `now` and cannot have expired: the committed index is enough.
        result.expired += kv.expire_all(now, expired_keys, pending=False)
    if candidates:
        result.expired += kv.expire(candidates, now, expired_keys)
    return result


def commit_epoch(store: VersionedStore, ttl: StoreTtl, table: pa.Table, now: int,
                 background: Optional[Sequence[tuple[bytes, int]]] = None, where: str = "",
                 expired_keys: Optional[KeySink] = None) -> EpochTtl:
    """Commit the epoch of the changes ``table`` on top of the version ``store`` has loaded
    (nothing staged yet), with ``ttl``'s layout; arguments as for :func:`stage_epoch`.

    Without TTL, and with unstamped state (no layout to migrate), the table is committed whole
    as Arrow columns (:class:`~spark_state.engine.epoch_writes.ArrowWrites`); otherwise its rows are
    staged one by one (:func:`stage_epoch`)."""
    if not ttl.enabled and not is_stamped(store, NAMESPACE):
        op = table.column("op")
        if not table.num_rows or not pc.any(pc.equal(op, OP_TOUCH)).as_py():
            writes = ArrowWrites.of(table.column("key"), _values_as_shipped(table), table.column("prior"))
            if writes is not None:
                store.commit_writes(writes)
                return EpochTtl()
    epoch = stage_epoch(store, ttl, table, now, background, where, expired_keys)
    store.commit()
    return epoch


def collect_background(store: VersionedStore, ttl: StoreTtl) -> list[tuple[bytes, int]]:
    """Expired rows of the loaded, committed version, for the next commit to remove
    (background cleanup; the caller holds the store's lock and nothing is staged)."""
    if ttl.config is None or not ttl.config.cleanup_in_background or not is_stamped(store, NAMESPACE):
        return []
    now = ttl.now_ms(store.version)
    limit = ttl.config.cleanup_size or BACKGROUND_LIMIT
    return TtlKeyValue(store, NAMESPACE, ttl.config).collect_expired(now, limit)
