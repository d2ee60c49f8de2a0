"""Erasure from the state of Spark's own operators (erase_keys(..., operator_key=[...])): an aggregation
and a deduplication on spark-state's provider lose every row of the erased user and nothing else
(Spark's own reader shows the rest unchanged), the report counts them, and the continued query
treats the user as new; a key column no store has is refused, naming the stores' key columns."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_state.__main__ import main
from spark_state.state_data import KeyMismatchError, erase_keys, read_spark_operator_state
from spark_state.spark.lines import running_line
from streaming_harness import SPARKSTATE_PROVIDER, run_query, write_batches

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("user", StringType()), StructField("n", LongType())])
BATCHES = [[("alice", 1), ("bob", 1), ("cid", 2)], [("alice", 2), ("bob", 3), ("alice", 1)], [("cid", 5), ("bob", 1)]]
QUERIES = {
    "aggregation": (lambda df: df.groupBy("user").agg(F.count("*").alias("rows"), F.sum("n").alias("total")),
                    "update"),
    "dedup": (lambda df: df.dropDuplicates(["user", "n"]), "append"),
}


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_erasing_a_user_from_sparks_operators(spark, tmp_path, query):
    if running_line().name == "3.5":
        pytest.skip("the check reads the state with Spark's reader (Spark 4.0+)")
    build, mode = QUERIES[query]
    ckpt = str(tmp_path / "ckpt")
    write_batches(tmp_path / "in", BATCHES, SCHEMA)

    def run():
        return run_query(spark, build, provider_class=SPARKSTATE_PROVIDER, input_dir=str(tmp_path / "in"),
                         schema=SCHEMA, checkpoint_dir=ckpt, output_mode=mode)

    run()

    def state():
        return sorted((tuple(r.key), tuple(r.value)) for r in read_spark_operator_state(spark, ckpt).collect())

    before = state()
    alice = [row for row in before if row[0][0] == "alice"]
    assert alice
    with pytest.raises(KeyMismatchError, match="user"):
        erase_keys(ckpt, ["alice"], operator_key=["customer"], progress=False)

    result = erase_keys(ckpt, ["alice"], operator_key=["user"], progress=False)
    name = "0 stateStoreSave" if query == "aggregation" else "0 dedupe"
    assert result.operators == {name: {"default": {"rows": len(alice)}}} and result.functions == {}
    assert state() == [row for row in before if row[0][0] != "alice"]

    # the continued query: alice starts afresh, bob goes on (the erasure was batch 3)
    write_batches(tmp_path / "in", [[("alice", 1), ("bob", 1)]], SCHEMA, start=len(BATCHES))
    out = run().batches[len(BATCHES) + 1]
    if query == "aggregation":
        assert sorted(out) == [("alice", 1, 1), ("bob", 4, 6)]
    else:  # (alice, 1) is new again; (bob, 1) was seen
        assert sorted(out) == [("alice", 1)]


def test_the_command_line_reports_the_operators_rows(spark, tmp_path, capsys):
    build, mode = QUERIES["aggregation"]
    ckpt = str(tmp_path / "ckpt")
    write_batches(tmp_path / "in", BATCHES, SCHEMA)
    run_query(spark, build, provider_class=SPARKSTATE_PROVIDER, input_dir=str(tmp_path / "in"), schema=SCHEMA,
              checkpoint_dir=ckpt, output_mode=mode)
    assert main(["erase", ckpt, "bob", "cid", "--operator-key", "user", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["operators"] == {"0 stateStoreSave": {"default": {"rows": 2}}} and out["entries_removed"] == 2
    assert main(["erase", ckpt, "bob", "--operator-key", "nope", "--no-progress"]) == 1
    assert "key column(s) ['nope']" in capsys.readouterr().err
