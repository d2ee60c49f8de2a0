"""Keys of the Spark state store provider: the header ``[key group u16][hash i32]`` before the
key row. Scalar codec, and the vectorised (numpy over Arrow buffers) routing of whole batches.

Layout of a data key (all integers big-endian), written by the JVM shim's ``KeyCodec.scala``::

    offset 0  2 bytes  key group = pmod(hash32, 32768), uint16 BE (:mod:`.keygroup_prefix`)
    offset 2  4 bytes  hash32 = Spark's Murmur3Hash (seed 42) of the key's partitioning
                       columns, int32 BE two's complement
    offset 6  ...      no prefix scan: the key's UnsafeRow bytes
                       prefix scan:    [prefix length i32 BE][prefix UnsafeRow][key UnsafeRow]

``hash32`` is the hash Spark's ``HashPartitioning`` shuffles the key's input by, so the key's
partition at any count ``n`` is ``pmod(hash32, n)``
(:func:`spark_state.partitioning.spark_hash.spark_partition_id`): state can be re-split for
any partition count without decoding rows. With two's complement, negative hashes sort after
positive ones within a key group; only grouping matters, not numeric order.

System keys (:mod:`.system`) share the store: a TTL index entry routes with the data key it
names; every other system key (per-store records such as the TTL format marker) goes to
every partition. :func:`route_hashes` does both over an Arrow binary array.

:data:`MAX_PARALLELISM`, :data:`HEADER_BYTES` and the hash seed are also constants of
``KeyCodec.scala``; ``tests/unit/test_keys_scala.py`` reads the Scala source and checks they agree.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from ..partitioning.keygroups import UPPER_BOUND_MAX_PARALLELISM
from ..partitioning.spark_hash import spark_key_group
from .keygroup_prefix import KEY_GROUP_PREFIX_BYTES, check_stored_key
from .system import BUCKET, INDEX_HEADER_BYTES, SYSTEM_PREFIX, TTL_INDEX_TAG

__all__ = [
    "MAX_PARALLELISM",
    "HEADER",
    "HASH_BYTES",
    "HEADER_BYTES",
    "provider_key",
    "split_provider_key",
    "key_row",
    "MalformedProviderKeyError",
    "route_hashes",
]

#: Key groups of the provider's stores (``KeyCodec.MaxParallelism``).
MAX_PARALLELISM = UPPER_BOUND_MAX_PARALLELISM
#: The header: key group uint16 BE, hash int32 BE.
HEADER = struct.Struct(">Hi")
#: ``KeyCodec.HeaderBytes``: key group and hash.
HEADER_BYTES = HEADER.size
HASH_BYTES = HEADER_BYTES - KEY_GROUP_PREFIX_BYTES
_HASH_AT = KEY_GROUP_PREFIX_BYTES
_SYSTEM = SYSTEM_PREFIX[0]
_INDEX_TAG = TTL_INDEX_TAG[0]
#: Offset of the data key in an index key, past the namespace: bucket start.
_INDEX_TAIL = INDEX_HEADER_BYTES + BUCKET.size


def provider_key(hash32: int, row: bytes, max_parallelism: int = MAX_PARALLELISM) -> bytes:
    """``[kg u16 BE][hash32 i32 BE][row]`` with ``kg = pmod(hash32, max_parallelism)``."""
    kg = spark_key_group(hash32, max_parallelism)
    return HEADER.pack(kg, hash32) + bytes(row)


def split_provider_key(stored: bytes) -> tuple[int, int, bytes]:
    """Inverse of :func:`provider_key`: ``(key group, hash32, row bytes)``; hash32 is signed."""
    check_stored_key(stored, HEADER_BYTES, "Spark key")
    kg, hash32 = HEADER.unpack_from(stored)
    return kg, hash32, bytes(stored[HEADER_BYTES:])


#: The prefix row's length in a prefix-scan store's key (after the header): int32 BE.
PREFIX_LENGTH = struct.Struct(">i")


def key_row(stored: bytes, prefix_columns: int) -> bytes:
    """The key's UnsafeRow bytes in a stored data key: past the header and, in a store with
    prefix scans (``prefix_columns > 0``), past the prefix row."""
    if prefix_columns == 0:
        return stored[HEADER_BYTES:]
    (length,) = PREFIX_LENGTH.unpack_from(stored, HEADER_BYTES)
    return stored[HEADER_BYTES + PREFIX_LENGTH.size + length:]


class MalformedProviderKeyError(ValueError):
    """A key too short for the provider header: the store is not a spark-state provider store."""

    def __init__(self, row: int, key: bytes) -> None:
        super().__init__(f"a stored key ({key[:16]!r}...) is shorter than the provider's "
                         "[key group u16][hash i32] header: not a spark-state provider store")
        self.row = row
        self.key = key


def route_hashes(keys: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray]:
    """Per key of ``keys``: the Spark hash it routes by (int64), and whether it goes to every
    partition (system keys other than TTL index entries; their hash is meaningless).

    A TTL index entry routes by the hash of the data key it names. Vectorised over the
    array's offset and data buffers: a few nanoseconds per key, no Python per row.

    :raises MalformedProviderKeyError: a data key (or an index entry's data key) shorter than the header.
    """
    count = len(keys)
    if count == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    keys = keys if isinstance(keys, pa.BinaryArray) else pa.array(keys, pa.binary())
    buffers = keys.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[keys.offset:keys.offset + count + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(1, np.uint8)
    last = len(data) - 1
    starts = offsets[:-1].astype(np.int64)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    first = data[np.minimum(starts, last)]
    is_sys = (first == _SYSTEM) & (lengths > 0)
    tag = data[np.minimum(starts + 1, last)]
    ns_len = data[np.minimum(starts + INDEX_HEADER_BYTES - 1, last)].astype(np.int64)
    is_index = is_sys & (tag == _INDEX_TAG) & (lengths >= 2)
    data_key = np.where(is_index, starts + _INDEX_TAIL + ns_len, starts)
    data_len = np.where(is_index, lengths - (_INDEX_TAIL + ns_len), lengths)
    everywhere = is_sys & ~is_index
    ok = everywhere | (data_len >= HEADER_BYTES)
    if not np.all(ok):
        bad = int(np.argmin(ok))
        raise MalformedProviderKeyError(bad, keys[bad].as_py())
    h = np.zeros(count, dtype=np.uint32)
    for i in range(HASH_BYTES):
        h = (h << 8) | data[np.minimum(data_key + _HASH_AT + i, last)].astype(np.uint32)
    return h.view(np.int32).astype(np.int64), everywhere
