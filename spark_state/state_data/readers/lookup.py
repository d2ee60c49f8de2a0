"""Point lookups: one key's value in one state of a keyed function, outside Spark.

::

    from spark_state.state_data import StateLookup
    with StateLookup("/ckpt") as states:            # the query's checkpointLocation, or a savepoint
        states.get("counts", "alice")               # -> 42, or None
        states.lookup("events", 7, batch=12)        # -> LookupResult (value, batch, partition, ...)

    spark-state get /ckpt counts alice [--function NAME] [--batch B] [--json]

What a lookup reads. Batch ``b``'s state is batch version ``b + 1`` of the function's state
location (:mod:`spark_state.process.location`); without ``batch``, ``b`` is the last batch in
Spark's commit log, which Spark writes only after every task committed its state: a lookup
never sees an uncommitted version, even while the query runs. The key's key group
(:mod:`..key_columns`) names the one partition store that holds it; only that store is loaded (its
snapshot and the changelogs after it) -- the other partitions are not read. The state's schema
record, stored with it, says how to decode the entries (:mod:`..codecs`).

A savepoint (:mod:`spark_state.ops.savepoint_format`) holds one batch: the key's partition
state file is checked and loaded into a temporary store
(:meth:`~..location.savepoints.SavepointSource.load`), and ``batch`` is that batch or omitted.

A key that has no value in a state (never set, cleared, expired; for list and map state: no
element) is not ``found``, and its ``value`` is None.

A :class:`StateLookup` keeps the partition stores it loaded: the next lookup in the same
partition reads the local copy (microseconds), and a newer committed batch is brought in by
replaying only its changelogs. Close it (or use ``with``) to delete the local copies.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional

from ...engine.store import VersionedStore, prefix_upper_bound
from ...keys import keyed as K
from ...ops.process_locations import ProcessLocation
from ...ops.state_io import open_committed, process_layout, reader_config
from ...partitioning.keygroups import compute_operator_index_for_key_group
from ...process import location as L
from ...state.schema import StateSchema
from ..codecs import StateCodec
from ..location.functions import KeyedSource
from ..location.records import find_state_record, keyed_records, state_codec
from ..location.savepoints import SavepointSource, is_savepoint, savepoint_batch

__all__ = ["LookupResult", "StateLookup", "lookup"]


@dataclass(frozen=True)
class LookupResult:
    """One lookup's answer: ``value`` (None when not ``found``) and where it came from."""

    function: str
    state: str
    kind: str
    key: tuple
    found: bool
    value: Any
    batch: int
    key_group: int
    partition: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``--json``): values as JSON has them, others as their ``str``."""
        return json.loads(json.dumps(asdict(self), default=_plain))


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


class StateLookup:
    """Point lookups of one query's keyed-function state (see the module docstring).

    Args:
        path: the query's ``checkpointLocation`` (local path, ``s3://``, ``hdfs://``), or a
            savepoint directory.
        function: the keyed function's name (``name=``); optional when the query has one.
        storage_options: storage options (``s3.*``), for the checkpoint (or savepoint) and the state.
        process_root: the root given to the query as ``state_root=`` (state kept under
            ``<root>/<query id>/<name>``); not needed for state beside the checkpoint.
        process_locations: ``{function name: url}`` for functions given ``state_location=``.
        allow_pickle: decode pickled values (unpickling runs whatever the stored bytes say).
        local_dir: where the local copies of loaded stores go (default: a temporary directory).
    """

    def __init__(self, path: str, *, function: Optional[str] = None,
                 storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
                 process_locations: Optional[Mapping[str, str]] = None, allow_pickle: bool = False,
                 local_dir: Optional[str] = None) -> None:
        self.savepoint: Optional[SavepointSource] = None
        self.source: Optional[KeyedSource] = None
        #: the function's state location (None for a savepoint)
        self.location: Optional[ProcessLocation] = None
        if is_savepoint(path, storage_options):
            self.savepoint = SavepointSource.open(path, function, storage_options)
            self.function = self.savepoint.function
            self.key_columns = self.savepoint.key_columns
            self._max_parallelism = self.savepoint.max_parallelism
        else:
            self.source = KeyedSource.find(path, function=function, storage_options=storage_options,
                                           process_root=process_root, process_locations=process_locations)
            self.function = self.source.function
            self.location = self.source.location
            self.key_columns = self.source.key_columns
            self._max_parallelism = self.source.max_parallelism
        self._allow_pickle = allow_pickle
        self._own_dir = local_dir is None
        self._local_dir = local_dir or tempfile.mkdtemp(prefix="spark-state-lookup-")
        self._commits: set[int] = set()
        self._layouts: dict[tuple[int, L.Layout], set[int]] = {}
        #: loaded stores by (layout, partition); a savepoint's by (None, partition)
        self._stores: dict[tuple[Optional[L.Layout], int], VersionedStore] = {}
        self._codecs: dict[tuple[Optional[L.Layout], int, int, str], Optional[StateCodec]] = {}

    # ------------------------------------------------------------------ lookups
    def get(self, state: str, key: Any, default: Any = None, *, batch: Optional[int] = None) -> Any:
        """The value of ``key`` in ``state`` after ``batch`` (default: the last committed batch),
        or ``default`` when the key has none."""
        result = self.lookup(state, key, batch=batch)
        return result.value if result.found else default

    def lookup(self, state: str, key: Any, *, batch: Optional[int] = None,
               now_ms: Optional[int] = None) -> LookupResult:
        """The value of ``key`` in ``state`` after ``batch``, with where it was found.

        ``key``: as the function's ``ctx.current_key`` shows it (a scalar for one key column, a
        tuple or a dict by column name for several). ``now_ms``: the time TTL expiry is judged
        at (default: now); expired values are not found, as the function would not see them.

        :raises UnknownStateError: no state of that name (the message lists the states).
        :raises KeyMismatchError: the key does not fit the recorded key columns.
        """
        values = self.key_columns.values(key)
        key_bytes = self.key_columns.encode(values)
        key_group = self.key_columns.key_group(values, self._max_parallelism)
        committed = self._committed(batch)
        layout, partition = self._placed(committed + 1, key_group)
        store = self._store(layout, partition, committed + 1)
        codec = self._codec(store, layout, partition, committed + 1, state)
        if codec is None:  # this partition never held the state: its kind is recorded elsewhere, or nowhere
            kind = self._kind_elsewhere(layout, committed + 1, state)
            return LookupResult(self.function, state, kind, values, False, None, committed, key_group, partition)
        base = K.entry_key(key_group, state.encode("utf-8"), key_bytes)
        entries = store.iterate(base, prefix_upper_bound(base))
        found, value = codec.value_of(len(base), entries, int(time.time() * 1000) if now_ms is None else now_ms)
        return LookupResult(self.function, state, codec.kind, values, found, value, committed, key_group, partition)

    def states(self, *, batch: Optional[int] = None) -> dict[str, str]:
        """The function's keyed states after ``batch`` and what they hold (``value state of
        bigint``), from the schema records of every partition store."""
        version = self._committed(batch) + 1
        layout = self._whole_layout(version)
        out: dict[str, StateSchema] = {}
        for partition in range(self._parallelism(layout)):
            out.update(keyed_records(self._store(layout, partition, version)))
        return {name: record.describe() for name, record in sorted(out.items())}

    # ------------------------------------------------------------------ batches and layouts
    def _committed(self, batch: Optional[int]) -> int:
        """``batch`` if Spark's commit log has it, else the last committed batch (one listing
        of ``commits/``; a batch found committed before needs none). A savepoint's: its batch."""
        if self.savepoint is not None:
            return savepoint_batch(self.savepoint.url, self.savepoint.manifest, batch)
        assert self.source is not None
        ckpt = self.source.checkpoint
        if batch is None or batch not in self._commits:
            self._commits = set(ckpt.batch_ids("commits"))
        if batch is None:
            if not self._commits:
                return ckpt.committed_batch()  # raises NoCommittedBatchError, saying so
            return max(self._commits)
        if batch not in self._commits:
            return ckpt.committed_batch(batch)  # raises NoCommittedBatchError, naming what is
        return batch

    def _placed(self, version: int, key_group: int) -> tuple[Optional[L.Layout], int]:
        """``(layout, partition)`` of the store holding ``key_group`` at ``version`` (a
        savepoint's layout is its manifest's: None here)."""
        if self.savepoint is not None:
            return None, self._partition(self.savepoint.entry.parallelism, key_group)
        layout = self._layout(version, key_group)
        return layout, self._partition(layout.parallelism, key_group)

    def _whole_layout(self, version: int) -> Optional[L.Layout]:
        """The layout of ``version`` with every partition committed (None: a savepoint's)."""
        if self.savepoint is not None:
            return None
        assert self.source is not None
        return process_layout(self.source.storage, version)

    def _parallelism(self, layout: Optional[L.Layout]) -> int:
        if layout is None:
            assert self.savepoint is not None
            return self.savepoint.entry.parallelism
        return layout.parallelism

    def _layout(self, version: int, key_group: int) -> L.Layout:
        """The layout holding the committed copy of ``version`` in the key group's partition
        (found once per version and partition: committed copies never change)."""
        for (cached_version, layout), partitions in self._layouts.items():
            if cached_version == version and self._partition(layout.parallelism, key_group) in partitions:
                return layout
        assert self.source is not None
        layout = process_layout(self.source.storage, version,
                                lambda lay: [self._partition(lay.parallelism, key_group)])
        self._layouts.setdefault((version, layout), set()).add(self._partition(layout.parallelism, key_group))
        return layout

    # ------------------------------------------------------------------ stores
    def _partition(self, parallelism: int, key_group: int) -> int:
        return compute_operator_index_for_key_group(self._max_parallelism, parallelism, key_group)

    def _store(self, layout: Optional[L.Layout], partition: int, version: int) -> VersionedStore:
        store = self._stores.get((layout, partition))
        if layout is None:  # a savepoint's partition: its state file, loaded once
            if store is None:
                assert self.savepoint is not None
                store = self.savepoint.load(partition, tempfile.mkdtemp(prefix=f"p{partition}-", dir=self._local_dir))
                self._stores[(layout, partition)] = store
            return store
        store_version = layout.store_version(version)
        if store is None:
            assert self.source is not None
            storage = self.source.storage
            store = open_committed(storage.child(layout.store_path(partition)), store_version,
                                   reader_config(local_dir=self._local_dir), layout.base, registry=storage)
            self._stores[(layout, partition)] = store
        elif store.version != store_version:
            store.load(store_version)  # a later batch: replays its changelogs on the local copy
        return store

    def _codec(self, store: VersionedStore, layout: Optional[L.Layout], partition: int, version: int,
               state: str) -> Optional[StateCodec]:
        """The state's codec in this partition store; None if the store never held the state."""
        cache_key = (layout, partition, version, state)
        if cache_key not in self._codecs:
            self._codecs[cache_key] = state_codec(store, state, self._allow_pickle)
        return self._codecs[cache_key]

    def _kind_elsewhere(self, layout: Optional[L.Layout], version: int, state: str) -> str:
        """The state's kind from another partition store's record (a partition none of whose
        keys held the state has none). Loads the other partitions: a rare path (a typo, or a
        state few keys hold)."""
        stores = (keyed_records(self._store(layout, partition, version))
                  for partition in range(self._parallelism(layout)))
        return find_state_record(stores, state, self.function).kind

    def close(self) -> None:
        """Close the loaded stores and delete their local copies."""
        for store in self._stores.values():
            store.close()
        self._stores.clear()
        if self._own_dir:
            shutil.rmtree(self._local_dir, ignore_errors=True)

    def __enter__(self) -> "StateLookup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def lookup(path: str, state: str, key: Any, *, function: Optional[str] = None, batch: Optional[int] = None,
           storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
           process_locations: Optional[Mapping[str, str]] = None, allow_pickle: bool = False) -> LookupResult:
    """One lookup (:meth:`StateLookup.lookup`) in a checkpoint or a savepoint at ``path``, loading
    only the partition store the key needs."""
    with StateLookup(path, function=function, storage_options=storage_options, process_root=process_root,
                     process_locations=process_locations, allow_pickle=allow_pickle) as states:
        return states.lookup(state, key, batch=batch)
