"""Savepoint surgery (SavepointTransform's remove_state, rename_state, remove_function and
replace_keyed_state of a new state): a savepoint of a real keyed_process query after two batches,
changed, restored with spark-state restore, then run over two more batches. The restored query's
output and its state after them equal a plain-Python model of what they must be; the changed
savepoint's files hold no entry of a removed or renamed state. Plus the errors, raised before
anything is written."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

import surgery_fns
from spark_state.keys import system as syskeys
from spark_state.ops import restore, savepoint
from spark_state.ops import savepoint_format as SF
from spark_state.ops.restore import read_manifest
from spark_state.ops.state_files import read_state_entries
from spark_state.process import keyed_process
from spark_state.processor import SavepointTransform, StateDataError, UnknownStateError, read_keyed_state
from spark_state.processor.savepoint_source import entry_of_state
from spark_state.storage import open_storage
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches
from surgery_fns import OUTPUT, Counter, CounterRenamed, CounterWithBonus, CountOnly

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("k", StringType()), StructField("v", LongType())])
NAME = "Counter"
PARALLELISM = 3
#: batches 0 and 1 run before the savepoint, 2 and 3 after the restore
BEFORE, AFTER = 2, 4


def _batches() -> list[list[tuple[str, int]]]:
    rng = random.Random(37)
    return [[(f"k{rng.randrange(12)}", rng.randrange(1, 30)) for _ in range(40)] for _ in range(AFTER)]


def _query(function):
    return lambda df: keyed_process(df, "k", function(), OUTPUT, parallelism=PARALLELISM, name=NAME)


class Model:
    """What the counter's output and states must be: counts and sums per key, from the rows of
    the batches the state has seen."""

    def __init__(self, batches, counted_from: int = 0, summed_from: int = 0) -> None:
        self.batches = batches
        self.counted_from, self.summed_from = counted_from, summed_from

    def output(self, batch: int) -> list[tuple]:
        count: dict[str, int] = defaultdict(int)
        for rows in self.batches[self.counted_from:batch]:
            for k, _ in rows:
                count[k] += 1
        out = []
        for k, _ in self.batches[batch]:
            count[k] += 1
            out.append((k, count[k]))
        return sorted(out)

    def counts(self, upto: int) -> dict[str, int]:
        count: dict[str, int] = defaultdict(int)
        for rows in self.batches[self.counted_from:upto + 1]:
            for k, _ in rows:
                count[k] += 1
        return dict(count)

    def sums(self, upto: int) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for rows in self.batches[self.summed_from:upto + 1]:
            for k, v in rows:
                total[k] += v
        return dict(total)


@pytest.fixture(scope="module")
def taken(spark, tmp_path_factory):
    """The query run over batches 0 and 1, its savepoint, and batches 2 and 3 waiting."""
    ship_module_by_value(surgery_fns)
    tmp = tmp_path_factory.mktemp("surgery")
    batches = _batches()
    write_batches(tmp / "in", batches[:BEFORE], SCHEMA)
    run = run_query(spark, _query(Counter), provider_class=HDFS_PROVIDER, input_dir=str(tmp / "in"), schema=SCHEMA,
                    checkpoint_dir=str(tmp / "ckpt"), output_mode="append")
    assert run.batch_ids == list(range(BEFORE))
    savepoint(str(tmp / "ckpt"), str(tmp / "sp"), progress=False)
    write_batches(tmp / "in", batches[BEFORE:], SCHEMA, start=BEFORE)
    return {"sp": str(tmp / "sp"), "in": str(tmp / "in"), "batches": batches}


def _restored_run(spark, taken, changed: str, checkpoint: str, function):
    """Restore ``changed`` into ``checkpoint`` and run ``function``'s query over batches 2 and 3."""
    restore(changed, checkpoint, progress=False)
    run = run_query(spark, _query(function), provider_class=HDFS_PROVIDER, input_dir=taken["in"], schema=SCHEMA,
                    checkpoint_dir=checkpoint, output_mode="append")
    assert run.batch_ids == list(range(BEFORE, AFTER))
    return run


def _state(spark, path: str, state: str) -> dict:
    return {r["k"]: r["value"] for r in read_keyed_state(spark, path, state).select("k", "value").collect()}


def _files(path: str, function: str = NAME) -> list[list[bytes]]:
    """The entry keys of each of ``function``'s state files in the savepoint at ``path``."""
    storage = open_storage(path)
    manifest = read_manifest(storage)
    entry = next(p for p in manifest.process if p.name == function)
    return [[k for k, _ in read_state_entries(storage, manifest, SF.process_file(function, i))]
            for i in range(entry.parallelism)]


def _entries(path: str, function: str = NAME) -> list[bytes]:
    """Every entry key of ``function``'s state files in the savepoint at ``path``."""
    return [k for keys in _files(path, function) for k in keys]


def _of(keys: list[bytes], state: str) -> list[bytes]:
    return [k for k in keys if entry_of_state(k, state.encode())]


def test_a_removed_state_is_gone_and_the_query_continues_with_or_without_it(spark, taken, tmp_path):
    batches = taken["batches"]
    before = _entries(taken["sp"])
    tagged = {k[:2] for k in _of(before, "total")}  # values, TTL index and marker, schema record
    assert {syskeys.SYSTEM_PREFIX + t for t in (syskeys.TTL_INDEX_TAG, syskeys.TTL_MARKER_TAG,
                                                syskeys.KEYED_SCHEMA_TAG)} <= tagged

    changed = str(tmp_path / "sp")
    result = SavepointTransform(spark, taken["sp"], progress=False).remove_state("total").write(changed)
    assert result.changes == ["remove Counter.total"]
    after = _entries(changed)
    assert _of(after, "total") == [] and sorted(after) == sorted(k for k in before if not entry_of_state(k, b"total"))
    with pytest.raises(UnknownStateError, match="total"):
        _state(spark, changed, "total")

    # the query that no longer declares it
    model = Model(batches)
    run = _restored_run(spark, taken, changed, str(tmp_path / "without"), CountOnly)
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == model.output(b), f"batch {b}"
    assert _state(spark, str(tmp_path / "without"), "count") == model.counts(AFTER - 1)

    # the query that still declares it: the state starts empty
    run = _restored_run(spark, taken, changed, str(tmp_path / "with"), Counter)
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == model.output(b), f"batch {b}"
    assert _state(spark, str(tmp_path / "with"), "total") == Model(batches, summed_from=BEFORE).sums(AFTER - 1)
    assert _state(spark, str(tmp_path / "with"), "count") == model.counts(AFTER - 1)


def test_a_renamed_state_keeps_its_values_ttl_and_record_under_the_new_name(spark, taken, tmp_path):
    batches = taken["batches"]
    before = _entries(taken["sp"])
    changed = str(tmp_path / "sp")
    SavepointTransform(spark, taken["sp"], progress=False).rename_state("total", "sum").write(changed)
    after = _entries(changed)
    assert _of(after, "total") == []
    assert len(_of(after, "sum")) == len(_of(before, "total")) and len(after) == len(before)
    assert syskeys.marker_key(b"sum") in after and syskeys.keyed_record_key(b"sum") in after
    assert any(k.startswith(syskeys.index_prefix(b"sum")) for k in after)
    assert all(keys == sorted(keys) for keys in _files(changed))  # each file is in key order again
    model = Model(batches)
    assert _state(spark, changed, "sum") == model.sums(BEFORE - 1)

    run = _restored_run(spark, taken, changed, str(tmp_path / "ckpt"), CounterRenamed)
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == model.output(b), f"batch {b}"
    assert _state(spark, str(tmp_path / "ckpt"), "sum") == model.sums(AFTER - 1)


def test_a_state_the_savepoint_lacks_is_added_from_a_dataframe(spark, taken, tmp_path):
    from spark_state.state import ValueStateDescriptor

    batches = taken["batches"]
    model = Model(batches)
    t = SavepointTransform(spark, taken["sp"], progress=False)
    given = t.read_keyed_state("count").select("k", (F.col("value") * 1000).alias("value"))
    changed = str(tmp_path / "sp")
    t.replace_keyed_state(ValueStateDescriptor("bonus", LongType()), given).write(changed)
    assert _state(spark, changed, "bonus") == {k: n * 1000 for k, n in model.counts(BEFORE - 1).items()}
    assert _state(spark, changed, "total") == model.sums(BEFORE - 1)  # untouched

    run = _restored_run(spark, taken, changed, str(tmp_path / "ckpt"), CounterWithBonus)
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == model.output(b), f"batch {b}"
    later = Model(batches, summed_from=BEFORE).sums(AFTER - 1)
    expected = {k: n * 1000 + later.get(k, 0) for k, n in model.counts(BEFORE - 1).items()}
    expected.update({k: v for k, v in later.items() if k not in expected})
    assert _state(spark, str(tmp_path / "ckpt"), "bonus") == expected


def test_a_removed_function_leaves_no_file_and_the_query_without_it_runs(spark, taken, tmp_path):
    batches = taken["batches"]
    changed = str(tmp_path / "sp")
    # the query's sources: the file source (0) and the function's tick source (1)
    SavepointTransform(spark, taken["sp"], progress=False).remove_function(NAME, tick_source=1).write(changed)
    storage = open_storage(changed)
    manifest = read_manifest(storage)
    assert manifest.process == [] and not [f for f in manifest.files if f.path.startswith(f"process/{NAME}/")]
    assert storage.list_dir(f"process/{NAME}") == []
    offsets = storage.read_bytes(f"spark/offsets/{BEFORE - 1}").decode().split("\n")
    assert len(offsets) == 3 and "logOffset" in offsets[2]  # version, metadata, the file source

    restore(changed, str(tmp_path / "ckpt"), progress=False)
    run = run_query(spark, lambda df: df.select("k", "v"), provider_class=HDFS_PROVIDER, input_dir=taken["in"],
                    schema=SCHEMA, checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    assert run.batch_ids == list(range(BEFORE, AFTER))
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == sorted(batches[b]), f"batch {b}"


def test_a_query_that_keeps_a_removed_function_is_refused(spark, taken, tmp_path):
    changed = str(tmp_path / "sp")
    SavepointTransform(spark, taken["sp"], progress=False).remove_function(NAME).write(changed)
    with pytest.raises(StreamingQueryException, match="no state for batch 2"):
        _restored_run(spark, taken, changed, str(tmp_path / "ckpt"), Counter)


def test_surgery_errors_name_both_sides_before_anything_is_written(spark, taken, tmp_path):
    t = SavepointTransform(spark, taken["sp"], progress=False)
    with pytest.raises(UnknownStateError, match=r"no keyed state 'nope' \(its states: count, total\)"):
        t.remove_state("nope")
    with pytest.raises(StateDataError, match="holds a state 'count' already"):
        t.rename_state("total", "count")
    with pytest.raises(UnknownStateError, match=r"no function 'Other' \(functions: Counter\)"):
        t.remove_function("Other")
    with pytest.raises(StateDataError, match="has 2 sources"):
        t.remove_function(NAME, tick_source=2)
    with pytest.raises(StateDataError, match="logOffset.*not a tick source's"):
        t.remove_function(NAME, tick_source=0)
    t.rename_state("total", "sum")
    with pytest.raises(UnknownStateError, match=r"its states: count, sum"):
        t.remove_state("total")  # the rename is seen by the next change
    t.remove_function(NAME)
    with pytest.raises(UnknownStateError, match="removed by this transform"):
        t.remove_state("count")
    assert not (tmp_path / "sp").exists()
