"""Byte layouts of TTL state: pure functions, no I/O.

**Stamped value** (what the store holds for a value, list element or map entry with TTL)::

    [last_access_ms : int64 big-endian, 8 bytes][user value bytes ...]

As in Flink (``TtlValue``, timestamp first), the stamp is the *last access time*, not the
expiry time: expiry is ``last_access + ttl <= now`` evaluated with the TTL configured
*now*, so a query restarted with a different TTL applies the new one to old state, and
TTL is not part of the checkpoint.

**Expiry index entry** (empty value), in the system keyspace::

    [0xFF][0x01][len(namespace) : uint8][namespace][bucket_start_ms : uint64 BE][data key]

``bucket_start = stamp - stamp % granularity``: the index is bucketed in time, with a
granularity of a sixteenth of the TTL (at most an hour, see :func:`index_granularity`), so
a key rewritten within its bucket -- the common case of a hot key updated every
micro-batch -- costs no index write at all. Entries of one namespace sort by bucket, so a
sweep seeks to the buckets that lie wholly in the past of ``now - ttl`` and reads only
them: its cost follows the expirations, not the state size. Expired entries therefore
stay on disk for at most one granularity after they expire; reads never see them (they
check the stamp).

Invariant: every stamped entry has an index entry whose bucket start is ``<=`` its stamp.
A rewrite into a new bucket moves the entry when the old stamp is known; an index entry
left behind (old stamp unknown, or the TTL -- hence the granularity -- changed on restart)
is *stale* and harmless: the sweep checks each candidate's stamp and drops stale entries.

**System keyspace.** Keys starting with ``0xFF`` belong to the engine, never to user data:
key-group-prefixed data keys start with a big-endian uint16 key group below 32768, so
their first byte is at most ``0x7F``. Key counts reported to users exclude the system keyspace.

**Format marker** (per namespace, in the system keyspace)::

    [0xFF][0x02][len(namespace) : uint8][namespace]  ->  b"ttl:1"

Present iff the namespace's values are stamped. It lets a restart that turns TTL on or
off notice that the stored layout differs, and migrate.
"""

from __future__ import annotations

import struct
from typing import Optional

from ..constants import SYSTEM_KEY_PREFIX, TTL_INDEX_TAG, TTL_MARKER_TAG

#: First byte of every engine-owned key.
SYSTEM_PREFIX = SYSTEM_KEY_PREFIX
#: Expiry index entries: ``SYSTEM_PREFIX + INDEX_TAG + ...``.
INDEX_TAG = TTL_INDEX_TAG
#: Per-namespace format markers.
MARKER_TAG = TTL_MARKER_TAG
#: Value of a format marker: stamped layout, version 1.
STAMPED_MARKER = b"ttl:1"

STAMP_BYTES = 8
MAX_TIMESTAMP = (1 << 63) - 1
_STAMP = struct.Struct(">q")
_UINT64 = struct.Struct(">Q")


def pack_uint64(value: int) -> bytes:
    return _UINT64.pack(value)


def is_system_key(key: bytes) -> bool:
    """Whether ``key`` belongs to the engine's system keyspace."""
    return key[:1] == SYSTEM_PREFIX


# ------------------------------------------------------------------------------- stamps
def stamp(value: bytes, access_ms: int) -> bytes:
    """``value`` with its last-access stamp in front."""
    return _STAMP.pack(access_ms) + value


def stamp_of(stamped: bytes) -> int:
    """The last-access time of a stamped value."""
    if len(stamped) < STAMP_BYTES:
        raise ValueError(f"a stamped value has at least {STAMP_BYTES} bytes, got {len(stamped)}")
    return _STAMP.unpack_from(stamped)[0]


def unstamp(stamped: bytes) -> tuple[int, bytes]:
    """``(last_access_ms, user value)`` of a stamped value."""
    return stamp_of(stamped), stamped[STAMP_BYTES:]


def expiration_time(access_ms: int, ttl_ms: int) -> int:
    """When an entry last accessed at ``access_ms`` expires, without overflowing int64
    (Flink's ``TtlUtils.getExpirationTimestamp``)."""
    if access_ms > 0:
        return access_ms + min(MAX_TIMESTAMP - access_ms, ttl_ms)
    return access_ms + ttl_ms


def is_expired(access_ms: int, ttl_ms: int, now_ms: int) -> bool:
    """Flink's rule: expired iff ``expiration_time <= now``."""
    return expiration_time(access_ms, ttl_ms) <= now_ms


def expired_access_cutoff(ttl_ms: int, now_ms: int) -> int:
    """The greatest access time that is expired at ``now_ms`` (may be negative)."""
    return now_ms - ttl_ms


#: Upper bound of the index granularity: expired entries leave the disk within an hour.
MAX_GRANULARITY_MS = 3_600_000
#: The granularity is the TTL divided by this.
GRANULARITY_DIVISOR = 16


def index_granularity(ttl_ms: int) -> int:
    """The width of an index time bucket for a TTL: ``ttl / 16``, within ``[1 ms, 1 h]``."""
    return max(1, min(ttl_ms // GRANULARITY_DIVISOR, MAX_GRANULARITY_MS))


def bucket_start(access_ms: int, granularity_ms: int) -> int:
    """Start of the index bucket holding ``access_ms`` (never negative)."""
    access_ms = max(access_ms, 0)
    return access_ms - access_ms % granularity_ms


# --------------------------------------------------------------------------- index keys
def namespace_prefix(tag: bytes, namespace: bytes) -> bytes:
    if len(namespace) > 255:
        raise ValueError(f"a TTL namespace has at most 255 bytes, got {len(namespace)}")
    return SYSTEM_PREFIX + tag + bytes((len(namespace),)) + namespace


def index_prefix(namespace: bytes) -> bytes:
    """Common prefix of every index entry of ``namespace``."""
    return namespace_prefix(INDEX_TAG, namespace)


def index_key(namespace: bytes, bucket_ms: int, data_key: bytes) -> bytes:
    """The index entry of ``data_key`` in the bucket starting at ``bucket_ms``."""
    return index_prefix(namespace) + _UINT64.pack(bucket_ms) + data_key


def decode_index_key(namespace: bytes, key: bytes) -> tuple[int, bytes]:
    """``(bucket start ms, data key)`` of an index entry of ``namespace``."""
    start = len(index_prefix(namespace))
    return _UINT64.unpack_from(key, start)[0], key[start + 8:]


def expired_index_range(namespace: bytes, ttl_ms: int, granularity_ms: int, now_ms: int,
                        whole_buckets: bool = True) -> Optional[tuple[bytes, bytes]]:
    """``[start, end)`` of the index entries to sweep at ``now_ms``, or None if there are none.

    With ``whole_buckets`` only buckets in which *every* entry has expired (bucket end <=
    cutoff); otherwise also the bucket the cutoff falls in (its entries need a stamp check).
    """
    cutoff = expired_access_cutoff(ttl_ms, now_ms)
    last_start = cutoff - granularity_ms + 1 if whole_buckets else cutoff
    if last_start < 0:
        return None
    prefix = index_prefix(namespace)
    return prefix, prefix + _UINT64.pack(min(last_start + 1, (1 << 64) - 1))


def marker_key(namespace: bytes) -> bytes:
    """The key of ``namespace``'s format marker."""
    return namespace_prefix(MARKER_TAG, namespace)
