"""Which keyed function's state a reader reads, and what the state location records about it.

:class:`KeyedSource` is what every reader of :mod:`spark_state.processor` starts from: the
query's checkpoint (Spark's commit log says which batches are committed), the function's state
location (found by the operations tools' rules, :mod:`spark_state.ops.process_locations`), and
what ``_operator.json`` records -- key columns (:class:`~.keys.KeyColumns`) and max parallelism.
Batch ``b``'s state is batch version ``b + 1`` of the location.
"""

from __future__ import annotations

import json
from typing import Mapping, Optional

from ..ops.checkpoint_reader import SparkCheckpoint
from ..ops.process_locations import ProcessLocation, find_process_locations, where_looked
from ..process import location as L
from ..process.plan import KEYED
from ..storage import CheckpointStorage
from .errors import UnknownStateError
from .keys import KeyColumns


class KeyedSource:
    """One keyed function of one query, located (see the module docstring)."""

    def __init__(self, checkpoint: SparkCheckpoint, location: ProcessLocation) -> None:
        self.checkpoint = checkpoint
        self.location = location
        self.storage_options = dict(location.storage_options)
        self.storage: CheckpointStorage = location.storage()
        meta = json.loads(self.storage.read_bytes(L.META_FILE))
        self.key_columns = KeyColumns.from_record(meta, self.storage.full_url(L.META_FILE))
        self.max_parallelism = int(location.max_parallelism or meta["max_parallelism"])

    @classmethod
    def find(cls, checkpoint: str, *, function: Optional[str] = None,
             storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
             process_locations: Optional[Mapping[str, str]] = None) -> "KeyedSource":
        """The keyed function ``function`` of the query of ``checkpoint`` (optional when it has one)."""
        ckpt = SparkCheckpoint(checkpoint, dict(storage_options or {}))
        keyed = keyed_locations(ckpt, storage_options, process_root, process_locations)
        return cls(ckpt, choose(keyed, function, ckpt, process_root))

    @property
    def function(self) -> str:
        return self.location.name

    def committed_batch(self, batch: Optional[int] = None) -> int:
        """``batch`` if committed, else the last committed batch (NoCommittedBatchError if none)."""
        return self.checkpoint.committed_batch(batch)


def keyed_locations(ckpt: SparkCheckpoint, storage_options: Optional[Mapping[str, str]], process_root: Optional[str],
                    process_locations: Optional[Mapping[str, str]]) -> list[ProcessLocation]:
    """The state locations of the query's keyed functions (the operations tools' rules)."""
    found = find_process_locations(ckpt.storage, ckpt.query_id(), process_root, dict(process_locations or {}),
                                   dict(storage_options or {}))
    return [loc for loc in found if loc.kind == KEYED]


def choose(keyed: list[ProcessLocation], function: Optional[str], ckpt: SparkCheckpoint,
           process_root: Optional[str]) -> ProcessLocation:
    """The location of ``function`` among ``keyed``; without ``function``, the only one.

    :raises UnknownStateError: no such function, none at all, or several and none named."""
    names = [loc.name for loc in keyed]
    if function is not None:
        for loc in keyed:
            if loc.name == function:
                return loc
        raise UnknownStateError(
            f"the query of {ckpt.url} has no keyed function named {function!r} "
            f"(keyed functions found: {', '.join(names) or 'none'}; looked "
            f"{where_looked(ckpt.storage, ckpt.query_id(), process_root)})")
    if len(keyed) == 1:
        return keyed[0]
    if not keyed:
        raise UnknownStateError(
            f"the query of {ckpt.url} has no keyed function state (looked "
            f"{where_looked(ckpt.storage, ckpt.query_id(), process_root)}); a function given "
            "state_location= is found with process_locations={name: url} (--process-location NAME=URL)")
    raise UnknownStateError(
        f"the query of {ckpt.url} has several keyed functions ({', '.join(names)}): name one "
        "with function= (--function NAME)")
