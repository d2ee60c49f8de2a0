"""Which keyed function's state a reader reads, and what the state location records about it.

:class:`KeyedSource` is what every reader of :mod:`spark_state.state_data` starts from: the
query's checkpoint (Spark's commit log says which batches are committed), the function's state
location (found by the operations tools' rules, :mod:`spark_state.ops.process_locations`), and
what ``_operator.json`` records -- key columns (:class:`~.keys.KeyColumns`) and max parallelism.
Batch ``b``'s state is batch version ``b + 1`` of the location.

:func:`choose_function` is the one chooser of "which function" for every reader, of a
checkpoint (:func:`choose`) and of a savepoint (:class:`~.savepoints.SavepointSource`).
"""

from __future__ import annotations

from typing import Mapping, Optional, Protocol, Sequence, TypeVar

from ...ops.checkpoint_reader import SparkCheckpoint
from ...ops.process_locations import ProcessLocation, find_process_locations, where_looked
from ...process import location as L
from ...process.plan import KEYED
from ...storage import CheckpointStorage
from ..errors import UnknownStateError
from ..key_columns import KeyColumns


class KeyedSource:
    """One keyed function of one query, located (see the module docstring)."""

    def __init__(self, checkpoint: SparkCheckpoint, location: ProcessLocation) -> None:
        self.checkpoint = checkpoint
        self.location = location
        self.storage_options = dict(location.storage_options)
        self.storage: CheckpointStorage = location.storage()
        meta = L.read_meta(self.storage)
        self.key_columns = KeyColumns.from_record(meta, self.storage.full_url(L.META_FILE))
        self.max_parallelism = int(location.max_parallelism or meta["max_parallelism"])

    @classmethod
    def find(cls, checkpoint: str, *, function: Optional[str] = None,
             storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
             process_locations: Optional[Mapping[str, str]] = None) -> "KeyedSource":
        """The keyed function ``function`` of the query of ``checkpoint`` (optional when it has one)."""
        ckpt = SparkCheckpoint(checkpoint, dict(storage_options or {}))
        keyed = keyed_locations(ckpt, storage_options, process_root, process_locations)
        return cls(ckpt, choose(keyed, function, ckpt, process_root, process_locations))

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


class Named(Protocol):
    """A function's entry in a checkpoint (:class:`ProcessLocation`) or a savepoint's manifest."""

    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def choose_function(functions: Sequence[N], function: Optional[str], where: str, *, looked: Optional[str] = None,
                    kind: str = "keyed function") -> N:
    """The entry of ``function`` among ``functions``; without ``function``, the only one. The one
    chooser of every reader of a checkpoint or a savepoint, so their errors read alike.

    Args:
        functions: the functions found (each with a ``name``).
        function: the name asked for (``function=``, ``--function``), or None.
        where: what was searched, for messages (``the query of <checkpoint>``, ``the savepoint <url>``).
        looked: where the search looked (:func:`~spark_state.ops.process_locations.where_looked`), if
            it looked in several places.
        kind: what the functions are, for messages (``keyed function``, ``function``).

    :raises UnknownStateError: no such function, none at all, or several and none named.
    """
    names = ", ".join(f.name for f in functions) or "none"
    at = f"; looked {looked}" if looked else ""
    if function is not None:
        for entry in functions:
            if entry.name == function:
                return entry
        raise UnknownStateError(f"{where} has no {kind} named {function!r} ({kind}s found: {names}{at})")
    if len(functions) == 1:
        return functions[0]
    if not functions:
        raise UnknownStateError(
            f"{where} has no {kind} state" + (f" (looked {looked}); a function given state_location= is found "
                                              "with process_locations={name: url} (--process-location NAME=URL)"
                                              if looked else ""))
    raise UnknownStateError(f"{where} has several {kind}s ({names}): name one with function= "
                            "(the data source's functionName, --function NAME)")


def choose(keyed: list[ProcessLocation], function: Optional[str], ckpt: SparkCheckpoint,
           process_root: Optional[str], process_locations: Optional[Mapping[str, str]] = None,
           kind: str = "keyed function") -> ProcessLocation:
    """:func:`choose_function` over the state locations found for the query of ``ckpt``."""
    return choose_function(keyed, function, f"the query of {ckpt.url}", kind=kind,
                           looked=where_looked(ckpt.storage, ckpt.query_id(), process_root, process_locations))
