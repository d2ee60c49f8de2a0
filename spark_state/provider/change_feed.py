"""The provider's change feed: what Spark's ``statestore`` reader asks with ``readChangeFeed``.

The shim's ``getStateStoreChangeDataReader(start, end)`` asks the worker for the changes store
versions ``start..end`` made (:func:`spark_state.engine.changes.committed_changes`) and reads
them from one Arrow file (layout in :mod:`.protocol`): data keys only (the system keyspace --
TTL index and markers -- is the engine's own), values without TTL stamps.
"""

from __future__ import annotations

import pyarrow as pa

from .. import constants as C
from ..arrow_chunks import chunks, entry_arrays
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
            data = ((key, value[STAMP_BYTES:] if stamped and value is not None else value)
                    for key, value in changed.changes if key[:1] != SYSTEM_PREFIX)
            for chunk in chunks(data, C.ARROW_BATCH_ROWS):
                ks, vs = entry_arrays(chunk)
                ops = [C.OP_PUT if v is not None else C.OP_DELETE for _, v in chunk]
                writer.write_batch(pa.record_batch(
                    [pa.array([changed.version] * len(chunk), pa.int64()), pa.array(ops, pa.int8()), ks, vs],
                    schema=SCHEMA))
                total += len(chunk)
    return total
