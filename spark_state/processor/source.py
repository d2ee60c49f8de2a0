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

    def __init__(self, checkpoint: str, *, function: Optional[str] = None,
                 storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
                 process_locations: Optional[Mapping[str, str]] = None) -> None:
        self.storage_options = dict(storage_options or {})
        self.checkpoint = SparkCheckpoint(checkpoint, self.storage_options)
        found = find_process_locations(self.checkpoint.storage, self.checkpoint.query_id(), process_root,
                                       dict(process_locations or {}), self.storage_options)
        self.location = _choose([loc for loc in found if loc.kind == KEYED], function, self.checkpoint, process_root)
        self.storage: CheckpointStorage = self.location.storage()
        meta = json.loads(self.storage.read_bytes(L.META_FILE))
        self.key_columns = KeyColumns.from_record(meta, self.storage.full_url(L.META_FILE))
        self.max_parallelism = int(self.location.max_parallelism or meta["max_parallelism"])

    @property
    def function(self) -> str:
        return self.location.name

    def committed_batch(self, batch: Optional[int] = None) -> int:
        """``batch`` if committed, else the last committed batch (NoCommittedBatchError if none)."""
        return self.checkpoint.committed_batch(batch)


def _choose(keyed: list[ProcessLocation], function: Optional[str], ckpt: SparkCheckpoint,
            process_root: Optional[str]) -> ProcessLocation:
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
