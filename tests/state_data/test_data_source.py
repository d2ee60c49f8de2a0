"""``spark.read.format("spark-state")`` (and SQL's ``USING `spark-state```) gives the rows of the
Python readers on the same checkpoint and savepoint: keyed value, list and map state (nested and
flattened), timers, change feeds and a function's operator state; its options are checked with
clear errors; on Spark 3.5, registering names the line and the Python functions. The metadata
rows (``state_metadata``, ``format("spark-state-metadata")``, ``inspect --json``) of a checkpoint
and a savepoint. Every state of a key in one pass (``read_keyed_states``) equals a join of the
per-state DataFrames."""

from __future__ import annotations

import json
import random

import pytest
from pyspark.errors import AnalysisException

import process_fns
import state_data_fns
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, OPERATOR_OUTPUT, OperatorStates
from spark_state.__main__ import main
from spark_state.ops import savepoint
from spark_state.process import checkpointed_process, keyed_process
from spark_state.state_data import (StateDataError, UnknownStateError, read_change_feed, read_function_operator_state,
                                   read_keyed_state, read_keyed_states, read_spark_operator_state, read_timers,
                                   register_data_sources, state_metadata, StateReader)
from spark_state.state_data.datasource.options import plan_from_options
from spark_state.state_data.readers.keyed_state import plan_keyed_state
from spark_state.spark.lines import NEWEST, running_line
from state_data_fns import AllStatesAndTimers
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

PARALLELISM = 3
ON_35 = running_line().name == "3.5"


def _rows(frame) -> list[tuple]:
    """A DataFrame's rows, sorted, maps as sorted pairs (a map's order is not a row's content)."""
    def plain(v):
        if isinstance(v, dict):
            return tuple(sorted((k, plain(x)) for k, x in v.items()))
        if isinstance(v, list):
            return tuple(plain(x) for x in v)
        if isinstance(v, tuple):
            return tuple(plain(x) for x in v)
        return v
    return sorted(plain(tuple(r)) for r in frame.collect())


@pytest.fixture(scope="module")
def states(spark, tmp_path_factory):
    """A keyed function's checkpoint (every state kind, timers), its savepoint, and a
    checkpointed function's checkpoint (list, union list and broadcast operator state)."""
    ship_module_by_value(process_fns)
    ship_module_by_value(state_data_fns)
    tmp = tmp_path_factory.mktemp("datasource")
    rng = random.Random(5)
    batches = [[(f"k{rng.randrange(30)}", rng.randrange(0, 25)) for _ in range(40)] for _ in range(3)]
    write_batches(tmp / "in", batches, INPUT_SCHEMA)
    run_query(spark, lambda df: keyed_process(df, "k", AllStatesAndTimers(), ALL_STATES_OUTPUT,
                                              parallelism=PARALLELISM, name="AllStates"),
              provider_class=HDFS_PROVIDER, input_dir=str(tmp / "in"), schema=INPUT_SCHEMA,
              checkpoint_dir=str(tmp / "ckpt"), output_mode="append")
    savepoint(str(tmp / "ckpt"), str(tmp / "sp"), progress=False)
    ops = [[(f"r{b}", b * 100 + i) for i in range(8)] for b in range(2)]
    write_batches(tmp / "ops-in", ops, INPUT_SCHEMA)
    run_query(spark, lambda df: checkpointed_process(df, OperatorStates(), OPERATOR_OUTPUT, parallelism=PARALLELISM,
                                                     name="Ops"),
              provider_class=HDFS_PROVIDER, input_dir=str(tmp / "ops-in"), schema=INPUT_SCHEMA,
              checkpoint_dir=str(tmp / "ops"), output_mode="append")
    savepoint(str(tmp / "ops"), str(tmp / "ops-sp"), progress=False)
    if not ON_35:
        register_data_sources(spark)
    return {"ckpt": str(tmp / "ckpt"), "sp": str(tmp / "sp"), "ops": str(tmp / "ops"), "ops-sp": str(tmp / "ops-sp")}


def _source(spark, path, **options):
    reader = spark.read.format("spark-state")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


@pytest.mark.lines
def test_on_spark_35_registering_names_the_line_and_the_functions(spark):
    if not ON_35:
        register_data_sources(spark)  # registers again: harmless
        assert spark.read.format("spark-state") is not None
        return
    with pytest.raises(StateDataError, match=r"Spark 3\.5 has no Python Data Source API.*read_keyed_state"):
        register_data_sources(spark)


@pytest.mark.lines
@pytest.mark.skipif(ON_35, reason="the Python Data Source API is Spark 4.0+ (the 3.5 test above checks the refusal)")
def test_the_data_source_equals_the_python_readers(spark, states):
    # The newest line reads both; the others (the compatibility suite, whose time CI counts four
    # times) the checkpoint only: the data source's line-specific part is the same for both, and a
    # savepoint is read through the same readers once restored.
    paths = (states["ckpt"], states["sp"]) if running_line() == NEWEST else (states["ckpt"],)
    for path in paths:
        for state in ("count", "recent", "buckets", "total", "mean"):
            # the source flattens by default, as Spark's reader does; the functions do not
            flat = _source(spark, path, stateVarName=state)
            assert flat.columns[-1] == "partition_id"
            # not vacuous: rows from every partition store
            assert {r.partition_id for r in flat.select("partition_id").distinct().collect()} == set(
                range(PARALLELISM)), state
            assert _rows(flat) == _rows(read_keyed_state(spark, path, state, flatten_collection_types=True)), state
            nested = _source(spark, path, stateVarName=state, flattenCollectionTypes="false")
            python = read_keyed_state(spark, path, state)
            assert nested.schema == python.schema and _rows(nested) == _rows(python), state
        timers = _source(spark, path, readRegisteredTimers="true")
        assert timers.columns == ["k", "domain", "expiration_timestamp_ms", "partition_id"]
        assert _rows(timers) == _rows(read_timers(spark, path)) and timers.count() > 0
    flat_list = _source(spark, states["sp"], stateVarName="recent")
    assert flat_list.count() > _source(spark, states["sp"], stateVarName="recent",
                                       flattenCollectionTypes="false").count() > 0  # a row per element
    assert _rows(_source(spark, states["ckpt"], stateVarName="count", batchId=1)) == _rows(
        read_keyed_state(spark, states["ckpt"], "count", batch=1))
    for state in ("count", "recent", "buckets"):
        feed = _source(spark, states["ckpt"], stateVarName=state, readChangeFeed="true", changeStartBatchId=1,
                       changeEndBatchId=2, **({"flattenCollectionTypes": "false"} if state == "recent" else {}))
        python = read_change_feed(spark, states["ckpt"], state, start_batch=1, end_batch=2)
        assert feed.columns == python.columns and _rows(feed) == _rows(python) and feed.count() > 0
    for state in ("split", "union", "bcast"):
        python = read_function_operator_state(spark, states["ops"], state, function="Ops")
        for path in (states["ops"], states["ops-sp"]):  # a savepoint reads as its checkpoint does
            frame = _source(spark, path, operatorStateName=state, functionName="Ops")
            assert frame.columns == python.columns and _rows(frame) == _rows(python) and frame.count() > 0
        assert _rows(read_function_operator_state(spark, states["ops-sp"], state)) == _rows(python)


@pytest.mark.skipif(ON_35, reason="the Python Data Source API is Spark 4.0+")
def test_sql_reads_state_through_a_temporary_view(spark, states):
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW ds_counts USING `spark-state` "
              f"OPTIONS (path '{states['ckpt']}', stateVarName 'count')")
    found = spark.sql("SELECT k, value, partition_id FROM ds_counts").collect()
    assert sorted(map(tuple, found)) == _rows(read_keyed_state(spark, states["ckpt"], "count"))
    top = spark.sql("SELECT partition_id, count(*) AS n FROM ds_counts GROUP BY partition_id").collect()
    assert sum(r.n for r in top) == len(found) > 0 and {r.partition_id for r in top} == set(range(PARALLELISM))


@pytest.mark.parametrize("options, message", [
    ({"stateVarNme": "count"}, r"unknown option 'stateVarNme'.*did you mean 'stateVarName'.*valid options: path, "
                               r"stateVarName"),
    ({}, r"give exactly one of stateVarName or readRegisteredTimers or operatorStateName \(given: none\)"),
    ({"stateVarName": "count", "readRegisteredTimers": "true"}, "reads one thing"),
    ({"stateVarName": "count", "readChangeFeed": "true"}, "needs changeStartBatchId"),
    ({"stateVarName": "count", "readChangeFeed": "true", "changeStartBatchId": "0", "batchId": "1"},
     "give changeEndBatchId, not batchId"),
    ({"stateVarName": "count", "changeStartBatchId": "0"}, r"changeStartBatchId goes with a change feed \(readChangeFeed\)"),
    ({"stateVarName": "count", "batchId": "last"}, "must be a batch id"),
    ({"stateVarName": "count", "flattenCollectionTypes": "sometimes"}, "must be true or false"),
    ({"operatorId": "0"}, r"format\('statestore'\)"),
    ({"readRegisteredTimers": "true", "flattenCollectionTypes": "false"}, "flattenCollectionTypes applies to "
                                                                          "keyed state reads"),
    ({"stateVarName": "recent", "readChangeFeed": "true", "changeStartBatchId": "1", "flattenCollectionTypes": "true"},
     "a change feed's row holds the whole list or map"),
])
def test_bad_options_give_clear_errors(states, options, message):
    """The checks the source makes on the driver (the same function its schema() calls)."""
    with pytest.raises(StateDataError, match=message):
        plan_from_options({"path": states["ckpt"], **options})


def test_a_savepoints_other_batch_names_the_option_the_way_the_user_wrote_it(states, capsys):
    """Every reader of a savepoint says which batch it holds and names the option to change as
    the surface the user asked through spells it: the data source's option, Python's argument,
    the command's flag."""
    with pytest.raises(StateDataError, match=r"holds the state of batch 2 only, not of batch 1: omit batchId or "
                                             r"give 2$"):
        plan_from_options({"path": states["sp"], "stateVarName": "count", "batchId": "1"})
    with pytest.raises(StateDataError, match=r"holds the state of batch 1 only, not of batch 0: omit batchId"):
        plan_from_options({"path": states["ops-sp"], "operatorStateName": "split", "batchId": "0"})
    with pytest.raises(StateDataError, match=r"not of batch 1: omit batch= or give 2$"):
        plan_keyed_state(states["sp"], "count", batch=1)
    assert main(["read", states["sp"], "count", "--batch", "1"]) == 1
    assert "not of batch 1: omit --batch or give 2" in capsys.readouterr().err


@pytest.mark.skipif(ON_35, reason="the Python Data Source API is Spark 4.0+")
def test_spark_reports_the_sources_errors(spark, states):
    """Spark raises the source's error (from its Python worker) as an AnalysisException whose text
    holds the source's class and message; Spark hands the options over in lower case."""
    with pytest.raises(AnalysisException, match=r"(?s)StateDataError: unknown option 'statevarnme'.*did you mean "
                                                r"'stateVarName'"):
        _source(spark, states["ckpt"], stateVarNme="count").collect()
    with pytest.raises(AnalysisException, match=r"(?s)UnknownStateError: function 'AllStates' has no keyed state "
                                                r"'cont' \(states: buckets, count"):
        _source(spark, states["ckpt"], stateVarName="cont").collect()
    # Spark's hideTraceback conf leaves the message alone, without the Python traceback before it
    hide = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"
    spark.conf.set(hide, "true")
    try:
        with pytest.raises(AnalysisException) as raised:
            _source(spark, states["ckpt"], stateVarName="count", batchId="x").collect()
        text = str(raised.value)
        assert "Traceback" not in text and "OptionError: option batchId must be a batch id (an integer), got 'x'" \
            in text, text
    finally:
        spark.conf.unset(hide)


def _facts(rows):
    """A metadata row without its location (a savepoint's differs from its checkpoint's)."""
    return sorted(tuple((k, v) for k, v in r.items() if k != "location") for r in rows)


@pytest.mark.lines
def test_state_metadata_of_a_checkpoint_and_its_savepoint(spark, states, tmp_path, capsys):
    """One row per keyed state, operator state, timer service and Spark operator store, with its
    types, TTL, key columns, committed batches and partitions; `inspect --json` says the same."""
    rows = state_metadata(states["ckpt"])
    keyed = {r["name"]: r for r in rows if r["kind"] == "keyed_state"}
    assert {n: (r["state_type"], r["value_type"], r["map_key_type"]) for n, r in keyed.items()} == {
        "count": ("value", "bigint", None), "recent": ("list", "bigint", None), "buckets": ("map", "bigint", "bigint"),
        "total": ("reducing", "bigint", None), "mean": ("aggregating", "struct<s:bigint,n:bigint>", None)}
    assert all((r["function"], r["key_columns"], r["min_batch_id"], r["max_batch_id"], r["num_partitions"],
                r["ttl_ms"], r["backend"]) == ("AllStates", "k string", 0, 2, PARALLELISM, None, "spark-state")
               for r in keyed.values())
    assert [(r["function"], r["key_columns"]) for r in rows if r["kind"] == "timers"] == [("AllStates", "k string")]
    sp_rows = state_metadata(states["sp"])
    assert _facts(sp_rows) == _facts({**r, "min_batch_id": 2} for r in rows)  # a savepoint holds one batch
    assert all(r["location"].startswith(str(states["sp"]).rstrip("/")) or r["location"].startswith("file:")
               for r in sp_rows)
    ops = {r["name"]: r["state_type"] for r in state_metadata(states["ops"]) if r["kind"] == "operator_state"}
    assert ops == {"split": "list", "union": "union", "bcast": "broadcast"}
    assert main(["inspect", states["ckpt"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"] == rows
    assert main(["inspect", states["sp"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"] == sp_rows
    assert main(["inspect", states["sp"]]) == 0
    assert "keyed_state AllStates.buckets: map (key_columns k string, map_key_type bigint, value_type bigint), " \
           "batches 2..2, 3 partitions, spark-state" in capsys.readouterr().out

    # a Spark operator: one row per store, with the provider as the backend
    write_batches(tmp_path / "in", [[("a", 1), ("b", 2)], [("a", 3)]], INPUT_SCHEMA)
    run_query(spark, lambda df: df.groupBy("k").count(), provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"),
              schema=INPUT_SCHEMA, checkpoint_dir=str(tmp_path / "agg"), output_mode="update")
    [agg] = state_metadata(str(tmp_path / "agg"))
    assert (agg["kind"], agg["operator_id"], agg["name"], agg["min_batch_id"], agg["max_batch_id"]) == (
        "spark_operator", 0, "default", 0, 1)
    assert agg["backend"] == "hdfs" and agg["num_partitions"] == 4 and agg["operator_name"]
    # typed from the store's schema file, as Spark's state reader types its key and value columns
    assert (agg["state_type"], agg["key_columns"], agg["value_type"]) == ("value", "k string", "struct<count:bigint>")
    from spark_state import ops as O

    O.savepoint(str(tmp_path / "agg"), str(tmp_path / "agg-sp"), progress=False)
    [agg_sp] = state_metadata(str(tmp_path / "agg-sp"))
    assert {f: agg_sp[f] for f in ("state_type", "key_columns", "value_type")} == {
        f: agg[f] for f in ("state_type", "key_columns", "value_type")}
    if not ON_35:
        frame = spark.read.format("spark-state-metadata").load(str(tmp_path / "agg"))
        assert [r.asDict() for r in frame.collect()] == [agg]
        stored = read_spark_operator_state(spark, str(tmp_path / "agg")).schema
        assert stored["value"].dataType.simpleString() == agg["value_type"]
        assert ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in stored["key"].dataType.fields) == \
            agg["key_columns"]
        frame = spark.read.format("spark-state-metadata").load(states["sp"])
        assert sorted(map(tuple, frame.collect())) == sorted(tuple(r.values()) for r in sp_rows)


def test_every_state_of_a_key_in_one_pass_equals_a_join_of_the_states(spark, states):
    from pyspark.sql import functions as F

    def _summary(key, found):  # nested: pickled by value to the tasks
        """A key with all its states -> one row (the user's function)."""
        yield (key, found.get("count"), len(found.get("recent", [])), sum(found.get("buckets", {}).values()),
               found.get("total"), sorted(found))

    for path in (states["ckpt"], states["sp"]):
        frame = read_keyed_states(spark, path, _summary,
                                  "k string, n bigint, recent int, buckets bigint, total bigint, names array<string>")
        assert frame.columns == ["k", "n", "recent", "buckets", "total", "names", "partition_id"]
        assert frame.rdd.getNumPartitions() == PARALLELISM
        joined = None
        for state in ("count", "recent", "buckets", "total", "mean"):
            one = read_keyed_state(spark, path, state).select("k", "partition_id", F.col("value").alias(state))
            joined = one if joined is None else joined.join(one, ["k", "partition_id"], "full_outer")
        expected = joined.select(
            "k", F.col("count"), F.size(F.coalesce("recent", F.array().cast("array<bigint>"))),
            F.aggregate(F.map_values("buckets"), F.lit(0).cast("bigint"), lambda a, b: a + b), F.col("total"),
            F.array_sort(F.array_compact(F.array(*[F.when(F.col(s).isNotNull(), F.lit(s)) for s in
                                                  ("buckets", "count", "mean", "recent", "total")]))),
            "partition_id")
        assert sorted(map(tuple, frame.collect())) == sorted(map(tuple, expected.collect()))
    two = read_keyed_states(spark, states["sp"], lambda k, s: [(k, sorted(s))], "k string, names array<string>",
                            states=["count", "recent"])
    assert {tuple(r.names) for r in two.collect()} == {("count", "recent")}
    with pytest.raises(StateDataError, match="'partition_id', which the reader adds"):
        read_keyed_states(spark, states["ckpt"], _summary, "partition_id int")
    # a row of the wrong length or type: the error names the function, the schema and the row
    # (pyarrow's own, "Schema and number of arrays unequal", named none of them)
    with pytest.raises(Exception, match=r"read_keyed_states: the reader function .*_summary yielded 6 values for "
                                        r"the schema 'k string, n bigint' \(2 columns; partition_id is added.*\): "
                                        r"\('"):
        read_keyed_states(spark, states["ckpt"], _summary, "k string, n bigint").collect()
    with pytest.raises(Exception, match=r"yielded a str, not a tuple of values"):
        read_keyed_states(spark, states["ckpt"], lambda k, s: [k], "k string").collect()
    with pytest.raises(Exception, match=r"column 'n' \(int64\) cannot hold a value of the rows"):
        read_keyed_states(spark, states["ckpt"], lambda k, s: [(k, "many")], "k string, n bigint").collect()
    # a state no partition store records is a typo, refused on the driver (not a state without values)
    for path in (states["ckpt"], states["sp"]):
        with pytest.raises(UnknownStateError, match=r"function 'AllStates' has no keyed state 'cont' \(states: "
                                                    r"buckets, count, mean, recent, total\)"):
            read_keyed_states(spark, path, _summary, "k string", states=["count", "cont"])


def test_read_spark_operator_state_names_the_operators_there_are(spark, states):
    """A keyed function's checkpoint and savepoint hold no Spark operator: the reader says so,
    before a savepoint is restored, instead of Spark's "Failed to read the state schema"."""
    for path in (states["ckpt"], states["sp"]):
        with pytest.raises(UnknownStateError, match=r"holds no state of a Spark operator 0 \(a keyed function's "
                                                    r"state is read with read_keyed_state.*Spark operators: none"):
            read_spark_operator_state(spark, path, work_dir="/nonexistent/never-written")


def test_a_state_reader_gives_the_readers_rows_with_the_path_given_once(spark, states):
    """``StateReader(spark, path)``: each method equals its function on the same checkpoint or
    savepoint (the defaults of the object reach every call)."""
    for path in (states["ckpt"], states["sp"]):
        reader = StateReader(spark, path, function="AllStates")
        for state in ("count", "recent", "buckets"):
            expected = _rows(read_keyed_state(spark, path, state, function="AllStates"))
            assert expected and _rows(reader.keyed_state(state)) == expected
        flat = _rows(reader.keyed_state("recent", flatten_collection_types=True))
        assert flat == _rows(read_keyed_state(spark, path, "recent", flatten_collection_types=True))
        timers = _rows(reader.timers())
        assert timers and timers == _rows(read_timers(spark, path))
        assert reader.metadata() == state_metadata(path)
        with reader.lookup() as lookup:
            key, count = read_keyed_state(spark, path, "count").select("k", "value").first()
            assert lookup.get("count", key) == count
    reader = StateReader(spark, states["ckpt"])
    feed = _rows(reader.change_feed("count", start_batch=1))
    assert feed and feed == _rows(read_change_feed(spark, states["ckpt"], "count", start_batch=1))
    for path in (states["ops"], states["ops-sp"]):
        got = _rows(StateReader(spark, path, function="Ops").operator_state("union"))
        assert got and got == _rows(read_function_operator_state(spark, path, "union", function="Ops"))
