"""A savepoint's state replaced from rows staged by partition: what ``df.write.format("spark-state")``
writes (:mod:`..datasource.writer`), in three steps that need no Spark session.

1. :func:`plan_write`, on the driver before any task runs: the options
   (:class:`~..write_options.WriteOptions`) and the rows' schema are checked against the savepoint
   (the state or store exists, the key columns and the ``value`` type are the recorded ones, the
   target is new or empty) with :class:`~.transform.SavepointTransform`'s checks; a keyed state's
   descriptor is rebuilt from its schema record (:mod:`.record_descriptor`). Nothing is written.
2. The write tasks route each row to its partition with the query's own arithmetic
   (:meth:`StagedKeyed.route`: key group ``pmod(hash(key columns), max parallelism)``, partition by
   Flink's operator index; :meth:`StagedSpark.route`: Spark's shuffle hash of the key) and stage
   the rows (:mod:`.staging`).
3. :func:`apply_staged`, once every task has succeeded: the source savepoint's unchanged files
   are copied (:mod:`.savepoint_copy`), each partition file is written from its staged rows by
   the per-partition code of the transform (:func:`~.keyed_replacement.replace_partition`,
   :func:`~.spark_operator_surgery.write_spark_partition`), partition after partition, and the
   manifest last: a target without a manifest is no savepoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Union

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from ...ops import savepoint_format as F
from ...ops.errors import TargetExistsError
from ...ops.savepoint import check_empty_target
from ...ops.savepoint_manifest import read_manifest
from ...partitioning.keygroups import compute_operator_index_for_key_group
from ...process.offline import plan_offline_routed
from ...process.plan import ProcessPlan
from ...process.routing import KEY_GROUP_COLUMN
from ...state.descriptors import StateDescriptor
from ...storage import open_storage
from ..errors import StateDataError, UnknownStateError
from ..location.savepoints import SavepointSource
from ..read_options import SOURCE, OptionError
from ..write_options import WriteOptions
from .keyed_replacement import StateWriter, replace_partition, replacement_options, state_kind
from .keyed_state_surgery import keyed_state_records
from .record_descriptor import descriptor_of_record
from .savepoint_copy import copy_unchanged
from .spark_operator_surgery import SparkEntries, check_unstamped, spark_store, write_spark_partition
from .staging import staged_batches
from .transform_checks import check_rows, check_spark_rows

__all__ = ["StagedKeyed", "StagedSpark", "apply_staged", "plan_write"]

#: The staged form of a Spark store's rows: its entries, routed.
_ENTRIES = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary())])


@dataclass(frozen=True)
class StagedKeyed:
    """A keyed state replaced from staged rows (picklable: the tasks route with it)."""

    source: SavepointSource
    descriptor: StateDescriptor
    plan: ProcessPlan

    @property
    def partitions(self) -> int:
        return self.source.entry.parallelism

    def route(self, batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
        """``batch``'s key columns and ``value`` with the key group column, split by partition."""
        key_columns = self.source.key_columns
        names = [*key_columns.columns, "value"]
        rows = pa.RecordBatch.from_arrays([batch.column(n) for n in names], names=names)
        max_p, n = self.source.max_parallelism, self.partitions
        keys = list(zip(*(rows.column(c).to_pylist() for c in key_columns.columns)))
        groups = [key_columns.key_group(k, max_p) for k in keys]
        routed = rows.append_column(KEY_GROUP_COLUMN, pa.array(groups, pa.int32()))
        targets = pa.array([compute_operator_index_for_key_group(max_p, n, g) for g in groups], pa.int32())
        yield from _split(routed, targets)

    def apply(self, partition: int, batches: Iterator[pa.RecordBatch], url: str,
              options: Mapping[str, str]) -> F.FileEntry:
        return replace_partition(self.plan, self.source, self.descriptor, partition, batches, url, options)


@dataclass(frozen=True)
class StagedSpark:
    """A Spark operator's store replaced from staged entries (picklable)."""

    url: str
    options: Mapping[str, str]
    manifest: F.SavepointManifest
    op: F.OperatorEntry
    store: F.StoreEntry
    entries: SparkEntries

    @property
    def partitions(self) -> int:
        return self.op.partitions

    def route(self, batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
        """``batch``'s rows as the store's entries, split by the partition Spark routes their key to."""
        pairs = [self.entries.entry(tuple(k.values()), tuple(v.values()))
                 for k, v in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist())]
        entries = pa.RecordBatch.from_arrays([pa.array([e[0] for _, e in pairs], pa.binary()),
                                              pa.array([e[1] for _, e in pairs], pa.binary())], schema=_ENTRIES)
        yield from _split(entries, pa.array([p for p, _ in pairs], pa.int32()))

    def apply(self, partition: int, batches: Iterator[pa.RecordBatch], url: str,
              options: Mapping[str, str]) -> F.FileEntry:
        items = (entry for b in batches for entry in zip(b.column(0).to_pylist(), b.column(1).to_pylist()))
        return write_spark_partition(self.url, self.options, self.manifest, self.op, self.store, partition, items,
                                     url, options)


Staged = Union[StagedKeyed, StagedSpark]


def _split(batch: pa.RecordBatch, targets: pa.Array) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``batch``'s rows by their partition in ``targets`` (one per row)."""
    for partition in pc.unique(targets).to_pylist():
        yield partition, batch.filter(pc.equal(targets, partition))


def plan_write(options: WriteOptions, schema: T.StructType) -> Staged:
    """The replacement ``options`` ask for, once rows of ``schema`` and the target fit it (see the
    module docstring). Nothing is written.

    :raises OptionError: an unknown function, state, operator or store, or a target that is not
        new or empty (named as the data source spells the option).
    :raises KeyMismatchError: the key columns are not the recorded ones.
    :raises StateDataError: the ``value`` column (or a Spark store's ``key`` and ``value``) does not
        fit the recorded type, or the state cannot be written here."""
    storage = dict(options.storage_options)
    target = open_storage(options.target, storage)
    try:
        check_empty_target(target, options.target)
    except TargetExistsError as e:
        raise OptionError("target", _literal(str(e)) + " ({option})", SOURCE) from None
    if options.operator_id is not None:
        sp = open_storage(options.path, storage)
        manifest = read_manifest(sp)
        try:
            op, store = spark_store(manifest, sp.url, options.operator_id, options.store_name or "default")
        except UnknownStateError as e:
            raise OptionError("operator_id" if options.store_name is None else "store_name",
                              _literal(str(e)) + " ({option})", SOURCE) from None
        types = check_spark_rows(op, store, schema)
        check_unstamped(sp, manifest, op, store)
        return StagedSpark(sp.url, storage, manifest, op, store, SparkEntries(op, store, *types))
    assert options.state is not None  # WriteOptions names one state
    try:
        source = SavepointSource.open(options.path, options.function, storage)
    except UnknownStateError as e:
        raise OptionError("function", _literal(str(e)) + " ({option})", SOURCE) from None
    records = keyed_state_records(source)
    if options.state not in records:
        held = _literal(f"function {source.function!r} of the savepoint {source.url} holds no keyed state "
                        f"{options.state!r} (its states: {', '.join(sorted(records)) or 'none'})")
        raise OptionError("state", held + ": {option} names a state the savepoint records "
                                          "(SavepointTransform.replace_keyed_state adds one)", SOURCE)
    descriptor = descriptor_of_record(options.state, records[options.state])
    kind = state_kind(descriptor)
    try:
        check_rows(source, descriptor, kind, schema)
    except StateDataError as e:
        if kind in ("list", "map") and "cast the column" in str(e):
            raise type(e)(f"{e} (the data source reads list and map state a row per element unless "
                          "flattenCollectionTypes is false: write the nested form)") from None
        raise
    plan = plan_offline_routed(source.key_columns.fields, StateWriter(descriptor, kind),
                               replacement_options(source, descriptor))
    return StagedKeyed(source, descriptor, plan)


def apply_staged(staged: Staged, options: WriteOptions, staging: str, files: Mapping[int, Iterable[str]]) -> str:
    """Write the new savepoint at ``options.target``: the source's unchanged files, every partition
    of the replaced state from its staged ``files`` (under ``staging``; a partition without any
    holds no entry of the state), the manifest last. Returns the target's URL.

    :raises OptionError: the target is no longer new or empty."""
    storage = dict(options.storage_options)
    sp = open_storage(options.path, storage)
    manifest = read_manifest(sp)
    out = open_storage(options.target, storage)
    try:
        check_empty_target(out, options.target)
    except TargetExistsError as e:
        raise OptionError("target", _literal(str(e)) + " ({option})", SOURCE) from None
    if isinstance(staged, StagedKeyed):
        new = copy_unchanged(sp, manifest, out, rewritten={staged.source.function})
    else:
        new = copy_unchanged(sp, manifest, out, spark_replaced=(f"{F.STATE_DIR}/{staged.op.id}/{staged.store.name}/",))
    written = [staged.apply(p, staged_batches(staging, storage, files.get(p, ())), out.url, storage)
               for p in range(staged.partitions)]
    new.files.extend(written)
    out.write_bytes(F.MANIFEST, new.to_json())
    return out.url


def _literal(text: str) -> str:
    """``text`` as literal text of an :class:`OptionError` template (its braces escaped)."""
    return text.replace("{", "{{").replace("}", "}}")
