"""Move a query's checkpoint between Spark's state store providers and spark-state.

``migrate(src, dst, to=...)`` is a savepoint of ``src`` followed by a restore into ``dst``
for another provider, through a temporary canonical savepoint:

* **from** Spark's HDFS or RocksDB provider: the savepoint reads every store with the
  checkpoint's own provider in the JVM (:mod:`.jvm_bridge`, ``OpsBridge.exportStore``) and
  gives each row spark-state's stored key (key group and Spark hash in front of the key's
  UnsafeRow). From spark-state: the engine reads its committed versions.
* **to** spark-state: the restore writes engine stores (rows re-split by hash if the count
  changes -- it does not here). To Spark's HDFS or RocksDB provider: ``OpsBridge.importStore``
  writes each store at the next version with that provider; TTL stamps and the engine's
  system keys are dropped (Spark's providers have no TTL for these operators).
* Spark's files are copied with the new provider class in every offset log entry's conf
  (``spark.sql.streaming.stateStore.providerClass``): Spark keeps using the class the
  checkpoint names whatever the session says, so restarting the unchanged query on ``dst``
  uses the new provider. The query id is kept (it is the same query, moving).

The source checkpoint is never modified. ``keyed_process`` / ``checkpointed_process`` state
is not a provider's. State kept beside the checkpoint (``<checkpoint>/spark-state/<name>``,
the default) is part of the checkpoint and is copied beside the target, as the unchanged
query started on the target looks for it there. State elsewhere (under a ``state_root``, at a
``state_location``, at the former default ``./spark-state/<query id>/<name>``) stays in its
location, which the migrated checkpoint (same query id) keeps using; restart only the
migrated checkpoint from then on (a restart of the old one would find the state ahead of it
and fail with ``ConcurrentWriterError``).

Consistency is a savepoint's: a committed batch of a stopped or running source.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Optional

from ..spark.lines import get_line, running_line
from .checkpoint_reader import PROVIDERS, ROCKSDB_PROVIDER, SPARKSTATE_PROVIDER, SparkCheckpoint, provider_short_name
from .errors import UnsupportedCheckpointError
from .restore import restore
from .savepoint import savepoint


#: The Spark line from which Spark's RocksDB provider writes a version other than 1 from an empty store
#: (``getStore(..., loadEmpty=true)``), as a migration into it needs.
ROCKSDB_IMPORT_LINE = "4.2"


def check_line_can_write(provider_class: str, version: int) -> None:
    """Fail at once, naming the Spark line, where the running Spark cannot write ``version`` of a store
    with ``provider_class`` (Spark's RocksDB provider before 4.2, past version 1)."""
    line = running_line()
    if provider_class == ROCKSDB_PROVIDER and version > 1 and line < get_line(ROCKSDB_IMPORT_LINE):
        raise UnsupportedCheckpointError(
            f"migrating to Spark's RocksDB provider at batch {version - 1} needs Spark {ROCKSDB_IMPORT_LINE} or newer "
            f"(its provider writes a version from an empty store only from {ROCKSDB_IMPORT_LINE} on); this is Spark "
            f"{line.name}. Migrate to spark-state or to Spark's HDFS provider instead")


@dataclass
class MigrateResult:
    checkpoint: str
    target: str
    batch_id: int
    from_provider: str
    to_provider: str
    keys: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def migrate(checkpoint: str, target: str, *, to: str, batch: Optional[int] = None,
            storage_options: Optional[dict[str, str]] = None, target_storage_options: Optional[dict[str, str]] = None,
            progress: bool = True) -> MigrateResult:
    """Write ``target``, a checkpoint of ``checkpoint``'s query at its committed ``batch``
    (default the latest) for provider ``to`` (``spark-state``, ``hdfs`` or ``rocksdb``).
    Process state beside the checkpoint is copied beside ``target``; elsewhere it stays where it
    is (see the module docstring).

    ``storage_options`` apply to every location the call reads or writes (the checkpoint, its
    process state, ``target``); ``target_storage_options``, when given, replace them for
    ``target`` and the state copied beside it."""
    started = time.perf_counter()
    if to not in PROVIDERS:
        raise ValueError(f"--to must be one of {', '.join(PROVIDERS)}, got {to!r}")
    to_class = PROVIDERS[to]
    src = SparkCheckpoint(checkpoint, storage_options)
    n = src.committed_batch(batch)
    from_class = src.provider_class(n)
    check_line_can_write(to_class, n + 1)
    if from_class == to_class:
        raise ValueError(f"{src.url} already uses {provider_short_name(to_class)}'s provider; nothing to migrate "
                         "(use savepoint/restore to copy it)")
    writer = None
    if to_class != SPARKSTATE_PROVIDER:
        from .jvm_bridge import spark_provider_writer

        conf = src.offset(n).conf
        conf.pop("spark.sql.streaming.stateStore.providerClass", None)
        writer = spark_provider_writer(target, to_class, conf)
    tmp = tempfile.mkdtemp(prefix="spark-state-migrate-")
    try:
        # process state beside the checkpoint only (process_root=""): state elsewhere stays where it is
        sp = savepoint(checkpoint, f"{tmp}/savepoint", n, process_root="", storage_options=storage_options,
                       progress=progress, allow_no_state=True)
        restored = restore(sp.savepoint, target, keep_query_id=True, storage_options=storage_options,
                           target_storage_options=target_storage_options, progress=progress, provider_class=to_class,
                           split_writer=writer)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return MigrateResult(src.url, restored.checkpoint, n, provider_short_name(from_class),
                         provider_short_name(to_class), sp.keys, round(time.perf_counter() - started, 3))
