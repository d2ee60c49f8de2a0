"""What a checkpoint holds that a restarted query is checked against: its stateful operators
(Spark's operator metadata, where the checkpoint has it), each store's key and value schema, the
batch the restart runs first, the confs the restart takes from the offset log, and its keyed and
checkpointed functions (kind, key columns, max parallelism).

A local copy of the small files Spark's start-up checks read (:meth:`HeldState.copy_check_files`)
lets Spark's own code run those checks without touching the checkpoint: they may write schema
files, and must not write them into the user's checkpoint.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..ops import savepoint_format as F
from ..ops.checkpoint_reader import DEFAULT_STORE, OPERATOR_METADATA, SparkCheckpoint
from ..ops.errors import NoCommittedBatchError
from ..ops.process_locations import find_process_locations
from ..ops.savepoint_manifest import read_manifest
from ..process.location import read_meta
from ..process.plan import KEYED
from ..state.schema import StateSchema
from ..state_data.writers.keyed_state_surgery import keyed_state_records
from ..storage import open_storage
from ..ops.storage_walk import list_subdirs, walk_files
from ..spark.logs import OffsetEntry
from ..state_data.location.savepoints import SavepointSource, is_savepoint

__all__ = ["HeldFunction", "HeldOperator", "HeldState", "read_held_state"]


@dataclass(frozen=True)
class HeldOperator:
    """One stateful operator of the checkpoint."""

    id: int
    #: Spark's short name (``stateStoreSave``, ``dedupe``, ...): the operator metadata's, or where
    #: the checkpoint has none (written by Spark 3.5) the one its schemas tell
    name: str
    #: whether the checkpoint has Spark's operator metadata for it (what Spark's start checks)
    has_metadata: bool
    #: store name -> (key schema, value schema), Spark StructType JSON
    schemas: Mapping[str, tuple[dict, dict]] = field(default_factory=dict)
    partitions: int = 0


@dataclass(frozen=True)
class HeldFunction:
    """One keyed or checkpointed function of the query (``keyed_process`` and friends), as its state
    location (or the savepoint's manifest) records it."""

    name: str
    #: ``keyed`` or ``operator`` (:data:`spark_state.process.plan.KEYED`, ``OPERATOR``)
    kind: str
    #: the key columns, ``{"columns": [...], "types": [Spark simple strings]}``; None: not keyed or unrecorded
    key: Optional[dict]
    max_parallelism: Optional[int]
    #: its keyed states' schema records, by name (a savepoint's; None: not read)
    states: Optional[Mapping[str, StateSchema]] = None


@dataclass(frozen=True)
class HeldState:
    """The checkpoint side of an upgrade check."""

    #: the checkpoint or savepoint checked
    location: str
    storage_options: Mapping[str, str]
    operators: Mapping[int, HeldOperator]
    #: the batch a restart runs first: the last planned one when it is not committed, else the next
    next_batch: int
    #: the offset log entry whose confs and times the restart plans with
    offsets: OffsetEntry
    #: where Spark's files are: the checkpoint, or a savepoint's ``spark/`` directory
    spark_files: str = ""
    #: the query's keyed and checkpointed functions, by name
    functions: Mapping[str, HeldFunction] = field(default_factory=dict)

    @property
    def metadata_names(self) -> dict[int, str]:
        """operator id -> name, of the operators with operator metadata (what Spark checks a
        restarted plan's operators against; empty: Spark checks none)."""
        return {i: op.name for i, op in self.operators.items() if op.has_metadata}

    @property
    def offset_metadata_json(self) -> str:
        return json.dumps(self.offsets.metadata, separators=(",", ":"))

    def copy_check_files(self, target_dir: str) -> None:
        """Copy into ``target_dir/state`` the files of ``state/`` that Spark's start-up checks read:
        each operator's ``_metadata`` and ``_stateSchema`` trees and its partition 0's schema files
        (no state data)."""
        checkpoint = SparkCheckpoint(self.spark_files or self.location, dict(self.storage_options))
        storage = checkpoint.storage
        for op in self.operators:
            paths = [*walk_files(storage, f"state/{op}/_metadata"), *walk_files(storage, f"state/{op}/_stateSchema")]
            paths += [f"state/{op}/0/_metadata/schema"] if storage.exists(f"state/{op}/0/_metadata/schema") else []
            paths += [f"state/{op}/0/{store}/_metadata/schema" for store in list_subdirs(storage, f"state/{op}/0")
                      if storage.exists(f"state/{op}/0/{store}/_metadata/schema")]
            for path in paths:
                local = os.path.join(target_dir, *path.split("/"))
                os.makedirs(os.path.dirname(local), exist_ok=True)
                with open(local, "wb") as out:
                    out.write(storage.read_bytes(path))


def read_held_state(location: str, storage_options: Optional[Mapping[str, str]] = None) -> HeldState:
    """The operators, schemas, next batch and offsets of the checkpoint at ``location``, or of
    the checkpoint restored from the savepoint at ``location`` (whose ``spark/`` directory holds
    Spark's files of its batch; a restore runs the batch after it first).

    :raises NotACheckpointError: ``location`` is neither a streaming checkpoint nor a savepoint.
    :raises NoCommittedBatchError: it has no planned batch yet (nothing to check against)."""
    savepoint = is_savepoint(location, storage_options)
    spark_files = f"{location.rstrip('/')}/{F.SPARK_DIR}" if savepoint else location
    checkpoint = SparkCheckpoint(spark_files, dict(storage_options or {}))
    offsets = checkpoint.batch_ids("offsets")
    if not offsets:
        raise NoCommittedBatchError(f"{checkpoint.url} has planned no batch yet: any query may start on it")
    last_planned, last_committed = offsets[-1], checkpoint.last_committed()
    next_batch = last_planned + 1 if last_committed == last_planned else last_planned
    storage = checkpoint.storage
    operators: dict[int, HeldOperator] = {}
    for info in checkpoint.operators():
        has_metadata = storage.exists(f"state/{info.id}/{OPERATOR_METADATA}")
        schemas = {store: checkpoint.store_schema(info, store) for store in info.store_names
                   if storage.exists(info.schema_path(store))}
        operators[info.id] = HeldOperator(info.id, info.name, has_metadata, schemas, info.partitions)
    functions = (_savepoint_functions(location, storage_options) if savepoint
                 else _checkpoint_functions(checkpoint, storage_options))
    return HeldState(location, dict(storage_options or {}), operators, next_batch, checkpoint.offset(last_planned),
                     spark_files, functions)


def _savepoint_functions(location: str, storage_options: Optional[Mapping[str, str]]) -> dict[str, HeldFunction]:
    manifest = read_manifest(open_storage(location, dict(storage_options or {})))
    out = {}
    for p in manifest.process:
        states = None
        if p.kind == KEYED and p.key is not None:  # records sort last in each file: read from its end
            states = keyed_state_records(SavepointSource.open(location, p.name, dict(storage_options or {})))
        out[p.name] = HeldFunction(p.name, p.kind, p.key, p.max_parallelism, states)
    return out


def _checkpoint_functions(checkpoint: SparkCheckpoint,
                          storage_options: Optional[Mapping[str, str]]) -> dict[str, HeldFunction]:
    """The functions whose state locations the operations tools' rules find for the checkpoint
    (beside it, or under the former default root); a location given explicitly is not found. Their
    states' records are not read: they are in the partition stores, which would be loaded."""
    out = {}
    for loc in find_process_locations(checkpoint.storage, checkpoint.query_id(), None, {}, dict(storage_options or {})):
        meta = read_meta(loc.storage())
        out[loc.name] = HeldFunction(loc.name, loc.kind, meta.get("key"), meta.get("max_parallelism"))
    return out


def store_of_schema_path(path: str) -> str:
    """The store a schema file path belongs to: ``.../state/<op>/0/_metadata/schema`` is the
    default store, ``.../state/<op>/0/<store>/_metadata/schema`` a named one."""
    parts = path.rstrip("/").split("/")
    return DEFAULT_STORE if parts[-3] == "0" else parts[-3]  # partition 0's directory, or a store's in it
