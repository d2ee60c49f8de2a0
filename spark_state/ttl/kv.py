"""TTL as a decorator over a :class:`~spark_state.engine.store.VersionedStore` (Flink's
``AbstractTtlDecorator``): stamped values, the expiry index, cleanup on read and sweeps.

A :class:`TtlKeyValue` owns one *namespace*: a set of data keys whose values are stamped
(value layout in :mod:`spark_state.ttl.codec`, index and marker keys in
:mod:`spark_state.keys.system`). It never touches keys outside its namespace,
so several namespaces with different TTLs share one store. Every method stages writes in
the store's pending epoch; nothing is durable before the store commits, so TTL cleanup is
versioned and exactly-once like any other write.

Invariant (see :mod:`.codec`): each stamped data entry has an index entry in a time
bucket starting at or before its stamp. A write into the same bucket touches no index
entry; a write into a later bucket moves it when the old stamp is known. Stale index
entries are tolerated: sweeps check every candidate's stamp.

"now" is read from the config's clock at each call unless given explicitly; callers that
want one time per epoch (the Spark provider) pass it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Protocol, Sequence, TypeVar

from ..arrow_chunks import chunks, resumable_chunks
from ..engine.store import VersionedStore, prefix_upper_bound
from ..keys import system as syskeys
from . import codec
from .config import TtlConfig

#: Unknown prior stamp in :meth:`TtlKeyValue.stage_raw_changes`.
PRIOR_UNKNOWN = -1
#: Known: the key does not exist in committed state.
PRIOR_ABSENT = -2
#: Index entries :meth:`TtlKeyValue.expire_all` checks at a time, and entries :func:`migrate_layout`
#: rewrites at a time: what these passes over a whole namespace hold in memory.
CHUNK_ROWS = 65_536
#: A stored value, or what a pass over stored entries holds in its place.
V = TypeVar("V")


class KeySink(Protocol):
    """Where :meth:`TtlKeyValue.expire` puts the keys it removed: a list, or a sink that writes
    them out as they come (the provider's file for the JVM, ``provider.views.ExpiredKeys``)."""

    def append(self, key: bytes) -> None: ...


@dataclass
class TtlStats:
    """Expirations since the owner last reset the counters."""

    expired_on_read: int = 0
    expired_by_sweep: int = 0

    @property
    def expired(self) -> int:
        return self.expired_on_read + self.expired_by_sweep

    def reset(self) -> None:
        self.expired_on_read = 0
        self.expired_by_sweep = 0


class TtlKeyValue:
    """Stamped key-value access to one namespace of a store.

    Args:
        store: the loaded store to read and stage writes in.
        namespace: names the index of these keys (at most 255 bytes; ``b""`` is fine when
            a store has a single TTL namespace, as in the Spark provider).
        config: an enabled TTL config.
        stats: counters to add expirations to (shared between namespaces if wanted).
    """

    def __init__(self, store: VersionedStore, namespace: bytes, config: TtlConfig,
                 stats: Optional[TtlStats] = None) -> None:
        if not config.enabled:
            raise ValueError("TtlKeyValue needs an enabled TtlConfig; use the store directly without TTL")
        self._store = store
        self._ns = namespace
        self._config = config
        self._ttl = config.ttl_ms
        self._granularity = codec.index_granularity(config.ttl_ms)
        self._index_prefix = syskeys.index_prefix(namespace)
        self.stats = stats if stats is not None else TtlStats()

    @property
    def config(self) -> TtlConfig:
        return self._config

    @property
    def namespace(self) -> bytes:
        return self._ns

    def now(self) -> int:
        return self._config.clock.now_ms()

    # ------------------------------------------------------------------ reads
    def get(self, key: bytes, now: Optional[int] = None) -> Optional[bytes]:
        """The user value of ``key`` honouring visibility, update type and cleanup on read."""
        raw = self._store.get(key)
        if raw is None:
            return None
        return self._on_read(key, raw, self.now() if now is None else now)

    def get_with_stamp(self, key: bytes) -> tuple[Optional[bytes], Optional[int]]:
        """``(raw stamped value, stamp)`` without any TTL semantics (for inspection)."""
        raw = self._store.get(key)
        return (raw, None) if raw is None else (raw, codec.stamp_of(raw))

    def scan(self, start: Optional[bytes], end: Optional[bytes],
             now: Optional[int] = None) -> Iterator[tuple[bytes, bytes]]:
        """Live ``(key, user value)`` entries with ``start <= key < end``, ascending.

        Expired entries are skipped (or returned, under ``RETURN_EXPIRED_IF_NOT_CLEANED_UP``)
        and removed; refreshes under ``ON_READ_AND_WRITE`` are staged after the scan, since
        a store must not be written while it is iterated.
        """
        now = self.now() if now is None else now
        rows = list(self._store.iterate(start, end))
        for key, raw in rows:
            value = self._on_read(key, raw, now)
            if value is not None:
                yield key, value

    def prefix_scan(self, prefix: bytes, now: Optional[int] = None) -> Iterator[tuple[bytes, bytes]]:
        return self.scan(prefix or None, prefix_upper_bound(prefix), now)

    def _on_read(self, key: bytes, raw: bytes, now: int) -> Optional[bytes]:
        access, value = codec.unstamp(raw)
        if codec.is_expired(access, self._ttl, now):
            self._remove(key, access)
            self.stats.expired_on_read += 1
            return value if self._config.return_expired else None
        if self._config.refresh_on_read and access != now:
            self._write(key, access, value, now)
        return value

    # ------------------------------------------------------------------ writes
    def put(self, key: bytes, value: bytes, now: Optional[int] = None) -> None:
        """Write ``value``, stamped with ``now`` (create and write refresh under every update type)."""
        raw = self._store.get(key)
        self._write(key, None if raw is None else codec.stamp_of(raw), value, self.now() if now is None else now)

    def delete(self, key: bytes) -> None:
        raw = self._store.get(key)
        if raw is not None:
            self._remove(key, codec.stamp_of(raw))

    def _bucket(self, stamp: int) -> int:
        return codec.bucket_start(stamp, self._granularity)

    def _write(self, key: bytes, old_stamp: Optional[int], value: bytes, now: int) -> None:
        store = self._store
        bucket = self._bucket(now)
        old_bucket = None if old_stamp is None else self._bucket(old_stamp)
        if old_bucket != bucket:
            if old_bucket is not None:
                store.delete(syskeys.index_key(self._ns, old_bucket, key))
            store.put(syskeys.index_key(self._ns, bucket, key), b"")
        store.put(key, codec.stamp(value, now))

    def _remove(self, key: bytes, stamp: int) -> None:
        self._store.delete(syskeys.index_key(self._ns, self._bucket(stamp), key))
        self._store.delete(key)

    def stage_raw_changes(self, keys: Sequence[bytes], values: Sequence[Optional[bytes]],
                          prior_stamps: Optional[Sequence[int]], now: int) -> None:
        """Stage an epoch of unstamped writes (``None`` value: delete), stamping them with
        ``now``. ``prior_stamps[i]`` is the committed stamp of ``keys[i]`` if the caller
        knows it, ``PRIOR_ABSENT`` if it knows the key is absent, else ``PRIOR_UNKNOWN``;
        unknown ones are looked up in one batched read."""
        n = len(keys)
        priors = list(prior_stamps) if prior_stamps is not None else [PRIOR_UNKNOWN] * n
        unknown = [i for i, p in enumerate(priors) if p == PRIOR_UNKNOWN]
        if unknown:
            # Committed values only: the pending epoch is the batch being staged here.
            fetched = self._store.multi_get([keys[i] for i in unknown])
            for i, raw in zip(unknown, fetched):
                priors[i] = PRIOR_ABSENT if raw is None else codec.stamp_of(raw)
        ns = self._ns
        granularity = self._granularity
        index_prefix = self._index_prefix
        pack = syskeys.pack_bucket  # index_prefix + pack(bucket) + key is syskeys.index_key, inlined per row
        bucket = self._bucket(now)
        new_index_prefix = syskeys.index_key(ns, bucket, b"")
        stamp_bytes = codec.stamp(b"", now)
        # The common case -- a rewrite within the current bucket -- is a single stamped put.
        # Every prior is known by now, so the store's exact key count needs no lookups.
        out_keys: list[bytes] = []
        out_values: list[Optional[bytes]] = []
        existed: list[int] = []
        for key, value, prior in zip(keys, values, priors):
            old_bucket = prior - prior % granularity if prior >= 0 else -1
            if value is None:
                if old_bucket >= 0:
                    out_keys.append(index_prefix + pack(old_bucket) + key)
                    out_values.append(None)
                    existed.append(-1)
                out_keys.append(key)
                out_values.append(None)
                existed.append(1 if prior >= 0 else 0)
                continue
            if old_bucket != bucket:
                if old_bucket >= 0:
                    out_keys.append(index_prefix + pack(old_bucket) + key)
                    out_values.append(None)
                    existed.append(-1)
                out_keys.append(new_index_prefix + key)
                out_values.append(b"")
                existed.append(-1)
            out_keys.append(key)
            out_values.append(stamp_bytes + value)
            existed.append(1 if prior >= 0 else 0)
        self._store.stage_changes(out_keys, out_values, existed)

    def touch(self, keys: Iterable[bytes], now: int) -> int:
        """Refresh the stamp of each live key (``ON_READ_AND_WRITE`` reads done elsewhere,
        e.g. in the JVM); expired or absent keys are left alone. Returns how many were refreshed."""
        keys = list(keys)
        refreshed = 0
        for key, raw in zip(keys, self._store.multi_get(keys)):
            if raw is None:
                continue
            access, value = codec.unstamp(raw)
            if codec.is_expired(access, self._ttl, now) or access == now:
                continue
            self._write(key, access, value, now)
            refreshed += 1
        return refreshed

    # ------------------------------------------------------------------ cleanup
    def collect_expired(self, now: int, limit: int, whole_buckets: bool = True) -> list[tuple[bytes, int]]:
        """Up to ``limit`` candidate ``(data key, bucket start)`` pairs from the index
        buckets expired at ``now``, oldest first, read without writing (background cleanup
        collects these; :meth:`expire` checks them). ``whole_buckets=False`` also takes
        the bucket the expiry cutoff falls in."""
        bounds = codec.expired_index_range(self._ns, self._ttl, self._granularity, now, whole_buckets)
        if bounds is None or limit <= 0:
            return []
        found: list[tuple[bytes, int]] = []
        decode = syskeys.decode_index_key
        for index_key, _ in self._store.iterate(*bounds):
            bucket, data_key = decode(self._ns, index_key)
            found.append((data_key, bucket))
            if len(found) >= limit:
                break
        return found

    def expire(self, candidates: Iterable[tuple[bytes, int]], now: int,
               removed_keys: Optional[KeySink] = None) -> int:
        """Remove each candidate whose entry has expired; drop stale index entries (the
        entry is gone, or lives in a later bucket). Returns how many entries were removed;
        their keys are appended to ``removed_keys`` if given."""
        candidates = list(candidates)
        if not candidates:
            return 0
        current = self._store.multi_get([key for key, _ in candidates])
        store = self._store
        removed = 0
        gone: set[bytes] = set()  # a key may appear twice (a stale entry in an older bucket)
        for (key, bucket), raw in zip(candidates, current):
            if key in gone:
                store.delete(syskeys.index_key(self._ns, bucket, key))
                continue
            stamp = None if raw is None else codec.stamp_of(raw)
            expired = stamp is not None and codec.is_expired(stamp, self._ttl, now)
            if raw is None or expired or self._bucket(stamp) != bucket:  # type: ignore[arg-type]
                store.delete(syskeys.index_key(self._ns, bucket, key))
            if expired:
                self._remove(key, stamp)  # type: ignore[arg-type]
                gone.add(key)
                removed += 1
                if removed_keys is not None:
                    removed_keys.append(key)
        self.stats.expired_by_sweep += removed
        return removed

    def sweep(self, now: Optional[int] = None, limit: Optional[int] = None) -> int:
        """The incremental cleanup: check at most ``limit`` (default: the config's
        ``cleanup_size``) index entries of buckets expired at ``now`` and remove what expired."""
        now = self.now() if now is None else now
        limit = self._config.cleanup_size if limit is None else limit
        return self.expire(self.collect_expired(now, limit), now)

    def sweep_all(self, now: Optional[int] = None) -> int:
        """Remove every entry expired at ``now`` (:meth:`expire_all`, this epoch's writes included)."""
        return self.expire_all(self.now() if now is None else now)

    def expire_all(self, now: int, removed_keys: Optional[KeySink] = None, pending: bool = True,
                   chunk: Optional[int] = None) -> int:
        """Remove every entry expired at ``now``, including those in the bucket the cutoff falls
        in (full-snapshot cleanup: the snapshot then holds no expired entry), checking at most
        ``chunk`` (default :data:`CHUNK_ROWS`) index entries at a time; arguments and result as
        for :meth:`expire`.

        The candidates are the index entries of the expired range, from :func:`_keys_in_chunks`:
        the loaded version's, then (``pending``) those this epoch staged. ``pending=False`` is
        for callers none of whose staged writes can have expired (the provider stamps them all
        with ``now``); it spares sorting the epoch's writes.

        Invariant: the result is that of one :meth:`expire` of all candidates at once. Each
        chunk is checked against the current values, which include earlier chunks' removals: a
        key listed again in a later chunk (its entry in a later bucket, next to a stale one in an
        older bucket) is then absent, so only that index entry is dropped and the key is counted
        once; a committed index entry this epoch moved or deleted meets the value of this epoch
        (a rewritten entry survives; if that one has expired, its own index entry is in the
        range too and it would have been removed anyway).
        """
        bounds = codec.expired_index_range(self._ns, self._ttl, self._granularity, now, whole_buckets=False)
        if bounds is None:
            return 0
        decode = syskeys.decode_index_key
        removed = 0
        for index_keys in _keys_in_chunks(self._store, bounds[0], bounds[1], chunk or CHUNK_ROWS, pending):
            candidates: list[tuple[bytes, int]] = []
            for index_key in index_keys:
                bucket, data_key = decode(self._ns, index_key)
                candidates.append((data_key, bucket))
            removed += self.expire(candidates, now, removed_keys)
        return removed


def _keys_in_chunks(store: VersionedStore, start: bytes, end: Optional[bytes], chunk: int,
                    pending: bool) -> Iterator[list[bytes]]:
    """The keys in ``[start, end)`` in ascending lists of at most ``chunk``: first the loaded
    version's, then with ``pending`` those this epoch staged as puts (a key both committed and
    staged comes twice). The caller may stage writes while it holds a list: the loaded version is
    read by one iterator, which staging does not change; the staged writes are read in
    :func:`resumable_chunks` (the overlay must not be written while it is iterated)."""
    yield from chunks((key for key, _ in store.iterate_committed(start, end)), chunk)
    if not pending:
        return

    def staged_puts(after: Optional[bytes]) -> Iterator[tuple[bytes, Optional[bytes]]]:
        return ((k, v) for k, v in store.iterate_pending(after, end) if v is not None)

    for rows in resumable_chunks(staged_puts, chunk, start):
        yield [key for key, _ in rows]


# ---------------------------------------------------------------------------- layout migration
def is_stamped(store: VersionedStore, namespace: bytes) -> bool:
    """Whether ``namespace``'s values are stored stamped (its format marker is present)."""
    return store.get(syskeys.marker_key(namespace)) is not None


def migrate_layout(store: VersionedStore, namespace: bytes, stamped: bool,
                   entries: Callable[[Optional[bytes]], Iterator[tuple[bytes, bytes]]], now: int,
                   ttl_ms: Optional[int] = None, chunk: Optional[int] = None) -> int:
    """Make ``namespace`` stamped or unstamped, rewriting its existing entries if the stored
    layout differs; returns how many entries were rewritten.

    Turning TTL on stamps every existing value with ``now`` (its TTL starts at the
    migration) and builds the index; turning it off strips the stamps and drops the index.
    The rewrite is staged like any write and becomes durable with the next commit (one large
    changelog; the store's overlay spills to local disk past its share of memory).

    ``entries(start)`` yields the namespace's ``(key, raw value)`` pairs with ``key >= start``
    (all of them for ``None``), ascending, as the caller's view shows them (the loaded version,
    or the merged view when the epoch may have staged rewrites of these values, e.g. a schema
    migration). Memory is one chunk: at most ``chunk`` (default :data:`CHUNK_ROWS`) pairs are
    taken from one iterator, which is released before they are staged, and the next chunk is
    asked for from just after the last key -- the staged rewrites of keys up to it do not change
    what follows, so the merged view, which must not be written while it is iterated, is fine.

    The dropped index is read from the loaded version (one iterator, which staging does not
    change): no index entry of a namespace is staged before its layout changes, as TTL writes
    to a namespace only once its layout is settled (the provider migrates before it stages
    anything; a keyed state migrates when it is registered, before it is handed out).
    """
    marker = syskeys.marker_key(namespace)
    if (store.get(marker) is not None) == stamped:
        return 0
    chunk = chunk or CHUNK_ROWS
    rewritten = 0
    for rows in resumable_chunks(entries, chunk):
        rewritten += len(rows)
        store.stage_changes(*(_stamped(namespace, rows, now, ttl_ms) if stamped else _unstamped(rows)))
    if stamped:
        store.put(marker, codec.STAMPED_MARKER)
        return rewritten
    # Every index entry of the namespace goes, whatever bucket width wrote it.
    index_start = syskeys.index_prefix(namespace)
    for index_keys in _keys_in_chunks(store, index_start, prefix_upper_bound(index_start), chunk, pending=False):
        store.delete_many(index_keys)
    store.delete(marker)
    return rewritten


def _stamped(namespace: bytes, rows: list[tuple[bytes, bytes]], now: int,
             ttl_ms: Optional[int]) -> tuple[list[bytes], list[Optional[bytes]]]:
    """Writes stamping ``rows`` with ``now``: an index entry and the stamped value each."""
    # Without the TTL, a 1 ms bucket: still at or before the stamp, so still correct.
    granularity_ms = codec.index_granularity(ttl_ms) if ttl_ms else 1
    prefix = syskeys.index_key(namespace, codec.bucket_start(now, granularity_ms), b"")
    head = codec.stamp(b"", now)
    keys: list[bytes] = []
    values: list[Optional[bytes]] = []
    for key, raw in rows:
        keys += [prefix + key, key]
        values += [b"", head + raw]
    return keys, values


def _unstamped(rows: list[tuple[bytes, bytes]]) -> tuple[list[bytes], list[Optional[bytes]]]:
    """Writes stripping the stamps of ``rows``."""
    return [key for key, _ in rows], [codec.unstamp(raw)[1] for key, raw in rows]
