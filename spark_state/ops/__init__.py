"""Operating stateful queries: inspect, savepoint, restore, rescale, migrate and move-state.

The Python API of the operations tools; ``python -m spark_state <command>`` (and the
``spark-state`` console script) runs the same functions (:mod:`spark_state.cli`)::

    from spark_state import ops
    ops.inspect("/ckpt")                                  # -> dict (JSON-ready)
    ops.savepoint("/ckpt", "/savepoints/sp1")             # stopped or running query
    ops.restore("/savepoints/sp1", "/ckpt2", partitions=5)
    ops.rescale("/ckpt2", partitions=2)                   # stopped query, in place
    ops.migrate("/hdfs-ckpt", "/ckpt3", to="spark-state") # or to="hdfs" / "rocksdb"
    ops.move_state("/ckpt")                               # ./spark-state/<query id>/* -> /ckpt/spark-state/*

Layering: these modules sit over the engine (``store``, ``checkpoint``, ``process.location``)
and never the other way round; nothing in the runtime imports them. Each result has
``to_dict()`` for ``--json``. Errors are :class:`~spark_state.ops.errors.OpsError` subclasses
(or the engine's ``SparkStateError``), with messages that name the file and the fix.

Process state (``keyed_process`` / ``checkpointed_process``) is found beside the checkpoint
(``<checkpoint>/spark-state/<name>``, the runtime's default), under ``process_root`` as
``<root>/<query id>/<name>`` (default: the former default root ``./spark-state`` if it exists),
and at locations named with ``process_locations={name: url}`` (see :mod:`.process_locations`).
"""

from __future__ import annotations

from .errors import (MoveVerificationError, NoCommittedBatchError, NotACheckpointError, OpsError,
                     ProcessStateNotFoundError, QueryRunningError, RetentionRaceError, SavepointError,
                     TargetExistsError, TargetInsideSourceError, UnsupportedCheckpointError)
from .inspect import inspect
from .migrate import MigrateResult, migrate
from .move_state import MoveStateResult, move_state
from .rescale import RescaleResult, rescale
from .restore import RestoreResult, restore
from .savepoint import SavepointResult, savepoint

__all__ = [
    "inspect", "savepoint", "restore", "rescale", "migrate", "move_state",
    "SavepointResult", "RestoreResult", "RescaleResult", "MigrateResult", "MoveStateResult",
    "OpsError", "NotACheckpointError", "NoCommittedBatchError", "QueryRunningError", "SavepointError",
    "TargetExistsError", "TargetInsideSourceError", "UnsupportedCheckpointError", "RetentionRaceError",
    "ProcessStateNotFoundError", "MoveVerificationError",
]
