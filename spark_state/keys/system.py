"""Keys of the engine's system keyspace: the TTL expiry index, TTL format markers and schema
records. Pure functions, no I/O.

Every system key starts with :data:`SYSTEM_PREFIX` (``0xFF``), then a one-byte tag that says
what follows. Data keys never start with 0xFF (key-group keys start with 0x00..0x7F,
operator state of keyed functions with 0xFE, see :mod:`spark_state.keys`), and the
provider's scans stop below 0xFF; key counts reported to users exclude this keyspace.

Layouts (all integers big-endian)::

    [0xFF][0x01][len(ns) u8][ns][bucket_start_ms u64][data key]  -> b""       TTL expiry index
    [0xFF][0x02][len(ns) u8][ns]                                 -> b"ttl:1"  TTL format marker
    [0xFF][0x03][len(name) u8][name, UTF-8]                      -> JSON      keyed state's schema record
    [0xFF][0x04][len(name) u8][name, UTF-8]                      -> JSON      operator state's schema record

The last three share one form, the *named key* ``[0xFF][tag][len u8][name]``
(:func:`named_key`); the index key extends it with the bucket and the data key, so all
entries of one namespace sort by bucket and a sweep reads only the buckets that lie wholly in
the past (bucketing itself, and the stamped value layout, are in :mod:`spark_state.ttl.codec`).

An index entry names its data key, whose key group (keyed state) or Spark hash (provider)
routes the index entry on rescale: :func:`data_key_of_index_key` and
:data:`INDEX_HEADER_BYTES` / :data:`BUCKET` give it without knowing the namespace.
"""

from __future__ import annotations

import struct

__all__ = [
    "SYSTEM_PREFIX",
    "TTL_INDEX_TAG",
    "TTL_MARKER_TAG",
    "KEYED_SCHEMA_TAG",
    "OPERATOR_SCHEMA_TAG",
    "INDEX_HEADER_BYTES",
    "BUCKET",
    "pack_bucket",
    "is_system_key",
    "tag_range",
    "named_key",
    "name_of_named_key",
    "index_prefix",
    "index_key",
    "decode_index_key",
    "data_key_of_index_key",
    "index_range",
    "marker_key",
    "keyed_record_key",
    "operator_record_key",
    "name_of_record_key",
    "record_range",
]

#: First byte of every engine-owned key.
SYSTEM_PREFIX = b"\xff"
#: Second byte: what kind of engine record follows.
TTL_INDEX_TAG = b"\x01"
TTL_MARKER_TAG = b"\x02"
KEYED_SCHEMA_TAG = b"\x03"
OPERATOR_SCHEMA_TAG = b"\x04"

#: Bytes of a named key before its name: prefix, tag, name length.
INDEX_HEADER_BYTES = 3
#: The index key's time bucket: start of the bucket in epoch ms, uint64 BE.
BUCKET = struct.Struct(">Q")
#: ``BUCKET.pack``, bound once for the per-row loops of :mod:`spark_state.ttl.kv`.
pack_bucket = BUCKET.pack
_MAX_BUCKET = (1 << 64) - 1


def is_system_key(key: bytes) -> bool:
    """Whether ``key`` belongs to the engine's system keyspace."""
    return key[:1] == SYSTEM_PREFIX


def tag_range(tag: bytes) -> tuple[bytes, bytes]:
    """``[start, end)`` of every system key with ``tag``."""
    return SYSTEM_PREFIX + tag, SYSTEM_PREFIX + bytes((tag[0] + 1,))


def named_key(tag: bytes, name: bytes, what: str = "name") -> bytes:
    """``[0xFF][tag][len(name) u8][name]``; ``what`` names ``name`` in the error."""
    if len(name) > 255:
        raise ValueError(f"a {what} has at most 255 bytes, got {len(name)}")
    return SYSTEM_PREFIX + tag + bytes((len(name),)) + name


def name_of_named_key(key: bytes) -> bytes:
    """The name of a named key (a marker or schema record key, or the namespace of an index key)."""
    return key[INDEX_HEADER_BYTES:INDEX_HEADER_BYTES + key[INDEX_HEADER_BYTES - 1]]


# ------------------------------------------------------------------------- TTL expiry index
def index_prefix(namespace: bytes) -> bytes:
    """Common prefix of every index entry of ``namespace``."""
    return named_key(TTL_INDEX_TAG, namespace, "TTL namespace")


def index_key(namespace: bytes, bucket_ms: int, data_key: bytes) -> bytes:
    """The index entry of ``data_key`` in the bucket starting at ``bucket_ms``."""
    return index_prefix(namespace) + BUCKET.pack(bucket_ms) + data_key


def decode_index_key(namespace: bytes, key: bytes) -> tuple[int, bytes]:
    """``(bucket start ms, data key)`` of an index entry of ``namespace``."""
    start = INDEX_HEADER_BYTES + len(namespace)
    return BUCKET.unpack_from(key, start)[0], key[start + BUCKET.size:]


def data_key_of_index_key(key: bytes) -> bytes:
    """The data key an index entry names (any namespace)."""
    return key[INDEX_HEADER_BYTES + key[INDEX_HEADER_BYTES - 1] + BUCKET.size:]


def index_range(namespace: bytes, end_bucket_ms: int) -> tuple[bytes, bytes]:
    """``[start, end)`` of the index entries of ``namespace`` in buckets starting before ``end_bucket_ms``."""
    prefix = index_prefix(namespace)
    return prefix, prefix + BUCKET.pack(min(end_bucket_ms, _MAX_BUCKET))


def marker_key(namespace: bytes) -> bytes:
    """The key of ``namespace``'s TTL format marker."""
    return named_key(TTL_MARKER_TAG, namespace, "TTL namespace")


# ------------------------------------------------------------------------- schema records
def keyed_record_key(name_bytes: bytes) -> bytes:
    """The key of keyed state ``name_bytes``'s schema record."""
    return named_key(KEYED_SCHEMA_TAG, name_bytes, "state name")


def operator_record_key(name_bytes: bytes) -> bytes:
    """The key of operator state ``name_bytes``'s schema record."""
    return named_key(OPERATOR_SCHEMA_TAG, name_bytes, "state name")


def name_of_record_key(key: bytes) -> bytes:
    """The state name (UTF-8 bytes) of a schema record key."""
    return name_of_named_key(key)


def record_range(tag: bytes) -> tuple[bytes, bytes]:
    """``[start, end)`` of every schema record with ``tag`` (keyed or operator)."""
    if tag not in (KEYED_SCHEMA_TAG, OPERATOR_SCHEMA_TAG):
        raise ValueError(f"not a schema record tag: {tag!r}")
    return tag_range(tag)
