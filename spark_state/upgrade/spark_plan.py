"""The stateful operators a new query plans, and Spark's own start-up verdict on each, from Spark's
planner -- without running the query.

A restarted query's first batch is planned by Spark's ``IncrementalExecution``: its rule numbers
the stateful operators (top down: the one nearest the sink is 0), and on Spark 4 each operator then
validates its key and value schemas against the checkpoint's schema files
(``validateAndMaybeEvolveStateSchema``), raising ``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE`` and the
like. This module builds that same ``IncrementalExecution`` through Py4J for the new query's
DataFrame, with the checkpoint's confs (``OffsetSeqMetadata.setSessionConf``, as a restart does)
in a new session, and calls those same methods on each operator:

* against a local copy of the checkpoint's schema and metadata files: Spark's verdict, exactly
  (its code, its error condition and message); a copy because the method may write schema files;
* against an empty directory: the operator's new schemas, as the files Spark writes for a new
  query, read back; there Spark's own start-up rule (``StateSchemaAndOperatorMetadataRule``) then
  writes each operator's metadata too, so :attr:`PlannedQuery.state_files` holds exactly the
  schema and metadata files a new checkpoint of the query starts with (what a carry-over of the
  state writes, :mod:`.carry_over`).

Nothing is executed: no source is read, no job runs. Spark 4.0 and newer: Spark 3.5 has no
per-operator validation on the driver (its check runs in the tasks), so the check refuses that
line with :class:`UpgradeCheckUnsupported`. The Spark classes differ in package between lines
(4.1 moved them); they are found by name (:data:`_CLASSES`) and the planner's constructor is
called with arguments chosen by its parameter types (:meth:`_Jvm.incremental_execution`), the
one place that knows its shape.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional

from pyspark.sql import DataFrame, SparkSession

from ..errors import SparkStateError
from ..ops.checkpoint_reader import parse_schema_file
from ..process.location import LocationSpec
from ..process.plan import KEYED, ProcessPlan
from ..process.recording import declared_states, recorded_plans
from ..state.schema import StateSchema, schema_of
from .held import HeldState, store_of_schema_path

__all__ = ["PlannedFunction", "PlannedOperator", "PlannedQuery", "SparkRefusal", "UpgradeCheckUnsupported",
           "plan_new_query"]

#: Spark's classes the check uses, by role: the candidates' names, newest line first.
_CLASSES = {
    "incremental_execution": ("org.apache.spark.sql.execution.streaming.runtime.IncrementalExecution",
                              "org.apache.spark.sql.execution.streaming.IncrementalExecution"),
    "stateful_operator": ("org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperator",
                          "org.apache.spark.sql.execution.streaming.StatefulOperator"),
    "state_store_writer": ("org.apache.spark.sql.execution.streaming.operators.stateful.StateStoreWriter",
                           "org.apache.spark.sql.execution.streaming.StateStoreWriter"),
    "offset_seq_metadata": ("org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqMetadata",
                            "org.apache.spark.sql.execution.streaming.OffsetSeqMetadata"),
    "watermark_propagator": ("org.apache.spark.sql.execution.streaming.runtime.WatermarkPropagator",
                             "org.apache.spark.sql.execution.streaming.WatermarkPropagator"),
}

#: The state schema format Spark 4 writes for every operator but transformWithState.
_STATE_SCHEMA_VERSION = 2

#: What a query builder is: a SparkSession in, the new query's streaming DataFrame out.
QueryBuilder = Callable[[SparkSession], DataFrame]


class UpgradeCheckUnsupported(SparkStateError):
    """The running Spark line cannot plan the check (Spark 3.5), or the query is not a streaming one."""


@dataclass(frozen=True)
class SparkRefusal:
    """An error Spark raises at start: its condition (``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``) and message."""

    condition: str
    message: str

    @property
    def first_line(self) -> str:
        """The message's first line without the ``[CONDITION]`` Spark starts it with."""
        line = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return line.removeprefix(f"[{self.condition}]").strip() or self.condition


@dataclass(frozen=True)
class PlannedOperator:
    """One stateful operator of the new query."""

    id: int
    name: str
    partitions: int
    #: store name -> (key schema, value schema) the new query writes (Spark StructType JSON)
    schemas: Mapping[str, tuple[dict, dict]]
    #: what Spark's schema validation raises against the checkpoint (None: it passes)
    refusal: Optional[SparkRefusal]


@dataclass(frozen=True)
class PlannedFunction:
    """One keyed or checkpointed function of the new query, as its builder plans it."""

    name: str
    kind: str
    #: ``{"columns": [...], "types": [...]}`` (keyed), None otherwise
    key: Optional[dict]
    max_parallelism: Optional[int]
    #: the keyed states its ``open`` declares, as the records it would write (None: not known)
    states: Optional[Mapping[str, StateSchema]] = None
    #: why ``states`` is not known
    states_note: Optional[str] = None
    parallelism: int = 0
    #: where it keeps its state (``state_location=``, ``state_root=`` or beside the checkpoint)
    location: Optional[LocationSpec] = None


@dataclass(frozen=True)
class PlannedQuery:
    operators: Mapping[int, PlannedOperator]
    spark_version: str
    #: what ``writeStream.start()`` raises before any state is looked at: an operation streaming
    #: does not support in this output mode (``UnsupportedOperationChecker``); None: nothing
    unsupported: Optional[SparkRefusal] = None
    #: the files Spark writes under ``state/`` for a new checkpoint of the query (each operator's
    #: ``_metadata/metadata`` and schema files; no state): path relative to the checkpoint -> bytes
    state_files: Mapping[str, bytes] = field(default_factory=dict)
    #: the new query's keyed and checkpointed functions, by name (:mod:`spark_state.process.recording`)
    functions: Mapping[str, PlannedFunction] = field(default_factory=dict)
    #: the new query's sources in Spark's order (the offset log's), by name: a table's name for a
    #: source of the v2 API (a function's tick source: ``spark_state_ticks(<name>)``), else the
    #: source's name (None: not listed)
    sources: Optional[tuple[str, ...]] = None

    @property
    def source_count(self) -> Optional[int]:
        return None if self.sources is None else len(self.sources)


def plan_new_query(spark: SparkSession, build: QueryBuilder, held: HeldState, output_mode: str) -> PlannedQuery:
    """Plan ``build``'s query as a restart on ``held`` would plan its first batch, and validate each
    stateful operator's schemas with Spark's own code (see the module's docstring)."""
    if not hasattr(spark, "_jsparkSession"):
        raise UpgradeCheckUnsupported(
            "the upgrade check plans through the driver's JVM, which a Spark Connect client has no access to: run "
            "`spark-state upgrade-check` (or check_upgrade in a classic session) where the checkpoint is readable")
    session = spark.newSession()
    jvm = _Jvm(session)
    metadata = jvm.cls("offset_seq_metadata").apply(held.offset_metadata_json)
    jvm.cls("offset_seq_metadata").setSessionConf(metadata, session._jsparkSession.sessionState().conf())
    with recorded_plans() as plans:
        frame = build(session)
    functions = {p.location.name: _planned_function(p) for p in plans}
    if not isinstance(frame, DataFrame) or not frame.isStreaming:
        raise UpgradeCheckUnsupported(
            "the query builder must return the new query's streaming DataFrame (what is passed to writeStream), "
            f"got {type(frame).__name__}{'' if not isinstance(frame, DataFrame) else ' (not streaming)'}")
    logical = frame._jdf.queryExecution().analyzed()
    unsupported = jvm.unsupported_operations(logical, output_mode)
    sources = jvm.sources(logical)
    with tempfile.TemporaryDirectory(prefix="spark-state-upgrade-") as scratch:
        held_dir, fresh_dir = os.path.join(scratch, "held"), os.path.join(scratch, "fresh")
        held.copy_check_files(held_dir)
        os.makedirs(os.path.join(fresh_dir, "state"), exist_ok=True)
        refusals = {op_id: refusal for op_id, refusal, _ in
                    jvm.validate(logical, metadata, os.path.join(held_dir, "state"), held.next_batch, output_mode)}
        operators = {}
        for op_id, refusal, (name, partitions, paths) in jvm.validate(
                logical, metadata, os.path.join(fresh_dir, "state"), held.next_batch, output_mode,
                write_metadata=True):
            if refusal is not None:  # against nothing, only a broken plan fails
                raise UpgradeCheckUnsupported(f"Spark cannot plan operator {op_id} of the new query: {refusal.message}")
            schemas = {}
            for path in paths:
                local = path[len("file:"):] if path.startswith("file:") else path
                with open(local, "rb") as f:
                    schemas[store_of_schema_path(local)] = parse_schema_file(f.read(), path)
            operators[op_id] = PlannedOperator(op_id, name, partitions, schemas, refusals.get(op_id))
        state_files = {}
        for folder, _, files in os.walk(fresh_dir):
            for name in files:
                local = os.path.join(folder, name)
                if not name.startswith("."):  # Hadoop's local file system writes .crc files beside
                    with open(local, "rb") as f:
                        state_files[os.path.relpath(local, fresh_dir).replace(os.sep, "/")] = f.read()
    return PlannedQuery(operators, spark.version, unsupported, state_files, functions, sources)


def _planned_function(plan: ProcessPlan) -> PlannedFunction:
    """A function of the new query, with the states its ``open`` declares when it is keyed
    (:func:`~spark_state.process.recording.declared_states`)."""
    name = plan.location.name
    states: Optional[dict[str, StateSchema]] = None
    note = None
    if plan.kind == KEYED:
        try:
            states = {n: schema_of(d) for n, d in declared_states(plan).items()}
        except Exception as exc:  # noqa: BLE001 - the user's open(); the check goes on without its states
            note = f"its states are not compared: open(ctx) raised {type(exc).__name__}: {exc}"
    return PlannedFunction(name, plan.kind, plan.key_record, plan.max_parallelism, states, note, plan.parallelism,
                           plan.location)


class _Jvm:
    """Spark's planner through Py4J, on one session."""

    def __init__(self, session: SparkSession) -> None:
        self.session = session
        context: Any = session.sparkContext
        self.jvm: Any = context._jvm
        self.gateway: Any = context._gateway
        self.loader = self.jvm.java.lang.Thread.currentThread().getContextClassLoader()
        if not session.version.split(".")[0].isdigit() or int(session.version.split(".")[0]) < 4:
            raise UpgradeCheckUnsupported(
                f"the upgrade check needs Spark 4.0 or newer (this is Spark {session.version}): Spark 3.5 checks state "
                "schemas in the tasks of the first batch, not while planning it")

    def java_class(self, role: str) -> Any:
        """The ``java.lang.Class`` of a role of :data:`_CLASSES` on this line."""
        for name in _CLASSES[role]:
            try:
                return self.jvm.java.lang.Class.forName(name, True, self.loader)
            except Exception:  # noqa: BLE001 - Py4J raises its own error for ClassNotFoundException
                continue
        raise UpgradeCheckUnsupported(f"Spark {self.session.version} has none of {', '.join(_CLASSES[role])}")

    def cls(self, role: str) -> Any:
        """The Py4J handle of a role's class (its static methods: a Scala companion's forwarders)."""
        name = self.java_class(role).getName()
        handle = self.jvm
        for part in name.split("."):
            handle = getattr(handle, part)
        return handle

    def invoke(self, obj: Any, role: str, method: str, types: tuple = (), args: tuple = ()) -> Any:
        """``obj.method(*args)`` through the interface of ``role``: Py4J cannot call a trait's
        method on a class that is not public (the deduplication operators' base class)."""
        return self.java_class(role).getMethod(method, self.array(self.jvm.java.lang.Class, types)).invoke(
            obj, self.array(self.jvm.java.lang.Object, args))

    def array(self, element_class: Any, items: Any) -> Any:
        """A Java array of ``element_class`` holding ``items`` (what reflection takes)."""
        items = list(items)
        out = self.gateway.new_array(element_class, len(items))
        for i, item in enumerate(items):
            out[i] = item
        return out

    def output_mode(self, name: str) -> Any:
        modes = self.jvm.org.apache.spark.sql.streaming.OutputMode
        return {"append": modes.Append, "update": modes.Update, "complete": modes.Complete}[name]()

    def unsupported_operations(self, logical: Any, output_mode: str) -> Optional[SparkRefusal]:
        """What Spark's check of a streaming plan in ``output_mode`` raises at start, if anything."""
        try:
            self.jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker.checkForStreaming(
                logical, self.output_mode(output_mode))
        except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException arrives as a Py4J error
            return _refusal(exc)
        return None

    def sources(self, logical: Any) -> tuple[str, ...]:
        """The sources of a streaming query of ``logical`` in the order Spark numbers them: its
        distinct streaming relations, pre-order (Spark's micro-batch execution maps each equal
        relation to one source as it transforms the plan top down)."""
        seen = self.jvm.java.util.HashSet()
        names = []
        stack = [logical]
        while stack:
            node = stack.pop()
            kind = node.getClass().getSimpleName()
            if kind in ("StreamingRelation", "StreamingRelationV2") and node not in seen:
                seen.add(node)  # Py4J's set: Python's add, which returns nothing
                names.append(str(node.table().name() if kind == "StreamingRelationV2" else node.sourceName()))
            children = node.children()
            stack.extend(children.apply(i) for i in reversed(range(children.size())))
        return tuple(names)

    def incremental_execution(self, logical: Any, metadata: Any, state_dir: str, batch: int, output_mode: str) -> Any:
        """A first batch's ``IncrementalExecution`` of ``logical`` with its state in ``state_dir``.
        Its arguments by parameter type: the session, the plan, the output mode, the state
        directory, two new ids (query, run), the batch, the previous and current offset metadata,
        a watermark propagator, ``isFirstBatch`` (the first boolean: true; the rest, where a line
        has more, false), empty maps and ``CommandExecutionMode.ALL``."""
        jss = self.session._jsparkSession
        conf = jss.sessionState().conf()
        mode = self.output_mode(output_mode)
        ctor = self.java_class("incremental_execution").getConstructors()[0]
        uuids = iter([self.jvm.java.util.UUID.randomUUID(), self.jvm.java.util.UUID.randomUUID()])
        first_boolean = [True]
        args = []
        for param in ctor.getParameterTypes():
            name = param.getName()
            if name.endswith("SparkSession"):
                args.append(jss)
            elif name.endswith("LogicalPlan"):
                args.append(logical)
            elif name.endswith("OutputMode"):
                args.append(mode)
            elif name == "java.lang.String":
                args.append("file:" + state_dir)
            elif name == "java.util.UUID":
                args.append(next(uuids))
            elif name == "long":
                args.append(batch)  # reflection widens the Integer Py4J sends
            elif name == "scala.Option":
                args.append(self.jvm.scala.Option.apply(metadata))
            elif "OffsetSeqMetadata" in name:
                args.append(metadata)
            elif name.endswith("WatermarkPropagator"):
                args.append(self.cls("watermark_propagator").apply(conf))
            elif name == "boolean":
                args.append(first_boolean.pop() if first_boolean else False)
            elif name == "scala.collection.mutable.Map":
                args.append(self.jvm.scala.collection.mutable.HashMap())
            elif name == "scala.Enumeration$Value":
                args.append(self.jvm.org.apache.spark.sql.execution.CommandExecutionMode.ALL())
            else:
                raise UpgradeCheckUnsupported(
                    f"Spark {self.session.version}'s IncrementalExecution takes a {name} the check does not know")
        return ctor.newInstance(self.array(self.jvm.java.lang.Object, args))

    @staticmethod
    def numbered_plan(execution: Any) -> Any:
        """The execution's physical plan with the stateful operators' ids assigned by Spark's own
        rule (``StateOpIdRule``)."""
        return execution.sparkPlan().transform(execution.StateOpIdRule().rule())

    def stateful_operators(self, plan: Any) -> Iterator[Any]:
        """The state-writing operators of a numbered plan, top down."""
        writer = self.java_class("state_store_writer")
        stack = [plan]
        while stack:
            node = stack.pop()
            if writer.isAssignableFrom(node.getClass()):
                yield node
            children = node.children()
            stack.extend(children.apply(i) for i in reversed(range(children.size())))

    def validate(self, logical: Any, metadata: Any, state_dir: str, batch: int, output_mode: str, *,
                 write_metadata: bool = False
                 ) -> Iterator[tuple[int, Optional[SparkRefusal], tuple[str, int, list[str]]]]:
        """Each operator's ``(id, Spark's refusal or None, (short name, partitions, schema files written))``
        when validated against the schema files in ``state_dir``; with ``write_metadata``, Spark's
        start-up rule then writes every operator's metadata into ``state_dir`` (as a first batch does)."""
        execution = self.incremental_execution(logical, metadata, state_dir, batch, output_mode)
        plan = self.numbered_plan(execution)
        hadoop_conf = self.session._jsparkSession.sessionState().newHadoopConf()
        types = (self.jvm.java.lang.Class.forName("org.apache.hadoop.conf.Configuration", True, self.loader),
                 self.jvm.java.lang.Long.TYPE, self.jvm.java.lang.Integer.TYPE)
        args = (hadoop_conf, batch, _STATE_SCHEMA_VERSION)
        for node in self.stateful_operators(plan):
            info = self.invoke(node, "stateful_operator", "getStateInfo")
            name = self.invoke(node, "state_store_writer", "shortName")
            paths: list[str] = []
            refusal = None
            try:
                results = self.invoke(node, "stateful_operator", "validateAndMaybeEvolveStateSchema", types, args)
                paths = [results.apply(i).schemaPath() for i in range(results.size())]
            except Exception as exc:  # noqa: BLE001 - Spark's refusal arrives as a Py4J error
                refusal = _refusal(exc)
            yield int(info.operatorId()), refusal, (str(name), int(info.numPartitions()), paths)
        if write_metadata:
            plan.transform(execution.StateSchemaAndOperatorMetadataRule().rule())


def _refusal(exc: BaseException) -> SparkRefusal:
    """Spark's error inside a Py4J error (reflection wraps it): the first cause with an error condition."""
    cause = getattr(exc, "java_exception", None)
    while cause is not None:
        for getter in ("getCondition", "getErrorClass"):
            try:
                condition = getattr(cause, getter)()
            except Exception:  # noqa: BLE001 - not a SparkThrowable, or a line without this getter
                continue
            if condition:
                return SparkRefusal(str(condition), str(cause.getMessage()))
        cause = cause.getCause()
    return SparkRefusal(type(exc).__name__, str(exc))
