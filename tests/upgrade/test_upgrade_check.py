"""The upgrade check against Spark itself: each case's checkpoint is built by a real query, the
check plans the changed query, and then the changed query starts for real on a copy of the
checkpoint; the check's "Spark starts it" and Spark's error condition must be what happened."""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from typing import Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from spark_state.upgrade import COMPATIBLE, INCOMPATIBLE, MIGRATION, UpgradeCheckUnsupported, check_upgrade

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("user", StringType()), StructField("region", StringType()),
                     StructField("device", StringType()), StructField("n", IntegerType())])

Transform = Callable[[DataFrame], DataFrame]


@dataclass(frozen=True)
class Case:
    """A query before and after a change, and what the check must say of it."""

    old: Transform
    new: Transform
    output_mode: str
    verdicts: dict[int, str]
    #: the condition Spark raises at start (None: it starts)
    spark_error: object = None
    #: a phrase the reasons must hold
    reason: str = ""


def _agg(*keys: str) -> Transform:
    return lambda df: df.groupBy(*keys).count()


CASES = {
    "unchanged": Case(_agg("user"), _agg("user"), "update", {0: COMPATIBLE}),
    "key_renamed": Case(_agg("user"), lambda df: df.withColumnRenamed("user", "name").groupBy("name").count(),
                        "update", {0: COMPATIBLE}, reason="renamed to `name`"),
    "key_added": Case(_agg("user"), _agg("user", "region"), "update", {0: MIGRATION},
                      "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "`region` (string) added"),
    "key_dropped": Case(_agg("user", "region"), _agg("user"), "update", {0: MIGRATION},
                        "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "`region` (string) removed"),
    # Spark compares by position and type: it starts, and reads each old user as a region
    "key_reordered": Case(_agg("user", "region"), _agg("region", "user"), "update", {0: MIGRATION},
                          reason="reordered"),
    "key_widened": Case(
        _agg("n"), lambda df: df.withColumn("n", F.col("n").cast("bigint")).groupBy("n").count(), "update",
        {0: MIGRATION}, "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "type widened: int -> bigint"),
    "dedup_key_added": Case(lambda df: df.dropDuplicates(["user"]), lambda df: df.dropDuplicates(["user", "device"]),
                            "append", {0: MIGRATION}, "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "`device`"),
    "operator_added_before": Case(_agg("user"), lambda df: df.dropDuplicates(["user", "n"]).groupBy("user").count(),
                                  "update", {0: COMPATIBLE, 1: MIGRATION},
                                  "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA", "adds a dedupe"),
    "operator_added_after": Case(
        lambda df: df.dropDuplicates(["user"]), lambda df: df.dropDuplicates(["user"]).dropDuplicates(["region"]),
        "append", {0: MIGRATION, 1: MIGRATION}, "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
        "it is the checkpoint's operator 0 (dedupe on (user string)), moved to id 1"),
    "value_changed": Case(
        _agg("user"), lambda df: df.groupBy("user").agg(F.max("region").alias("count")), "update",
        {0: INCOMPATIBLE}, "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", "value column"),
    "operator_removed": Case(lambda df: df.dropDuplicates(["user", "n"]).groupBy("user").count(), _agg("user"),
                             "update", {0: COMPATIBLE, 1: MIGRATION},
                             "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA", "no operator 1"),
}


def _builder(input_dir, transform: Transform):
    return lambda session: transform(session.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                                     .parquet(str(input_dir)))


def _rows(i: int) -> list[tuple]:
    return [(f"u{k % 5}", f"r{k % 3}", f"d{k % 2}", k) for k in range(i * 10, i * 10 + 10)]


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    """Each distinct old query's checkpoint after two batches on spark-state's provider."""
    from streaming_harness import SPARKSTATE_PROVIDER, run_query, write_batches

    out = {}
    for name, case in CASES.items():
        base = tmp_path_factory.mktemp(f"upgrade-{name}")
        write_batches(base / "in", [_rows(0), _rows(1)], SCHEMA)
        run_query(spark, case.old, provider_class=SPARKSTATE_PROVIDER, input_dir=base / "in", schema=SCHEMA,
                  checkpoint_dir=base / "ckpt", output_mode=case.output_mode)
        out[name] = base
    return out


def _start_for_real(spark, base, case: Case, tmp_path):
    """Start the new query on a copy of the checkpoint with a new input file: Spark's error
    message, or None when its batch committed."""
    from streaming_harness import SPARKSTATE_PROVIDER, run_query, write_batches

    checkpoint = tmp_path / f"copy-{uuid.uuid4().hex[:6]}"
    shutil.copytree(base / "ckpt", checkpoint)
    write_batches(base / "in", [_rows(2)], SCHEMA, start=len(list((base / "in").glob("batch-*"))))
    try:
        run_query(spark, case.new, provider_class=SPARKSTATE_PROVIDER, input_dir=base / "in", schema=SCHEMA,
                  checkpoint_dir=checkpoint, output_mode=case.output_mode)
    except Exception as exc:  # noqa: BLE001 - StreamingQueryException or AnalysisException, with Spark's message
        return str(exc)
    return None


@pytest.mark.parametrize("name", list(CASES))
def test_the_check_says_what_spark_does_at_start(spark, built, name, tmp_path):
    case = CASES[name]
    base = built[name]
    report = check_upgrade(spark, str(base / "ckpt"), _builder(base / "in", case.new), output_mode=case.output_mode)

    assert {v.operator_id: v.verdict for v in report.operators} == case.verdicts, report.summary()
    assert report.next_batch == 2
    if case.reason:
        assert any(case.reason in r for v in report.operators for r in v.reasons), report.summary()
    assert (report.spark_error.condition if report.spark_error else None) == case.spark_error, report.summary()
    assert report.exit_status == (0 if set(case.verdicts.values()) == {COMPATIBLE} else 1)

    failure = _start_for_real(spark, base, case, tmp_path)
    if case.spark_error is None:
        assert failure is None, f"the check said Spark starts it, Spark failed: {failure}"
    else:
        assert failure is not None and case.spark_error in failure, f"the check said {case.spark_error}: {failure}"


def test_a_savepoint_is_checked_as_the_checkpoint_restored_from_it(spark, built, tmp_path):
    from spark_state import ops

    base = built["key_added"]
    ops.savepoint(str(base / "ckpt"), str(tmp_path / "sp"))
    report = check_upgrade(spark, str(tmp_path / "sp"), _builder(base / "in", CASES["key_added"].new),
                           output_mode="update")
    assert report.checkpoint == str(tmp_path / "sp") and report.next_batch == 2
    assert report.spark_error is not None and report.spark_error.condition == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert [v.verdict for v in report.operators] == [MIGRATION]


def test_a_reordered_key_starts_and_misreads_the_state(spark, built, tmp_path):
    """Why the check calls a reorder Spark accepts a migration: the restarted query reads each old
    key's user as its region, and counts the same group twice."""
    from streaming_harness import SPARKSTATE_PROVIDER, run_query, write_batches

    base = built["key_reordered"]
    checkpoint = tmp_path / "reordered"
    shutil.copytree(base / "ckpt", checkpoint)
    write_batches(base / "in", [[("u0", "r0", "d0", 1)]], SCHEMA, start=len(list((base / "in").glob("batch-*"))))
    result = run_query(spark, CASES["key_reordered"].new, provider_class=SPARKSTATE_PROVIDER,
                       input_dir=base / "in", schema=SCHEMA, checkpoint_dir=checkpoint, output_mode="update")
    batch = result.batches[max(result.batches)]  # the new row's batch
    # the state holds user u0 / region r0 with count 2 (rows 0 and 15) in the old column order;
    # the new query's key (region r0, user u0) is other bytes, so the group starts again at 1
    assert batch == [("r0", "u0", 1)]


def test_the_command_line_exit_status_and_json(spark, built, tmp_path, capsys, monkeypatch):
    from spark_state.cli import main

    module = tmp_path / "new_query.py"
    source = f"spark.readStream.schema(SCHEMA).parquet({str(built['unchanged'] / 'in')!r})"
    module.write_text(
        "SCHEMA = 'user string, region string, device string, n int'\n"
        f"def ok(spark):\n    return {source}.groupBy('user').count()\n"
        f"def widened(spark):\n    return {source}.groupBy('user', 'region').count()\n")
    checkpoint = str(built["unchanged"] / "ckpt")
    assert main(["upgrade-check", checkpoint, "--query", f"{module}:ok", "--output-mode", "update"]) == 0
    assert "compatible: the new query may restart" in capsys.readouterr().out
    assert main(["upgrade-check", checkpoint, "--query", f"{module}:widened", "--output-mode", "update", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["spark_error"] == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" and not doc["spark_starts"]
    assert doc["operators"][0]["migration"].startswith("key change")
    assert main(["upgrade-check", checkpoint, "--query", f"{module}:missing"]) == 1
    assert "has no function missing" in capsys.readouterr().err


@pytest.mark.lines
def test_every_line_plans_the_check_or_says_it_cannot(spark, built):
    base = built["key_added"]
    builder = _builder(base / "in", CASES["key_added"].new)
    if int(spark.version.split(".")[0]) < 4:
        with pytest.raises(UpgradeCheckUnsupported, match="Spark 4.0 or newer"):
            check_upgrade(spark, str(base / "ckpt"), builder, output_mode="update")
        return
    report = check_upgrade(spark, str(base / "ckpt"), builder, output_mode="update")
    assert report.spark_error is not None and report.spark_error.condition == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert report.operators[0].verdict == MIGRATION


def _counted(df, key, name="RunningCount"):
    import carry_fns
    from spark_state.process import keyed_process

    columns = [key] if isinstance(key, str) else list(key)
    output = ", ".join(f"{c} string" for c in columns) + ", n bigint"
    return keyed_process(df, columns, carry_fns.RunningCount(), output, parallelism=2, name=name)


FUNCTION_CASES = {
    # name: (the new query, the function verdicts, the error the first batch raises (None: it runs))
    "unchanged": (lambda df: _counted(df, ["user", "device"]), {"RunningCount": COMPATIBLE}, None),
    "key_renamed": (lambda df: _counted(df.withColumnRenamed("user", "name"), ["name", "device"]),
                    {"RunningCount": COMPATIBLE}, None),
    # both columns are strings: the runtime starts, and reads each old (user, device) as (device, user)
    "key_reordered": (lambda df: _counted(df, ["device", "user"]), {"RunningCount": MIGRATION}, None),
    "key_dropped": (lambda df: _counted(df, ["user"]), {"RunningCount": MIGRATION}, "is keyed by user string, device"),
    "function_removed": (lambda df: df.select("user"), {"RunningCount": MIGRATION},
                         "sources in the checkpoint offsets"),
    "function_added": (lambda df: _counted(_counted(df, ["user", "device"]).withColumnRenamed("n", "m"), "user",
                                           name="Second"),
                       {"RunningCount": COMPATIBLE, "Second": MIGRATION}, "sources in the checkpoint offsets"),
}


@pytest.fixture(scope="module")
def function_checkpoint(spark, tmp_path_factory):
    """A checkpoint of a keyed function keyed by (user, device), after two batches."""
    import carry_fns
    from streaming_harness import SPARKSTATE_PROVIDER, run_query, ship_module_by_value, write_batches

    ship_module_by_value(carry_fns)
    base = tmp_path_factory.mktemp("upgrade-function")
    write_batches(base / "in", [_rows(0), _rows(1)], SCHEMA)
    run_query(spark, lambda df: _counted(df, ["user", "device"]), provider_class=SPARKSTATE_PROVIDER,
              input_dir=base / "in", schema=SCHEMA, checkpoint_dir=base / "ckpt", output_mode="append")
    return base


@pytest.mark.parametrize("name", list(FUNCTION_CASES))
def test_keyed_functions_are_checked_as_their_runtime_opens_them(spark, function_checkpoint, name, tmp_path):
    from streaming_harness import SPARKSTATE_PROVIDER, run_query, write_batches

    new, verdicts, error = FUNCTION_CASES[name]
    base = function_checkpoint
    report = check_upgrade(spark, str(base / "ckpt"), _builder(base / "in", new), output_mode="append")
    assert {f.name: f.verdict for f in report.functions} == verdicts, report.summary()
    assert report.exit_status == (0 if set(verdicts.values()) == {COMPATIBLE} else 1)
    if name in ("unchanged", "key_renamed"):  # Spark and the runtime start these: tested by the reorder
        assert report.spark_starts and not any(f.error for f in report.functions)
        return
    checkpoint = tmp_path / "copy"
    shutil.copytree(base / "ckpt", checkpoint)
    write_batches(base / "in", [_rows(7 + len(name))], SCHEMA, start=len(list((base / "in").glob("batch-*"))))
    try:
        run_query(spark, new, provider_class=SPARKSTATE_PROVIDER, input_dir=base / "in", schema=SCHEMA,
                  checkpoint_dir=checkpoint, output_mode="append")
        failure = None
    except Exception as exc:  # noqa: BLE001 - the first batch's error, as Spark reports it
        failure = str(exc)
    if error is None:
        assert failure is None and report.spark_starts and not any(f.error for f in report.functions), failure
    else:
        assert failure is not None and error in failure, failure
        said = [report.spark_error.message if report.spark_error else ""] + [f.error or "" for f in report.functions]
        assert any(said), report.summary()
