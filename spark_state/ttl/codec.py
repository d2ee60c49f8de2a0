"""TTL state: the stamped value layout and the time rules of expiry. Pure functions, no I/O.

**Stamped value** (what the store holds for a value, list element or map entry with TTL)::

    [last_access_ms : int64 big-endian, 8 bytes][user value bytes ...]

As in Flink (``TtlValue``, timestamp first), the stamp is the *last access time*, not the
expiry time: expiry is ``last_access + ttl <= now`` evaluated with the TTL configured
*now*, so a query restarted with a different TTL applies the new one to old state, and
TTL is not part of the checkpoint.

**Expiry index.** Every stamped entry has an index entry, an empty value under a system
key that names the namespace, a time bucket and the data key (key layouts:
:mod:`spark_state.keys.system`)::

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

**Format marker** (per namespace, a system key, :func:`spark_state.keys.system.marker_key`)
with the value :data:`STAMPED_MARKER`: present iff the namespace's values are stamped. It
lets a restart that turns TTL on or off notice that the stored layout differs, and migrate.
"""

from __future__ import annotations

import struct
from typing import Optional

from ..keys.system import index_range

#: Value of a format marker: stamped layout, version 1.
STAMPED_MARKER = b"ttl:1"

STAMP_BYTES = 8
MAX_TIMESTAMP = (1 << 63) - 1
_STAMP = struct.Struct(">q")


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


# --------------------------------------------------------------------------- sweeps
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
    return index_range(namespace, last_start + 1)
