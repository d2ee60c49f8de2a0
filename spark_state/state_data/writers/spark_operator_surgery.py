"""Savepoint surgery on Spark operators' state: a store's whole content replaced by the rows of a
DataFrame (e.g. an aggregation's counts corrected), in the form the savepoint holds it.

A savepoint holds store ``<store>`` of Spark's operator ``<op>`` as one state file per partition,
``state/<op>/<store>/<p>.arrow`` (:mod:`spark_state.ops.savepoint_format`), whichever provider
the query ran on (Spark's HDFS and RocksDB providers' rows are given this layout when the
savepoint is taken): entries ``[key group u16][hash32 i32][key UnsafeRow] -> value UnsafeRow``
(:mod:`spark_state.keys.provider`), where ``hash32`` is Spark's Murmur3 hash of the key's
columns, the hash its shuffle routes the key by, so a key's partition is ``pmod(hash32, n)``.
The manifest records each store's key and value schema, as Spark's schema file of the store
(``spark/state/<op>/0[/<store>]/_metadata/schema``, copied beside) holds them.

The rows have a ``key`` and a ``value`` struct column (as Spark's ``statestore`` reader gives
them: :func:`~..readers.spark_operator_state.read_spark_operator_state`), whose fields must be
the recorded ones, by name and type, before anything is written
(:func:`~.transform_checks.check_spark_rows`). Each key is hashed and routed to its partition;
each task writes its partition's file from the rows' entries and the savepoint file's system
keys (the store's records), sorted by the external sort
(:func:`~spark_state.engine.spill.external_sort`). Stores with a prefix key (session windows,
joins' keyWithIndexToValue), stores of TTL-stamped values and rows of other than flat types
(:data:`~spark_state.keys.unsafe_row_writer.WRITABLE_TYPES`) are refused.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator, Mapping

from pyspark.sql import DataFrame, SparkSession

from ...keys.provider import provider_key
from ...keys.system import SYSTEM_PREFIX, TTL_MARKER_TAG
from ...keys.unsafe_row_writer import unsafe_row
from ...ops import savepoint_format as F
from ...ops.state_files import read_state_entries, verified_file
from ...partitioning.spark_hash import spark_hash, spark_partition_id
from ...storage import CheckpointStorage, open_storage
from ..errors import StateDataError
from ..location.spark_stores import choose_spark_store, savepoint_spark_stores
from ..partition_jobs import each_routed_partition
from .transform_checks import check_spark_rows
from .keyed_state_surgery import write_sorted


def spark_store(manifest: F.SavepointManifest, where: str, operator_id: int,
                store_name: str) -> tuple[F.OperatorEntry, F.StoreEntry]:
    """Store ``store_name`` of Spark's operator ``operator_id`` in the savepoint
    (:func:`~..location.spark_stores.choose_spark_store`).

    Raises:
        UnknownStateError: no such operator or store (listing those the savepoint holds).
        StateDataError: a store with a prefix key.
    """
    choose_spark_store(savepoint_spark_stores(manifest), operator_id, store_name, f"the savepoint {where}")
    op = next(o for o in manifest.operators if o.id == operator_id)
    store = next(s for s in op.stores if s.name == store_name)
    if store.num_cols_prefix_key:
        raise StateDataError(f"store {store_name!r} of Spark operator {operator_id} ({op.name}) keys its rows with a "
                             "prefix (session windows, joins): its rows are not rewritten here")
    return op, store


def check_unstamped(storage: CheckpointStorage, manifest: F.SavepointManifest, op: F.OperatorEntry,
                    store: F.StoreEntry) -> None:
    """Refuse a store whose values are TTL-stamped (``[last access ms][row]``, a TTL marker among
    its system keys, which go to every partition): the rows written here are plain value rows.
    Reads partition 0's file from its last record batch back to its first data key.

    Raises:
        StateDataError: naming the store.
    """
    marker = SYSTEM_PREFIX + TTL_MARKER_TAG
    path = F.state_file(op.id, store.name, 0)
    with verified_file(storage, manifest, path) as local:
        for batch in F.read_batches(local, storage.full_url(path), reverse=True):
            keys = batch.column(0).to_pylist()
            if any(k[:2] == marker for k in keys):
                raise StateDataError(f"store {store.name!r} of Spark operator {op.id} ({op.name}) holds TTL-stamped "
                                     "values: its rows are not rewritten here")
            if keys and keys[0][:1] != SYSTEM_PREFIX:
                return


def replace_spark_state(spark: SparkSession, url: str, options: Mapping[str, str], manifest: F.SavepointManifest,
                        op: F.OperatorEntry, store: F.StoreEntry, rows: DataFrame, out_url: str,
                        out_options: Mapping[str, str]) -> dict[int, F.FileEntry]:
    """Write every partition file of the store into the savepoint at ``out_url`` from ``rows`` and
    the source savepoint's system keys (see the module docstring); returns the files written."""
    encode = SparkEntries(op, store, *check_spark_rows(op, store, rows.schema))
    source_options, target_options = dict(options), dict(out_options)

    def run(partition: int, items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[int, F.FileEntry]]:
        yield partition, write_spark_partition(url, source_options, manifest, op, store, partition, items, out_url,
                                               target_options)

    # the tasks' FileEntry objects, pickled back
    return dict(each_routed_partition(rows.select("key", "value").rdd.map(encode), op.partitions, run))


def write_spark_store(op: F.OperatorEntry, store: F.StoreEntry, rows: DataFrame, out_url: str,
                      out_options: Mapping[str, str]) -> dict[int, F.FileEntry]:
    """Every partition file of store ``store`` of operator ``op`` written into the savepoint at
    ``out_url`` from ``rows`` alone (``key`` and ``value`` in the entries' recorded schemas): a store
    that no source file holds under this operator id, such as a state carried over to a new key
    or a new operator's state bootstrapped (:mod:`spark_state.upgrade.carry_over`). Returns the
    files written; a partition without rows gets a file without entries."""
    encode = SparkEntries(op, store, *check_spark_rows(op, store, rows.schema))
    target_options = dict(out_options)

    def run(partition: int, items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[int, F.FileEntry]]:
        yield partition, write_sorted(out_url, target_options, F.state_file(op.id, store.name, partition),
                                      lambda work: items)

    return dict(each_routed_partition(rows.select("key", "value").rdd.map(encode), op.partitions, run))


class SparkEntries:
    """A row's ``key`` and ``value`` (sequences of the fields' values, in the recorded schemas'
    order) as ``(partition, (key, value))``: the entry the store holds and the partition Spark's
    shuffle routes the key to (picklable: it runs in the tasks)."""

    def __init__(self, op: F.OperatorEntry, store: F.StoreEntry, key_types: list[str],
                 value_types: list[str]) -> None:
        self.partitions, self.key_types, self.value_types = op.partitions, key_types, value_types

    def __call__(self, row: Any) -> tuple[int, tuple[bytes, bytes]]:
        return self.entry(tuple(row[0]), tuple(row[1]))

    def entry(self, key: tuple, value: tuple) -> tuple[int, tuple[bytes, bytes]]:
        hash32 = spark_hash(key, self.key_types)
        return spark_partition_id(hash32, self.partitions), (provider_key(hash32, unsafe_row(key, self.key_types)),
                                                             unsafe_row(value, self.value_types))


def write_spark_partition(url: str, options: Mapping[str, str], manifest: F.SavepointManifest, op: F.OperatorEntry,
                          store: F.StoreEntry, partition: int, items: Iterable[tuple[bytes, bytes]], out_url: str,
                          out_options: Mapping[str, str]) -> F.FileEntry:
    """Partition ``partition``'s file of the store written into the savepoint at ``out_url``: the
    source file's system keys (the store's records) and ``items`` (the partition's entries, in any
    order), sorted (:func:`~.keyed_state_surgery.write_sorted`); returns its manifest entry."""
    path = F.state_file(op.id, store.name, partition)

    def entries(work: str) -> Iterator[tuple[bytes, bytes]]:
        kept = read_state_entries(open_storage(url, dict(options)), manifest, path, work)
        return itertools.chain(((k, v) for k, v in kept if k[:1] == SYSTEM_PREFIX), items)

    return write_sorted(out_url, out_options, path, entries)
