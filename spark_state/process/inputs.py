"""Driver side: the inputs of one keyed operator, unioned into the one stream its tasks read.

A keyed operator can read more than one stream: the second input of ``keyed_co_process``, the
rule stream of ``keyed_broadcast_process``, and the tick stream that makes Spark run batches for
due timers (:mod:`.ticks`). Spark's ``mapInArrow`` reads one DataFrame, so the inputs are
unioned, each row tagged with its *side*:

=====  ===========================  ============================  =====================
side   what                         key group                     route (-> partition)
=====  ===========================  ============================  =====================
1      keyed input (left)           ``pmod(hash(key), maxP)``     of its key group
2      second keyed input (right)   ``pmod(hash(key), maxP)``     of its key group
3      broadcast rows               -1                            every route (explode)
0      tick                         -1                            partition 0's route
=====  ===========================  ============================  =====================

Columns are renamed to positions so that inputs with clashing names union cleanly: input side
``s``'s column ``i`` becomes ``__spark_state_s<s>_<i>``; every other side's columns are null in
its rows. A keyed input read alone (no union) keeps its own column names and has no side
column. Both keyed inputs must have the same key types, because the key group is Spark's hash
of the key values and ``hash(1)`` differs from ``hash(1L)``.

Every batch of the union runs a task in every partition (a shuffle into ``n`` partitions
always has ``n`` tasks), so a tick row only has to exist for the batch to run at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from .errors import ProcessDefinitionError
from .event_time import EventTime
from .routing import (
    KEY_GROUP_COLUMN,
    NO_KEY_GROUP,
    ROUTE_COLUMN,
    SIDE_COLUMN,
    every_route,
    first_route,
    key_group_and_route,
    repartition_routed,
)

LEFT, RIGHT, BROADCAST_SIDE, TICK = 1, 2, 3, 0


@dataclass(frozen=True)
class InputSide:
    """One input of a keyed operator, as its tasks see it."""

    tag: int
    #: the input's column names (the fields of its row namedtuples)
    names: tuple[str, ...]
    #: the same columns' names in the tasks' Arrow input
    arrow_names: tuple[str, ...]
    #: key column names (input names; empty for broadcast rows)
    key_names: tuple[str, ...] = ()
    event_time: Optional[EventTime] = None

    def arrow_name(self, name: str) -> str:
        return self.arrow_names[self.names.index(name)]


def renamed(tag: int, names: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"__spark_state_s{tag}_{i}" for i in range(len(names)))


def single_input(df: DataFrame, keys: list[str], event_time: Optional[EventTime]) -> InputSide:
    return InputSide(LEFT, tuple(df.columns), tuple(df.columns), tuple(keys), event_time)


def check_same_key_types(left: DataFrame, left_keys: list[str], right: DataFrame, right_keys: list[str]) -> None:
    lt = {f.name: f.dataType for f in left.schema.fields}
    rt = {f.name: f.dataType for f in right.schema.fields}
    if len(left_keys) != len(right_keys):
        raise ProcessDefinitionError(
            f"the two inputs have {len(left_keys)} and {len(right_keys)} key columns; they must match")
    for a, b in zip(left_keys, right_keys):
        if lt[a] != rt[b]:
            raise ProcessDefinitionError(
                f"key column {a!r} ({lt[a].simpleString()}) and {b!r} ({rt[b].simpleString()}) have different "
                "types; keys route by Spark's hash, which differs between types: cast one side, e.g. "
                f"right.withColumn({b!r}, col({b!r}).cast('{lt[a].simpleString()}'))")


def union_inputs(parts: list[tuple[InputSide, DataFrame]], parallelism: int, max_parallelism: int,
                 ticks: Optional[DataFrame]) -> DataFrame:
    """Union the inputs and the tick stream as the module docstring lays out, repartitioned
    by route; the tasks' Arrow input has every side's columns, the key group and the side.
    ``ticks`` None: no tick stream (a batch job: a bootstrap, :mod:`spark_state.state_data.writers.bootstrap`)."""
    all_columns: list[tuple[str, DataType]] = []
    for side, df in parts:
        types = {f.name: f.dataType for f in df.schema.fields}
        all_columns.extend((a, types[n]) for n, a in zip(side.names, side.arrow_names))

    def project(side: Optional[InputSide], df: DataFrame, kg, route, tag: int) -> DataFrame:
        own = dict(zip(side.arrow_names, side.names)) if side else {}
        cols = [F.col(f"`{own[a]}`").alias(a) if a in own else F.lit(None).cast(t).alias(a)
                for a, t in all_columns]
        return df.select(*cols, kg.alias(KEY_GROUP_COLUMN), F.lit(tag).alias(SIDE_COLUMN), route.alias(ROUTE_COLUMN))

    projected = []
    for side, df in parts:
        if side.key_names:
            kg, route = key_group_and_route(list(side.key_names), parallelism, max_parallelism)
        else:
            kg, route = F.lit(NO_KEY_GROUP), every_route(parallelism)
        projected.append(project(side, df, kg, route, side.tag))
    if ticks is not None:
        projected.append(project(None, ticks, F.lit(NO_KEY_GROUP), first_route(parallelism), TICK))
    union = projected[0]
    for other in projected[1:]:
        union = union.union(other)
    return repartition_routed(union, parallelism)
