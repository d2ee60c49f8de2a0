"""Transform: a new savepoint from an existing one, through DataFrame jobs.

::

    from spark_state.state_data import SavepointTransform
    t = SavepointTransform(spark, "/savepoints/sp1")
    counts = t.read_keyed_state("count")                                 # key columns, value
    fixed = counts.where("k != 'bot'").withColumn("value", F.col("value").cast("string"))
    (t.replace_keyed_state(ValueStateDescriptor("count", StringType()), fixed)
      .write("/savepoints/sp2"))                                          # then spark-state restore

A replacement gives a keyed state its whole new content: one row per key, the key columns
(the names and types the function is keyed by) and ``value`` -- the value (value, reducing
state), an array (list state), a map (map state) or the accumulator (aggregating state), as
:func:`~..readers.keyed_state.read_keyed_state` reads them. Keys without a row lose the state; the other
states, the timers and everything else of the savepoint are copied unchanged.

How. A replacement is a Spark job: its rows are routed by key group to the partitions of the
function's layout (as the query routes them); each task loads the partition's entries from the
savepoint without the state's entries (values, schema record, TTL marker and index), then
writes every row through the state objects of ``descriptor`` -- the runtime's own code, so the
values are checked and encoded by the descriptor's serializer, TTL stamps are written for a
descriptor with TTL, and the schema record is the descriptor's (a changed type is recorded, and
the query that restores the savepoint must declare it). Replacements of one function run one
after the other, each on the previous one's files. The key columns and the ``value`` column are
checked against the recorded key columns and the descriptor's type before anything is written;
the manifest, written last, lists every file with its size and CRC-32.

Surgery (Flink's ``SavepointWriter.fromExistingSavepoint``): ``remove_state`` drops every entry of
a keyed state, ``rename_state`` re-keys them under a new name, ``remove_function`` drops a
function's files and manifest entry (and, with ``tick_source=``, its tick source from Spark's
logs), and ``replace_keyed_state`` of a state the savepoint lacks adds it. Every change is checked
when it is called (unknown state or function, a name clash) and applied by ``write``, in the order
called; removals and renames are per-partition Spark jobs (:mod:`.keyed_state_surgery`) that run no user code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from pyspark.sql import DataFrame, SparkSession

from ...deprecation import renamed_arguments
from ...ops import savepoint_format as F
from ...ops.savepoint_manifest import read_manifest
from ...ops.state_files import read_verified
from ...process.offline import plan_offline
from ...process.plan import KEYED
from ...state.descriptors import StateDescriptor
from ...storage import open_storage
from ..errors import StateDataError, UnknownStateError
from ..location.functions import choose_function
from ..location.savepoints import SavepointSource
from ..readers.keyed_state import read_keyed_state, read_timers
from ..readers.operator_state import read_function_operator_state
from .keyed_replacement import StateWriter, replacement_options, state_kind, write_routed
from .keyed_state_surgery import BaseEntries, check_tick_source, keyed_state_names, rewrite
from .savepoint_copy import copy_unchanged, source_and_target
from .operator_state_surgery import dropped_prefixes, keyspace_of, operator_mode, replace_operator_state
from .spark_operator_surgery import check_unstamped, replace_spark_state, spark_store
from .transform_checks import check_operator_rows, check_rows, check_spark_rows

@dataclass
class TransformResult:
    savepoint: str
    source: str
    #: function -> the states replaced, in order
    replaced: dict[str, list[str]]
    #: function -> data entries of its state after the transform
    entries: dict[str, int]
    seconds: float
    #: every change, in order ("remove f.s", "rename f.a -> b", "replace f.s", "remove function f")
    changes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Replacement:
    source: SavepointSource
    descriptor: StateDescriptor
    kind: str
    rows: DataFrame


@dataclass
class _Rewrite:
    """A removal (``dropped``) or a rename (``renamed``) of keyed states of one function."""

    source: SavepointSource
    dropped: tuple[bytes, ...] = ()
    renamed: tuple[tuple[bytes, bytes], ...] = ()


@dataclass
class _OperatorReplacement:
    """A function's operator state given the content of ``rows``."""

    source: SavepointSource
    descriptor: StateDescriptor
    mode: int
    rows: DataFrame


@dataclass
class _SparkReplacement:
    """A store of Spark's operator given the content of ``rows``."""

    operator: F.OperatorEntry
    store: F.StoreEntry
    rows: DataFrame


class SavepointTransform:
    """A transform of one savepoint (see the module docstring). Every change is recorded when it
    is called, checked against the savepoint and the changes before it, and applied by
    :meth:`write`."""

    def __init__(self, spark: SparkSession, savepoint: str, *, storage_options: Optional[Mapping[str, str]] = None,
                 progress: bool = True) -> None:
        self._spark = spark
        self._savepoint = savepoint
        self._options = dict(storage_options or {})
        self._progress = progress
        self._changes: list[Union[_Replacement, _Rewrite, _OperatorReplacement]] = []
        #: function -> its keyed states after the changes so far (read from the files when first needed)
        self._states: dict[str, set[str]] = {}
        self._removed: list[str] = []
        self._dropped_source: Optional[int] = None
        self._spark_changes: list[_SparkReplacement] = []
        self._done: list[str] = []

    def read_keyed_state(self, state: str, *, function: Optional[str] = None, **options: Any) -> DataFrame:
        """A keyed state of the savepoint as a DataFrame: :func:`~..readers.keyed_state.read_keyed_state` with its
        other ``options`` (how collections are read, ``allow_pickle``), the savepoint's storage
        options given."""
        return read_keyed_state(self._spark, self._savepoint, state, function=function,
                                storage_options=self._options, **options)

    def read_timers(self, *, function: Optional[str] = None) -> DataFrame:
        return read_timers(self._spark, self._savepoint, function=function, storage_options=self._options)

    def replace_keyed_state(self, descriptor: StateDescriptor, rows: DataFrame, *,
                            function: Optional[str] = None) -> "SavepointTransform":
        """Give keyed state ``descriptor.name`` of ``function`` (optional when the savepoint has one
        keyed function) the content of ``rows`` (see the module docstring). A state the
        function's savepoint files do not hold is added.

        :raises KeyMismatchError: the key columns differ from the recorded ones.
        :raises StateDataError: no ``value`` column, or one of another type than the descriptor's."""
        source = self._source(function)
        kind = state_kind(descriptor)
        check_rows(source, descriptor, kind, rows.schema)
        self._changes.append(_Replacement(source, descriptor, kind, rows))
        self._states_of(source).add(descriptor.name)
        self._done.append(f"replace {source.function}.{descriptor.name}")
        return self

    def read_function_operator_state(self, state: str, *, function: Optional[str] = None,
                                     allow_pickle: bool = False) -> DataFrame:
        """Operator state ``state`` of ``function`` (list, union list or broadcast) of the
        savepoint, as :func:`~..readers.operator_state.read_function_operator_state` reads it."""
        return read_function_operator_state(self._spark, self._savepoint, state, function=function,
                                            storage_options=self._options, allow_pickle=allow_pickle)

    def replace_function_operator_state(self, descriptor: StateDescriptor, rows: DataFrame, *,
                                        mode: Optional[str] = None,
                                        function: Optional[str] = None) -> "SavepointTransform":
        """Give operator state ``descriptor.name`` of ``function`` (keyed or checkpointed) the
        content of ``rows``: ``index``, ``value`` and ``partition_id`` for a list state
        (``ListStateDescriptor``, ``mode="list"`` or ``"union"``), ``map_key``, ``value`` and
        ``partition_id`` for a broadcast state (``MapStateDescriptor``): the form
        :meth:`read_function_operator_state` gives. A partition without rows holds the state
        empty; a state the function does not hold is added (:mod:`.operator_state_surgery`).

        :raises StateDataError: another descriptor or mode, a missing column, a column of another
            type than the descriptor's, or a partition outside the function's layout."""
        source = self._any_source(function)
        chosen = operator_mode(descriptor, mode)
        check_operator_rows(source, descriptor, chosen, rows)
        self._changes.append(_OperatorReplacement(source, descriptor, chosen, rows))
        self._done.append(f"replace {source.function}.{descriptor.name} (operator state)")
        return self

    def replace_spark_operator_state(self, operator_id: int, rows: DataFrame, *,
                                     store_name: str = "default") -> "SavepointTransform":
        """Give store ``store_name`` of Spark's operator ``operator_id`` the content of ``rows``
        (``key`` and ``value`` structs, as :func:`~..readers.spark_operator_state.read_spark_operator_state` gives them;
        see :mod:`.spark_operator_surgery`).

        :raises UnknownStateError: no such operator or store (listing those the savepoint holds).
        :raises StateDataError: ``key`` or ``value`` differ from the store's recorded schema
            (naming both), the store is replaced twice, keys its rows with a prefix or holds
            TTL-stamped values."""
        sp = open_storage(self._savepoint, self._options)
        manifest = read_manifest(sp)
        op, store = spark_store(manifest, sp.url, operator_id, store_name)
        check_spark_rows(op, store, rows.schema)
        check_unstamped(sp, manifest, op, store)
        if any(c.operator.id == op.id and c.store.name == store.name for c in self._spark_changes):
            raise StateDataError(f"store {store_name!r} of Spark operator {operator_id} is replaced twice in one "
                                 "transform: give all its rows at once")
        self._spark_changes.append(_SparkReplacement(op, store, rows))
        self._done.append(f"replace Spark operator {op.id} ({op.name}) store {store.name}")
        return self

    def remove_state(self, name: str, *, function: Optional[str] = None) -> "SavepointTransform":
        """Remove keyed state ``name`` of ``function``: its values, schema record, TTL marker and
        TTL index entries. A restored query that still declares the state starts it empty.

        :raises UnknownStateError: the function holds no state ``name`` (listing those it holds)."""
        source = self._source(function)
        self._known(source, name)
        self._changes.append(_Rewrite(source, dropped=(name.encode("utf-8"),)))
        self._states_of(source).discard(name)
        self._done.append(f"remove {source.function}.{name}")
        return self

    def rename_state(self, old: str, new: str, *, function: Optional[str] = None) -> "SavepointTransform":
        """Rename keyed state ``old`` of ``function`` to ``new``: every entry of it (values,
        schema record, TTL marker and index) is re-keyed under the new name, values unchanged.

        :raises UnknownStateError: the function holds no state ``old``.
        :raises StateDataError: it holds a state ``new`` already (remove it first)."""
        source = self._source(function)
        states = self._known(source, old)
        if new in states:
            raise StateDataError(f"cannot rename state {old!r} of {source.function!r} to {new!r}: the function "
                                 f"holds a state {new!r} already; remove it first (remove_state({new!r}))")
        if not new or len(new.encode("utf-8")) > 255:
            raise StateDataError(f"a state name has 1 to 255 UTF-8 bytes, got {new!r}")
        self._changes.append(_Rewrite(source, renamed=((old.encode("utf-8"), new.encode("utf-8")),)))
        states.discard(old)
        states.add(new)
        self._done.append(f"rename {source.function}.{old} -> {new}")
        return self

    def remove_function(self, function: str, *, tick_source: Optional[int] = None) -> "SavepointTransform":
        """Remove the state of function ``function`` (keyed or checkpointed): its files and its
        manifest entry. Every function adds a source to its query, its tick source, so a query
        without the function has one source fewer than Spark's logs: ``tick_source=`` (its
        index among the query's sources) drops that source from the logs too (see
        docs/state-as-data.md). A restored query that still runs the function is refused at its
        first batch (its state of the batch before is missing).

        :raises UnknownStateError: the savepoint holds no function ``function`` (listing those it holds).
        :raises StateDataError: ``tick_source`` is no source of the query, or not a tick source."""
        sp = open_storage(self._savepoint, self._options)
        manifest = read_manifest(sp)
        choose_function([p for p in manifest.process if p.name not in self._removed], function,
                        f"the savepoint {self._savepoint}", kind="function")
        if tick_source is not None:
            if self._dropped_source is not None:
                raise StateDataError("one transform drops one tick source; write, then transform the result")
            path = f"{F.SPARK_DIR}/offsets/{manifest.batch_id}"
            check_tick_source(manifest, sp.url, read_verified(sp, manifest, path), tick_source, function)
            self._dropped_source = tick_source
        self._changes = [c for c in self._changes if c.source.function != function]  # their work is dropped
        self._removed.append(function)
        self._states[function] = set()
        self._done.append(f"remove function {function}")
        return self

    @renamed_arguments(storage_options="target_storage_options")
    def write(self, target: str, *, target_storage_options: Optional[Mapping[str, str]] = None) -> TransformResult:
        """Write the transformed savepoint into ``target`` (new or empty); its manifest last.
        The constructor's ``storage_options`` apply to ``target`` too; ``target_storage_options``,
        when given, replace them for ``target`` alone."""
        started = time.perf_counter()
        sp, manifest, out, out_options = source_and_target(self._savepoint, self._options, target,
                                                           target_storage_options)
        new = copy_unchanged(sp, manifest, out, rewritten={c.source.function for c in self._changes},
                             spark_replaced=tuple(f"{F.STATE_DIR}/{c.operator.id}/{c.store.name}/"
                                                  for c in self._spark_changes),
                             removed=set(self._removed), dropped_source=self._dropped_source)
        replaced: dict[str, list[str]] = {}
        written: dict[str, dict[int, F.FileEntry]] = {}
        for c in self._changes:
            name = c.source.function
            chained = out.url if name in written else None
            if isinstance(c, _OperatorReplacement):
                dropped = dropped_prefixes(c.descriptor.name_bytes, keyspace_of(c.source.entry))
                base = BaseEntries(c.source, (), chained, out_options, (), dropped)
                written[name] = replace_operator_state(self._spark, c.source, base, c.rows, c.descriptor, c.mode,
                                                       out.url, out_options)
            elif isinstance(c, _Replacement):
                base = BaseEntries(c.source, (c.descriptor.name_bytes,), chained, out_options)
                written[name] = self._run(c, base, out.url, out_options)
                replaced.setdefault(name, []).append(c.descriptor.name)
            else:
                base = BaseEntries(c.source, c.dropped, chained, out_options, c.renamed)
                written[name] = rewrite(self._spark, c.source, base, out.url, out_options)
        for sc in self._spark_changes:
            files = replace_spark_state(self._spark, sp.url, self._options, manifest, sc.operator, sc.store, sc.rows,
                                        out.url, out_options)
            new.files.extend(files[p] for p in sorted(files))
        for name in sorted(written):
            new.files.extend(written[name][i] for i in sorted(written[name]))
        out.write_bytes(F.MANIFEST, new.to_json())
        entries = {name: sum(f.keys or 0 for f in files.values()) for name, files in written.items()}
        return TransformResult(out.url, sp.url, replaced, entries, round(time.perf_counter() - started, 3),
                               list(self._done))

    def _source(self, function: Optional[str]) -> SavepointSource:
        """The keyed function ``function`` of the savepoint (optional when it has one)."""
        return self._not_removed(SavepointSource.open(self._savepoint, function, self._options))

    def _any_source(self, function: Optional[str]) -> SavepointSource:
        """The function ``function`` of the savepoint, keyed or checkpointed (optional when it has
        one keyed function), chosen by the one chooser (:func:`..location.functions.choose_function`)."""
        if function is None:
            return self._source(None)
        source = SavepointSource.open_any(self._savepoint, function, self._options)
        if source.entry.kind == KEYED:
            return self._source(function)  # a keyed function's source also checks its key columns
        return self._not_removed(source)

    def _not_removed(self, source: SavepointSource) -> SavepointSource:
        if source.function in self._removed:
            raise UnknownStateError(f"function {source.function!r} is removed by this transform (remove_function)")
        return source

    def _states_of(self, source: SavepointSource) -> set[str]:
        if source.function not in self._states:
            self._states[source.function] = keyed_state_names(source)
        return self._states[source.function]

    def _known(self, source: SavepointSource, name: str) -> set[str]:
        states = self._states_of(source)
        if name not in states:
            raise UnknownStateError(f"function {source.function!r} of the savepoint {self._savepoint} holds no keyed "
                                    f"state {name!r} (its states: {', '.join(sorted(states)) or 'none'})")
        return states

    def _run(self, r: _Replacement, base: BaseEntries, url: str, options: dict[str, str]) -> dict[int, F.FileEntry]:
        """One replacement's job; returns the partition files it wrote."""
        source = r.source
        keys = list(source.key_columns.columns)
        rows = r.rows.select(*keys, "value")
        opts = replacement_options(source, r.descriptor)
        plan, routed = plan_offline(rows, keys, source.key_columns.fields, StateWriter(r.descriptor, r.kind), opts)
        return write_routed(plan, routed, source, base, url, options,
                            f"transform of {source.function}.{r.descriptor.name}", self._progress)
