"""Bootstrap: a savepoint holding a new query's initial state, computed from history by batch jobs.

Flink's ``SavepointWriter`` for Spark: the state a streaming query would hold after reading
the history, written as a savepoint without running the query over the history. A new query
starts from it with ``spark-state restore`` and continues::

    from spark_state.state_data import SavepointWriter
    (SavepointWriter(spark)
        .with_keyed_state("Sessions", history, "user", SeedSessions(), parallelism=4, event_time="ts")
        .with_spark_operators(history, lambda s: s.groupBy("user").count())
        .write("/savepoints/seed", sources=live_query_df))
    # then: spark-state restore /savepoints/seed /checkpoints/new

What the savepoint holds:

* **keyed state** of a ``keyed_process`` function (``with_keyed_state``; ``with_co_keyed_state``
  and ``with_broadcast_keyed_state`` for ``keyed_co_process`` and ``keyed_broadcast_process``
  functions, whose inputs are tagged by side as those operators tag them): a bootstrap function
  (a :class:`~spark_state.process.KeyedProcessFunction`, often the streaming function itself) is
  called per history row with the same descriptors and context as in the stream: the current
  key, every keyed state type with its TTL, and the timer service, whose timers of both domains
  fire in the restored query. Its output is dropped and no timer fires while bootstrapping.
  Rows are routed by key group exactly as the query routes them, with the function's
  ``max_parallelism`` and ``parallelism``; a query with another ``max_parallelism`` refuses the
  state with an error naming both. Rows of one key reach the function in the history's
  partition order (sort the history if the order matters). With ``event_time=`` (a timestamp
  column) ``ctx.timestamp()`` is the row's time and the history's largest event time is
  recorded, so the restored query's first watermark is the one a query that read the history
  as its batch 0 would have;
* **Spark's operators' state** (``with_spark_operators``): aggregations, deduplication and the
  other stateful operators of ``query(history as a stream)``, built by Spark's own operators in
  a one-batch streaming run over the history (``availableNow``, in ``work_dir``); the savepoint
  takes their state, schema files and watermark;
* Spark's logs of a batch 0 that read nothing: ``offsets/0`` (every source without an offset,
  so each starts where a new query starts; the confs of the run; the watermark) and
  ``commits/0``. Spark requires the number of sources to match the restored query's:
  ``sources=`` is that count, or the query's streaming DataFrame (before ``writeStream``),
  whose sources are counted (each keyed function adds one: its tick source).

The restored query runs batch 1 first. Its output for batches 1.. equals that of a query that
read the history as batch 0 and then the same input (tested, value, list and map state and
timers; aggregation and deduplication).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType, TimestampType

from ...ops import savepoint_format as F
from ...ops.checkpoint_reader import PROVIDER_CLASS_CONF, SPARKSTATE_PROVIDER, SparkCheckpoint
from ...ops.process_locations import CHECKPOINT as PLACED_BESIDE_CHECKPOINT
from ...ops.progress import Progress
from ...ops.savepoint import check_empty_target, take, write_file
from ...process.api import key_columns
from ...process.clock import clock_path, maxima_dir
from ...process.functions import KeyedBroadcastProcessFunction, KeyedCoProcessFunction, KeyedProcessFunction
from ...process.inputs import check_same_key_types
from ...process.offline import plan_offline
from ...process.options import process_options
from ...process.plan import KEYED, BroadcastSpec, ProcessPlan
from ...spark.logs import OffsetEntry, next_batch_watermark
from ...state import MapStateDescriptor
from ...storage import CheckpointStorage, open_storage
from ..errors import BootstrapError
from .bootstrap_task import RESULT_DDL, BroadcastOutputDropped, CoOutputDropped, OutputDropped, bootstrap_partition

#: The output modes of the one-batch run of Spark's operators.
OUTPUT_MODES = ("append", "update", "complete")


@dataclass
class _Keyed:
    name: str
    history: DataFrame
    key: Union[str, list[str]]
    #: a KeyedProcessFunction, KeyedCoProcessFunction (``right``) or KeyedBroadcastProcessFunction (``broadcast``)
    function: Any
    parallelism: Optional[int]
    max_parallelism: Optional[int]
    event_time: Optional[str]
    engine: Any
    #: keyed_co_process: the second input's history and key columns
    right: Optional[tuple[DataFrame, Union[str, list[str]]]] = None
    #: keyed_broadcast_process: the broadcast input's history, broadcast states and order
    broadcast: Optional[tuple[DataFrame, BroadcastSpec]] = None


@dataclass
class BootstrapResult:
    savepoint: str
    #: keyed function name -> {"rows": history rows read, "entries": state entries written
    #: (every value, list and map entry and timer)}
    keyed: dict[str, dict[str, int]]
    #: Spark's stateful operators: id, name, stores and their entries ("keys")
    operators: list[dict[str, Any]]
    sources: int
    #: the restored query's first watermark (Spark's operators; 0 without them)
    watermark_ms: int
    #: every data entry of the savepoint
    entries: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SavepointWriter:
    """Builds a bootstrap savepoint (see the module docstring). Add states with
    :meth:`with_keyed_state` and :meth:`with_spark_operators`, then :meth:`write` once."""

    def __init__(self, spark: SparkSession, *, work_dir: Optional[str] = None, progress: bool = True) -> None:
        """``work_dir``: where the one-batch run of Spark's operators keeps its checkpoint and the
        history (default: a local temporary directory, removed afterwards; on a cluster, a
        directory every executor reaches)."""
        self._spark = spark
        self._work_dir = work_dir
        self._progress = progress
        self._keyed: list[_Keyed] = []
        self._operators: Optional[tuple[DataFrame, Callable[[DataFrame], DataFrame], str, int]] = None

    def with_keyed_state(self, name: str, history: DataFrame, key: Union[str, list[str]],
                         function: KeyedProcessFunction, *, parallelism: Optional[int] = None,
                         max_parallelism: Optional[int] = None, event_time: Optional[str] = None,
                         engine: Any = None) -> "SavepointWriter":
        """The state of the ``keyed_process`` operator ``name`` (the query's ``name=``, default
        its function's class name), from ``function`` called per row of the batch DataFrame
        ``history`` keyed by ``key``. ``parallelism`` and ``max_parallelism`` as the query will
        run it (defaults as ``keyed_process``'s); ``event_time``: a timestamp column of
        ``history`` (see the module docstring)."""
        function = self._check(name, history, function, KeyedProcessFunction, event_time)
        self._keyed.append(_Keyed(name, history, key, function, parallelism, max_parallelism, event_time, engine))
        return self

    def with_co_keyed_state(self, name: str, left_history: DataFrame, right_history: DataFrame,
                            left_key: Union[str, list[str]], right_key: Union[str, list[str]],
                            function: KeyedCoProcessFunction, *, parallelism: Optional[int] = None,
                            max_parallelism: Optional[int] = None, event_time: Optional[str] = None,
                            engine: Any = None) -> "SavepointWriter":
        """The state of the ``keyed_co_process`` operator ``name``, from ``function`` called per
        row of both histories: ``process_element1`` for ``left_history`` keyed by ``left_key``,
        ``process_element2`` for ``right_history`` keyed by ``right_key`` (the key columns of the
        same types). ``event_time``: a timestamp column of ``left_history``. Otherwise as
        :meth:`with_keyed_state`."""
        function = self._check(name, left_history, function, KeyedCoProcessFunction, event_time)
        if right_history.isStreaming:
            raise BootstrapError(f"the right history of {name!r} is a streaming DataFrame; a bootstrap reads a batch "
                                 "DataFrame (spark.read...)")
        self._keyed.append(_Keyed(name, left_history, left_key, function, parallelism, max_parallelism, event_time,
                                  engine, right=(right_history, right_key)))
        return self

    def with_broadcast_keyed_state(self, name: str, history: DataFrame, key: Union[str, list[str]],
                                   broadcast_history: DataFrame, function: KeyedBroadcastProcessFunction, *,
                                   broadcast_states: Sequence[MapStateDescriptor],
                                   broadcast_order: Union[str, Sequence[str], None] = None,
                                   parallelism: Optional[int] = None, max_parallelism: Optional[int] = None,
                                   event_time: Optional[str] = None, engine: Any = None) -> "SavepointWriter":
        """The state of the ``keyed_broadcast_process`` operator ``name``: every partition's
        ``process_broadcast_element`` is called per row of ``broadcast_history`` (sorted as the
        query sorts a batch's broadcast rows: by ``broadcast_order``, then the whole row), then
        ``process_element`` per row of ``history`` keyed by ``key``; the broadcast states
        (``broadcast_states``, as the query declares them) and the keyed state are written.
        Otherwise as :meth:`with_keyed_state`."""
        function = self._check(name, history, function, KeyedBroadcastProcessFunction, event_time)
        if broadcast_history.isStreaming:
            raise BootstrapError(f"the broadcast history of {name!r} is a streaming DataFrame; a bootstrap reads a "
                                 "batch DataFrame (spark.read...)")
        descriptors = tuple(broadcast_states)
        if not descriptors or not all(isinstance(d, MapStateDescriptor) for d in descriptors):
            raise BootstrapError(f"the bootstrap of {name!r} needs broadcast_states=[MapStateDescriptor(...), ...]")
        order = (broadcast_order,) if isinstance(broadcast_order, str) else tuple(broadcast_order or ())
        missing = [c for c in order if c not in broadcast_history.columns]
        if missing:
            raise BootstrapError(f"broadcast_order column(s) {missing} of {name!r} are not columns of the broadcast "
                                 f"history ({', '.join(broadcast_history.columns)})")
        self._keyed.append(_Keyed(name, history, key, function, parallelism, max_parallelism, event_time, engine,
                                  broadcast=(broadcast_history, BroadcastSpec(descriptors, order))))
        return self

    def _check(self, name: str, history: DataFrame, function: Any, kind: type, event_time: Optional[str]) -> Any:
        """The function instance, once ``history`` is a batch DataFrame, ``name`` new, ``function``
        a ``kind`` and ``event_time`` a timestamp column of ``history``."""
        if history.isStreaming:
            raise BootstrapError(f"the history of {name!r} is a streaming DataFrame; a bootstrap reads a batch "
                                 "DataFrame (spark.read...)")
        if any(k.name == name for k in self._keyed):
            raise BootstrapError(f"keyed state {name!r} is added twice")
        if isinstance(function, type):
            function = function()
        if not isinstance(function, kind):
            raise BootstrapError(f"the bootstrap function of {name!r} must be a {kind.__name__}, "
                                 f"got {type(function).__name__}")
        if event_time is not None:
            types = {f.name: f.dataType for f in history.schema.fields}
            if not isinstance(types.get(event_time), TimestampType):
                raise BootstrapError(f"event_time={event_time!r} must name a timestamp column of the history of "
                                     f"{name!r} (its columns: {history.schema.simpleString()})")
        return function

    def with_spark_operators(self, history: DataFrame, query: Callable[[DataFrame], DataFrame], *,
                             output_mode: str = "update", batches: int = 1) -> "SavepointWriter":
        """The state of Spark's stateful operators in ``query(stream)``, where ``stream`` reads the
        rows of the batch DataFrame ``history``: the same function the restored query applies to
        its source, so that its operators (and their ids) are the same. ``output_mode`` as the
        restored query writes.

        ``batches``: the run reads the history in this many micro-batches (default one). One batch
        of any size runs in bounded memory (a batch's pending writes spill to local disk past the
        executor's memory budget: docs/memory.md), so splitting is never needed for memory; it makes
        the history arrive as a stream would. That changes nothing for aggregations and
        deduplication without a watermark; with one, rows of a later batch that are older than the
        watermark are late, as they would be in a stream."""
        if history.isStreaming:
            raise BootstrapError("the history is a streaming DataFrame; a bootstrap reads a batch DataFrame")
        if self._operators is not None:
            raise BootstrapError("with_spark_operators is called once: a query has one plan of Spark operators")
        if output_mode not in OUTPUT_MODES:
            raise BootstrapError(f"output_mode must be one of {', '.join(OUTPUT_MODES)}, got {output_mode!r}")
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise BootstrapError(f"batches must be a positive integer, got {batches!r}")
        self._operators = (history, query, output_mode, batches)
        return self

    def write(self, savepoint_dir: str, *, sources: Union[int, DataFrame],
              storage_options: Optional[dict[str, str]] = None) -> BootstrapResult:
        """Write the savepoint into ``savepoint_dir`` (new or empty); its manifest last.
        ``storage_options``: of the savepoint's storage (s3/hdfs credentials and settings)."""
        started = time.perf_counter()
        if not self._keyed and self._operators is None:
            raise BootstrapError("nothing to bootstrap: add with_keyed_state(...) or with_spark_operators(...)")
        count = sources if isinstance(sources, int) else count_sources(sources)
        if isinstance(count, bool) or count < 1:
            raise BootstrapError(f"sources must be the restored query's number of sources (>= 1), got {sources!r}")
        options = dict(storage_options or {})
        target = open_storage(savepoint_dir, options)
        check_empty_target(target, savepoint_dir)
        own_work = self._work_dir is None
        work = self._work_dir or tempfile.mkdtemp(prefix="spark-state-bootstrap-")
        try:
            manifest, watermark = self._spark_part(target, work, count)
            manifest.query_id = str(uuid.uuid4())
            keyed: dict[str, dict[str, int]] = {}
            for entry in self._keyed:
                entries, rows = self._write_keyed(entry, target, options, manifest)
                keyed[entry.name] = {"rows": rows, "entries": entries}
        finally:
            if own_work:
                shutil.rmtree(work, ignore_errors=True)
        write_file(target, f"{F.SPARK_DIR}/metadata", ('{"id":"%s"}' % manifest.query_id).encode(), manifest)
        target.write_bytes(F.MANIFEST, manifest.to_json())
        operators = [{"id": o.id, "name": o.name, "stores": [s.name for s in o.stores],
                      "keys": sum(f.keys or 0 for f in manifest.files if f.path.startswith(f"{F.STATE_DIR}/{o.id}/"))}
                     for o in manifest.operators]
        return BootstrapResult(target.url, keyed, operators, count, watermark, manifest.total_keys,
                               round(time.perf_counter() - started, 3))

    # ------------------------------------------------------------------ Spark's part
    def _spark_part(self, target: CheckpointStorage, work: str, count: int) -> tuple[F.SavepointManifest, int]:
        """The one-batch run (Spark's operators over the history, or a one-row run that only
        yields the offset log's confs), its state files, and Spark's logs of batch 0."""
        spark = self._spark
        if self._operators is not None:
            history, query, mode, batches = self._operators
        else:
            history, query, mode, batches = spark.range(1), (lambda s: s), "append", 1
        data, checkpoint = os.path.join(work, "history"), os.path.join(work, "checkpoint")
        reader = spark.readStream.schema(history.schema)
        if batches > 1:  # one file per micro-batch
            history, reader = history.repartition(batches), reader.option("maxFilesPerTrigger", 1)
        history.write.mode("overwrite").parquet(data)
        stream = reader.parquet(data)
        out = query(stream)
        if not isinstance(out, DataFrame) or not out.isStreaming:
            raise BootstrapError("the query of with_spark_operators must return the streaming DataFrame it builds "
                                 "from its argument")
        previous = spark.conf.get(PROVIDER_CLASS_CONF, None)
        spark.conf.set(PROVIDER_CLASS_CONF, SPARKSTATE_PROVIDER)  # its state as spark-state stores
        try:
            run = (out.writeStream.format("noop").outputMode(mode).option("checkpointLocation", checkpoint)
                   .trigger(availableNow=True).start())
            run.awaitTermination()
        finally:
            if previous is None:
                spark.conf.unset(PROVIDER_CLASS_CONF)
            else:
                spark.conf.set(PROVIDER_CLASS_CONF, previous)
        ckpt = SparkCheckpoint(checkpoint)
        n = ckpt.committed_batch(None)
        manifest = take(ckpt, target, n, None, {}, {}, self._progress, None, allow_no_state=True, spark_logs=False)
        manifest.source, manifest.batch_id = "bootstrap", 0
        _renumber_time_files(target, manifest, n)
        if self._operators is None:
            manifest.operators = []
        offsets = OffsetEntry.decode(n, ckpt.storage.read_bytes(f"offsets/{n}"), f"offsets/{n}")
        commit = ckpt.storage.read_bytes(f"commits/{n}")
        watermark = next_batch_watermark(commit)
        metadata = dict(offsets.metadata, batchWatermarkMs=watermark)
        batch0 = OffsetEntry(0, offsets.version_line, metadata, tuple("-" for _ in range(count)))
        write_file(target, f"{F.SPARK_DIR}/offsets/0", batch0.encode(), manifest)
        write_file(target, f"{F.SPARK_DIR}/commits/0", commit, manifest)
        return manifest, watermark

    # ------------------------------------------------------------------ keyed part
    def _write_keyed(self, entry: _Keyed, target: CheckpointStorage, options: dict[str, str],
                     manifest: F.SavepointManifest) -> tuple[int, int]:
        if any(p.name == entry.name for p in manifest.process):
            raise BootstrapError(
                f"keyed state {entry.name!r} is added with with_keyed_state and also computed by a keyed function "
                "inside the query of with_spark_operators; keep one of them")
        history = entry.history
        keys, key_fields = key_columns(history, entry.key, f"the bootstrap of {entry.name!r}")
        opts = process_options(history, entry.function, StructType([]), keyed=True, parallelism=entry.parallelism,
                               max_parallelism=entry.max_parallelism, name=entry.name, state_location=None,
                               state_root=None, storage_options=None, engine=entry.engine)
        assert opts.max_parallelism is not None
        n, name, url = opts.parallelism, entry.name, target.url
        # with event time read by side (each row's event time on the context, the maxima
        # recorded), else the plain input (a key's rows in one call); two inputs tagged by side
        plan, routed = self._plan(entry, opts, keys, key_fields)

        def run(batches):
            return bootstrap_partition(plan, name, url, options, batches)

        bar = Progress(f"bootstrap of {name}", unit="partitions", total=n, enabled=self._progress)
        try:
            rows = []
            for row in routed.mapInArrow(run, RESULT_DDL).toLocalIterator():
                rows.append(row)
                bar.update(1)
        finally:
            bar.close()
        if sorted(r.partition for r in rows) != list(range(n)):  # pragma: no cover - mapInArrow runs every partition
            raise BootstrapError(f"the bootstrap of {name!r} wrote partitions {sorted(r.partition for r in rows)}, "
                                 f"expected 0..{n - 1}")
        for r in sorted(rows, key=lambda r: r.partition):
            manifest.files.append(F.file_entry_of_row(r))
            for m in r.maxima or ():
                write_file(target, F.process_time_file(name, f"{maxima_dir(0)}/{m}"), b"", manifest)
        manifest.process.append(F.ProcessEntry(name, KEYED, opts.max_parallelism, n, f"bootstrap:{name}", None,
                                               PLACED_BESIDE_CHECKPOINT, plan.key_record))
        return sum(r.keys for r in rows), sum(r.input_rows for r in rows)


    @staticmethod
    def _plan(entry: _Keyed, opts: Any, keys: list[str], key_fields: list) -> tuple[ProcessPlan, DataFrame]:
        """The plan and routed rows of a keyed bootstrap (:func:`~spark_state.process.offline.plan_offline`);
        a co-process bootstrap's sides' key columns checked to have the same types first."""
        history = entry.history
        if entry.right is not None:
            right_history, right_key = entry.right
            right_keys, _ = key_columns(right_history, right_key, f"the bootstrap of {entry.name!r} (right)")
            check_same_key_types(history, keys, right_history, right_keys)
            return plan_offline(history, keys, key_fields, CoOutputDropped(entry.function), opts, entry.event_time,
                                right=(right_history, right_keys))
        if entry.broadcast is not None:
            return plan_offline(history, keys, key_fields, BroadcastOutputDropped(entry.function), opts,
                                entry.event_time, broadcast=entry.broadcast)
        return plan_offline(history, keys, key_fields, OutputDropped(entry.function), opts, entry.event_time)


def count_sources(df: DataFrame) -> int:
    """The number of sources Spark's micro-batch engine gives the query of streaming DataFrame
    ``df``: the distinct streaming relations of its analyzed plan, told apart by their output
    attributes' ids, as Spark's engine tells them apart when it maps them to sources."""
    if not df.isStreaming:
        raise BootstrapError("sources= takes the restored query's streaming DataFrame (or the number of its sources)")
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise BootstrapError("the sources of a Spark Connect DataFrame cannot be counted; pass sources=<number>")
    found: set[tuple[str, tuple[int, ...]]] = set()
    stack = [jdf.queryExecution().analyzed()]
    while stack:
        node = stack.pop()
        if node.nodeName() in ("StreamingRelation", "StreamingRelationV2"):
            output = node.output()
            found.add((node.nodeName(), tuple(output.apply(i).exprId().id() for i in range(output.size()))))
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return len(found)


def _renumber_time_files(target: CheckpointStorage, manifest: F.SavepointManifest, batch: int) -> None:
    """The batch clock files of keyed functions inside the one-batch run's query, which name its
    last batch, renamed for batch 0 (the savepoint's), so that the restored query's first
    watermark follows from them (:mod:`spark_state.process.clock`)."""
    renames = {f"/{clock_path(batch)}": f"/{clock_path(0)}", f"/{maxima_dir(batch)}/": f"/{maxima_dir(0)}/"}
    for i, entry in enumerate(manifest.files):
        if not entry.path.startswith(F.PROCESS_DIR + "/"):
            continue
        for old, new in renames.items():
            if old in entry.path:
                path = entry.path.replace(old, new)
                target.write_bytes(path, target.read_bytes(entry.path))
                target.delete(entry.path)
                manifest.files[i] = dataclasses.replace(entry, path=path)
