"""Driver side: the event-time column and delay a DataFrame declares with ``withWatermark``.

Spark users declare event time on the DataFrame (``df.withWatermark("ts", "10 seconds")``);
Spark records it as an ``EventTimeWatermark`` node in the logical plan. spark-state reads
that node from ``df._jdf.queryExecution().analyzed()`` (its ``eventTime`` attribute and
``delay``, converted with Spark's own ``EventTimeWatermark.getDelayMs``), so one declaration
serves Spark and the function. The column gives each row's event time (``ctx.timestamp()``,
late rows) and the delay the watermark where the tasks compute it themselves; the watermark of
a batch is Spark's, read from the query's offset log (:mod:`.clock`, :mod:`.spark_time`).

A Spark Connect DataFrame has no ``_jdf``: its ``withWatermark`` calls are read from the
client's own plan (``WithWatermark`` nodes), and the delay strings are converted by the
server with the same interval parser (``CAST(delay AS INTERVAL)``) and the same arithmetic as
``getDelayMs`` (a month is 31 days). A watermark the client's plan cannot show (one declared
in SQL, ``spark.sql(... WATERMARK ...)``) is found in the server's analyzed plan and
refused with a :class:`ProcessDefinitionError` that says to use ``withWatermark``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..spark.connect import is_connect
from .errors import ProcessDefinitionError

_TIME_TYPES = (T.TimestampType, T.TimestampNTZType)


@dataclass(frozen=True)
class EventTime:
    """An input's event-time column and its watermark delay (milliseconds)."""

    column: str
    delay_ms: int


def _children(plan: Any) -> list:
    ch = plan.children()
    return [ch.apply(i) for i in range(ch.size())]


def _watermark_nodes(plan: Any) -> list:
    found = []
    stack = [plan]
    while stack:
        node = stack.pop()
        if node.nodeName() == "EventTimeWatermark":
            found.append(node)
        stack.extend(_children(node))
    return found


def event_time_of(df: DataFrame, what: str) -> Optional[EventTime]:
    """The event time ``df`` declares with ``withWatermark``, or None.

    :raises ProcessDefinitionError: the event-time column is not among ``df``'s columns any
        more, has no timestamp type, or several different watermarks are declared.
    """
    if is_connect(df):
        specs = _connect_specs(df, what)
    else:
        nodes = _watermark_nodes(df._jdf.queryExecution().analyzed())
        jvm = df.sparkSession._jvm
        assert jvm is not None  # a classic session: df._jdf above is a JVM object too
        specs = set()
        for node in nodes:
            delay = jvm.org.apache.spark.sql.catalyst.plans.logical.EventTimeWatermark.getDelayMs(node.delay())
            specs.add(EventTime(node.eventTime().name(), int(delay)))
    if not specs:
        return None
    if len(specs) > 1:
        raise ProcessDefinitionError(
            f"{what}: the input declares several watermarks ({sorted((s.column, s.delay_ms) for s in specs)}); "
            "declare one withWatermark(column, delay) per input")
    spec = specs.pop()
    fields = {f.name: f for f in df.schema.fields}
    if spec.column not in fields:
        raise ProcessDefinitionError(
            f"{what}: the watermark's event-time column {spec.column!r} is not among the input's columns "
            f"{list(fields)}; keep it (select it, or call withWatermark after the projection)")
    if not isinstance(fields[spec.column].dataType, _TIME_TYPES):
        raise ProcessDefinitionError(
            f"{what}: the event-time column {spec.column!r} has type "
            f"{fields[spec.column].dataType.simpleString()}; it must be a timestamp")
    return spec


# --- Spark Connect ---------------------------------------------------------------------------


def _connect_watermarks(plan: Any) -> list[tuple[str, str]]:
    """``(event time column, delay string)`` of every ``WithWatermark`` node of a Connect
    client plan (any attribute of a node that is a plan, or a list of plans, is a child)."""
    from pyspark.sql.connect.plan import LogicalPlan, WithWatermark

    found, seen, stack = [], set(), [plan]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, WithWatermark):
            found.append((node._event_time, node._delay_threshold))
        for value in vars(node).values():
            values = value if isinstance(value, (list, tuple)) else [value]
            stack.extend(v for v in values if isinstance(v, LogicalPlan))
    return found


def _unquoted(name: str) -> str:
    """A column name as ``withWatermark`` takes it (``UnresolvedAttribute``), unquoted:
    ```a``b``` -> ``a`b``; a plain name is returned as it is."""
    if len(name) >= 2 and name[0] == name[-1] == "`" and "`" not in name[1:-1].replace("``", ""):
        return name[1:-1].replace("``", "`")
    return name


def _delays_ms(spark: Any, delays: list[str]) -> dict[str, int]:
    """Delay strings -> milliseconds, computed by the server exactly as Spark's
    ``EventTimeWatermark.getDelayMs(IntervalUtils.fromIntervalString(delay))``: months count
    31 days, and microseconds are truncated to milliseconds."""
    from pyspark.sql import functions as F

    def part(field: str, interval: Any) -> Any:
        return F.extract(F.lit(field), interval).cast("long")

    columns = []
    for i, delay in enumerate(delays):
        iv = F.lit(delay).cast("interval")
        months = part("YEAR", iv) * 12 + part("MONTH", iv)
        ms = (months * (31 * 86_400_000) + part("DAY", iv) * 86_400_000 + part("HOUR", iv) * 3_600_000
              + part("MINUTE", iv) * 60_000 + F.floor(F.extract(F.lit("SECOND"), iv) * 1000).cast("long"))
        columns.append(ms.alias(f"d{i}"))
    row = spark.range(1).select(*columns).collect()[0]
    return {delay: int(row[f"d{i}"]) for i, delay in enumerate(delays)}


def _connect_specs(df: DataFrame, what: str) -> set:
    connect_df: Any = df  # a pyspark.sql.connect DataFrame: its plan and explain are Connect-only members
    marks = _connect_watermarks(connect_df._plan)
    if not marks:
        analyzed = connect_df._explain_string(extended=True).split("== Analyzed Logical Plan ==", 1)[-1]
        analyzed = analyzed.split("== Optimized Logical Plan ==", 1)[0]
        if "EventTimeWatermark " in analyzed:
            raise ProcessDefinitionError(
                f"{what}: the input declares a watermark spark-state cannot read over Spark Connect (not with "
                "DataFrame.withWatermark, e.g. in SQL); declare it with df.withWatermark(column, delay) on the "
                "DataFrame you pass")
        return set()
    delays = _delays_ms(df.sparkSession, sorted({delay for _, delay in marks}))
    return {EventTime(_unquoted(column), delays[delay]) for column, delay in marks}
