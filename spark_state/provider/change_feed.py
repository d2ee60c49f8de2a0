"""The provider's change feed: what Spark's ``statestore`` reader asks with ``readChangeFeed``.

The shim's ``getStateStoreChangeDataReader(start, end)`` asks the worker for the changes store
versions ``start..end`` made (:func:`spark_state.engine.changes.committed_changes`) and reads
them from one Arrow file (layout in :mod:`.protocol`): data keys only (the system keyspace --
TTL index and markers -- is the engine's own), values without TTL stamps.
"""

from __future__ import annotations

from typing import Optional

import pyarrow as pa

from .. import constants as C
from ..engine.changes import committed_changes
from ..engine.store import VersionedStore
from ..keys.system import SYSTEM_PREFIX
from ..ttl import is_stamped
from ..ttl.codec import STAMP_BYTES
from .ttl_commit import NAMESPACE

SCHEMA = pa.schema([("version", pa.int64()), ("op", pa.int8()), ("key", pa.binary()), ("value", pa.binary())])


def write_change_feed(store: VersionedStore, start: int, end: int, out_path: str) -> int:
    """Write the change feed of versions ``start..end`` of ``store`` to ``out_path``; returns its rows."""
    total = 0
    with pa.OSFile(out_path, "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
        for changed in committed_changes(store, start, end):
            stamped = is_stamped(store, NAMESPACE)
            keys: list[bytes] = []
            values: list[Optional[bytes]] = []
            for key, value in changed.changes:
                if key[:1] == SYSTEM_PREFIX:
                    continue
                keys.append(key)
                values.append(value[STAMP_BYTES:] if stamped and value is not None else value)
            for i in range(0, len(keys), C.ARROW_BATCH_ROWS):
                ks, vs = keys[i:i + C.ARROW_BATCH_ROWS], values[i:i + C.ARROW_BATCH_ROWS]
                ops = [C.OP_PUT if v is not None else C.OP_DELETE for v in vs]
                writer.write_batch(pa.record_batch(
                    [pa.array([changed.version] * len(ks), pa.int64()), pa.array(ops, pa.int8()),
                     pa.array(ks, pa.binary()), pa.array(vs, pa.binary())], schema=SCHEMA))
            total += len(keys)
    return total
