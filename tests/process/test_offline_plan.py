"""process.offline.plan_offline for two-input functions: the plan and routing of
``keyed_co_process`` / ``keyed_broadcast_process`` (one builder of process/api.py each), with
the bootstrap phase, for the offline runs of bootstraps."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from spark_state.config import EngineConfig
from spark_state.process.inputs import BROADCAST_SIDE, LEFT, RIGHT, SIDE_COLUMN
from spark_state.process.location import LocationSpec
from spark_state.process.offline import plan_offline
from spark_state.process.options import ProcessOptions
from spark_state.process.plan import KEYED, BroadcastSpec
from spark_state.state import MapStateDescriptor

LEFT_SCHEMA = StructType([StructField("k", StringType()), StructField("v", LongType()),
                          StructField("ts", TimestampType())])
RIGHT_SCHEMA = StructType([StructField("key", StringType()), StructField("w", LongType())])
RULES = MapStateDescriptor("rules", StringType(), LongType())


def _options() -> ProcessOptions:
    return ProcessOptions(function_name="F", location=LocationSpec(None, None, "F"),
                          engine=EngineConfig(backend="hashmap"), parallelism=2, output_schema=StructType([]),
                          max_parallelism=8)


def _frames(spark):
    ts = dt.datetime(2024, 1, 1)
    left = spark.createDataFrame([("a", 1, ts), ("b", 2, ts)], LEFT_SCHEMA)
    right = spark.createDataFrame([("a", 10), ("c", 30)], RIGHT_SCHEMA)
    return left, right


def test_a_co_process_plan_tags_both_sides_and_routes_them(spark) -> None:
    left, right = _frames(spark)
    function = object()
    plan, routed = plan_offline(left, ["k"], [LEFT_SCHEMA["k"]], function, _options(), "ts",
                                right=(right, ["key"]))
    assert plan.kind == KEYED and plan.function is function
    assert [s.tag for s in plan.sides] == [LEFT, RIGHT]
    assert plan.sides[0].key_names == ("k",) and plan.sides[1].key_names == ("key",)
    assert plan.sides[0].event_time is not None and plan.sides[0].event_time.column == "ts"
    assert plan.sides[1].event_time is None  # the second input of a bootstrap carries no event time
    assert plan.phases.two_inputs and plan.phases.bootstrap and plan.phases.event_time
    assert routed.rdd.getNumPartitions() == 2
    tags = sorted(r[SIDE_COLUMN] for r in routed.collect())
    assert tags == sorted([LEFT, LEFT, RIGHT, RIGHT])


def test_a_broadcast_plan_sends_every_broadcast_row_to_every_partition(spark) -> None:
    left, rules = _frames(spark)
    spec = BroadcastSpec((RULES,), ("w",))
    plan, routed = plan_offline(left, ["k"], [LEFT_SCHEMA["k"]], object(), _options(), broadcast=(rules, spec))
    assert [s.tag for s in plan.sides] == [LEFT, BROADCAST_SIDE]
    assert plan.phases.broadcast == spec and plan.phases.bootstrap and not plan.phases.event_time
    assert not plan.phases.two_inputs
    tags = sorted(r[SIDE_COLUMN] for r in routed.collect())
    assert tags == sorted([LEFT, LEFT] + [BROADCAST_SIDE] * 4)  # 2 broadcast rows x 2 partitions


def test_one_offline_run_has_a_second_input_or_a_broadcast_input(spark) -> None:
    left, right = _frames(spark)
    with pytest.raises(ValueError, match="a second input or a broadcast input, not both"):
        plan_offline(left, ["k"], [LEFT_SCHEMA["k"]], object(), _options(), right=(right, ["key"]),
                     broadcast=(right, BroadcastSpec((RULES,))))
