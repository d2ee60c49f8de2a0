"""Carry a savepoint's state over to a changed query: key changes and moved, added or removed
stateful operators (Spark's operators: aggregations, deduplication, ...), and keyed functions'
new keys.

::

    from spark_state.upgrade import CarryOver

    carry = CarryOver(spark, "/savepoints/sp1", build_new_query, output_mode="update")
    print(carry.summary())                     # the upgrade check, and what write() will do
    carry.change_key(0, add={"region": "element_at(map('u1', 'eu', 'u2', 'us'), user)"})
    carry.write("/savepoints/sp2")             # then: spark-state restore /savepoints/sp2 /checkpoints/new

The new query is planned as the upgrade check plans it (:mod:`.spark_plan`): its stateful
operators by id, each store's key and value schema, and the files Spark writes under ``state/``
for a new checkpoint of it (operator metadata and schema files). Each new operator takes its
state from one operator of the savepoint, its **source**:

* proposed (:func:`proposed_sources`): the savepoint's operator of the same kind with the same key
  columns (the same id first; else the one that moved), else the one of the same kind at the same
  id (a key change), else none: the operator is new and starts empty;
* or chosen: :meth:`CarryOver.map_operator` (``None``: start empty); :meth:`CarryOver.set_state`
  gives a new operator (or any store) its whole content instead, e.g. bootstrapped from history
  by a batch query over it.

Then, per store of each new operator:

* the same key (the same types by position, no column read from another's place:
  :func:`.key_change.same_key`) and no :meth:`~CarryOver.change_key`: the source's state files
  are copied under the new id, byte for byte;
* a key change: the source's rows (read with Spark's state reader from a restored copy of the
  savepoint) are re-keyed and merged (:mod:`.key_change`) and written in the new key, each row
  routed to the partition Spark's shuffle sends its new key to
  (:func:`~spark_state.state_data.writers.spark_operator_surgery.write_spark_store`);
* no source: a file without entries per partition.

The savepoint's operators no new operator takes are dropped. Spark's offset, commit and source
logs are kept (the restart continues after the savepoint's batch); everything under
``spark/state/`` is replaced by what Spark writes for the new query, so its start-up checks pass.
Keyed functions' state is copied, re-keyed for a function given a new key, or created empty for a
function the new query adds (:mod:`.function_changes`). The manifest, written last, records the
new operators, schemas and keys: ``spark-state upgrade-check`` on it says "compatible".

Spark 4.0 and newer (the planner the check uses); stores with a prefix key (session windows,
stream-stream joins) and TTL-stamped stores are carried only unchanged (copied).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from pyspark.sql import DataFrame, SparkSession

from ..ops import savepoint_format as F
from ..ops.checkpoint_reader import SparkCheckpoint
from ..ops.progress import Progress
from ..ops.state_files import copy_verified, write_small_file, write_state_file
from ..state_data.errors import StateDataError
from ..state_data.location.savepoints import SavepointSource, is_savepoint
from ..state_data.readers.spark_operator_state import read_spark_operator_state, restored_copy
from ..state_data.writers.function_rekey import rekey_function
from ..state_data.writers.savepoint_copy import copy_unchanged, source_and_target
from ..state_data.writers.spark_operator_surgery import check_unstamped, write_spark_store
from ..state_data.writers.transform_checks import check_spark_rows
from .function_changes import FunctionKeyChange, added_functions, new_function_names
from .held import HeldState, read_held_state
from .key_change import KeyChange, Merge, rekeyed_rows, same_key
from .spark_plan import PlannedQuery, QueryBuilder, plan_new_query
from .verdicts import UpgradeReport, judge, same_operator

__all__ = ["CarryOver", "CarryOverResult", "OperatorStep", "proposed_sources"]

#: What a store of a new operator gets (:attr:`OperatorStep.stores`).
COPIED, REKEYED, GIVEN, EMPTY = "copied", "re-keyed", "given", "empty"


@dataclass(frozen=True)
class OperatorStep:
    """What :meth:`CarryOver.write` does for one operator of the new query."""

    operator_id: int
    name: str
    #: the savepoint's operator whose state it takes (None: none)
    source: Optional[int]
    #: store -> COPIED, REKEYED, GIVEN or EMPTY
    stores: Mapping[str, str]

    def text(self) -> str:
        origin = "starts empty" if self.source is None else f"from the savepoint's operator {self.source}"
        stores = ", ".join(f"{s}: {how}" for s, how in sorted(self.stores.items()))
        return f"operator {self.operator_id} ({self.name}) {origin} ({stores})"


@dataclass
class CarryOverResult:
    savepoint: str
    source: str
    steps: list[OperatorStep]
    #: the savepoint's operators no new operator takes
    dropped: list[int]
    seconds: float
    #: data entries of each new operator's stores
    entries: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"savepoint": self.savepoint, "source": self.source, "dropped": self.dropped, "seconds": self.seconds,
                "entries": self.entries,
                "operators": [{"operator_id": s.operator_id, "name": s.name, "source": s.source,
                               "stores": dict(s.stores)} for s in self.steps]}


def proposed_sources(held: HeldState, planned: PlannedQuery) -> dict[int, Optional[int]]:
    """new operator id -> the savepoint's operator that gives it its state (see the module
    docstring); each old operator gives at most one."""
    out: dict[int, Optional[int]] = {}
    free = dict(held.operators)
    for new_id, new in sorted(planned.operators.items()):  # the same operator, at its id or moved
        candidates = [free[new_id]] if new_id in free else []
        match = same_operator(new, candidates) or same_operator(new, [free[o] for o in sorted(free)])
        if match is not None:
            out[new_id] = match.id
            del free[match.id]
    for new_id in sorted(set(planned.operators) - set(out)):  # a key change at the same id
        if new_id in free and free[new_id].name == planned.operators[new_id].name:
            out[new_id] = new_id
            del free[new_id]
        else:
            out[new_id] = None
    return dict(sorted(out.items()))


class CarryOver:
    """The carry-over of one savepoint to a new query (see the module docstring): changes are
    recorded and checked when called, and applied by :meth:`write`.

    Args:
        spark: a classic session of the application (Spark 4.0+).
        savepoint: the savepoint of the old query (``spark-state savepoint``).
        query: the function that builds the new query's streaming DataFrame from a session.
        output_mode: the new query's output mode.
        storage_options: the savepoint's storage options (``s3.*``).
        work_dir: where the savepoint is restored to read the rows of re-keyed stores (default: a
            temporary directory); on a cluster, one every executor reads.
    """

    def __init__(self, spark: SparkSession, savepoint: str, query: QueryBuilder, *, output_mode: str = "append",
                 storage_options: Optional[Mapping[str, str]] = None, work_dir: Optional[str] = None,
                 progress: bool = True) -> None:
        if not is_savepoint(savepoint, storage_options):
            raise StateDataError(f"{savepoint} is not a savepoint: take one of the query's checkpoint first "
                                 f"(spark-state savepoint <checkpoint> {savepoint})")
        self._spark = spark
        self._savepoint = savepoint
        self._options = dict(storage_options or {})
        self._work_dir = work_dir
        self._progress = progress
        self._held = read_held_state(savepoint, self._options)
        self._planned = plan_new_query(spark, query, self._held, output_mode)
        #: the upgrade check of the savepoint against the new query (what check_upgrade gives)
        self.report: UpgradeReport = judge(self._held, self._planned)
        self._sources = proposed_sources(self._held, self._planned)
        self._changes: dict[tuple[int, str], KeyChange] = {}
        self._given: dict[tuple[int, str], DataFrame] = {}
        self._function_keys: dict[str, FunctionKeyChange] = {}

    @property
    def sources(self) -> dict[int, Optional[int]]:
        """new operator id -> the savepoint's operator whose state it takes (None: none)."""
        return dict(self._sources)

    def map_operator(self, operator_id: int, source: Optional[int]) -> "CarryOver":
        """Give new operator ``operator_id`` the state of the savepoint's operator ``source``
        (``None``: it starts empty); the operator that had ``source`` before starts empty.

        :raises StateDataError: no such operator on either side, or one of another kind."""
        new = self._new_operator(operator_id)
        if source is not None:
            old = self._held.operators.get(source)
            if old is None:
                raise StateDataError(f"the savepoint has no operator {source} (it has "
                                     f"{_listed({i: o.name for i, o in self._held.operators.items()})})")
            if old.name != new.name:
                raise StateDataError(f"operator {source} of the savepoint is a {old.name} and the new query's "
                                     f"operator {operator_id} a {new.name}: state moves between operators of one kind")
            for other, taken in self._sources.items():
                if taken == source and other != operator_id:
                    self._sources[other] = None
        self._sources[operator_id] = source
        return self

    def change_key(self, operator_id: int, *, add: Optional[Mapping[str, Any]] = None,
                   rename: Optional[Mapping[str, str]] = None, merge: Optional[Merge] = None,
                   store: str = "default") -> "CarryOver":
        """Carry store ``store`` of new operator ``operator_id`` over from its source's rows with a
        key change (:mod:`.key_change`: ``add`` new key columns, ``rename`` old ones, ``merge`` rows
        that come to share a key). Not needed when every new key column is an old one by name."""
        self._new_operator(operator_id)
        self._changes[(operator_id, store)] = KeyChange(dict(add or {}), dict(rename or {}), merge)
        return self

    def set_state(self, operator_id: int, rows: DataFrame, *, store: str = "default") -> "CarryOver":
        """Give store ``store`` of new operator ``operator_id`` the content of ``rows`` (``key`` and
        ``value`` structs in the new query's schemas, as the state reader gives them), e.g. built
        from history by a batch query: a bootstrapped new operator.

        :raises StateDataError: the rows' columns are not the store's schema."""
        op = self._new_operator(operator_id)
        if store not in op.schemas:
            raise StateDataError(f"operator {operator_id} ({op.name}) of the new query has no store {store!r} "
                                 f"(its stores: {', '.join(sorted(op.schemas))})")
        key, value = op.schemas[store]
        entry = F.OperatorEntry(operator_id, op.name, op.partitions)
        check_spark_rows(entry, F.StoreEntry(store, 0, key, value), rows.schema)
        self._given[(operator_id, store)] = rows
        return self

    def change_function_key(self, function: str, key: Sequence[str], *, add: Optional[Mapping[str, Any]] = None,
                            rename: Optional[Mapping[str, str]] = None, types: Optional[Mapping[str, str]] = None,
                            merge: Optional[Callable[[str, DataFrame], DataFrame]] = None) -> "CarryOver":
        """Give keyed function ``function`` (``keyed_process`` and friends) the key columns ``key``,
        in order, as the new query keys it: every keyed state and timer of it is re-keyed
        (:mod:`~spark_state.state_data.writers.function_rekey`). A new column is an old one of the
        same name (after ``rename``) or ``add``'s expression over the old key columns; ``types``
        casts columns (``{"id": "bigint"}`` widens). When the new key drops a column, ``merge(state,
        rows)`` gets each state's rows (new key columns and ``value``, several per key) and returns
        one row per key; timers of the merged keys are all kept.

        :raises UnknownStateError: the savepoint holds no keyed function ``function``.
        :raises StateDataError: an empty key."""
        source = SavepointSource.open(self._savepoint, function, self._options)  # a keyed function, or refused
        if not key or isinstance(key, str):
            raise StateDataError(f"change_function_key({function!r}): key is the list of the new key's columns, "
                                 f"got {key!r}")
        self._function_keys[source.function] = FunctionKeyChange(
            source, tuple(key), KeyChange(dict(add or {}), dict(rename or {})), dict(types or {}), merge)
        return self

    def steps(self) -> list[OperatorStep]:
        """What :meth:`write` will do for each operator of the new query."""
        out = []
        for op_id, op in sorted(self._planned.operators.items()):
            source = self._sources.get(op_id)
            old = self._held.operators.get(source) if source is not None else None
            stores = {}
            for store, (key, _) in op.schemas.items():
                if (op_id, store) in self._given:
                    stores[store] = GIVEN
                elif old is None or store not in old.schemas:
                    stores[store] = EMPTY
                elif (op_id, store) not in self._changes and same_key(old.schemas[store][0], key):
                    stores[store] = COPIED
                else:
                    stores[store] = REKEYED
            out.append(OperatorStep(op_id, op.name, source, stores))
        return out

    def dropped(self) -> list[int]:
        taken = set(self._sources.values())
        return sorted(i for i in self._held.operators if i not in taken)

    def summary(self) -> str:
        lines = [self.report.summary(), "carry-over:"]
        lines.extend(f"  {step.text()}" for step in self.steps())
        lines.extend(f"  operator {i} of the savepoint ({self._held.operators[i].name}) is dropped"
                     for i in self.dropped())
        lines.extend(f"  keyed function {name}: key ({', '.join(fk.source.key_columns.columns)}) -> "
                     f"({', '.join(fk.key)})" for name, fk in sorted(self._function_keys.items()))
        lines.extend(f"  function {name} is new: it starts empty, and its tick source joins Spark's logs"
                     for name in self.added_functions())
        return "\n".join(lines)

    def added_functions(self) -> list[str]:
        """The new query's keyed and checkpointed functions the savepoint does not hold."""
        return new_function_names(self._held, self._planned)

    def write(self, target: str, *, target_storage_options: Optional[Mapping[str, str]] = None) -> CarryOverResult:
        """Write the new savepoint into ``target`` (new or empty; see the module docstring); its
        manifest last. Every re-keyed store is checked (its rows' schema, TTL stamps) before
        anything is written."""
        started = time.perf_counter()
        sp, manifest, out, out_options = source_and_target(self._savepoint, self._options, target,
                                                           target_storage_options)
        steps = self.steps()
        fresh = tempfile.mkdtemp(prefix="spark-state-carry-over-")
        bar = Progress("carry-over", unit="stores", total=sum(len(s.stores) for s in steps), enabled=self._progress)
        try:
            new_ops = self._new_operator_entries(fresh)
            jobs = self._rekeyed(steps, manifest, new_ops, sp, fresh)  # checked before anything is written
            function_rows = {name: fk.rows(self._spark, self._savepoint, self._options)
                             for name, fk in self._function_keys.items()}
            added, inserted = added_functions(self._held, self._planned, manifest)
            new = copy_unchanged(sp, manifest, out, rewritten=set(self._function_keys),
                                 spark_replaced=(f"{F.STATE_DIR}/", f"{F.SPARK_DIR}/state/"), inserted_sources=inserted)
            for path in sorted(self._planned.state_files):
                new.files.append(write_small_file(out, f"{F.SPARK_DIR}/{path}", self._planned.state_files[path]))
            for step in steps:
                op = new_ops[step.operator_id]
                for store in op.stores:
                    how = step.stores[store.name]
                    if how == COPIED:
                        new.files.extend(self._copied(sp, manifest, out, step.source, op, store.name))
                    elif how == EMPTY:
                        new.files.extend(write_state_file(out, F.state_file(op.id, store.name, p), iter(()))
                                         for p in range(op.partitions))
                    else:
                        rows = jobs[(op.id, store.name)]
                        files = write_spark_store(op, store, rows, out.url, out_options)
                        new.files.extend(files[p] for p in sorted(files))
                    bar.update(1)
            new.operators = [new_ops[i] for i in sorted(new_ops)]
            for name, (fields, states, timers) in sorted(function_rows.items()):
                files = rekey_function(self._function_keys[name].source, fields, states, timers, out.url,
                                       out_options, self._progress)
                new.files.extend(files[p] for p in sorted(files))
                key = {"columns": [f.name for f in fields], "types": [f.dataType.simpleString() for f in fields]}
                new.process = [dataclasses.replace(p, key=key) if p.name == name else p for p in new.process]
            for entry in added:  # an empty state at the savepoint's batch: the function's first batch loads it
                new.files.extend(write_state_file(out, F.process_file(entry.name, i), iter(()))
                                 for i in range(entry.parallelism))
                new.process.append(entry)
            out.write_bytes(F.MANIFEST, new.to_json())
        finally:
            bar.close()
            shutil.rmtree(fresh, ignore_errors=True)
        entries = {op_id: sum(f.keys or 0 for f in new.files if f.path.startswith(f"{F.STATE_DIR}/{op_id}/"))
                   for op_id in new_ops}
        return CarryOverResult(out.url, sp.url, steps, self.dropped(), round(time.perf_counter() - started, 3),
                               entries)

    # ------------------------------------------------------------------ parts of write
    def _new_operator(self, operator_id: int) -> Any:
        op = self._planned.operators.get(operator_id)
        if op is None:
            raise StateDataError(f"the new query has no stateful operator {operator_id} (it has "
                                 f"{_listed({i: o.name for i, o in self._planned.operators.items()})})")
        return op

    def _new_operator_entries(self, fresh: str) -> dict[int, F.OperatorEntry]:
        """The manifest's entry of each new operator: its stores as Spark's metadata for the new
        query names them (prefix-key columns included), its schemas as its schema files hold them."""
        for path, data in self._planned.state_files.items():
            local = os.path.join(fresh, *path.split("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "wb") as f:
                f.write(data)
        out = {}
        for info in SparkCheckpoint(fresh, must_exist=False).operators():
            schemas = self._planned.operators[info.id].schemas
            out[info.id] = F.OperatorEntry(info.id, info.name, info.partitions, [
                F.StoreEntry(s.name, s.num_cols_prefix_key, *schemas[s.name]) for s in info.stores])
        return out

    def _rekeyed(self, steps: list[OperatorStep], manifest: F.SavepointManifest, new_ops: dict[int, F.OperatorEntry],
                 sp: Any, scratch: str) -> dict[tuple[int, str], DataFrame]:
        """The rows of every store that is re-keyed or given, checked (nothing runs yet)."""
        jobs: dict[tuple[int, str], DataFrame] = {}
        restored: Optional[str] = None
        for step in steps:
            op = new_ops[step.operator_id]
            for store in op.stores:
                how = step.stores[store.name]
                where = f"operator {op.id} ({op.name}){'' if store.name == 'default' else f' store {store.name}'}"
                if how == GIVEN:
                    jobs[(op.id, store.name)] = self._given[(op.id, store.name)]
                elif how == REKEYED:
                    assert step.source is not None
                    old_op = next(o for o in manifest.operators if o.id == step.source)
                    old_store = next(s for s in old_op.stores if s.name == store.name)
                    if old_store.num_cols_prefix_key or store.num_cols_prefix_key:
                        raise StateDataError(f"{where}: its store keys rows with a prefix (session windows, joins); "
                                             "such stores are carried over only with their key unchanged")
                    check_unstamped(sp, manifest, old_op, old_store)
                    if restored is None:
                        # the reader's own restore, into a directory of this write (or of work_dir)
                        restored = restored_copy(self._savepoint, self._options, os.path.join(
                            self._work_dir or scratch, f"restored-{int(time.time() * 1000)}"))
                    rows = read_spark_operator_state(self._spark, restored, operator_id=old_op.id,
                                                     store_name=store.name).select("key", "value")
                    change = self._changes.get((op.id, store.name), KeyChange())
                    new_rows = rekeyed_rows(rows, old_store.key_schema, store.key_schema, store.value_schema, change,
                                            op.name, where)
                    check_spark_rows(op, store, new_rows.schema)
                    jobs[(op.id, store.name)] = new_rows
        return jobs

    def _copied(self, sp: Any, manifest: F.SavepointManifest, out: Any, source: Optional[int], op: F.OperatorEntry,
                store: str) -> list[F.FileEntry]:
        """The source operator's files of ``store`` copied under the new operator's id."""
        assert source is not None
        held = next(o for o in manifest.operators if o.id == source)
        if held.partitions != op.partitions:  # the new query plans with the offset log's count: a damaged savepoint
            raise StateDataError(f"operator {source} of the savepoint has {held.partitions} partitions and the new "
                                 f"query's operator {op.id} {op.partitions}: restore the savepoint at its count first")
        files = []
        for p in range(op.partitions):
            path, dest = F.state_file(source, store, p), F.state_file(op.id, store, p)
            copy_verified(sp, manifest, path, out, dest)
            entry = manifest.file(path)
            files.append(F.FileEntry(dest, entry.size, entry.crc32, entry.rows, entry.keys))
        return files


def _listed(ops: Mapping[int, str]) -> str:
    return ", ".join(f"{i} ({name})" for i, name in sorted(ops.items())) or "none"
