"""Migrate on real queries: a checkpoint of Spark's HDFS or RocksDB provider becomes a
spark-state checkpoint, and a spark-state checkpoint one of the HDFS or RocksDB provider;
the unchanged query restarted on it (whatever provider the session names) continues with
output equal to an uninterrupted run on the original provider. The source is untouched."""

from __future__ import annotations

import hashlib
import json
import logging
import os

import pytest

import test_operator_equivalence as E
from ops_support import PARTITIONS_CONF, assert_equal_to_uninterrupted, reference, run
from spark_state import ops
from spark_state.ops import jvm_bridge
from spark_state.ops import savepoint_format as F
from spark_state.ops.errors import UnsupportedCheckpointError
from spark_state.spark.lines import get_line, running_line
from streaming_harness import HDFS_PROVIDER, ROCKSDB_PROVIDER, SPARKSTATE_PROVIDER, run_query, write_batches

pytestmark = pytest.mark.spark

SHORT = {HDFS_PROVIDER: "hdfs", ROCKSDB_PROVIDER: "rocksdb", SPARKSTATE_PROVIDER: "spark-state"}
PAIRS = [(HDFS_PROVIDER, "spark-state"), (ROCKSDB_PROVIDER, "spark-state"), (SPARKSTATE_PROVIDER, "hdfs"),
         (SPARKSTATE_PROVIDER, "rocksdb")]


def _digest(root) -> str:
    h = hashlib.sha256()
    for dirpath, _, names in sorted(os.walk(root)):
        for n in sorted(names):
            p = os.path.join(dirpath, n)
            h.update(p.encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


#: Every direction on an aggregation; a join (four stores) and a session window (prefix-scan
#: keys) on import, whose rows the JVM must give spark-state's key layout.
COMBOS = [("agg_update", s, t) for s, t in PAIRS] + [
    ("join_left_outer", HDFS_PROVIDER, "spark-state"), ("session_window", ROCKSDB_PROVIDER, "spark-state")]


@pytest.mark.parametrize("name,source,to", COMBOS, ids=[f"{n}-{SHORT[s]}-to-{t}" for n, s, t in COMBOS])
def test_migrate_then_continue_equals_an_uninterrupted_run(spark, name, source, to, tmp_path, tmp_path_factory):
    case = E.CASES_BY_NAME[name]
    want = reference(spark, case, tmp_path_factory, provider=source, cuts=(3,))

    dirs = E.write_inputs(case, tmp_path, upto=3)
    src = tmp_path / "src"
    first = run(spark, case, src, dirs, provider=source, partitions=3)
    before = _digest(src)
    result = ops.migrate(str(src), str(tmp_path / "dst"), to=to, progress=False)
    assert _digest(src) == before, "the source checkpoint was modified"
    assert result.from_provider == SHORT[source] and result.to_provider == to
    with open(tmp_path / "dst" / "offsets" / str(result.batch_id)) as f:
        conf = json.loads(f.read().split("\n")[1])["conf"]
    assert conf["spark.sql.streaming.stateStore.providerClass"] == {v: k for k, v in SHORT.items()}[to]

    E.write_inputs(case, tmp_path, start=3)
    # the session names the *old* provider: the checkpoint's class must win
    second = run(spark, case, tmp_path / "dst", dirs, provider=source)
    assert min(second.batch_ids) == result.batch_id + 1
    assert_equal_to_uninterrupted(case, [first, second], want, f"{name} migrated {SHORT[source]} -> {to}")
    info = ops.inspect(str(tmp_path / "dst"))
    assert info["provider"] == to
    if to == "spark-state":  # the migrated state holds the rows the source had at its batch
        assert all(op["rows"] > 0 for op in info["operators"])


def test_savepoint_of_a_spark_provider_checkpoint_restores_as_spark_state(spark, tmp_path, tmp_path_factory):
    """A savepoint reads Spark's RocksDB provider's stores through the provider itself; its
    restore at another partition count is a spark-state checkpoint that continues exactly."""
    case = E.CASES_BY_NAME["dedup"]
    want = reference(spark, case, tmp_path_factory, provider=ROCKSDB_PROVIDER, cuts=(3,))
    dirs = E.write_inputs(case, tmp_path, upto=3)
    first = run(spark, case, tmp_path / "src", dirs, provider=ROCKSDB_PROVIDER, partitions=3)
    sp = ops.savepoint(str(tmp_path / "src"), str(tmp_path / "sp"), progress=False)
    assert sp.keys == len({i for b in case.batches[0][:3] for i, _ in b})
    ops.restore(sp.savepoint, str(tmp_path / "dst"), partitions=4, progress=False)
    info = ops.inspect(str(tmp_path / "dst"))
    assert info["provider"] == "spark-state" and info["partitions"] == 4 and info["operators"][0]["rows"] == sp.keys
    E.write_inputs(case, tmp_path, start=3)
    second = run(spark, case, tmp_path / "dst", dirs, provider=ROCKSDB_PROVIDER)
    assert_equal_to_uninterrupted(case, [first, second], want, "RocksDB savepoint restored on spark-state")


def test_hdfs_export_in_many_sorted_runs_equals_one_chunk_in_ascending_key_order(spark, tmp_path, monkeypatch,
                                                                                  caplog):
    """Spark's HDFS provider iterates a hash map; the driver JVM exports its stores in ascending
    unsigned key order in bounded heap. With a chunk bound of a few KB each partition's ~2,000
    rows go through dozens of sorted runs on disk and their merge: the savepoint holds the same
    rows as with the default bound (one chunk, sorted in the heap), strictly ascending."""
    schema, partitions, keys = E.schema_kv(), 2, 4000
    batches = [[(f"key-{i}", i) for i in range(3000)], [(f"key-{i}", 1) for i in range(2000, keys)]]
    write_batches(tmp_path / "in", batches, schema)
    src = tmp_path / "src"
    run_query(spark, E.build_agg, provider_class=HDFS_PROVIDER, input_dir=tmp_path / "in", schema=schema,
              checkpoint_dir=str(src), extra_confs={PARTITIONS_CONF: str(partitions)})

    def savepoint(name: str, chunk_bytes: int) -> tuple[list[int], list[list[tuple[bytes, bytes]]]]:
        """The sorted runs of each partition's export, and each partition's saved rows."""
        monkeypatch.setattr(jvm_bridge, "EXPORT_CHUNK_BYTES", chunk_bytes)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger=jvm_bridge.__name__):
            sp = ops.savepoint(str(src), str(tmp_path / name), progress=False)
        assert sp.keys == keys
        runs = [r.args[-1] for r in caplog.records if r.name == jvm_bridge.__name__ and "exported" in r.msg]
        rows = [list(F.read_entries(str(tmp_path / name / F.state_file(0, "default", p)), name))
                for p in range(partitions)]
        return runs, rows

    one_runs, one_chunk = savepoint("one", 0)
    many_runs, many_chunks = savepoint("many", 8 << 10)
    assert one_runs == [0] * partitions, "the default bound holds a small store in one chunk"
    assert len(many_runs) == partitions and min(many_runs) >= 10, f"too few sorted runs: {many_runs}"
    assert many_chunks == one_chunk
    assert sum(len(rows) for rows in many_chunks) == keys
    for rows in many_chunks:
        exported = [k for k, _ in rows]
        assert all(a < b for a, b in zip(exported, exported[1:])), "keys not strictly ascending (unsigned bytes)"


@pytest.mark.lines
def test_migrating_to_sparks_rocksdb_provider_on_each_line(spark, tmp_path, tmp_path_factory):
    """Spark's RocksDB provider writes a store version from an empty store only from Spark 4.2 on
    (``loadEmpty``): there a migration into it continues exactly; before, it is refused at once,
    naming the line, and nothing is written."""
    case = E.CASES_BY_NAME["agg_update"]
    dirs = E.write_inputs(case, tmp_path, upto=3)
    first = run(spark, case, tmp_path / "src", dirs, provider=HDFS_PROVIDER, partitions=3)
    if running_line() < get_line("4.2"):
        with pytest.raises(UnsupportedCheckpointError, match=f"needs Spark 4.2 or newer .*Spark {running_line().name}"):
            ops.migrate(str(tmp_path / "src"), str(tmp_path / "dst"), to="rocksdb", progress=False)
        assert not (tmp_path / "dst").exists()
        return
    ops.migrate(str(tmp_path / "src"), str(tmp_path / "dst"), to="rocksdb", progress=False)
    E.write_inputs(case, tmp_path, start=3)
    second = run(spark, case, tmp_path / "dst", dirs, provider=HDFS_PROVIDER)
    want = reference(spark, case, tmp_path_factory, cuts=(3,))
    assert_equal_to_uninterrupted(case, [first, second], want, "agg_update migrated HDFS -> rocksdb")
