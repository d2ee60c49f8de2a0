"""Driver side: the event-time column and delay a DataFrame declares with ``withWatermark``.

Spark users declare event time on the DataFrame (``df.withWatermark("ts", "10 seconds")``);
Spark records it as an ``EventTimeWatermark`` node in the logical plan. spark-state reads
that node from ``df._jdf.queryExecution().analyzed()`` (its ``eventTime`` attribute and
``delay``, converted with Spark's own ``EventTimeWatermark.getDelayMs``), so one declaration
serves Spark and the function. The watermark itself is computed by spark-state
(:mod:`.clock`): Spark's is not visible to ``mapInArrow`` tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pyspark.sql import DataFrame
from pyspark.sql import types as T

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
    nodes = _watermark_nodes(df._jdf.queryExecution().analyzed())
    if not nodes:
        return None
    jvm = df.sparkSession._jvm
    specs = set()
    for node in nodes:
        delay = jvm.org.apache.spark.sql.catalyst.plans.logical.EventTimeWatermark.getDelayMs(node.delay())
        specs.add(EventTime(node.eventTime().name(), int(delay)))
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
