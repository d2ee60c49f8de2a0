"""The keyed runtime's offline entry (spark_state.process.offline): a keyed function run over one
partition's routed rows against a store at a location, without Spark streaming -- the committed
entries come back, a second run starts from them, and the worker's store cache is left alone."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_state.config import EngineConfig
from spark_state.partitioning.spark_hash import spark_hash
from spark_state.process import KeyedProcessFunction
from spark_state.process.location import LocationSpec
from spark_state.process.offline import run_keyed_offline
from spark_state.process.options import ProcessOptions
from spark_state.process.plan import KEYED, Phases, ProcessPlan
from spark_state.process.routing import KEY_GROUP_COLUMN
from spark_state.process.stores import CACHE
from spark_state.state import ValueStateDescriptor
from spark_state.storage import open_storage

MAX_P = 16
SEEN: list[tuple[str, int]] = []


class Count(KeyedProcessFunction):
    """Counts a key's rows in a value state and records each count seen."""

    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", LongType()))

    def process_element(self, row, ctx):
        count = (self.n.value() or 0) + 1
        self.n.update(count)
        SEEN.append((row.k, count))
        return ()


class Fails(Count):
    def process_element(self, row, ctx):
        raise ZeroDivisionError("the function failed")


def _plan(function: KeyedProcessFunction) -> ProcessPlan:
    options = ProcessOptions(function_name="Count", location=LocationSpec(None, None, "Count"),
                             engine=EngineConfig(backend="hashmap"), parallelism=1, output_schema=StructType([]),
                             max_parallelism=MAX_P)
    return ProcessPlan(KEYED, function, options, (StructField("k", StringType()),), (), Phases(bootstrap=True))


def _rows(keys: list[str]) -> pa.RecordBatch:
    """Rows as a routed partition carries them: the key and its key group (pmod(hash(k), maxP))."""
    groups = [spark_hash([k], ["string"]) % MAX_P for k in keys]
    return pa.record_batch([pa.array(keys), pa.array(groups, pa.int32())], names=["k", KEY_GROUP_COLUMN])


def test_an_offline_run_gives_back_its_entries_and_a_second_run_starts_from_them(tmp_path) -> None:
    SEEN.clear()
    cached = len(CACHE)
    with run_keyed_offline(_plan(Count()), 0, open_storage(str(tmp_path / "a")), [_rows(["k1", "k2", "k1"])]) as run:
        assert run.input_rows == 3 and run.maxima() == []
        written = list(run.entries())
    assert sorted(SEEN) == [("k1", 1), ("k1", 2), ("k2", 1)]  # key groups run in their order, a key's rows in theirs
    assert written == sorted(written) and len(written) >= 2  # key order: the two keys' values (and schema records)
    assert len(CACHE) == cached, "an offline run keeps no store in the worker's cache"

    SEEN.clear()
    with run_keyed_offline(_plan(Count()), 0, open_storage(str(tmp_path / "b")), [_rows(["k1"])],
                           base=iter(written)) as run:
        assert run.input_rows == 1
    assert SEEN == [("k1", 3)]


def test_the_functions_error_propagates_and_nothing_is_kept(tmp_path) -> None:
    cached = len(CACHE)
    with pytest.raises(ZeroDivisionError, match="the function failed"):
        with run_keyed_offline(_plan(Fails()), 0, open_storage(str(tmp_path / "a")), [_rows(["k1"])]):
            pass
    assert len(CACHE) == cached
