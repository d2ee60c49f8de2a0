"""The upgrade check's differences in words (pure: no Spark)."""

from __future__ import annotations

from spark_state.upgrade.schema_changes import describe_changes, misread, same_columns, widened


def _schema(*fields: tuple[str, str]) -> dict:
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}


def test_added_removed_widened_and_reordered_columns_are_named():
    old = _schema(("user", "string"), ("n", "integer"))
    assert describe_changes(old, _schema(("user", "string"), ("n", "integer"), ("region", "string"))) == [
        "key column `region` (string) added"]
    assert describe_changes(old, _schema(("user", "string"))) == ["key column `n` (int) removed"]
    assert describe_changes(old, _schema(("user", "string"), ("n", "long"))) == [
        "key column `n` type widened: int -> bigint"]
    assert describe_changes(old, _schema(("user", "string"), ("n", "string"))) == [
        "key column `n` type changed: int -> string"]
    assert describe_changes(old, _schema(("n", "integer"), ("user", "string"), ("day", "string")))[-1] == (
        "key columns reordered (user, n -> n, user, day)")


def test_a_rename_is_harmless_and_a_same_type_reorder_is_a_misread():
    old = _schema(("user", "string"), ("region", "string"))
    assert describe_changes(old, _schema(("name", "string"), ("region", "string"))) == [
        "key column `user` renamed to `name`"]
    assert misread(old, _schema(("name", "string"), ("region", "string"))) == []
    swapped = _schema(("region", "string"), ("user", "string"))
    assert misread(old, swapped) == ["region", "user"]
    assert "Spark compares by position and type only" in describe_changes(old, swapped)[0]
    assert same_columns(old, _schema(("user", "string"), ("region", "string")))
    assert not same_columns(old, swapped)


def test_widening_follows_spark_numeric_chains_only():
    assert widened("integer", "long") and widened("byte", "integer") and widened("float", "double")
    assert not widened("long", "integer") and not widened("integer", "double") and not widened("string", "long")


def test_a_functions_verdict_follows_its_runtimes_rules():
    from spark_state.upgrade.held import HeldFunction
    from spark_state.upgrade.spark_plan import PlannedFunction
    from spark_state.upgrade.verdicts import COMPATIBLE, INCOMPATIBLE, MIGRATION, _function_verdict

    key = {"columns": ["user", "n"], "types": ["string", "int"]}
    held = HeldFunction("F", "keyed", key, 128)

    def planned(key=key, kind="keyed", max_parallelism=128):
        return PlannedFunction("F", kind, key, max_parallelism)

    assert _function_verdict("F", held, planned()).verdict == COMPATIBLE
    renamed = _function_verdict("F", held, planned({"columns": ["name", "n"], "types": ["string", "int"]}))
    assert renamed.verdict == COMPATIBLE and any("renamed to `name`" in r for r in renamed.reasons)
    widened = _function_verdict("F", held, planned({"columns": ["user", "n"], "types": ["string", "bigint"]}))
    assert widened.verdict == MIGRATION and widened.error and any("widened" in r for r in widened.reasons)
    moved = _function_verdict("F", held, planned(max_parallelism=256))
    assert moved.verdict == INCOMPATIBLE and "pass max_parallelism=128" in moved.reasons[0]
    assert _function_verdict("F", held, planned(None, kind="operator")).verdict == INCOMPATIBLE
    assert _function_verdict("F", None, planned()).migration.startswith("new function")
    assert _function_verdict("F", held, None).migration.startswith("removed function")


def test_a_functions_states_are_judged_by_the_schema_evolution_rules():
    from pyspark.sql.types import DoubleType, LongType, StringType

    from spark_state.state import ListStateDescriptor, ValueStateDescriptor
    from spark_state.state.schema import schema_of
    from spark_state.upgrade.held import HeldFunction
    from spark_state.upgrade.spark_plan import PlannedFunction
    from spark_state.upgrade.verdicts import COMPATIBLE, INCOMPATIBLE, _function_verdict

    key = {"columns": ["user"], "types": ["string"]}
    held = HeldFunction("F", "keyed", key, 128, {"count": schema_of(ValueStateDescriptor("count", LongType())),
                                                 "old": schema_of(ListStateDescriptor("old", LongType()))})

    def planned(**states):
        return PlannedFunction("F", "keyed", key, 128, {n: schema_of(d) for n, d in states.items()})

    migrated = _function_verdict("F", held, planned(count=ValueStateDescriptor("count", DoubleType()),
                                                    seen=ListStateDescriptor("seen", StringType())))
    assert migrated.verdict == COMPATIBLE and migrated.error is None
    assert any("`count`" in r and "migrated when the function first opens it" in r for r in migrated.reasons)
    assert any("`seen` (list state of string) is new" in r for r in migrated.reasons)
    assert any("`old` (list state of bigint) is not declared any more" in r for r in migrated.reasons)
    refused = _function_verdict("F", held, planned(count=ValueStateDescriptor("count", StringType())))
    assert refused.verdict == INCOMPATIBLE and "StateSchemaIncompatibleError" in refused.error
    unknown = _function_verdict("F", HeldFunction("F", "keyed", key, 128), planned())
    assert unknown.verdict == COMPATIBLE and "compared on a savepoint" in unknown.reasons[-1]
