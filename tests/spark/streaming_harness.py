"""Run a streaming query over deterministic micro-batches on a chosen state store provider.

The provider equivalence tests (``test_operator_equivalence.py``) and, later, the tests of
spark-state's own provider run the *same* stateful query over the *same* micro-batches on
two providers and compare what every batch emitted. This module holds the pieces:

* :func:`write_batches` writes one input file per micro-batch (parquet by default, JSON lines
  on request). File names sort in batch order and every file gets an explicit, strictly
  increasing modification time, because the file source orders new files by modification
  time. With ``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)`` batch *i* then reads
  exactly file *i*. Several sources (stream-stream joins) stay in step when every input dir
  has a file for every batch (write an empty batch where a side has no rows): each source
  independently takes its next file on every trigger.
* :func:`run_query` sets the provider class (and extra SQL confs) on the session, starts the
  query with a ``foreachBatch`` sink that collects each batch's rows, waits until the
  ``availableNow`` trigger has drained the input, restores the session confs, and returns a
  :class:`RunResult` (outputs per batch id plus the query's progress reports). A second call
  on the same checkpoint continues the query (Spark pins the provider class in the offset log
  at the first batch).
* :func:`state_operator_metrics` reads ``stateOperators`` from a run's progress reports.

Rows are returned as plain nested tuples (a struct such as a ``window`` becomes a tuple),
sorted with ``None`` ordered first, so outputs compare with ``==``.

Functions that Spark runs in Python workers (``applyInPandasWithState``, ``mapInPandas``) must
be importable there or pickled by value: test modules are not on the workers' ``sys.path``, so
call :func:`ship_module_by_value` with the module that defines them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import sys
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARKSTATE_PROVIDER = "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider"
#: spark-state's provider with ``backend=hashmap`` (state in the executor's JVM heap). A provider id
#: ``<class>#<backend>`` makes :func:`run_query` set ``spark.sql.streaming.stateStore.sparkState.backend``.
SPARKSTATE_HASHMAP = SPARKSTATE_PROVIDER + "#hashmap"
#: spark-state's provider on each of its backends, for tests parametrized by backend.
SPARKSTATE_BACKENDS = [SPARKSTATE_PROVIDER, SPARKSTATE_HASHMAP]


def backends_default_on_every_line(ids: Sequence[str] = ("rocksdb", "hashmap")) -> list:
    """:data:`SPARKSTATE_BACKENDS` as parameters (named ``ids``) of a test the compatibility suite
    runs on the default backend only (mark ``lines`` on it): what a Spark line changes, how Spark
    calls the provider, is the same for both backends, whose own code the newest line's suite runs."""
    import pytest

    return [pytest.param(SPARKSTATE_PROVIDER, id=ids[0], marks=pytest.mark.lines),
            pytest.param(SPARKSTATE_HASHMAP, id=ids[1])]


#: ... with ``+spill``: every store's pending writes spill to local disk past 100 bytes of heap (at
#: nearly every write), so that every read path and the commit go through spilled runs.
SPARKSTATE_SPILLING = [SPARKSTATE_PROVIDER + "#rocksdb+spill", SPARKSTATE_HASHMAP + "+spill"]
PROVIDER_CLASS_CONF = "spark.sql.streaming.stateStore.providerClass"
BACKEND_CONF = "spark.sql.streaming.stateStore.sparkState.backend"
SPILL_THRESHOLD_CONF = "spark.sql.streaming.stateStore.sparkState.memory.spillThreshold"

#: Modification time of batch file 0; batch i gets ``BASE_MTIME + i * MTIME_STEP``. Fixed (not
#: "now") so that restarts and late additions keep the order; the file source's ``maxFileAge``
#: is relative to the newest file it has seen, not to the wall clock.
BASE_MTIME = 1_700_000_000
MTIME_STEP = 10

PathLike = Union[str, "os.PathLike[str]"]


def short_name(provider_class: str) -> str:
    """``org.apache...RocksDBStateStoreProvider`` -> ``RocksDBStateStoreProvider`` (for ids);
    ``...SparkStateProvider#hashmap`` -> ``SparkStateProvider#hashmap``."""
    return provider_class.rsplit(".", 1)[-1]


def split_provider(provider: str) -> tuple[str, dict[str, str]]:
    """``(provider class, confs)`` of a provider id: ``<class>``, ``<class>#<spark-state backend>``
    or ``<class>#<backend>+spill`` (see :data:`SPARKSTATE_SPILLING`)."""
    cls, _, backend = provider.partition("#")
    backend, _, spill = backend.partition("+")
    confs = {BACKEND_CONF: backend} if backend else {}
    if spill:
        confs[SPILL_THRESHOLD_CONF] = "100"
    return cls, confs


# --------------------------------------------------------------------------------------------
# Input files


def _to_record(row: Any, names: Sequence[str]) -> dict:
    if isinstance(row, Mapping):
        return {n: row.get(n) for n in names}
    if len(row) != len(names):
        raise ValueError(f"row {row!r} does not match columns {list(names)}")
    return dict(zip(names, row))


def _json_value(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.isoformat()
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


def write_batches(
    input_dir: PathLike,
    batches: Sequence[Iterable[Any]],
    schema,
    *,
    start: int = 0,
    fmt: str = "parquet",
) -> list[str]:
    """Write ``batches[j]`` as the input file of micro-batch ``start + j``; return the paths.

    Rows are tuples in ``schema`` order or dicts by column name. Naive datetimes are UTC.
    An empty batch still gets a (row-less) file, so that it still is one micro-batch, which
    keeps several sources in step. Files appear atomically (written under a hidden name,
    which the file source ignores, then renamed).
    """
    import pyarrow as pa

    os.makedirs(input_dir, exist_ok=True)
    names = schema.fieldNames()
    paths = []
    arrow_schema = None
    if fmt == "parquet":
        import pyarrow.parquet as pq
        from spark_state.spark.compat import arrow_schema as to_arrow

        arrow_schema = to_arrow(schema)
    elif fmt != "json":
        raise ValueError(f"unknown input format {fmt!r} (parquet or json)")
    for j, rows in enumerate(batches):
        index = start + j
        records = [_to_record(r, names) for r in rows]
        path = os.path.join(os.fspath(input_dir), f"batch-{index:06d}.{fmt}")
        if os.path.exists(path):
            raise FileExistsError(f"{path} exists: batch {index} was written before")
        tmp = os.path.join(os.fspath(input_dir), f".tmp-{uuid.uuid4().hex}")
        if fmt == "parquet":
            pq.write_table(pa.Table.from_pylist(records, schema=arrow_schema), tmp)
        else:
            with open(tmp, "w", encoding="utf-8") as out:
                for rec in records:
                    out.write(json.dumps({k: _json_value(v) for k, v in rec.items()}) + "\n")
        mtime = BASE_MTIME + index * MTIME_STEP
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------------------------
# Rows


def plain(value: Any) -> Any:
    """A Row (or nested Row / list / dict) as plain hashable, comparable Python values."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return tuple(plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, plain(v)) for k, v in value.items()))
    return value


def _sort_key(value: Any) -> Any:
    # None sorts first; tuples compare element-wise with the same rule.
    if value is None:
        return (0,)
    if isinstance(value, tuple):
        return (1, tuple(_sort_key(v) for v in value))
    return (1, value)


def sort_rows(rows: Iterable[Any]) -> list:
    return sorted(rows, key=_sort_key)


# --------------------------------------------------------------------------------------------
# Running a query


class _StopAfterBatches(Exception):
    """Raised inside foreachBatch to end a run before a batch executes (see run_query)."""


STOP_MARKER = "spark-state-harness: stop_after_batches reached"


@dataclass
class RunResult:
    """What one ``run_query`` call saw."""

    provider_class: str
    #: batch id -> sorted rows (plain tuples) that foreachBatch received for it
    batches: dict[int, list]
    #: progress reports of this run, as dicts (StreamingQueryProgress JSON), in order
    progress: list[dict] = field(default_factory=list)
    query_id: Optional[str] = None
    run_id: Optional[str] = None
    stopped_early: bool = False

    @property
    def batch_ids(self) -> list[int]:
        return sorted(self.batches)

    def rows(self) -> list:
        """All rows of all batches, batch after batch (each batch sorted)."""
        return [r for b in self.batch_ids for r in self.batches[b]]

    def row_counts(self) -> Counter:
        return Counter(self.rows())

    def nonempty_batches(self) -> dict[int, list]:
        return {b: rows for b, rows in sorted(self.batches.items()) if rows}

    def state_operators(self, batch_id: Optional[int] = None) -> list[dict]:
        return state_operator_metrics(self, batch_id)


def merge_runs(*runs: RunResult) -> dict[int, list]:
    """Per-batch outputs of consecutive runs on one checkpoint. A batch that a later run
    re-executed (it had started but not committed) keeps the later run's output, which is
    the idempotent-sink contract of foreachBatch."""
    merged: dict[int, list] = {}
    for run in runs:
        merged.update(run.batches)
    return dict(sorted(merged.items()))


def _explicit_confs(spark) -> dict[str, str]:
    """The session's explicitly set confs (``RuntimeConfig.getAll`` is 4.0+; 3.5 asks the JVM)."""
    if hasattr(spark.conf, "getAll"):
        return dict(spark.conf.getAll)
    jmap = spark._jvm.scala.collection.JavaConverters.mapAsJavaMap(spark._jsparkSession.conf().getAll())
    return {str(k): str(v) for k, v in jmap.items()}


def run_query(
    spark,
    build_query: Callable[..., Any],
    *,
    provider_class: str,
    input_dir: Union[PathLike, Sequence[PathLike]],
    schema,
    checkpoint_dir: PathLike,
    output_mode: str = "update",
    extra_confs: Optional[Mapping[str, Any]] = None,
    stop_after_batches: Optional[int] = None,
    fmt: str = "parquet",
    timeout: float = 300.0,
    query_name: Optional[str] = None,
) -> RunResult:
    """Run ``build_query`` over the batch files in ``input_dir`` until they are all consumed.

    ``provider_class`` may carry a spark-state backend: ``<class>#hashmap`` (see :func:`split_provider`).
    ``input_dir``/``schema`` may be lists (one entry per source); ``build_query`` then gets
    one streaming DataFrame per source, positionally. Each source is read with
    ``maxFilesPerTrigger=1``, so each micro-batch takes the next file of every source.

    The provider class and ``extra_confs`` are set as session SQL confs while the query
    starts and runs, and restored afterwards (unset if they were not set before). Spark pins
    the provider class in the offset log at the first batch, so a restart on an existing
    checkpoint keeps the class the checkpoint was created with.

    ``stop_after_batches=n`` ends the run once this run has executed ``n`` batches: when
    batch ``n+1`` of the run reaches the sink, the sink raises before the batch is executed
    (its offsets are logged, nothing of it is committed) and the query stops. The next run on
    the checkpoint re-plans that batch from the offset log and executes it -- a crash
    between batches, deterministically. The returned result has ``stopped_early=True``.
    """
    dirs = [input_dir] if isinstance(input_dir, (str, os.PathLike)) else list(input_dir)
    schemas = list(schema) if isinstance(schema, (list, tuple)) else [schema] * len(dirs)
    if len(schemas) != len(dirs):
        raise ValueError("one schema per input dir")

    provider, backend_confs = split_provider(provider_class)
    confs = {PROVIDER_CLASS_CONF: provider, **backend_confs}
    confs.update({k: str(v) for k, v in (extra_confs or {}).items()})
    before = _explicit_confs(spark)
    outputs: dict[int, list] = {}
    lock = threading.Lock()
    executed = [0]
    stop_requested = [False]

    def sink(batch_df, batch_id: int) -> None:
        with lock:
            if stop_after_batches is not None and executed[0] >= stop_after_batches:
                stop_requested[0] = True
                raise _StopAfterBatches(f"{STOP_MARKER} before batch {batch_id}")
        rows = sort_rows(plain(r) for r in batch_df.collect())  # executes the batch once
        with lock:
            outputs[batch_id] = rows
            executed[0] += 1

    query = None
    try:
        for key, value in confs.items():
            spark.conf.set(key, value)
        streams = []
        for d, sch in zip(dirs, schemas):
            reader = spark.readStream.schema(sch).option("maxFilesPerTrigger", 1)
            streams.append(reader.parquet(os.fspath(d)) if fmt == "parquet" else reader.json(os.fspath(d)))
        result_df = build_query(*streams)
        writer = (
            result_df.writeStream.foreachBatch(sink)
            .outputMode(output_mode)
            .option("checkpointLocation", os.fspath(checkpoint_dir))
            .trigger(availableNow=True)
        )
        if query_name:
            writer = writer.queryName(query_name)
        query = writer.start()
        try:
            finished = query.awaitTermination(timeout)
        except Exception as exc:  # StreamingQueryException
            if not (stop_requested[0] and STOP_MARKER in str(exc)):
                raise
            finished = True
        if not finished:
            query.stop()
            raise TimeoutError(f"streaming query did not finish within {timeout} s")
        progress = [json.loads(p.json()) for p in query._jsq.recentProgress()]
        return RunResult(
            provider_class=provider_class,
            batches=dict(sorted(outputs.items())),
            progress=progress,
            query_id=str(query.id),
            run_id=str(query.runId),
            stopped_early=stop_requested[0],
        )
    finally:
        if query is not None and query.isActive:
            query.stop()
        for key in confs:
            if key in before:
                spark.conf.set(key, before[key])
            else:
                spark.conf.unset(key)


# --------------------------------------------------------------------------------------------
# Metrics


def _progress_list(source) -> list[dict]:
    if isinstance(source, RunResult):
        return source.progress
    if hasattr(source, "_jsq"):  # a StreamingQuery
        return [json.loads(p.json()) for p in source._jsq.recentProgress()]
    return list(source)


def state_operator_metrics(source, batch_id: Optional[int] = None) -> list[dict]:
    """``stateOperators`` of the last progress report (or of ``batch_id``) of a RunResult,
    a StreamingQuery, or a list of progress dicts: one dict per stateful operator with
    ``operatorName``, ``numRowsTotal``, ``numRowsUpdated``, ``numRowsRemoved``,
    ``commitTimeMs``, ``memoryUsedBytes``, ``customMetrics`` (dict), ...
    Returns [] when there is no matching report."""
    reports = [p for p in _progress_list(source) if "batchId" in p]
    if batch_id is not None:
        reports = [p for p in reports if p["batchId"] == batch_id]
    if not reports:
        return []
    return list(reports[-1].get("stateOperators") or [])


def sql_tab(spark, query_id: str) -> dict[int, dict[str, dict[str, str]]]:
    """What the Spark UI's SQL tab shows for the batches of the query ``query_id`` (every run):
    batch id -> plan node name -> metric name -> the metric's text as the tab shows it. Read from
    the application's SQL status store, which feeds the tab (and keeps it without a UI)."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    out: dict[int, dict[str, dict[str, str]]] = {}
    for i in range(executions.size()):
        execution = executions.apply(i)
        description = execution.description() or ""
        batch = re.search(r"^batch = (\d+)$", description, re.M)
        if f"\nid = {query_id}\n" not in description or batch is None:
            continue
        values: dict[int, str] = {}
        entries = store.executionMetrics(execution.executionId()).iterator()
        while entries.hasNext():
            entry = entries.next()
            values[int(entry._1())] = entry._2()
        nodes = store.planGraph(execution.executionId()).allNodes()
        shown = out.setdefault(int(batch.group(1)), {})
        for j in range(nodes.size()):
            node = nodes.apply(j)
            metrics = node.metrics()
            shown[node.name()] = {metrics.apply(k).name(): values.get(int(metrics.apply(k).accumulatorId()), "")
                                  for k in range(metrics.size())}
    return out


def batch_durations(source, key: str = "triggerExecution", skip_first: int = 0) -> list[int]:
    """``durationMs[key]`` (ms) of each executed batch, in order, minus the first ``skip_first``."""
    reports = [p for p in _progress_list(source) if key in (p.get("durationMs") or {})]
    return [int(p["durationMs"][key]) for p in reports][skip_first:]


def ship_module_by_value(module_or_name) -> None:
    """Make PySpark pickle the module's functions by value, so Python workers (which do not
    have ``tests/`` on their path) can run functions defined in it."""
    from pyspark import cloudpickle

    module = sys.modules[module_or_name] if isinstance(module_or_name, str) else module_or_name
    cloudpickle.register_pickle_by_value(module)

