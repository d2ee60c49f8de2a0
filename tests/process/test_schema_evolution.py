"""State schema evolution on real streaming queries: a query is stopped and restarted from
its checkpoint with a changed state descriptor, as a redeployment does.

Migrations keep the values, incompatible changes fail the query with a message naming the
state and both types before anything of the batch is committed (the old code then resumes
as if nothing happened), and functions that hold their descriptors (class attributes,
``__init__``) ship to the executors.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest
from pyspark.errors import StreamingQueryException

import schema_fns
from process_fns import INPUT_SCHEMA
from schema_fns import (
    COUNT_OUTPUT,
    HELD_OPERATOR_OUTPUT,
    HELD_OUTPUT,
    OPERATOR_OUTPUT,
    PROFILE_OUTPUT,
    HeldDescriptors,
    HeldOperatorDescriptors,
    Profile,
    TypedBuffer,
    TypedCount,
    expected_counts,
    expected_held,
)
from spark_state.process import checkpointed_process, keyed_process
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

BATCHES = [[(f"k{(b * 7 + i) % 9}", b * 10 + i) for i in range(12)] for b in range(5)]


@pytest.fixture(scope="module")
def input_dir(tmp_path_factory):
    ship_module_by_value(schema_fns)
    root = tmp_path_factory.mktemp("schema-input")
    write_batches(root, BATCHES, INPUT_SCHEMA)
    return str(root)


class Query:
    """One query (checkpoint and state root) run again and again with changed code."""

    def __init__(self, spark, input_dir, tmp_path, output_schema, keyed=True):
        self.spark, self.input_dir, self.output_schema, self.keyed = spark, input_dir, output_schema, keyed
        self.ckpt, self.root = str(tmp_path / "ckpt"), str(tmp_path / "state")

    def run(self, function, parallelism=2, **kwargs):
        def build(df):
            if self.keyed:
                return keyed_process(df, "k", function, self.output_schema, parallelism=parallelism,
                                     state_root=self.root)
            return checkpointed_process(df, function, self.output_schema, parallelism=parallelism,
                                        state_root=self.root)

        return run_query(self.spark, build, provider_class=HDFS_PROVIDER, input_dir=self.input_dir,
                         schema=INPUT_SCHEMA, checkpoint_dir=self.ckpt, output_mode="append", **kwargs)


def counts_and_types(run_batches):
    """{batch: sorted (k, count)} and {batch: set of Python types the counts were read as}."""
    counts = {b: sorted((k, c) for k, c, _ in rows) for b, rows in run_batches.items()}
    types = {b: {t for _, _, t in rows} for b, rows in run_batches.items()}
    return counts, types


# ------------------------------------------------------------------------------ keyed state
def test_long_to_double_migrates_then_rescales_and_going_back_is_refused(spark, input_dir, tmp_path):
    q = Query(spark, input_dir, tmp_path, COUNT_OUTPUT)
    first = q.run(TypedCount("bigint"), stop_after_batches=2)
    migrated = q.run(TypedCount("double"), stop_after_batches=1)
    rescaled = q.run(TypedCount("double"), parallelism=3, stop_after_batches=1)   # a rescale after it
    assert [r.batch_ids for r in (first, migrated, rescaled)] == [[0, 1], [2], [3]]
    counts, types = counts_and_types(merge_runs(first, migrated, rescaled))
    assert counts == {b: rows for b, rows in expected_counts(BATCHES).items() if b < 4}
    assert types == {0: {"int"}, 1: {"int"}, 2: {"float"}, 3: {"float"}}
    # the old code again: a new change, double -> bigint, judged by the same rules
    with pytest.raises(StreamingQueryException,
                       match=r"StateSchemaIncompatibleError: state 'count' cannot be restored: it was written as value "
                             r"state of double and is now declared as value state of bigint: double values "
                             r"cannot be narrowed to bigint"):
        q.run(TypedCount("bigint"), parallelism=3)


def test_long_to_string_fails_clearly_and_the_old_code_resumes(spark, input_dir, tmp_path):
    q = Query(spark, input_dir, tmp_path, COUNT_OUTPUT)
    first = q.run(TypedCount("bigint"), stop_after_batches=2)
    with pytest.raises(StreamingQueryException) as failure:
        q.run(TypedCount("string"))
    message = str(failure.value)
    assert "StateSchemaIncompatibleError: state 'count' cannot be restored: it was written as value state of " \
           "bigint and is now declared as value state of string: bigint values cannot be read as string. " \
           "Nothing was written" in message
    assert "invalid literal" not in message
    resumed = q.run(TypedCount("bigint"))        # nothing of the failed batch was committed
    assert resumed.batch_ids == [2, 3, 4]
    counts, types = counts_and_types(merge_runs(first, resumed))
    assert counts == expected_counts(BATCHES) and set().union(*types.values()) == {"int"}


def test_int_to_long_is_compatible_as_is(spark, input_dir, tmp_path):
    q = Query(spark, input_dir, tmp_path, COUNT_OUTPUT)
    first = q.run(TypedCount("int"), stop_after_batches=2)
    second = q.run(TypedCount("bigint"))
    counts, types = counts_and_types(merge_runs(first, second))
    assert counts == expected_counts(BATCHES) and set().union(*types.values()) == {"int"}


def test_struct_gains_a_nullable_field_and_drops_one(spark, input_dir, tmp_path):
    q = Query(spark, input_dir, tmp_path, PROFILE_OUTPUT)
    first = q.run(Profile(Profile.V1), stop_after_batches=2)
    second = q.run(Profile(Profile.V2))
    out = merge_runs(first, second)
    last: dict[str, int] = {}
    seen: dict[str, int] = defaultdict(int)
    for b, rows in enumerate(BATCHES):
        fields = json.dumps(["first", "n", "last"] if b < 2 else ["last", "n", "note"])
        expected = []
        for k, v in rows:
            if seen[k]:
                expected.append((k, seen[k], last[k], fields, None))
            else:
                expected.append((k, None, None, "[]", None))
            seen[k] += 1
            last[k] = v
        assert out[b] == sorted(expected, key=lambda r: (r[0], r[1] or 0)), f"batch {b}"


def test_value_to_list_is_refused(spark, input_dir, tmp_path):
    q = Query(spark, input_dir, tmp_path, COUNT_OUTPUT)
    q.run(TypedCount("bigint"), stop_after_batches=1)
    with pytest.raises(StreamingQueryException,
                       match=r"StateSchemaIncompatibleError: state 'count' cannot be restored: it was written as value "
                             r"state of bigint and is now declared as list state of bigint: its kind changed"):
        q.run(TypedCount("bigint", kind="list"))


def test_pickled_state_read_with_a_typed_descriptor_is_refused(spark, input_dir, tmp_path):
    q = Query(spark, input_dir, tmp_path, COUNT_OUTPUT)
    q.run(TypedCount("pickle"), stop_after_batches=1)
    with pytest.raises(StreamingQueryException) as failure:
        q.run(TypedCount("bigint"))
    message = str(failure.value)
    assert ("StateSchemaIncompatibleError: state 'count' cannot be restored: it was written as value state of "
            "pickled objects (PickleSerializer) and is now declared as value state of bigint: it was written with "
            "PickleSerializer") in message


# ------------------------------------------------------------------------------ operator state
def test_operator_state_type_change_migrates_and_a_mode_change_is_refused(spark, input_dir, tmp_path):
    q = Query(spark, input_dir, tmp_path, OPERATOR_OUTPUT, keyed=False)
    first = q.run(TypedBuffer("bigint"), stop_after_batches=2)
    second = q.run(TypedBuffer("double"), stop_after_batches=1)
    out = merge_runs(first, second)
    restored = {b: [json.loads(r[1]) for r in rows] for b, rows in out.items()}
    types = {b: set().union(*(json.loads(r[2]) for r in rows)) for b, rows in out.items()}
    assert types == {0: set(), 1: {"int"}, 2: {"float"}}
    everything = sorted(v for rows in BATCHES[:2] for _, v in rows)
    assert sorted(v for lst in restored[2] for v in lst) == [float(v) for v in everything]
    with pytest.raises(StreamingQueryException,
                       match=r"StateSchemaIncompatibleError: state 'buffer' cannot be restored: it was written as list "
                             r"state of double and is now declared as union list state of double: its kind changed"):
        q.run(TypedBuffer("double", mode="union"))


# ------------------------------------------------------------------------------ descriptors held by functions
def test_descriptors_in_class_attributes_and_init_pickle_and_run(spark, input_dir, tmp_path):
    """Before descriptors pickled, these queries failed on the driver with
    ``cannot pickle '_struct.Struct' object``."""
    keyed = Query(spark, input_dir, tmp_path / "keyed", HELD_OUTPUT)
    first = keyed.run(HeldDescriptors(), stop_after_batches=2)
    second = keyed.run(HeldDescriptors(), parallelism=3)
    assert merge_runs(first, second) == expected_held(BATCHES)
    operator = Query(spark, input_dir, tmp_path / "operator", HELD_OPERATOR_OUTPUT, keyed=False)
    out = operator.run(HeldOperatorDescriptors()).batches
    latest: dict[int, int] = {}
    for b in sorted(out):
        for partition, total in out[b]:
            latest[partition] = max(latest.get(partition, 0), total)
        assert sum(latest.values()) == sum(v for rows in BATCHES[:b + 1] for _, v in rows)
